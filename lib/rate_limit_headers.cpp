#include "laneq/rate_limit_headers.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstddef>
#include <limits>
#include <string>
#include <system_error>

#include "ascii_case.hpp"

namespace laneq {

namespace {

using std::chrono::nanoseconds;
using SysTime = std::chrono::system_clock::time_point;
using SysDur = std::chrono::system_clock::duration;

constexpr std::uint64_t kMaxNs = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());

constexpr bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }

using detail::iequals;
constexpr auto lower = detail::ascii_lower;

std::string_view trim(std::string_view s) noexcept {
  constexpr std::string_view ws = " \t\r\n";
  const auto b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

// ---- decimal numbers: [0-9]*(\.[0-9]*)? with at least one digit (Go's rules) ----

struct Number {
  std::uint64_t whole = 0;
  bool whole_overflow = false;
  std::uint64_t frac = 0;   // fraction digits kept (as an integer) ...
  double scale = 1.0;       // ... over this power of ten
};

bool scan_number(std::string_view s, std::size_t& pos, Number& n) noexcept {
  bool any = false;
  while (pos < s.size() && is_digit(s[pos])) {
    any = true;
    const auto d = static_cast<std::uint64_t>(s[pos] - '0');
    if (n.whole > (kMaxNs - d) / 10) n.whole_overflow = true;
    else n.whole = n.whole * 10 + d;
    ++pos;
  }
  if (pos < s.size() && s[pos] == '.') {
    ++pos;
    bool overflow = false;
    while (pos < s.size() && is_digit(s[pos])) {
      any = true;
      const auto d = static_cast<std::uint64_t>(s[pos] - '0');
      if (!overflow && n.frac <= 100'000'000'000'000'000ULL) {
        n.frac = n.frac * 10 + d;
        n.scale *= 10.0;
      } else {
        overflow = true;  // further digits are below any unit's resolution: drop them
      }
      ++pos;
    }
  }
  return any;
}

// n * unit, in nanoseconds; nullopt when it does not fit in int64.
std::optional<std::uint64_t> scale_number(const Number& n, std::uint64_t unit) noexcept {
  if (n.whole_overflow || n.whole > kMaxNs / unit) return std::nullopt;
  std::uint64_t v = n.whole * unit;
  if (n.frac > 0) {
    const double extra = static_cast<double>(n.frac) * (static_cast<double>(unit) / n.scale);
    // extra < unit <= 3.6e12, so the conversion is safe.
    v += static_cast<std::uint64_t>(extra);
    if (v > kMaxNs) return std::nullopt;
  }
  return v;
}

// A whole string that is one non-negative decimal number, times `unit` nanoseconds.
// A well-formed number too large for nanoseconds saturates (a retry-after of centuries means "a
// very long time", not "none", which would retry at once).
std::optional<nanoseconds> parse_decimal(std::string_view s, std::uint64_t unit) noexcept {
  std::size_t pos = 0;
  Number n;
  if (!scan_number(s, pos, n) || pos != s.size()) return std::nullopt;
  const auto v = scale_number(n, unit);
  if (!v) return nanoseconds::max();
  return nanoseconds(static_cast<std::int64_t>(*v));
}

std::optional<std::int64_t> parse_non_negative_int(std::string_view s) noexcept {
  std::int64_t v = 0;
  const auto* end = s.data() + s.size();
  const auto [ptr, ec] = std::from_chars(s.data(), end, v);
  if (s.empty() || ec != std::errc{} || ptr != end || v < 0) return std::nullopt;
  return v;
}

// ---- civil dates ----

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
constexpr std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) noexcept {
  y -= m <= 2 ? 1 : 0;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);                  // [0, 399]
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;   // [0, 365]
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;            // [0, 146096]
  return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}
static_assert(days_from_civil(1970, 1, 1) == 0);
static_assert(days_from_civil(2000, 3, 1) == 11017);

constexpr bool is_leap(std::int64_t y) noexcept {
  return y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
}

