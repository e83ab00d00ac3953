#pragma once
// Endpoint set-up shared by the HTTP providers: key and base URL from config or environment.
#include <string>

#include "laneq/request.hpp"

namespace laneq::detail {

struct Endpoint {
  std::string url;  // base + path + the base's query, if any
  std::string key;  // may be empty for a custom base URL
};

// Every header must go on the wire as given: a name that is an HTTP token, a value that is not
// empty (curl drops "Name:" as "remove this header") and has no control characters (a key read
// from a CRLF file keeps its '\r', which would end the header). Throws
// std::system_error(errc::invalid_config) naming the header, never its value (it may be a key).
void check_headers(const Headers& headers, const char* provider);

// `key` / `base` from config, else from the environment variables named; `path` ("/v1/...") is
// appended once, before the base's query ("?api-version="): a base already ending in "/v1"
// is not doubled, and with `base_path_is_root` (OpenAI's SDK rule) a base that has a path of
// its own is the API's root: "/chat/completions" follows it ("https://h/v1beta/openai").
// Throws std::system_error(errc::invalid_config) when neither a key nor a custom base URL is
// given, or the base is not an http(s) URL without control characters
// (messages leave out the query and a user:password@: either may hold a key).
Endpoint resolve_endpoint(std::string key, const char* key_env, std::string base,
                          const char* base_env, const char* default_base, const std::string& path,
                          const char* provider, bool base_path_is_root = false);

}  // namespace laneq::detail
