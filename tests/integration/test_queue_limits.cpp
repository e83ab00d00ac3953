// RequestQueue with rate limits and retries: the SimulatedProvider answers scripted 429s / 5xx
// with real header names; the tests assert what reached the provider and when.
#include <catch2/catch.hpp>

#include <limits>
#include <random>
#include <stdexcept>

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <asio/experimental/as_tuple.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>

#include "laneq/laneq.hpp"
#include "support/recording_provider.hpp"
#include "support/run.hpp"
#include "support/submit_with.hpp"

using namespace std::chrono_literals;
using namespace asio::experimental::awaitable_operators;
using laneq::errc;
using laneq::Priority;
using laneq::test::chat;
using TimedProvider = laneq::test::RecordingProvider;
using laneq::test::run;
using laneq::test::submit_with;
using steady = std::chrono::steady_clock;

namespace {

// Submits one request per text at once (callback tokens), then waits until all completed;
// each must succeed. Returns the texts in completion order and each one's Response.
asio::awaitable<std::vector<std::pair<std::string, laneq::Response>>> submit_all(
    laneq::RequestQueue& queue, std::vector<std::string> texts) {
  std::vector<std::pair<std::string, laneq::Response>> done;
  for (const auto& text : texts)
    submit_with(queue, chat(text), {}, [&done, text](std::error_code ec, laneq::Response r) {
      CHECK_FALSE(ec);
      done.emplace_back(text, std::move(r));
    });
  asio::steady_timer t(co_await asio::this_coro::executor);
  const auto give_up = steady::now() + 60s;  // a regression fails instead of hanging
  while (done.size() < texts.size()) {
    if (steady::now() > give_up) throw std::runtime_error("submit_all: not all completed in 60 s");
    t.expires_after(5ms);
    co_await t.async_wait(asio::use_awaitable);
  }
  co_return done;
}

std::vector<std::string> numbered(int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back("r" + std::to_string(i));
  return out;
}

// The most starts inside any window of length `w`.
std::size_t max_in_window(std::vector<steady::time_point> t, steady::duration w) {
  std::sort(t.begin(), t.end());
  std::size_t best = 0;
  for (std::size_t i = 0, j = 0; j < t.size(); ++j) {
    while (t[j] - t[i] >= w) ++i;
    best = std::max(best, j - i + 1);
  }
  return best;
}

laneq::Headers retry_after_ms(int ms) { return {{"retry-after-ms", std::to_string(ms)}}; }

auto tuple_awaitable = asio::experimental::as_tuple(asio::use_awaitable);

}  // namespace

TEST_CASE("a requests budget holds starts in every window", "[queue][limits]") {
  asio::io_context io;
  TimedProvider provider;
  laneq::RequestQueue queue(io.get_executor(), provider,
                            {.workers = 4, .rate_limits = {.requests = 5, .period = 400ms}});
  queue.start();
  const auto t0 = steady::now();
  run(io, [&]() -> asio::awaitable<void> {
    co_await submit_all(queue, numbered(15));
    co_await queue.shutdown();
  });
  std::vector<steady::time_point> starts;
  for (auto& [name, t] : provider.starts()) starts.push_back(t);
  REQUIRE(starts.size() == 15);
  // 5 per 400 ms: the k-th five no earlier than k periods after t0 (a start is never before
  // its grant, so a start recorded late cannot fail this, and more than 5 at once would).
  std::sort(starts.begin(), starts.end());
  for (std::size_t i = 0; i < starts.size(); ++i)
    CHECK(starts[i] - t0 >= static_cast<int>(i / 5) * 400ms);
  // ... nor a late burst: 6 real starts span a period, so they look closer than half of one
  // only through a start recorded 200 ms late
  CHECK(max_in_window(starts, 200ms) <= 5);
  const auto snap = queue.metrics();
  REQUIRE(snap.limiters.size() == 1);
  CHECK(snap.limiters[0].name == "default");
  REQUIRE(snap.limiters[0].budgets.size() == 1);
  CHECK(snap.limiters[0].budgets[0].name == "requests");
  CHECK(snap.limiters[0].budgets[0].limit == 5);
  CHECK(snap.limiters[0].granted == 15);
  CHECK(snap.total.limiter_wait.count == 15);
  CHECK(snap.total.limiter_wait.max_ms >= 350);  // the later ones waited a window
}

TEST_CASE("a request that can never fit a budget fails at submit", "[queue][limits]") {
  asio::io_context io;
  laneq::SimulatedProvider provider;
  laneq::RequestQueue queue(io.get_executor(), provider,
                            {.workers = 1, .rate_limits = {.tokens = 1000}});
  queue.start();
  run(io, [&]() -> asio::awaitable<void> {
    auto [ec, r] = co_await queue.async_submit(chat("hi", 2000), {}, tuple_awaitable);
    CHECK(ec == errc::exceeds_rate_limit);
    CHECK_THAT(ec.message(), Catch::Contains("max_tokens"));
    // max_tokens 0 reserves default_max_tokens (4096): too much for 1000 as well
    auto [ec2, r2] = co_await queue.async_submit(chat("hi", 0), {}, tuple_awaitable);
    CHECK(ec2 == errc::exceeds_rate_limit);
    auto [ec3, r3] = co_await queue.async_submit(chat("hi", 500), {}, tuple_awaitable);
    CHECK_FALSE(ec3);
    // extra's max_completion_tokens goes out over max_tokens: it is what the budget must hold
    auto over = chat("hi", 500);
    over.extra = {{"max_completion_tokens", 2000}};
    auto [ec4, r4] = co_await queue.async_submit(over, {}, tuple_awaitable);
    CHECK(ec4 == errc::exceeds_rate_limit);
    co_await queue.shutdown();
  });
  CHECK(provider.calls() == 1);
  CHECK(queue.metrics().total.rejected == 3);
}

