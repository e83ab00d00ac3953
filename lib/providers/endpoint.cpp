#include "endpoint.hpp"

#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <system_error>

#include "laneq/error.hpp"
#include "laneq/detail/post.hpp"
#include "laneq/detail/url_for_display.hpp"
#include "laneq/provider.hpp"
#include "http_call.hpp"
#include "../ascii_case.hpp"
#include "../http/header_syntax.hpp"

#include <asio/post.hpp>

namespace laneq::detail {

Endpoint resolve_endpoint(std::string key, const char* key_env, std::string base,
                          const char* base_env, const char* default_base, const std::string& path,
                          const char* provider, bool base_path_is_root) {
  if (key.empty())
    if (const char* v = std::getenv(key_env)) key = v;
  const bool base_from_env = base.empty() && std::getenv(base_env) != nullptr;
  if (base_from_env) base = std::getenv(base_env);
  const bool custom_base = !base.empty();
  if (key.empty() && !custom_base)
    throw std::system_error(make_error_code(errc::invalid_config),
                            std::string(provider) + ": no API key: set " + key_env +
                                " (or the config's api_key), or a base URL (" + base_env +
                                ") for an endpoint that needs none");
  if (!custom_base) base = default_base;
  // (schemes are case-insensitive; without one curl would guess http://)
  const auto refuse = [&](const char* why) {
    throw std::system_error(make_error_code(errc::invalid_config),
                            std::string(provider) + ": the base URL \"" +
                                url_for_display(base) + "\"" +
                                (base_from_env ? std::string(" (from ") + base_env + ")" : "") +
                                " " + why);
  };
  if (!detail::istarts_with(base, "http://") && !detail::istarts_with(base, "https://"))
    refuse("must start with http:// or https://");
  // (a URL read with its line end: curl would refuse it at every call, as a network error)
  if (std::any_of(base.begin(), base.end(),
                  [](char c) { return static_cast<unsigned char>(c) <= 0x20 || c == 0x7f; }))
    refuse("has a space or a control character (a line end read with it?)");
  {  // "https://" alone (a variable left unset): curl would read the path's first word as a host
    const auto start = base.find("://") + 3;
    std::string_view authority(base);
    authority = authority.substr(start, authority.find_first_of("/?#", start) - start);
    if (const auto at = authority.rfind('@'); at != std::string_view::npos)
      authority.remove_prefix(at + 1);  // user:password@
    if (authority.empty() || authority.front() == ':') refuse("has no host name");
  }
  // A query (a compatible server's "?api-version=" or "?key=") stays at the end.
  std::string query;
  if (const auto q = base.find('?'); q != std::string::npos) {
    query = base.substr(q);
    base.resize(q);
  }
  while (!base.empty() && base.back() == '/') base.pop_back();
  std::string url = base;
  // "/v1/chat/completions" after a base that already ends in "/v1", or (OpenAI) after any base
  // with a path of its own ("https://gateway/v1beta/openai", "https://gateway/openai"): append
  // the rest only, as the official SDK does with its base URL.
  const bool ends_in_v1 = url.size() >= 3 && url.compare(url.size() - 3, 3, "/v1") == 0;
  const bool has_path = url.find('/', url.find("://") + 3) != std::string::npos;
  if (path.starts_with("/v1/") && (ends_in_v1 || (base_path_is_root && has_path)))
    url += path.substr(3);
  else
    url += path;
  url += query;
  return {std::move(url), std::move(key)};
}

void check_headers(const Headers& headers, const char* provider) {
  for (const auto& [name, value] : headers) {
    if (!is_header_name(name))
      throw std::system_error(make_error_code(errc::invalid_config),
                              std::string(provider) + ": the header name \"" + name +
                                  "\" is not an HTTP token (letters, digits, !#$%&'*+-.^_`|~)");
    if (!is_header_value(value))  // (not the value itself: it may be an API key)
      throw std::system_error(make_error_code(errc::invalid_config),
                              std::string(provider) + ": the value of header \"" + name +
                                  "\" has a control character (a line end read with the key?)");
    if (value.find_first_not_of(" \t") == std::string::npos)
      throw std::system_error(make_error_code(errc::invalid_config),
                              std::string(provider) + ": the header \"" + name +
                                  "\" has an empty value (an unset variable?)");
  }
}

void fail_call(const CallContext& ctx, CallCompletion& done, std::error_code ec,
               std::string message) {
  Response r;
  r.error_type = "invalid_request";
  r.error_message = std::move(message);
  detail::post(ctx.executor, [done = std::move(done), ec, r = std::move(r)]() mutable {
    done(ec, std::move(r));
  });
}

}  // namespace laneq::detail
