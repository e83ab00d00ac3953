#pragma once
// OpenAIProvider: POST {base_url}/v1/chat/completions with `Authorization: Bearer <key>`, over
// any Transport (CurlTransport in production). Works with every OpenAI-compatible endpoint
// (vLLM, Ollama, Azure-style gateways) through base_url.
#include <string>

#include "laneq/provider.hpp"
#include "laneq/providers/openai_format.hpp"
#include "laneq/transport.hpp"

namespace laneq {

struct OpenAIConfig {
  std::string api_key{};        // "" = $OPENAI_API_KEY
  // "" = $OPENAI_BASE_URL, else https://api.openai.com. As in the official SDKs, a base URL
  // with a path is the API's root ("https://api.openai.com/v1", "http://host/v1beta/openai"):
  // "/chat/completions" follows it; a bare host ("http://127.0.0.1:8080") gets
  // "/v1/chat/completions".
  std::string base_url{};
  std::string organization{};   // optional OpenAI-Organization header
  Headers extra_headers{};      // sent with every call
  // The body field Request::max_tokens goes in: "max_completion_tokens" (OpenAI's current name:
  // its o-series and gpt-5 models refuse "max_tokens") or "max_tokens" (what OpenAI-compatible
  // servers know). "" = max_completion_tokens for https://api.openai.com (and its regional
  // hosts, e.g. https://eu.api.openai.com), max_tokens elsewhere (Azure's reasoning models
  // too take only max_completion_tokens: set it).
  std::string max_tokens_field{};
  // Streams ask for usage in their last chunk (stream_options.include_usage). Off for a
  // compatible server that refuses the field; the rate limiter then keeps its estimate.
  bool stream_usage = true;
};

class OpenAIProvider final : public Provider {
 public:
  // Throws std::system_error(errc::invalid_config) when there is no API key and no custom
  // base URL (a local endpoint may need no key), a base URL does not start with http:// or
  // https://, or max_tokens_field is neither of its two names. The key never appears in errors
  // or logs.
  OpenAIProvider(Transport& transport, OpenAIConfig config = {});

  void async_call(const Request& request, const CallContext& ctx,
                  CallCompletion done) noexcept override;
  const char* name() const noexcept override { return "openai"; }

  const std::string& url() const noexcept { return url_; }

 private:
  Transport& transport_;
  std::string url_;
  Headers headers_;
  openai::BodyOptions body_options_;  // its strings are literals: copies stay valid
};

}  // namespace laneq
