#pragma once
// Endpoint set-up shared by the HTTP providers: key and base URL from config or environment.
#include <string>

#include "laneq/request.hpp"

namespace laneq::detail {

struct Endpoint {
  std::string url;  // base + path
  std::string key;  // may be empty for a custom base URL
};

// `key` / `base` from config, else from the environment variables named; `path` is appended
// once ("/v1/..."; a base already ending in "/v1" is not doubled). Throws
// std::system_error(errc::invalid_config) when neither a key nor a custom base URL is given.
// Every header must go on the wire as given: a name that is an HTTP token, a value without
// control characters (a key read from a CRLF file keeps its '\r', which curl would send and
// which would end the header). Throws std::system_error(errc::invalid_config) naming the
// header, never its value (it may be a key).
void check_headers(const Headers& headers, const char* provider);

Endpoint resolve_endpoint(std::string key, const char* key_env, std::string base,
                          const char* base_env, const char* default_base, const std::string& path,
                          const char* provider);

}  // namespace laneq::detail
