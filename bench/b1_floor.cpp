// B1 floor: the shape laneq is built to (README, DESIGN.md) with nothing else in it, to show how
// fast B1 could go on this machine at best. Per request, as in laneq with the SimulatedProvider:
//   - a submit (callback token, or use_awaitable in stream mode) lands in an intake; the first
//     of a burst posts one drain to the strand, which moves the burst into a FIFO;
//   - one of 8 worker coroutines on the strand takes it (a parked worker is resumed inline);
//   - the "provider" answers on the next loop turn: a post to the strand resuming the worker;
//   - the caller's completion is posted to its executor.
// Nothing else: no priorities or fairness, no deadlines, no metrics, no limiter, no payload
// (no Request, no Response). Same modes and request count as B1; prints one JSON line.
#include <chrono>
#include <cstdio>
#include <deque>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

#include <asio/any_io_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/strand.hpp>
#include <asio/use_awaitable.hpp>

#include "bench_util.hpp"
#include "laneq/detail/unique_function.hpp"

namespace {

using strand_type = asio::strand<asio::any_io_executor>;
constexpr asio::use_awaitable_t<strand_type> on_strand{};

struct op {
  asio::executor_work_guard<asio::any_io_executor> work;  // the caller's executor, kept busy
  laneq::detail::unique_function<void(std::error_code)> done;
};

class floor_queue {
 public:
  explicit floor_queue(asio::any_io_executor ex) : ex_(ex), strand_(asio::make_strand(ex)) {}

  template <class Token>
  auto async_submit(Token&& token) {
    return asio::async_initiate<Token, void(std::error_code)>(
        [this](auto handler) {
          auto* o = new op{asio::make_work_guard(asio::get_associated_executor(handler, ex_)),
                           std::move(handler)};
          bool first;
          {
            std::lock_guard lock(mu_);
            intake_.push_back(o);
            first = intake_.size() == 1;
          }
          if (first) strand_.post([this] { drain(); }, std::allocator<void>());
        },
        token);
  }

  void start(int workers) {
    for (int i = 0; i < workers; ++i) asio::co_spawn(strand_, worker(), asio::detached);
  }
  void stop() {
    strand_.post([this] {
      stopping_ = true;
      for (auto& p : parked_) std::exchange(p, nullptr)(nullptr);
      parked_.clear();
    }, std::allocator<void>());
  }

 private:
  void drain() {
    {
      std::lock_guard lock(mu_);
      running_.swap(intake_);
    }
    for (op* o : running_) queue_.push_back(o);
    running_.clear();
    while (!parked_.empty() && !queue_.empty()) {
      auto h = std::move(parked_.back());
      parked_.pop_back();
      op* o = queue_.front();
      queue_.pop_front();
      h(o);
    }
  }

  asio::awaitable<op*, strand_type> park() {
    return asio::async_initiate<const asio::use_awaitable_t<strand_type>&, void(op*)>(
        [this](auto handler) { parked_.emplace_back(std::move(handler)); }, on_strand);
  }

  asio::awaitable<std::tuple<std::error_code>, strand_type> call_provider() {
    auto token = asio::experimental::as_tuple(on_strand);
    return asio::async_initiate<decltype(token), void(std::error_code)>(
        [this](auto handler) {
          strand_.post([h = std::move(handler)]() mutable { std::move(h)(std::error_code{}); },
                       std::allocator<void>());
        },
        token);
  }

  asio::awaitable<void, strand_type> worker() {
    for (;;) {
      op* o = nullptr;
      if (!queue_.empty()) {
        o = queue_.front();
        queue_.pop_front();
      } else {
        if (stopping_) co_return;
        o = co_await park();
        if (!o) co_return;
      }
      auto [ec] = co_await call_provider();
      asio::post(o->work.get_executor(), [o, ec = ec] {
        auto done = std::move(o->done);
        delete o;
        done(ec);
      });
    }
  }

  asio::any_io_executor ex_;
  strand_type strand_;
  std::mutex mu_;
  std::vector<op*> intake_, running_;
  std::deque<op*> queue_;
  std::vector<laneq::detail::unique_function<void(op*)>> parked_;
  bool stopping_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "preload";
  const auto count = count_arg(argc > 2 ? argv[2] : nullptr, 200'000);
  if ((mode != "preload" && mode != "stream") || !count) {
    std::fprintf(stderr, "usage: b1_floor [preload|stream] [n > 0]\n");
    return 2;
  }
  const std::size_t n = *count;
  asio::io_context io(1);
  floor_queue queue(io.get_executor());
  std::size_t done = 0;
  const auto t0 = std::chrono::steady_clock::now();
  if (mode == "preload") {
    for (std::size_t i = 0; i < n; ++i)
      queue.async_submit([&](std::error_code) {
        if (++done == n) queue.stop();
      });
    io.poll();
    queue.start(8);
  } else {
    queue.start(8);
    for (std::size_t c = 0; c < 100; ++c)
      asio::co_spawn(io, [&, c]() -> asio::awaitable<void> {
        for (std::size_t i = c; i < n; i += 100) {
          co_await queue.async_submit(asio::use_awaitable);
          if (++done == n) queue.stop();
        }
      }, asio::detached);
  }
  io.run();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("{\"bench\":\"B1-floor\",\"mode\":\"%s\",\"n\":%zu,\"req_per_s\":%.0f}\n",
              mode.c_str(), n, static_cast<double>(done) / secs);
  return done == n ? 0 : 1;
}
