#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "laneq/metrics.hpp"

using namespace std::chrono_literals;
using laneq::LatencyHistogram;
using laneq::Metrics;
using From = Metrics::From;
using Outcome = Metrics::Outcome;

namespace {

std::vector<Metrics::LaneInfo> two_lanes() { return {{"critical", 0}, {"low", 8}}; }

double rel_error(std::chrono::nanoseconds got, double want_ns) {
  return std::abs(static_cast<double>(got.count()) - want_ns) / want_ns;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

}  // namespace

// ---- LatencyHistogram --------------------------------------------------------------------

TEST_CASE("an empty histogram reports zero everywhere", "[metrics][histogram]") {
  LatencyHistogram h;
  CHECK(h.count() == 0);
  CHECK(h.min() == 0ns);
  CHECK(h.max() == 0ns);
  CHECK(h.percentile(0.0) == 0ns);
  CHECK(h.percentile(0.5) == 0ns);
  CHECK(h.percentile(1.0) == 0ns);
  const auto s = laneq::summarize(h);
  CHECK(s.count == 0);
  CHECK(s.p99_ms == 0);
}

TEST_CASE("a single value is every percentile of its histogram", "[metrics][histogram]") {
  LatencyHistogram h;
  h.record(1234567ns);
  CHECK(h.count() == 1);
  CHECK(h.max() == 1234567ns);
  for (double q : {0.0, 0.01, 0.5, 0.99, 1.0}) CHECK(h.percentile(q) == 1234567ns);
  h.record(7ms);
  h.record(3ns);
  CHECK(h.min() == 3ns);  // the smallest recorded, exactly
  CHECK(h.max() == 7ms);
}

TEST_CASE("a negative duration is recorded as zero", "[metrics][histogram]") {
  LatencyHistogram h;
  h.record(-5ms);
  CHECK(h.count() == 1);
  CHECK(h.max() == 0ns);
  CHECK(h.percentile(0.5) == 0ns);
}

TEST_CASE("percentiles of a uniform distribution are within 7% relative error",
          "[metrics][histogram]") {
  LatencyHistogram h;
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<std::int64_t> dist(10'000, 2'000'000'000);  // 10 us .. 2 s
  std::vector<std::int64_t> values(100'000);
  for (auto& v : values) h.record(std::chrono::nanoseconds(v = dist(rng)));
  std::sort(values.begin(), values.end());
  for (double q : {0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999}) {
    const auto exact = values[static_cast<std::size_t>(std::ceil(q * values.size())) - 1];
    INFO("q = " << q);
    CHECK(rel_error(h.percentile(q), static_cast<double>(exact)) <= 0.07);
  }
  CHECK(h.percentile(1.0).count() == values.back());
}

TEST_CASE("relative error stays within 7% at every scale from 10 us to 10 h",
          "[metrics][histogram]") {
  for (std::int64_t ns = 10'000; ns < 36'000'000'000'000; ns = ns * 13 / 10) {
    LatencyHistogram h;
    h.record(std::chrono::nanoseconds(ns));
    h.record(std::chrono::nanoseconds(ns * 100));  // so the min/max clamp cannot help
    INFO("ns = " << ns);
    CHECK(rel_error(h.percentile(0.5), static_cast<double>(ns)) <= 0.07);
  }
}

TEST_CASE("max is exact and percentile(1) equals it", "[metrics][histogram]") {
  LatencyHistogram h;
  for (int i = 1; i <= 1000; ++i) h.record(std::chrono::microseconds(i * 37));
  h.record(123456789ns);
  CHECK(h.max() == 123456789ns);
  CHECK(h.percentile(1.0) == 123456789ns);
  CHECK(h.percentile(0.999) <= h.max());
  // percentiles never decrease with q
  auto prev = 0ns;
  for (double q = 0; q <= 1.0; q += 0.01) {
    CHECK(h.percentile(q) >= prev);
    prev = h.percentile(q);
  }
}

TEST_CASE("values beyond 2^36 us are clamped into the last bucket and max stays exact",
          "[metrics][histogram]") {
  LatencyHistogram h;
  const auto huge = std::chrono::nanoseconds(std::chrono::hours(24 * 365 * 100));  // 100 years
  h.record(1ms);
  h.record(huge);
  h.record(huge + 1ns);
  CHECK(h.count() == 3);
  CHECK(h.max() == huge + 1ns);
  CHECK(h.percentile(1.0) == huge + 1ns);
  // the median falls in the clamp bucket: somewhere between 2^35 and 2^36 us
  const auto p50 = h.percentile(0.5);
  CHECK(p50 >= std::chrono::microseconds(std::int64_t{1} << 35));
  CHECK(p50 <= std::chrono::microseconds(std::int64_t{1} << 36));
  CHECK(h.percentile(0.0) == 1ms);
}

TEST_CASE("merging histograms equals recording everything into one", "[metrics][histogram]") {
  LatencyHistogram a, b, all;
  for (int i = 0; i < 500; ++i) {
    const auto d = std::chrono::microseconds(i * i + 3);
    (i % 3 ? a : b).record(d);
    all.record(d);
  }
  LatencyHistogram empty;
  a.merge(empty);
  a.merge(b);
  CHECK(a.count() == all.count());
  CHECK(a.max() == all.max());
  CHECK(a.sum().count() == Approx(all.sum().count()));
  for (double q : {0.0, 0.1, 0.5, 0.9, 0.99, 1.0}) CHECK(a.percentile(q) == all.percentile(q));
  empty.merge(all);
  CHECK(empty.percentile(0.0) == all.percentile(0.0));
}

// ---- Metrics -----------------------------------------------------------------------------

TEST_CASE("counters add up through a request life cycle", "[metrics]") {
  Metrics m(two_lanes());
  const auto a = m.client("alice");
  m.submitted(0, a);
  m.enqueued(0, a, false);
  auto s = m.snapshot();
  CHECK(s.lanes[0].stats.depth == 1);
  CHECK(s.clients.at("alice").depth == 1);
  CHECK(s.total.depth == 1);

  m.started(0, a, 3ms);
  s = m.snapshot();
  CHECK(s.total.depth == 0);
  CHECK(s.total.in_flight == 1);
  CHECK(s.total.started == 1);

  m.finished(0, a, Outcome::succeeded, From::in_flight, 20ms);
  s = m.snapshot();
  REQUIRE(s.lanes.size() == 2);
  CHECK(s.lanes[0].name == "critical");
  CHECK(s.lanes[0].priority == 0);
  CHECK(s.lanes[1].name == "low");
  for (const auto* x : {&s.lanes[0].stats, &s.clients.at("alice"), &s.total}) {
    CHECK(x->submitted == 1);
    CHECK(x->started == 1);
    CHECK(x->succeeded == 1);
    CHECK(x->depth == 0);
    CHECK(x->in_flight == 0);
    CHECK(x->queue_wait.count == 1);
    CHECK(x->queue_wait.p50_ms == Approx(3.0));
    CHECK(x->service_time.count == 1);
    CHECK(x->service_time.max_ms == Approx(20.0));
    CHECK(x->service_time.sum_ms == Approx(20.0));
  }
  CHECK(s.lanes[1].stats.submitted == 0);
  CHECK(s.uptime_s >= 0);
}

TEST_CASE("waiting, requeued and early finishes keep the gauges balanced", "[metrics]") {
  Metrics m(two_lanes());
  const auto c = m.client("bob");
  // backpressure: waits, then gets room, runs, is retried once, then fails
  m.submitted(1, c);
  m.waiting(1, c);
  CHECK(m.snapshot().total.waiting == 1);
  m.enqueued(1, c, true);
  m.started(1, c, 1ms);
  m.requeued(1, c);
  auto s = m.snapshot();
  CHECK(s.total.waiting == 0);
  CHECK(s.total.depth == 1);
  CHECK(s.total.in_flight == 0);
  CHECK(s.total.retried == 1);
  m.started(1, c, 2ms);
  m.finished(1, c, Outcome::failed, From::in_flight, 5ms);
  // expires while waiting for room; is cancelled while queued; is rejected
  m.submitted(1, c);
  m.waiting(1, c);
  m.finished(1, c, Outcome::expired, From::waiting, Metrics::no_call);
  m.submitted(1, c);
  m.enqueued(1, c, false);
  m.finished(1, c, Outcome::cancelled, From::queued, Metrics::no_call);
  m.submitted(1, c);
  m.rejected(1, c);

  s = m.snapshot();
  for (const auto* x : {&s.lanes[1].stats, &s.clients.at("bob"), &s.total}) {
    CHECK(x->submitted == 4);
    CHECK(x->started == 2);
    CHECK(x->retried == 1);
    CHECK(x->failed == 1);
    CHECK(x->expired == 1);
    CHECK(x->cancelled == 1);
    CHECK(x->rejected == 1);
    CHECK(x->depth == 0);
    CHECK(x->in_flight == 0);
    CHECK(x->waiting == 0);
    CHECK(x->queue_wait.count == 2);
    CHECK(x->service_time.count == 1);  // only finishes from in_flight have a service time
  }
}

TEST_CASE("an out-of-range lane or a null client ref records nothing wrong", "[metrics]") {
  Metrics m(two_lanes());
  m.submitted(7, m.client("x"));
  m.submitted(0, Metrics::ClientRef{});
  const auto s = m.snapshot();
  CHECK(s.total.submitted == 1);
  CHECK(s.clients.at("x").submitted == 0);
}

TEST_CASE("clients beyond max_clients share the _other series", "[metrics]") {
  Metrics m(two_lanes(), 3);
  for (int i = 0; i < 10; ++i) m.submitted(0, m.client("c" + std::to_string(i)));
  m.submitted(0, m.client("c0"));  // a known client keeps its own series
  const auto s = m.snapshot();
  CHECK(s.clients.size() == 4);
  CHECK(s.clients.at("c0").submitted == 2);
  CHECK(s.clients.at("c2").submitted == 1);
  CHECK(s.clients.count("c3") == 0);
  CHECK(s.clients.at("_other").submitted == 7);
  CHECK(m.client("c5") == m.client("c9"));
  CHECK(m.client("c0") != m.client("c1"));
  CHECK(s.total.submitted == 11);
}

TEST_CASE("requests without a client keep their own series however many clients came first",
          "[metrics]") {
  Metrics m(two_lanes(), 2);
  m.submitted(0, m.client("a"));
  m.submitted(0, m.client("b"));
  m.submitted(0, m.client(""));
  m.submitted(0, m.client("c"));  // the cap counts a and b only: c is the first past it
  const auto s = m.snapshot();
  CHECK(s.clients.at("").submitted == 1);
  CHECK(s.clients.at("_other").submitted == 1);
  CHECK(s.clients.count("c") == 0);
  Metrics none(two_lanes(), 0);  // 0: every client in _other, the unnamed one too
  none.submitted(0, none.client(""));
  CHECK(none.snapshot().clients.count("") == 0);
  CHECK(none.snapshot().clients.at("_other").submitted == 1);
}

TEST_CASE("a snapshot can be taken while another thread records", "[metrics][threads]") {
  Metrics m(two_lanes(), 50);
  constexpr int n = 25'000;  // x 4 events = 100k events
  std::atomic<bool> done{false};
  std::thread recorder([&] {
    for (int i = 0; i < n; ++i) {
      const auto lane = static_cast<std::size_t>(i % 2);
      const auto c = m.client("t" + std::to_string(i % 100));  // half of them overflow
      m.submitted(lane, c);
      m.enqueued(lane, c, false);
      m.started(lane, c, std::chrono::microseconds(i % 1000));
      m.finished(lane, c, Outcome::succeeded, From::in_flight,
                 std::chrono::microseconds(i % 777));
    }
    done = true;
  });
  std::uint64_t last = 0;
  int snapshots = 0, bad = 0;
  while (!done || snapshots == 0) {
    const auto s = m.snapshot();
    // Each counter is read whole: counters only grow; one request at a time passes through
    // each lane, so a lane's gauges read 0 or 1. The snapshot is not one instant across lanes:
    // the totals may count the request that moved from one lane to the other twice.
    bad += s.total.submitted < last;
    for (const auto& lane : s.lanes)
      bad += lane.stats.in_flight < 0 || lane.stats.in_flight > 1 || lane.stats.depth < 0 ||
             lane.stats.depth > 1;
    bad += s.total.in_flight < 0 || s.total.in_flight > 2 || s.total.depth < 0 || s.total.depth > 2;
    last = s.total.submitted;
    ++snapshots;
  }
  recorder.join();
  CHECK(bad == 0);
  const auto s = m.snapshot();
  CHECK(s.total.submitted == n);
  CHECK(s.total.succeeded == n);
  CHECK(s.total.service_time.count == n);
  CHECK(s.total.depth == 0);
  CHECK(s.clients.size() == 51);
  CHECK(s.clients.at("_other").submitted == n / 2);
}

TEST_CASE("duplicate lane names are rejected", "[metrics]") {
  CHECK_THROWS_AS(Metrics({{"a", 0}, {"a", 1}}), std::invalid_argument);
}

TEST_CASE("a lane name that is not valid UTF-8 is rejected", "[metrics]") {
  CHECK_THROWS_WITH(Metrics({{"ok", 0}, {"caf\xc3", 1}}), Catch::Contains("not valid UTF-8"));
  CHECK_NOTHROW(Metrics({{"caf\xc3\xa9", 0}}));
}

TEST_CASE("a client name that is not valid UTF-8 is exported with U+FFFD, never breaking the "
          "exports",
          "[metrics][export]") {
  Metrics m(two_lanes());
  // cut inside a character, and a stray byte: both read "caf\uFFFD"
  const auto cut = m.client(std::string("caf\xc3"));
  const auto stray = m.client(std::string("caf\xff"));
  const auto good = m.client("caf\xc3\xa9");
  CHECK(cut == stray);
  CHECK(cut != good);
  for (auto c : {cut, stray, good, cut}) m.submitted(0, c);
  const auto s = m.snapshot();
  CHECK(s.clients.at("caf\xef\xbf\xbd").submitted == 3);
  CHECK(s.clients.at("caf\xc3\xa9").submitted == 1);
  std::string dumped;
  CHECK_NOTHROW(dumped = laneq::to_json(s).dump());  // nlohmann throws on broken UTF-8
  CHECK(nlohmann::json::parse(dumped).at("clients").contains("caf\xef\xbf\xbd"));
  const auto text = laneq::to_prometheus(s);
  CHECK(text.find("laneq_client_requests_submitted_total{client=\"caf\xef\xbf\xbd\"} 3") !=
        std::string::npos);
  CHECK(text.find("\xff") == std::string::npos);
}

TEST_CASE("names past max_clients keep resolving to _other however many there are (the "
          "recorder's alias table is bounded)",
          "[metrics]") {
  Metrics m(two_lanes(), 1);
  m.submitted(0, m.client("own"));
  const auto other = m.client("first-extra");
  constexpr int n = 70'000;  // past the alias table's 65,536: it is emptied once on the way
  for (int i = 0; i < n; ++i) {
    const auto c = m.client("t" + std::to_string(i));
    REQUIRE(c == other);
    m.submitted(0, c);
  }
  for (int i = 0; i < n; i += 997) REQUIRE(m.client("t" + std::to_string(i)) == other);
  const auto s = m.snapshot();
  CHECK(s.clients.size() == 2);
  CHECK(s.clients.at("_other").submitted == n);
  CHECK(s.clients.at("own").submitted == 1);
}

TEST_CASE("a broken client name keeps its series when the client limit is reached later",
          "[metrics]") {
  Metrics m(two_lanes(), 2);
  m.submitted(0, m.client(std::string("caf\xc3")));  // its own series, under caf\uFFFD
  m.submitted(0, m.client("b"));                     // the limit is reached
  m.submitted(0, m.client(std::string("caf\xc3")));  // still its own, not _other
  const auto s = m.snapshot();
  CHECK(s.clients.at("caf\xef\xbf\xbd").submitted == 2);
  CHECK(s.clients.count("_other") == 0);
}

// ---- export ------------------------------------------------------------------------------

namespace {
laneq::MetricsSnapshot sample_snapshot() {
  Metrics m(two_lanes());
  const auto a = m.client("alice");
  const auto evil = m.client("ev\"il\\na\nme");
  for (auto c : {a, evil, a}) {
    m.submitted(0, c);
    m.enqueued(0, c, false);
    m.started(0, c, 2ms);
    m.finished(0, c, Outcome::succeeded, From::in_flight, 10ms);
  }
  m.submitted(1, a);
  m.rejected(1, a);
  return m.snapshot();
}
}  // namespace

TEST_CASE("throughput counts the calls that ended per second over the last 60 whole seconds, "
          "per lane, client and total", "[metrics][throughput]") {
  const auto t0 = std::chrono::steady_clock::now();
  Metrics m(two_lanes());  // began at t0 + a few microseconds: each time below is mid-second
  const auto alice = m.client("alice");
  const auto bob = m.client("bob");
  const auto at = [&](double s) {
    return t0 + std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::duration<double>(s));
  };
  const auto call_ends = [&](std::size_t lane, Metrics::ClientRef c, double s, Outcome o,
                             int n = 1) {
    for (int i = 0; i < n; ++i) {
      m.submitted(lane, c);
      m.enqueued(lane, c, false);
      m.started(lane, c, 1ms);
      m.finished(lane, c, o, From::in_flight, 5ms, at(s));
    }
  };
  call_ends(0, alice, 0.5, Outcome::succeeded, 3);  // second 0
  call_ends(0, alice, 1.5, Outcome::failed, 2);     // second 1: a failure after a call counts
  call_ends(1, bob, 1.5, Outcome::succeeded, 4);    // second 1, the other lane
  // Ended without a call's end: not throughput.
  call_ends(0, alice, 1.5, Outcome::expired);  // aborted in flight by its deadline
  call_ends(0, alice, 1.5, Outcome::cancelled);
  m.submitted(0, alice);
  m.enqueued(0, alice, false);
  m.finished(0, alice, Outcome::expired, From::queued, Metrics::no_call, at(1.5));

  SECTION("the current second is not in it yet") {
    const auto s = m.snapshot(at(1.5));  // one whole second so far: second 0
    CHECK(s.lanes[0].stats.throughput_per_s == 3.0);
    CHECK(s.lanes[1].stats.throughput_per_s == 0.0);
    CHECK(s.total.throughput_per_s == 3.0);
  }
  SECTION("a young queue divides by the whole seconds it has had") {
    const auto s = m.snapshot(at(2.5));  // seconds 0 and 1
    CHECK(s.lanes[0].stats.throughput_per_s == 2.5);  // (3 + 2) / 2
    CHECK(s.lanes[1].stats.throughput_per_s == 2.0);  // 4 / 2
    CHECK(s.total.throughput_per_s == 4.5);
    CHECK(s.clients.at("alice").throughput_per_s == 2.5);
    CHECK(s.clients.at("bob").throughput_per_s == 2.0);
    CHECK(laneq::to_json(s).at("clients").at("bob").at("throughput_per_s") == 2.0);
  }
  SECTION("then by 60: a second leaves the window 60 seconds after it ended") {
    CHECK(m.snapshot(at(60.5)).total.throughput_per_s == 9.0 / 60);  // seconds 0-59
    CHECK(m.snapshot(at(61.5)).total.throughput_per_s == 6.0 / 60);  // 1-60: second 0 left
    CHECK(m.snapshot(at(62.5)).total.throughput_per_s == 0.0);
    CHECK(m.snapshot(at(3600.5)).total.throughput_per_s == 0.0);
  }
  SECTION("a second's slot is cleared when the ring comes round to it again") {
    call_ends(0, alice, 61.5, Outcome::succeeded);  // second 61 reuses second 0's slot
    call_ends(0, alice, 63.5, Outcome::succeeded);  // 62 (second 1's) skipped: cleared
    const auto s = m.snapshot(at(64.5));            // seconds 4-63
    CHECK(s.lanes[0].stats.throughput_per_s == 2.0 / 60);  // not the 2 of second 1
    CHECK(s.lanes[1].stats.throughput_per_s == 0.0);  // bob's lane: its second 1 left too
  }
  SECTION("the second under way, counted already, leaves the minute before it whole") {
    for (int sec = 2; sec <= 60; ++sec) call_ends(0, alice, sec + 0.5, Outcome::succeeded);
    // Alice's lane, seconds 0-59: 3 + 2 + 58. (Second 60's count took second 0's slot in a
    // ring of 60: 60 / 60.)
    const auto s = m.snapshot(at(60.7));
    CHECK(s.lanes[0].stats.throughput_per_s == 63.0 / 60);
    CHECK(s.clients.at("alice").throughput_per_s == 63.0 / 60);
    CHECK(s.total.throughput_per_s == 67.0 / 60);  // + bob's 4 in second 1
  }
  SECTION("a finish time older than the window the ring holds is not counted") {
    call_ends(0, alice, 130.5, Outcome::succeeded);
    call_ends(0, alice, 50.5, Outcome::succeeded);  // 80 s before the newest: out of the ring
    CHECK(m.snapshot(at(131.5)).lanes[0].stats.throughput_per_s == 1.0 / 60);
  }
}

TEST_CASE("throughput snapshots while another thread records through four turns of the ring",
          "[metrics][throughput][threads]") {
  const auto t0 = std::chrono::steady_clock::now();
  Metrics m(two_lanes(), 50);
  constexpr int n = 25'000;  // one call's end every 10 ms of virtual time: 250 s, 100 per second
  std::atomic<std::int64_t> newest_ns{0};  // the recorder's latest time, after t0
  std::atomic<bool> done{false};
  std::thread recorder([&] {
    for (int i = 0; i < n; ++i) {
      const auto lane = static_cast<std::size_t>(i % 2);
      const auto c = m.client("t" + std::to_string(i % 7));
      const auto at = t0 + std::chrono::milliseconds(10 * i);
      m.submitted(lane, c);
      m.enqueued(lane, c, false);
      m.started(lane, c, 1ms);
      m.finished(lane, c, Outcome::succeeded, From::in_flight, 2ms, at);
      newest_ns.store((at - t0).count(), std::memory_order_release);
    }
    done = true;
  });
  int snapshots = 0, bad = 0;
  while (!done || snapshots == 0) {
    const auto now = t0 + std::chrono::nanoseconds(newest_ns.load(std::memory_order_acquire));
    const auto s = m.snapshot(now);
    // 100 per second at most, give or take one second's count read as its slot is reused.
    bad += s.total.throughput_per_s < 0 || s.total.throughput_per_s > 100.0 + 100.0 / 60 + 1e-9;
    ++snapshots;
  }
  recorder.join();
  CHECK(bad == 0);
  const auto last = t0 + std::chrono::milliseconds(10 * (n - 1));
  // The last 60 whole seconds, 100 each (the last one 99 when the Metrics began after t0: its
  // seconds then start a moment later than t0's, and call 25,000 never came).
  const auto s = m.snapshot(last + 1s);
  CHECK(s.total.throughput_per_s == Approx(100.0).epsilon(0.001));
  CHECK(s.lanes[0].stats.throughput_per_s == Approx(50.0).epsilon(0.001));
  double clients = 0;
  for (const auto& [name, c] : s.clients) clients += c.throughput_per_s;
  CHECK(clients == Approx(s.total.throughput_per_s));
}

TEST_CASE("a call's end without a time counts toward throughput now", "[metrics][throughput]") {
  Metrics m(two_lanes());
  m.submitted(0, {});
  m.enqueued(0, {}, false);
  m.started(0, {}, 1ms);
  m.finished(0, {}, Outcome::succeeded, From::in_flight, 5ms);
  // A second after the call ended, its second is over, whichever second it was.
  CHECK(m.snapshot(std::chrono::steady_clock::now() + 1s).total.throughput_per_s > 0.0);
}

TEST_CASE("to_json has every field, nested by lane and client", "[metrics][export]") {
  const auto s = sample_snapshot();
  const nlohmann::json j = laneq::to_json(s);
  CHECK(j.at("uptime_s").is_number());
  CHECK(j.at("total").at("submitted") == 4);
  CHECK(j.at("total").at("rejected") == 1);
  for (const char* k : {"depth", "in_flight", "waiting", "submitted", "started", "succeeded",
                        "failed", "rejected", "expired", "cancelled", "retried", "rate_limited",
                        "throughput_per_s"})
    CHECK(j.at("total").contains(k));
  for (const char* k : {"count", "p50_ms", "p90_ms", "p99_ms", "max_ms", "sum_ms"}) {
    CHECK(j.at("total").at("queue_wait").contains(k));
    CHECK(j.at("total").at("service_time").contains(k));
    CHECK(j.at("total").at("limiter_wait").contains(k));
  }
  CHECK(j.at("limiters") == nlohmann::json::array());  // always present, empty from Metrics
  CHECK(j.at("total").at("service_time").at("count") == 3);
  REQUIRE(j.at("lanes").size() == 2);
  CHECK(j.at("lanes")[0].at("name") == "critical");
  CHECK(j.at("lanes")[1].at("priority") == 8);
  CHECK(j.at("lanes")[0].at("stats").at("succeeded") == 3);
  CHECK(j.at("clients").at("alice").at("submitted") == 3);
  CHECK(j.at("clients").at("ev\"il\\na\nme").at("succeeded") == 1);
  const nlohmann::json implicit = s;  // ADL to_json
  CHECK(implicit == j);
}

TEST_CASE("to_prometheus output parses line by line", "[metrics][export]") {
  const auto text = laneq::to_prometheus(sample_snapshot());
  REQUIRE(!text.empty());
  CHECK(text.back() == '\n');
  // name{label="escaped value"[,quantile="q"]} value
  const std::regex sample_re(
      R"(^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*")"
      R"((,[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*")*\})? )"
      R"((NaN|[+-]Inf|-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?)$)");
  const std::regex comment_re(R"(^# (HELP [a-zA-Z_:][a-zA-Z0-9_:]* .+|)"
                              R"(TYPE [a-zA-Z_:][a-zA-Z0-9_:]* (counter|gauge|summary))$)");
  int samples = 0;
  for (const auto& line : lines_of(text)) {
    INFO(line);
    if (line.starts_with('#')) {
      CHECK(std::regex_match(line, comment_re));
    } else {
      CHECK(std::regex_match(line, sample_re));
      ++samples;
    }
  }
  CHECK(samples > 50);
  CHECK(text.find("laneq_requests_submitted_total{lane=\"critical\"} 3\n") != std::string::npos);
  CHECK(text.find("laneq_requests_rejected_total{lane=\"low\"} 1\n") != std::string::npos);
  CHECK(text.find("laneq_client_requests_submitted_total{client=\"alice\"} 3\n") !=
        std::string::npos);
  CHECK(text.find("laneq_queue_depth{lane=\"critical\"} 0\n") != std::string::npos);
  CHECK(text.find("laneq_service_time_seconds{lane=\"critical\",quantile=\"0.5\"} 0.01") !=
        std::string::npos);
  CHECK(text.find("laneq_service_time_seconds{lane=\"critical\",quantile=\"1\"} 0.01") !=
        std::string::npos);  // the max
  CHECK(text.find("laneq_service_time_seconds_count{lane=\"critical\"} 3\n") != std::string::npos);
  CHECK(text.find("laneq_queue_wait_seconds{lane=\"low\",quantile=\"0.99\"} NaN\n") !=
        std::string::npos);
  CHECK(text.find("laneq_queue_wait_seconds{lane=\"low\",quantile=\"1\"} NaN\n") !=
        std::string::npos);
  CHECK(text.find("laneq_uptime_seconds ") != std::string::npos);
}

