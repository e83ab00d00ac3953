#pragma once
// A guard for JSON text from outside (a provider's reply, a batch file's line) before it is
// parsed, and for a value a caller parsed (Request::extra). nlohmann::json parses and destroys
// without recursion, but copies and dumps with it: a value nested 200,000 deep (400 KB of
// brackets) would overflow the stack the first time it is copied, and end the process. No API
// nests anywhere near the limit.
#include <cmath>
#include <cstddef>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace laneq::detail {

inline constexpr std::size_t kMaxJsonDepth = 256;

// True when the arrays and objects in `text` nest at most `max_depth` deep. Brackets inside
// strings do not count; the text need not be valid JSON (the parser judges that).
inline bool json_depth_within(std::string_view text,
                              std::size_t max_depth = kMaxJsonDepth) noexcept {
  std::size_t depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;  // the escaped character cannot end the string
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return true;
}

// What is wrong with a value built in memory (Request::extra from a caller's own parse), if
// anything: nesting beyond the same bound; a NaN or infinite number, which JSON cannot say
// (nlohmann dumps it as null: a setting silently replaced by the provider's default); a
// discarded value (a failed json::parse(text, nullptr, false)), which dumps as the text
// "<discarded>": no JSON at all. A discarded value is found past a NaN (the journal asks for
// it alone). Walked without recursion: the walk must not do what it guards against.
enum class json_value_fault { none, too_deep, non_finite, discarded };

inline json_value_fault json_value_fault_of(const nlohmann::json& value,
                                            std::size_t max_depth = kMaxJsonDepth) {
  const auto finite = [](const nlohmann::json& v) {
    return !v.is_number_float() || std::isfinite(v.get<double>());
  };
  const auto fault = [&](const nlohmann::json& v) {
    if (v.is_discarded()) return json_value_fault::discarded;
    return finite(v) ? json_value_fault::none : json_value_fault::non_finite;
  };
  if (!value.is_structured()) return fault(value);
  std::vector<std::pair<const nlohmann::json*, std::size_t>> todo{{&value, 1}};  // its depth
  auto found = json_value_fault::none;
  while (!todo.empty()) {
    const auto [v, depth] = todo.back();
    todo.pop_back();
    if (depth > max_depth) return json_value_fault::too_deep;
    for (const auto& child : *v) {
      if (child.is_structured()) todo.emplace_back(&child, depth + 1);
      else if (const auto f = fault(child); f == json_value_fault::discarded) return f;
      else if (f != json_value_fault::none) found = f;
    }
  }
  return found;
}

}  // namespace laneq::detail
