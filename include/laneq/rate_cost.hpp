#pragma once
// RateCost: what one call costs the rate budgets. Pure data, shared by the limiter (which
// charges it) and the retry policy (which compares it with what a 429's headers say is left).
#include <cstdint>

namespace laneq {

// What one call costs. `tokens` budgets are charged input + output. A negative field counts as
// 0; one above 2^50 (the largest limit) as more than any budget: exceeds_rate_limit.
struct RateCost {
  std::int64_t requests = 1;
  std::int64_t input_tokens = 0;
  std::int64_t output_tokens = 0;
};

}  // namespace laneq
