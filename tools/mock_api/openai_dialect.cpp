// The OpenAI Chat Completions dialect: POST /v1/chat/completions.
#include <string>

#include "mock_api/dialect.hpp"
#include "mock_api/header_values.hpp"

namespace laneq::mock {

namespace {

using nlohmann::json;

std::string sse_data(const json& j) {
  std::string out = "data: ";
  out += dump_json(j);
  out += "\n\n";
  return out;
}

class OpenAiDialect final : public Dialect {
 public:
  std::string_view name() const noexcept override { return "openai"; }
  std::string_view id_prefix() const noexcept override { return "chatcmpl-mock-"; }
  std::string_view request_id_header() const noexcept override { return "x-request-id"; }
  bool split_token_limits() const noexcept override { return false; }

  std::optional<std::string> api_key(const HttpRequest& request) const override {
    const auto auth = request.header("authorization");
    if (!auth || auth->size() <= 7 || !iequals(auth->substr(0, 7), "bearer ")) return std::nullopt;
    auto key = auth->substr(7);
    while (!key.empty() && key.front() == ' ') key.remove_prefix(1);
    if (key.empty()) return std::nullopt;
    return std::string(key);
  }

  ErrorReply auth_error(const HttpRequest& request) const override {
    const bool missing = !request.header("authorization");
    std::string message =
        missing ? "You didn't provide an API key. You need to provide your API key in an "
                  "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
                : "Incorrect API key provided. The Authorization header must be \"Bearer <key>\".";
    return {401, body("invalid_request_error", "invalid_api_key", message)};
  }

  ChatCall parse(const json& body) const override {
    if (!body.is_object()) throw BadRequest("The request body must be a JSON object.");
    ChatCall call;
    const auto model = body.find("model");
    if (model == body.end() || !model->is_string() || model->get_ref<const std::string&>().empty())
      throw BadRequest("you must provide a model parameter");
    call.model = model->get<std::string>();
    const auto messages = body.find("messages");
    if (messages == body.end() || !messages->is_array())
      throw BadRequest("Missing required parameter: 'messages'.");
    if (messages->empty()) throw BadRequest("Invalid 'messages': empty array. Expected an array with minimum length 1.");
    std::size_t bytes = 0;
    for (const auto& m : *messages) {
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
        throw BadRequest("Invalid 'messages': each message needs a string 'role'.");
      std::string text;
      const auto content = m.find("content");
      if (content != m.end()) bytes += content_text_bytes(*content, &text);
      if (m["role"] == "user") call.last_user_text = std::move(text);
    }
    call.prompt_tokens = prompt_tokens_for(bytes);
    for (const char* key : {"max_completion_tokens", "max_tokens"}) {
      const auto v = body.find(key);
      if (v == body.end() || v->is_null()) continue;
      if (!v->is_number_integer() || v->get<std::int64_t>() < 1)
        throw BadRequest(std::string("Invalid '") + key + "': integer below minimum value. Expected a value >= 1.");
      call.max_tokens = v->get<std::int64_t>();
      break;
    }
    if (const auto s = body.find("stream"); s != body.end() && !s->is_null()) {
      if (!s->is_boolean()) throw BadRequest("Invalid type for 'stream': expected a boolean.");
      call.stream = s->get<bool>();
    }
    if (const auto so = body.find("stream_options"); so != body.end() && !so->is_null()) {
      if (!call.stream)
        throw BadRequest("The 'stream_options' parameter is only allowed when 'stream' is enabled.");
      if (!so->is_object()) throw BadRequest("Invalid type for 'stream_options': expected an object.");
      if (const auto iu = so->find("include_usage"); iu != so->end()) {
        if (!iu->is_boolean()) throw BadRequest("Invalid type for 'stream_options.include_usage': expected a boolean.");
        call.include_usage = iu->get<bool>();
      }
    }
    return call;
  }

  std::string reply_body(const Answer& a) const override {
    json j = {
        {"id", a.id},
        {"object", "chat.completion"},
        {"created", a.created},
        {"model", a.model},
        {"choices", json::array({{{"index", 0},
                                  {"message", {{"role", "assistant"}, {"content", a.text}, {"refusal", nullptr}}},
                                  {"logprobs", nullptr},
                                  {"finish_reason", a.truncated ? "length" : "stop"}}})},
        {"usage", usage(a)},
        {"system_fingerprint", "fp_mock"},
    };
    return dump_json(j);
  }

