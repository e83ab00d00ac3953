#include "laneq/token_estimate.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace laneq {

namespace {

// Lead bytes of 3- or 4-byte UTF-8 characters (>= 0xe0), and of 4-byte ones (>= 0xf0).
struct wide_leads {
  std::int64_t ge_e0 = 0, ge_f0 = 0;

  // Eight bytes at once; ASCII skipped with one test. Bit 7 of each byte after the shifts is its
  // own bit 6, 5 (and 4); the sum of 0/1 bytes by multiplication (no popcnt in baseline x86-64).
  void add_word(std::uint64_t w) noexcept {
    constexpr std::uint64_t high = 0x8080808080808080ull, ones = 0x0101010101010101ull;
    if ((w & high) == 0) return;
    const std::uint64_t top3 = w & (w << 1) & (w << 2) & high;
    ge_e0 += static_cast<std::int64_t>(((top3 >> 7) * ones) >> 56);
    ge_f0 += static_cast<std::int64_t>((((top3 & (w << 3)) >> 7) * ones) >> 56);
  }
  // Every request is estimated at admission: no byte loop (B1's 4-byte strings paid ~50
  // instructions each in one), the tail read as one overlapping word with the bytes already
  // counted shifted out.
  void add(std::string_view s) noexcept {
    const char* p = s.data();
    const std::size_t n = s.size();
    if constexpr (std::endian::native != std::endian::little) {  // the shifts below assume it
      for (std::size_t i = 0; i < n; ++i) add_word(static_cast<unsigned char>(p[i]));
      return;
    }
    if (n >= 8) {
      std::size_t i = 0;
      for (; i + 8 <= n; i += 8) add_word(load<std::uint64_t>(p + i));
      if (i < n) add_word(load<std::uint64_t>(p + n - 8) >> (8 * (8 - (n - i))));
    } else if (n >= 4) {
      const std::uint64_t lo = load<std::uint32_t>(p);
      const std::uint64_t hi = std::uint64_t{load<std::uint32_t>(p + n - 4)} >> (8 * (8 - n));
      add_word(lo | (hi << 32));
    } else {
      for (std::size_t i = 0; i < n; ++i) add_word(static_cast<unsigned char>(p[i]));
    }
  }
  template <class T>
  static T load(const char* p) noexcept {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
};

}  // namespace

std::int64_t estimate_prompt_tokens(const Request& request) {
  std::int64_t bytes = 0;
  wide_leads wide;
  for (const auto& m : request.messages) {
    bytes += static_cast<std::int64_t>(m.role.size() + m.content.size());
    wide.add(m.content);  // roles are the APIs' ASCII words
  }
  if (!request.extra.is_null()) {
    // replace: the strict dump throws on invalid UTF-8 in a string, and a length is all the
    // estimate needs. Each bad byte becomes U+FFFD, as in the body the providers send.
    const std::string extra =
        request.extra.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    bytes += static_cast<std::int64_t>(extra.size());
    wide.add(extra);
  }
  const auto n = static_cast<std::int64_t>(request.messages.size());
  // Tokenizers give a CJK character about one token (often more), an emoji two or more: bytes / 4
  // would undercount them. They count 1.5 and 2; everything else (ASCII, 2-byte scripts) bytes / 4.
  const std::int64_t wide3 = wide.ge_e0 - wide.ge_f0, wide4 = wide.ge_f0;
  const std::int64_t narrow = std::max<std::int64_t>(0, bytes - 3 * wide3 - 4 * wide4);
  return (narrow + 3) / 4 + (3 * wide3 + 1) / 2 + 2 * wide4 + 4 * n + 3;
}

std::int64_t reserved_output_tokens(const Request& request, std::int64_t default_max_tokens) {
  constexpr std::int64_t most = std::int64_t{1} << 50;
  const auto clamped = [](long double v) -> std::int64_t {
    if (!(v > 0)) return 0;  // (a NaN too)
    return v >= static_cast<long double>(most) ? most : std::llround(std::ceil(v));
  };
  std::int64_t reserved = request.max_tokens > 0 ? request.max_tokens : default_max_tokens;
  // extra's keys go out beside the provider's own field (max_tokens, or max_completion_tokens)
  // or over it, and the server may take either: the larger is reserved. A null is the
  // provider's default.
  if (request.extra.is_object()) {
    for (const char* key : {"max_tokens", "max_completion_tokens"}) {
      const auto it = request.extra.find(key);
      if (it == request.extra.end()) continue;
      if (it->is_null()) reserved = std::max(reserved, default_max_tokens);
      else if (it->is_number()) reserved = std::max(reserved, clamped(it->get<long double>()));
    }
  }
  return std::clamp<std::int64_t>(reserved, 0, most);
}

TokenEstimate estimate_tokens(const Request& request, std::int64_t default_max_tokens,
                              const PromptEstimator& prompt_estimator) {
  TokenEstimate e;
  e.prompt = prompt_estimator ? prompt_estimator(request) : estimate_prompt_tokens(request);
  // Each part in [0, 2^50] (the rate budgets' own bound), so total() cannot overflow: an
  // estimator's "infinite" INT64_MAX, or a negative default, would.
  constexpr std::int64_t most = std::int64_t{1} << 50;
  e.prompt = std::clamp<std::int64_t>(e.prompt, 0, most);
  e.completion = reserved_output_tokens(request, default_max_tokens);
  return e;
}

}  // namespace laneq
