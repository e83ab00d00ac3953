// The Anthropic Messages dialect: POST /v1/messages.
#include <string>

#include "mock_api/dialect.hpp"
#include "mock_api/header_values.hpp"

namespace laneq::mock {

namespace {

using nlohmann::json;

std::string sse_event(std::string_view event, const json& data) {
  std::string out = "event: ";
  out += event;
  out += "\ndata: ";
  out += dump_json(data);
  out += "\n\n";
  return out;
}

class AnthropicDialect final : public Dialect {
 public:
  std::string_view name() const noexcept override { return "anthropic"; }
  std::string_view id_prefix() const noexcept override { return "msg_mock_"; }
  std::string_view request_id_header() const noexcept override { return "request-id"; }
  bool split_token_limits() const noexcept override { return true; }

  // The API checks the key (401), then the version (400: a request error, not an auth one).
  std::optional<std::string> api_key(const HttpRequest& request) const override {
    const auto key = request.header("x-api-key");
    if (!key || key->empty() || !valid_version(request.header("anthropic-version")))
      return std::nullopt;
    return std::string(*key);
  }

  ErrorReply auth_error(const HttpRequest& request) const override {
    const auto key = request.header("x-api-key");
    if (!key || key->empty())
      return {401, body("authentication_error", "x-api-key header is required")};
    const auto version = request.header("anthropic-version");
    if (!version || version->empty())
      return {400, body("invalid_request_error", "anthropic-version: header is required")};
    return {400, body("invalid_request_error",
                      "anthropic-version: " + dump_json(json(std::string(*version))) +
                          " is not a valid version")};
  }

  ChatCall parse(const json& body) const override {
    if (!body.is_object()) throw BadRequest("The request body must be a JSON object.");
    ChatCall call;
    const auto model = body.find("model");
    if (model == body.end() || !model->is_string() || model->get_ref<const std::string&>().empty())
      throw BadRequest("model: Field required");
    call.model = model->get<std::string>();
    const auto max_tokens = body.find("max_tokens");
    if (max_tokens == body.end()) throw BadRequest("max_tokens: Field required");
    if (!max_tokens->is_number_integer() || max_tokens->get<std::int64_t>() < 1)
      throw BadRequest("max_tokens: Input should be greater than or equal to 1");
    call.max_tokens = max_tokens->get<std::int64_t>();
    const auto messages = body.find("messages");
    if (messages == body.end() || !messages->is_array()) throw BadRequest("messages: Field required");
    if (messages->empty()) throw BadRequest("messages: at least one message is required");
    std::size_t bytes = 0;
    if (const auto system = body.find("system"); system != body.end())
      bytes += content_text_bytes(*system, nullptr);
    for (const auto& m : *messages) {
      if (!m.is_object() || !m.contains("role") || (m["role"] != "user" && m["role"] != "assistant"))
        throw BadRequest("messages: each message needs a role of \"user\" or \"assistant\"");
      const auto content = m.find("content");
      if (content == m.end()) throw BadRequest("messages: content: Field required");
      std::string text;
      bytes += content_text_bytes(*content, &text);
      if (m["role"] == "user") call.last_user_text = std::move(text);
    }
    call.prompt_tokens = prompt_tokens_for(bytes);
    if (const auto s = body.find("stream"); s != body.end() && !s->is_null()) {
      if (!s->is_boolean()) throw BadRequest("stream: Input should be a valid boolean");
      call.stream = s->get<bool>();
    }
    return call;
  }

  std::string reply_body(const Answer& a) const override {
    json j = {
        {"id", a.id},
        {"type", "message"},
        {"role", "assistant"},
        {"model", a.model},
        {"content", json::array({{{"type", "text"}, {"text", a.text}}})},
        {"stop_reason", stop_reason(a)},
        {"stop_sequence", nullptr},
        {"usage", {{"input_tokens", a.prompt_tokens}, {"output_tokens", a.completion_tokens}}},
    };
    return dump_json(j);
  }

  ErrorReply error(const ErrorSpec& spec) const override {
    switch (spec.kind) {
      case ErrorKind::bad_request:
        return {400, body("invalid_request_error", spec.message)};
      case ErrorKind::auth:
        return {401, body("authentication_error", or_default(spec.message, "invalid x-api-key"))};
      case ErrorKind::not_found:
        return {404, body("not_found_error", or_default(spec.message, "Not found"))};
      case ErrorKind::rate_limit: {
        std::string m = "This request would exceed the rate limit for your organization (org-mock) of ";
        m += std::to_string(spec.limit);
        m += spec.rate_limit_type == "requests" ? " requests per minute." : " ";
        if (spec.rate_limit_type != "requests") {
          m += spec.rate_limit_type == "input_tokens"    ? "input tokens"
               : spec.rate_limit_type == "output_tokens" ? "output tokens"
                                                         : "tokens";
          m += " per minute.";
        }
        m += " For details, refer to: https://docs.anthropic.com/en/api/rate-limits.";
        return {429, body("rate_limit_error", or_default(spec.message, m))};
      }
      case ErrorKind::insufficient_quota:
        return {400, body("invalid_request_error",
                          or_default(spec.message, "Your credit balance is too low to access the Anthropic API. "
                                                   "Please go to Plans & Billing to upgrade or purchase credits."))};
      case ErrorKind::too_large:
        return {413, body("request_too_large",
                          or_default(spec.message, "Request exceeds the maximum allowed number of bytes."))};
      case ErrorKind::status:
        break;
    }
    const int s = spec.status;
    const char* type = "api_error";
    const char* m = "Internal server error";
    switch (s) {
      case 400: type = "invalid_request_error", m = "Invalid request"; break;
      case 401: type = "authentication_error", m = "invalid x-api-key"; break;
      case 403: type = "permission_error", m = "Your API key does not have permission to use the specified resource."; break;
      case 404: type = "not_found_error", m = "Not found"; break;
      case 413: type = "request_too_large", m = "Request exceeds the maximum allowed number of bytes."; break;
      case 429: type = "rate_limit_error", m = "Number of requests has exceeded your rate limit."; break;
      case 529: type = "overloaded_error", m = "Overloaded"; break;
      default:
        if (s < 500) type = "invalid_request_error", m = "Invalid request";
        else if (s == 503) m = "Service unavailable";
        break;
    }
    return {s, body(type, or_default(spec.message, m))};
  }