constexpr unsigned days_in_month(std::int64_t y, unsigned m) noexcept {
  constexpr std::array<unsigned, 12> days{31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return (m == 2 && is_leap(y)) ? 29 : days[m - 1];
}

// Reads exactly `count` digits at s[pos].
bool fixed_digits(std::string_view s, std::size_t pos, std::size_t count, unsigned& out) noexcept {
  if (pos + count > s.size()) return false;
  unsigned v = 0;
  for (std::size_t i = 0; i < count; ++i) {
    if (!is_digit(s[pos + i])) return false;
    v = v * 10 + static_cast<unsigned>(s[pos + i] - '0');
  }
  out = v;
  return true;
}

struct Civil {
  unsigned year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
};

bool valid(const Civil& c) noexcept {
  return c.month >= 1 && c.month <= 12 && c.day >= 1 && c.day <= days_in_month(c.year, c.month) &&
         c.hour <= 23 && c.minute <= 59 && c.second <= 60;  // 60: leap second
}

// Seconds since the epoch (UTC) + sub-second nanoseconds -> a system_clock time point, saturated
// to its max() / min() beyond the representable range.
std::optional<SysTime> make_time(const Civil& c, std::int64_t offset_seconds,
                                 std::int64_t nanos) noexcept {
  const std::int64_t secs = days_from_civil(c.year, c.month, c.day) * 86400 +
                            std::int64_t{c.hour} * 3600 + std::int64_t{c.minute} * 60 +
                            std::int64_t{c.second} - offset_seconds;
  constexpr std::int64_t max_secs =
      std::chrono::duration_cast<std::chrono::seconds>(SysDur::max()).count() - 1;
  constexpr std::int64_t min_secs =
      std::chrono::duration_cast<std::chrono::seconds>(SysDur::min()).count() + 1;
  // Beyond what the clock holds: the end of time (a reset that far off is "a very long time",
  // as parse_decimal reads centuries), or its start (long past).
  if (secs > max_secs) return SysTime::max();
  if (secs < min_secs) return SysTime::min();
  return SysTime(std::chrono::duration_cast<SysDur>(std::chrono::seconds(secs)) +
                 std::chrono::duration_cast<SysDur>(nanoseconds(nanos)));
}

// max(0, t - now) in nanoseconds, saturating instead of overflowing.
nanoseconds until(SysTime t, SysTime now) noexcept {
  const auto a = t.time_since_epoch().count();
  const auto b = now.time_since_epoch().count();
  if (a <= b) return nanoseconds(0);
  using Rep = SysDur::rep;
  constexpr Rep rep_max = std::numeric_limits<Rep>::max();
  if (b < 0 && a > rep_max + b) return nanoseconds::max();
  const SysDur diff(a - b);
  if (diff > std::chrono::duration_cast<SysDur>(nanoseconds::max())) return nanoseconds::max();
  return std::chrono::duration_cast<nanoseconds>(diff);
}

// ---- header look-up ----

// The header names a parse reads, lower case; a slot per name holds the first such header's
// trimmed value, so one pass over a response's headers (a dozen or more, most of them about
// something else) finds them all.
enum slot : std::size_t {
  oa_limit_requests, oa_remaining_requests, oa_reset_requests,
  oa_limit_tokens, oa_remaining_tokens, oa_reset_tokens,
  an_requests_limit, an_requests_remaining, an_requests_reset,
  an_tokens_limit, an_tokens_remaining, an_tokens_reset,
  an_input_limit, an_input_remaining, an_input_reset,
  an_output_limit, an_output_remaining, an_output_reset,
  retry_after_ms, retry_after, should_retry, slot_count
};

constexpr std::array<std::string_view, slot_count> slot_names = {
    "x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests",
    "x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens",
    "anthropic-ratelimit-requests-limit", "anthropic-ratelimit-requests-remaining",
    "anthropic-ratelimit-requests-reset", "anthropic-ratelimit-tokens-limit",
    "anthropic-ratelimit-tokens-remaining", "anthropic-ratelimit-tokens-reset",
    "anthropic-ratelimit-input-tokens-limit", "anthropic-ratelimit-input-tokens-remaining",
    "anthropic-ratelimit-input-tokens-reset", "anthropic-ratelimit-output-tokens-limit",
    "anthropic-ratelimit-output-tokens-remaining", "anthropic-ratelimit-output-tokens-reset",
    "retry-after-ms", "retry-after", "x-should-retry"};

using Slots = std::array<std::optional<std::string_view>, slot_count>;

// limit -> 0, remaining -> 1, reset -> 2, anything else -> 3: a slot's offset in its bucket.
constexpr std::size_t kind_of(std::string_view k) noexcept {
  return k == "limit" ? 0 : k == "remaining" ? 1 : k == "reset" ? 2 : 3;
}

// A lower-case name's slot, or slot_count: read off the name's parts rather than compared with
// every name (a response carries six or more of them on every call).
constexpr std::size_t find_slot(std::string_view name) noexcept {
  constexpr std::string_view openai = "x-ratelimit-", anthropic = "anthropic-ratelimit-";
  constexpr std::string_view azure = "x-rate-limit-";  // Azure OpenAI's spelling of some
  if (name.starts_with(openai) || name.starts_with(azure)) {
    // x-ratelimit-{limit,remaining,reset}-{requests,tokens}
    const auto rest = name.substr(name.starts_with(openai) ? openai.size() : azure.size());
    const auto dash = rest.find('-');
    if (dash == std::string_view::npos) return slot_count;
    const std::size_t kind = kind_of(rest.substr(0, dash));
    const auto what = rest.substr(dash + 1);
    const std::size_t base = what == "requests" ? oa_limit_requests
                             : what == "tokens" ? oa_limit_tokens
                                                : slot_count;
    return kind < 3 && base < slot_count ? base + kind : slot_count;
  }
  if (name.starts_with(anthropic)) {
    // anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}
    const auto rest = name.substr(anthropic.size());
    const auto dash = rest.rfind('-');
    if (dash == std::string_view::npos) return slot_count;
    const std::size_t kind = kind_of(rest.substr(dash + 1));
    const auto what = rest.substr(0, dash);
    const std::size_t family = what == "requests"        ? 0
                               : what == "tokens"        ? 1
                               : what == "input-tokens"  ? 2
                               : what == "output-tokens" ? 3
                                                         : 4;
    return kind < 3 && family < 4 ? an_requests_limit + 3 * family + kind : slot_count;
  }
  for (std::size_t i = retry_after_ms; i < slot_count; ++i)
    if (name == slot_names[i]) return i;
  return slot_count;
}

constexpr bool every_name_finds_its_slot() {
  for (std::size_t i = 0; i < slot_count; ++i)
    if (find_slot(slot_names[i]) != i) return false;
  return find_slot("x-ratelimit-limit-other") == slot_count &&
         find_slot("anthropic-ratelimit-tokens-used") == slot_count &&
         find_slot("x-ratelimit-") == slot_count && find_slot("anthropic-ratelimit-") == slot_count;
}
static_assert(every_name_finds_its_slot());

// Fills `slots`; false when no header of interest is there (most answers of a simulated or
// unlimited server), so the parse can stop at once.
bool collect(const Headers& headers, Slots& slots) noexcept {
  bool any = false;
  char buf[48];  // the longest name we read has 43 characters
  for (const auto& [k, v] : headers) {
    if (k.empty() || k.size() > sizeof buf) continue;
    const char c = lower(k[0]);  // every name we read starts with a, r or x
    if (c != 'a' && c != 'r' && c != 'x') continue;
    std::string_view name = k;  // servers mostly send lower case: copy only when needed
    if (std::any_of(k.begin(), k.end(), [](char ch) { return ch >= 'A' && ch <= 'Z'; })) {
      for (std::size_t i = 0; i < k.size(); ++i) buf[i] = lower(k[i]);
      name = std::string_view(buf, k.size());
    }
    const std::size_t i = find_slot(name);
    if (i < slot_count && !slots[i]) {
      slots[i] = trim(v);  // the first of a name counts
      any = true;
    }
  }
  return any;
}

template <class T, class F>
void set_if(std::optional<T>& field, const std::optional<std::string_view>& value, F parse) noexcept {
  if (!value) return;
  if (auto parsed = parse(*value)) field = *parsed;
}

}  // namespace

