// B2 critical latency (DESIGN.md): 10,000 background requests of 5 ms each preloaded, 8 workers
// of which 2 are reserved for critical; 200 critical requests, one every 20 ms. Reports the
// critical requests' queue wait (submit call -> provider call starts), p50/p99/max in ms.
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "laneq/laneq.hpp"

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

// Stamps the moment each call reaches the provider, keyed by the request's model field.
class StampingProvider final : public laneq::Provider {
 public:
  StampingProvider() : inner_({.latency = 5ms}) {}
  void async_call(const laneq::Request& r, const laneq::CallContext& ctx,
                  laneq::CallCompletion done) noexcept override {
    if (r.model.starts_with("critical-")) {
      std::lock_guard lock(mu_);
      started_[r.model] = steady::now();
    }
    inner_.async_call(r, ctx, std::move(done));
  }
  const char* name() const noexcept override { return "stamping"; }
  steady::time_point started(const std::string& id) {
    std::lock_guard lock(mu_);
    return started_.at(id);
  }

 private:
  laneq::SimulatedProvider inner_;
  std::mutex mu_;
  std::unordered_map<std::string, steady::time_point> started_;
};

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

}  // namespace

int main() {
  asio::io_context io(1);
  StampingProvider provider;
  laneq::RequestQueue queue(io.get_executor(), provider,
                            {.workers = 8, .reserved_workers = 2, .max_pending = 20'000});
  for (int i = 0; i < 10'000; ++i)
    queue.async_submit({.model = "batch", .messages = {{"user", "x"}}},
                       {.priority = laneq::Priority::background}, [](auto, auto) {});
  queue.start();

  std::vector<double> waits_ms;
  // The backlog the critical requests must overtake: queued still at the last of them (else
  // a regression that failed the background fast would leave them an idle queue).
  std::int64_t backlog_at_last = 0;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    asio::steady_timer timer(io);
    auto next = steady::now();
    for (int i = 0; i < 200; ++i) {
      next += 20ms;
      timer.expires_at(next);
      co_await timer.async_wait(asio::use_awaitable);
      const std::string id = "critical-" + std::to_string(i);
      if (i == 199) backlog_at_last = queue.metrics().total.depth;  // (not in the timed wait)
      const auto t = steady::now();
      queue.async_submit({.model = id, .messages = {{"user", "hi"}}},
                         {.priority = laneq::Priority::critical},
                         [&, id, t](std::error_code ec, laneq::Response) {
                           if (!ec)
                             waits_ms.push_back(std::chrono::duration<double, std::milli>(
                                                    provider.started(id) - t)
                                                    .count());
                         });
    }
    co_await queue.shutdown({.drain = false});
  }, asio::detached);
  io.run();
  if (waits_ms.size() != 200) {
    std::fprintf(stderr, "only %zu critical requests succeeded\n", waits_ms.size());
    return 1;
  }
  if (backlog_at_last < 1000) {
    std::fprintf(stderr, "the background backlog was %lld at the last critical request: "
                         "nothing to overtake\n", static_cast<long long>(backlog_at_last));
    return 1;
  }
  std::printf("{\"bench\":\"B2\",\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"max_ms\":%.3f,\"n\":%zu,"
              "\"backlog_at_last\":%lld}\n",
              percentile(waits_ms, 0.5), percentile(waits_ms, 0.99),
              *std::max_element(waits_ms.begin(), waits_ms.end()), waits_ms.size(),
              static_cast<long long>(backlog_at_last));
  return 0;
}
