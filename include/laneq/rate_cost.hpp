#pragma once
// RateCost: what one call costs the rate budgets. Pure data, shared by the limiter (which
// charges it) and the retry policy (which compares it with what a 429's headers say is left).
#include <algorithm>
#include <cstdint>

namespace laneq {

// What one call costs. `tokens` budgets are charged input + output. A negative field counts as
// 0; one above 2^50 (the largest limit) as more than any budget: exceeds_rate_limit.
struct RateCost {
  std::int64_t requests = 1;
  std::int64_t input_tokens = 0;
  std::int64_t output_tokens = 0;
};

// The largest limit a budget may have (validate_rate_limits).
inline constexpr std::int64_t max_rate_limit = std::int64_t{1} << 50;

// A cost field as budgets see it: a negative one is 0 (no refund, and input + output cannot
// hide output behind a negative input); a huge one is max_rate_limit + 1, more than any budget
// holds (so exceeds_rate_limit, never a sum that overflows into a free grant).
constexpr std::int64_t budget_units(std::int64_t n) noexcept {
  return std::clamp<std::int64_t>(n, 0, max_rate_limit + 1);
}
// What a cost takes from a `tokens` budget: input + output (each term bounded: no overflow).
constexpr std::int64_t token_units(const RateCost& c) noexcept {
  return std::min(budget_units(c.input_tokens) + budget_units(c.output_tokens),
                  max_rate_limit + 1);
}

}  // namespace laneq