TEST_CASE("a prompt estimate beyond 32 bits is judged at its full size, not charged cut short",
          "[queue][limits]") {
  // The estimate a queued request carries is 32 bits; budgets go to 2^50. Cut to 2^31 - 1
  // first, an estimator's 6e9 (or its "never", INT64_MAX) passed a budget of 5e9 and was
  // charged 2.1e9.
  asio::io_context io;
  laneq::SimulatedProvider provider;
  std::int64_t estimate = 0;
  laneq::RequestQueue queue(
      io.get_executor(), provider,
      {.workers = 1,
       .rate_limits = {.tokens = 5'000'000'000, .period = 24h},
       .prompt_estimator = [&](const laneq::Request&) { return estimate; }});
  queue.start();
  run(io, [&]() -> asio::awaitable<void> {
    for (const std::int64_t e : {std::int64_t{6'000'000'000},
                                 std::numeric_limits<std::int64_t>::max()}) {
      estimate = e;
      auto [ec, r] = co_await queue.async_submit(chat("hi", 10), {}, tuple_awaitable);
      CHECK(ec == errc::exceeds_rate_limit);
    }
    estimate = 3'000'000'000;  // fits the budget, not a queued request's 32 bits
    auto [ec, r] = co_await queue.async_submit(chat("hi", 10), {}, tuple_awaitable);
    CHECK(ec == errc::request_too_large);
    CHECK_THAT(r.error_message, Catch::Contains("3000000000 tokens"));
    estimate = std::numeric_limits<std::int32_t>::max();  // the most it carries
    auto [ec2, r2] = co_await queue.async_submit(chat("hi", 0), {}, tuple_awaitable);
    CHECK_FALSE(ec2);
    co_await queue.shutdown();
  });
  CHECK(provider.calls() == 1);
  CHECK(queue.metrics().total.rejected == 3);
}

TEST_CASE("a 429 with retry-after pauses every worker once and the request keeps its place",
          "[queue][limits][retry]") {
  asio::io_context io;
  TimedProvider provider({.latency = 20ms});
  provider.inner.script({.error = errc::rate_limited, .status = 429, .headers = retry_after_ms(300)});
  laneq::RequestQueue queue(io.get_executor(), provider,
                            {.workers = 1, .lanes = {{.priority = Priority::normal}}});
  queue.start();
  std::vector<std::string> resolved;
  std::uint32_t attempts_a = 0;
  run(io, [&]() -> asio::awaitable<void> {
    std::vector<std::string> names{"A", "B", "C"};  // named: GCC 12 miscompiles a braced
    const auto done = co_await submit_all(queue, std::move(names));  // temporary here
    for (auto& [name, r] : done) {
      resolved.push_back(name);
      if (name == "A") attempts_a = r.attempts;
    }
    co_await queue.shutdown();
  });
  const auto seen = provider.starts();
  REQUIRE(seen.size() == 4);
  CHECK(provider.seen() == std::vector<std::string>{"A", "A", "B", "C"});
  CHECK(resolved == std::vector<std::string>{"A", "B", "C"});
  CHECK(attempts_a == 2);
  // the 429 arrived ~20 ms after the first start; nothing started for 300 ms after it
  CHECK(seen[1].second - seen[0].second >= 300ms);
  const auto snap = queue.metrics();
  CHECK(snap.total.rate_limited == 1);
  CHECK(snap.total.retried == 1);
  CHECK(snap.total.succeeded == 3);
  CHECK(snap.limiters.at(0).pauses == 1);
}

TEST_CASE("a retry-after beyond max_retry_after fails its request and holds the others only "
          "max_retry_after, not as long as the server said",
          "[queue][limits][retry]") {
  asio::io_context io;
  TimedProvider provider({.latency = 5ms});
  // an hour (a daily limit, or an HTTP-date from a skewed clock)
  provider.inner.script({.error = errc::rate_limited, .status = 429,
                         .headers = {{"retry-after", "3600"}}});
  laneq::RequestQueue queue(io.get_executor(), provider,
                            {.workers = 1, .retry = {.max_retry_after = 200ms}});
  queue.start();
  std::error_code first, second;
  run(io, [&]() -> asio::awaitable<void> {
    auto [e1, r1] = co_await queue.async_submit(chat("A"), {}, tuple_awaitable);
    first = e1;
    auto [e2, r2] = co_await queue.async_submit(chat("B"), {.timeout = 20s}, tuple_awaitable);
    second = e2;
    co_await queue.shutdown();
  });
  CHECK(first == errc::rate_limited);  // not retried: an hour is beyond max_retry_after
  CHECK_FALSE(second);
  const auto seen = provider.starts();
  REQUIRE(seen.size() == 2);
  const auto held = seen[1].second - seen[0].second;
  CHECK(held >= 200ms);  // the pause, capped
  CHECK(held < 10s);     // not the hour
}

// A (a success reporting the request bucket empty until `reset`), then B: how long B's start
// was held after A's.
// `retry_after_ms`: a retry-after-ms on that success too (a proxy's, on every answer).
static steady::duration held_after_exhausted(const char* reset,
                                             std::chrono::milliseconds max_retry_after,
                                             const char* retry_after_ms = nullptr) {
  asio::io_context io;
  TimedProvider provider({.latency = 5ms});
  laneq::Headers headers{{"x-ratelimit-remaining-requests", "0"},
                         {"x-ratelimit-reset-requests", reset}};
  if (retry_after_ms) headers.push_back({"retry-after-ms", retry_after_ms});
  provider.inner.script({.status = 200, .headers = headers});
  laneq::RequestQueue queue(io.get_executor(), provider,
                            {.workers = 1, .retry = {.max_retry_after = max_retry_after}});
  queue.start();
  run(io, [&]() -> asio::awaitable<void> {
    auto [e1, r1] = co_await queue.async_submit(chat("A"), {}, tuple_awaitable);
    CHECK_FALSE(e1);
    auto [e2, r2] = co_await queue.async_submit(chat("B"), {.timeout = 20s}, tuple_awaitable);
    CHECK_FALSE(e2);
    co_await queue.shutdown();
  });
  const auto seen = provider.starts();
  REQUIRE(seen.size() == 2);
  return seen[1].second - seen[0].second;
}

TEST_CASE("an exhausted bucket whose reset is hours away holds starts only max_retry_after",
          "[queue][limits][retry]") {
  // a reset 3 h away (a skewed clock)
  const auto held = held_after_exhausted("3h", 200ms);
  CHECK(held >= 150ms);  // held...
  CHECK(held < 10s);     // ...but not for hours
}

TEST_CASE("an exhausted bucket whose reset is already past holds starts a moment, within "
          "max_retry_after",
          "[queue][limits][retry]") {
  // (a 100 ms cap against the 1 s hold: room for a loaded machine's stalls on both sides)
  const auto held = held_after_exhausted("0s", 100ms);
  CHECK(held >= 80ms);  // held (RateLimiter::past_reset_hold)...
  CHECK(held < 700ms);  // ...but capped at max_retry_after
}

TEST_CASE("a success's retry-after (a proxy's) does not cut its exhausted bucket's hold short",
          "[queue][limits][retry]") {
  // The retry policy ignores a 2xx's retry-after; the limiter took it as the server's word.
  const auto held = held_after_exhausted("1s", 30s, "50");
  CHECK(held >= 800ms);  // the reset held (~1 s), not the 50 ms
  CHECK(held < 10s);
}

TEST_CASE("a 429's retry-after bounds the hold of the same answer's exhausted bucket: the server "
          "said when to call again, the reset says when the bucket is full",
          "[queue][limits][retry]") {
  asio::io_context io;
  TimedProvider provider({.latency = 5ms});
  // Anthropic's shape: another client emptied the bucket; retry-after 300 ms, full in 20 s.
  provider.inner.script({.error = errc::rate_limited, .status = 429,
                         .headers = {{"retry-after-ms", "300"},
                                     {"x-ratelimit-limit-requests", "50"},
                                     {"x-ratelimit-remaining-requests", "0"},
                                     {"x-ratelimit-reset-requests", "20s"}}});
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 1});
  queue.start();
  run(io, [&]() -> asio::awaitable<void> {
    auto [ec, r] = co_await queue.async_submit(chat("A"), {.timeout = 60s}, tuple_awaitable);
    CHECK_FALSE(ec);
    CHECK(r.attempts == 2);
    co_await queue.shutdown();
  });
  const auto seen = provider.starts();
  REQUIRE(seen.size() == 2);
  CHECK(seen[1].second - seen[0].second >= 250ms);  // the retry-after held...
  CHECK(seen[1].second - seen[0].second < 10s);     // ...not the 20 s to a full bucket
}

