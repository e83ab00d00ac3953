#pragma once
// Anthropic Messages wire format (POST /v1/messages): the request body, the response and error
// bodies, and the streamed events. Pure: no I/O; the HTTP provider wraps it.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "laneq/detail/stream_accumulator.hpp"
#include "laneq/request.hpp"
#include "laneq/sse.hpp"

namespace laneq::anthropic {

// Anthropic requires max_tokens; this is used when Request::max_tokens is 0 (or negative).
inline constexpr std::int32_t default_max_tokens = 4096;

// The JSON body for a Request:
//   {"model", "max_tokens" (Request::max_tokens if > 0, else fallback_max_tokens),
//    "system"   (the contents of all "system" and "developer" messages joined by "\n\n";
//               absent when none: the Messages API has neither role),
//    "messages": [{"role", "content"}, ...]   (every other message, in order),
//    "stream": true   (only when Request::stream)}
// Request::extra (a JSON object) is merged in last, top-level key by key, and its keys WIN (e.g.
// "system" as content blocks with cache_control, "temperature", "tools", rich "messages").
// One exception: "stream" always follows Request::stream, because that flag decides whether the
// response is read as SSE or as one body. A null `extra` adds nothing; any other non-object
// `extra`, or fallback_max_tokens < 1, is a programming error and throws std::invalid_argument.
// Invalid UTF-8 in strings is replaced with U+FFFD rather than thrown.
std::string request_body(const Request& request, std::int32_t fallback_max_tokens = default_max_tokens);

// Reads a non-streamed response. Always fills out.status, out.headers (copied), out.raw (the
// parsed body, or null when it is not JSON), and resets text, usage, finish_reason, error_type
// and error_message; the queue's fields (attempts, times) are left alone.
// Success (2xx with a "content" array): text = the concatenated "text" blocks (other block types
// such as tool_use or thinking are skipped), usage.input_tokens = input_tokens +
// cache_creation_input_tokens + cache_read_input_tokens (all are charged as input),
// usage.output_tokens = output_tokens, finish_reason = stop_reason.
// Failure ({"type":"error","error":{"type","message"}}): error_type / error_message from it, or
// error_message = the start of a non-JSON body (at most 512 bytes). The code is
// error_code_for(status, error.type, error.message). Never throws (allocation failure ->
// errc::internal).
std::error_code parse_response(int status, const Headers& headers, std::string_view body,
                               Response& out) noexcept;

// The laneq error for an Anthropic failure. `status` 0 = no HTTP status to go by (an `error`
// event inside a 200 stream); then the error type decides.
//   overloaded_error, any status                 -> overloaded
//   request_too_large, any status                -> request_too_large
//   billing_error, any status                    -> quota_exceeded
//   invalid_request_error with "credit balance   -> quota_exceeded (an empty account: Anthropic
//   is too low" in its message                      sends it as a 400)
//   401, 403                                     -> auth
//   402 (Payment Required)                       -> quota_exceeded
//   413                                          -> request_too_large
//   429                                          -> rate_limited
//   503, 529                                     -> overloaded
//   408, 409, other 5xx                          -> server_error
//   400, 404, 422, other 4xx                     -> bad_request
//   1xx, 3xx, out of range                       -> malformed_response
//   2xx / 0, by type: rate_limit_error -> rate_limited; invalid_request_error, not_found_error
//   -> bad_request; authentication_error, permission_error -> auth; api_error, timeout_error,
//   anything else -> server_error.
// parse_response answers malformed_response for a status outside 200..599 before any of this.
std::error_code error_code_for(int status, std::string_view error_type,
                               std::string_view message = {}) noexcept;

// Accumulates a streamed message (stream: true) from its SSE events: message_start (input
// usage), content_block_start / content_block_delta (text_delta; other deltas such as
// input_json_delta or thinking_delta are skipped), message_delta (stop_reason, output usage),
// message_stop (done). `ping` and unknown event types are ignored (Anthropic may add types).
// The type is the SSE event name, or the data's "type" when the name is missing. Events after
// message_stop or after an error are ignored.
class StreamAccumulator : public detail::stream_accumulator_base {
 public:
  // DeltaHandler: std::function<void(std::string_view)>.
  StreamAccumulator() = default;
  // `on_delta` sees each non-empty text delta as it arrives; its exceptions propagate.
  explicit StreamAccumulator(DeltaHandler on_delta) : stream_accumulator_base(std::move(on_delta)) {}

  // Takes one SSE event. Events with empty data are ignored. Data that is not a JSON object, or
  // has the wrong shape -> malformed_response; an `error` event -> error_code_for(0, type) with
  // error_type / error_message. The first error sticks.
  void on_event(const SseEvent& event);

  // Inherited: done() (got message_stop), error() (the first error so far), text() (text so far).
  Usage usage() const noexcept;

  // Hands the result over (call once, after the body ended): out.text (the partial text too),
  // usage, finish_reason, error_type, error_message, and out.raw: the message the events add up
  // to, {"type": "message", "role": "assistant", "content": [blocks: text joined, tool_use with
  // its input parsed from the input_json_delta pieces (kept as a string if they do not parse),
  // others as they started], "stop_reason", "usage", and "id", "model", "stop_sequence" as the
  // events state them} (what a non-streamed call's body holds);
  // status and headers are the caller's. Returns the stream's error if one came (an `error`
  // event after a 200 is a failed request), else errc::network when the stream ended before
  // message_stop — a partial answer must never look like success — else success.
  std::error_code finish(Response& out);

 private:
  std::optional<std::size_t> block_index(const nlohmann::json& event);

  nlohmann::json content_ = nlohmann::json::array();  // blocks by index
  std::vector<std::string> partial_json_;             // tool_use input pieces, by index
  nlohmann::json head_ = nlohmann::json::object();    // id, model, stop_sequence as stated
  // Kept apart because message_start and message_delta each report some of them (cumulative).
  std::int64_t input_tokens_ = 0;
  std::int64_t cache_creation_input_tokens_ = 0;
  std::int64_t cache_read_input_tokens_ = 0;
  std::int64_t output_tokens_ = 0;
};

}  // namespace laneq::anthropic