std::optional<nanoseconds> parse_go_duration(std::string_view s) noexcept {
  if (s.empty()) return std::nullopt;
  if (s == "0") return nanoseconds(0);
  std::uint64_t total = 0;
  std::size_t pos = 0;
  while (pos < s.size()) {
    Number n;
    if (!scan_number(s, pos, n)) return std::nullopt;
    const std::size_t unit_start = pos;
    while (pos < s.size() && s[pos] != '.' && !is_digit(s[pos])) ++pos;
    const std::string_view unit_name = s.substr(unit_start, pos - unit_start);
    std::uint64_t unit = 0;
    if (unit_name == "ns") unit = 1;
    else if (unit_name == "us" || unit_name == "\xC2\xB5s" /* µ U+00B5 */ ||
             unit_name == "\xCE\xBCs" /* μ U+03BC */)
      unit = 1'000;
    else if (unit_name == "ms") unit = 1'000'000;
    else if (unit_name == "s") unit = 1'000'000'000;
    else if (unit_name == "m") unit = 60'000'000'000;
    else if (unit_name == "h") unit = 3'600'000'000'000;
    else return std::nullopt;  // missing or unknown unit
    const auto v = scale_number(n, unit);
    if (!v || *v > kMaxNs - total) return std::nullopt;
    total += *v;
  }
  return nanoseconds(static_cast<std::int64_t>(total));
}

