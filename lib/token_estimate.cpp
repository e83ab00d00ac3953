#include "laneq/token_estimate.hpp"

#include <algorithm>
#include <string_view>

namespace laneq {

namespace {

// Bytes of text, and its characters of 3 and 4 bytes in UTF-8 (by their lead bytes).
struct text_size {
  std::int64_t bytes = 0, wide3 = 0, wide4 = 0;
  void add(std::string_view s) noexcept {
    std::int64_t n3 = 0, n4 = 0;
    for (const char c : s) {  // a plain count: the compiler vectorizes it
      const auto b = static_cast<unsigned char>(c);
      n3 += b >= 0xe0 && b < 0xf0;
      n4 += b >= 0xf0;
    }
    bytes += static_cast<std::int64_t>(s.size());
    wide3 += n3;
    wide4 += n4;
  }
};

}  // namespace

std::int64_t estimate_prompt_tokens(const Request& request) {
  text_size t;
  for (const auto& m : request.messages) t.add(m.role), t.add(m.content);
  if (!request.extra.is_null()) t.add(request.extra.dump());
  const auto n = static_cast<std::int64_t>(request.messages.size());
  // Tokenizers give a CJK character about one token (often more), an emoji two or more: bytes / 4
  // would undercount them. They count 1.5 and 2; everything else (ASCII, 2-byte scripts) bytes / 4.
  const std::int64_t narrow = std::max<std::int64_t>(0, t.bytes - 3 * t.wide3 - 4 * t.wide4);
  return (narrow + 3) / 4 + (3 * t.wide3 + 1) / 2 + 2 * t.wide4 + 4 * n + 3;
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
