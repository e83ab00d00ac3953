// B1 anchor: the machine's own yardstick for B1. Issue #2 sets B1's 2M req/s target beside "a
// bare Asio async round trip (initiate -> strand -> resume) costs ~140 ns here (~7M/s)"; this
// measures that round trip on the machine at hand, so a B1 figure from a slower or faster
// machine can be read against the target in round trips per request (2M req/s at 140 ns is 3.6
// round trips per request) instead of in absolute req/s, which swing by 2x between VMs.
// One thread, one coroutine awaiting, with use_awaitable, an operation made by async_initiate
// whose initiation posts to a strand; on the strand the handler is
//   dispatch: dispatched to its associated executor (we are on its thread: it resumes inline)
//   post:     posted to its associated executor (one more trip through the io_context's queue)
// Prints one JSON line per mode: ns per round trip and round trips per second.
#include <chrono>
#include <cstdio>
#include <string>
#include <utility>

#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/dispatch.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/strand.hpp>
#include <asio/use_awaitable.hpp>

#include "bench_util.hpp"

namespace {

using strand_type = asio::strand<asio::io_context::executor_type>;

template <class Token>
auto async_round_trip(strand_type& strand, bool post_back, Token&& token) {
  return asio::async_initiate<Token, void()>(
      [&strand, post_back](auto handler) {
        asio::post(strand, [post_back, h = std::move(handler)]() mutable {
          auto ex = asio::get_associated_executor(h);
          if (post_back)
            asio::post(ex, std::move(h));
          else
            asio::dispatch(ex, std::move(h));
        });
      },
      token);
}

double run(bool post_back, std::size_t n) {
  asio::io_context io(1);
  strand_type strand(io.get_executor());
  std::chrono::steady_clock::time_point t0, t1;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    for (std::size_t i = 0; i < n / 10; ++i)  // warm-up: the frame caches, the queue's nodes
      co_await async_round_trip(strand, post_back, asio::use_awaitable);
    t0 = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < n; ++i)
      co_await async_round_trip(strand, post_back, asio::use_awaitable);
    t1 = std::chrono::steady_clock::now();
  }, asio::detached);
  io.run();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(n);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "dispatch";
  const auto n = count_arg(argc > 2 ? argv[2] : nullptr, 2'000'000);
  if ((mode != "dispatch" && mode != "post") || !n) {
    std::fprintf(stderr, "usage: b1_anchor [dispatch|post] [n > 0]\n");
    return 2;
  }
  const double ns = run(mode == "post", *n);
  std::printf("{\"bench\":\"B1-anchor\",\"mode\":\"%s\",\"n\":%zu,\"ns_per_round_trip\":%.1f,"
              "\"round_trips_per_s\":%.0f}\n",
              mode.c_str(), *n, ns, 1e9 / ns);
  return 0;
}