TEST_CASE("to_prometheus writes HELP and TYPE once per family, before its samples",
          "[metrics][export]") {
  const auto text = laneq::to_prometheus(sample_snapshot(), "svc");
  std::set<std::string> typed, helped;
  std::string current;  // family of the last TYPE line
  for (const auto& line : lines_of(text)) {
    std::istringstream in(line);
    std::string hash, kind, name;
    if (line.starts_with("# ")) {
      in >> hash >> kind >> name;
      CHECK((kind == "HELP" ? helped : typed).insert(name).second);  // once per family
      if (kind == "TYPE") current = name;
      continue;
    }
    name = line.substr(0, line.find_first_of("{ "));
    INFO(line);
    CHECK(name.starts_with("svc_"));
    // samples follow their family's TYPE line; summaries add _sum and _count
    CHECK((name == current || name == current + "_sum" || name == current + "_count"));
  }
  CHECK(typed == helped);
  CHECK(typed.count("svc_requests_submitted_total") == 1);
  CHECK(typed.count("svc_client_queue_wait_seconds") == 1);
  CHECK(text.find("# TYPE svc_queue_wait_seconds summary\n") != std::string::npos);
  CHECK(text.find("# TYPE svc_in_flight gauge\n") != std::string::npos);
  CHECK_THROWS_AS(laneq::to_prometheus(sample_snapshot(), "bad prefix"), std::invalid_argument);
}

