#include "laneq/metrics.hpp"

#include "json_text.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <charconv>
#include <cmath>
#include <stdexcept>

namespace laneq {

// ---- LatencyHistogram ----------------------------------------------------------------------

namespace {
constexpr std::uint64_t clamp_us = std::uint64_t{1} << 36;

// Bucket of a value in microseconds: 0..7 exact; then for 2^e <= us < 2^(e+1), 8 sub-buckets of
// width 2^(e-3), numbered from (e-2)*8. The last bucket (e = 35, sub 7) also takes everything
// >= 2^36.
constexpr std::size_t bucket_of(std::uint64_t us) noexcept {
  if (us < 8) return static_cast<std::size_t>(us);
  if (us >= clamp_us) return LatencyHistogram::bucket_count - 1;
  const auto e = static_cast<unsigned>(std::bit_width(us)) - 1;  // 3..35
  return (e - 2) * 8 + static_cast<std::size_t>((us >> (e - 3)) & 7);
}
static_assert(bucket_of(clamp_us - 1) == LatencyHistogram::bucket_count - 1);

// Midpoint of a bucket, in nanoseconds.
constexpr std::int64_t midpoint_ns(std::size_t i) noexcept {
  if (i < 8) return static_cast<std::int64_t>(i) * 1000 + 500;
  const auto shift = i / 8 - 1;  // e - 3
  const auto lo = static_cast<std::int64_t>(8 + i % 8) << shift;
  return lo * 1000 + (std::int64_t{500} << shift);
}
}  // namespace

void LatencyHistogram::record(std::chrono::nanoseconds d) noexcept {
  const std::int64_t ns = std::max<std::int64_t>(d.count(), 0);
  ++buckets_[bucket_of(static_cast<std::uint64_t>(ns) / 1000)];
  min_ns_ = count_ == 0 ? ns : std::min(min_ns_, ns);
  max_ns_ = std::max(max_ns_, ns);
  sum_s_ += static_cast<double>(ns) * 1e-9;
  ++count_;
}

void LatencyHistogram::merge(const LatencyHistogram& o) noexcept {
  if (o.count_ == 0) return;
  for (std::size_t i = 0; i < bucket_count; ++i) buckets_[i] += o.buckets_[i];
  min_ns_ = count_ == 0 ? o.min_ns_ : std::min(min_ns_, o.min_ns_);
  max_ns_ = std::max(max_ns_, o.max_ns_);
  sum_s_ += o.sum_s_;
  count_ += o.count_;
}

std::chrono::nanoseconds LatencyHistogram::percentile(double q) const noexcept {
  if (count_ == 0) return std::chrono::nanoseconds(0);
  if (q >= 1) return max();
  if (!(q > 0)) q = 0;  // also NaN
  const auto rank = std::max<std::uint64_t>(
      1, static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(count_))));
  std::uint64_t seen = 0;
  for (std::size_t i = 0; i < bucket_count; ++i) {
    seen += buckets_[i];
    if (seen >= rank)
      return std::chrono::nanoseconds(std::clamp(midpoint_ns(i), min_ns_, max_ns_));
  }
  return max();  // unreachable: the buckets add up to count_
}

LatencySummary summarize(const LatencyHistogram& h) noexcept {
  const auto ms = [](std::chrono::nanoseconds d) { return static_cast<double>(d.count()) / 1e6; };
  return {.count = h.count(),
          .p50_ms = ms(h.percentile(0.5)),
          .p90_ms = ms(h.percentile(0.9)),
          .p99_ms = ms(h.percentile(0.99)),
          .max_ms = ms(h.max()),
          .sum_ms = h.sum().count() * 1e3};
}

// ---- Metrics ------------------------------------------------------------------------------

