#pragma once
// SimulatedProvider: a Provider that answers after a timer, for tests, samples and benchmarks.
// Latency = fixed + uniform jitter (or a function of the request); usage = a rough prompt
// estimate + a configurable completion size; failures injected at a rate or scripted per call.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <string>

#include "laneq/error.hpp"
#include "laneq/provider.hpp"

namespace laneq {

// Validated by the constructor: std::system_error(errc::invalid_config) names the bad field.
struct SimulatedProviderConfig {
  std::chrono::nanoseconds latency{0};       // fixed part, 0..100 years; 0 = next loop turn
  std::chrono::nanoseconds jitter{0};        // + uniform [0, jitter), 0..100 years
  // Overrides latency/jitter when set (e.g. per-model latency); called under a lock. A throw
  // from it or from usage_fn fails that call with errc::internal (no HTTP status); a scripted
  // outcome then stays for the next call.
  std::function<std::chrono::nanoseconds(const Request&, std::mt19937_64&)> latency_fn{};
  std::int64_t output_tokens = 16;           // completion size, >= 0 (capped by max_tokens)
  // Overrides the usage reported on success (e.g. a random completion size); under a lock.
  std::function<Usage(const Request&, std::mt19937_64&)> usage_fn{};
  double failure_rate = 0.0;                 // share of calls failing with `failure`, 0..1
  std::error_code failure = errc::server_error;  // an error when failure_rate > 0
  int failure_status = 0;                    // 0 = the failure's usual status (see below)
  std::uint64_t seed = 42;
};

// One scripted answer; consumed in order before random behaviour applies.
struct SimulatedOutcome {
  std::error_code error{};                   // empty = success
  // HTTP status; 0 = the outcome's usual one: 200 for success and malformed_response,
  // rate_limited / quota_exceeded 429, overloaded 529, server_error 500, auth 401,
  // bad_request 400, request_too_large 413, anything else (network, timeout, ...) none (0).
  int status = 0;
  Headers headers{};
  std::optional<std::chrono::nanoseconds> latency{};
};

class SimulatedProvider final : public Provider {
 public:
  explicit SimulatedProvider(SimulatedProviderConfig config = {});

  void async_call(const Request& request, const CallContext& ctx,
                  CallCompletion done) noexcept override;
  const char* name() const noexcept override { return "simulated"; }

  void script(SimulatedOutcome outcome);     // thread-safe

  // Observations (thread-safe).
  std::uint64_t calls() const noexcept { return calls_.load(); }
  std::uint64_t aborted() const noexcept { return aborted_.load(); }
  std::int64_t in_flight() const noexcept {
    const auto done = answered_.load();  // first: calls_ read after it is never smaller
    return static_cast<std::int64_t>(calls_.load() - done);
  }
  std::int64_t max_in_flight() const noexcept { return max_in_flight_.load(); }

 private:
  struct plan {
    std::chrono::nanoseconds latency;
    SimulatedOutcome outcome;
    std::optional<Usage> usage{};
    std::string thrown{};  // latency_fn or usage_fn threw: the call fails with `internal`
  };
  plan next_plan(const Request& request);

  SimulatedProviderConfig cfg_;
  std::mutex mu_;
  std::mt19937_64 rng_;
  std::deque<SimulatedOutcome> script_;
  std::atomic<std::size_t> scripted_{0};  // script_.size(), readable without the lock
  // Two counters, not a calls and an in-flight one: a call costs two atomic increments, not three.
  std::atomic<std::uint64_t> calls_{0};
  std::atomic<std::uint64_t> answered_{0};  // calls that reported (in flight = calls - answered)
  std::atomic<std::uint64_t> aborted_{0};
  std::atomic<std::int64_t> max_in_flight_{0};
};

}  // namespace laneq
