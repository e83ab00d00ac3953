#pragma once
// MockStats: what the mock server saw and sent, for tests and benchmarks to assert against.
// Thread-safe (one mutex); to_json() is the GET /stats body; wait() blocks until a predicate over
// that JSON holds, so tests need not poll or sleep.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

namespace laneq::mock {

// The request headers and body fields counted per API call (empty = absent).
struct CallInfo {
  std::string_view path{};
  std::string_view model{};
  std::string_view priority{};    // x-priority
  std::string_view client{};      // x-client
  std::string_view api_key{};
  std::string_view request_id{};  // x-request-id
  std::string_view laneq_id{};    // x-laneq-id
};

class MockStats {
 public:
  explicit MockStats(std::size_t max_keys) : max_keys_(max_keys) {}

  void set_max_keys(std::size_t n);
  void connection_opened();
  void connection_closed();
  // An API call was read completely (every /v1/* request, answered or not).
  void call_started(const CallInfo& info, std::chrono::steady_clock::time_point now);
  void call_finished();           // its answer was sent, cut, reset or abandoned
  void status_sent(int status);   // a status line was written (or an answer planned, for resets)
  void reset_sent();
  void injected(std::string_view kind);
  void closed_in_flight();        // the client closed the connection before the answer was complete
  // A request's head was complete and its body still to come: the server waited for the body
  // (after its interim 100, if it sent one). Once per request.
  void waited_for_body();
  void usage(std::int64_t prompt_tokens, std::int64_t completion_tokens);

  nlohmann::json to_json() const;
  // Clears the counts; current connections and calls in flight stay (they are still open).
  void reset();
  // Blocks until pred(to_json()) holds or `timeout` passes; returns the last verdict.
  bool wait(const std::function<bool(const nlohmann::json&)>& pred,
            std::chrono::milliseconds timeout) const;

 private:
  using Counts = std::map<std::string, std::uint64_t, std::less<>>;
  struct Window {
    std::int64_t span_ms;
    std::deque<std::pair<std::int64_t, std::uint64_t>> slots{};  // (ms, starts in that ms)
    std::uint64_t sum = 0;
    std::uint64_t max = 0;
    void add(std::int64_t ms);
  };

  void count(Counts& counts, std::string_view key);
  nlohmann::json to_json_locked() const;
  void changed() { cv_.notify_all(); }

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::size_t max_keys_;
  std::uint64_t requests_ = 0;
  Counts by_path_, by_model_, by_priority_, by_client_, by_api_key_, by_request_id_, by_status_,
      injected_;
  std::uint64_t duplicate_ids_ = 0;
  std::uint64_t sent_429_ = 0, sent_5xx_ = 0, resets_ = 0;
  std::int64_t prompt_tokens_ = 0, completion_tokens_ = 0;
  Window w1s_{1000}, w60s_{60'000};
  std::int64_t in_flight_ = 0, peak_in_flight_ = 0;
  std::int64_t connections_ = 0, peak_connections_ = 0;
  std::uint64_t accepted_ = 0, closed_in_flight_ = 0, waited_for_body_ = 0;
};

}  // namespace laneq::mock
