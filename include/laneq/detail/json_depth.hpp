#pragma once
// A guard for JSON text from outside (a provider's reply, a batch file's line) before it is
// parsed. nlohmann::json parses and destroys without recursion, but copies and dumps with it:
// a value nested 200,000 deep (400 KB of brackets) would overflow the stack the first time it
// is copied, and end the process. No API nests anywhere near the limit.
#include <cstddef>
#include <string_view>

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

}  // namespace laneq::detail