TEST_CASE("a retry back in its lane that ends there (shutdown) reports its call's service time "
          "and the rest as queue wait, and its call is counted in the service-time metrics",
          "[queue][limits][retry][metrics]") {
  asio::io_context io;
  TimedProvider provider({.latency = 20ms});
  provider.inner.script({.error = errc::rate_limited, .status = 429,
                         .headers = retry_after_ms(2000)});
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 1});
  queue.start();
  std::optional<std::pair<std::error_code, laneq::Response>> a;
  submit_with(queue, chat("A"), {.priority = Priority::low},
                     [&](std::error_code ec, laneq::Response r) { a.emplace(ec, std::move(r)); });
  laneq::test::run_until(io, [&] { return provider.starts().size() == 1; });
  // C, critical, takes the worker after A's 429 (and waits at the paused limiter); A waits in
  // its lane for its retry.
  submit_with(queue, chat("C"), {.priority = Priority::critical},
                     [](std::error_code, laneq::Response) {});
  laneq::test::run_until(io, [&] { return queue.metrics().total.rate_limited == 1; });
  const auto m = queue.metrics();
  REQUIRE(m.lanes.at(3).stats.depth == 1);  // A, back in the low lane
  queue.async_shutdown({.drain = false}, [](std::error_code) {});
  io.run();
  REQUIRE(a);
  CHECK(a->first == errc::shutting_down);
  CHECK(a->second.status == 429);
  CHECK(a->second.service_time >= 15ms);  // its 20 ms call
  CHECK(a->second.queue_wait > 0ns);      // before the call, and after it until the shutdown
  CHECK(queue.metrics().total.service_time.count == 1);  // A's call; C made none
}

TEST_CASE("a retry-after longer than the limiter's longest pause (a day) keeps its request out "
          "of its lane for the whole of it, not only the pause", "[queue][limits][retry]") {
  asio::io_context io;
  TimedProvider provider({.latency = 1ms});
  provider.inner.script({.error = errc::rate_limited, .status = 429,
                         .headers = {{"retry-after", "90000"}}});  // 25 h
  laneq::RequestQueue queue(io.get_executor(), provider,
                            {.workers = 1, .retry = {.max_retry_after = 48h}});
  queue.start();
  std::error_code got{};
  bool done = false;
  // (no deadline: the lane's default would end it at once, as a retry it could not wait for)
  submit_with(queue, chat("A"), {.timeout = std::chrono::milliseconds::max()},
                     [&](std::error_code ec, laneq::Response) {
                       got = ec;
                       done = true;
                     });
  laneq::test::run_until(io, [&] { return queue.metrics().total.rate_limited == 1; });
  const auto m = queue.metrics().total;
  CHECK(m.retried == 0);  // not back in its lane, where the pause's end (24 h) would start it
  CHECK(m.depth == 0);
  CHECK(m.in_flight == 1);  // waiting out its own 25 h
  CHECK(queue.metrics().limiters.at(0).pauses == 1);
  queue.async_shutdown({.drain = false}, [](std::error_code) {});
  io.run();
  CHECK(done);
  CHECK(got == errc::shutting_down);
  CHECK(provider.seen() == std::vector<std::string>{"A"});
}

TEST_CASE("max_retry_after = 0 holds no start for an exhausted bucket", "[queue][limits][retry]") {
  // (the reset was capped to 0, which then read as "past": a 1 s hold)
  CHECK(held_after_exhausted("20s", 0ms) < 500ms);
  CHECK(held_after_exhausted("0s", 0ms) < 500ms);
}

TEST_CASE("a backoff retry after a 429 without retry-after waits its whole backoff, also when "
          "max_retry_after is shorter (it bounds the server's word and the others' pause)",
          "[queue][limits][retry]") {
  for (const auto cap : {0ms, 300ms}) {
    INFO("max_retry_after " << cap.count() << " ms");
    asio::io_context io;
    TimedProvider provider({.latency = 1ms});
    for (int i = 0; i < 2; ++i) provider.inner.script({.error = errc::rate_limited, .status = 429});
    // a 429's back-off holds every worker, so it is at least 3/4 of its bound: with no jitter
    // (0) and an 800 ms base, 600 ms each
    laneq::RequestQueue queue(
        io.get_executor(), provider,
        {.workers = 1,
         .retry = {.max_attempts = 3, .base_delay = 800ms, .max_delay = 800ms,
                   .max_retry_after = cap},
         .random = [] { return 0.0; }});
    queue.start();
    run(io, [&]() -> asio::awaitable<void> {
      auto [e, r] = co_await queue.async_submit(chat("A"), {.timeout = 20s}, tuple_awaitable);
      CHECK_FALSE(e);
      co_await queue.shutdown();
    });
    const auto seen = provider.starts();
    REQUIRE(seen.size() == 3);
    // (it went out again at once with a cap of 0, after the cap with 300 ms)
    CHECK(seen[1].second - seen[0].second >= 600ms);
    CHECK(seen[2].second - seen[1].second >= 600ms);
  }
}

