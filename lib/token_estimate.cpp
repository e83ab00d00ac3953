#include "laneq/token_estimate.hpp"

namespace laneq {

std::int64_t estimate_prompt_tokens(const Request& request) {
  std::int64_t bytes = 0;
  for (const auto& m : request.messages)
    bytes += static_cast<std::int64_t>(m.role.size() + m.content.size());
  if (!request.extra.is_null()) bytes += static_cast<std::int64_t>(request.extra.dump().size());
  const auto n = static_cast<std::int64_t>(request.messages.size());
  return (bytes + 3) / 4 + 4 * n + 3;
}

TokenEstimate estimate_tokens(const Request& request, std::int64_t default_max_tokens,
                              const PromptEstimator& prompt_estimator) {
  TokenEstimate e;
  e.prompt = prompt_estimator ? prompt_estimator(request) : estimate_prompt_tokens(request);
  if (e.prompt < 0) e.prompt = 0;
  e.completion = request.max_tokens > 0 ? request.max_tokens : default_max_tokens;
  return e;
}

}  // namespace laneq
