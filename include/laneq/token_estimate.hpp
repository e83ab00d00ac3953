#pragma once
// Token estimates for the TPM budgets, before a call: providers count a request's prompt and its
// max_tokens against the budget up front, and report the actual usage afterwards (reconcile).
#include <cstdint>
#include <functional>

#include "laneq/request.hpp"

namespace laneq {

struct TokenEstimate {
  std::int64_t prompt = 0;      // input tokens
  std::int64_t completion = 0;  // output tokens reserved (max_tokens)
  std::int64_t total() const noexcept { return prompt + completion; }
};

// Pluggable prompt estimator (e.g. a real tokenizer); the default is estimate_prompt_tokens.
using PromptEstimator = std::function<std::int64_t(const Request&)>;

// Default: ceil(bytes / 4) over all message text (roles included), except characters of 3 bytes
// in UTF-8 (CJK and most other Asian scripts) at 1.5 tokens each and of 4 bytes (emoji) at 2,
// where tokenizers give one or more per character; + 4 per message for the chat framing, + 3
// for the reply's priming. It errs on the side of staying under the budget. `extra` JSON (tools,
// response formats) is counted the same way from its serialized form (invalid UTF-8 in its
// strings as U+FFFD, as providers are sent it).
std::int64_t estimate_prompt_tokens(const Request& request);

// The output tokens a call reserves, as the provider counts them up front: Request::max_tokens,
// or `default_max_tokens` when it is 0 (the provider's default). A `max_tokens` or
// `max_completion_tokens` in Request::extra goes out in the body too, over the provider's own
// field or beside it (the server may take either): the largest of them is reserved (a null
// one counts as `default_max_tokens`). Clamped to [0, 2^50].
std::int64_t reserved_output_tokens(const Request& request, std::int64_t default_max_tokens);

// prompt (by `prompt_estimator`, or the default) + reserved_output_tokens. Each part is
// clamped to [0, 2^50].
TokenEstimate estimate_tokens(const Request& request, std::int64_t default_max_tokens = 4096,
                              const PromptEstimator& prompt_estimator = {});

}  // namespace laneq