TEST_CASE("to_prometheus escapes a client name with a quote, a backslash and a newline",
          "[metrics][export]") {
  const auto text = laneq::to_prometheus(sample_snapshot());
  CHECK(text.find(R"(laneq_client_requests_succeeded_total{client="ev\"il\\na\nme"} 1)") !=
        std::string::npos);
  CHECK(text.find("ev\"il") == std::string::npos);  // never unescaped
}

TEST_CASE("to_prometheus spells infinities +Inf and -Inf, as the format does",
          "[metrics][export]") {
  auto s = sample_snapshot();
  s.uptime_s = std::numeric_limits<double>::infinity();
  CHECK(laneq::to_prometheus(s).find("\nlaneq_uptime_seconds +Inf\n") != std::string::npos);
  s.uptime_s = -std::numeric_limits<double>::infinity();
  CHECK(laneq::to_prometheus(s).find("\nlaneq_uptime_seconds -Inf\n") != std::string::npos);
}

// ---- rate limiter and retries ------------------------------------------------------------

TEST_CASE("rate_limited counts per lane and per client, separately from retried",
          "[metrics][limiter]") {
  Metrics m(two_lanes());
  const auto a = m.client("alice"), b = m.client("bob");
  m.rate_limited(0, a);
  m.rate_limited(0, a);
  m.rate_limited(1, b);
  m.rate_limited(1, Metrics::ClientRef{});  // lane only
  m.rate_limited(2, a);                     // out of range: no-op
  // a 429 that is retried: the requeue still counts as retried, once
  m.submitted(1, b);
  m.enqueued(1, b, false);
  m.started(1, b, 1ms);
  m.requeued(1, b);
  const auto s = m.snapshot();
  CHECK(s.lanes[0].stats.rate_limited == 2);
  CHECK(s.lanes[1].stats.rate_limited == 2);
  CHECK(s.clients.at("alice").rate_limited == 2);
  CHECK(s.clients.at("bob").rate_limited == 1);
  CHECK(s.total.rate_limited == 4);
  CHECK(s.total.retried == 1);
  CHECK(s.clients.at("bob").retried == 1);
  CHECK(s.clients.at("alice").retried == 0);
  CHECK(s.total.depth == 1);
  CHECK(s.total.in_flight == 0);
  CHECK(s.limiters.empty());  // filled by the request queue, never by Metrics
}

