#include "run.hpp"

#include <asio/co_spawn.hpp>

namespace laneq::test {

void run(asio::io_context& io, const std::function<asio::awaitable<void>()>& make) {
  std::exception_ptr error;
  bool finished = false;
  asio::co_spawn(io, make(), [&](std::exception_ptr e) {
    error = e;
    finished = true;
    if (e) io.stop();
  });
  io.run();
  if (error) std::rethrow_exception(error);
  if (!finished) throw std::runtime_error("test coroutine did not finish (io ran out of work)");
}

}  // namespace laneq::test
