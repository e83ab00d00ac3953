// Rate-limit header parsing: Go durations, RFC 3339, HTTP-date, and the provider header sets.
#include <catch2/catch.hpp>

#include <cctype>
#include <random>
#include <string>
#include <vector>

#include "laneq/rate_limit_headers.hpp"

using namespace std::chrono_literals;
using laneq::Headers;
using laneq::parse_go_duration;
using laneq::parse_http_date;
using laneq::parse_rate_limit_headers;
using laneq::parse_rfc3339;
using laneq::RateLimitInfo;
using std::chrono::nanoseconds;
using SysTime = std::chrono::system_clock::time_point;

namespace {

SysTime at(std::int64_t unix_seconds, std::chrono::nanoseconds frac = 0ns) {
  return SysTime(std::chrono::duration_cast<SysTime::duration>(std::chrono::seconds(unix_seconds) + frac));
}

// 2024-05-01T12:34:56Z
constexpr std::int64_t may1 = 1714566896;

bool digit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

TEST_CASE("Go durations parse every unit, fractions and compound forms") {
  CHECK(parse_go_duration("1s") == nanoseconds(1s));
  CHECK(parse_go_duration("6m0s") == nanoseconds(6min));
  CHECK(parse_go_duration("20ms") == nanoseconds(20ms));
  CHECK(parse_go_duration("20m") == nanoseconds(20min));
  CHECK(parse_go_duration("1h2m3.5s") == nanoseconds(1h + 2min + 3500ms));
  CHECK(parse_go_duration("0.5s") == nanoseconds(500ms));
  CHECK(parse_go_duration(".5s") == nanoseconds(500ms));
  CHECK(parse_go_duration("850us") == nanoseconds(850us));
  CHECK(parse_go_duration("850\xC2\xB5s") == nanoseconds(850us));
  CHECK(parse_go_duration("3ns") == 3ns);
  CHECK(parse_go_duration("0s") == 0ns);
  CHECK(parse_go_duration("0") == 0ns);
  CHECK(parse_go_duration("1.5h") == nanoseconds(90min));
  CHECK(parse_go_duration("12ms") == nanoseconds(12ms));
  CHECK(parse_go_duration("1m30.25s") == nanoseconds(90250ms));
  CHECK(parse_go_duration("2562047h") == nanoseconds(2562047h));
}

TEST_CASE("Malformed Go durations are rejected") {
  for (const char* bad : {"", "s", "1", "10", "-1s", "+1s", "1x", "1sec", "1 s", " 1s", "1s ",
                          "1..5s", ".s", "1.2.3s", "ms", "1m-2s", "abc", "1e3s", "2562048h",
                          "99999999999999999999ns", "9223372036854775808ns"}) {
    INFO(bad);
    CHECK_FALSE(parse_go_duration(bad));
  }
  CHECK(parse_go_duration("9223372036854775807ns") == nanoseconds::max());
}

TEST_CASE("RFC 3339 timestamps parse with Z, fractional seconds and offsets") {
  CHECK(parse_rfc3339("2024-05-01T12:34:56Z") == at(may1));
  CHECK(parse_rfc3339("2024-05-01t12:34:56z") == at(may1));
  CHECK(parse_rfc3339("2024-05-01T12:34:56.5Z") == at(may1, 500ms));
  CHECK(parse_rfc3339("2024-05-01T12:34:56.123456789Z") == at(may1, 123456789ns));
  CHECK(parse_rfc3339("2024-05-01T12:34:56.1234567891234Z") == at(may1, 123456789ns));
  CHECK(parse_rfc3339("2024-05-01T14:34:56+02:00") == at(may1));
  CHECK(parse_rfc3339("2024-05-01T07:04:56-05:30") == at(may1));
  CHECK(parse_rfc3339("2024-05-01T12:34:56+00:00") == at(may1));
  CHECK(parse_rfc3339("1970-01-01T00:00:00Z") == at(0));
  CHECK(parse_rfc3339("2000-03-01T00:00:00Z") == at(951868800));
}

TEST_CASE("RFC 3339 accepts February 29 only in leap years") {
  CHECK(parse_rfc3339("2024-02-29T00:00:00Z") == at(1709164800));
  CHECK(parse_rfc3339("2000-02-29T00:00:00Z"));
  CHECK_FALSE(parse_rfc3339("2023-02-29T00:00:00Z"));
  CHECK_FALSE(parse_rfc3339("1900-02-29T00:00:00Z"));
  CHECK(parse_rfc3339("2024-03-01T00:00:00Z") == at(1709164800 + 86400));
}

TEST_CASE("Malformed RFC 3339 timestamps are rejected") {
  for (const char* bad : {"", "2024-13-01T00:00:00Z", "2024-00-01T00:00:00Z",
                          "2024-04-31T00:00:00Z", "2024-05-00T00:00:00Z", "2024-05-01 12:34:56Z",
                          "2024-05-0112:34:56Z", "2024-05-01T24:00:00Z", "2024-05-01T12:60:00Z",
                          "2024-05-01T12:34:61Z", "2024-05-01T12:34:56", "2024-05-01T12:34:56Zjunk",
                          "2024-05-01T12:34:56Z ", "2024-05-01T12:34:56.Z", "2024-05-01T12:34:56+0200",
                          "2024-05-01T12:34:56+02", "2024-05-01T12:34:56+24:00", "24-05-01T12:34:56Z",
                          "2024-5-1T12:34:56Z", "2024-05-01", "garbage"}) {
    INFO(bad);
    CHECK_FALSE(parse_rfc3339(bad));
  }
}

TEST_CASE("RFC 3339 times beyond the clock's range saturate - a far-off reset is a long wait, "
          "not none",
          "[headers]") {
  CHECK(parse_rfc3339("9999-12-31T23:59:59Z") == std::chrono::system_clock::time_point::max());
  CHECK(parse_rfc3339("0000-01-01T00:00:00Z") == std::chrono::system_clock::time_point::min());
  CHECK(parse_rate_limit_headers({{"anthropic-ratelimit-tokens-reset", "2300-01-01T00:00:00Z"}},
                                 std::chrono::system_clock::time_point{})
            .tokens.reset_after == std::chrono::nanoseconds::max());
}

TEST_CASE("HTTP dates parse in the three forms RFC 9110 has recipients accept") {
  CHECK(parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT") == at(784111777));
  CHECK(parse_http_date("Wed, 01 May 2024 12:34:56 GMT") == at(may1));
  // the obsolete forms: RFC 850 and asctime
  CHECK(parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT") == at(784111777));
  CHECK(parse_http_date("Wednesday, 01-May-24 12:34:56 GMT") == at(may1));
  CHECK(parse_http_date("Sun Nov  6 08:49:37 1994") == at(784111777));
  CHECK(parse_http_date("Wed May  1 12:34:56 2024") == at(may1));
  CHECK(parse_http_date("Wed May 01 12:34:56 2024") == at(may1));
  for (const char* bad : {"", "Sun, 06 Nov 1994 08:49:37 UTC", "Sunday, 06-Nov-1994 08:49:37 GMT",
                          "Sun, 06-Nov-94 08:49:37 GMT", "Sunday, 06 Nov 94 08:49:37 GMT",
                          "Sunday, 06-Nov-94 08:49:37 UTC", "Sun Nov 6 08:49:37 1994",
                          "Sun Nov  6 08:49:37 94", "Sun Foo  6 08:49:37 1994",
                          "Sun Nov  0 08:49:37 1994", "Sun Nov  6 08-49-37 1994",
                          "Sun, 06 Foo 1994 08:49:37 GMT",
                          "Sun, 32 Nov 1994 08:49:37 GMT", "Xyz, 06 Nov 1994 08:49:37 GMT",
                          "Sun, 06 Nov 1994 08:49:37 GMT ", "Sun, 6 Nov 1994 08:49:37 GMT",
                          "Sun, 06 Nov 1994 25:49:37 GMT"}) {
    INFO(bad);
    CHECK_FALSE(parse_http_date(bad));
  }
}

TEST_CASE("The full OpenAI header set fills requests and tokens") {
  const Headers h{{"x-ratelimit-limit-requests", "500"},
                  {"x-ratelimit-limit-tokens", "30000"},
                  {"x-ratelimit-remaining-requests", "499"},
                  {"x-ratelimit-remaining-tokens", "29000"},
                  {"x-ratelimit-reset-requests", "120ms"},
                  {"x-ratelimit-reset-tokens", "6m0s"}};
  const RateLimitInfo r = parse_rate_limit_headers(h, at(may1));
  CHECK(r.requests.limit == 500);
  CHECK(r.requests.remaining == 499);
  CHECK(r.requests.reset_after == nanoseconds(120ms));
  CHECK(r.tokens.limit == 30000);
  CHECK(r.tokens.remaining == 29000);
  CHECK(r.tokens.reset_after == nanoseconds(6min));
  CHECK_FALSE(r.input_tokens.limit);
  CHECK_FALSE(r.output_tokens.remaining);
  CHECK_FALSE(r.retry_after);
  CHECK_FALSE(r.should_retry);
}

TEST_CASE("Azure OpenAI's resets in whole seconds with no unit, and its x-rate-limit-* spelling, "
          "are read - a 429 that carries only them is not retried blind") {
  // openai/openai-python#937: a 429 with x-rate-limit-reset-tokens: 55 and no retry-after
  const Headers azure{{"x-rate-limit-reset-tokens", "55"},
                      {"x-ratelimit-remaining-requests", "0"},
                      {"x-ratelimit-reset-requests", "1.5"}};
  const RateLimitInfo r = parse_rate_limit_headers(azure, at(may1));
  CHECK(r.tokens.reset_after == nanoseconds(55s));
  CHECK(r.requests.remaining == 0);
  CHECK(r.requests.reset_after == nanoseconds(1500ms));
  CHECK(parse_rate_limit_headers({{"x-ratelimit-reset-tokens", "55"}}, at(may1))
            .tokens.reset_after == nanoseconds(55s));
  for (const char* bad : {"-1", "55 s", "55x", "x55", ""}) {
    INFO(bad);
    CHECK_FALSE(parse_rate_limit_headers({{"x-ratelimit-reset-tokens", bad}}, at(may1))
                    .tokens.reset_after);
  }
  CHECK_FALSE(parse_rate_limit_headers({{"x-rate-limit-other-tokens", "5"}}, at(may1)).tokens.any());
}

TEST_CASE("The full Anthropic header set fills all four buckets with resets relative to now") {
  const Headers h{{"anthropic-ratelimit-requests-limit", "50"},
                  {"anthropic-ratelimit-requests-remaining", "49"},
                  {"anthropic-ratelimit-requests-reset", "2024-05-01T12:35:26Z"},
                  {"anthropic-ratelimit-tokens-limit", "100000"},
                  {"anthropic-ratelimit-tokens-remaining", "99123"},
                  {"anthropic-ratelimit-tokens-reset", "2024-05-01T12:34:56.5Z"},
                  {"anthropic-ratelimit-input-tokens-limit", "80000"},
                  {"anthropic-ratelimit-input-tokens-remaining", "79456"},
                  {"anthropic-ratelimit-input-tokens-reset", "2024-05-01T12:00:00Z"},
                  {"anthropic-ratelimit-output-tokens-limit", "20000"},
                  {"anthropic-ratelimit-output-tokens-remaining", "19999"},
                  {"anthropic-ratelimit-output-tokens-reset", "2024-05-01T14:35:26+02:00"}};
  const RateLimitInfo r = parse_rate_limit_headers(h, at(may1));
  CHECK(r.requests.limit == 50);
  CHECK(r.requests.remaining == 49);
  CHECK(r.requests.reset_after == nanoseconds(30s));
  CHECK(r.tokens.limit == 100000);
  CHECK(r.tokens.remaining == 99123);
  CHECK(r.tokens.reset_after == nanoseconds(500ms));
  CHECK(r.input_tokens.limit == 80000);
  CHECK(r.input_tokens.remaining == 79456);
  CHECK(r.input_tokens.reset_after == 0ns);  // in the past
  CHECK(r.output_tokens.limit == 20000);
  CHECK(r.output_tokens.remaining == 19999);
  CHECK(r.output_tokens.reset_after == nanoseconds(30s));
}

TEST_CASE("Anthropic token counts rounded to the nearest thousand are read as the least they can "
          "mean, request counts and unrounded values as they are") {
  const auto remaining = [](const char* bucket, const char* value) {
    const auto r = parse_rate_limit_headers(
        {{std::string("anthropic-ratelimit-") + bucket + "-remaining", value}}, at(may1));
    return std::string(bucket) == "requests"       ? r.requests.remaining
           : std::string(bucket) == "input-tokens" ? r.input_tokens.remaining
           : std::string(bucket) == "output-tokens" ? r.output_tokens.remaining
                                                    : r.tokens.remaining;
  };
  for (const char* bucket : {"tokens", "input-tokens", "output-tokens"}) {
    INFO(bucket);
    CHECK(remaining(bucket, "1000") == 500);    // 500..1499 before rounding
    CHECK(remaining(bucket, "79000") == 78500);
    CHECK(remaining(bucket, "0") == 0);         // 0..499: still read as none left
    CHECK(remaining(bucket, "1234") == 1234);   // not rounded
    CHECK(remaining(bucket, "999") == 999);
  }
  CHECK(remaining("requests", "1000") == 1000);  // request counts are exact
  // OpenAI's token counts are exact.
  CHECK(parse_rate_limit_headers({{"x-ratelimit-remaining-tokens", "1000"}}, at(may1))
            .tokens.remaining == 1000);
}

TEST_CASE("retry-after is read as seconds or as an HTTP-date, and retry-after-ms wins") {
  const SysTime now = at(784111777);  // Sun, 06 Nov 1994 08:49:37 GMT
  CHECK(parse_rate_limit_headers({{"retry-after", "7"}}, now).retry_after == nanoseconds(7s));
  CHECK(parse_rate_limit_headers({{"retry-after", "1.5"}}, now).retry_after ==
        nanoseconds(1500ms));
  CHECK(parse_rate_limit_headers({{"retry-after", "Sun, 06 Nov 1994 08:50:07 GMT"}}, now)
            .retry_after == nanoseconds(30s));
  CHECK(parse_rate_limit_headers({{"retry-after", "Sun, 06 Nov 1994 08:00:00 GMT"}}, now)
            .retry_after == 0ns);
  CHECK(parse_rate_limit_headers({{"retry-after-ms", "250"}}, now).retry_after ==
        nanoseconds(250ms));
  CHECK(parse_rate_limit_headers({{"retry-after-ms", "0.5"}}, now).retry_after ==
        nanoseconds(500us));
  CHECK(parse_rate_limit_headers({{"retry-after", "7"}, {"retry-after-ms", "250"}}, now)
            .retry_after == nanoseconds(250ms));
  // A malformed retry-after-ms falls back to retry-after.
  CHECK(parse_rate_limit_headers({{"retry-after-ms", "soon"}, {"retry-after", "7"}}, now)
            .retry_after == nanoseconds(7s));
  CHECK_FALSE(parse_rate_limit_headers({{"retry-after", "-3"}}, now).retry_after);
  CHECK_FALSE(parse_rate_limit_headers({{"retry-after-ms", "-3"}}, now).retry_after);
  CHECK_FALSE(parse_rate_limit_headers({{"retry-after", "later"}}, now).retry_after);
  // too large for nanoseconds: a very long time, not none
  CHECK(parse_rate_limit_headers({{"retry-after", "99999999999999"}}, now).retry_after ==
        nanoseconds::max());
  CHECK(parse_rate_limit_headers({{"retry-after-ms", "99999999999999999"}}, now).retry_after ==
        nanoseconds::max());
}

TEST_CASE("x-should-retry is read as a case-insensitive boolean") {
  const SysTime now = at(may1);
  CHECK(parse_rate_limit_headers({{"x-should-retry", "true"}}, now).should_retry == true);
  CHECK(parse_rate_limit_headers({{"x-should-retry", "FALSE"}}, now).should_retry == false);
  CHECK(parse_rate_limit_headers({{"x-should-retry", " True "}}, now).should_retry == true);
  CHECK_FALSE(parse_rate_limit_headers({{"x-should-retry", "yes"}}, now).should_retry);
  CHECK_FALSE(parse_rate_limit_headers({{"x-should-retry", "1"}}, now).should_retry);
}

TEST_CASE("Header names are matched regardless of case and values are trimmed") {
  const Headers h{{"X-RateLimit-Limit-Requests", " 500 "},
                  {"X-RATELIMIT-RESET-TOKENS", "\t1s"},
                  {"Anthropic-RateLimit-Output-Tokens-Remaining", "42"},
                  {"Retry-After", " 3 "},
                  {"X-Should-Retry", "false"}};
  const RateLimitInfo r = parse_rate_limit_headers(h, at(may1));
  CHECK(r.requests.limit == 500);
  CHECK(r.tokens.reset_after == nanoseconds(1s));
  CHECK(r.output_tokens.remaining == 42);
  CHECK(r.retry_after == nanoseconds(3s));
  CHECK(r.should_retry == false);
}

TEST_CASE("Malformed header values are ignored and leave their fields empty") {
  const Headers h{{"x-ratelimit-limit-requests", "-1"},
                  {"x-ratelimit-remaining-requests", "12abc"},
                  {"x-ratelimit-reset-requests", "soon"},
                  {"x-ratelimit-limit-tokens", "99999999999999999999999"},
                  {"x-ratelimit-remaining-tokens", ""},
                  {"x-ratelimit-reset-tokens", "-1s"},
                  {"anthropic-ratelimit-input-tokens-limit", "1.5"},
                  {"anthropic-ratelimit-input-tokens-remaining", "+3"},
                  {"anthropic-ratelimit-input-tokens-reset", "2024-13-01T00:00:00Z"},
                  {"retry-after", "Sun, 06 Nov 1994"},
                  {"x-should-retry", ""}};
  const RateLimitInfo r = parse_rate_limit_headers(h, at(may1));
  CHECK_FALSE(r.requests.limit);
  CHECK_FALSE(r.requests.remaining);
  CHECK_FALSE(r.requests.reset_after);
  CHECK_FALSE(r.tokens.limit);
  CHECK_FALSE(r.tokens.remaining);
  CHECK_FALSE(r.tokens.reset_after);
  CHECK_FALSE(r.input_tokens.limit);
  CHECK_FALSE(r.input_tokens.remaining);
  CHECK_FALSE(r.input_tokens.reset_after);
  CHECK_FALSE(r.retry_after);
  CHECK_FALSE(r.should_retry);
  CHECK(parse_rate_limit_headers({}, at(may1)).requests.limit == std::nullopt);
}

TEST_CASE("Random byte strings never crash or throw any parser") {
  std::mt19937 rng(20240501);
  // Mostly characters that appear in valid values, so the parsers get deep, plus any byte.
  const std::string alphabet = "0123456789.:-+TZtzsmhun\xC2\xB5 ,GMTSunNov";
  const std::vector<std::string> names{
      "x-ratelimit-limit-requests", "x-ratelimit-reset-tokens", "anthropic-ratelimit-tokens-reset",
      "anthropic-ratelimit-input-tokens-limit", "retry-after", "retry-after-ms", "x-should-retry"};
  std::uniform_int_distribution<int> len(0, 40);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<std::size_t> pick(0, alphabet.size() - 1);
  std::uniform_int_distribution<std::size_t> pick_name(0, names.size() - 1);
  const SysTime now = at(may1);
  for (int i = 0; i < 20000; ++i) {
    std::string s;
    const int n = len(rng);
    for (int j = 0; j < n; ++j)
      s.push_back(byte(rng) < 128 ? alphabet[pick(rng)] : static_cast<char>(byte(rng)));
    // The parsers are noexcept (a throw would terminate): what is checked is what they accept.
    INFO("input: " << s);
    if (const auto d = parse_go_duration(s)) {  // unsigned, and ends in a unit (or is "0")
      CHECK(d->count() >= 0);
      CHECK((s == "0" || ((digit(s.front()) || s.front() == '.') &&
                          (s.back() == 's' || s.back() == 'm' || s.back() == 'h'))));
    }
    if (parse_rfc3339(s))  // the fixed date-time layout, then Z or an offset's minutes
      CHECK((s.size() >= 20 && s[4] == '-' && s[7] == '-' && (s[10] == 'T' || s[10] == 't') &&
             s[13] == ':' && s[16] == ':' &&
             (s.back() == 'Z' || s.back() == 'z' || digit(s.back()))));
    if (parse_http_date(s)) CHECK((s.size() == 24 || s.ends_with(" GMT")));  // asctime, or GMT
    const Headers h{{names[pick_name(rng)], s}, {s, s}};
    const auto info = parse_rate_limit_headers(h, now);
    for (const auto* b : {&info.requests, &info.tokens, &info.input_tokens, &info.output_tokens}) {
      if (b->limit) CHECK(*b->limit >= 0);
      if (b->remaining) CHECK(*b->remaining >= 0);
      if (b->reset_after) CHECK(b->reset_after->count() >= 0);
    }
    if (info.retry_after) CHECK(info.retry_after->count() >= 0);
  }
  // each HTTP-date form, cut short (always refused) or one byte changed (parsed only when a digit
  // changed)
  for (const std::string valid : {"Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT",
                                  "Sun Nov  6 08:49:37 1994"}) {
    std::uniform_int_distribution<std::size_t> at_pos(0, valid.size() - 1);
    for (int i = 0; i < 3000; ++i) {
      std::string s = valid;
      if (i % 3 == 0) {
        s.resize(at_pos(rng));
        CHECK_FALSE(parse_http_date(s));  // each form has a fixed length: a cut one is refused
        continue;
      }
      const std::size_t j = at_pos(rng);
      s[j] = byte(rng) < 128 ? alphabet[pick(rng)] : static_cast<char>(byte(rng));
      // Names and separators admit no one-byte change: only a digit changed into another (or
      // asctime's padding space into a day's tens digit) can still parse.
      if (s[j] != valid[j] && parse_http_date(s)) {
        INFO("input: " << s);
        CHECK(digit(s[j]));
        CHECK((digit(valid[j]) || (valid.size() == 24 && j == 8)));
      }
    }
  }
  // RFC 3339 (Anthropic's resets), one byte changed: parsed only when a digit became another
  // digit, or a letter changed case, or an offset's sign flipped. Random strings above almost
  // never reach its accepting path; these do (counted, so the loop cannot check nothing).
  int accepted = 0;
  for (const std::string valid : {"2024-05-01T12:00:00Z", "2024-05-01T12:00:00.123456+02:00",
                                  "2024-05-01t23:59:59-07:30"}) {
    std::uniform_int_distribution<std::size_t> at_pos(0, valid.size() - 1);
    for (int i = 0; i < 3000; ++i) {
      std::string s = valid;
      const std::size_t j = at_pos(rng);
      s[j] = byte(rng) < 128 ? alphabet[pick(rng)] : static_cast<char>(byte(rng));
      if (s[j] == valid[j] || !parse_rfc3339(s)) continue;
      ++accepted;
      INFO("input: " << s);
      const auto lower = [](char c) { return static_cast<char>(c | 0x20); };
      CHECK(((digit(s[j]) && digit(valid[j])) ||
             (std::isalpha(static_cast<unsigned char>(valid[j])) && lower(s[j]) == lower(valid[j])) ||
             ((s[j] == '+' || s[j] == '-') && (valid[j] == '+' || valid[j] == '-'))));
    }
  }
  CHECK(accepted > 0);
}
