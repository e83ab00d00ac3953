#include "mock_api/header_values.hpp"

#include <ctime>

namespace laneq::mock {

namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) noexcept { return a <= 0 ? 0 : (a + b - 1) / b; }

}  // namespace

std::string format_go_duration(std::chrono::nanoseconds d) {
  const std::int64_t ms = ceil_div(d.count(), 1'000'000);
  if (ms == 0) return "0s";
  std::string out;
  if (ms < 1000) {
    out = std::to_string(ms);
    out += "ms";
    return out;
  }
  const std::int64_t h = ms / 3'600'000;
  const std::int64_t m = ms / 60'000 % 60;
  const std::int64_t s = ms / 1000 % 60;
  const std::int64_t frac = ms % 1000;
  if (h > 0) {
    out += std::to_string(h);
    out += 'h';
  }
  if (h > 0 || m > 0) {
    out += std::to_string(m);
    out += 'm';
  }
  out += std::to_string(s);
  if (frac > 0) {
    std::string f = std::to_string(frac);
    f.insert(0, 3 - f.size(), '0');
    while (f.back() == '0') f.pop_back();
    out += '.';
    out += f;
  }
  out += 's';
  return out;
}

std::string format_rfc3339(std::chrono::system_clock::time_point t) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ceil_div(ns, 1'000'000'000));
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string format_seconds_ceil(std::chrono::nanoseconds d) {
  return std::to_string(ceil_div(d.count(), 1'000'000'000));
}

std::string format_millis_ceil(std::chrono::nanoseconds d) {
  return std::to_string(ceil_div(d.count(), 1'000'000));
}

}  // namespace laneq::mock
