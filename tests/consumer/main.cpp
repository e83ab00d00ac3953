#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <future>
#include <string>

#include <laneq/laneq.hpp>

// The durable journal links SQLite through the installed package (find_dependency(SQLite3)).
bool journal_works() {
  const auto path = std::filesystem::temp_directory_path() /
                    ("laneq-consumer-" + std::to_string(::getpid()) + ".db");
  bool ok = false;
  {
    auto journal = laneq::Journal::open({path.string()});
    std::promise<std::error_code> done;
    journal->append({.id = "consumer-1", .request = {.model = "m"}},
                    [&done](std::error_code ec, std::int64_t) { done.set_value(ec); });
    ok = !done.get_future().get();
  }
  std::filesystem::remove(path);
  return ok;
}

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
  ok = ok && journal_works();
  std::puts(ok ? "consumer: ok" : "consumer: FAILED");
  return ok ? 0 : 1;
}
