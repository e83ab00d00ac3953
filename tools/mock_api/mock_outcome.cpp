#include "mock_api/mock_outcome.hpp"

#include <array>
#include <stdexcept>
#include <string>
#include <utility>

namespace laneq::mock {

namespace {

constexpr std::array<std::pair<OutcomeKind, std::string_view>, 10> kinds{{
    {OutcomeKind::ok, "ok"},
    {OutcomeKind::error, "error"},
    {OutcomeKind::rate_limit, "rate_limit"},
    {OutcomeKind::insufficient_quota, "insufficient_quota"},
    {OutcomeKind::too_large, "too_large"},
    {OutcomeKind::reset, "reset"},
    {OutcomeKind::malformed, "malformed"},
    {OutcomeKind::stall, "stall"},
    {OutcomeKind::stream_error, "stream_error"},
    {OutcomeKind::stream_cut, "stream_cut"},
}};

[[noreturn]] void bad(const std::string& what) {
  throw std::invalid_argument("script outcome: " + what);
}

// Durations are bounded so that they convert to nanoseconds (and add to a clock) safely.
constexpr std::int64_t max_delay_ms = 86'400'000;  // a day

// An unsigned above the int64 range reads as negative here: refused as below `min` too.
std::int64_t int_in(const nlohmann::json& v, const char* key, std::int64_t min, std::int64_t max) {
  if (!v.is_number_integer() || v.get<std::int64_t>() < min || v.get<std::int64_t>() > max)
    bad(std::string(key) + " must be an integer in " + std::to_string(min) + ".." + std::to_string(max));
  return v.get<std::int64_t>();
}

bool boolean(const nlohmann::json& v, const char* key) {
  if (!v.is_boolean()) bad(std::string(key) + " must be true or false");
  return v.get<bool>();
}

}  // namespace

std::string_view to_string(OutcomeKind kind) noexcept {
  for (const auto& [k, name] : kinds)
    if (k == kind) return name;
  return "unknown";
}

MockOutcome outcome_from_json(const nlohmann::json& j) {
  if (!j.is_object()) bad("each outcome must be a JSON object");
  MockOutcome o;
  std::optional<int> status;
  bool has_kind = false;
  for (const auto& [key, v] : j.items()) {
    if (key == "kind") {
      if (!v.is_string()) bad("kind must be a string");
      const auto name = v.get<std::string>();
      bool found = false;
      for (const auto& [k, n] : kinds)
        if (n == name) o.kind = k, found = true;
      if (!found) bad("unknown kind \"" + name + "\"");
      has_kind = true;
    } else if (key == "status") {
      status = static_cast<int>(int_in(v, "status", 200, 599));  // not get<int>: it narrows
    } else if (key == "type") {
      if (!v.is_string() || (v != "requests" && v != "tokens"))
        bad("type must be \"requests\" or \"tokens\"");
      o.rate_limit_type = v.get<std::string>();
    } else if (key == "retry_after_ms") {
      o.retry_after_ms = std::chrono::milliseconds(int_in(v, "retry_after_ms", 0, max_delay_ms));
    } else if (key == "retry_after") {
      o.retry_after = std::chrono::seconds(int_in(v, "retry_after", 0, max_delay_ms / 1000));
    } else if (key == "headers") {
      o.rate_limit_headers = boolean(v, "headers");
    } else if (key == "should_retry") {
      o.should_retry = boolean(v, "should_retry");
    } else if (key == "latency_ms") {
      o.latency = std::chrono::milliseconds(int_in(v, "latency_ms", 0, max_delay_ms));
    } else if (key == "message") {
      if (!v.is_string()) bad("message must be a string");
      o.message = v.get<std::string>();
    } else {
      bad("unknown key \"" + key + "\"");
    }
  }
  if (!has_kind && status)
    o.kind = *status == 200 ? OutcomeKind::ok
             : *status == 429 ? OutcomeKind::rate_limit
                              : OutcomeKind::error;
  if (o.kind == OutcomeKind::error && status) o.status = *status;
  validate(o);
  return o;
}

void validate(const MockOutcome& o) {
  if (to_string(o.kind) == "unknown") bad("unknown kind " + std::to_string(int(o.kind)));
  if (o.kind == OutcomeKind::error && (o.status < 400 || o.status > 599))
    bad("kind error needs a status in 400..599");
  if (o.rate_limit_type != "requests" && o.rate_limit_type != "tokens")
    bad("type must be \"requests\" or \"tokens\"");
  const auto in_range = [](auto d, std::chrono::milliseconds max) {
    return d.count() >= 0 && d <= max;
  };
  const std::chrono::milliseconds day{max_delay_ms};
  if (o.latency && !in_range(*o.latency, day)) bad("latency_ms must be in 0..86400000");
  if (o.retry_after_ms && !in_range(*o.retry_after_ms, day))
    bad("retry_after_ms must be in 0..86400000");
  if (o.retry_after && !in_range(*o.retry_after, day)) bad("retry_after must be in 0..86400");
  // Sent with error answers only: on any other outcome they would be dropped without a word.
  const bool error_answer = o.kind == OutcomeKind::error || o.kind == OutcomeKind::rate_limit ||
                            o.kind == OutcomeKind::insufficient_quota ||
                            o.kind == OutcomeKind::too_large;
  if ((o.retry_after_ms || o.retry_after) && !error_answer)
    bad("retry_after_ms and retry_after need an error outcome (error, rate_limit, "
        "insufficient_quota, too_large)");
}

std::vector<MockOutcome> outcomes_from_json(const nlohmann::json& j) {
  std::vector<MockOutcome> out;
  if (j.is_array()) {
    for (const auto& item : j) out.push_back(outcome_from_json(item));
  } else {
    out.push_back(outcome_from_json(j));
  }
  return out;
}

}  // namespace laneq::mock