TEST_CASE("zero latencies (a request the limiter let through at once) count like any other",
          "[metrics][limiter]") {
  Metrics m(two_lanes());
  const auto a = m.client("alice");
  LatencyHistogram ref;
  for (int i = 0; i < 60; ++i) {  // 60 zeros, 40 of 1..40 ms
    const auto d = std::chrono::milliseconds(0);
    m.limiter_wait(0, a, d);
    ref.record(d);
  }
  for (int i = 1; i <= 40; ++i) {
    m.limiter_wait(0, a, std::chrono::milliseconds(i));
    ref.record(std::chrono::milliseconds(i));
  }
  m.limiter_wait(1, a, 0ms);  // only zeros in lane 1
  const auto s = m.snapshot();
  const auto want = laneq::summarize(ref);
  const auto& lane0 = s.lanes[0].stats.limiter_wait;
  CHECK(lane0.count == 100);
  CHECK(lane0.p50_ms == want.p50_ms);  // a zero: the 50th value
  CHECK(lane0.p50_ms < 0.001);
  CHECK(lane0.p90_ms == want.p90_ms);
  CHECK(lane0.p90_ms > 1.0);
  CHECK(lane0.max_ms == Approx(40.0));
  CHECK(lane0.sum_ms == Approx(820.0));
  const auto& lane1 = s.lanes[1].stats.limiter_wait;
  CHECK(lane1.count == 1);
  CHECK(lane1.max_ms == 0.0);
  CHECK(lane1.p99_ms == 0.0);
  CHECK(s.clients.at("alice").limiter_wait.count == 101);
  CHECK(s.total.limiter_wait.count == 101);
  CHECK(s.total.limiter_wait.p50_ms == lane0.p50_ms);
}