// One recorder at a time, snapshots from anywhere: every counter is an atomic the recorder
// updates with a relaxed load and store (no lock, no locked instruction), and a reader reads
// whole. A snapshot is exact per counter, though not one instant across counters.
namespace {

template <class T>
struct counter {
  std::atomic<T> v{0};
  void add(T d) noexcept {
    v.store(v.load(std::memory_order_relaxed) + d, std::memory_order_relaxed);
  }
  T get() const noexcept { return v.load(std::memory_order_relaxed); }
};

// Requests that ended in flight, per second over the last minute: a count per whole second
// since the Metrics began, in a ring of 61: the 60 whole seconds before `now` and the second
// under way, which the recorder may have counted already (in a ring of 60 it took the oldest
// whole second's slot: a minute of steady load read 59/60 of its rate). The recorder zeroes
// the seconds it skips as it moves on (nothing runs on a timer); a reader sums the 60 whole
// seconds before `now` that the ring still holds. `newest` is published with release after
// the skipped seconds are zeroed, so a reader that sees it sees them cleared. A reader whose
// `now` is still the second the recorder is leaving (its clock a moment behind) may read the
// slot the recorder is reusing for the next one (its old count, 0, or the new second's): off
// by one second's count, either way, for that snapshot.
struct throughput_ring {
  static constexpr std::int64_t window_s = 60;
  static constexpr std::int64_t slots = window_s + 1;
  std::array<counter<std::uint32_t>, slots> per_second{};
  std::atomic<std::int64_t> newest{-1};  // the latest second counted
  std::size_t newest_slot = 0;           // its slot (the recorder's own)

  static std::size_t slot(std::int64_t sec) noexcept {
    return static_cast<std::size_t>(sec % slots);
  }
  void record(std::int64_t sec) noexcept {
    const std::int64_t last = newest.load(std::memory_order_relaxed);
    if (sec == last) [[likely]] {  // one more in the same second
      per_second[newest_slot].add(1);
      return;
    }
    if (sec > last) {
      newest_slot = slot(sec);
      for (std::int64_t s = std::max(last + 1, sec - slots + 1); s <= sec; ++s)
        per_second[slot(s)].v.store(0, std::memory_order_relaxed);
      newest.store(sec, std::memory_order_release);
    } else if (sec <= last - slots) {
      return;  // older than the ring (a finish time from before the minute the ring holds)
    }
    per_second[slot(sec)].add(1);
  }
  double per_s(std::int64_t now_sec) const noexcept {
    const std::int64_t last = newest.load(std::memory_order_acquire);
    const std::int64_t from = std::max({now_sec - window_s, last - slots + 1, std::int64_t{0}});
    const std::int64_t to = std::min(now_sec - 1, last);  // whole seconds only
    std::uint64_t sum = 0;
    for (std::int64_t s = from; s <= to; ++s) sum += per_second[slot(s)].get();
    const std::int64_t span = std::min(now_sec, window_s);  // young Metrics: the seconds it has
    return span > 0 ? static_cast<double>(sum) / static_cast<double>(span) : 0.0;
  }
};

}  // namespace

// LatencyHistogram::record for one recorder and concurrent readers.
struct Metrics::Histogram {
  std::array<counter<std::uint64_t>, LatencyHistogram::bucket_count> buckets{};
  counter<std::uint64_t> count{};  // of the samples above 0; those of exactly 0 are counted alone
  counter<std::uint64_t> zeros{};
  counter<std::int64_t> min_ns{}, max_ns{};
  std::atomic<double> sum_s{0};

  // A value prepared once for the two histograms it goes to (the lane's and the client's).
  struct sample {
    explicit sample(std::chrono::nanoseconds d) noexcept
        : ns(std::max<std::int64_t>(d.count(), 0)),
          bucket(bucket_of(static_cast<std::uint64_t>(ns) / 1000)),
          seconds(static_cast<double>(ns) * 1e-9) {}
    std::int64_t ns;
    std::size_t bucket;
    double seconds;
  };

  void record(const sample& x) noexcept {
    if (x.ns == 0) {  // e.g. every limiter wait of a request the limiter let through at once
      zeros.v.store(zeros.get() + 1, std::memory_order_release);
      return;
    }
    // min and max before the bucket, which is stored with release: a reader that sees the sample
    // in a bucket sees the min and max that include it (percentiles are clamped to them).
    const auto n = count.get();
    if (n == 0 || x.ns < min_ns.get()) min_ns.v.store(x.ns, std::memory_order_relaxed);
    if (x.ns > max_ns.get()) max_ns.v.store(x.ns, std::memory_order_relaxed);
    buckets[x.bucket].v.store(buckets[x.bucket].get() + 1, std::memory_order_release);
    sum_s.store(sum_s.load(std::memory_order_relaxed) + x.seconds, std::memory_order_relaxed);
    count.v.store(n + 1, std::memory_order_release);  // the buckets before it, for load()
  }
};

