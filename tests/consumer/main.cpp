#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>
#include <cstdio>

#include <laneq/laneq.hpp>

int main() {
  asio::io_context io;
  laneq::SimulatedProvider provider;
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 2});
  queue.start();
  int ok = 0;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    laneq::Request req{.model = "m", .messages = {{"user", "hi"}}};
    laneq::Response r = co_await queue.submit(req, {.priority = laneq::Priority::critical,
                                                    .client = "tenant-42"});
    ok = r.status == 200;
    co_await queue.shutdown();
  }, asio::detached);
  io.run();
  std::puts(ok ? "consumer: ok" : "consumer: FAILED");
  return ok ? 0 : 1;
}