TEST_CASE("limiter_wait has its own percentiles per lane, client and total",
          "[metrics][limiter]") {
  Metrics m(two_lanes());
  const auto a = m.client("alice"), b = m.client("bob");
  LatencyHistogram ref;
  for (int i = 1; i <= 100; ++i) {
    m.limiter_wait(0, a, std::chrono::milliseconds(i));
    ref.record(std::chrono::milliseconds(i));
  }
  m.limiter_wait(1, b, 500ms);
  m.limiter_wait(5, b, 1s);  // out of range: no-op
  const auto s = m.snapshot();

  // Bucket midpoints: 50 ms lies in [49.152, 53.248) ms -> 51.2; 90 ms in [81.92, 90.112) ->
  // 86.016; 99 ms in [98.304, 106.496) -> 102.4, clamped to the max recorded, 100.
  for (const auto* x : {&s.lanes[0].stats, &s.clients.at("alice")}) {
    CHECK(x->limiter_wait.count == 100);
    CHECK(x->limiter_wait.p50_ms == Approx(51.2));
    CHECK(x->limiter_wait.p90_ms == Approx(86.016));
    CHECK(x->limiter_wait.p99_ms == Approx(100.0));
    CHECK(x->limiter_wait.max_ms == Approx(100.0));
    CHECK(x->limiter_wait.sum_ms == Approx(5050.0));
    const auto want = laneq::summarize(ref);
    CHECK(x->limiter_wait.p50_ms == want.p50_ms);
    CHECK(x->limiter_wait.p90_ms == want.p90_ms);
    CHECK(x->limiter_wait.p99_ms == want.p99_ms);
    // the other histograms are untouched
    CHECK(x->queue_wait.count == 0);
    CHECK(x->service_time.count == 0);
  }
  for (const auto* x : {&s.lanes[1].stats, &s.clients.at("bob")}) {
    CHECK(x->limiter_wait.count == 1);
    CHECK(x->limiter_wait.p50_ms == Approx(500.0));
    CHECK(x->limiter_wait.p99_ms == Approx(500.0));
    CHECK(x->limiter_wait.max_ms == Approx(500.0));
  }
  // lanes merged at snapshot time: 101 values; rank 51 -> 51 ms, rank 92 -> 92 ms in
  // [90.112, 98.304) -> 94.208, rank 100 -> 100 ms -> 102.4 (no longer clamped).
  CHECK(s.total.limiter_wait.count == 101);
  CHECK(s.total.limiter_wait.p50_ms == Approx(51.2));
  CHECK(s.total.limiter_wait.p90_ms == Approx(94.208));
  CHECK(s.total.limiter_wait.p99_ms == Approx(102.4));
  CHECK(s.total.limiter_wait.max_ms == Approx(500.0));
  CHECK(s.total.limiter_wait.sum_ms == Approx(5550.0));
  CHECK(s.total.queue_wait.count == 0);
}