LatencyHistogram Metrics::load(const Histogram& a) noexcept {
  LatencyHistogram h;
  const std::uint64_t zeros = a.zeros.v.load(std::memory_order_acquire);
  const std::uint64_t counted = a.count.v.load(std::memory_order_acquire);
  if (counted == 0 && zeros == 0) return h;
  // Buckets recorded after count was read may show: count what the buckets say, so that
  // percentile() walks a consistent histogram.
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < LatencyHistogram::bucket_count; ++i)
    total += h.buckets_[i] = a.buckets[i].v.load(std::memory_order_acquire);
  h.buckets_[0] += zeros;  // a 0 falls in the first bucket
  h.count_ = total + zeros;
  h.min_ns_ = zeros > 0 ? 0 : a.min_ns.get();
  h.max_ns_ = a.max_ns.get();
  h.sum_s_ = a.sum_s.load(std::memory_order_relaxed);
  return h;
}

struct Metrics::Series {
  struct Latency {
    Histogram wait, service, limiter;
    throughput_ring finished;  // requests that ended in flight (succeeded or failed)
  };
  counter<std::int64_t> depth, in_flight, waiting;
  counter<std::uint64_t> submitted, started, succeeded, failed, rejected, expired, cancelled,
      retried, rate_limited;
  // Lanes: at construction; clients: at their first latency (6.9 KB each). Published with
  // release for snapshots; only the recorder creates it.
  std::atomic<Latency*> lat{nullptr};

  Series() = default;
  ~Series() { delete lat.load(std::memory_order_relaxed); }
  Series(const Series&) = delete;
  Series& operator=(const Series&) = delete;

  Latency& latency() {
    if (auto* l = lat.load(std::memory_order_relaxed)) [[likely]]
      return *l;
    return first_latency();
  }
  // Out of line: the allocation would keep latency() from being inlined at every use.
  [[gnu::noinline]] Latency& first_latency() {
    auto* l = new Latency();
    lat.store(l, std::memory_order_release);
    return *l;
  }
  SeriesSnapshot counters() const {
    SeriesSnapshot r;
    r.depth = depth.get(), r.in_flight = in_flight.get(), r.waiting = waiting.get();
    r.submitted = submitted.get(), r.started = started.get(), r.succeeded = succeeded.get();
    r.failed = failed.get(), r.rejected = rejected.get(), r.expired = expired.get();
    r.cancelled = cancelled.get(), r.retried = retried.get(), r.rate_limited = rate_limited.get();
    return r;
  }
  SeriesSnapshot snapshot(std::int64_t now_sec) const {
    SeriesSnapshot r = counters();
    if (const auto* l = lat.load(std::memory_order_acquire)) {
      r.queue_wait = summarize(load(l->wait)), r.service_time = summarize(load(l->service));
      r.limiter_wait = summarize(load(l->limiter));
      r.throughput_per_s = l->finished.per_s(now_sec);
    }
    return r;
  }
};

namespace {
constexpr std::string_view other_client = "_other";

void add_counters(SeriesSnapshot& t, const SeriesSnapshot& s) {
  t.depth += s.depth, t.in_flight += s.in_flight, t.waiting += s.waiting;
  t.submitted += s.submitted, t.started += s.started, t.succeeded += s.succeeded;
  t.failed += s.failed, t.rejected += s.rejected, t.expired += s.expired;
  t.cancelled += s.cancelled, t.retried += s.retried, t.rate_limited += s.rate_limited;
  t.throughput_per_s += s.throughput_per_s;
}
}  // namespace

