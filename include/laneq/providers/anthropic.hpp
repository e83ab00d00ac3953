#pragma once
// AnthropicProvider: POST {base_url}/v1/messages with `x-api-key` and
// `anthropic-version: 2023-06-01`, over any Transport (CurlTransport in production).
#include <cstdint>
#include <string>

#include "laneq/provider.hpp"
#include "laneq/providers/anthropic_format.hpp"
#include "laneq/transport.hpp"

namespace laneq {

struct AnthropicConfig {
  std::string api_key{};        // "" = $ANTHROPIC_API_KEY
  std::string base_url{};       // "" = $ANTHROPIC_BASE_URL, else https://api.anthropic.com
  std::string version = "2023-06-01";
  // Anthropic requires max_tokens: sent when Request::max_tokens is 0. Keep it equal to
  // QueueConfig::default_max_tokens, which the limiter reserves for such a request.
  std::int32_t default_max_tokens = anthropic::default_max_tokens;
  Headers extra_headers{};      // e.g. anthropic-beta
};

class AnthropicProvider final : public Provider {
 public:
  // Throws std::system_error(errc::invalid_config) when there is no API key and no custom
  // base URL, a base URL does not start with http:// or https://, or default_max_tokens < 1.
  // The key never appears in errors or logs.
  AnthropicProvider(Transport& transport, AnthropicConfig config = {});

  void async_call(const Request& request, const CallContext& ctx,
                  CallCompletion done) noexcept override;
  const char* name() const noexcept override { return "anthropic"; }

  const std::string& url() const noexcept { return url_; }

 private:
  Transport& transport_;
  std::string url_;
  Headers headers_;
  std::int32_t default_max_tokens_;
};

}  // namespace laneq