namespace {
laneq::MetricsSnapshot limiter_snapshot() {
  Metrics m(two_lanes());
  const auto a = m.client("alice");
  m.rate_limited(0, a);
  m.rate_limited(0, a);
  m.rate_limited(1, a);
  m.limiter_wait(0, a, 250ms);
  m.limiter_wait(0, a, 250ms);
  auto s = m.snapshot();
  s.limiters = {
      {.name = "default",
       .budgets = {{.name = "requests", .limit = 50, .period_s = 60, .available = -3},
                   {.name = "tokens", .limit = 40000, .period_s = 60, .available = 12345}},
       .waiting = 2,
       .granted = 17,
       .pauses = 1,
       .paused_for_s = 2.5},
      {.name = "mo\"d\\el\nx",  // needs escaping
       .budgets = {{.name = "output_tokens", .limit = 8000, .period_s = 0.5, .available = 0}},
       .waiting = 0,
       .granted = 4,
       .pauses = 0,
       .paused_for_s = 0},
  };
  return s;
}

// The value of the sample whose name and labels are exactly `series` (e.g. `x{lane="a"}`).
std::optional<double> prom_value(const std::string& text, const std::string& series) {
  for (const auto& line : lines_of(text))
    if (line.size() > series.size() && line.starts_with(series) && line[series.size()] == ' ')
      return std::stod(line.substr(series.size() + 1));
  return std::nullopt;
}

std::size_t occurrences(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}
}  // namespace