std::optional<SysTime> parse_rfc3339(std::string_view s) noexcept {
  // YYYY-MM-DDTHH:MM:SS[.f+](Z|+hh:mm|-hh:mm)
  Civil c;
  if (s.size() < 20 || !fixed_digits(s, 0, 4, c.year) || s[4] != '-' ||
      !fixed_digits(s, 5, 2, c.month) || s[7] != '-' || !fixed_digits(s, 8, 2, c.day) ||
      (s[10] != 'T' && s[10] != 't') || !fixed_digits(s, 11, 2, c.hour) || s[13] != ':' ||
      !fixed_digits(s, 14, 2, c.minute) || s[16] != ':' || !fixed_digits(s, 17, 2, c.second))
    return std::nullopt;
  if (!valid(c)) return std::nullopt;
  std::size_t pos = 19;
  std::int64_t nanos = 0;
  if (s[pos] == '.') {
    ++pos;
    const std::size_t start = pos;
    std::int64_t scale = 100'000'000;
    while (pos < s.size() && is_digit(s[pos])) {
      nanos += (s[pos] - '0') * scale;  // digits past the 9th add 0
      scale /= 10;
      ++pos;
    }
    if (pos == start) return std::nullopt;
  }
  if (pos >= s.size()) return std::nullopt;
  std::int64_t offset = 0;
  if (s[pos] == 'Z' || s[pos] == 'z') {
    ++pos;
  } else if (s[pos] == '+' || s[pos] == '-') {
    unsigned oh = 0, om = 0;
    if (!fixed_digits(s, pos + 1, 2, oh) || pos + 3 >= s.size() || s[pos + 3] != ':' ||
        !fixed_digits(s, pos + 4, 2, om) || oh > 23 || om > 59)
      return std::nullopt;
    offset = (s[pos] == '-' ? -1 : 1) * (std::int64_t{oh} * 3600 + std::int64_t{om} * 60);
    pos += 6;
  } else {
    return std::nullopt;
  }
  if (pos != s.size()) return std::nullopt;
  return make_time(c, offset, nanos);
}

