#include "submit_with.hpp"

#include "laneq/request_queue.hpp"

namespace laneq::test {

void submit_with(RequestQueue& queue, Request request, SubmitOptions options, Callback handler) {
  queue.async_submit(std::move(request), std::move(options), std::move(handler));
}

}  // namespace laneq::test