TEST_CASE("a retry queued again after a 429 is not cancelled by total (calls were made), "
          "by partial it is",
          "[queue][cancel][retry]") {
  using ct = asio::cancellation_type;
  for (const ct type : {ct::total, ct::partial}) {
    INFO("type " << static_cast<int>(type));
    asio::io_context io;
    laneq::SimulatedProvider provider({.latency = 5ms});
    provider.script({.error = errc::rate_limited, .status = 429, .headers = retry_after_ms(300)});
    laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 1});
    queue.start();
    asio::cancellation_signal sig;
    std::error_code got = errc::internal;
    run(io, [&]() -> asio::awaitable<void> {
      queue.async_submit(chat(), {}, asio::bind_cancellation_slot(sig.slot(),
                                         [&](std::error_code ec, auto) { got = ec; }));
      // the 429 came back: queued again at its place, held by the limiter's pause
      co_await laneq::test::wait_until([&] { return queue.metrics().total.rate_limited == 1; });
      sig.emit(type);
      co_await laneq::test::wait_until([&] { return got != errc::internal; });
      co_await queue.shutdown();
    });
    if (type == ct::total) {
      CHECK_FALSE(got);  // retried after the pause, and answered
      CHECK(provider.calls() == 2);
    } else {
      CHECK(got == errc::cancelled);
      CHECK(provider.calls() == 1);
    }
  }
}

TEST_CASE("max_retry_after = milliseconds::max() means always honour retry-after, not never",
          "[queue][limits][retry]") {
  asio::io_context io;
  laneq::SimulatedProvider provider({.latency = 1ms});
  provider.script({.error = errc::rate_limited, .status = 429, .headers = retry_after_ms(50)});
  laneq::RequestQueue queue(
      io.get_executor(), provider,
      {.workers = 1, .retry = {.max_retry_after = std::chrono::milliseconds::max()}});
  queue.start();
  run(io, [&]() -> asio::awaitable<void> {
    auto [ec, r] = co_await queue.async_submit(chat(), {}, tuple_awaitable);
    CHECK_FALSE(ec);  // retried after 50 ms
    CHECK(r.attempts == 2);
    co_await queue.shutdown();
  });
}

TEST_CASE("a 429 pauses starts on all workers, not just the one that saw it",
          "[queue][limits][retry]") {
  asio::io_context io;
  TimedProvider provider({.latency = 50ms});
  provider.inner.script({.error = errc::rate_limited, .status = 429, .headers = retry_after_ms(300)});
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 4});
  queue.start();
  run(io, [&]() -> asio::awaitable<void> {
    co_await submit_all(queue, numbered(8));
    co_await queue.shutdown();
  });
  const auto seen = provider.starts();
  REQUIRE(seen.size() == 9);  // 8 + the retry
  // The first four start together; the 429 comes back ~50 ms later and holds everything else
  // until ~350 ms.
  const auto t0 = seen[0].second;
  for (std::size_t i = 4; i < seen.size(); ++i) CHECK(seen[i].second - t0 >= 340ms);
}

TEST_CASE("a 429 without retry-after that leaves too few tokens for its request holds that "
          "request until they are back, not the smaller requests behind it",
          "[queue][limits][retry]") {
  asio::io_context io;
  TimedProvider provider({.latency = 20ms});
  // 100 tokens left, the bucket full again in 600 ms (no limit header: the whole reset counts).
  provider.inner.script({.error = errc::rate_limited,
                         .status = 429,
                         .headers = {{"x-ratelimit-remaining-tokens", "100"},
                                     {"x-ratelimit-reset-tokens", "600ms"}}});
  // A 2 ms back-off: the others' pause after the 429 is 1.5 ms (3/4 of it: a wait that
  // holds every worker), so only the big one's bucket wait can hold anything.
  laneq::RequestQueue queue(io.get_executor(), provider,
                            {.workers = 2, .retry = {.base_delay = 2ms},
                             .random = [] { return 0.0; }});
  queue.start();
  std::vector<std::string> done;
  std::uint32_t attempts_big = 0;
  const auto submit = [&](std::string text, std::int32_t max_tokens) {
    submit_with(queue, chat(text, max_tokens), {},
                       [&, text](std::error_code ec, laneq::Response r) {
                         CHECK_FALSE(ec);
                         if (text == "big") attempts_big = r.attempts;
                         done.push_back(text);
                       });
  };
  submit("big", 500);  // needs 500+ tokens: does not fit the 100 left
  submit("small-1", 8);
  submit("small-2", 8);
  submit("small-3", 8);
  laneq::test::run_until(io, [&] { return done.size() == 4; });
  const auto seen = provider.starts();
  REQUIRE(seen.size() == 5);
  CHECK(provider.seen() ==
        std::vector<std::string>{"big", "small-1", "small-2", "small-3", "big"});
  CHECK(done == std::vector<std::string>{"small-1", "small-2", "small-3", "big"});
  CHECK(attempts_big == 2);
  // The small ones were not held: all three started before the big one's bucket came back...
  const auto t0 = seen[0].second;
  CHECK(seen[3].second - t0 < 500ms);
  // ...and the big one's retry waited the reset after its 429 (~20 ms after it started).
  CHECK(seen[4].second - t0 >= 600ms);
}

