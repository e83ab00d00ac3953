#pragma once
// Aging, one formula for the scheduler's lanes and the rate limiter's waiters (which rank
// a request as its lane does): a rank improves one step per `step` waited since `since`, down
// to 0. A rank at or below 0, no step, or no time waited: as it is.
#include <chrono>
#include <cstdint>

namespace laneq::detail {

inline std::int64_t aged_rank(std::int64_t rank, std::chrono::steady_clock::time_point since,
                              std::chrono::steady_clock::duration step,
                              std::chrono::steady_clock::time_point now) noexcept {
  if (step.count() <= 0 || now <= since || rank <= 0) return rank;
  const std::int64_t steps = (now - since) / step;
  return steps >= rank ? 0 : rank - steps;
}

}  // namespace laneq::detail
