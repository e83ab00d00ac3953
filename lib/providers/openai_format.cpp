#include "laneq/providers/openai_format.hpp"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <optional>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "laneq/error.hpp"

namespace laneq::openai {

namespace {

using json = nlohmann::json;

// Enough of a non-JSON error page (a proxy's HTML, a plain-text 502) to tell what it was.
constexpr std::size_t kMaxBodySnippet = 512;

std::error_code err(errc e) noexcept { return make_error_code(e); }

bool is_2xx(int status) noexcept { return status >= 200 && status <= 299; }

json parse_json(std::string_view text) {
  return json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

// obj[key] when obj is an object that has it, else nullptr.
const json* member(const json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  const auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

// obj[key] as a string; "" when absent or not a string.
std::string_view string_at(const json& obj, std::string_view key) {
  const json* m = member(obj, key);
  return m && m->is_string() ? std::string_view(m->get_ref<const std::string&>()) : std::string_view{};
}

// A token count: a non-negative integer (clamped to int64), else nothing. Counts are
// informational: a bad one is dropped, it does not fail the response.
std::optional<std::int64_t> count_at(const json& obj, std::string_view key) {
  const json* m = member(obj, key);
  if (!m) return std::nullopt;
  if (m->is_number_unsigned()) {
    const auto v = m->get<std::uint64_t>();
    return static_cast<std::int64_t>(
        std::min<std::uint64_t>(v, static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())));
  }
  if (m->is_number_integer()) {
    const auto v = m->get<std::int64_t>();
    if (v >= 0) return v;
  }
  return std::nullopt;
}

void read_usage(const json& usage, Usage& out) {
  if (const auto v = count_at(usage, "prompt_tokens")) out.input_tokens = *v;
  if (const auto v = count_at(usage, "completion_tokens")) out.output_tokens = *v;
}

bool contains_nocase(std::string_view haystack, std::string_view needle) noexcept {
  const auto lower = [](char c) {
    return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  };
  return std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end(),
                     [&](char a, char b) { return lower(a) == lower(b); }) != haystack.end();
}

// {"error": {"message", "type", "code"}} — or, from some proxies, {"error": "message"}.
struct ErrorFields {
  bool present = false;
  std::string type{};
  std::string code{};
  std::string message{};
};

ErrorFields read_error(const json& doc) {
  ErrorFields f;
  const json* e = member(doc, "error");
  if (!e) return f;
  if (e->is_string()) {
    f.present = true;
    f.message = e->get_ref<const std::string&>();
  } else if (e->is_object()) {
    f.present = true;
    f.type = string_at(*e, "type");
    f.message = string_at(*e, "message");
    if (const json* c = member(*e, "code")) {
      if (c->is_string()) f.code = c->get_ref<const std::string&>();
      else if (c->is_number_integer()) f.code = c->dump();
    }
  }
  return f;
}

std::error_code status_error(int status) noexcept {
  if (status == 401 || status == 403) return err(errc::auth);
  if (status == 413) return err(errc::request_too_large);
  if (status == 429) return err(errc::rate_limited);
  if (status == 503 || status == 529) return err(errc::overloaded);
  if (status == 408 || status == 409) return err(errc::server_error);
  if (status >= 500 && status <= 599) return err(errc::server_error);
  if (status >= 400 && status <= 499) return err(errc::bad_request);
  return err(errc::malformed_response);  // 1xx, 3xx (redirects are not followed), nonsense
}

std::error_code fill_error(int status, const ErrorFields& e, Response& out) {
  out.error_type = !e.code.empty() ? e.code : e.type;
  out.error_message = e.message;
  return error_code_for(status, e.type, e.code, e.message);
}

// A 2xx body: {"choices": [{"message": {"content"}, "finish_reason"}], "usage": {...}}.
std::error_code read_completion(int status, const json& doc, Response& out) {
  if (!doc.is_object()) return err(errc::malformed_response);
  const json* choices = member(doc, "choices");
  if (!choices) {
    // An error body where a result was expected: its words say more than "malformed".
    if (const ErrorFields e = read_error(doc); e.present) return fill_error(status, e, out);
    return err(errc::malformed_response);
  }
  if (!choices->is_array() || choices->empty()) return err(errc::malformed_response);
  const json& first = choices->front();
  const json* message = member(first, "message");
  if (!message || !message->is_object()) return err(errc::malformed_response);
  if (const json* content = member(*message, "content")) {
    if (content->is_string()) out.text = content->get_ref<const std::string&>();
    else if (!content->is_null()) return err(errc::malformed_response);
  }
  out.finish_reason = string_at(first, "finish_reason");
  if (const json* usage = member(doc, "usage")) read_usage(*usage, out.usage);
  return {};
}

}  // namespace

std::string request_body(const Request& request) {
  if (!request.extra.is_null() && !request.extra.is_object())
    throw std::invalid_argument("laneq::openai::request_body: Request::extra must be a JSON object or null");
  json body = json::object();
  body["model"] = request.model;
  json& messages = body["messages"] = json::array();
  for (const Message& m : request.messages)
    messages.push_back(json{{"role", m.role}, {"content", m.content}});
  if (request.max_tokens > 0) body["max_tokens"] = request.max_tokens;
  if (request.stream) body["stream_options"] = json{{"include_usage", true}};
  if (request.extra.is_object()) body.update(request.extra);
  if (request.stream) body["stream"] = true;
  else body.erase("stream");
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::error_code error_code_for(int status, std::string_view type, std::string_view code,
                               std::string_view message) noexcept {
  // Billing, not rate: retrying only burns time, whatever status carries it.
  if (code == "insufficient_quota" || type == "insufficient_quota") return err(errc::quota_exceeded);
  // "Request too large for gpt-4o ... on tokens per min" comes as a 429 but can never succeed.
  const bool too_large = contains_nocase(message, "request too large");
  if (status == 0 || is_2xx(status)) {
    if (too_large) return err(errc::request_too_large);
    if (code == "rate_limit_exceeded" || type == "requests" || type == "tokens")
      return err(errc::rate_limited);
    if (code == "invalid_api_key" || type == "authentication_error") return err(errc::auth);
    if (code == "context_length_exceeded" || type == "invalid_request_error")
      return err(errc::bad_request);
    return err(errc::server_error);
  }
  if (status == 429) return err(too_large ? errc::request_too_large : errc::rate_limited);
  return status_error(status);
}

std::error_code parse_response(int status, const Headers& headers, std::string_view body,
                               Response& out) noexcept {
  try {
    json doc = parse_json(body);
    if (doc.is_discarded()) doc = nullptr;
    ErrorFields failure;
    if (!is_2xx(status)) {
      failure = read_error(doc);
      // Taken before `out` is touched, in case `body` views one of its strings.
      if (failure.message.empty()) failure.message = body.substr(0, kMaxBodySnippet);
    }
    out.status = status;
    out.headers = headers;
    out.text.clear();
    out.usage = {};
    out.finish_reason.clear();
    out.error_type.clear();
    out.error_message.clear();
    std::error_code ec =
        is_2xx(status) ? read_completion(status, doc, out) : fill_error(status, failure, out);
    // Not an HTTP status a provider answers with (the transport reports failures itself): no
    // body rule applies, and status 0 must not read as "in-stream" to error_code_for.
    if (status < 200 || status > 599) ec = err(errc::malformed_response);
    out.raw = std::move(doc);
    return ec;
  } catch (...) {
    return err(errc::internal);
  }
}

void StreamAccumulator::fail(std::error_code ec) {
  if (!error_) error_ = ec;
}

void StreamAccumulator::on_event(const SseEvent& event) {
  if (done_ || error_) return;
  const std::string_view data = event.data;
  if (data.find_first_not_of(" \t\r\n") == std::string_view::npos) return;
  if (data == "[DONE]") {
    done_ = true;
    return;
  }
  const json chunk = parse_json(data);
  if (chunk.is_discarded() || !chunk.is_object()) return fail(err(errc::malformed_response));

  if (const ErrorFields e = read_error(chunk); e.present) {
    error_type_ = !e.code.empty() ? e.code : e.type;
    error_message_ = e.message;
    return fail(error_code_for(0, e.type, e.code, e.message));
  }

  if (const json* choices = member(chunk, "choices"); choices && !choices->is_null()) {
    if (!choices->is_array()) return fail(err(errc::malformed_response));
    for (const json& choice : *choices) {
      if (!choice.is_object()) return fail(err(errc::malformed_response));
      // Response::text is the first choice; with n > 1 the others are in their own indices.
      if (const json* index = member(choice, "index"); index && *index != 0) continue;
      if (const json* delta = member(choice, "delta"); delta && !delta->is_null()) {
        if (!delta->is_object()) return fail(err(errc::malformed_response));
        if (const json* content = member(*delta, "content"); content && !content->is_null()) {
          if (!content->is_string()) return fail(err(errc::malformed_response));
          const std::string& piece = content->get_ref<const std::string&>();
          if (!piece.empty()) {
            text_ += piece;
            if (on_delta_) on_delta_(piece);
          }
        }
      }
      if (const std::string_view reason = string_at(choice, "finish_reason"); !reason.empty())
        finish_reason_ = reason;
    }
  }
  // include_usage: the last chunk has "choices": [] and the usage; others carry "usage": null.
  if (const json* usage = member(chunk, "usage"); usage && usage->is_object())
    read_usage(*usage, usage_);
}

std::error_code StreamAccumulator::finish(Response& out) {
  out.text = std::move(text_);
  text_.clear();
  out.usage = usage_;
  out.finish_reason = finish_reason_;
  out.error_type = error_type_;
  out.error_message = error_message_;
  if (error_) return error_;
  if (!done_) return err(errc::network);
  return {};
}

}  // namespace laneq::openai
