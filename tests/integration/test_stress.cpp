// Stress: many submits with random priorities, clients, timeouts and cancels on a 4-thread
// io_context. Every submit must complete exactly once, and the books must balance.
#include <catch2/catch.hpp>

#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/bind_executor.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>

#include "laneq/laneq.hpp"
#include "support/run.hpp"

using namespace std::chrono_literals;

namespace {

void stress(laneq::SimulatedProviderConfig pc, laneq::QueueConfig cfg) {
  constexpr int n = 20000;
  asio::io_context io(4);
  struct Slot {
    std::atomic<int> completions{0};
    std::error_code ec;
    asio::cancellation_signal cancel;  // used on the submitter's strand only
  };
  auto slots = std::make_unique<Slot[]>(n);
  std::vector<asio::strand<asio::io_context::executor_type>> strands;  // submitter i % 8's
  for (int s = 0; s < 8; ++s) strands.push_back(asio::make_strand(io));
  const auto cancel_later = [&](int i, std::chrono::microseconds after) {
    auto t = std::make_shared<asio::steady_timer>(strands[i % 8], after);
    t->async_wait([&, i, t](std::error_code) {
      if (slots[i].completions.load() == 0) slots[i].cancel.emit(asio::cancellation_type::terminal);
    });
  };
  // One request in 50 is slow (10 ms) and cancelled 1-9 ms into its call (the other cancels
  // are timed from the submit, and mostly find their requests still queued).
  pc.latency_fn = [&, base = pc.latency, jitter = pc.jitter](const laneq::Request& r,
                                                             std::mt19937_64& rng) {
    const std::string& text = r.messages.at(0).content;
    if (text.starts_with("slow ")) {
      const int i = std::stoi(text.substr(5));
      asio::post(strands[i % 8], [&, i] { cancel_later(i, std::chrono::milliseconds(1 + i % 9)); });
      return std::chrono::nanoseconds(10ms);
    }
    return base + std::chrono::nanoseconds(rng() % static_cast<std::uint64_t>(jitter.count()));
  };
  laneq::SimulatedProvider provider(std::move(pc));
  const laneq::RateLimits limits = cfg.rate_limits;
  laneq::RequestQueue queue(io.get_executor(), provider, std::move(cfg));
  queue.start();

  std::atomic<int> completed{0};
  std::atomic<int> ok{0}, timeout{0}, cancelled{0}, failed{0}, rejected{0};
  std::atomic<int> off_strand{0};  // handlers run elsewhere than their associated strand
  const laneq::Priority prios[] = {laneq::Priority::critical, laneq::Priority::high,
                                   laneq::Priority::normal, laneq::Priority::low,
                                   laneq::Priority::background};

  // 8 submitter strands; each submits its share and sometimes cancels one of its own later.
  for (int s = 0; s < 8; ++s) {
    auto strand = strands[s];
    asio::post(strand, [&, s, strand] {
      std::mt19937_64 rng(1234 + s);
      for (int i = s; i < n; i += 8) {
        laneq::SubmitOptions o{.priority = prios[rng() % 5],
                               .client = "c" + std::to_string(rng() % 17)};
        if (rng() % 5 == 0) o.timeout = std::chrono::milliseconds(1 + rng() % 20);  // (0: bad_request)
        Slot& slot = slots[i];
        const bool slow = rng() % 50 == 0;
        queue.async_submit(
            laneq::test::chat(slow ? "slow " + std::to_string(i) : "hello"), o,
            asio::bind_cancellation_slot(
                slot.cancel.slot(),
                asio::bind_executor(strand, [&, i, strand](std::error_code ec, laneq::Response) {
                  if (!strand.running_in_this_thread()) ++off_strand;
                  Slot& sl = slots[i];
                  sl.ec = ec;
                  // (counted, checked after the join: Catch is not for io threads)
                  sl.completions.fetch_add(1);
                  if (!ec) ++ok;
                  else if (ec == laneq::errc::timeout) ++timeout;
                  else if (ec == laneq::errc::cancelled) ++cancelled;
                  else if (ec == laneq::errc::queue_full || ec == laneq::errc::client_queue_full)
                    ++rejected;
                  else ++failed;
                  if (completed.fetch_add(1) + 1 == n)
                    queue.async_shutdown({}, [](std::error_code) {});
                })));
        if (rng() % 10 == 0) cancel_later(i, std::chrono::microseconds(rng() % 3000));
      }
    });
  }

  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back([&] { io.run(); });
  // What the header allows from any thread, while the loop runs the queue (TSan watches):
  // snapshots, their export, weights, the limiter's snapshot and (unchanged) limits.
  // Snapshots taken while submits were still open (checked after the join: Catch2's
  // assertions are not thread-safe): the run was watched, not only its end.
  std::size_t observed = 0;
  bool gave_up = false;      // a lost completion: the loop is stopped, the test fails (no hang)
  std::thread observer([&] {
    const auto give_up_at = std::chrono::steady_clock::now() + 120s;  // (CTest gives 300 s)
    int k = 0;
    do {  // once at least, however fast the loop is done
      const bool running = completed.load() < n;
      const auto m = queue.metrics();
      observed += running && !laneq::to_prometheus(m).empty() ? 1 : 0;
      queue.set_client_weight("c" + std::to_string(k % 17), 1 + k % 3);
      (void)queue.limiter().snapshot();
      if (k++ % 16 == 0) queue.limiter().set_limits(limits);
      if (std::chrono::steady_clock::now() > give_up_at) {
        gave_up = true;
        io.stop();
        break;
      }
      // Throttled, not spinning: a snapshot a millisecond is plenty, and the tests CTest runs
      // beside this one need the core.
      std::this_thread::sleep_for(1ms);
    } while (completed.load() < n || !io.stopped());  // and the shutdown: no hang at the join
  });
  for (auto& t : threads) t.join();
  observer.join();
  CHECK(observed > 0);
  INFO("completed " << completed.load() << " of " << n);
  REQUIRE_FALSE(gave_up);
  CHECK(off_strand == 0);

  CHECK(completed == n);
  for (int i = 0; i < n; ++i) REQUIRE(slots[i].completions.load() == 1);
  const auto m = queue.metrics();
  CHECK(m.total.submitted == static_cast<std::uint64_t>(n));
  CHECK(m.total.succeeded == static_cast<std::uint64_t>(ok.load()));
  CHECK(m.total.expired == static_cast<std::uint64_t>(timeout.load()));
  CHECK(m.total.cancelled == static_cast<std::uint64_t>(cancelled.load()));
  CHECK(m.total.failed == static_cast<std::uint64_t>(failed.load()));
  CHECK(m.total.rejected == static_cast<std::uint64_t>(rejected.load()));
  CHECK(m.total.depth == 0);
  CHECK(m.total.in_flight == 0);
  CHECK(m.total.waiting == 0);
  CHECK(ok > n / 2);
  CHECK(cancelled > 0);
  CHECK(provider.aborted() > 0);  // calls cut short in flight, by a cancel or a deadline
  CHECK(timeout > 0);
  CHECK(failed > 0);
  std::uint64_t lane_sum = 0;
  for (auto& l : m.lanes) lane_sum += l.stats.submitted;
  CHECK(lane_sum == static_cast<std::uint64_t>(n));
  CHECK(m.total.retried > 0);
  CHECK(provider.calls() >= m.total.succeeded + m.total.retried);
}

}  // namespace

TEST_CASE("stress: 20000 random submits on 4 threads each complete exactly once",
          "[queue][stress]") {
  stress({.latency = 50us, .jitter = 400us, .failure_rate = 0.05},
         {.workers = 8, .reserved_workers = 2, .max_pending = 2000, .max_pending_per_client = 900,
          .retry = {.max_attempts = 2, .base_delay = 1ms, .max_delay = 2ms}});
}

TEST_CASE("stress: exactly once through a rate limiter with 429 pauses and retries",
          "[queue][stress][limits]") {
  // 20,000 requests at 5,000 per second; one call in ten answers 429 (a short global pause).
  stress({.latency = 50us, .jitter = 400us, .failure_rate = 0.1, .failure = laneq::errc::rate_limited,
          .failure_status = 429},
         {.workers = 8, .reserved_workers = 2, .max_pending = 2000, .max_pending_per_client = 900,
          .rate_limits = {.requests = 5000, .tokens = 2'000'000, .period = 1s},
          .retry = {.max_attempts = 3, .base_delay = 1ms, .max_delay = 2ms}});
}
