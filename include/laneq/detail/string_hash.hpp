#pragma once
// Hash for unordered containers keyed by std::string that are looked up by std::string_view
// (with std::equal_to<>): a look-up by a client's name builds no string.
#include <cstddef>
#include <functional>
#include <string_view>

namespace laneq::detail {

struct string_hash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};

}  // namespace laneq::detail
