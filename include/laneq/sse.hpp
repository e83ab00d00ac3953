#pragma once
// Incremental Server-Sent Events parser, per the WHATWG HTML "event stream interpretation"
// rules. Pure: bytes in, events out; no I/O, no clock. Feed it the response body in whatever
// chunks the transport delivers; events come out the moment their terminating blank line is in.
//
// Rules implemented (WHATWG HTML §9.2.6):
//   - lines end in CRLF, LF or CR, also when a CRLF pair is split across two chunks;
//   - one UTF-8 BOM at the very start of the stream is dropped (also when split across chunks);
//   - a blank line dispatches the pending event; at the end of the stream an event without its
//     blank line is discarded (the spec's rule; a cut stream must not look complete);
//   - lines starting with ':' are comments;
//   - "field:value" — one leading space of the value is stripped; a line without ':' is a field
//     with an empty value;
//   - `data` lines are joined by "\n"; an event with no `data` line at all is not dispatched, while
//     a single empty `data` line dispatches an event with empty data;
//   - `event` sets the event type; `id` sets the last event ID unless the value contains NUL;
//     `retry` and unknown fields are ignored.
// Deviation, on purpose: SseEvent::event stays empty when the stream named no type (the spec
// reports "message"); callers that care test `event.empty()`, and no string is built for the
// common unnamed case.
// Bytes are passed through unchanged (no UTF-8 validation: the JSON parser downstream does that).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace laneq {

struct SseEvent {
  std::string event{};  // the `event:` field; empty when the stream gave none (spec: "message")
  std::string data{};   // the `data:` lines joined by "\n" (no trailing "\n")
  std::string id{};     // the last event ID seen so far; persists across events, per the spec
};

class SseParser {
 public:
  // Providers send one JSON object per line; 4 MiB is far beyond any real chunk, yet bounded.
  static constexpr std::size_t default_max_line = std::size_t{4} << 20;

  // `max_line` bounds a single line (without its terminator) and, separately, the `data` one
  // event accumulates; beyond either the parser fails instead of growing.
  SseParser() noexcept = default;
  explicit SseParser(std::size_t max_line) noexcept : max_line_(max_line) {}

  // Parses `chunk` and calls `on_event(const SseEvent&)` for each complete event, in order. The
  // event is only valid during the call. The callback must not call feed() or reset() on this
  // parser. The callback is passed by reference through a plain function pointer: no allocation
  // per call. If the parser has failed, the chunk is ignored. If `on_event` throws, the exception
  // propagates and the parser is failed() until reset().
  template <class F>
  void feed(std::string_view chunk, F&& on_event) {
    using Fn = std::remove_reference_t<F>;
    static_assert(std::is_invocable_v<Fn&, const SseEvent&>,
                  "on_event must be callable as on_event(const SseEvent&)");
    if constexpr (std::is_function_v<Fn>) {
      feed(chunk, [&on_event](const SseEvent& e) { on_event(e); });
    } else {
      feed_impl(chunk, &invoke<Fn>, const_cast<void*>(static_cast<const void*>(std::addressof(on_event))));
    }
  }

  // Back to the start of a new stream: clears buffers, the last event ID and failure.
  void reset() noexcept;

  // Bytes held for the incomplete line and the incomplete event (type + data).
  std::size_t buffered() const noexcept;

  // A line (or an event's data) exceeded max_line; everything fed since is ignored.
  bool failed() const noexcept { return failed_; }

  std::size_t max_line() const noexcept { return max_line_; }

 private:
  using Sink = void (*)(void* target, const SseEvent& event);

  template <class Fn>
  static void invoke(void* target, const SseEvent& event) {
    (*static_cast<Fn*>(target))(event);
  }

  void feed_impl(std::string_view chunk, Sink sink, void* target);
  void feed_lines(std::string_view chunk, Sink sink, void* target);
  void process_line(std::string_view line, Sink sink, void* target);
  void fail() noexcept;

  std::size_t max_line_ = default_max_line;
  std::string line_{};       // the current line so far, when it spans chunks
  SseEvent pending_{};       // event type, data buffer (each line + "\n"), last event ID
  std::uint8_t bom_seen_ = 0;  // bytes of a leading BOM matched so far
  bool bom_checked_ = false;
  bool after_cr_ = false;    // the last byte was CR: a following LF belongs to the same break
  bool failed_ = false;
};

}  // namespace laneq
