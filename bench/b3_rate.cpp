// B3 rate accuracy (DESIGN.md), in real time with the SimulatedProvider.
//   burst | smooth: limit 600 RPM expressed as 50 per 5 s, 400 requests backlogged, 20 s run;
//                   reports the most starts in any sliding 5 s and 1 s window and the total.
//   tokens:         5,000 tokens per 5 s; requests reserve a short prompt + max_tokens 180 and
//                   actually use 20..180 tokens (uniform); 20 s run; reports the most actual
//                   tokens in any sliding 5 s window and the total (ideal 20,000).
// B3_SECONDS overrides the run length (for a quick look; the figures are defined for 20 s).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>

#include "laneq/laneq.hpp"

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

struct Start {
  steady::time_point at;
  std::int64_t tokens;  // actual usage, known when the call completes
};

// Stamps each call as it reaches the provider and the usage it reports.
class StampingProvider final : public laneq::Provider {
 public:
  explicit StampingProvider(laneq::SimulatedProviderConfig c) : inner_(std::move(c)) {}
  void async_call(const laneq::Request& r, const laneq::CallContext& ctx,
                  laneq::CallCompletion done) noexcept override {
    std::size_t i;
    {
      std::lock_guard lock(mu_);
      i = starts_.size();
      starts_.push_back({steady::now(), 0});
    }
    inner_.async_call(r, ctx,
                      laneq::CallCompletion([this, i, done = std::move(done)](
                                                std::error_code ec, laneq::Response resp) mutable {
                        {
                          std::lock_guard lock(mu_);
                          starts_[i].tokens = resp.usage.total();
                        }
                        done(ec, std::move(resp));
                      }));
  }
  const char* name() const noexcept override { return "stamping"; }
  std::vector<Start> starts() {
    std::lock_guard lock(mu_);
    return starts_;
  }

 private:
  laneq::SimulatedProvider inner_;
  std::mutex mu_;
  std::vector<Start> starts_;
};

// The largest sum of `weight(start)` over starts inside any window [t, t + w).
template <class Weight>
std::int64_t max_window(const std::vector<Start>& s, steady::duration w, Weight weight) {
  std::int64_t best = 0, sum = 0;
  for (std::size_t i = 0, j = 0; j < s.size(); ++j) {
    sum += weight(s[j]);
    while (s[j].at - s[i].at >= w) sum -= weight(s[i++]);
    best = std::max(best, sum);
  }
  return best;
}

