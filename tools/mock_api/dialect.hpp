#pragma once
// Dialect: everything that differs between the OpenAI and Anthropic APIs — authentication,
// request and response bodies, error shapes, stream events, rate-limit headers. Pure: no I/O,
// no clock reads. openai_dialect.cpp and anthropic_dialect.cpp implement it.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "mock_api/chat_call.hpp"
#include "mock_api/http_request.hpp"
#include "mock_api/key_limits.hpp"

namespace laneq::mock {

enum class ErrorKind {
  bad_request,         // 400
  auth,                // 401
  not_found,           // 404 (also used for a wrong method)
  rate_limit,          // 429 rate limit
  insufficient_quota,  // OpenAI 429 insufficient_quota; Anthropic 400 credit balance too low
  too_large,           // Anthropic 413 request_too_large; OpenAI 429 "Request too large"
  status,              // any other status: the provider's error type for it
};

struct ErrorSpec {
  ErrorKind kind = ErrorKind::status;
  int status = 500;                           // for ErrorKind::status
  std::string message{};                      // empty: the provider's usual message
  std::string_view rate_limit_type = "requests";  // OpenAI 429 error.type: requests / tokens
  std::string model{};                        // for messages that name it
  std::int64_t limit = 0;                     // rate limit messages
  std::int64_t requested = 0;
};

struct ErrorReply {
  int status = 500;
  std::string body{};
};

// The events of one streamed answer, each a complete SSE event ("...\n\n").
struct StreamEvents {
  std::vector<std::string> events{};
  std::size_t error_at = 0;  // where an injected error event goes: after some of the content
  std::size_t final_at = 0;  // the first event after the content (finish / usage): a cut stops before it
};

// Header values reported for a bucket the mock does not limit.
inline constexpr std::int64_t unlimited_header_value = 1'000'000'000;

class Dialect {
 public:
  virtual ~Dialect() = default;
  virtual std::string_view name() const noexcept = 0;
  virtual std::string_view id_prefix() const noexcept = 0;         // of answer ids
  virtual std::string_view request_id_header() const noexcept = 0;  // sent on every answer
  // Input/output token buckets apply (Anthropic).
  virtual bool split_token_limits() const noexcept = 0;

  // The caller's API key, or nullopt: answer auth_error().
  virtual std::optional<std::string> api_key(const HttpRequest& request) const = 0;
  virtual ErrorReply auth_error(const HttpRequest& request) const = 0;

  // Throws BadRequest with the provider-style message.
  virtual ChatCall parse(const nlohmann::json& body) const = 0;

  virtual std::string reply_body(const Answer& answer) const = 0;
  virtual ErrorReply error(const ErrorSpec& spec) const = 0;
  virtual StreamEvents stream(const Answer& answer, bool include_usage) const = 0;
  virtual std::string error_event(std::string_view message) const = 0;
  virtual std::string malformed_event(const Answer& answer) const = 0;  // broken JSON data

  virtual void add_rate_limit_headers(HeaderList& headers, const LimitsSnapshot& limits,
                                      std::chrono::system_clock::time_point now,
                                      bool round_tokens) const = 0;
};

const Dialect& openai_dialect() noexcept;
const Dialect& anthropic_dialect() noexcept;

// Sum of the UTF-8 bytes of the text in a message `content`: a string, or an array of blocks
// with "text" members (other blocks count nothing). Throws BadRequest on other shapes.
std::size_t content_text_bytes(const nlohmann::json& content, std::string* text_out);

// Serializes a body that may hold request bytes (a header value, the path, an API key): bytes
// that are not UTF-8 become U+FFFD, where a plain dump() would throw and drop the connection.
inline std::string dump_json(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// A JSON body the client's parser must reject: a strict prefix of a JSON object.
inline std::string truncated_json(const std::string& body) { return body.substr(0, body.size() / 2); }

}  // namespace laneq::mock
