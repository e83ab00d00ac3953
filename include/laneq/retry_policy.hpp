#pragma once
// Retry policy: which failed calls are tried again, and after how long. Pure logic (no Asio, no
// clock, no RNG of its own: the caller passes a uniform random number), so every rule is tested
// deterministically.
//
// Rules, in order:
//   1. local outcomes (cancelled, shutting_down, exceeds_rate_limit, unknown_lane,
//      invalid_config, internal; a queue deadline) and provider answers that can never succeed
//      as sent (quota_exceeded, request_too_large) are never retried, whatever the server says;
//   2. an `x-should-retry: true|false` header is the server's explicit word and wins over the
//      status (not the one of a 200 whose stream later failed: it spoke of the stream's start);
//   3. auth, bad_request and malformed_response are not retried;
//   4. HTTP 408, 409, 429 and 500-599 (incl. 529) are retried; other statuses are not;
//   5. without a status, connection failures (network) and provider timeouts are retried.
// The queue's own deadline is checked before this (a request past it is never retried); an
// errc::timeout reaching this function comes from a Provider of the caller's that reports one
// (CurlTransport reports its connect and transfer timeouts as errc::network: retried alike).
// Delay: `retry-after-ms` / `retry-after` when the server sent one above 0 (up to max_retry_after;
// beyond it the request fails rather than hold a worker's place for minutes), else for a 429
// the reset time of an exhausted rate-limit bucket, else exponential backoff with full jitter:
// uniform [0, min(max_delay, base_delay * 2^(attempt-1))), or from 3/4 of that bound up when
// the wait holds every worker (pause_all: rate_limited, overloaded, a 529; the official SDKs'
// least, which they use for every retry). A 429 without retry-after whose
// headers show a bucket with less left than this request needs (but not 0) also holds this
// request, and only this one, until that bucket has refilled enough (see RetryDecision).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <system_error>

#include "laneq/rate_cost.hpp"
#include "laneq/rate_limit_headers.hpp"
#include "laneq/request.hpp"

namespace laneq {

// The longest delay a retry waits, whatever the policy or the server says (a "forever" written
// as milliseconds::max() must not overflow the clock).
inline constexpr std::chrono::milliseconds longest_delay = std::chrono::hours(24 * 365);

struct RetryPolicy {
  // Attempts in all, the first included; 1 = never retry. Default 3, like the official SDKs'
  // two retries.
  std::uint32_t max_attempts = 3;
  std::chrono::milliseconds base_delay{500};
  std::chrono::milliseconds max_delay{8000};     // backoff's cap; longest_delay at most
  std::chrono::milliseconds max_retry_after{60'000};

  // max_retry_after in nanoseconds, at most longest_delay.
  std::chrono::nanoseconds retry_after_limit() const noexcept {
    return std::chrono::nanoseconds(std::min(max_retry_after, longest_delay));
  }
};

struct RetryDecision {
  bool retry = false;
  std::chrono::nanoseconds delay{0};  // until this request's next attempt
  // The provider's whole budget is exhausted (429 rate limit, 529/503 overloaded): every worker
  // should hold off for `pause`, not just this request.
  bool pause_all = false;
  // How long every worker holds off (with pause_all; else 0). Equal to `delay`, except after a
  // 429 without retry-after where a bucket has some units left but fewer than this request
  // needs: smaller requests may still fit, so the others hold off only the backoff (or an
  // exhausted bucket's reset), while this request waits for its bucket (delay > pause).
  std::chrono::nanoseconds pause{0};
  bool from_server = false;  // delay came from retry-after / a reset header
};

// Whether `ec` (+ HTTP status and the server's x-should-retry) is worth another attempt,
// ignoring the attempt count.
bool is_retryable(std::error_code ec, int status, std::optional<bool> should_retry) noexcept;

// `attempts` = attempts made so far (>= 1). `uniform01` in [0, 1) drives the jitter. `need` is
// what the failed request costs the budgets (its estimate; tokens buckets are compared with
// input + output). `delay`, `pause_all` and `pause` are filled even when `retry` is false: a 429
// that is not retried (attempts used up, or the server said x-should-retry: false) still tells
// every other request to hold off.
RetryDecision decide_retry(const RetryPolicy& policy, std::uint32_t attempts, std::error_code ec,
                           int status, const RateLimitInfo& info, double uniform01,
                           const RateCost& need = {}) noexcept;

}  // namespace laneq