TEST_CASE("to_json round-trips rate_limited, limiter_wait and the limiters",
          "[metrics][limiter][export]") {
  const auto s = limiter_snapshot();
  const auto j = nlohmann::json::parse(laneq::to_json(s).dump());
  CHECK(j.at("total").at("rate_limited") == 3);
  CHECK(j.at("lanes")[0].at("stats").at("rate_limited") == 2);
  CHECK(j.at("lanes")[1].at("stats").at("rate_limited") == 1);
  CHECK(j.at("clients").at("alice").at("rate_limited") == 3);
  for (const auto* x :
       {&j.at("total"), &j.at("lanes")[0].at("stats"), &j.at("clients").at("alice")}) {
    const auto& w = x->at("limiter_wait");
    CHECK(w.at("count") == 2);
    CHECK(w.at("p50_ms").get<double>() == Approx(250.0));
    CHECK(w.at("max_ms").get<double>() == Approx(250.0));
    CHECK(w.at("sum_ms").get<double>() == Approx(500.0));
  }
  CHECK(j.at("lanes")[1].at("stats").at("limiter_wait").at("count") == 0);

  const auto& ls = j.at("limiters");
  REQUIRE(ls.is_array());
  REQUIRE(ls.size() == 2);
  CHECK(ls[0] == nlohmann::json::parse(R"({
    "name": "default",
    "budgets": [{"name": "requests", "limit": 50, "period_s": 60.0, "available": -3},
                {"name": "tokens", "limit": 40000, "period_s": 60.0, "available": 12345}],
    "waiting": 2, "granted": 17, "pauses": 1, "paused_for_s": 2.5})"));
  CHECK(ls[1].at("name") == "mo\"d\\el\nx");
  REQUIRE(ls[1].at("budgets").size() == 1);
  CHECK(ls[1].at("budgets")[0].at("name") == "output_tokens");
  CHECK(ls[1].at("budgets")[0].at("limit") == 8000);
  CHECK(ls[1].at("budgets")[0].at("period_s") == 0.5);
  CHECK(ls[1].at("budgets")[0].at("available") == 0);
  CHECK(ls[1].at("granted") == 4);
  CHECK(ls[1].at("paused_for_s") == 0.0);
}

