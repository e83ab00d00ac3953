// The seed scenario: 100 batch requests are queued first, then one user-facing chat request
// arrives. The chat request overtakes the whole backlog (and finds a reserved worker free).
// Every call is a real HTTP call (CurlTransport + OpenAIProvider) to the bundled mock API
// server, started here on 127.0.0.1 on the same io_context. SIGINT/SIGTERM stop admission and
// drain, as a service would.
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/signal_set.hpp>
#include <asio/use_awaitable.hpp>
#include <csignal>
#include <cstdio>

#include "laneq/laneq.hpp"
#include "mock_api/mock_server.hpp"
#include "print_metrics.hpp"

using namespace std::chrono_literals;

int main() {
  asio::io_context io;
  // Each call takes 20-30 ms, like a short completion from a fast model.
  laneq::mock::MockServer mock(io, {.latency = 20ms, .jitter = 10ms});
  mock.start();
  laneq::CurlTransport transport{io.get_executor()};
  laneq::OpenAIProvider provider{transport, {.api_key = "sk-demo", .base_url = mock.base_url()}};
  laneq::RequestQueue queue{io.get_executor(), provider,
                            laneq::QueueConfig{.workers = 4, .reserved_workers = 1}};
  queue.start();

  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](std::error_code ec, int) {
    if (!ec) queue.async_shutdown({.drain = true}, [&](std::error_code) { mock.stop(); });
  });

  int batch_done = 0, batch_failed = 0;
  for (int i = 0; i < 100; ++i) {
    laneq::Request req{.model = "batch-model",
                       .messages = {{"user", "summarise document " + std::to_string(i)}},
                       .max_tokens = 256};
    queue.async_submit(std::move(req), {.priority = laneq::Priority::background,
                                        .client = "nightly-batch"},
                       [&](std::error_code ec, laneq::Response) {
                         ec ? ++batch_failed : ++batch_done;
                       });
  }
  std::printf("queued 100 background batch requests (4 workers, 1 reserved for critical)\n");

  // The chat request overtook the backlog when it was answered before most of it.
  bool chat_ok = false, overtook = false;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    // A named Request: GCC 12 miscompiles brace-initialized temporaries inside co_await.
    laneq::Request chat{.model = "chat-model",
                        .messages = {{"user", "Hi! What's the weather like?"}},
                        .max_tokens = 64};
    try {  // a failed request must not skip the shutdown below (the loop would never end)
      laneq::Response r = co_await queue.submit(
          chat, {.priority = laneq::Priority::critical, .client = "user-42", .timeout = 30s});
      chat_ok = true;
      // 3 workers serve the batch (the 4th is reserved), ~25 ms calls: the backlog takes
      // ~830 ms; served in FIFO order, ~99 would be done by now.
      overtook = batch_done < 50;
      std::printf("critical chat request answered: queue wait %.2f ms, call %.2f ms, "
                  "%lld+%lld tokens; batch done so far: %d of 100\n",
                  std::chrono::duration<double, std::milli>(r.queue_wait).count(),
                  std::chrono::duration<double, std::milli>(r.service_time).count(),
                  static_cast<long long>(r.usage.input_tokens),
                  static_cast<long long>(r.usage.output_tokens), batch_done);
    } catch (const laneq::RequestError& e) {
      std::printf("critical chat request failed: %s\n", e.what());
    }
    co_await queue.shutdown({.drain = true});
    signals.cancel();
    const auto seen = mock.stats();
    std::printf("the mock API server answered %s calls on %s connection(s)\n",
                seen["requests"].dump().c_str(),
                seen["connections"]["accepted"].dump().c_str());
    mock.stop();
  }, asio::detached);

  io.run();
  std::printf("batch: %d succeeded, %d failed\n\n", batch_done, batch_failed);
  print_lane_table(queue.metrics());
  if (chat_ok && !overtook) std::printf("the chat request did NOT overtake the backlog\n");
  return chat_ok && overtook && batch_failed == 0 && batch_done == 100 ? 0 : 1;
}
