#pragma once
// OpenAI Chat Completions wire format (POST /v1/chat/completions): the request body, the
// response and error bodies, and the streamed chunks. Pure: no I/O; the HTTP provider wraps it.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include <nlohmann/json.hpp>

#include "laneq/detail/stream_accumulator.hpp"
#include "laneq/request.hpp"
#include "laneq/sse.hpp"

namespace laneq::openai {

// How the body is spelled for a server (OpenAIConfig chooses).
struct BodyOptions {
  // "max_tokens" (what OpenAI-compatible servers know) or "max_completion_tokens" (OpenAI's
  // current name; its o-series and gpt-5 models refuse "max_tokens").
  std::string_view max_tokens_field = "max_tokens";
  bool stream_usage = true;  // streams ask for usage in their last chunk (stream_options)
};

// The JSON body for a Request:
//   {"model", "messages": [{"role", "content"}, ...],   (every message as given, system included)
//    <max_tokens_field>                                 (only when Request::max_tokens > 0),
//    "stream": true, "stream_options": {"include_usage": true}   (only when Request::stream;
//                                                       stream_options only with stream_usage)}
// Request::extra (a JSON object) is merged in last and its keys WIN — it is the escape hatch
// for everything laneq does not model (temperature, tools, rich message content, ...); objects
// merge key by key (extra's "stream_options" adds to include_usage). One exception: "stream"
// always follows Request::stream, because that flag decides whether the response is read as SSE
// or as one body.
// A null `extra` adds nothing; any other non-object `extra` is a programming error and throws
// std::invalid_argument (the provider reports it as errc::bad_request). Invalid UTF-8 in strings
// is replaced with U+FFFD rather than thrown.
std::string request_body(const Request& request, const BodyOptions& options = {});

// Reads a non-streamed response. Always fills out.status, out.headers (copied), out.raw (the
// parsed body, or null when it is not JSON), and resets text, usage, finish_reason, error_type
// and error_message; the queue's fields (attempts, times) are left alone.
// Success (2xx with choices[0].message): text = choices[0].message.content (null -> ""; an
// array of parts: its "text" parts joined, the whole array in raw),
// usage = usage.prompt_tokens / completion_tokens, finish_reason = choices[0].finish_reason.
// Failure: error_type = error.code if present, else error.type; error_message = error.message,
// or the start of a non-JSON body (at most 512 bytes). The code is error_code_for(...).
// Never throws (an allocation failure is reported as errc::internal).
std::error_code parse_response(int status, const Headers& headers, std::string_view body,
                               Response& out) noexcept;

// The laneq error for an OpenAI failure. `status` 0 = no HTTP status to go by (an error chunk
// inside a 200 stream); then the body decides.
//   insufficient_quota or billing_not_active (code or type), any status -> quota_exceeded
//   429 whose message contains "Request too large"            -> request_too_large
//   429 otherwise                                             -> rate_limited
//   401, 403                                                  -> auth
//   402 (Payment Required)                                    -> quota_exceeded
//   413                                                       -> request_too_large
//   503, 529                                                  -> overloaded
//   408, 409, other 5xx                                       -> server_error
//   400, 404, 422 (context_length_exceeded too), other 4xx    -> bad_request
//   1xx, 3xx, out of range                                    -> malformed_response
//   2xx / 0 (an error body where a result was expected), by the body: "Request too large" ->
//   request_too_large, rate_limit_exceeded (or type requests / tokens) -> rate_limited,
//   invalid_api_key / authentication_error -> auth, invalid_request_error /
//   context_length_exceeded -> bad_request, a numeric code 400-599 (vLLM, OpenRouter) -> as
//   that status above, anything else -> server_error.
// parse_response answers malformed_response for a status outside 200..599 before any of this.
std::error_code error_code_for(int status, std::string_view type, std::string_view code,
                               std::string_view message) noexcept;

// Accumulates a streamed completion (stream: true) from its SSE events: content deltas of
// choice 0, its finish_reason, and the usage chunk (choices: []) that include_usage adds; also
// choice 0's refusal and tool_calls deltas (by index: id, type, function name and arguments
// joined), which finish() hands over in out.raw as the completion they add up to.
// Finished by `data: [DONE]`. Events after [DONE] or after an error are ignored.
class StreamAccumulator : public detail::stream_accumulator_base {
 public:
  // DeltaHandler: std::function<void(std::string_view)>.
  StreamAccumulator() = default;
  // `on_delta` sees each non-empty content delta as it arrives; its exceptions propagate.
  explicit StreamAccumulator(DeltaHandler on_delta) : stream_accumulator_base(std::move(on_delta)) {}

  // Takes one SSE event. Events with empty data are ignored (keep-alives). A data line that is
  // not a JSON object, or has the wrong shape -> malformed_response; an {"error": {...}} chunk
  // -> error_code_for(0, ...). The first error sticks.
  void on_event(const SseEvent& event);

  // Inherited: done() (got [DONE]), error() (the first error so far), text() (content so far).
  const Usage& usage() const noexcept { return usage_; }

  // Hands the result over (call once, after the body ended): out.text (the partial text too),
  // usage, finish_reason, error_type, error_message, and out.raw: the completion the chunks add
  // up to, {"object": "chat.completion", "id"?, "model"?, "created"?, "system_fingerprint"?
  // (as the chunks state them), "choices": [{"index": 0, "message": {"role",
  // "content", "refusal"?, "tool_calls"?}, "finish_reason"}], "usage"?} (what a non-streamed
  // call's body holds, but that a content streamed as arrays of parts comes out as its text,
  // and its refusal parts as "refusal"); status and headers are the caller's. Returns the stream's error if one
  // came, else errc::network when the stream ended before [DONE] — a partial answer must never
  // look like success — else success.
  std::error_code finish(Response& out);

 private:
  void on_tool_call_delta(const nlohmann::json& delta);

  Usage usage_{};
  std::string refusal_{};
  nlohmann::json tool_calls_{};  // null until one comes, then an array by index
  nlohmann::json usage_raw_{};   // the usage object as sent
  nlohmann::json head_ = nlohmann::json::object();  // id, model, ... as the chunks state them
};

}  // namespace laneq::openai
