#pragma once
// Priority lanes. Lower value = served sooner. The default lane set has these five levels;
// QueueConfig::lanes may define any other set (priorities are plain ints underneath).
#include <string_view>

namespace laneq {

enum class Priority : int {
  critical = 0,
  high = 1,
  normal = 5,
  low = 8,
  background = 10,
};

// Name of a default lane ("critical", ...), or "" for a custom priority value.
constexpr std::string_view priority_name(Priority p) noexcept {
  switch (p) {
    case Priority::critical: return "critical";
    case Priority::high: return "high";
    case Priority::normal: return "normal";
    case Priority::low: return "low";
    case Priority::background: return "background";
  }
  return "";
}

}  // namespace laneq
