#pragma once
// Parsing of provider rate-limit headers (OpenAI, Anthropic, retry-after, x-should-retry).
// Pure logic: no Asio, no clock reads (the caller passes `now`). Nothing here throws; a malformed
// value is ignored (its field stays nullopt).
#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

#include "laneq/request.hpp"

namespace laneq {

// A Go duration as OpenAI sends it in `x-ratelimit-reset-*`: "1s", "6m0s", "20ms", "1h2m3.5s",
// "0.5s", "850us" / "850µs", "3ns", "0s" (and a bare "0"). Units h, m, s, ms, us, µs, ns; each
// component may be fractional. Empty, signed, unit-less, unknown unit, garbage or a value that
// overflows std::chrono::nanoseconds -> nullopt.
std::optional<std::chrono::nanoseconds> parse_go_duration(std::string_view s) noexcept;

// RFC 3339 date-time as Anthropic sends it in `anthropic-ratelimit-*-reset`:
// "2024-05-01T12:34:56Z", with optional fractional seconds (kept to the nanosecond) and "Z" or a
// "+hh:mm" / "-hh:mm" offset. Dates are validated (month, day of month incl. leap years). Times
// beyond what system_clock::time_point holds (after 2262 with libstdc++) saturate to its max()
// (before: min()): a reset that far off means a very long wait, not none.
std::optional<std::chrono::system_clock::time_point> parse_rfc3339(std::string_view s) noexcept;

// HTTP-date in the three forms RFC 9110 (5.6.7) has recipients accept: IMF-fixdate
// "Sun, 06 Nov 1994 08:49:37 GMT", the obsolete RFC 850 "Sunday, 06-Nov-94 08:49:37 GMT" (a
// two-digit year is 1970-2069) and asctime "Sun Nov  6 08:49:37 1994".
std::optional<std::chrono::system_clock::time_point> parse_http_date(std::string_view s) noexcept;

// What a response's headers say about the provider's rate limits. Every field is optional: a
// header that is absent or malformed leaves its field empty.
struct RateLimitInfo {
  struct Bucket {
    std::optional<std::int64_t> limit{};
    std::optional<std::int64_t> remaining{};
    std::optional<std::chrono::nanoseconds> reset_after{};  // relative to `now`, >= 0
    bool any() const noexcept { return limit || remaining || reset_after; }
  };
  Bucket requests{};
  Bucket tokens{};
  Bucket input_tokens{};    // Anthropic only
  Bucket output_tokens{};   // Anthropic only
  std::optional<std::chrono::nanoseconds> retry_after{};  // >= 0; retry-after-ms wins
  std::optional<bool> should_retry{};                     // x-should-retry
};

// Reads (header names ignore case, values are trimmed):
//   x-ratelimit-{limit,remaining,reset}-{requests,tokens}                (reset: Go duration,
//     or seconds with no unit as Azure OpenAI sends them; Azure's x-rate-limit-* too)
//   anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}
//                                               (reset: RFC 3339 -> max(0, reset - now))
//   retry-after-ms (ms, may be fractional) over retry-after (seconds, or HTTP-date -> max(0, d - now))
//   x-should-retry: true | false (any case)
// When both OpenAI and Anthropic headers fill the same field, the Anthropic one wins. With a
// repeated header the first occurrence counts. Limits/remaining are non-negative integers.
// Anthropic rounds a token `remaining` to the nearest thousand: a multiple of 1000 other than 0
// is read as the least it can mean (1000 -> 500), so nothing counts on tokens that may not be
// there; any other value was not rounded and is kept.
RateLimitInfo parse_rate_limit_headers(const Headers& headers,
                                       std::chrono::system_clock::time_point now) noexcept;

}  // namespace laneq
