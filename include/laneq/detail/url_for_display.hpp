#pragma once
// A URL as messages and logs may show it: without what may be a secret, the user:password@
// before the host and the query ("?key=..."), nor a fragment; cut at the first control
// character (a line end read with a variable). Shared by the providers' config errors and the
// CLI's start line. The URLs it shows are often malformed (that is why an error shows them):
// no "://", a password with an unencoded '/', '?', '#' or control character. An '@' that
// comes after a '/', '?', '#' or control character may be a password's or the path's or
// query's (no telling): such a URL shows its scheme alone.
#include <string>
#include <string_view>

namespace laneq::detail {

inline std::string url_for_display(std::string_view url) {
  std::size_t ctrl = 0;
  while (ctrl < url.size() && static_cast<unsigned char>(url[ctrl]) >= 0x20 && url[ctrl] != 0x7f)
    ++ctrl;
  // (a "://" only where a scheme ends: not one in a query)
  auto scheme = url.find("://");
  if (scheme != std::string_view::npos && url.find_first_of("/?#@") != scheme + 1)
    scheme = std::string_view::npos;
  const std::size_t host = scheme == std::string_view::npos ? 0 : scheme + 3;
  if (ctrl < host) return std::string(url.substr(0, ctrl));
  std::string_view rest = url.substr(host);
  ctrl -= host;
  if (const auto at = rest.rfind('@'); at != std::string_view::npos) {
    if (std::min(ctrl, rest.find_first_of("/?#")) < at)
      return std::string(url.substr(0, host)) + "...";
    rest.remove_prefix(at + 1);
    ctrl -= at + 1;
  }
  rest = rest.substr(0, std::min(ctrl, rest.find_first_of("?#")));
  return std::string(url.substr(0, host)) + std::string(rest);
}

}  // namespace laneq::detail
