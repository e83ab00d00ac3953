#include "laneq/providers/anthropic.hpp"

#include <stdexcept>

#include "laneq/error.hpp"
#include "laneq/providers/anthropic_format.hpp"
#include "endpoint.hpp"
#include "http_call.hpp"

namespace laneq {

namespace {
struct AnthropicWire {
  using Accumulator = anthropic::StreamAccumulator;
  static std::error_code parse(int status, const Headers& h, std::string_view body,
                               Response& out) noexcept {
    return anthropic::parse_response(status, h, body, out);
  }
};
}  // namespace

AnthropicProvider::AnthropicProvider(Transport& transport, AnthropicConfig config)
    : transport_(transport), default_max_tokens_(config.default_max_tokens) {
  auto ep = detail::resolve_endpoint(std::move(config.api_key), "ANTHROPIC_API_KEY",
                                     std::move(config.base_url), "ANTHROPIC_BASE_URL",
                                     "https://api.anthropic.com", "/v1/messages", "Anthropic");
  url_ = std::move(ep.url);
  headers_.emplace_back("Content-Type", "application/json");
  if (!ep.key.empty()) headers_.emplace_back("x-api-key", ep.key);
  headers_.emplace_back("anthropic-version", config.version);
  for (auto& h : config.extra_headers) headers_.push_back(std::move(h));
}

void AnthropicProvider::async_call(const Request& request, CallContext ctx,
                                   CallCompletion done) noexcept {
  HttpRequest http;
  try {
    http.url = url_;
    http.headers = headers_;
    http.body = anthropic::request_body(request, default_max_tokens_);
  } catch (const std::invalid_argument& e) {
    return detail::fail_call(ctx, done, errc::bad_request, e.what());
  } catch (...) {
    return detail::fail_call(ctx, done, errc::internal,
                             "Anthropic: could not build the request body");
  }
  detail::start_http_call<AnthropicWire>(transport_, std::move(http), request, std::move(ctx),
                                         std::move(done));
}

}  // namespace laneq