namespace {

constexpr std::array<std::string_view, 12> month_names{
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

unsigned month_at(std::string_view s, std::size_t pos) noexcept {  // 0: none
  for (unsigned i = 0; i < month_names.size(); ++i)
    if (s.substr(pos, 3) == month_names[i]) return i + 1;
  return 0;
}

bool time_of_day_at(std::string_view s, std::size_t pos, Civil& c) noexcept {  // "08:49:37"
  return fixed_digits(s, pos, 2, c.hour) && s.substr(pos + 2, 1) == ":" &&
         fixed_digits(s, pos + 3, 2, c.minute) && s.substr(pos + 5, 1) == ":" &&
         fixed_digits(s, pos + 6, 2, c.second);
}

// The day name a date starts with: its short form, or the long one RFC 850 dates use.
std::size_t day_name_length(std::string_view s, bool long_form) noexcept {
  static constexpr std::array<std::string_view, 7> short_names{"Mon", "Tue", "Wed", "Thu",
                                                               "Fri", "Sat", "Sun"};
  static constexpr std::array<std::string_view, 7> long_names{
      "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"};
  for (const auto d : long_form ? long_names : short_names)
    if (s.starts_with(d)) return d.size();
  return 0;
}

}  // namespace

std::optional<SysTime> parse_http_date(std::string_view s) noexcept {
  Civil c;
  if (s.size() == 29 && s[3] == ',') {
    // IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT
    //              0123456789012345678901234567890
    if (day_name_length(s, false) != 3 || s.substr(3, 2) != ", " || s[7] != ' ' ||
        s[11] != ' ' || s[16] != ' ' || s.substr(25) != " GMT" || !fixed_digits(s, 5, 2, c.day) ||
        !fixed_digits(s, 12, 4, c.year) || !time_of_day_at(s, 17, c))
      return std::nullopt;
    c.month = month_at(s, 8);
  } else if (s.size() == 24) {
    // asctime: Sun Nov  6 08:49:37 1994 (the day padded with a space)
    //          012345678901234567890123
    if (day_name_length(s, false) != 3 || s[3] != ' ' || s[7] != ' ' || s[10] != ' ' ||
        s[19] != ' ' || !time_of_day_at(s, 11, c) || !fixed_digits(s, 20, 4, c.year))
      return std::nullopt;
    c.month = month_at(s, 4);
    if (s[8] == ' ') {
      if (!fixed_digits(s, 9, 1, c.day)) return std::nullopt;
    } else if (!fixed_digits(s, 8, 2, c.day)) {
      return std::nullopt;
    }
  } else {
    // RFC 850: Sunday, 06-Nov-94 08:49:37 GMT; a two-digit year is 1970-2069 (the dates read
    // here, retry-after, are within minutes of now)
    const std::size_t n = day_name_length(s, true);
    unsigned yy = 0;
    if (n == 0 || s.size() != n + 24 || s.substr(n, 2) != ", " || s[n + 4] != '-' ||
        s[n + 8] != '-' || s[n + 11] != ' ' || s.substr(n + 20) != " GMT" ||
        !fixed_digits(s, n + 2, 2, c.day) || !fixed_digits(s, n + 9, 2, yy) ||
        !time_of_day_at(s, n + 12, c))
      return std::nullopt;
    c.month = month_at(s, n + 5);
    c.year = yy >= 70 ? 1900 + yy : 2000 + yy;
  }
  if (!valid(c)) return std::nullopt;
  return make_time(c, 0, 0);
}

RateLimitInfo parse_rate_limit_headers(const Headers& headers, SysTime now) noexcept {
  RateLimitInfo info;
  Slots h;
  if (!collect(headers, h)) return info;

  // OpenAI: x-ratelimit-{limit,remaining,reset}-{requests,tokens}; resets are Go durations.
  // Anthropic: anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,
  // remaining,reset}; resets are RFC 3339 times.
  const auto rfc3339_reset = [now](std::string_view v) -> std::optional<nanoseconds> {
    if (auto t = parse_rfc3339(v)) return until(*t, now);
    return std::nullopt;
  };
  // A Go duration; Azure OpenAI sends whole seconds ("55"), with no unit.
  const auto openai_reset = [](std::string_view v) -> std::optional<nanoseconds> {
    if (auto d = parse_go_duration(v)) return d;
    if (!v.empty() && is_digit(v[0])) return parse_decimal(v, 1'000'000'000);
    return std::nullopt;
  };
  const std::array<std::pair<slot, RateLimitInfo::Bucket*>, 2> openai{{
      {oa_limit_requests, &info.requests}, {oa_limit_tokens, &info.tokens}}};
  for (const auto& [first, bucket] : openai) {
    set_if(bucket->limit, h[first], parse_non_negative_int);
    set_if(bucket->remaining, h[first + 1], parse_non_negative_int);
    set_if(bucket->reset_after, h[first + 2], openai_reset);
  }
  const std::array<std::pair<slot, RateLimitInfo::Bucket*>, 4> anthropic{{
      {an_requests_limit, &info.requests},
      {an_tokens_limit, &info.tokens},
      {an_input_limit, &info.input_tokens},
      {an_output_limit, &info.output_tokens}}};
  for (const auto& [first, bucket] : anthropic) {
    set_if(bucket->limit, h[first], parse_non_negative_int);
    // Token counts are rounded to the nearest thousand (Anthropic's rate-limit docs): 1000 left
    // may be 500. The least a value can mean is what a limiter may count on; a value that is no
    // multiple of 1000 was not rounded. Request counts are exact. (`tokens` is not the binding
    // itself: lambdas capture structured bindings only from Clang 16.)
    const bool tokens = first != an_requests_limit;
    set_if(bucket->remaining, h[first + 1], [tokens](std::string_view v) {
      auto n = parse_non_negative_int(v);
      if (n && tokens && *n > 0 && *n % 1000 == 0) *n -= 500;
      return n;
    });
    set_if(bucket->reset_after, h[first + 2], rfc3339_reset);
  }

  // retry-after-ms wins over retry-after.
  set_if(info.retry_after, h[retry_after_ms],
         [](std::string_view v) { return parse_decimal(v, 1'000'000); });
  if (!info.retry_after) {
    set_if(info.retry_after, h[retry_after],
           [now](std::string_view v) -> std::optional<nanoseconds> {
             if (!v.empty() && (is_digit(v[0]) || v[0] == '.')) return parse_decimal(v, 1'000'000'000);
             if (auto t = parse_http_date(v)) return until(*t, now);
             return std::nullopt;
           });
  }

  set_if(info.should_retry, h[should_retry], [](std::string_view v) -> std::optional<bool> {
    if (iequals(v, "true")) return true;
    if (iequals(v, "false")) return false;
    return std::nullopt;
  });
  return info;
}

}  // namespace laneq
