#pragma once
// How a call ended by the caller's Request::on_delta throwing is reported, the same by the queue
// and by a provider called directly: errc::internal with these words. Internal (lib/).
#include <exception>
#include <string>
#include <string_view>
#include <utility>

#include "laneq/request.hpp"

namespace laneq::detail {

// Inside a catch block: the words of the exception being handled (what(), for one that is
// not a std::exception a description).
inline std::string current_what() {
  try {
    throw;
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

inline Response delta_threw(Response r, std::string_view what) {
  r.error_type = "on_delta";
  r.error_message = "Request::on_delta threw: ";
  r.error_message += what;
  return r;
}

}  // namespace laneq::detail
