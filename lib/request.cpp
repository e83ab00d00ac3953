#include "laneq/request.hpp"

#include <algorithm>
#include <cctype>

namespace laneq {

const std::string* Response::header(std::string_view name) const noexcept {
  auto same = [&](const std::string& h) {
    return h.size() == name.size() &&
           std::equal(h.begin(), h.end(), name.begin(), [](char a, char b) {
             return std::tolower(static_cast<unsigned char>(a)) ==
                    std::tolower(static_cast<unsigned char>(b));
           });
  };
  for (const auto& [k, v] : headers)
    if (same(k)) return &v;
  return nullptr;
}

}  // namespace laneq
