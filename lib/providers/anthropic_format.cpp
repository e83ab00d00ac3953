#include "laneq/providers/anthropic_format.hpp"

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "laneq/error.hpp"
#include "../ascii_case.hpp"
#include "../json_text.hpp"
#include "format_common.hpp"

namespace laneq::anthropic {

namespace {

// The helpers and the parse skeleton both wire formats share (format_common.hpp).
using namespace detail;

std::int64_t saturating_add(std::int64_t a, std::int64_t b) noexcept {
  return a > kMaxCount - b ? kMaxCount : a + b;  // both are >= 0
}

// Cache writes and reads are billed as input, so they count as input here; reads are not
// rate-limited (Usage::rate_exempt_input_tokens).
std::int64_t total_input(std::int64_t input, std::int64_t cache_creation, std::int64_t cache_read) {
  return saturating_add(saturating_add(input, cache_creation), cache_read);
}

// The error's words go to a Response, or to a stream's accumulator; the type decides.
std::error_code fill_error(int status, const ErrorFields& e, std::string& error_type,
                           std::string& error_message) {
  error_type = e.type;
  error_message = e.message;
  return error_code_for(status, e.type, e.message);
}

// A 2xx body: {"type": "message", "content": [{"type": "text", "text"}, ...], "stop_reason",
// "usage": {...}}.
std::error_code read_message(const json& doc, const json& content, Response& out) {
  if (!content.is_array()) return err(errc::malformed_response);
  for (const json& block : content) {
    if (!block.is_object()) return err(errc::malformed_response);
    if (string_at(block, "type") != "text") continue;
    const json* text = member(block, "text");
    if (!text || !text->is_string()) return err(errc::malformed_response);
    out.text += text->get_ref<const std::string&>();
  }
  out.finish_reason = string_at(doc, "stop_reason");
  if (const json* usage = member(doc, "usage")) {
    out.usage.input_tokens = total_input(count_at(*usage, "input_tokens").value_or(0),
                                         count_at(*usage, "cache_creation_input_tokens").value_or(0),
                                         count_at(*usage, "cache_read_input_tokens").value_or(0));
    out.usage.output_tokens = count_at(*usage, "output_tokens").value_or(0);
    out.usage.rate_exempt_input_tokens = count_at(*usage, "cache_read_input_tokens").value_or(0);
  }
  return {};
}

// The Messages API has no "system" role, and no "developer" (OpenAI's name for instructions to
// its reasoning models, in provider-neutral code): both go to the top-level "system".
bool is_system(const std::string& role) { return role == "system" || role == "developer"; }

}  // namespace

std::string request_body(const Request& request, std::int32_t fallback_max_tokens) {
  if (!request.extra.is_null() && !request.extra.is_object())
    throw std::invalid_argument("laneq::anthropic::request_body: Request::extra must be a JSON object or null");
  if (fallback_max_tokens < 1)
    throw std::invalid_argument("laneq::anthropic::request_body: fallback_max_tokens must be >= 1");
  if (request.extra.empty()) {
    // Nothing to merge: written directly, in the key order dump() gives the tree below (a call's
    // body is on every request's path).
    std::string out = "{\"max_tokens\":";
    out += std::to_string(request.max_tokens > 0 ? request.max_tokens : fallback_max_tokens);
    out += ",\"messages\":[";
    std::string system;
    bool has_system = false, first = true;
    for (const Message& m : request.messages) {
      if (is_system(m.role)) {
        if (has_system) system += "\n\n";
        system += m.content;
        has_system = true;
        continue;
      }
      out += first ? "{\"content\":" : ",{\"content\":";
      first = false;
      detail::append_json_string(out, m.content);
      out += ",\"role\":";
      detail::append_json_string(out, m.role);
      out += '}';
    }
    out += "],\"model\":";
    detail::append_json_string(out, request.model);
    if (request.stream) out += ",\"stream\":true";
    if (has_system) {
      out += ",\"system\":";
      detail::append_json_string(out, system);
    }
    out += '}';
    return out;
  }
  json body = json::object();
  body["model"] = request.model;
  body["max_tokens"] = request.max_tokens > 0 ? request.max_tokens : fallback_max_tokens;
  // The Messages API has no "system" role: system prompts go to the top-level "system".
  std::string system;
  bool has_system = false;
  json& messages = body["messages"] = json::array();
  for (const Message& m : request.messages) {
    if (is_system(m.role)) {
      if (has_system) system += "\n\n";
      system += m.content;
      has_system = true;
    } else {
      messages.push_back(json{{"role", m.role}, {"content", m.content}});
    }
  }
  if (has_system) body["system"] = std::move(system);
  if (request.extra.is_object()) body.update(request.extra);
  if (request.stream) body["stream"] = true;
  else body.erase("stream");
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::error_code error_code_for(int status, std::string_view error_type,
                               std::string_view message) noexcept {
  // These say more than the status (a 529 may come through a proxy as a 500 or a 200 stream).
  if (error_type == "overloaded_error") return err(errc::overloaded);
  if (error_type == "request_too_large") return err(errc::request_too_large);
  if (error_type == "billing_error") return err(errc::quota_exceeded);
  // An empty account answers 400 invalid_request_error, "Your credit balance is too low to
  // access the Anthropic API": billing, not a malformed request.
  if (error_type == "invalid_request_error" &&
      detail::icontains(message, "credit balance is too low"))
    return err(errc::quota_exceeded);
  if (status == 0 || is_2xx(status)) {
    if (error_type == "rate_limit_error") return err(errc::rate_limited);
    if (error_type == "invalid_request_error" || error_type == "not_found_error")
      return err(errc::bad_request);
    if (error_type == "authentication_error" || error_type == "permission_error")
      return err(errc::auth);
    return err(errc::server_error);  // api_error, timeout_error, and types added later
  }
  return detail::status_error(status);
}

std::error_code parse_response(int status, const Headers& headers, std::string_view body,
                               Response& out) noexcept {
  return detail::parse_response(status, headers, body, out, "content", read_message,
                                fill_error);
}

Usage StreamAccumulator::usage() const noexcept {
  return Usage{.input_tokens = total_input(input_tokens_, cache_creation_input_tokens_,
                                           cache_read_input_tokens_),
               .output_tokens = output_tokens_,
               .rate_exempt_input_tokens = cache_read_input_tokens_};
}

void StreamAccumulator::on_event(const SseEvent& event) {
  if (skip(event)) return;
  const json data = parse_json(event.data);
  if (data.is_discarded() || !data.is_object()) return fail(err(errc::malformed_response));
  const std::string_view type = !event.event.empty() ? std::string_view(event.event)
                                                     : string_at(data, "type");

  // Usage counts are cumulative: a later report of the same count replaces the earlier one,
  // but never lowers it (compatible servers send message_delta's input_tokens as 0: the
  // prompt would come out free, its whole estimate refunded to the budget).
  const auto read_usage = [&](const json* usage) {
    if (!usage || usage->is_null()) return;  // as a non-streamed body's null usage: none
    if (!usage->is_object()) return fail(err(errc::malformed_response));
    const auto take = [&](const char* key, std::int64_t& count) {
      if (const auto v = count_at(*usage, key)) count = std::max(count, *v);
    };
    take("input_tokens", input_tokens_);
    take("cache_creation_input_tokens", cache_creation_input_tokens_);
    take("cache_read_input_tokens", cache_read_input_tokens_);
    take("output_tokens", output_tokens_);
  };
  const auto append_text = [&](const json* text) {
    if (!text || !text->is_string()) return fail(err(errc::malformed_response));
    append(text->get_ref<const std::string&>());
  };

  if (type == "message_start") {
    const json* message = member(data, "message");
    if (!message || !message->is_object()) return fail(err(errc::malformed_response));
    for (const char* key : {"id", "model"})
      if (const json* v = member(*message, key); v && v->is_string()) head_[key] = *v;
    read_usage(member(*message, "usage"));
  } else if (type == "content_block_start") {
    const json* block = member(data, "content_block");
    if (!block || !block->is_object()) return fail(err(errc::malformed_response));
    if (const auto i = block_index(data)) content_[*i] = *block;
    if (string_at(*block, "type") == "text" && member(*block, "text"))
      append_text(member(*block, "text"));
  } else if (type == "content_block_delta") {
    const json* delta = member(data, "delta");
    if (!delta || !delta->is_object()) return fail(err(errc::malformed_response));
    const std::string_view kind = string_at(*delta, "type");
    // A piece of the block's `field` (its text, thinking or signature), joined in raw.
    const auto add_to_block = [&](const char* field) {
      const json* piece = member(*delta, field);
      if (!piece || !piece->is_string()) return;
      const auto i = block_index(data);
      if (!i) return;
      json& f = content_[*i][field];
      if (!f.is_string()) f = "";
      f.get_ref<std::string&>() += piece->get_ref<const std::string&>();
    };
    if (kind == "text_delta") {
      append_text(member(*delta, "text"));
      add_to_block("text");
    } else if (kind == "thinking_delta") {
      add_to_block("thinking");
    } else if (kind == "signature_delta") {
      add_to_block("signature");
    } else if (kind == "input_json_delta") {
      const json* piece = member(*delta, "partial_json");
      if (!piece || !piece->is_string()) return fail(err(errc::malformed_response));
      if (const auto i = block_index(data)) partial_json_[*i] += piece->get_ref<const std::string&>();
    }
  } else if (type == "message_delta") {
    if (const json* delta = member(data, "delta"); delta && delta->is_object()) {
      if (const std::string_view reason = string_at(*delta, "stop_reason"); !reason.empty())
        finish_reason_ = reason;
      if (const json* seq = member(*delta, "stop_sequence"); seq && seq->is_string())
        head_["stop_sequence"] = *seq;
    }
    read_usage(member(data, "usage"));
  } else if (type == "message_stop") {
    done_ = true;
  } else if (type == "error") {
    fail(fill_error(0, read_error(data), error_type_, error_message_));
  }
  // ping, content_block_stop and unknown types carry nothing laneq keeps.
}

// The block an event's "index" names, made room for in content_ and partial_json_ (nullopt when
// the index is missing or absurd).
std::optional<std::size_t> StreamAccumulator::block_index(const json& event) {
  const json* index = member(event, "index");
  if (!index || !index->is_number_unsigned() || index->get<std::uint64_t>() > 1024) return std::nullopt;
  const auto i = index->get<std::size_t>();
  while (content_.size() <= i) content_.push_back(json::object());
  if (partial_json_.size() <= i) partial_json_.resize(i + 1);
  return i;
}

std::error_code StreamAccumulator::finish(Response& out) {
  for (std::size_t i = 0; i < content_.size() && i < partial_json_.size(); ++i) {
    if (partial_json_[i].empty()) continue;
    json input = parse_json(partial_json_[i]);
    content_[i]["input"] = input.is_discarded() ? json(partial_json_[i]) : std::move(input);
  }
  json counts = {{"input_tokens", input_tokens_}, {"output_tokens", output_tokens_}};
  if (cache_creation_input_tokens_) counts["cache_creation_input_tokens"] = cache_creation_input_tokens_;
  if (cache_read_input_tokens_) counts["cache_read_input_tokens"] = cache_read_input_tokens_;
  out.raw = {{"type", "message"},
             {"role", "assistant"},
             {"content", std::move(content_)},
             {"stop_reason", finish_reason_.empty() ? json(nullptr) : json(finish_reason_)},
             {"usage", std::move(counts)}};
  out.raw.update(head_);
  content_ = json::array();
  return hand_over(out, usage());
}

}  // namespace laneq::anthropic
