#pragma once
// The one seam to the outside world. A Provider performs one API call asynchronously and
// reports exactly once. OpenAI / Anthropic / simulated providers implement it; the queue does
// not know which one it drives.
#include <chrono>
#include <system_error>

#include <asio/any_io_executor.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/strand.hpp>

#include "laneq/detail/unique_function.hpp"
#include "laneq/request.hpp"

namespace laneq {

// The queue's strand, typed: posting through an any_io_executor that wraps a strand allocates
// on every post (require/prefer build a new strand object), which is the hot path here.
using CallExecutor = asio::strand<asio::any_io_executor>;

struct CallContext {
  CallExecutor executor;               // the queue's strand: run I/O and timers on it
  asio::cancellation_slot cancel;      // emitted (terminal) to abort the call; may be unconnected
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

// Invoked exactly once, from any thread. On failure the Response may still carry the HTTP
// status and the provider's error type/message.
using CallCompletion = detail::unique_function<void(std::error_code, Response)>;

class Provider {
 public:
  virtual ~Provider() = default;

  // Starts one call. `request` stays valid until `done` is invoked; `ctx` only during this
  // call (copy its executor or slot to keep them). Must not invoke `done` inline (post it)
  // and must not block. Cancellation: when `ctx.cancel` is emitted the call is
  // aborted and `done` gets an error (any; the queue reports `cancelled` or `timeout`), posted
  // too: never from inside the cancellation handler. The queue emits `ctx.cancel` on
  // `ctx.executor`. Failures are reported through `done`, never thrown.
  // The slot is the worker's, reused for its next call: install and clear a handler on
  // `ctx.executor` only, clear it before invoking `done`, and touch neither the slot nor
  // anything the queue gave after `done` - the queue may resume inside `done`, start the next
  // call (async_call again, before `done` returns: hold no lock across it) or be gone.
  virtual void async_call(const Request& request, const CallContext& ctx,
                          CallCompletion done) noexcept = 0;

  // Short name for metrics and logs ("openai", "simulated", ...).
  virtual const char* name() const noexcept = 0;
};

}  // namespace laneq
