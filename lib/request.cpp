#include "laneq/request.hpp"

#include "ascii_case.hpp"

namespace laneq {

const std::string* Response::header(std::string_view name) const noexcept {
  for (const auto& [k, v] : headers)
    if (detail::iequals(k, name)) return &v;
  return nullptr;
}

}  // namespace laneq
