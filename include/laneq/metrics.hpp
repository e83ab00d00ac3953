#pragma once
// Metrics: per-lane and per-client counters, gauges and latency summaries, exported as a plain
// struct (`MetricsSnapshot`), as JSON and as Prometheus text.
//
// `LatencyHistogram` is a pure, fixed-size (~2.2 KB) log-linear histogram; `Metrics` is the
// thread-safe recorder the request queue feeds from its strand while any thread may take a
// `snapshot()`.
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "laneq/detail/name_cache.hpp"
#include "laneq/detail/string_hash.hpp"

namespace laneq {

// HDR-style histogram over whole microseconds (a value is truncated to its us): 1 us buckets
// below 8 us, then each power of two split into 8 equal sub-buckets. percentile() reads a bucket
// at its midpoint (clamped to the min and max recorded): below 8 us up to 0.5 us off (1.0 us
// reads 1.5 us, 0.1 us reads 0.5 us), from 8 us on within 6.25% of any value in the bucket. The
// last bucket, from 15 x 2^32 us (~17.9 h), also takes every value >= 2^36 us (~19.1 h): all of
// them read ~18.5 h, clamped to the min and max recorded (so 20 h and 100 h alone read 20 h
// at p50). No allocation, no locks.
class LatencyHistogram {
 public:
  static constexpr std::size_t bucket_count = 272;  // 8 of 1 us + 33 powers of two x 8

  void record(std::chrono::nanoseconds d) noexcept;  // negative -> 0
  void merge(const LatencyHistogram& other) noexcept;

  std::uint64_t count() const noexcept { return count_; }
  std::chrono::nanoseconds min() const noexcept { return std::chrono::nanoseconds(min_ns_); }
  std::chrono::nanoseconds max() const noexcept { return std::chrono::nanoseconds(max_ns_); }
  // Sum of all recorded values; a double so years of cumulative latency cannot overflow.
  std::chrono::duration<double> sum() const noexcept {
    return std::chrono::duration<double>(sum_s_);
  }
  // The q-quantile (q in [0,1], clamped): the midpoint of the bucket holding the
  // ceil(q * count)-th smallest value, clamped to [min, max] recorded. 0 when empty;
  // percentile(1.0) == max().
  std::chrono::nanoseconds percentile(double q) const noexcept;

