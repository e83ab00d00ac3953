#pragma once
// ASCII case folding for protocol text (header names, URL schemes, error messages): locale-free,
// as HTTP's rules are. Internal (lib/).
#include <algorithm>
#include <string_view>

namespace laneq::detail {

constexpr char ascii_lower(char c) noexcept {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

constexpr bool iequals(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (ascii_lower(a[i]) != ascii_lower(b[i])) return false;
  return true;
}

constexpr bool istarts_with(std::string_view s, std::string_view prefix) noexcept {
  return s.size() >= prefix.size() && iequals(s.substr(0, prefix.size()), prefix);
}

inline bool icontains(std::string_view haystack, std::string_view needle) noexcept {
  return std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end(),
                     [](char a, char b) { return ascii_lower(a) == ascii_lower(b); }) !=
         haystack.end();
}

}  // namespace laneq::detail
