#include "laneq/providers/openai.hpp"

#include <string>
#include <system_error>
#include <utility>

#include "laneq/providers/openai_format.hpp"
#include "endpoint.hpp"
#include "http_call.hpp"
#include "../ascii_case.hpp"

namespace laneq {

namespace {
// OpenAI's own API: https://api.openai.com, or a regional host of it (eu.api.openai.com for
// data residency), which take the current field name.
bool openai_itself(std::string_view url) {
  constexpr std::string_view scheme = "https://";
  if (!detail::istarts_with(url, scheme)) return false;
  std::string_view host = url.substr(scheme.size());
  host = host.substr(0, host.find_first_of("/?#"));
  if (const auto at = host.rfind('@'); at != std::string_view::npos) host.remove_prefix(at + 1);
  host = host.substr(0, host.find(':'));
  if (host.ends_with('.')) host.remove_suffix(1);  // the root's dot: the same host
  constexpr std::string_view own = "api.openai.com";
  return host.size() >= own.size() &&
         detail::iequals(host.substr(host.size() - own.size()), own) &&
         (host.size() == own.size() || host[host.size() - own.size() - 1] == '.');
}
}  // namespace

OpenAIProvider::OpenAIProvider(Transport& transport, OpenAIConfig config) : transport_(transport) {
  auto ep = detail::resolve_endpoint(std::move(config.api_key), "OPENAI_API_KEY",
                                     std::move(config.base_url), "OPENAI_BASE_URL",
                                     "https://api.openai.com", "/v1/chat/completions", "OpenAI",
                                     /*base_path_is_root=*/true);
  url_ = std::move(ep.url);
  headers_.emplace_back("Content-Type", "application/json");
  if (!ep.key.empty()) headers_.emplace_back("Authorization", "Bearer " + ep.key);
  if (!config.organization.empty()) headers_.emplace_back("OpenAI-Organization", config.organization);
  for (auto& h : config.extra_headers) headers_.push_back(std::move(h));
  detail::check_headers(headers_, "OpenAI");
  std::string_view field = config.max_tokens_field;
  if (field.empty())  // OpenAI itself takes the current name; compatible servers the old one
    field = openai_itself(url_) ? "max_completion_tokens" : "max_tokens";
  if (field != "max_tokens" && field != "max_completion_tokens")
    throw std::system_error(make_error_code(errc::invalid_config),
                            "OpenAI: OpenAIConfig::max_tokens_field must be \"max_completion_tokens\" "
                            "or \"max_tokens\", not \"" + config.max_tokens_field + "\"");
  body_options_ = {.max_tokens_field = field == "max_tokens" ? "max_tokens" : "max_completion_tokens",
                   .stream_usage = config.stream_usage};
}

void OpenAIProvider::async_call(const Request& request, const CallContext& ctx,
                                CallCompletion done) noexcept {
  detail::async_http_call<openai::StreamAccumulator, openai::parse_response>(
      transport_, url_, headers_, request, ctx, std::move(done), "OpenAI",
      [&] { return openai::request_body(request, body_options_); });
}

}  // namespace laneq