Metrics::Metrics(std::vector<LaneInfo> lanes, std::size_t max_clients)
    : lane_info_(std::move(lanes)),
      lanes_(lane_info_.size()),
      max_clients_(max_clients),
      start_(std::chrono::steady_clock::now()) {
  // Prometheus requires distinct label sets: two lanes with one name would break a scrape.
  for (std::size_t i = 0; i < lane_info_.size(); ++i) {
    // JSON and Prometheus text are UTF-8: a broken name would make every export fail.
    if (!detail::is_valid_utf8(lane_info_[i].name))
      throw std::invalid_argument("Metrics: lane name '" + detail::to_valid_utf8(lane_info_[i].name) +
                                  "' is not valid UTF-8");
    for (std::size_t j = 0; j < i; ++j)
      if (lane_info_[i].name == lane_info_[j].name)
        throw std::invalid_argument("Metrics: duplicate lane name '" + lane_info_[i].name + "'");
  }
  for (auto& s : lanes_) s.latency();
}

Metrics::~Metrics() = default;

Metrics::ClientRef Metrics::client(std::string_view name) {
  // Only the recorder changes clients_: it may look up without the lock; a snapshot iterates
  // under it, so inserting takes it.
  const std::size_t hash = detail::hash_name(name);
  const auto series = [](const std::unique_ptr<Series>& s) { return s.get(); };
  if (Series* const* s = recent_clients_.find(clients_, name, hash, series)) return ClientRef(*s);
  if (const auto it = aliases_.find(name); it != aliases_.end()) return ClientRef(it->second);
  // A name that is not valid UTF-8 is kept with its broken sequences as U+FFFD (JSON and
  // Prometheus text need UTF-8), sharing a series with any other name that reads the same.
  const bool valid = detail::is_valid_utf8(name);
  std::string key = valid ? std::string(name) : detail::to_valid_utf8(name);
  Series* found = nullptr;
  // Its series is stored under another name than `name`: "_other", or its U+FFFD spelling. A
  // series stored under `name` itself is never found here: the look-up above had found it.
  bool alias = true;
  {
    std::lock_guard lock(mu_);
    if (const auto it = clients_.find(key); it != clients_.end()) {
      found = it->second.get();
    } else {
      // The empty name (requests without a client) is not one of the capped clients: its
      // series must not depend on how many tenants came first.
      const bool unnamed = key.empty();
      const bool own = key != other_client &&
                       (unnamed ? max_clients_ > 0 : named_clients_ < max_clients_);
      if (!own) key = other_client;
      alias = !own || !valid;
      auto& slot = clients_[std::move(key)];
      if (!slot) {
        slot = std::make_unique<Series>();
        named_clients_ += own && !unnamed;
      }
      found = slot.get();
    }
  }
  // The cache (keyed by stored names) would miss an alias every time.
  if (alias) {
    if (aliases_.size() >= max_aliases) aliases_.clear();
    aliases_.emplace(std::string(name), found);
  }
  return ClientRef(found);
}

template <class F>
void Metrics::update(std::size_t lane, ClientRef c, F&& f) {
  if (lane >= lanes_.size()) return;
  f(lanes_[lane]);
  if (c.s_) f(*c.s_);
}

void Metrics::submitted(std::size_t lane, ClientRef c) {
  update(lane, c, [](Series& s) { s.submitted.add(1); });
}

void Metrics::rejected(std::size_t lane, ClientRef c) {
  update(lane, c, [](Series& s) { s.rejected.add(1); });
}

void Metrics::waiting(std::size_t lane, ClientRef c) {
  update(lane, c, [](Series& s) { s.waiting.add(1); });
}

void Metrics::enqueued(std::size_t lane, ClientRef c, bool was_waiting) {
  update(lane, c, [&](Series& s) {
    s.depth.add(1);
    if (was_waiting) s.waiting.add(-1);
  });
}

void Metrics::started(std::size_t lane, ClientRef c, std::chrono::nanoseconds queue_wait) {
  const Histogram::sample wait(queue_wait);
  update(lane, c, [&](Series& s) {
    s.depth.add(-1), s.in_flight.add(1), s.started.add(1);
    s.latency().wait.record(wait);
  });
}

