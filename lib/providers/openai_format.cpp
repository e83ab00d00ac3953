#include "laneq/providers/openai_format.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "laneq/error.hpp"
#include "../json_text.hpp"
#include "../ascii_case.hpp"
#include "format_common.hpp"

namespace laneq::openai {

namespace {

// The helpers and the parse skeleton both wire formats share (format_common.hpp).
using namespace detail;

void read_usage(const json& usage, Usage& out) {
  if (const auto v = count_at(usage, "prompt_tokens")) out.input_tokens = *v;
  if (const auto v = count_at(usage, "completion_tokens")) out.output_tokens = *v;
}

// The error's words go to a Response, or to a stream's accumulator; the code names it best.
std::error_code fill_error(int status, const ErrorFields& e, std::string& error_type,
                           std::string& error_message) {
  error_type = !e.code.empty() ? e.code : e.type;
  error_message = e.message;
  return error_code_for(status, e.type, e.code, e.message);
}

// A message's (or a delta's) content: a string, or (Mistral's reasoning models, gateways in
// front of others) an array of parts, whose "text" parts are the text and whose "refusal"
// parts the refusal (the others, e.g. "thinking", stay in a non-streamed raw; a streamed raw
// keeps the text). False: neither, a malformed answer.
bool append_content(const json& content, std::string& out, std::string* refusal = nullptr) {
  if (content.is_string()) {
    out += content.get_ref<const std::string&>();
    return true;
  }
  if (!content.is_array()) return false;
  for (const json& part : content) {
    if (!part.is_object()) continue;
    const std::string_view type = string_at(part, "type");
    const char* key = type == "text" ? "text" : type == "refusal" && refusal ? "refusal" : nullptr;
    if (!key) continue;
    if (const json* v = member(part, key); v && v->is_string())
      (type == "text" ? out : *refusal) += v->get_ref<const std::string&>();
  }
  return true;
}

// A 2xx body: {"choices": [{"message": {"content"}, "finish_reason"}], "usage": {...}}.
std::error_code read_completion(const json& doc, const json& choices, Response& out) {
  if (!choices.is_array() || choices.empty()) return err(errc::malformed_response);
  const json& first = choices.front();
  const json* message = member(first, "message");
  if (!message || !message->is_object()) return err(errc::malformed_response);
  if (const json* content = member(*message, "content"); content && !content->is_null()) {
    out.text.clear();
    if (!append_content(*content, out.text)) return err(errc::malformed_response);
  }
  out.finish_reason = string_at(first, "finish_reason");
  if (const json* usage = member(doc, "usage")) read_usage(*usage, out.usage);
  return {};
}

}  // namespace

std::string request_body(const Request& request, const BodyOptions& options) {
  if (!request.extra.is_null() && !request.extra.is_object())
    throw std::invalid_argument("laneq::openai::request_body: Request::extra must be a JSON object or null");
  if (request.extra.empty()) {
    // Nothing to merge: written directly, in the key order dump() gives the tree below (a call's
    // body is on every request's path).
    std::string out = "{";
    if (request.max_tokens > 0) {
      out += '"';
      out += options.max_tokens_field;  // both sort before "messages"
      out += "\":" + std::to_string(request.max_tokens) + ',';
    }
    out += "\"messages\":";
    detail::append_json_messages(out, request.messages);
    out += ",\"model\":";
    detail::append_json_string(out, request.model);
    if (request.stream) out += ",\"stream\":true";
    if (request.stream && options.stream_usage) out += ",\"stream_options\":{\"include_usage\":true}";
    out += '}';
    return out;
  }
  json body = json::object();
  body["model"] = request.model;
  json& messages = body["messages"] = json::array();
  for (const Message& m : request.messages)
    messages.push_back(json{{"role", m.role}, {"content", m.content}});
  if (request.max_tokens > 0) body[std::string(options.max_tokens_field)] = request.max_tokens;
  if (request.stream && options.stream_usage) body["stream_options"] = json{{"include_usage", true}};
  if (request.extra.is_object()) body.update(request.extra, /*merge_objects=*/true);
  if (request.stream) {
    body["stream"] = true;
  } else {  // (stream_options without stream is a 400: an `extra` shared with streamed calls)
    body.erase("stream");
    body.erase("stream_options");
  }
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::error_code error_code_for(int status, std::string_view type, std::string_view code,
                               std::string_view message) noexcept {
  // Billing, not rate: retrying only burns time, whatever status carries it (both come as 429).
  if (code == "insufficient_quota" || type == "insufficient_quota" ||
      code == "billing_not_active" || type == "billing_not_active")
    return err(errc::quota_exceeded);
  // "Request too large for gpt-4o ... on tokens per min" comes as a 429 but can never succeed.
  const bool too_large = detail::icontains(message, "request too large");
  if (status == 0 || is_2xx(status)) {
    if (too_large) return err(errc::request_too_large);
    if (code == "rate_limit_exceeded" || type == "requests" || type == "tokens")
      return err(errc::rate_limited);
    if (code == "invalid_api_key" || type == "authentication_error") return err(errc::auth);
    if (code == "context_length_exceeded" || type == "invalid_request_error")
      return err(errc::bad_request);
    // In a 200's body or stream, a numeric code is the status the error would have had.
    if (const int in_code = detail::status_in_code(code)) return detail::status_error(in_code);
    return err(errc::server_error);
  }
  if (status == 429) return err(too_large ? errc::request_too_large : errc::rate_limited);
  return detail::status_error(status);
}

std::error_code parse_response(int status, const Headers& headers, std::string_view body,
                               Response& out) noexcept {
  return detail::parse_response(status, headers, body, out, "choices", read_completion,
                                fill_error);
}

void StreamAccumulator::on_event(const SseEvent& event) {
  if (skip(event)) return;
  const std::string_view data = event.data;
  if (data == "[DONE]") {
    done_ = true;
    return;
  }
  const json chunk = parse_json(data);
  if (chunk.is_discarded() || !chunk.is_object()) return fail(err(errc::malformed_response));

  if (const ErrorFields e = read_error(chunk); e.present)
    return fail(fill_error(0, e, error_type_, error_message_));
  // The first stated (Azure's first chunk, its prompt filter results, says "" and 0: not stated).
  for (const char* key : {"id", "model", "created", "system_fingerprint"})
    if (const json* v = member(chunk, key);
        v && !v->is_null() && *v != "" && *v != 0 && !head_.contains(key))
      head_[key] = *v;

  if (const json* choices = member(chunk, "choices"); choices && !choices->is_null()) {
    if (!choices->is_array()) return fail(err(errc::malformed_response));
    for (const json& choice : *choices) {
      if (!choice.is_object()) return fail(err(errc::malformed_response));
      // Response::text is the first choice; with n > 1 the others are in their own indices.
      if (const json* index = member(choice, "index"); index && *index != 0) continue;
      if (const json* delta = member(choice, "delta"); delta && !delta->is_null()) {
        if (!delta->is_object()) return fail(err(errc::malformed_response));
        if (const json* content = member(*delta, "content"); content && !content->is_null()) {
          if (content->is_string()) {
            append(content->get_ref<const std::string&>());
          } else {
            std::string text;
            if (!append_content(*content, text, &refusal_))
              return fail(err(errc::malformed_response));
            if (!text.empty()) append(text);
          }
        }
        if (const json* refusal = member(*delta, "refusal"); refusal && refusal->is_string())
          refusal_ += refusal->get_ref<const std::string&>();
        if (const json* calls = member(*delta, "tool_calls"); calls && calls->is_array())
          for (const json& call : *calls) on_tool_call_delta(call);
      }
      if (const std::string_view reason = string_at(choice, "finish_reason"); !reason.empty())
        finish_reason_ = reason;
    }
  }
  // include_usage: the last chunk has "choices": [] and the usage; others carry "usage": null.
  if (const json* usage = member(chunk, "usage"); usage && usage->is_object()) {
    read_usage(*usage, usage_);
    usage_raw_ = *usage;
  }
}

// A tool call arrives in pieces: the first names it (index, id, type, function.name), the rest
// add to function.arguments.
void StreamAccumulator::on_tool_call_delta(const json& delta) {
  if (!delta.is_object()) return fail(err(errc::malformed_response));
  if (tool_calls_.is_null()) tool_calls_ = json::array();
  // Its place: "index" (OpenAI); some compatible servers send none (Gemini, older Ollama): then
  // the call with this "id", a new one for a new id, else the last one.
  std::size_t i = tool_calls_.size();
  if (const json* index = member(delta, "index"); index && index->is_number_unsigned()) {
    if (index->get<std::uint64_t>() > 1024) return fail(err(errc::malformed_response));
    i = index->get<std::size_t>();
  } else if (const json* id = member(delta, "id"); id && id->is_string() && !id->get_ref<const std::string&>().empty()) {
    for (std::size_t k = 0; k < tool_calls_.size(); ++k)
      if (tool_calls_[k]["id"] == *id) i = k;
  } else if (!tool_calls_.empty()) {
    i = tool_calls_.size() - 1;
  }
  while (tool_calls_.size() <= i)
    tool_calls_.push_back({{"id", ""}, {"type", "function"},
                           {"function", {{"name", ""}, {"arguments", ""}}}});
  json& call = tool_calls_[i];
  // (Some compatible servers repeat "id": "" on every later piece: not a new id.)
  for (const char* key : {"id", "type"})
    if (const json* v = member(delta, key);
        v && v->is_string() && !v->get_ref<const std::string&>().empty())
      call[key] = *v;
  if (const json* fn = member(delta, "function"); fn && fn->is_object()) {
    for (const char* key : {"name", "arguments"})
      if (const json* piece = member(*fn, key); piece && piece->is_string())
        call["function"][key].get_ref<std::string&>() += piece->get_ref<const std::string&>();
  }
}

std::error_code StreamAccumulator::finish(Response& out) {
  json message = {{"role", "assistant"}, {"content", text().empty() ? json(nullptr) : json(text())}};
  if (!refusal_.empty()) message["refusal"] = refusal_;
  if (!tool_calls_.is_null()) message["tool_calls"] = std::move(tool_calls_);
  json completion = {{"object", "chat.completion"},
                     {"choices", json::array({{{"index", 0},
                                               {"message", std::move(message)},
                                               {"finish_reason", finish_reason_.empty()
                                                                     ? json(nullptr)
                                                                     : json(finish_reason_)}}})}};
  if (!usage_raw_.is_null()) completion["usage"] = std::move(usage_raw_);
  completion.update(head_);
  out.raw = std::move(completion);
  return hand_over(out, usage_);
}

}  // namespace laneq::openai
