// laneq inside an application that already runs its own Asio work on a 4-thread io_context:
// a heartbeat timer and a TCP echo server keep running while requests flow through the queue.
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <algorithm>
#include <asio/experimental/as_tuple.hpp>
#include <atomic>
#include <functional>
#include <cstdio>
#include <thread>
#include <vector>

#include "laneq/laneq.hpp"
#include "print_metrics.hpp"

using namespace std::chrono_literals;
using asio::ip::tcp;

int main() {
  asio::io_context io(4);
  std::atomic<int> heartbeats{0}, echoes{0};
  // The application's own objects live on one strand: a timer or acceptor must not be used from
  // two of the loop's threads at once (the queue keeps its own strand).
  auto app = asio::make_strand(io);

  // The application's own work: a heartbeat...
  constexpr auto heartbeat_period = 10ms;
  asio::steady_timer heartbeat(app);
  std::atomic<bool> stop{false};
  std::function<void()> beat = [&] {
    heartbeat.expires_after(heartbeat_period);
    heartbeat.async_wait([&](std::error_code ec) {
      if (ec || stop) return;
      ++heartbeats;
      beat();
    });
  };
  beat();

  // ...and an echo server on a loopback port.
  tcp::acceptor acceptor(app, {asio::ip::make_address("127.0.0.1"), 0});
  asio::co_spawn(app, [&]() -> asio::awaitable<void> {
    for (;;) {
      auto [ec, sock] = co_await acceptor.async_accept(
          asio::experimental::as_tuple(asio::use_awaitable));
      if (ec) co_return;
      char buf[5];
      // (as_tuple: a client that went away must not end the server)
      auto [rec, n] = co_await asio::async_read(sock, asio::buffer(buf),
                                                asio::experimental::as_tuple(asio::use_awaitable));
      if (!rec)
        co_await asio::async_write(sock, asio::buffer(buf, n),
                                   asio::experimental::as_tuple(asio::use_awaitable));
    }
  }, asio::detached);

  // laneq on the same io_context.
  laneq::SimulatedProvider provider({.latency = 5ms, .jitter = 5ms});
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 8, .reserved_workers = 2});
  queue.start();

  const auto t0 = std::chrono::steady_clock::now();
  asio::co_spawn(app, [&]() -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    // echo clients interleaved with queue traffic
    try {  // a failed echo must not skip the shutdown below (the loop would never end)
      for (int i = 0; i < 20; ++i) {
        tcp::socket s(ex);
        co_await s.async_connect(acceptor.local_endpoint(), asio::use_awaitable);
        char out[5] = {'p', 'i', 'n', 'g', char('0' + i % 10)}, in[5];
        co_await asio::async_write(s, asio::buffer(out), asio::use_awaitable);
        co_await asio::async_read(s, asio::buffer(in), asio::use_awaitable);
        if (std::equal(in, in + 5, out)) ++echoes;
        for (int k = 0; k < 10; ++k) {
          laneq::Request job{.model = "m", .messages = {{"user", "job"}}};
          queue.async_submit(std::move(job),
                             {.priority = k == 0 ? laneq::Priority::critical : laneq::Priority::low,
                              .client = "tenant-" + std::to_string(k % 3)},
                             [](std::error_code, laneq::Response) {});
        }
      }
    } catch (const std::system_error& e) {
      std::printf("echo client failed: %s\n", e.what());
    }
    co_await queue.shutdown({.drain = true});
    stop = true;
    heartbeat.cancel();
    acceptor.close();
  }, asio::detached);

  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) threads.emplace_back([&] { io.run(); });
  for (auto& t : threads) t.join();

  const auto m = queue.metrics();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - t0).count();
  const long long period_ms = heartbeat_period.count();
  std::printf("application work alongside laneq: %d heartbeats in %lld ms (one per %lld ms "
              "expected), %d/20 echoes\n",
              heartbeats.load(), static_cast<long long>(ms), period_ms, echoes.load());
  std::printf("laneq: %llu requests succeeded on a 4-thread io_context\n\n",
              static_cast<unsigned long long>(m.total.succeeded));
  print_lane_table(m);
  // A timer starved by the queue is what this sample is there to rule out: half the beats the
  // run had time for, at least (generous: a loaded machine or a sanitizer delays each re-arm).
  const long long min_beats = ms / period_ms / 2;
  const bool beats_ok = heartbeats.load() >= min_beats;
  if (!beats_ok)
    std::printf("too few heartbeats: %d, expected at least %lld (half of %lld ms / %lld ms)\n",
                heartbeats.load(), min_beats, static_cast<long long>(ms), period_ms);
  return echoes == 20 && m.total.succeeded == 200 && beats_ok ? 0 : 1;
}
