#pragma once
// Endpoint set-up shared by the HTTP providers: key and base URL from config or environment.
#include <string>

namespace laneq::detail {

struct Endpoint {
  std::string url;  // base + path
  std::string key;  // may be empty for a custom base URL
};

// `key` / `base` from config, else from the environment variables named; `path` is appended
// once ("/v1/..."; a base already ending in "/v1" is not doubled). Throws
// std::system_error(errc::invalid_config) when neither a key nor a custom base URL is given.
Endpoint resolve_endpoint(std::string key, const char* key_env, std::string base,
                          const char* base_env, const char* default_base, const std::string& path,
                          const char* provider);

}  // namespace laneq::detail