 private:
  friend class Metrics;  // reads its concurrent recorder into one
  std::array<std::uint64_t, bucket_count> buckets_{};
  std::uint64_t count_ = 0;
  std::int64_t min_ns_ = 0, max_ns_ = 0;
  double sum_s_ = 0;
};

struct LatencySummary {
  std::uint64_t count = 0;
  double p50_ms = 0, p90_ms = 0, p99_ms = 0, max_ms = 0;
  double sum_ms = 0;  // sum of all recorded values (sum / count = mean)
};
LatencySummary summarize(const LatencyHistogram& h) noexcept;

struct SeriesSnapshot {
  std::int64_t depth = 0;       // queued now
  std::int64_t in_flight = 0;   // started, not finished
  std::int64_t waiting = 0;     // waiting for room (backpressure), not yet queued
  std::uint64_t submitted = 0, started = 0, succeeded = 0, failed = 0, rejected = 0,
                expired = 0, cancelled = 0, retried = 0;
  std::uint64_t rate_limited = 0;  // 429/503/529 answers seen from the provider
  // Requests that ended once started (succeeded, or failed on their last attempt or at the
  // rate limiter) per second, over the last 60 whole seconds (fewer while the queue is
  // younger); the current second is not in it yet.
  double throughput_per_s = 0;
  LatencySummary queue_wait, service_time;
  LatencySummary limiter_wait;  // time a started request waited on the rate limiter before its call
};

struct LaneSnapshot {
  std::string name;
  int priority = 0;
  SeriesSnapshot stats;
};

// One budget of a rate limiter, as it stands now.
struct BudgetSnapshot {
  std::string name;            // "requests", "tokens", "input_tokens", "output_tokens"
  std::int64_t limit = 0;      // units per period
  double period_s = 0;
  std::int64_t available = 0;  // units available now (negative while in debt)
};

struct LimiterSnapshot {
  std::string name;  // "default" or the model name
  std::vector<BudgetSnapshot> budgets;
  std::uint64_t waiting = 0;  // acquires waiting now
  std::uint64_t granted = 0;  // acquires granted so far
  std::uint64_t pauses = 0;   // server-requested pauses (429/503/529) so far
  double paused_for_s = 0;    // remaining pause now (0 = not paused)
};

struct MetricsSnapshot {
  std::vector<LaneSnapshot> lanes;                   // in the order given to Metrics (a
                                                     // queue's: by priority, best first)
  std::map<std::string, SeriesSnapshot> clients;     // by client name; overflow series "_other"
  SeriesSnapshot total;                              // all lanes together
  double uptime_s = 0;
  // Filled by the request queue (the limiters live there); Metrics::snapshot() leaves it empty.
  std::vector<LimiterSnapshot> limiters;
};

// JSON: {"uptime_s", "total": series, "lanes": [{"name", "priority", "stats": series}],
// "clients": {name: series}, "limiters": [limiter]}; a series has the SeriesSnapshot field names,
// its latencies are objects with the LatencySummary field names; a limiter is {"name", "budgets":
// [{"name", "limit", "period_s", "available"}], "waiting", "granted", "pauses", "paused_for_s"}
// ("limiters" is always present, possibly empty).
nlohmann::json to_json(const MetricsSnapshot& s);
void to_json(nlohmann::json& j, const MetricsSnapshot& s);  // so `nlohmann::json j = snap;` works

// Prometheus text exposition format 0.0.4. Families (with prefix "laneq"):
//   laneq_requests_{submitted,started,succeeded,failed,rejected,expired,cancelled,retried,
//                   rate_limited}_total                       counter
//   laneq_queue_depth, laneq_in_flight, laneq_waiting         gauge
//   laneq_queue_wait_seconds, laneq_service_time_seconds,     summary (quantile 0.5/0.9/0.99,
//   laneq_limiter_wait_seconds                                quantile 1 = the max, _sum, _count;
//                                                             NaN quantiles if empty)
// each with one sample per lane, label lane="<name>". The same families prefixed
// "laneq_client_" carry one sample per client, label client="<name>" (separate families, so a
// sum() over a family never counts a request twice). No unlabelled totals: sum over lanes.
// Per rate limiter (only if the snapshot has limiters), label limiter="<name>":
//   laneq_limiter_budget_limit, laneq_limiter_budget_available  gauge, plus label budget="<name>"
//   laneq_limiter_waiting, laneq_limiter_paused_seconds         gauge
//   laneq_limiter_granted_total, laneq_limiter_pauses_total     counter
// Plus laneq_uptime_seconds (gauge). Label values are escaped (\\, \", \n). throughput_per_s is
// not exported: Prometheus derives it, over any window, with rate() of succeeded + failed
// (which also counts the few failures before a start, e.g. interrupted_too_often).
// Throws std::invalid_argument if prefix is not a valid metric name prefix.
std::string to_prometheus(const MetricsSnapshot& s, std::string_view prefix = "laneq");

// Recorder: one thread records at a time (the request queue records from its strand), while any
// thread may take a snapshot() at any time. Recording takes no lock: counters are atomics only
// the recorder writes (a relaxed load and store each); nothing allocates except the first time a
// client is seen (its series, under a lock snapshots share) and the first latency recorded for a
// client (its histograms). A snapshot is exact per counter but not one instant across counters
// (a request between two events may show in neither or both). Lane-level totals are summed at
// snapshot() time, not on the hot path.
//
// Bounded cardinality: up to max_clients distinct client names get their own series; every
// further name shares the series "_other" (a client literally named "_other" shares it too).
// The empty name (no client) has its own series beside them, in "_other" only when
// max_clients is 0.
// Client series are never removed. Names are kept as valid UTF-8 (JSON and Prometheus text
// need it): a client name's broken sequences become U+FFFD; a lane name must be valid (the
// constructor throws std::invalid_argument otherwise, as for duplicate lane names).
class Metrics {
  struct Series;

 public:
  struct LaneInfo {
    std::string name;
    int priority = 0;
  };
  // Where a request was when it finished.
  enum class From { waiting, queued, in_flight };
  // rejected: refused by a limit after all (a waiter that found its client at its limit).
  enum class Outcome { succeeded, failed, expired, cancelled, rejected };