int run(const std::string& mode, std::chrono::milliseconds length) {
  const bool tokens = mode == "tokens";
  laneq::SimulatedProviderConfig pc{.latency = 20ms, .jitter = 20ms};
  if (tokens)
    pc.usage_fn = [](const laneq::Request&, std::mt19937_64& rng) {
      // 20..180 in all: a 10-token prompt and 10..170 completion tokens
      return laneq::Usage{10, std::uniform_int_distribution<std::int64_t>(10, 170)(rng)};
    };
  StampingProvider provider(pc);
  laneq::QueueConfig cfg{.workers = 8};
  if (tokens)
    cfg.rate_limits = {.tokens = 5000, .period = 5s};
  else
    cfg.rate_limits = {.requests = 50, .period = 5s, .smooth = mode == "smooth"};

  asio::io_context io;
  laneq::RequestQueue queue(io.get_executor(), provider, cfg);
  queue.start();
  const auto t0 = steady::now();
  // Anything but the backlog's shutting_down at the end is a failure: the starts would still
  // count, and the figures look normal.
  std::size_t failed = 0;
  for (int i = 0; i < 400; ++i) {
    laneq::Request req{.model = "sim", .messages = {{"user", "Summarize item " + std::to_string(i)}},
                       .max_tokens = tokens ? 180 : 64};
    queue.async_submit(std::move(req), {.priority = laneq::Priority::low},
                       [&failed](std::error_code ec, laneq::Response) {
                         if (ec && ec != laneq::errc::shutting_down && failed++ == 0)
                           std::fprintf(stderr, "b3: a request failed: %s\n",
                                        ec.message().c_str());
                       });
  }
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        asio::steady_timer t(io, t0 + length);
        co_await t.async_wait(asio::use_awaitable);
        co_await queue.shutdown({.drain = false});  // the backlog fails; in-flight calls finish
      },
      asio::detached);
  io.run();

  std::vector<Start> s;
  for (const auto& st : provider.starts())
    if (st.at < t0 + length) s.push_back(st);
  std::sort(s.begin(), s.end(), [](const Start& a, const Start& b) { return a.at < b.at; });
  const auto secs = std::chrono::duration<double>(length).count();
  // The ideal: a full budget at t0, 5 s, 10 s, 15 s (200 requests / 20,000 tokens in 20 s).
  const auto windows = static_cast<long long>(std::ceil(secs / 5));
  // What the benchmark claims, besides its figures: a limiter that never granted, one past
  // its limit, or one that granted well below what its budgets allow must not exit 0
  // (bench/run reports it). The last is judged at 90 % of the ideal, and only over the
  // defined 20 s (B3_SECONDS may cut a window short): smooth mode spaces each start from the
  // one before, so timer lateness adds up (200 in 20 s here; ~1.5 ms late per start on a
  // loaded machine would cost two), which the 90 % leaves room for.
  // Starts are stamped at the call, not at the grant: one more in a window may be that
  // stamping's doing.
  const bool defined_length = length == std::chrono::milliseconds(20s);
  const char* broken = nullptr;
  if (tokens) {
    const auto tok = [](const Start& x) { return x.tokens; };
    std::int64_t total = 0;
    for (const auto& x : s) total += x.tokens;
    const std::int64_t most = max_window(s, 5s, tok);
    std::printf(
        "{\"bench\":\"B3\",\"mode\":\"tokens\",\"max_window_tokens\":%lld,\"total_tokens\":%lld,"
        "\"ideal_tokens\":%lld,\"requests\":%zu,\"seconds\":%.0f,\"failed\":%zu}\n",
        static_cast<long long>(most), static_cast<long long>(total),
        static_cast<long long>(5000 * windows), s.size(), secs, failed);
    if (total == 0) broken = "nothing started";
    else if (most > 5000) broken = "more than 5,000 actual tokens in a 5 s window";
    else if (defined_length && total * 10 < 5000 * windows * 9)
      broken = "below 90 % of the ideal tokens: the limiter held back budget it had";
  } else {
    const auto one = [](const Start&) { return std::int64_t{1}; };
    const std::int64_t most = max_window(s, 5s, one), most_1s = max_window(s, 1s, one);
    std::printf(
        "{\"bench\":\"B3\",\"mode\":\"%s\",\"max_window\":%lld,\"max_1s\":%lld,\"total\":%zu,"
        "\"ideal\":%lld,\"limit\":50,\"window_s\":5,\"seconds\":%.0f,\"failed\":%zu}\n",
        mode.c_str(), static_cast<long long>(most), static_cast<long long>(most_1s), s.size(),
        static_cast<long long>(50 * windows), secs, failed);
    if (s.empty()) broken = "nothing started";
    else if (most > 50 + 1) broken = "more than the limit (50) started in a 5 s window";
    else if (defined_length && static_cast<long long>(s.size()) * 10 < 50 * windows * 9)
      broken = "below 90 % of the ideal starts: the limiter held back budget it had";
    else if (mode == "smooth" && most_1s > 11 + 1)
      broken = "smooth mode started more than 11 in a 1 s window (DESIGN.md)";
  }
  if (broken) std::fprintf(stderr, "b3 %s: %s\n", mode.c_str(), broken);
  return failed == 0 && !broken ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "burst";
  if (mode != "burst" && mode != "smooth" && mode != "tokens") {
    std::fprintf(stderr, "usage: b3_rate burst|smooth|tokens\n");
    return 2;
  }
  std::chrono::milliseconds length = 20s;
  if (const char* e = std::getenv("B3_SECONDS"); e && std::atof(e) > 0)
    length = std::chrono::milliseconds(static_cast<long long>(std::atof(e) * 1000));
  return run(mode, length);
}
