#pragma once
// Formats of rate-limit header values: Go durations (OpenAI x-ratelimit-reset-*), RFC 3339
// times (Anthropic anthropic-ratelimit-*-reset) and retry-after seconds. Each rounds up, so a
// client that waits what it is told is never early.
#include <chrono>
#include <string>

namespace laneq::mock {

// Millisecond precision, as Go's time.Duration prints it: "0s", "20ms", "1s", "1.5s", "6m0s",
// "1h2m3.5s".
std::string format_go_duration(std::chrono::nanoseconds d);

// "2024-05-01T12:34:56Z", rounded up to the second.
std::string format_rfc3339(std::chrono::system_clock::time_point t);

// Whole seconds, rounded up ("retry-after").
std::string format_seconds_ceil(std::chrono::nanoseconds d);
// Whole milliseconds, rounded up ("retry-after-ms").
std::string format_millis_ceil(std::chrono::nanoseconds d);

}  // namespace laneq::mock