  ErrorReply error(const ErrorSpec& spec) const override {
    switch (spec.kind) {
      case ErrorKind::bad_request:
        return {400, body("invalid_request_error", nullptr, spec.message)};
      case ErrorKind::auth:
        return {401, body("invalid_request_error", "invalid_api_key", or_default(spec.message, "Incorrect API key provided."))};
      case ErrorKind::not_found:
        return {404, body("invalid_request_error", "unknown_url", or_default(spec.message, "Unknown request URL.")) };
      case ErrorKind::rate_limit: {
        std::string m = "Rate limit reached for ";
        m += spec.model;
        m += " in organization org-mock on ";
        m += spec.rate_limit_type == "tokens" ? "tokens per min (TPM)" : "requests per min (RPM)";
        m += ": Limit ";
        m += std::to_string(spec.limit);
        m += ", Requested ";
        m += std::to_string(spec.requested);
        m += ".";
        return {429, body(spec.rate_limit_type, "rate_limit_exceeded", or_default(spec.message, m))};
      }
      case ErrorKind::insufficient_quota:
        return {429, body("insufficient_quota", "insufficient_quota",
                          or_default(spec.message, "You exceeded your current quota, please check your plan and billing details."))};
      case ErrorKind::too_large: {
        std::string m = "Request too large for ";
        m += spec.model;
        m += " in organization org-mock on tokens per min (TPM): Limit ";
        m += std::to_string(spec.limit);
        m += ", Requested ";
        m += std::to_string(spec.requested);
        m += ". The input or output tokens must be reduced in order to run successfully.";
        return {429, body("tokens", "rate_limit_exceeded", or_default(spec.message, m))};
      }
      case ErrorKind::status:
        break;
    }
    const int s = spec.status;
    if (s < 500) return {s, body("invalid_request_error", nullptr, or_default(spec.message, "Invalid request."))};
    const char* m = s == 503   ? "The engine is currently overloaded, please try again later."
                    : s == 529 ? "The server is overloaded, please try again later."
                               : "The server had an error while processing your request. Sorry about that!";
    return {s, body("server_error", nullptr, or_default(spec.message, m))};
  }

  StreamEvents stream(const Answer& a, bool include_usage) const override {
    StreamEvents s;
    s.events.push_back(chunk(a, {{"role", "assistant"}, {"content", ""}, {"refusal", nullptr}}, nullptr, include_usage));
    for (const auto& piece : a.pieces) s.events.push_back(chunk(a, {{"content", piece}}, nullptr, include_usage));
    s.error_at = 1 + a.pieces.size() / 2;
    s.final_at = s.events.size();
    s.events.push_back(chunk(a, json::object(), a.truncated ? "length" : "stop", include_usage));
    if (include_usage) {
      json last = {{"id", a.id}, {"object", "chat.completion.chunk"}, {"created", a.created},
                   {"model", a.model}, {"system_fingerprint", "fp_mock"},
                   {"choices", json::array()}, {"usage", usage(a)}};
      s.events.push_back(sse_data(last));
    }
    s.events.emplace_back("data: [DONE]\n\n");
    return s;
  }

  std::string error_event(std::string_view message) const override {
    return sse_data({{"error", {{"message", message.empty() ? "The server had an error while processing your request. Sorry about that!" : message},
                                {"type", "server_error"}, {"param", nullptr}, {"code", nullptr}}}});
  }

  std::string malformed_event(const Answer& a) const override {
    std::string e = "data: ";
    e += truncated_json(chunk(a, {{"content", a.text}}, nullptr, false).substr(6));
    e += "\n\n";
    return e;
  }

  void add_rate_limit_headers(HeaderList& h, const LimitsSnapshot& l,
                              std::chrono::system_clock::time_point, bool) const override {
    const auto add = [&](const char* suffix, const BucketView& b) {
      const auto limit = b.limited ? b.limit : unlimited_header_value;
      const auto remaining = b.limited ? b.remaining : unlimited_header_value;
      h.emplace_back(std::string("x-ratelimit-limit-") + suffix, std::to_string(limit));
      h.emplace_back(std::string("x-ratelimit-remaining-") + suffix, std::to_string(remaining));
      h.emplace_back(std::string("x-ratelimit-reset-") + suffix, format_go_duration(b.reset_after));
    };
    add("requests", l.requests);
    add("tokens", l.tokens);
  }

 private:
  static std::string or_default(const std::string& m, std::string_view fallback) {
    return m.empty() ? std::string(fallback) : m;
  }

  static std::string body(std::string_view type, const json& code, std::string_view message) {
    return dump_json({{"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", code}}}});
  }

  static json usage(const Answer& a) {
    return {{"prompt_tokens", a.prompt_tokens},
            {"completion_tokens", a.completion_tokens},
            {"total_tokens", a.prompt_tokens + a.completion_tokens}};
  }

  static std::string chunk(const Answer& a, json delta, const json& finish, bool include_usage) {
    json j = {{"id", a.id}, {"object", "chat.completion.chunk"}, {"created", a.created},
              {"model", a.model}, {"system_fingerprint", "fp_mock"},
              {"choices", json::array({{{"index", 0}, {"delta", std::move(delta)},
                                        {"logprobs", nullptr}, {"finish_reason", finish}}})}};
    if (include_usage) j["usage"] = nullptr;  // as the API does: null on every chunk but the last
    return sse_data(j);
  }
};

}  // namespace

const Dialect& openai_dialect() noexcept {
  static const OpenAiDialect d;
  return d;
}

}  // namespace laneq::mock
