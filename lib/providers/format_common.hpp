#pragma once
// What the OpenAI and Anthropic wire formats share: lenient JSON access, the "error" member both
// APIs use, the status-only error mapping, and the skeleton of parse_response. Each wire keeps
// only what is its own (the 2xx body, and how an error's fields become a laneq error).
// Internal to lib/.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include <nlohmann/json.hpp>

#include "laneq/detail/json_depth.hpp"
#include "laneq/error.hpp"
#include "laneq/request.hpp"

namespace laneq::detail {

using json = nlohmann::json;

// Enough of a non-JSON error page (a proxy's HTML, a plain-text 502) to tell what it was.
inline constexpr std::size_t kMaxBodySnippet = 512;
inline constexpr std::int64_t kMaxCount = std::numeric_limits<std::int64_t>::max();

inline std::error_code err(errc e) noexcept { return make_error_code(e); }

inline bool is_2xx(int status) noexcept { return status >= 200 && status <= 299; }

// Discarded (not thrown) when `text` is not JSON, or nests deeper than kMaxJsonDepth (a copy
// of such a value would overflow the stack).
inline json parse_json(std::string_view text) {
  if (!json_depth_within(text)) return json(json::value_t::discarded);
  return json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

// obj[key] when obj is an object that has it, else nullptr.
inline const json* member(const json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  const auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

// obj[key] as a string; "" when absent or not a string.
inline std::string_view string_at(const json& obj, std::string_view key) {
  const json* m = member(obj, key);
  return m && m->is_string() ? std::string_view(m->get_ref<const std::string&>()) : std::string_view{};
}

// A token count: a non-negative integer (clamped to int64), else nothing. Counts are
// informational: a bad one is dropped, it does not fail the response.
inline std::optional<std::int64_t> count_at(const json& obj, std::string_view key) {
  const json* m = member(obj, key);
  if (!m) return std::nullopt;
  if (m->is_number_unsigned())
    return static_cast<std::int64_t>(
        std::min<std::uint64_t>(m->get<std::uint64_t>(), static_cast<std::uint64_t>(kMaxCount)));
  if (m->is_number_integer()) {
    const auto v = m->get<std::int64_t>();
    if (v >= 0) return v;
  }
  return std::nullopt;
}

// {"error": {"type", "message", "code"}} (Anthropic wraps it in {"type": "error", ...} and sends
// no "code"), or, from some proxies, {"error": "message"}.
struct ErrorFields {
  bool present = false;
  std::string type{};
  std::string code{};  // a string, or an integer as its digits; OpenAI only
  std::string message{};
};

inline ErrorFields read_error(const json& doc) {
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

// The laneq error for an HTTP status alone, once the wire's body rules have had their say.
inline std::error_code status_error(int status) noexcept {
  if (status == 401 || status == 403) return err(errc::auth);
  if (status == 402) return err(errc::quota_exceeded);  // Payment Required: credits used up
  if (status == 413) return err(errc::request_too_large);
  if (status == 429) return err(errc::rate_limited);
  if (status == 503 || status == 529) return err(errc::overloaded);
  if (status == 408 || status == 409) return err(errc::server_error);
  if (status >= 500 && status <= 599) return err(errc::server_error);
  if (status >= 400 && status <= 499) return err(errc::bad_request);
  return err(errc::malformed_response);  // 1xx, 3xx (redirects are not followed), nonsense
}

// An error's numeric code that is an HTTP status (vLLM's and OpenRouter's errors in a 200's
// body or stream say "code": 400 / 402 / 429): that status, else 0.
inline int status_in_code(std::string_view code) noexcept {
  if (code.size() != 3) return 0;
  int n = 0;
  for (const char c : code) {
    if (c < '0' || c > '9') return 0;
    n = n * 10 + (c - '0');
  }
  return n >= 400 && n <= 599 ? n : 0;
}

// The non-streamed parse both wires document: fills out.status / headers / raw and resets the
// fields a response carries. A 2xx body is an object holding `result_key`, read by
//   read_result(const json& doc, const json& result, Response& out) -> std::error_code;
// a 2xx body without it but with an "error" member, and every other status, go to
//   fill_error(int status, const ErrorFields&, std::string& error_type,
//              std::string& error_message) -> std::error_code
// (a non-JSON error body reports its first kMaxBodySnippet bytes as the message). Never throws.
template <class ReadResult, class FillError>
std::error_code parse_response(int status, const Headers& headers, std::string_view body,
                               Response& out, std::string_view result_key, ReadResult read_result,
                               FillError fill_error) noexcept {
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
    const auto read_2xx = [&]() -> std::error_code {
      if (!doc.is_object()) return err(errc::malformed_response);
      if (const json* result = member(doc, result_key)) return read_result(doc, *result, out);
      // An error body where a result was expected: its words say more than "malformed".
      if (const ErrorFields e = read_error(doc); e.present)
        return fill_error(status, e, out.error_type, out.error_message);
      return err(errc::malformed_response);
    };
    std::error_code ec = is_2xx(status)
                             ? read_2xx()
                             : fill_error(status, failure, out.error_type, out.error_message);
    // Not an HTTP status a provider answers with (the transport reports failures itself): no
    // body rule applies, and status 0 must not read as "in-stream" to error_code_for.
    if (status < 200 || status > 599) ec = err(errc::malformed_response);
    out.raw = std::move(doc);
    return ec;
  } catch (...) {
    return err(errc::internal);
  }
}

}  // namespace laneq::detail
