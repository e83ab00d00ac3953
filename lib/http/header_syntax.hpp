#pragma once
// HTTP header syntax checks shared by the providers (their extra_headers, at construction) and
// CurlTransport (every request's headers): a line end in a value would add a header line of
// its own, and a name that is not a token is not a header.
#include <algorithm>
#include <string_view>

namespace laneq::detail {

// RFC 9110 5.6.2: letters, digits and !#$%&'*+-.^_`|~, at least one.
inline bool is_header_name(std::string_view name) noexcept {
  constexpr std::string_view tchar_punct = "!#$%&'*+-.^_`|~";
  return !name.empty() && std::all_of(name.begin(), name.end(), [&](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           tchar_punct.find(c) != std::string_view::npos;
  });
}

// No control character but tab (CR, LF and NUL included).
inline bool is_header_value(std::string_view value) noexcept {
  return std::none_of(value.begin(), value.end(), [](char c) {
    return (static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f;
  });
}

}  // namespace laneq::detail