  // Opaque handle to a client's series, resolved once per request by client(); stays valid for
  // the Metrics' lifetime. A default-constructed (null) ref records lane counters only.
  class ClientRef {
   public:
    ClientRef() = default;
    explicit operator bool() const noexcept { return s_ != nullptr; }
    friend bool operator==(ClientRef, ClientRef) = default;

   private:
    friend class Metrics;
    explicit ClientRef(Series* s) noexcept : s_(s) {}
    Series* s_ = nullptr;
  };

  explicit Metrics(std::vector<LaneInfo> lanes, std::size_t max_clients = 1000);
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  ClientRef client(std::string_view name);  // resolve or create (or "_other")

  // Recording. `lane` indexes the lanes given to the constructor; an out-of-range lane makes the
  // call a no-op. Each call updates the lane's and the client's series.
  void submitted(std::size_t lane, ClientRef c);   // submitted++
  void rejected(std::size_t lane, ClientRef c);    // rejected++ (refused admission)
  void waiting(std::size_t lane, ClientRef c);     // waiting++ (backpressure: waits for room)
  void enqueued(std::size_t lane, ClientRef c, bool was_waiting);  // depth++ (waiting-- if so)
  // depth--, in_flight++, started++, queue_wait recorded.
  void started(std::size_t lane, ClientRef c, std::chrono::nanoseconds queue_wait);
  void requeued(std::size_t lane, ClientRef c);    // in_flight--, depth++, retried++
  void rate_limited(std::size_t lane, ClientRef c);  // rate_limited++ (provider said 429/503/529)
  // limiter_wait recorded: a started request's wait for the rate limiter before its call.
  void limiter_wait(std::size_t lane, ClientRef c, std::chrono::nanoseconds d);
  // Outcome counter++, then by `from`: in_flight: in_flight--, and a success or failure
  // counted toward throughput at `at` (default: now); queued: depth--; waiting: waiting--
  // (`at` ignored unless in_flight). service_time (its last call's) recorded unless it is
  // `no_call`: the request made no call (e.g. it ended at the rate limiter, or in the queue
  // before its first attempt).
  static constexpr std::chrono::nanoseconds no_call = std::chrono::nanoseconds::min();
  void finished(std::size_t lane, ClientRef c, Outcome o, From from,
                std::chrono::nanoseconds service_time,
                std::chrono::steady_clock::time_point at = {});

  MetricsSnapshot snapshot() const;  // any thread
  // As at `now` (throughput and uptime; the counters are as they are): for tests.
  MetricsSnapshot snapshot(std::chrono::steady_clock::time_point now) const;

 private:
  struct Histogram;
  static LatencyHistogram load(const Histogram& h) noexcept;
  std::int64_t second_of(std::chrono::steady_clock::time_point t) const noexcept;  // since start_
  // second_of(t), at least 0, from the last one's bounds when t is in the same second.
  std::int64_t second_to_record(std::chrono::steady_clock::time_point t) noexcept;
  template <class F>
  void update(std::size_t lane, ClientRef c, F&& f);

  mutable std::mutex mu_;  // clients_: inserts and snapshots
  std::vector<LaneInfo> lane_info_;
  std::vector<Series> lanes_;                    // Series is complete in metrics.cpp
  // Looked up once per request: hashed (a std::map compared names ~log2(clients) times).
  // Series are heap nodes, so a ClientRef survives rehashing.
  std::unordered_map<std::string, std::unique_ptr<Series>, detail::string_hash, std::equal_to<>>
      clients_;
  detail::name_cache<Series*> recent_clients_;  // in front of clients_; the recorder's only
  // Names recorded under another name ("_other" past max_clients, or their U+FFFD spelling):
  // found here without the lock. The recorder's only; emptied when it reaches max_aliases.
  std::unordered_map<std::string, Series*, detail::string_hash, std::equal_to<>> aliases_;
  static constexpr std::size_t max_aliases = 65'536;
  std::size_t max_clients_;
  std::size_t named_clients_ = 0;  // clients with their own series (excludes "_other")
  std::chrono::steady_clock::time_point start_;
  std::int64_t second_ = 0;  // the recorder's: the second of the last call's end, and its start
  std::chrono::steady_clock::time_point second_begin_ = start_;
};

}  // namespace laneq