TEST_CASE("a 429 pauses before its refund: a request waiting for tokens does not start inside "
          "the pause",
          "[queue][limits][retry]") {
  // A refused call costs no tokens, so its estimate is refunded; the refund lets the waiting
  // request through at once, which called straight into the 429 while the pause came after.
  asio::io_context io;
  TimedProvider provider({.latency = 20ms});
  provider.inner.script({.error = errc::rate_limited, .status = 429, .headers = retry_after_ms(300)});
  laneq::RequestQueue queue(io.get_executor(), provider,
                            {.workers = 2,
                             .lanes = {{.priority = Priority::normal}},
                             .rate_limits = {.tokens = 10'000, .period = 1s}});
  queue.start();
  std::error_code ea, eb;
  run(io, [&]() -> asio::awaitable<void> {
    submit_with(queue, chat("A", 6000), {}, [&](std::error_code e, laneq::Response) { ea = e; });
    // B's ~6,000 tokens do not fit beside A's: it waits at the limiter while A is in flight
    auto [e, r] = co_await queue.async_submit(chat("B", 6000), {.timeout = 20s}, tuple_awaitable);
    eb = e;
    co_await queue.shutdown();  // (drains A's retry)
  });
  CHECK_FALSE(ea);
  CHECK_FALSE(eb);
  const auto seen = provider.starts();
  REQUIRE(seen.size() == 3);  // A, B, A's retry
  CHECK(seen[0].first == "A");
  CHECK(seen[1].first == "B");
  // the 429 came back ~20 ms after A started; B started only after the 300 ms pause
  CHECK(seen[1].second - seen[0].second >= 300ms);
  CHECK(queue.metrics().limiters.at(0).pauses == 1);
}

TEST_CASE("a retry that succeeds returns its own Response, also from a provider without HTTP "
          "(status 0)",
          "[queue][retry]") {
  // finish() put the last failure's Response in place of one with status 0 and no error
  // message: meant for a request that times out between attempts, it also hit successes.
  struct NoHttp final : laneq::Provider {
    int calls = 0;
    void async_call(const laneq::Request&, const laneq::CallContext& ctx,
                    laneq::CallCompletion done) noexcept override {
      laneq::Response r;
      std::error_code ec;
      if (calls++ == 0) {
        ec = errc::server_error;
        r.status = 503;
        r.error_message = "busy";
      } else {
        r.text = "ok";
        r.usage = {.input_tokens = 3, .output_tokens = 2};
      }
      asio::post(ctx.executor, [done = std::move(done), ec, r = std::move(r)]() mutable {
        std::move(done)(ec, std::move(r));
      });
    }
    const char* name() const noexcept override { return "no-http"; }
  } provider;
  asio::io_context io;
  laneq::RequestQueue queue(io.get_executor(), provider,
                            {.workers = 1, .retry = {.base_delay = 1ms, .max_delay = 2ms}});
  queue.start();
  run(io, [&]() -> asio::awaitable<void> {
    auto [ec, r] = co_await queue.async_submit(chat(), {}, tuple_awaitable);
    CHECK_FALSE(ec);
    CHECK(r.text == "ok");
    CHECK(r.status == 0);
    CHECK(r.error_message.empty());
    CHECK(r.usage.output_tokens == 2);
    CHECK(r.attempts == 2);
    co_await queue.shutdown();
  });
  CHECK(provider.calls == 2);
}

TEST_CASE("retries stop at max_attempts and the final failure carries the provider's answer",
          "[queue][retry]") {
  asio::io_context io;
  laneq::SimulatedProvider provider;
  for (int i = 0; i < 5; ++i) provider.script({.error = errc::server_error, .status = 500});
  laneq::RequestQueue queue(
      io.get_executor(), provider,
      {.workers = 2, .retry = {.max_attempts = 3, .base_delay = 1ms, .max_delay = 5ms}});
  queue.start();
  run(io, [&]() -> asio::awaitable<void> {
    auto [ec, r] = co_await queue.async_submit(chat(), {}, tuple_awaitable);
    CHECK(ec == errc::server_error);
    CHECK(r.status == 500);
    CHECK(r.attempts == 3);
    CHECK_THAT(r.error_message, Catch::Contains("injected"));
    co_await queue.shutdown();
  });
  CHECK(provider.calls() == 3);
  const auto snap = queue.metrics();
  CHECK(snap.total.retried == 2);
  CHECK(snap.total.failed == 1);
  CHECK(snap.total.in_flight == 0);
  CHECK(snap.total.depth == 0);
}

TEST_CASE("a retry that cannot finish before the deadline fails with timeout and the last error",
          "[queue][retry]") {
  asio::io_context io;
  laneq::SimulatedProvider provider;
  provider.script({.error = errc::overloaded, .status = 529, .headers = retry_after_ms(20'000)});
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 1});
  queue.start();
  run(io, [&]() -> asio::awaitable<void> {
    const auto t0 = steady::now();
    auto [ec, r] = co_await queue.async_submit(chat(), {.timeout = 10s}, tuple_awaitable);
    CHECK(ec == errc::timeout);
    CHECK(r.status == 529);
    CHECK(r.attempts == 1);
    CHECK(steady::now() - t0 < 5s);  // fails at once instead of sleeping into the deadline
    co_await queue.shutdown();
  });
  CHECK(provider.calls() == 1);
  CHECK(queue.metrics().total.expired == 1);
}

TEST_CASE("a retried request whose deadline passes while it waits to retry times out",
          "[queue][retry]") {
  asio::io_context io;
  laneq::SimulatedProvider provider({.latency = 5ms});
  for (int i = 0; i < 20; ++i) provider.script({.error = errc::server_error, .status = 502});
  laneq::RequestQueue queue(
      io.get_executor(), provider,
      {.workers = 1, .retry = {.max_attempts = 20, .base_delay = 400ms, .max_delay = 400ms},
       .random = [] { return 0.99; }});
  queue.start();
  run(io, [&]() -> asio::awaitable<void> {
    // (~5 attempts in 2 s; a stall only lowers the count, and 2 s leaves room for the second)
    auto [ec, r] = co_await queue.async_submit(chat(), {.timeout = 2s}, tuple_awaitable);
    CHECK(ec == errc::timeout);
    CHECK(r.status == 502);
    CHECK(r.attempts >= 2);
    CHECK(r.attempts <= 6);
    co_await queue.shutdown();
  });
  CHECK(provider.calls() <= 6);
}

TEST_CASE("service time is the last call's: a request that ends at the rate limiter records "
          "none, and one that ends in a retry's back-off records its call, not the wait",
          "[queue][limits][retry][metrics]") {
  asio::io_context io;
  laneq::SimulatedProvider provider({.latency = 1ms});
  provider.script({.error = errc::server_error, .status = 502});  // the first call fails
  laneq::RequestQueue queue(
      io.get_executor(), provider,
      {.workers = 2, .rate_limits = {.requests = 2, .period = 60s},
       .retry = {.max_attempts = 3, .base_delay = 5s, .max_delay = 5s},
       .random = [] { return 0.99; }});
  queue.start();
  std::map<std::string, std::pair<std::error_code, laneq::Response>> got;
  const auto keep = [&](std::string name) {
    return [&got, &queue, name](std::error_code ec, laneq::Response r) {
      got[name] = {ec, std::move(r)};
      if (name == "limited")  // A waits out its ~5 s back-off: end it now
        queue.async_shutdown({.drain = false}, [](std::error_code) {});
    };
  };
  // A's call fails (a back-off of ~5 s), B's succeeds, and the budget is spent: C waits at the
  // limiter until its deadline, with no call made.
  queue.async_submit(chat("A"), {}, keep("backoff"));
  queue.async_submit(chat("B"), {}, keep("ok"));
  queue.async_submit(chat("C"), {.timeout = 1s}, keep("limited"));
  io.run();
  REQUIRE(got.size() == 3);
  const auto& [ec_c, c] = got["limited"];
  CHECK(ec_c == errc::timeout);
  CHECK(c.service_time == 0ns);  // no call: all of its second was waiting
  CHECK(c.queue_wait >= 900ms);
  const auto& [ec_a, a] = got["backoff"];
  CHECK(ec_a == errc::shutting_down);
  CHECK(a.status == 502);
  CHECK(a.service_time < 500ms);  // its 1 ms call, not the second of back-off after it
  CHECK(a.service_time > 0ns);
  CHECK(a.queue_wait >= 500ms);  // (its whole second less its call: room for a slow start)
  CHECK_FALSE(got["ok"].first);
  const auto m = queue.metrics().total;
  CHECK(m.service_time.count == 2);  // A's call and B's; none for C
  CHECK(m.service_time.max_ms < 500);
  CHECK(m.limiter_wait.max_ms >= 500);  // C's wait is where it belongs (from a free worker)
}

TEST_CASE("a draining shutdown that waits only for a retry's back-off finishes when that "
          "request is cancelled",
          "[queue][retry][shutdown]") {
  asio::io_context io;
  laneq::SimulatedProvider provider({.latency = 1ms});
  provider.script({.error = errc::server_error, .status = 502});
  laneq::RequestQueue queue(
      io.get_executor(), provider,
      {.workers = 1, .retry = {.max_attempts = 3, .base_delay = 60s, .max_delay = 60s}});
  queue.start();
  asio::cancellation_signal sig;
  std::error_code got, shut{errc::internal};
  int completions = 0, shutdowns = 0;
  queue.async_submit(chat(), {},
                     asio::bind_cancellation_slot(sig.slot(), [&](std::error_code ec, laneq::Response) {
                       got = ec;
                       ++completions;
                     }));
  // The first call fails; the request waits 60 s for its retry, the worker is parked.
  laneq::test::run_until(io, [&] { return provider.calls() == 1 && provider.in_flight() == 0; });
  io.poll();
  CHECK(completions == 0);
  queue.async_shutdown({.drain = true}, [&](std::error_code ec) {
    shut = ec;
    ++shutdowns;
  });
  io.poll();
  CHECK(shutdowns == 0);  // draining: the retry is still to come
  sig.emit(asio::cancellation_type::terminal);
  io.run_for(5s);  // returns at once when the shutdown finished (nothing left to run)
  CHECK(completions == 1);
  CHECK(got == errc::cancelled);
  CHECK(shutdowns == 1);
  CHECK_FALSE(shut);
  CHECK(provider.calls() == 1);
}

TEST_CASE("SimulatedProvider answers an injected failure with its usual HTTP status unless one "
          "is given",
          "[queue][simulated]") {
  asio::io_context io;
  laneq::SimulatedProvider provider({.failure_rate = 1.0, .failure = errc::overloaded});
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 1, .retry = {.max_attempts = 1}});
  queue.start();
  const std::vector<std::pair<laneq::SimulatedOutcome, int>> cases = {
      {{.error = errc::rate_limited}, 429},      {{.error = errc::quota_exceeded}, 429},
      {{.error = errc::auth}, 401},              {{.error = errc::bad_request}, 400},
      {{.error = errc::request_too_large}, 413}, {{.error = errc::server_error}, 500},
      {{.error = errc::network}, 0},             {{.error = errc::malformed_response}, 200},
      {{.error = errc::server_error, .status = 502}, 502},
      {{}, 200}};
  for (const auto& [outcome, status] : cases) provider.script(outcome);
  run(io, [&]() -> asio::awaitable<void> {
    for (const auto& [outcome, status] : cases) {
      auto [ec, r] = co_await queue.async_submit(chat(), {}, tuple_awaitable);
      CHECK(ec == outcome.error);
      CHECK(r.status == status);
    }
    // unscripted: the configured failure (overloaded), with its status
    auto [ec, r] = co_await queue.async_submit(chat(), {}, tuple_awaitable);
    CHECK(ec == errc::overloaded);
    CHECK(r.status == 529);
    co_await queue.shutdown();
  });
}

TEST_CASE("SimulatedProvider refuses a bad config naming the field, and a latency_fn or "
          "usage_fn that throws fails its call with internal",
          "[queue][simulated]") {
  const auto expect = [](laneq::SimulatedProviderConfig c, const std::string& field) {
    try {
      laneq::SimulatedProvider p(std::move(c));
      FAIL("accepted a bad config: " + field);
    } catch (const std::system_error& e) {
      CHECK(e.code() == errc::invalid_config);
      CHECK_THAT(e.what(), Catch::Contains(field));
    }
  };
  expect({.latency = -1ns}, "latency must be");
  expect({.latency = std::chrono::nanoseconds::max(), .jitter = 1ms}, "latency must be");
  expect({.jitter = -1ns}, "jitter must be");
  expect({.output_tokens = -1}, "output_tokens");
  expect({.failure_rate = std::numeric_limits<double>::quiet_NaN()}, "failure_rate");
  expect({.failure_rate = 1.5}, "failure_rate");
  expect({.failure_rate = -0.1}, "failure_rate");
  expect({.failure_rate = 0.5, .failure = {}}, "failure must be an error");
  expect({.failure_status = 42}, "failure_status");
  laneq::SimulatedProvider never({.latency = 24h * 36'525, .jitter = 24h * 36'525});  // the bounds

  asio::io_context io;
  int calls = 0;
  laneq::SimulatedProvider provider(
      {.latency_fn = [&](const laneq::Request&, auto&) -> std::chrono::nanoseconds {
         if (++calls == 1) throw std::runtime_error("no latency today");
         return 1ms;
       },
       .usage_fn = [&](const laneq::Request&, auto&) -> laneq::Usage {
         if (calls == 2) throw 42;
         return {.input_tokens = 3, .output_tokens = 4};
       }});
  laneq::RequestQueue queue(io.get_executor(), provider,
                            {.workers = 1, .retry = {.max_attempts = 1}});
  queue.start();
  run(io, [&]() -> asio::awaitable<void> {
    auto [ec1, r1] = co_await queue.async_submit(chat(), {}, tuple_awaitable);
    CHECK(ec1 == errc::internal);
    CHECK(r1.status == 0);
    CHECK_THAT(r1.error_message, Catch::Contains("threw: no latency today"));
    auto [ec2, r2] = co_await queue.async_submit(chat(), {}, tuple_awaitable);
    CHECK(ec2 == errc::internal);
    CHECK_THAT(r2.error_message, Catch::Contains("latency_fn or usage_fn threw"));
    auto [ec3, r3] = co_await queue.async_submit(chat(), {}, tuple_awaitable);
    CHECK_FALSE(ec3);
    CHECK(r3.usage.output_tokens == 4);
    co_await queue.shutdown();
  });
  CHECK(provider.calls() == 3);
  CHECK(provider.in_flight() == 0);
}

TEST_CASE("a refund does not start a waiter before the same answer's exhausted bucket has "
          "paused the limiter",
          "[queue][limits]") {
  asio::io_context io;
  std::vector<std::chrono::steady_clock::time_point> called;
  laneq::SimulatedProvider provider(
      {.latency_fn = [&](const laneq::Request&, auto&) {
         called.push_back(std::chrono::steady_clock::now());
         return std::chrono::nanoseconds(0);
       },
       .usage_fn = [](const laneq::Request&, auto&) {  // far below the estimate: a refund
         return laneq::Usage{.input_tokens = 2, .output_tokens = 1};
       }});
  // The first answer: no requests left until the server's reset, 1 s away.
  provider.script({.headers = {{"x-ratelimit-remaining-requests", "0"},
                               {"x-ratelimit-reset-requests", "1s"}}});
  // Each estimate is 101 tokens: the second waits for the first's refund.
  laneq::RequestQueue queue(io.get_executor(), provider,
                            {.workers = 2, .rate_limits = {.tokens = 150}});
  queue.start();
  std::vector<std::error_code> outcomes;
  const auto record = [&](std::error_code ec, laneq::Response) { outcomes.push_back(ec); };
  run(io, [&]() -> asio::awaitable<void> {
    submit_with(queue, chat("a", 100), {}, record);
    submit_with(queue, chat("b", 100), {}, record);
    co_await laneq::test::wait_until([&] { return outcomes.size() == 2; });
    co_await queue.shutdown();
  });
  CHECK(outcomes == std::vector<std::error_code>{{}, {}});
  REQUIRE(called.size() == 2);
  CHECK(called[1] - called[0] >= 900ms);  // was ~0: granted by the refund, into a 429
}

TEST_CASE("a jitter source that throws or goes out of range does not stop the retry",
          "[queue][retry]") {
  asio::io_context io;
  laneq::SimulatedProvider provider({.latency = 1ms});
  int draws = 0;
  laneq::RequestQueue queue(
      io.get_executor(), provider,
      {.workers = 1, .retry = {.max_attempts = 4, .base_delay = 2ms, .max_delay = 2ms},
       .random = [&]() -> double {
         switch (draws++) {
           case 0: throw std::runtime_error("no entropy");
           case 1: return std::numeric_limits<double>::quiet_NaN();
           default: return 7.0;
         }
       }});
  for (int i = 0; i < 3; ++i) provider.script({.error = errc::server_error, .status = 502});
  queue.start();
  run(io, [&]() -> asio::awaitable<void> {
    auto [ec, r] = co_await queue.async_submit(chat(), {}, tuple_awaitable);
    CHECK_FALSE(ec);
    CHECK(r.attempts == 4);
    co_await queue.shutdown();
  });
  CHECK(draws == 3);
  CHECK(provider.calls() == 4);
}

TEST_CASE("which failures are retried: status rule and x-should-retry", "[queue][retry]") {
  asio::io_context io;
  laneq::SimulatedProvider provider;
  laneq::RequestQueue queue(io.get_executor(), provider,
                            {.workers = 1, .retry = {.base_delay = 1ms, .max_delay = 1ms}});
  queue.start();
  run(io, [&]() -> asio::awaitable<void> {
    // 400: never retried
    provider.script({.error = errc::bad_request, .status = 400});
    auto [e1, r1] = co_await queue.async_submit(chat(), {}, tuple_awaitable);
    CHECK(e1 == errc::bad_request);
    CHECK(r1.attempts == 1);
    // 500 with x-should-retry: false: not retried
    provider.script({.error = errc::server_error, .status = 500, .headers = {{"x-should-retry", "false"}}});
    auto [e2, r2] = co_await queue.async_submit(chat(), {}, tuple_awaitable);
    CHECK(e2 == errc::server_error);
    CHECK(r2.attempts == 1);
    // 400 with x-should-retry: true: retried, then succeeds
    provider.script({.error = errc::bad_request, .status = 400, .headers = {{"X-Should-Retry", "true"}}});
    auto [e3, r3] = co_await queue.async_submit(chat(), {}, tuple_awaitable);
    CHECK_FALSE(e3);
    CHECK(r3.attempts == 2);
    // insufficient quota is a 429 that must not be retried
    provider.script({.error = errc::quota_exceeded, .status = 429});
    auto [e4, r4] = co_await queue.async_submit(chat(), {}, tuple_awaitable);
    CHECK(e4 == errc::quota_exceeded);
    CHECK(r4.attempts == 1);
    // a connection failure (no HTTP status) is retried
    provider.script({.error = errc::network, .status = 0});
    auto [e5, r5] = co_await queue.async_submit(chat(), {}, tuple_awaitable);
    CHECK_FALSE(e5);
    CHECK(r5.attempts == 2);
    co_await queue.shutdown();
  });
  CHECK(provider.calls() == 7);
}

TEST_CASE("reconciliation returns unused tokens so later requests need not wait",
          "[queue][limits]") {
  asio::io_context io;
  // Each request reserves ~400 tokens (max_tokens 400 + a tiny prompt) but uses 20.
  laneq::SimulatedProvider provider({.output_tokens = 10});
  laneq::RequestQueue queue(io.get_executor(), provider,
                            {.workers = 1, .rate_limits = {.tokens = 1000, .period = 2s}});
  queue.start();
  const auto t0 = steady::now();
  run(io, [&]() -> asio::awaitable<void> {
    for (int i = 0; i < 20; ++i) {
      auto [ec, r] = co_await queue.async_submit(chat("x", 400), {}, tuple_awaitable);
      CHECK_FALSE(ec);
    }
    co_await queue.shutdown();
  });
  // Without reconciliation 20 x ~410 tokens at 1000 per 2 s would take > 16 s.
  CHECK(steady::now() - t0 < 1500ms);
  const auto b = queue.limiter().snapshot().budgets.at(0);
  CHECK(b.name == "tokens");
  CHECK(b.available >= 1000 - 20 * 20);
}

TEST_CASE("a call that fails after a 2xx keeps its tokens charged - one the server refused, or "
          "that was refused before it was sent, costs none",
          "[queue][limits]") {
  asio::io_context io;
  laneq::SimulatedProvider provider;
  laneq::RequestQueue queue(io.get_executor(), provider,
                            {.workers = 1, .rate_limits = {.tokens = 1000, .period = 60s}});
  queue.start();
  const auto available = [&] { return queue.limiter().snapshot().budgets.at(0).available; };
  run(io, [&]() -> asio::awaitable<void> {
    // a malformed 200 (or a stream cut short): the server counted the ~410 tokens
    provider.script({.error = errc::malformed_response, .status = 200});
    auto [e1, r1] = co_await queue.async_submit(chat("x", 400), {}, tuple_awaitable);
    CHECK(e1 == errc::malformed_response);
    CHECK(available() <= 1000 - 400);
    const auto after_first = available();
    // a 400: refused, nothing counted
    provider.script({.error = errc::bad_request, .status = 400});
    auto [e2, r2] = co_await queue.async_submit(chat("x", 400), {}, tuple_awaitable);
    CHECK(e2 == errc::bad_request);
    CHECK(available() == after_first);
    // refused before sending (no HTTP status: a provider could not build the request): nothing
    provider.script({.error = errc::bad_request, .status = 0});
    auto [e3, r3] = co_await queue.async_submit(chat("x", 400), {}, tuple_awaitable);
    CHECK(e3 == errc::bad_request);
    CHECK(available() == after_first);
    co_await queue.shutdown();
  });
}

TEST_CASE("input tokens a provider's rate limits do not count (Anthropic's cache reads) are "
          "not charged to the input budget",
          "[queue][limits]") {
  asio::io_context io;
  laneq::SimulatedProvider provider({.usage_fn = [](const laneq::Request&, auto&) {
    return laneq::Usage{.input_tokens = 10'010, .output_tokens = 5,
                        .rate_exempt_input_tokens = 10'000};  // a 10k cached prefix
  }});
  laneq::RequestQueue queue(io.get_executor(), provider,
                            {.workers = 1, .rate_limits = {.input_tokens = 50'000, .period = 60s}});
  queue.start();
  run(io, [&]() -> asio::awaitable<void> {
    for (int i = 0; i < 3; ++i) {
      auto [ec, r] = co_await queue.async_submit(chat("x", 16), {}, tuple_awaitable);
      CHECK_FALSE(ec);
      CHECK(r.usage.input_tokens == 10'010);
    }
    // 3 x 10 charged, not 3 x 10,010
    CHECK(queue.limiter().snapshot().budgets.at(0).available == 50'000 - 30);
    co_await queue.shutdown();
  });
}

TEST_CASE("absurd usage from a server is charged capped, never overflowing the budgets",
          "[queue][limits]") {
  asio::io_context io;
  laneq::SimulatedProvider provider({.usage_fn = [](const laneq::Request&, std::mt19937_64&) {
    return laneq::Usage{.input_tokens = std::numeric_limits<std::int64_t>::max(),
                        .output_tokens = std::numeric_limits<std::int64_t>::max()};
  }});
  laneq::RequestQueue queue(io.get_executor(), provider,
                            {.workers = 1, .rate_limits = {.tokens = 1000, .period = 60s}});
  queue.start();
  run(io, [&]() -> asio::awaitable<void> {
    for (int i = 0; i < 2; ++i) {  // the second waits on debt: it times out, nothing overflows
      // (only the second has a short deadline: a stalled loop must not fail the first)
      const laneq::SubmitOptions opts =
          i == 0 ? laneq::SubmitOptions{} : laneq::SubmitOptions{.timeout = 100ms};
      auto [ec, r] = co_await queue.async_submit(chat("x", 10), opts, tuple_awaitable);
      CHECK((i == 0 ? !ec : ec == errc::timeout));
      if (i == 0) CHECK(r.usage.total() == std::numeric_limits<std::int64_t>::max());  // saturates
    }
    co_await queue.shutdown();
  });
  CHECK(queue.limiter().snapshot().budgets.at(0).available < 0);  // in debt, by 2^41
}

TEST_CASE("per-model limits: a cheap model's budget is not the expensive model's",
          "[queue][limits]") {
  asio::io_context io;
  laneq::SimulatedProvider provider;
  laneq::RequestQueue queue(
      io.get_executor(), provider,
      {.workers = 2,
       .rate_limits = {.requests = 100},
       .model_rate_limits = {{"cheap", {.requests = 1, .period = 10s}}}});
  queue.start();
  run(io, [&]() -> asio::awaitable<void> {
    laneq::Request cheap = chat();
    cheap.model = "cheap";
    auto [e1, r1] = co_await queue.async_submit(cheap, {}, tuple_awaitable);
    CHECK_FALSE(e1);
    // the second cheap request waits for its budget (10 s) and times out
    auto [e2, r2] = co_await queue.async_submit(cheap, {.timeout = 150ms}, tuple_awaitable);
    CHECK(e2 == errc::timeout);
    // the default model is not held by the cheap one's budget (a deadline far below the
    // cheap budget's 10 s, far above what a loaded loop may lag)
    for (int i = 0; i < 5; ++i) {
      auto [e, r] = co_await queue.async_submit(chat(), {.timeout = 5s}, tuple_awaitable);
      CHECK_FALSE(e);
    }
    co_await queue.shutdown();
  });
  CHECK(provider.calls() == 6);
  CHECK(&queue.limiter("cheap") != &queue.limiter());
  CHECK(queue.limiter("cheap").name() == "cheap");
  CHECK(&queue.limiter("unknown-model") == &queue.limiter());
  const auto snap = queue.metrics();
  REQUIRE(snap.limiters.size() == 2);
  CHECK(snap.limiters[1].name == "cheap");
  CHECK(snap.limiters[1].granted == 1);
}

TEST_CASE("cancelling a request that waits on the limiter releases its place",
          "[queue][limits]") {
  asio::io_context io;
  laneq::SimulatedProvider provider;
  laneq::RequestQueue queue(io.get_executor(), provider,
                            {.workers = 2, .rate_limits = {.requests = 1, .period = 10s}});
  queue.start();
  run(io, [&]() -> asio::awaitable<void> {
    auto [e1, r1] = co_await queue.async_submit(chat(), {}, tuple_awaitable);
    CHECK_FALSE(e1);
    asio::steady_timer t(co_await asio::this_coro::executor, 100ms);
    auto res = co_await (queue.async_submit(chat(), {}, tuple_awaitable) ||
                         t.async_wait(asio::use_awaitable));
    CHECK(res.index() == 1);  // the timer won: the submit was cancelled
    CHECK(queue.limiter().snapshot().waiting == 0);
    co_await queue.shutdown();
  });
  CHECK(provider.calls() == 1);
  const auto snap = queue.metrics();
  CHECK(snap.total.cancelled == 1);
  CHECK(snap.total.in_flight == 0);
}

TEST_CASE("invalid retry and limit config is rejected naming the field", "[queue][limits]") {
  asio::io_context io;
  laneq::SimulatedProvider provider;
  auto expect = [&](laneq::QueueConfig c, const char* what) {
    try {
      laneq::RequestQueue q(io.get_executor(), provider, std::move(c));
      FAIL("accepted bad config: " << what);
    } catch (const std::system_error& e) {
      CHECK(e.code() == errc::invalid_config);
      CHECK_THAT(e.what(), Catch::Contains(what));
    }
  };
  expect({.rate_limits = {.requests = -1}}, "requests");
  expect({.rate_limits = {.tokens = 10, .period = 0s}}, "period");
  expect({.model_rate_limits = {{"m", {.output_tokens = -5}}}}, "output_tokens");
  expect({.model_rate_limits = {{"", {.requests = 5}}}}, "model");
  expect({.retry = {.max_attempts = 0}}, "max_attempts");
  expect({.retry = {.base_delay = -1ms}}, "delays");
  expect({.default_max_tokens = -1}, "default_max_tokens");
}
