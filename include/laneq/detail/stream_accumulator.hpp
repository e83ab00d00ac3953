#pragma once
// What every wire format's StreamAccumulator keeps the same way: the text so far (shown to an
// on_delta handler as it grows), the finish reason, the first error and the provider's words
// for it, the end-of-stream flag, and the hand-over into a Response. Each wire's accumulator
// adds its own event parsing and usage counts (their shapes differ).
#include <functional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include "laneq/request.hpp"
#include "laneq/sse.hpp"

namespace laneq::detail {

class stream_accumulator_base {
 public:
  using DeltaHandler = std::function<void(std::string_view)>;

  bool done() const noexcept { return done_; }                // got the stream's end marker
  std::error_code error() const noexcept { return error_; }   // first error so far
  const std::string& text() const noexcept { return text_; }  // text so far
  // A server that answered a stream request with one whole body: its text to on_delta in one
  // piece (whose exceptions propagate); "" is dropped.
  void deliver_whole(std::string_view text) const {
    if (!text.empty() && on_delta_) on_delta_(text);
  }

 protected:
  stream_accumulator_base() = default;
  explicit stream_accumulator_base(DeltaHandler on_delta) : on_delta_(std::move(on_delta)) {}

  // True when the event carries nothing to take: the stream already ended or failed, or the
  // data is blank (a keep-alive).
  bool skip(const SseEvent& event) const noexcept;
  void fail(std::error_code ec) noexcept {
    if (!error_) error_ = ec;  // the first error sticks
  }
  // A text delta: appended and shown to on_delta (whose exceptions propagate); "" is dropped.
  void append(std::string_view piece);
  // The shared part of finish(): moves the text out and copies the rest, with the wire's usage;
  // the stream's error, else errc::network when the end marker never came, else success.
  std::error_code hand_over(Response& out, const Usage& usage);

  std::string finish_reason_{};
  std::string error_type_{};  // from an in-stream error, the provider's words
  std::string error_message_{};
  bool done_ = false;

 private:
  DeltaHandler on_delta_{};
  std::string text_{};
  std::error_code error_{};
};

}  // namespace laneq::detail
