#include "record_json.hpp"

#include <cstdint>
#include <limits>

#include "../json_text.hpp"
#include "laneq/detail/json_depth.hpp"

namespace laneq::store {

using nlohmann::json;

namespace {

// A discarded value anywhere in `j` (see append_json).
bool holds_discarded(const json& j) {
  return detail::json_value_fault_of(j, std::numeric_limits<std::size_t>::max()) ==
         detail::json_value_fault::discarded;
}

}  // namespace

void append_json(std::string& out, const Request& r) {
  out += "{\"model\":";
  detail::append_json_string(out, r.model);
  out += ",\"messages\":";
  detail::append_json_messages(out, r.messages);
  out += ",\"max_tokens\":";
  out += std::to_string(r.max_tokens);
  out += r.stream ? ",\"stream\":true,\"extra\":" : ",\"stream\":false,\"extra\":";
  // A discarded value (json::parse(text, nullptr, false) of bad text) dumps as "<discarded>",
  // which no later open could read back. The queue refuses a durable request carrying one,
  // at any depth (bad_request); written as null here all the same, so that no row is ever
  // unreadable.
  if (r.extra.is_null() || holds_discarded(r.extra))
    out += "null";
  else
    out += dump(r.extra);
  out += '}';
}

json to_json(const Response& r) {
  json headers = json::array();
  for (const auto& [name, value] : r.headers) headers.push_back({name, value});
  return {{"status", r.status},
          {"text", r.text},
          {"usage", {{"input_tokens", r.usage.input_tokens},
                     {"output_tokens", r.usage.output_tokens},
                     {"rate_exempt_input_tokens", r.usage.rate_exempt_input_tokens}}},
          {"finish_reason", r.finish_reason},
          {"headers", std::move(headers)},
          {"raw", holds_discarded(r.raw) ? json(nullptr) : r.raw},  // (a custom provider's)
          {"error_type", r.error_type},
          {"error_message", r.error_message},
          {"attempts", r.attempts},
          {"queue_wait_ns", r.queue_wait.count()},
          {"service_time_ns", r.service_time.count()}};
}

Request request_from_json(const json& j) {
  Request r;
  j.at("model").get_to(r.model);
  for (const json& m : j.at("messages"))
    r.messages.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
  j.at("max_tokens").get_to(r.max_tokens);
  j.at("stream").get_to(r.stream);
  r.extra = j.at("extra");
  return r;
}

Response response_from_json(const json& j) {
  Response r;
  j.at("status").get_to(r.status);
  j.at("text").get_to(r.text);
  const json& usage = j.at("usage");
  usage.at("input_tokens").get_to(r.usage.input_tokens);
  usage.at("output_tokens").get_to(r.usage.output_tokens);
  r.usage.rate_exempt_input_tokens = usage.value("rate_exempt_input_tokens", std::int64_t{0});  // v3 rows lack it
  j.at("finish_reason").get_to(r.finish_reason);
  for (const json& h : j.at("headers"))
    r.headers.emplace_back(h.at(0).get<std::string>(), h.at(1).get<std::string>());
  r.raw = j.at("raw");
  j.at("error_type").get_to(r.error_type);
  j.at("error_message").get_to(r.error_message);
  j.at("attempts").get_to(r.attempts);
  r.queue_wait = std::chrono::nanoseconds(j.at("queue_wait_ns").get<std::int64_t>());
  r.service_time = std::chrono::nanoseconds(j.at("service_time_ns").get<std::int64_t>());
  return r;
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

Request parse_request(std::string_view text) { return request_from_json(json::parse(text)); }

Response parse_response(std::string_view text) { return response_from_json(json::parse(text)); }

}  // namespace laneq::store
