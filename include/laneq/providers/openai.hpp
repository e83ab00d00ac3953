#pragma once
// OpenAIProvider: POST {base_url}/v1/chat/completions with `Authorization: Bearer <key>`, over
// any Transport (CurlTransport in production). Works with every OpenAI-compatible endpoint
// (vLLM, Ollama, Azure-style gateways) through base_url.
#include <string>

#include "laneq/provider.hpp"
#include "laneq/transport.hpp"

namespace laneq {

struct OpenAIConfig {
  std::string api_key{};        // "" = $OPENAI_API_KEY
  // "" = $OPENAI_BASE_URL, else https://api.openai.com. A trailing "/v1" is accepted (the
  // official SDKs' form): the path is appended once.
  std::string base_url{};
  std::string organization{};   // optional OpenAI-Organization header
  Headers extra_headers{};      // sent with every call
};

class OpenAIProvider final : public Provider {
 public:
  // Throws std::system_error(errc::invalid_config) when there is no API key and no custom
  // base URL (a local endpoint may need no key), or a base URL does not start with http:// or
  // https://. The key never appears in errors or logs.
  OpenAIProvider(Transport& transport, OpenAIConfig config = {});

  void async_call(const Request& request, const CallContext& ctx,
                  CallCompletion done) noexcept override;
  const char* name() const noexcept override { return "openai"; }

  const std::string& url() const noexcept { return url_; }

 private:
  Transport& transport_;
  std::string url_;
  Headers headers_;
};

}  // namespace laneq
