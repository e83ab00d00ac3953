#include "laneq/retry_policy.hpp"

#include <algorithm>
#include <cmath>

#include "laneq/error.hpp"

namespace laneq {

namespace {

bool is_laneq(std::error_code ec, errc e) noexcept { return ec == make_error_code(e); }

// Outcomes no server's word changes: local ones, and provider answers that can never succeed
// as sent (a billing error, a request too large).
bool never_retried(std::error_code ec) noexcept {
  for (errc e : {errc::cancelled, errc::shutting_down, errc::quota_exceeded,
                 errc::request_too_large, errc::exceeds_rate_limit, errc::unknown_lane,
                 errc::invalid_config, errc::internal})
    if (is_laneq(ec, e)) return true;
  return false;
}

// What the status rule refuses (the server may say otherwise with x-should-retry).
bool refused_by_status(std::error_code ec) noexcept {
  return is_laneq(ec, errc::auth) || is_laneq(ec, errc::bad_request) ||
         is_laneq(ec, errc::malformed_response);
}

// After a 429 without retry-after: how long until a bucket that has some units left, but fewer
// than `need`, holds `need` again. Providers refill their buckets continuously and report the
// time until a bucket is full again, so the wait for `need` is that share of the reset:
// reset x (need - remaining) / (limit - remaining); without a limit, the whole reset. A need
// above the stated limit never fits: waiting would not help (no wait; the backoff stands). An
// exhausted bucket (0 left) is not this: it holds everyone (the pause).
std::chrono::nanoseconds refill_wait(const RateLimitInfo::Bucket& b, std::int64_t need) noexcept {
  if (!b.remaining || *b.remaining <= 0 || *b.remaining >= need || !b.reset_after ||
      b.reset_after->count() <= 0)
    return std::chrono::nanoseconds(0);
  const auto reset = *b.reset_after;
  if (!b.limit) return reset;
  if (*b.limit < need) return std::chrono::nanoseconds(0);
  const long double share = static_cast<long double>(need - *b.remaining) /
                            static_cast<long double>(*b.limit - *b.remaining);
  return std::chrono::nanoseconds(std::llround(static_cast<long double>(reset.count()) * share));
}

// The longest refill_wait over the buckets, each against what the request needs of it, in the
// units the limiter charges (budget_units, token_units). Where the server states input and
// output limits apart (Anthropic), its `tokens` headers show the most restrictive of those,
// not an input + output budget: they are left out, as the limiter leaves them out.
std::chrono::nanoseconds own_bucket_wait(const RateLimitInfo& info, const RateCost& need) noexcept {
  const bool split = info.input_tokens.limit || info.output_tokens.limit;
  const auto tokens =
      split ? std::chrono::nanoseconds(0) : refill_wait(info.tokens, token_units(need));
  return std::max({refill_wait(info.requests, budget_units(need.requests)), tokens,
                   refill_wait(info.input_tokens, budget_units(need.input_tokens)),
                   refill_wait(info.output_tokens, budget_units(need.output_tokens))});
}

}  // namespace

bool is_retryable(std::error_code ec, int status, std::optional<bool> should_retry) noexcept {
  if (!ec) return false;
  if (never_retried(ec)) return false;
  // An error inside a 200 stream (e.g. Anthropic's overloaded_error event): the code decides;
  // the 200's headers (its x-should-retry too) spoke of the stream's start, not of this error.
  if (status >= 200 && status < 300) {
    status = 0;
    should_retry.reset();
  }
  if (should_retry) return *should_retry;
  if (refused_by_status(ec)) return false;
  if (status != 0)
    return status == 408 || status == 409 || status == 429 || (status >= 500 && status <= 599);
  return is_laneq(ec, errc::network) || is_laneq(ec, errc::timeout) ||
         is_laneq(ec, errc::rate_limited) || is_laneq(ec, errc::overloaded) ||
         is_laneq(ec, errc::server_error);
}

RetryDecision decide_retry(const RetryPolicy& policy, std::uint32_t attempts, std::error_code ec,
                           int status, const RateLimitInfo& info, double uniform01,
                           const RateCost& need) noexcept {
  using std::chrono::nanoseconds;
  RetryDecision d;
  const bool rate_limited =
      status == 429 || ((status == 0 || (status >= 200 && status < 300)) &&
                        is_laneq(ec, errc::rate_limited));
  // A billing or size error in a 429 is not a rate limit: it must not hold everyone else.
  const bool not_a_limit = is_laneq(ec, errc::quota_exceeded) || is_laneq(ec, errc::request_too_large);
  d.pause_all = !not_a_limit && (rate_limited || status == 529 || is_laneq(ec, errc::overloaded));

  // retry-after: 0 is no advice (an immediate retry would meet the same limit): like the
  // official SDKs, which take it only when 0 < retry-after, back off instead.
  nanoseconds own{0};  // this request's wait for a bucket it does not fit (not everyone's)
  // (A 2xx's retry-after, as its x-should-retry, spoke of the stream's start, not of an error
  // that came later in it: a proxy may add one to every answer.)
  const bool ok_status = status >= 200 && status < 300;
  if (info.retry_after && info.retry_after->count() > 0 && !ok_status) {
    d.delay = *info.retry_after;
    d.from_server = true;
  } else if (rate_limited) {
    // No retry-after: the reset of a bucket the server reports as exhausted.
    // A reset of 0 (Azure sends "0") is no advice either: back off.
    for (const auto* b : {&info.requests, &info.tokens, &info.input_tokens, &info.output_tokens})
      if (b->remaining && *b->remaining == 0 && b->reset_after && b->reset_after->count() > 0) {
        d.delay = std::max(d.delay, *b->reset_after);
        d.from_server = true;
      }
    own = own_bucket_wait(info, need);
  }
  if (!d.from_server) {
    // Full jitter: uniform [0, min(cap, base * 2^(attempts-1))). In double nanoseconds, the
    // cap at most longest_delay: milliseconds::max() as integer nanoseconds overflowed to a
    // negative cap, which made every retry immediate.
    const double base = static_cast<double>(policy.base_delay.count()) * 1e6;
    const double cap =
        static_cast<double>(std::min(policy.max_delay, longest_delay).count()) * 1e6;
    const double exp = std::min(cap, base * std::ldexp(1.0, static_cast<int>(
                                                               std::clamp<std::uint32_t>(attempts, 1, 63)) - 1));
    const double u = std::clamp(uniform01, 0.0, 1.0);
    // A wait that holds everyone (a 429, 503 or 529 without the server's advice) is at least
    // 3/4 of the back-off, the official SDKs' least: a draw near 0 would have every worker
    // call an overloaded server again within a millisecond.
    const double least = d.pause_all ? 0.75 : 0.0;
    d.delay = nanoseconds(static_cast<nanoseconds::rep>(std::max(0.0, exp * (least + (1 - least) * u))));
  }
  if (d.pause_all) d.pause = d.delay;
  if (own > d.delay) {
    d.delay = own;
    d.from_server = true;
  }

  d.retry = attempts < policy.max_attempts && is_retryable(ec, status, info.should_retry);
  if (d.retry && d.from_server && d.delay > policy.retry_after_limit()) d.retry = false;
  return d;
}

}  // namespace laneq