void Metrics::requeued(std::size_t lane, ClientRef c) {
  update(lane, c, [](Series& s) { s.in_flight.add(-1), s.depth.add(1), s.retried.add(1); });
}

void Metrics::rate_limited(std::size_t lane, ClientRef c) {
  update(lane, c, [](Series& s) { s.rate_limited.add(1); });
}

void Metrics::limiter_wait(std::size_t lane, ClientRef c, std::chrono::nanoseconds d) {
  const Histogram::sample wait(d);
  update(lane, c, [&](Series& s) { s.latency().limiter.record(wait); });
}

void Metrics::finished(std::size_t lane, ClientRef c, Outcome o, From from,
                       std::chrono::nanoseconds service_time,
                       std::chrono::steady_clock::time_point at) {
  const Histogram::sample service(service_time);
  update(lane, c, [&](Series& s) {
    switch (o) {
      case Outcome::succeeded: s.succeeded.add(1); break;
      case Outcome::failed: s.failed.add(1); break;
      case Outcome::expired: s.expired.add(1); break;
      case Outcome::cancelled: s.cancelled.add(1); break;
      case Outcome::rejected: s.rejected.add(1); break;
    }
    switch (from) {
      case From::waiting: s.waiting.add(-1); break;
      case From::queued: s.depth.add(-1); break;
      case From::in_flight: s.in_flight.add(-1); break;
    }
    if (service_time != no_call) s.latency().service.record(service);
  });
  // Apart from the update above, which stays small enough to inline (measured: with this inside
  // it the lambda was called out of line, and B1 stream ran 1.7 % slower).
  if (from != From::in_flight || (o != Outcome::succeeded && o != Outcome::failed) ||
      lane >= lanes_.size())
    return;
  if (at == std::chrono::steady_clock::time_point{}) at = std::chrono::steady_clock::now();
  const std::int64_t sec = second_to_record(at);
  lanes_[lane].latency().finished.record(sec);  // the service time above made both latencies
  if (c.s_) c.s_->latency().finished.record(sec);
}

std::int64_t Metrics::second_of(std::chrono::steady_clock::time_point t) const noexcept {
  return std::chrono::floor<std::chrono::seconds>(t - start_).count();
}

std::int64_t Metrics::second_to_record(std::chrono::steady_clock::time_point t) noexcept {
  if (t >= second_begin_ && t < second_begin_ + std::chrono::seconds(1)) [[likely]]
    return second_;
  second_ = std::max<std::int64_t>(0, second_of(t));
  second_begin_ = start_ + std::chrono::seconds(second_);
  return second_;
}

MetricsSnapshot Metrics::snapshot() const { return snapshot(std::chrono::steady_clock::now()); }

MetricsSnapshot Metrics::snapshot(std::chrono::steady_clock::time_point now) const {
  MetricsSnapshot out;
  const std::int64_t now_sec = second_of(now);
  out.lanes.resize(lane_info_.size());  // lane_info_ is immutable: no lock needed
  for (std::size_t i = 0; i < lane_info_.size(); ++i)
    out.lanes[i].name = lane_info_[i].name, out.lanes[i].priority = lane_info_[i].priority;
  LatencyHistogram wait, service, limiter;
  for (std::size_t i = 0; i < lanes_.size(); ++i) {  // lanes_ never changes: no lock
    out.lanes[i].stats = lanes_[i].snapshot(now_sec);
    add_counters(out.total, out.lanes[i].stats);
    const auto& l = *lanes_[i].lat.load(std::memory_order_acquire);
    wait.merge(load(l.wait));
    service.merge(load(l.service));
    limiter.merge(load(l.limiter));
  }
  // Under the lock only the list (the recorder takes it for a new client): summarizing up to
  // max_clients series' histograms there would hold up the queue. Series are never removed.
  std::vector<std::pair<std::string, const Series*>> clients;
  {
    std::lock_guard lock(mu_);
    clients.reserve(clients_.size());
    for (const auto& [name, s] : clients_) clients.emplace_back(name, s.get());
  }
  for (const auto& [name, s] : clients) out.clients.emplace(name, s->snapshot(now_sec));
  out.total.queue_wait = summarize(wait);
  out.total.service_time = summarize(service);
  out.total.limiter_wait = summarize(limiter);
  out.uptime_s = std::chrono::duration<double>(now - start_).count();
  return out;
}

