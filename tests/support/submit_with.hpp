#pragma once
// RequestQueue::async_submit with a plain callback, for tests that only need the outcome.
// Each lambda given to async_submit instantiates the queue's operation for its own type (a
// third of the largest test file's compile time, 98 call sites); through this function the
// whole suite instantiates it once, for std::function. Tests of what the handler's type
// decides (its executor, allocator, cancellation slot, the tokens) still call async_submit.
#include <functional>
#include <system_error>

#include "laneq/request.hpp"

namespace laneq {
class RequestQueue;
}

namespace laneq::test {

using Callback = std::function<void(std::error_code, Response)>;

void submit_with(RequestQueue& queue, Request request, SubmitOptions options, Callback handler);

}  // namespace laneq::test