TEST_CASE("to_prometheus has the rate limit and limiter families with their labels and values",
          "[metrics][limiter][export]") {
  const auto text = laneq::to_prometheus(limiter_snapshot());
  const auto value = [&](const std::string& series) {
    INFO(series);
    const auto v = prom_value(text, series);
    REQUIRE(v.has_value());
    return *v;
  };
  // per lane and per client
  CHECK(value(R"(laneq_requests_rate_limited_total{lane="critical"})") == 2);
  CHECK(value(R"(laneq_requests_rate_limited_total{lane="low"})") == 1);
  CHECK(value(R"(laneq_client_requests_rate_limited_total{client="alice"})") == 3);
  CHECK(value(R"(laneq_limiter_wait_seconds{lane="critical",quantile="0.5"})") == Approx(0.25));
  CHECK(value(R"(laneq_limiter_wait_seconds{lane="critical",quantile="0.99"})") == Approx(0.25));
  CHECK(value(R"(laneq_limiter_wait_seconds_sum{lane="critical"})") == Approx(0.5));
  CHECK(value(R"(laneq_limiter_wait_seconds_count{lane="critical"})") == 2);
  CHECK(value(R"(laneq_limiter_wait_seconds_count{lane="low"})") == 0);
  CHECK(text.find("laneq_limiter_wait_seconds{lane=\"low\",quantile=\"0.5\"} NaN\n") !=
        std::string::npos);
  CHECK(value(R"(laneq_client_limiter_wait_seconds_count{client="alice"})") == 2);
  CHECK(value(R"(laneq_client_limiter_wait_seconds{client="alice",quantile="0.9"})") ==
        Approx(0.25));
  // per limiter (and budget); integers are written exactly
  CHECK(text.find("laneq_limiter_budget_limit{limiter=\"default\",budget=\"requests\"} 50\n") !=
        std::string::npos);
  CHECK(text.find("laneq_limiter_budget_available{limiter=\"default\",budget=\"requests\"} -3\n") !=
        std::string::npos);
  CHECK(value(R"(laneq_limiter_budget_limit{limiter="default",budget="tokens"})") == 40000);
  CHECK(value(R"(laneq_limiter_budget_available{limiter="default",budget="tokens"})") == 12345);
  CHECK(value(R"(laneq_limiter_waiting{limiter="default"})") == 2);
  CHECK(value(R"(laneq_limiter_granted_total{limiter="default"})") == 17);
  CHECK(value(R"(laneq_limiter_pauses_total{limiter="default"})") == 1);
  CHECK(text.find("laneq_limiter_paused_seconds{limiter=\"default\"} 2.5\n") != std::string::npos);
  // label values escaped
  const std::string model = R"(limiter="mo\"d\\el\nx")";
  CHECK(value("laneq_limiter_budget_limit{" + model + R"(,budget="output_tokens"})") == 8000);
  CHECK(value("laneq_limiter_budget_available{" + model + R"(,budget="output_tokens"})") == 0);
  CHECK(value("laneq_limiter_waiting{" + model + "}") == 0);
  CHECK(value("laneq_limiter_granted_total{" + model + "}") == 4);
  CHECK(value("laneq_limiter_pauses_total{" + model + "}") == 0);
  CHECK(value("laneq_limiter_paused_seconds{" + model + "}") == 0);
  CHECK(text.find("mo\"d") == std::string::npos);  // never unescaped
  // one sample per limiter, one per (limiter, budget)
  CHECK(occurrences(text, "\nlaneq_limiter_budget_limit{") == 3);
  CHECK(occurrences(text, "\nlaneq_limiter_budget_available{") == 3);
  CHECK(occurrences(text, "\nlaneq_limiter_waiting{") == 2);
  CHECK(occurrences(text, "\nlaneq_limiter_granted_total{") == 2);
  CHECK(occurrences(text, "\nlaneq_limiter_pauses_total{") == 2);
  CHECK(occurrences(text, "\nlaneq_limiter_paused_seconds{") == 2);
}

TEST_CASE("to_prometheus types each new family once, and its samples follow it",
          "[metrics][limiter][export]") {
  const auto text = laneq::to_prometheus(limiter_snapshot(), "svc");
  const std::pair<const char*, const char*> families[] = {
      {"svc_requests_rate_limited_total", "counter"},
      {"svc_client_requests_rate_limited_total", "counter"},
      {"svc_limiter_wait_seconds", "summary"},
      {"svc_client_limiter_wait_seconds", "summary"},
      {"svc_limiter_budget_limit", "gauge"},
      {"svc_limiter_budget_available", "gauge"},
      {"svc_limiter_waiting", "gauge"},
      {"svc_limiter_granted_total", "counter"},
      {"svc_limiter_pauses_total", "counter"},
      {"svc_limiter_paused_seconds", "gauge"},
  };
  for (const auto& [name, type] : families) {
    INFO(name);
    CHECK(occurrences(text, std::string("# TYPE ") + name + " ") == 1);
    CHECK(occurrences(text, std::string("# TYPE ") + name + " " + type + "\n") == 1);
    CHECK(occurrences(text, std::string("# HELP ") + name + " ") == 1);
  }
  // every family, old and new: TYPE and HELP once, samples right after their TYPE line, and every
  // line well formed
  const std::regex sample_re(
      R"(^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*")"
      R"((,[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*")*\})? )"
      R"((NaN|[+-]Inf|-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?)$)");
  std::set<std::string> typed, helped;
  std::string current;
  for (const auto& line : lines_of(text)) {
    INFO(line);
    std::istringstream in(line);
    std::string hash, kind, name;
    if (line.starts_with("# ")) {
      in >> hash >> kind >> name;
      CHECK((kind == "HELP" ? helped : typed).insert(name).second);
      if (kind == "TYPE") current = name;
      continue;
    }
    CHECK(std::regex_match(line, sample_re));
    name = line.substr(0, line.find_first_of("{ "));
    CHECK((name == current || name == current + "_sum" || name == current + "_count"));
  }
  CHECK(typed == helped);
}

TEST_CASE("to_prometheus leaves the limiter families out when there are no limiters",
          "[metrics][limiter][export]") {
  auto s = limiter_snapshot();
  s.limiters.clear();
  const auto text = laneq::to_prometheus(s);
  CHECK(text.find("laneq_limiter_budget") == std::string::npos);
  CHECK(text.find("laneq_limiter_waiting") == std::string::npos);
  CHECK(text.find("laneq_limiter_granted_total") == std::string::npos);
  CHECK(text.find("laneq_limiter_pauses_total") == std::string::npos);
  CHECK(text.find("laneq_limiter_paused_seconds") == std::string::npos);
  // the per-lane families are there regardless
  CHECK(text.find("# TYPE laneq_limiter_wait_seconds summary\n") != std::string::npos);
  CHECK(text.find("laneq_requests_rate_limited_total{lane=\"critical\"} 2\n") != std::string::npos);
}
