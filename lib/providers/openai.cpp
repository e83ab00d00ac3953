#include "laneq/providers/openai.hpp"

#include <utility>

#include "laneq/providers/openai_format.hpp"
#include "endpoint.hpp"
#include "http_call.hpp"

namespace laneq {

OpenAIProvider::OpenAIProvider(Transport& transport, OpenAIConfig config) : transport_(transport) {
  auto ep = detail::resolve_endpoint(std::move(config.api_key), "OPENAI_API_KEY",
                                     std::move(config.base_url), "OPENAI_BASE_URL",
                                     "https://api.openai.com", "/v1/chat/completions", "OpenAI");
  url_ = std::move(ep.url);
  headers_.emplace_back("Content-Type", "application/json");
  if (!ep.key.empty()) headers_.emplace_back("Authorization", "Bearer " + ep.key);
  if (!config.organization.empty()) headers_.emplace_back("OpenAI-Organization", config.organization);
  for (auto& h : config.extra_headers) headers_.push_back(std::move(h));
}

void OpenAIProvider::async_call(const Request& request, const CallContext& ctx,
                                CallCompletion done) noexcept {
  detail::async_http_call<openai::StreamAccumulator, openai::parse_response>(
      transport_, url_, headers_, request, ctx, std::move(done), "OpenAI",
      [&] { return openai::request_body(request); });
}

}  // namespace laneq