// ---- export ---------------------------------------------------------------------------------

namespace {

nlohmann::json latency_json(const LatencySummary& l) {
  return {{"count", l.count},   {"p50_ms", l.p50_ms}, {"p90_ms", l.p90_ms},
          {"p99_ms", l.p99_ms}, {"max_ms", l.max_ms}, {"sum_ms", l.sum_ms}};
}

nlohmann::json series_json(const SeriesSnapshot& s) {
  return {{"depth", s.depth},
          {"in_flight", s.in_flight},
          {"waiting", s.waiting},
          {"submitted", s.submitted},
          {"started", s.started},
          {"succeeded", s.succeeded},
          {"failed", s.failed},
          {"rejected", s.rejected},
          {"expired", s.expired},
          {"cancelled", s.cancelled},
          {"retried", s.retried},
          {"rate_limited", s.rate_limited},
          {"throughput_per_s", s.throughput_per_s},
          {"queue_wait", latency_json(s.queue_wait)},
          {"service_time", latency_json(s.service_time)},
          {"limiter_wait", latency_json(s.limiter_wait)}};
}

nlohmann::json limiter_json(const LimiterSnapshot& l) {
  auto budgets = nlohmann::json::array();
  for (const auto& b : l.budgets)
    budgets.push_back({{"name", b.name},
                       {"limit", b.limit},
                       {"period_s", b.period_s},
                       {"available", b.available}});
  return {{"name", l.name},       {"budgets", std::move(budgets)},
          {"waiting", l.waiting}, {"granted", l.granted},
          {"pauses", l.pauses},   {"paused_for_s", l.paused_for_s}};
}

}  // namespace

void to_json(nlohmann::json& j, const MetricsSnapshot& s) {
  j = nlohmann::json::object();
  j["uptime_s"] = s.uptime_s;
  j["total"] = series_json(s.total);
  auto& lanes = j["lanes"] = nlohmann::json::array();
  for (const auto& l : s.lanes)
    lanes.push_back({{"name", l.name}, {"priority", l.priority}, {"stats", series_json(l.stats)}});
  auto& clients = j["clients"] = nlohmann::json::object();
  for (const auto& [name, c] : s.clients) clients[name] = series_json(c);
  auto& limiters = j["limiters"] = nlohmann::json::array();
  for (const auto& l : s.limiters) limiters.push_back(limiter_json(l));
}

nlohmann::json to_json(const MetricsSnapshot& s) {
  nlohmann::json j;
  to_json(j, s);
  return j;
}

