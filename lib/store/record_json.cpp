#include "record_json.hpp"

#include <cstdint>

namespace laneq::store {

using nlohmann::json;

namespace {

// The length of the valid UTF-8 sequence starting at s[i] (RFC 3629), 0 if there is none.
std::size_t utf8_length(std::string_view s, std::size_t i) noexcept {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = byte(0);
  std::size_t n;
  unsigned char lo = 0x80, hi = 0xbf;  // the second byte's range
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;  // no overlong forms
    if (c == 0xed) hi = 0x9f;  // no surrogates
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;  // <= U+10FFFF
  } else {
    return 0;
  }
  if (i + n > s.size() || byte(1) < lo || byte(1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if ((byte(k) & 0xc0) != 0x80) return 0;
  return n;
}

void append_string(std::string& out, std::string_view s) {
  out += '"';
  std::size_t plain = 0;  // start of the run of bytes copied as they are
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
      ++i;
      continue;
    }
    if (c >= 0x80) {
      if (const std::size_t len = utf8_length(s, i)) {  // a valid multi-byte character: kept
        i += len;
        continue;
      }
    }
    out.append(s, plain, i - plain);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += "0123456789abcdef"[c >> 4];
          out += "0123456789abcdef"[c & 0xf];
        } else {
          out += "\xef\xbf\xbd";  // U+FFFD for a byte that starts no valid sequence
        }
    }
    plain = ++i;
  }
  out.append(s, plain, std::string_view::npos);
  out += '"';
}

}  // namespace

void append_json(std::string& out, const Request& r) {
  out += "{\"model\":";
  append_string(out, r.model);
  out += ",\"messages\":[";
  for (std::size_t i = 0; i < r.messages.size(); ++i) {
    out += i ? ",{\"role\":" : "{\"role\":";
    append_string(out, r.messages[i].role);
    out += ",\"content\":";
    append_string(out, r.messages[i].content);
    out += '}';
  }
  out += "],\"max_tokens\":";
  out += std::to_string(r.max_tokens);
  out += r.stream ? ",\"stream\":true,\"extra\":" : ",\"stream\":false,\"extra\":";
  if (r.extra.is_null())
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
                     {"output_tokens", r.usage.output_tokens}}},
          {"finish_reason", r.finish_reason},
          {"headers", std::move(headers)},
          {"raw", r.raw},
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
