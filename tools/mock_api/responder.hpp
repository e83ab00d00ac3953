#pragma once
// Responder: the sans-IO core of the mock server. Given a complete request (and `now`) it decides
// the answer — a Plan: status, headers, body or stream events, latency, and whether to reset,
// stall or cut the connection — from the script, the API key's token buckets and the seeded
// random injection. The session (mock_server.cpp) only carries the plan out. Thread-safe.
#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "mock_api/http_request.hpp"
#include "mock_api/key_limits.hpp"
#include "mock_api/mock_config.hpp"
#include "mock_api/mock_outcome.hpp"
#include "mock_api/mock_stats.hpp"

namespace laneq::mock {

using SystemTime = std::chrono::system_clock::time_point;

struct Plan {
  enum class Kind {
    reply,  // the whole answer (events non-empty: a chunked event stream)
    reset,  // close with SO_LINGER 0 (RST), no answer
    stall,  // head + part of the answer, then wait for the client to close
    cut,    // head + part of the answer, then close
  };
  Kind kind = Kind::reply;
  int status = 200;
  HeaderList headers{};               // without framing headers (the writer adds those)
  std::string body{};                 // a plain answer
  std::vector<std::string> events{};  // a stream: one chunk per SSE event
  std::size_t partial_events = 0;     // stall / cut of a stream: events sent first
  std::chrono::nanoseconds latency{0};
  std::chrono::nanoseconds chunk_delay{0};
  bool close = false;                 // "Connection: close", then close
  // An HTTP/1.0 client gets a stream without chunked framing (RFC 9112 forbids it); closing
  // the connection ends it (`close` is set too).
  bool unframed = false;

  // For Responder::finish (API calls only).
  bool api_call = false;
  std::string api_key{};
  Charge refund{};                    // given back to the key's buckets when the call ends
  bool success = false;               // a 200 answer with usage
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;
};

class Responder {
 public:
  explicit Responder(MockConfig config);  // validate()s it

  // Also counts the call in the stats (API paths only).
  Plan plan(const HttpRequest& request, SteadyTime now, SystemTime system_now);
  // The call of `plan` ended; `delivered`: the whole answer was written.
  void finish(const Plan& plan, bool delivered, SteadyTime now);

  MockStats& stats() noexcept { return stats_; }
  const MockStats& stats() const noexcept { return stats_; }

  // Buckets restart full; the script and stats stay.
  void set_config(MockConfig config);
  MockConfig config() const;
  void script(std::vector<MockOutcome> outcomes);  // appended
  std::size_t scripted() const;
  void reset();  // stats, buckets and script

 private:
  Plan plan_api_call(const HttpRequest& request, SteadyTime now, SystemTime system_now);
  Plan control(const HttpRequest& request);

  mutable std::mutex mu_;
  MockConfig cfg_;
  std::mt19937_64 rng_;
  std::deque<MockOutcome> script_;
  std::unordered_map<std::string, KeyLimits> limits_;
  std::uint64_t next_id_ = 1;
  MockStats stats_;
};

}  // namespace laneq::mock
