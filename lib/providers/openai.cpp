#include "laneq/providers/openai.hpp"

#include <stdexcept>

#include "laneq/error.hpp"
#include "laneq/providers/openai_format.hpp"
#include "endpoint.hpp"
#include "http_call.hpp"

namespace laneq {

namespace {
struct OpenAIWire {
  using Accumulator = openai::StreamAccumulator;
  static std::error_code parse(int status, const Headers& h, std::string_view body,
                               Response& out) noexcept {
    return openai::parse_response(status, h, body, out);
  }
};
}  // namespace

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

void OpenAIProvider::async_call(const Request& request, CallContext ctx,
                                CallCompletion done) noexcept {
  HttpRequest http;
  try {
    http.url = url_;
    http.headers = headers_;
    http.body = openai::request_body(request);
  } catch (const std::invalid_argument& e) {
    return detail::fail_call(ctx, done, errc::bad_request, e.what());
  } catch (...) {
    return detail::fail_call(ctx, done, errc::internal, "OpenAI: could not build the request body");
  }
  detail::start_http_call<OpenAIWire>(transport_, std::move(http), request, std::move(ctx),
                                      std::move(done));
}

}  // namespace laneq