  StreamEvents stream(const Answer& a, bool) const override {
    StreamEvents s;
    json start_usage = {{"input_tokens", a.prompt_tokens}, {"output_tokens", 1}};
    s.events.push_back(sse_event("message_start",
        {{"type", "message_start"},
         {"message", {{"id", a.id}, {"type", "message"}, {"role", "assistant"}, {"model", a.model},
                      {"content", json::array()}, {"stop_reason", nullptr},
                      {"stop_sequence", nullptr}, {"usage", start_usage}}}}));
    s.events.push_back(sse_event("content_block_start",
        {{"type", "content_block_start"}, {"index", 0},
         {"content_block", {{"type", "text"}, {"text", ""}}}}));
    s.events.push_back(sse_event("ping", {{"type", "ping"}}));
    const std::size_t first_content = s.events.size();
    for (const auto& piece : a.pieces) s.events.push_back(delta(piece));
    s.error_at = first_content + a.pieces.size() / 2;
    s.events.push_back(sse_event("content_block_stop", {{"type", "content_block_stop"}, {"index", 0}}));
    s.final_at = s.events.size();
    s.events.push_back(sse_event("message_delta",
        {{"type", "message_delta"},
         {"delta", {{"stop_reason", stop_reason(a)}, {"stop_sequence", nullptr}}},
         {"usage", {{"output_tokens", a.completion_tokens}}}}));
    s.events.push_back(sse_event("message_stop", {{"type", "message_stop"}}));
    return s;
  }

  std::string error_event(std::string_view message) const override {
    return sse_event("error", {{"type", "error"},
                               {"error", {{"type", "overloaded_error"},
                                          {"message", message.empty() ? "Overloaded" : message}}}});
  }

  std::string malformed_event(const Answer& a) const override {
    std::string e = "event: content_block_delta\ndata: ";
    e += truncated_json(dump_json({{"type", "content_block_delta"}, {"index", 0},
                                   {"delta", {{"type", "text_delta"}, {"text", a.text}}}}));
    e += "\n\n";
    return e;
  }

  void add_rate_limit_headers(HeaderList& h, const LimitsSnapshot& l,
                              std::chrono::system_clock::time_point now,
                              bool round_tokens) const override {
    const auto add = [&](const char* bucket, const BucketView& b, bool tokens) {
      auto limit = b.limited ? b.limit : unlimited_header_value;
      auto remaining = b.limited ? b.remaining : unlimited_header_value;
      // As the API does: to the nearest thousand, so 1,600 left reads 2000 (half up).
      if (tokens && round_tokens && b.limited) remaining = (remaining + 500) / 1000 * 1000;
      std::string prefix = "anthropic-ratelimit-";
      prefix += bucket;
      h.emplace_back(prefix + "-limit", std::to_string(limit));
      h.emplace_back(prefix + "-remaining", std::to_string(remaining));
      h.emplace_back(prefix + "-reset",
                     format_rfc3339(now + std::chrono::duration_cast<std::chrono::system_clock::duration>(b.reset_after)));
    };
    add("requests", l.requests, false);
    add("tokens", l.tokens, true);
    add("input-tokens", l.input_tokens, true);
    add("output-tokens", l.output_tokens, true);
  }

 private:
  static std::string or_default(const std::string& m, std::string_view fallback) {
    return m.empty() ? std::string(fallback) : m;
  }

  static const char* stop_reason(const Answer& a) { return a.truncated ? "max_tokens" : "end_turn"; }

  // The versions the API accepts (docs: "Versions"); any other value is a 400.
  static bool valid_version(std::optional<std::string_view> v) {
    return v && (*v == "2023-06-01" || *v == "2023-01-01");
  }

  static std::string body(std::string_view type, std::string_view message) {
    return dump_json({{"type", "error"}, {"error", {{"type", type}, {"message", message}}}});
  }

  static std::string delta(const std::string& text) {
    return sse_event("content_block_delta",
                     {{"type", "content_block_delta"}, {"index", 0},
                      {"delta", {{"type", "text_delta"}, {"text", text}}}});
  }
};

}  // namespace

const Dialect& anthropic_dialect() noexcept {
  static const AnthropicDialect d;
  return d;
}

}  // namespace laneq::mock
