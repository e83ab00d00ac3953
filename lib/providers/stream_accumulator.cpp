#include "laneq/detail/stream_accumulator.hpp"

#include "laneq/error.hpp"

namespace laneq::detail {

bool stream_accumulator_base::skip(const SseEvent& event) const noexcept {
  return done_ || error_ || event.data.find_first_not_of(" \t\r\n") == std::string::npos;
}

void stream_accumulator_base::append(std::string_view piece) {
  if (piece.empty()) return;
  text_ += piece;
  if (on_delta_) on_delta_(piece);
}

std::error_code stream_accumulator_base::hand_over(Response& out, const Usage& usage) {
  out.text = std::move(text_);
  text_.clear();
  out.usage = usage;
  out.finish_reason = finish_reason_;
  out.error_type = error_type_;
  out.error_message = error_message_;
  if (error_) return error_;
  if (!done_) {
    // The body ended cleanly (a transport error is reported before this) but too soon: say so,
    // or the caller reads "the connection failed" with nothing to go by.
    out.error_message = "the stream ended before its final event ([DONE] / message_stop): "
                        "cut short by the server or a proxy";
    return make_error_code(errc::network);
  }
  return {};
}

}  // namespace laneq::detail
