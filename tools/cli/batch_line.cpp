#include "cli/batch_line.hpp"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string_view>

#include <nlohmann/json.hpp>

#include "laneq/client_id.hpp"
#include "laneq/detail/json_depth.hpp"
#include "laneq/error.hpp"

namespace laneq::cli {

namespace {

using json = nlohmann::json;

// Thrown while reading a line; becomes its BadLine.
struct bad_line_error {
  std::string code;
  std::string message;
};

[[noreturn]] void bad(std::string code, std::string message) {
  throw bad_line_error{std::move(code), std::move(message)};
}

std::string snippet(std::string_view text) {
  constexpr std::size_t max = 80;
  return text.size() <= max ? std::string(text) : std::string(text.substr(0, max)) + "...";
}

// "content": a string, or an array of parts of which only text parts are supported.
std::string content_text(const json& content, std::string_view where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad("invalid_body", std::string(where) + " must be a string or an array of text parts");
  std::string text;
  for (const json& part : content) {
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
        !part.contains("text") || !part["text"].is_string())
      bad("unsupported_content", std::string(where) + ": only text parts are supported");
    text += part["text"].get_ref<const std::string&>();
  }
  return text;
}

int lane_priority(const json& p, const std::vector<LaneName>& lanes) {
  if (p.is_string()) {
    for (const auto& l : lanes)
      if (l.name == p.get_ref<const std::string&>()) return l.priority;
    std::string known;
    for (const auto& l : lanes) known += (known.empty() ? "" : ", ") + l.name;
    bad("unknown_priority", "\"priority\": \"" + p.get<std::string>() + "\" is not a lane (" + known + ")");
  }
  if (p.is_number_integer()) {
    // An unsigned value above INT64_MAX is no lane (read as int64_t it would wrap).
    if (!p.is_number_unsigned() || p.get<std::uint64_t>() <= INT64_MAX) {
      const auto v = p.get<std::int64_t>();
      for (const auto& l : lanes)
        if (l.priority == v) return l.priority;
    }
    bad("unknown_priority", "\"priority\": " + p.dump() + " is not a lane's priority");
  }
  bad("unknown_priority", "\"priority\" must be a lane name or number");
}

Request build_request(const json& body, std::string_view url) {
  if (!body.is_object()) bad("invalid_body", "\"body\" must be an object");
  Request req;
  json extra = json::object();
  bool has_messages = false;  // (an Anthropic system prompt is a message too: not enough)
  for (const auto& [key, value] : body.items()) {
    if (key == "model") {
      if (!value.is_string() || value.get_ref<const std::string&>().empty())
        bad("invalid_body", "body.model must be a non-empty string");
      req.model = value.get<std::string>();
    } else if (key == "messages") {
      if (!value.is_array() || value.empty())
        bad("invalid_body", "body.messages must be a non-empty array");
      for (const json& m : value) {
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content"))
          bad("invalid_body", "each of body.messages needs a \"role\" and a \"content\"");
        // (Anthropic's format moves system and developer messages to "system": they alone
        // are no conversation.)
        if (url != "/v1/messages" || (m["role"] != "system" && m["role"] != "developer"))
          has_messages = true;
        // A laneq::Message has nothing else: a tool message's tool_call_id (or a name) left
        // out would change the request without a word.
        for (const auto& [field, v] : m.items())
          if (field != "role" && field != "content")
            bad("unsupported_content", "body.messages: \"" + snippet(field) +
                                           "\" is not supported (only \"role\" and \"content\")");
        req.messages.push_back({m["role"].get<std::string>(), content_text(m["content"], "message content")});
      }
    } else if (key == "max_tokens" || key == "max_completion_tokens") {
      if (!value.is_number_integer() || value.get<std::int64_t>() < 1 ||
          value.get<std::int64_t>() > INT32_MAX)
        bad("invalid_body", "body." + key + " must be a positive integer");
      req.max_tokens = static_cast<std::int32_t>(value.get<std::int64_t>());
    } else if (key == "system" && url == "/v1/messages") {
      // Anthropic's top-level system prompt: a system message, which the Anthropic provider
      // moves back to "system".
      req.messages.insert(req.messages.begin(), {"system", content_text(value, "body.system")});
    } else if (key == "stream") {
      if (value != false) bad("invalid_body", "body.stream: batch lines cannot stream");
    } else {
      extra[key] = value;
    }
  }
  if (req.model.empty()) bad("invalid_body", "body.model is missing");
  if (!has_messages) bad("invalid_body", "body.messages is missing");
  if (!extra.empty()) req.extra = std::move(extra);
  return req;
}

}  // namespace

