#pragma once
// JSON (de)serialisation of Request and Response for the journal (internal).
//   request:  {"model","messages":[{"role","content"}],"max_tokens","stream","extra"}
//             (on_delta is a callback and is not stored)
//   response: {"status","text","usage":{"input_tokens","output_tokens",
//              "rate_exempt_input_tokens"},"finish_reason",
//              "headers":[[name,value],...],"raw","error_type","error_message","attempts",
//              "queue_wait_ns","service_time_ns"}
// Headers are pairs, not an object: order and repeated names survive. The readers throw
// nlohmann::json::exception on a malformed document.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "laneq/request.hpp"

namespace laneq::store {

// Appends the request's JSON to `out` without building a JSON tree (the writer thread's hot
// path: ~3x faster than nlohmann's to_json + dump); invalid UTF-8 becomes U+FFFD.
void append_json(std::string& out, const Request& r);
nlohmann::json to_json(const Response& r);
Request request_from_json(const nlohmann::json& j);
Response response_from_json(const nlohmann::json& j);

// Compact text, as stored; invalid UTF-8 is replaced (U+FFFD), never a throw.
std::string dump(const nlohmann::json& j);
Request parse_request(std::string_view text);
Response parse_response(std::string_view text);

}  // namespace laneq::store