namespace {

struct CounterFamily {
  const char* name;
  const char* help;
  std::uint64_t SeriesSnapshot::*field;
};
constexpr CounterFamily counter_families[] = {
    {"requests_submitted_total", "Requests submitted.", &SeriesSnapshot::submitted},
    {"requests_started_total", "Attempts started by a worker (retries count again).",
     &SeriesSnapshot::started},
    {"requests_succeeded_total", "Requests that succeeded.", &SeriesSnapshot::succeeded},
    {"requests_failed_total", "Requests that failed.", &SeriesSnapshot::failed},
    {"requests_rejected_total",
     "Requests refused admission (queue or client full, shutting down, a bad request, no "
     "journal or a journal that refused the row, more than a rate limit could ever grant, a "
     "prompt estimator that threw).",
     &SeriesSnapshot::rejected},
    {"requests_expired_total", "Requests whose deadline passed.", &SeriesSnapshot::expired},
    {"requests_cancelled_total", "Requests cancelled.", &SeriesSnapshot::cancelled},
    {"requests_retried_total", "Attempts put back into their lane for a retry.",
     &SeriesSnapshot::retried},
    {"requests_rate_limited_total", "Provider answers 429/503/529 (rate limited or overloaded).",
     &SeriesSnapshot::rate_limited},
};

struct GaugeFamily {
  const char* name;
  const char* help;
  std::int64_t SeriesSnapshot::*field;
};
constexpr GaugeFamily gauge_families[] = {
    {"queue_depth", "Requests queued now.", &SeriesSnapshot::depth},
    {"in_flight", "Requests started and not finished.", &SeriesSnapshot::in_flight},
    {"waiting", "Requests waiting for room in the queue (backpressure).",
     &SeriesSnapshot::waiting},
};

struct SummaryFamily {
  const char* name;
  const char* help;
  LatencySummary SeriesSnapshot::*field;
};
constexpr SummaryFamily summary_families[] = {
    {"queue_wait_seconds", "Time from submit to the start of each attempt.",
     &SeriesSnapshot::queue_wait},
    {"service_time_seconds", "Duration of the last provider call of each finished request.",
     &SeriesSnapshot::service_time},
    {"limiter_wait_seconds", "Time started requests waited on the rate limiter before the call.",
     &SeriesSnapshot::limiter_wait},
};

void append_number(std::string& out, double v) {
  // The format's spellings: to_chars writes "nan", "inf" and "-inf", which strict parsers refuse.
  if (std::isnan(v)) {
    out += "NaN";
    return;
  }
  if (std::isinf(v)) {
    out += v > 0 ? "+Inf" : "-Inf";
    return;
  }
  char buf[32];
  out.append(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}

void append_number(std::string& out, std::integral auto v) {
  char buf[24];
  out.append(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}

void append_escaped(std::string& out, std::string_view v) {
  for (char ch : v) {
    if (ch == '\\') out += "\\\\";
    else if (ch == '"') out += "\\\"";
    else if (ch == '\n') out += "\\n";
    else out += ch;
  }
}

void append_header(std::string& out, std::string_view prefix, std::string_view name,
                   std::string_view help, std::string_view scope_help, std::string_view type) {
  out += "# HELP ", out += prefix, out += name, out += ' ', out += help;
  out += scope_help, out += '\n';
  out += "# TYPE ", out += prefix, out += name, out += ' ', out += type, out += '\n';
}

struct Labelled {
  std::string_view value;
  const SeriesSnapshot* s;
};

// One scope = one set of families ("laneq_" + lane label, or "laneq_client_" + client label).
class Writer {
 public:
  Writer(std::string& out, std::string prefix, std::string_view label,
         const std::vector<Labelled>& series)
      : out_(out), prefix_(std::move(prefix)), label_(label), series_(series) {}

  void write(const char* scope_help) {
    for (const auto& f : counter_families) {
      header(f.name, f.help, scope_help, "counter");
      for (const auto& x : series_) sample(f.name, "", x.value, nullptr, x.s->*f.field);
    }
    for (const auto& f : gauge_families) {
      header(f.name, f.help, scope_help, "gauge");
      for (const auto& x : series_) sample(f.name, "", x.value, nullptr, x.s->*f.field);
    }
    for (const auto& f : summary_families) {
      header(f.name, f.help, scope_help, "summary");
      for (const auto& x : series_) {
        const LatencySummary& l = x.s->*f.field;
        // Quantiles of an empty summary are NaN, as the official Prometheus clients report them.
        const double nan = std::nan("");
        sample(f.name, "", x.value, "0.5", l.count ? l.p50_ms / 1e3 : nan);
        sample(f.name, "", x.value, "0.9", l.count ? l.p90_ms / 1e3 : nan);
        sample(f.name, "", x.value, "0.99", l.count ? l.p99_ms / 1e3 : nan);
        sample(f.name, "", x.value, "1", l.count ? l.max_ms / 1e3 : nan);  // the max
        sample(f.name, "_sum", x.value, nullptr, l.sum_ms / 1e3);
        sample(f.name, "_count", x.value, nullptr, l.count);
      }
    }
  }

 private:
  void header(const char* name, const char* help, const char* scope_help, const char* type) {
    append_header(out_, prefix_, name, help, scope_help, type);
  }

  void sample(const char* name, const char* suffix, std::string_view label_value,
              const char* quantile, auto value) {
    out_ += prefix_, out_ += name, out_ += suffix;
    out_ += '{', out_ += label_, out_ += "=\"";
    append_escaped(out_, label_value);
    out_ += '"';
    if (quantile) out_ += ",quantile=\"", out_ += quantile, out_ += '"';
    out_ += "} ";
    append_number(out_, value);
    out_ += '\n';
  }

  std::string& out_;
  std::string prefix_;
  std::string_view label_;
  const std::vector<Labelled>& series_;
};

// Limiter families: one sample per limiter (label limiter), or per limiter and budget (labels
// limiter, budget) for the budget gauges.
void write_limiters(std::string& out, std::string_view p, const std::vector<LimiterSnapshot>& ls) {
  const auto sample = [&](std::string_view name, std::string_view limiter,
                          const std::string* budget, auto value) {
    out += p, out += name, out += "{limiter=\"";
    append_escaped(out, limiter);
    out += '"';
    if (budget) out += ",budget=\"", append_escaped(out, *budget), out += '"';
    out += "} ";
    append_number(out, value);
    out += '\n';
  };
  append_header(out, p, "limiter_budget_limit", "Budget units allowed per period.",
                " Per limiter and budget.", "gauge");
  for (const auto& l : ls)
    for (const auto& b : l.budgets) sample("limiter_budget_limit", l.name, &b.name, b.limit);
  append_header(out, p, "limiter_budget_available",
                "Budget units available now (negative while in debt).", " Per limiter and budget.",
                "gauge");
  for (const auto& l : ls)
    for (const auto& b : l.budgets)
      sample("limiter_budget_available", l.name, &b.name, b.available);
  append_header(out, p, "limiter_waiting", "Acquires waiting on the limiter now.", " Per limiter.",
                "gauge");
  for (const auto& l : ls) sample("limiter_waiting", l.name, nullptr, l.waiting);
  append_header(out, p, "limiter_granted_total", "Acquires granted by the limiter.",
                " Per limiter.", "counter");
  for (const auto& l : ls) sample("limiter_granted_total", l.name, nullptr, l.granted);
  append_header(out, p, "limiter_pauses_total", "Server-requested pauses (429/503/529).",
                " Per limiter.", "counter");
  for (const auto& l : ls) sample("limiter_pauses_total", l.name, nullptr, l.pauses);
  append_header(out, p, "limiter_paused_seconds",
                "Seconds left of the current server-requested pause (0 = not paused).",
                " Per limiter.", "gauge");
  for (const auto& l : ls) sample("limiter_paused_seconds", l.name, nullptr, l.paused_for_s);
}

bool valid_prefix(std::string_view p) {
  const auto ok = [](char c, bool first) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
           (!first && c >= '0' && c <= '9');
  };
  for (std::size_t i = 0; i < p.size(); ++i)
    if (!ok(p[i], i == 0)) return false;
  return true;
}

}  // namespace

std::string to_prometheus(const MetricsSnapshot& s, std::string_view prefix) {
  if (!valid_prefix(prefix))
    throw std::invalid_argument("to_prometheus: prefix '" + std::string(prefix) +
                                "' is not a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)");
  const std::string p = prefix.empty() ? std::string() : std::string(prefix) + '_';
  std::string out;
  out.reserve(2048 + 1024 * (s.lanes.size() + s.clients.size()) + 512 * s.limiters.size());

  std::vector<Labelled> lanes, clients;
  for (const auto& l : s.lanes) lanes.push_back({l.name, &l.stats});
  for (const auto& [name, c] : s.clients) clients.push_back({name, &c});
  Writer(out, p, "lane", lanes).write(" Per lane.");
  if (!clients.empty()) Writer(out, p + "client_", "client", clients).write(" Per client.");
  // Like the client families, the limiter families are left out when there is nothing to report.
  if (!s.limiters.empty()) write_limiters(out, p, s.limiters);

  out += "# HELP " + p + "uptime_seconds Seconds since the metrics were created.\n";
  out += "# TYPE " + p + "uptime_seconds gauge\n";
  out += p + "uptime_seconds ";
  append_number(out, s.uptime_s);
  out += '\n';
  return out;
}

}  // namespace laneq