std::variant<BatchLine, BadLine> parse_batch_line(std::string_view text, std::size_t line_no,
                                                  const std::vector<LaneName>& lanes) {
  const std::string where = "line " + std::to_string(line_no) + ": ";
  std::string custom_id;
  try {
    if (!laneq::detail::json_depth_within(text))
      bad("invalid_json", "JSON nested deeper than " +
                              std::to_string(laneq::detail::kMaxJsonDepth) + " levels");
    const json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded()) bad("invalid_json", "not valid JSON: " + snippet(text));
    if (!doc.is_object()) bad("invalid_json", "a line must be a JSON object");
    if (doc.contains("custom_id") && doc["custom_id"].is_string())
      custom_id = doc["custom_id"].get<std::string>();
    if (custom_id.empty()) bad("missing_custom_id", "\"custom_id\" (a non-empty string) is missing");
    if (doc.contains("method") && doc["method"] != "POST")
      bad("invalid_method", "\"method\" must be \"POST\", not " + snippet(doc["method"].dump()));
    if (!doc.contains("url") || !doc["url"].is_string()) bad("unknown_url", "\"url\" is missing");
    const std::string url = doc["url"].get<std::string>();
    if (url != "/v1/chat/completions" && url != "/v1/messages")
      bad("unknown_url", "\"url\": " + url + " (known: /v1/chat/completions, /v1/messages)");
    if (!doc.contains("body")) bad("invalid_body", "\"body\" is missing");

    BatchLine line{.line_no = line_no,
                   .custom_id = custom_id,
                   .request = build_request(doc["body"], url),
                   .priority = static_cast<int>(Priority::normal),
                   .client = {}};
    line.request.id = custom_id;
    if (doc.contains("priority") && !doc["priority"].is_null())
      line.priority = lane_priority(doc["priority"], lanes);
    if (doc.contains("client") && !doc["client"].is_null()) {
      if (!doc["client"].is_string()) bad("invalid_client", "\"client\" must be a string");
      line.client = doc["client"].get<std::string>();
      if (line.client.size() > ClientId::max_size)
        bad("invalid_client", "\"client\" is longer than " + std::to_string(ClientId::max_size) + " bytes");
    }
    return line;
  } catch (const bad_line_error& e) {
    return BadLine{line_no, custom_id, e.code, where + e.message};
  } catch (const json::exception& e) {  // a field of a type no check above expected
    return BadLine{line_no, custom_id, "invalid_body", where + e.what()};
  }
}

std::string output_id(std::string_view custom_id) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a: stable across runs and machines
  for (unsigned char c : custom_id) h = (h ^ c) * 1099511628211ull;
  static constexpr char hex[] = "0123456789abcdef";
  std::string id = "batch_req_";
  for (int shift = 60; shift >= 0; shift -= 4) id += hex[(h >> shift) & 0xf];
  return id;
}

std::string result_line(std::string_view custom_id, std::error_code ec, const Response& r) {
  json out = {{"id", output_id(custom_id)}, {"custom_id", custom_id}, {"response", nullptr},
              {"error", nullptr}};
  if (r.status != 0) {
    const std::string* request_id = r.header("x-request-id");
    if (!request_id) request_id = r.header("request-id");  // Anthropic's name
    out["response"] = {{"status_code", r.status},
                       {"request_id", request_id ? *request_id : ""},
                       {"body", r.raw.is_null() ? json::object() : r.raw}};
  }
  if (ec) {
    std::string message = r.error_message.empty() ? ec.message() : r.error_message;
    out["error"] = {{"code", error_name(ec)}, {"message", std::move(message)}};
  }
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string bad_line_output(const BadLine& bad) {
  json out = {{"id", nullptr},
              {"custom_id", bad.custom_id.empty() ? json(nullptr) : json(bad.custom_id)},
              {"line", bad.line_no},
              {"response", nullptr},
              {"error", {{"code", bad.code}, {"message", bad.message}}}};
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

OutputLineKey read_output_line(std::string_view text) {
  OutputLineKey key;
  const json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return key;
  if (doc.contains("line") && doc["line"].is_number_unsigned()) {
    key.bad_line_no = doc["line"].get<std::size_t>();
  } else if (doc.contains("custom_id") && doc["custom_id"].is_string()) {
    key.custom_id = doc["custom_id"].get<std::string>();
  } else {
    return key;
  }
  key.complete = true;
  key.succeeded = key.bad_line_no == 0 && doc.contains("error") && doc["error"].is_null();
  if (key.bad_line_no == 0 && !key.succeeded) {
    static constexpr std::string_view after_a_call[] = {
        "rate_limited", "overloaded",         "auth",    "request_too_large",    "quota_exceeded",
        "server_error", "malformed_response", "network", "interrupted_too_often"};
    const auto response = doc.find("response");
    const auto error = doc.find("error");
    const json* code = error != doc.end() && error->is_object() && error->contains("code")
                           ? &(*error)["code"]
                           : nullptr;
    key.journal_error = code && *code == "journal";
    key.called = (response != doc.end() && response->is_object()) ||
                 (code && code->is_string() &&
                  std::find(std::begin(after_a_call), std::end(after_a_call),
                            code->get_ref<const std::string&>()) != std::end(after_a_call));
  }
  return key;
}

}  // namespace laneq::cli
