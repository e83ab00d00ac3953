#pragma once
// A URL as messages and logs may show it: without what may be a secret, the user:password@
// before the host and the query ("?key=..."), nor a fragment; cut at the first control
// character (a line end read with a variable). Shared by the providers' config errors and the
// CLI's start line.
#include <algorithm>
#include <string>
#include <string_view>

namespace laneq::detail {

inline std::string url_for_display(std::string_view url) {
  std::size_t end = 0;
  while (end < url.size() && static_cast<unsigned char>(url[end]) >= 0x20 && url[end] != 0x7f &&
         url[end] != '?' && url[end] != '#')
    ++end;
  url = url.substr(0, end);
  const auto scheme = url.find("://");
  if (scheme == std::string_view::npos) return std::string(url);
  const auto host = scheme + 3;
  const auto authority_end = std::min(url.find('/', host), url.size());
  const auto at = url.substr(host, authority_end - host).rfind('@');
  if (at == std::string_view::npos) return std::string(url);
  return std::string(url.substr(0, host)) + std::string(url.substr(host + at + 1));
}

}  // namespace laneq::detail
