#include "laneq/providers/anthropic.hpp"

#include <string>
#include <system_error>
#include <utility>

#include "laneq/providers/anthropic_format.hpp"
#include "endpoint.hpp"
#include "http_call.hpp"

namespace laneq {

AnthropicProvider::AnthropicProvider(Transport& transport, AnthropicConfig config)
    : transport_(transport), default_max_tokens_(config.default_max_tokens) {
  if (default_max_tokens_ <= 0)  // every request without its own max_tokens would be refused
    throw std::system_error(make_error_code(errc::invalid_config),
                            "Anthropic: AnthropicConfig::default_max_tokens must be >= 1 (got " +
                                std::to_string(default_max_tokens_) + ")");
  auto ep = detail::resolve_endpoint(std::move(config.api_key), "ANTHROPIC_API_KEY",
                                     std::move(config.base_url), "ANTHROPIC_BASE_URL",
                                     "https://api.anthropic.com", "/v1/messages", "Anthropic");
  url_ = std::move(ep.url);
  headers_.emplace_back("Content-Type", "application/json");
  if (!ep.key.empty()) headers_.emplace_back("x-api-key", ep.key);
  headers_.emplace_back("anthropic-version", config.version);
  for (auto& h : config.extra_headers) headers_.push_back(std::move(h));
  detail::check_headers(headers_, "Anthropic");
}

void AnthropicProvider::async_call(const Request& request, const CallContext& ctx,
                                   CallCompletion done) noexcept {
  detail::async_http_call<anthropic::StreamAccumulator, anthropic::parse_response>(
      transport_, url_, headers_, request, ctx, std::move(done), "Anthropic",
      [&] { return anthropic::request_body(request, default_max_tokens_); });
}

}  // namespace laneq
