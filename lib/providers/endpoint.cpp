#include "endpoint.hpp"

#include <cstdlib>
#include <system_error>

#include "laneq/error.hpp"
#include "laneq/detail/post.hpp"
#include "laneq/provider.hpp"
#include "http_call.hpp"
#include "../ascii_case.hpp"

#include <asio/post.hpp>

namespace laneq::detail {

Endpoint resolve_endpoint(std::string key, const char* key_env, std::string base,
                          const char* base_env, const char* default_base, const std::string& path,
                          const char* provider) {
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
  if (!detail::istarts_with(base, "http://") && !detail::istarts_with(base, "https://"))
    throw std::system_error(make_error_code(errc::invalid_config),
                            std::string(provider) + ": the base URL \"" + base + "\"" +
                                (base_from_env ? std::string(" (from ") + base_env + ")" : "") +
                                " must start with http:// or https://");
  while (!base.empty() && base.back() == '/') base.pop_back();
  std::string url = base;
  // "/v1/chat/completions" after a base that already ends in "/v1": append the rest only.
  if (url.size() >= 3 && url.compare(url.size() - 3, 3, "/v1") == 0 && path.starts_with("/v1/"))
    url += path.substr(3);
  else
    url += path;
  return {std::move(url), std::move(key)};
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
