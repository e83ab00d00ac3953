#pragma once
// MockOutcome: one forced answer. Scripted outcomes (MockServer::script, POST /control/script)
// are used, in order, by the next API calls, before rate limits and random injection apply.
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace laneq::mock {

enum class OutcomeKind {
  ok,                  // a normal answer
  error,               // `status` (400..599) with the provider's error body for it
  rate_limit,          // 429 rate_limit_exceeded / rate_limit_error
  insufficient_quota,  // OpenAI 429 insufficient_quota (Anthropic: 400 credit balance too low)
  too_large,           // Anthropic 413 request_too_large (OpenAI: 429 "Request too large")
  reset,               // the connection is reset (RST), no answer
  malformed,           // 200 with a body that is not valid JSON (streams: a broken event)
  stall,               // headers + part of the body, then nothing until the client closes
  stream_error,        // streams: an error event after some content (plain calls: 500)
  stream_cut,          // closed before the final/usage events (plain calls: body cut short)
};

std::string_view to_string(OutcomeKind kind) noexcept;

struct MockOutcome {
  OutcomeKind kind = OutcomeKind::ok;
  int status = 500;                 // for `error`
  std::string rate_limit_type = "requests";  // OpenAI 429 error.type: "requests" or "tokens"
  // retry-after-ms, plus retry-after in whole seconds rounded up; sent with an error answer
  // (error, rate_limit, insufficient_quota, too_large), ignored with any other kind.
  std::optional<std::chrono::milliseconds> retry_after_ms{};
  std::optional<std::chrono::seconds> retry_after{};  // retry-after only (wins for that header)
  bool rate_limit_headers = true;   // false: no rate-limit or retry-after headers on this answer
  std::optional<bool> should_retry{};              // x-should-retry (overrides MockConfig)
  std::optional<std::chrono::milliseconds> latency{};  // overrides MockConfig latency + jitter
  std::string message{};            // overrides the error message
};

// From JSON, e.g. {"status":429,"retry_after_ms":300}, {"kind":"reset"},
// {"kind":"error","status":503,"should_retry":false}, {"status":200,"latency_ms":50}.
// Keys: kind, status, type, retry_after_ms, retry_after (s), headers, should_retry, latency_ms,
// message. Without "kind": status 200 -> ok, 429 -> rate_limit, else error. status is 200..599;
// latency_ms and retry_after_ms at most 86400000 (a day), retry_after at most 86400; the
// retry-after keys only with an error answer. Unknown keys or bad values throw
// std::invalid_argument.
MockOutcome outcome_from_json(const nlohmann::json& j);
// The same rules for an outcome built in code (MockServer::script checks each): throws
// std::invalid_argument.
void validate(const MockOutcome& o);
// An array of outcomes, or one object.
std::vector<MockOutcome> outcomes_from_json(const nlohmann::json& j);

}  // namespace laneq::mock
