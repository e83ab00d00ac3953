// RequestQueue on a real io_context with the SimulatedProvider.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include <asio/bind_allocator.hpp>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/bind_executor.hpp>
#include <asio/co_spawn.hpp>
#include <asio/experimental/deferred.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>

#include "laneq/detail/post.hpp"
#include "laneq/laneq.hpp"
#include "support/recording_provider.hpp"
#include "support/run.hpp"
#include "support/submit_with.hpp"

using namespace std::chrono_literals;
using namespace asio::experimental::awaitable_operators;
using laneq::errc;
using laneq::Priority;
using laneq::test::chat;
using laneq::test::RecordingProvider;
using laneq::test::run;
using laneq::test::submit_with;
using laneq::test::run_until;

namespace {

auto tuple_awaitable = asio::experimental::as_tuple(asio::use_awaitable);

// A provider config whose call latency goes by the first message's text: the first prefix in
// `by_prefix` it starts with, else `otherwise`.
laneq::SimulatedProviderConfig latency_by_text(
    std::vector<std::pair<std::string, std::chrono::nanoseconds>> by_prefix,
    std::chrono::nanoseconds otherwise = 1ms) {
  return {.latency_fn = [by_prefix = std::move(by_prefix), otherwise](const laneq::Request& r,
                                                                      auto&) {
    const auto& text = r.messages.at(0).content;
    for (const auto& [prefix, latency] : by_prefix)
      if (text.starts_with(prefix)) return latency;
    return otherwise;
  }};
}

// A future's value, or a test failure after 30 s (a regression fails instead of hanging).
template <class Future>
auto get_within(Future&& f) {
  REQUIRE(f.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  return f.get();
}

// io.run() on a thread of its own, stopped and joined however the test leaves its scope (a
// failed REQUIRE included: a joinable std::thread would call std::terminate).
struct LoopThread {
  asio::io_context& io;
  std::thread t{[this] { io.run(); }};
  ~LoopThread() {
    if (!t.joinable()) return;
    io.stop();
    t.join();
  }
};

}  // namespace

TEST_CASE("submit resolves with the provider's response and queue timing", "[queue]") {
  asio::io_context io;
  laneq::SimulatedProvider provider({.latency = 2ms, .output_tokens = 7});
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 2});
  queue.start();
  run(io, [&]() -> asio::awaitable<void> {
    laneq::Response r = co_await queue.submit(chat(), {.priority = Priority::critical,
                                                       .client = "tenant-a", .timeout = 30s});
    CHECK(r.status == 200);
    CHECK(r.text == "simulated");
    CHECK(r.usage.output_tokens == 7);
    CHECK(r.attempts == 1);
    CHECK(r.service_time >= 2ms);
    co_await queue.shutdown({.drain = true});
  });
  CHECK(provider.calls() == 1);
}

TEST_CASE("async_submit works with a callback, deferred, use_future, as_tuple and use_awaitable",
          "[queue][tokens]") {
  asio::io_context io;
  laneq::SimulatedProvider provider;
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 2});
  queue.start();
  LoopThread loop{io};  // its run() returns once the queue has shut down

  // plain callbacks (checked on this thread: Catch2 assertions are not thread-safe)
  std::promise<std::pair<std::error_code, int>> cb_ok, cb_bad;
  queue.async_submit(chat(), {}, [&](std::error_code ec, laneq::Response r) {
    cb_ok.set_value({ec, r.status});
  });
  queue.async_submit(chat(), {.priority = Priority{3}}, [&](std::error_code ec, laneq::Response r) {
    cb_bad.set_value({ec, r.status});
  });
  const auto ok = get_within(cb_ok.get_future());
  CHECK_FALSE(ok.first);
  CHECK(ok.second == 200);
  CHECK(get_within(cb_bad.get_future()).first == errc::unknown_lane);

  // deferred: nothing happens until the operation is launched, here with a callback
  std::promise<std::pair<std::error_code, int>> deferred_done;
  laneq::Request kept = chat("deferred");  // an lvalue: the deferred operation keeps a copy
  auto op = queue.async_submit(kept, {}, asio::experimental::deferred);
  std::move(op)([&](std::error_code ec, laneq::Response r) {
    deferred_done.set_value({ec, r.status});
  });
  const auto deferred_result = get_within(deferred_done.get_future());
  CHECK_FALSE(deferred_result.first);
  CHECK(deferred_result.second == 200);
  CHECK(kept.messages.at(0).content == "deferred");

  // use_future
  std::future<laneq::Response> f = queue.async_submit(chat(), {}, asio::use_future);
  CHECK(get_within(f).status == 200);
  std::future<laneq::Response> bad =
      queue.async_submit(chat(), {.priority = Priority{42}}, asio::use_future);
  try {
    get_within(bad);
    FAIL("expected unknown_lane");
  } catch (const std::system_error& e) {
    CHECK(e.code() == errc::unknown_lane);
  }

  // as_tuple(use_awaitable), use_awaitable, and the throwing submit()
  std::error_code tuple_ok, tuple_bad, thrown;
  int awaited_status = 0;
  auto coro = asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    auto [ec, r] = co_await queue.async_submit(chat(), {}, tuple_awaitable);
    tuple_ok = ec;
    auto [ec2, r2] = co_await queue.async_submit(chat(), {.priority = Priority{7}}, tuple_awaitable);
    tuple_bad = ec2;
    laneq::Response r3 = co_await queue.async_submit(chat(), {}, asio::use_awaitable);
    awaited_status = r3.status;
    try {
      co_await queue.submit(chat(), {.priority = Priority{7}});
    } catch (const laneq::RequestError& e) {
      thrown = e.code();
    }
    co_await queue.shutdown();
  }, asio::use_future);
  get_within(coro);
  loop.t.join();
  CHECK_FALSE(tuple_ok);
  CHECK(tuple_bad == errc::unknown_lane);
  CHECK(awaited_status == 200);
  CHECK(thrown == errc::unknown_lane);
}

TEST_CASE("submit() queues nothing until its awaitable is awaited - one dropped unawaited is freed",
          "[queue][awaitable]") {
  asio::io_context io;
  laneq::SimulatedProvider provider({.latency = 0ms});
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 1});
  queue.start();
  run(io, [&]() -> asio::awaitable<void> {
    {
      auto dropped = queue.submit(chat(), {.client = "dropped"});  // holds its request: freed here
    }
    auto later = queue.submit(chat("kept"), {.client = "kept"});
    asio::steady_timer t(co_await asio::this_coro::executor, 5ms);
    co_await t.async_wait(asio::use_awaitable);
    CHECK(provider.calls() == 0);  // created is not started
    CHECK(queue.metrics().total.submitted == 0);
    laneq::Response r = co_await std::move(later);
    CHECK(r.status == 200);
    co_await queue.shutdown();
  });
  CHECK(provider.calls() == 1);
  CHECK(queue.metrics().total.submitted == 1);
}

TEST_CASE("with one worker, requests start in strict priority order, FIFO within a lane",
          "[queue][order]") {
  asio::io_context io;
  RecordingProvider provider;
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 1});
  // queued before start(): the single worker sees the whole set at once
  const std::vector<std::pair<Priority, std::string>> in = {
      {Priority::background, "bg1"}, {Priority::low, "low1"}, {Priority::normal, "n1"},
      {Priority::critical, "c1"},    {Priority::normal, "n2"}, {Priority::high, "h1"},
      {Priority::critical, "c2"},    {Priority::background, "bg2"}};
  int done = 0;
  for (auto& [p, text] : in)
    submit_with(queue, chat(text), {.priority = p}, [&](std::error_code ec, laneq::Response) {
      CHECK_FALSE(ec);
      if (++done == 8) queue.async_shutdown({}, [](std::error_code) {});
    });
  io.poll();  // admitted, not started
  queue.start();
  io.run();
  CHECK(done == 8);
  CHECK(provider.seen() ==
        std::vector<std::string>{"c1", "c2", "h1", "n1", "n2", "low1", "bg1", "bg2"});
}

TEST_CASE("a critical request overtakes 100 queued batch requests", "[queue][order]") {
  asio::io_context io;
  RecordingProvider provider({.latency = 1ms});
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 2});
  queue.start();
  run(io, [&]() -> asio::awaitable<void> {
    std::vector<std::future<laneq::Response>> batch;
    for (int i = 0; i < 100; ++i)
      submit_with(queue, chat("batch"), {.priority = Priority::background},
                         [](std::error_code ec, laneq::Response) { CHECK_FALSE(ec); });
    co_await queue.submit(chat("urgent"), {.priority = Priority::critical});
    co_await queue.shutdown();
  });
  const auto seen = provider.seen();
  const auto pos = std::find(seen.begin(), seen.end(), "urgent") - seen.begin();
  CHECK(pos <= 2);  // at most the two already started when it arrived
  CHECK(seen.size() == 101);
}

TEST_CASE("clients in one lane take turns through the queue", "[queue][fairness]") {
  asio::io_context io;
  RecordingProvider provider;
  laneq::RequestQueue queue(io.get_executor(), provider,
                            {.workers = 1, .client_weights = {{"gold", 2}}});
  int done = 0;
  auto count = [&](std::error_code, laneq::Response) {
    if (++done == 12) queue.async_shutdown({}, [](std::error_code) {});
  };
  for (int i = 0; i < 6; ++i) {
    submit_with(queue, chat("a"), {.client = "a"}, count);
    submit_with(queue, chat("gold"), {.client = "gold"}, count);
  }
  io.poll();
  queue.start();
  io.run();
  const auto seen = provider.seen();
  REQUIRE(seen.size() == 12);
  // a, gold, gold, a, gold, gold, ... while both have work
  CHECK(std::vector<std::string>(seen.begin(), seen.begin() + 6) ==
        std::vector<std::string>{"a", "gold", "gold", "a", "gold", "gold"});
}

TEST_CASE("fair_share = tokens: clients of one lane share its tokens, not its requests",
          "[queue][fairness]") {
  for (const auto share : {laneq::FairShare::requests, laneq::FairShare::tokens}) {
    asio::io_context io;
    RecordingProvider provider;
    laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 1, .fair_share = share});
    int done = 0;
    auto count = [&](std::error_code ec, laneq::Response) {
      CHECK_FALSE(ec);
      if (++done == 204) queue.async_shutdown({}, [](std::error_code) {});
    };
    // "big" asks ~1,001 tokens a request (a 1-token prompt + max_tokens 1,000), "small" ~11.
    for (int i = 0; i < 4; ++i) submit_with(queue, chat("big", 1000), {.client = "big"}, count);
    for (int i = 0; i < 200; ++i)
      submit_with(queue, chat("small", 10), {.client = "small"}, count);
    io.poll();
    queue.start();
    io.run();
    const auto seen = provider.seen();
    REQUIRE(seen.size() == 204);
    // Small calls between the second and third "big" ones, one big cost of turns apart: one
    // (turns), or as many as make a big one's tokens (DRR: to within one request).
    const auto big_at = [&](int k) {
      auto it = seen.begin();
      for (int i = 0; i < k && it != seen.end(); ++i)
        it = std::find(i == 0 ? it : it + 1, seen.end(), "big");
      return it;
    };
    REQUIRE(big_at(3) != seen.end());
    const auto smalls_between = std::count(big_at(2), big_at(3), "small");
    if (share == laneq::FairShare::requests) {
      CHECK(smalls_between == 1);
    } else {
      const auto cost = [](const laneq::Request& r) {
        return laneq::estimate_prompt_tokens(r) + r.max_tokens;
      };
      const double ratio = static_cast<double>(cost(chat("big", 1000))) /
                           static_cast<double>(cost(chat("small", 10)));
      INFO("a big request costs " << ratio << " small ones");
      CHECK(ratio > 50);
      CHECK(std::abs(static_cast<double>(smalls_between) - ratio) <= 1.5);
    }
  }
}

TEST_CASE("with aging, a background request is served within its bound under constant critical "
          "load",
          "[queue][aging]") {
  asio::io_context io;
  // The critical requests queued when the background one starts: aging took it past them
  // (without aging it starts only when the critical lane runs dry, which a stalled feeder
  // could also make happen within the time bounds below).
  std::optional<std::int64_t> critical_queued_at_start;
  laneq::RequestQueue* q = nullptr;
  laneq::SimulatedProvider provider(
      {.latency_fn = [&](const laneq::Request& r, std::mt19937_64&) {
        if (r.messages.at(0).content == "background")
          critical_queued_at_start = q->metrics().lanes.at(0).stats.depth;
        return std::chrono::nanoseconds(5ms);
      }});
  auto lanes = laneq::default_lanes();
  lanes[4].age_step = 20ms;  // background: 4 lanes to climb -> served after ~80 ms
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 1, .lanes = lanes});
  q = &queue;
  queue.start();
  // Keep the critical lane busy: five feeders, so four are queued while one runs and a
  // feeder's callback may lag ~20 ms under load without the lane running dry; for 600 ms
  // (bounded, so that a regression fails the checks below instead of hanging). Outside the
  // coroutine: the last callbacks run after it returned.
  int critical_done = 0;
  const auto feed_until = std::chrono::steady_clock::now() + 600ms;
  std::function<void()> feed = [&] {
    if (std::chrono::steady_clock::now() > feed_until) return;
    submit_with(queue, chat(), {.priority = Priority::critical},
                       [&](std::error_code ec, laneq::Response) {
                         critical_done += ec ? 0 : 1;
                         feed();
                       });
  };
  run(io, [&]() -> asio::awaitable<void> {
    for (int i = 0; i < 5; ++i) feed();
    const laneq::Response r =
        co_await queue.submit(chat("background"), {.priority = Priority::background});
    REQUIRE(critical_queued_at_start);
    CHECK(*critical_queued_at_start >= 1);  // taken past queued critical work
    CHECK(r.queue_wait >= 60ms);   // it did wait behind critical work...
    CHECK(r.queue_wait < 400ms);   // ...but not until the critical load ended
    CHECK(critical_done > 3);      // (the load was real; ~16 in 80 ms unloaded)
    co_await queue.shutdown();
  });
}

// Two workers, the background lane aging one step per `age_step`, one start per `period`.
static laneq::QueueConfig aging_background(std::chrono::milliseconds age_step,
                                           std::chrono::milliseconds period) {
  auto lanes = laneq::default_lanes();
  lanes[4].age_step = age_step;
  return {.workers = 2, .lanes = lanes, .rate_limits = {.requests = 1, .period = period}};
}

TEST_CASE("with aging, a background request keeps its bound when the rate limit is the "
          "bottleneck - it does not wait behind newer critical requests at the limiter",
          "[queue][aging][limits]") {
  asio::io_context io;
  RecordingProvider provider;
  // background level with critical after 200 ms; one start per 100 ms, two workers: one waits
  // at the limiter while the other's call runs
  laneq::RequestQueue queue(io.get_executor(), provider, aging_background(50ms, 100ms));
  int done = 0;
  submit_with(queue, chat("background"), {.priority = Priority::background},
                     [&](std::error_code, auto) { ++done; });
  for (int i = 0; i < 30; ++i)  // 3 s of critical work at this rate
    submit_with(queue, chat("critical"), {.priority = Priority::critical},
                       [&](std::error_code, auto) { ++done; });
  io.poll();  // all queued before a worker takes any
  queue.start();
  run_until(io, [&] {
    const auto seen = provider.seen();
    return std::find(seen.begin(), seen.end(), "background") != seen.end();
  });
  const auto seen = provider.seen();
  const auto at = std::find(seen.begin(), seen.end(), "background") - seen.begin();
  // it reaches a worker after ~200 ms (2-3 critical calls), then waits at most for the one
  // critical already waiting at the limiter; at its own lane's rank it would wait for all 30
  CHECK(at <= 8);
  queue.async_shutdown({.drain = false}, [](std::error_code) {});
  io.run();
}

TEST_CASE("with aging, a background request that reached the limiter unaged ages there too - "
          "newer critical requests do not starve it",
          "[queue][aging][limits]") {
  // Its rank was fixed when it reached the limiter (4, the critical lane empty then): every
  // critical request taken after it went ahead at rank 0, until its deadline.
  asio::io_context io;
  RecordingProvider provider;
  // background level with critical after 80 ms; one start per second (room for a loaded
  // machine's stalls between the first grant and the background submit)
  laneq::RequestQueue queue(io.get_executor(), provider, aging_background(20ms, 1s));
  queue.start();
  run(io, [&]() -> asio::awaitable<void> {
    co_await queue.submit(chat("warm"), {.priority = Priority::critical});  // the budget is spent
    submit_with(queue, chat("background"), {.priority = Priority::background},
                       [](std::error_code, auto) {});
    // taken by a worker (nothing better queued), it waits at the limiter
    co_await laneq::test::wait_until([&] { return queue.limiter().snapshot().waiting == 1; });
    for (int i = 0; i < 10; ++i)  // then a stream of critical work, newer than it
      submit_with(queue, chat("critical"), {.priority = Priority::critical},
                         [](std::error_code, auto) {});
    co_await laneq::test::wait_until([&] { return provider.seen().size() >= 3; });
    co_await queue.shutdown({.drain = false});
  });
  const auto seen = provider.seen();
  REQUIRE(seen.size() >= 3);
  CHECK(seen[0] == "warm");
  // aged to rank 0 by the next grant (1 s), it wins the tie by being older
  CHECK(seen[1] == "background");
}

TEST_CASE("reserved workers keep a worker free for critical requests", "[queue][reserved]") {
  asio::io_context io;
  // (latency: far above what a loaded loop may lag, so "at once" is told from "after a call")
  laneq::SimulatedProvider provider({.latency = 400ms});
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 3, .reserved_workers = 1});
  queue.start();
  run(io, [&]() -> asio::awaitable<void> {
    for (int i = 0; i < 6; ++i)
      submit_with(queue, chat(), {.priority = Priority::low}, [](auto, auto) {});
    co_await laneq::test::wait_until([&] { return provider.in_flight() >= 2; });
    for (int i = 0; i < 10; ++i)  // every worker has had its turn to take work
      co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
    CHECK(provider.in_flight() == 2);  // the reserved worker does not take low work
    const laneq::Response r = co_await queue.submit(chat(), {.priority = Priority::critical});
    // it started at once on the reserved worker, not after a 400 ms low call
    CHECK(r.queue_wait < 200ms);
    co_await queue.shutdown();
  });
  CHECK(provider.max_in_flight() == 3);
  CHECK(provider.calls() == 7);
}

TEST_CASE("when full, submit waits for room by default and fails queue_full in reject lanes",
          "[queue][backpressure]") {
  asio::io_context io;
  laneq::SimulatedProvider provider({.latency = 100ms});
  auto lanes = laneq::default_lanes();
  lanes[4].when_full = laneq::WhenFull::reject;  // background rejects
  laneq::RequestQueue queue(io.get_executor(), provider,
                            {.workers = 1, .max_pending = 2, .lanes = lanes});
  queue.start();
  int ok = 0, full = 0;
  run(io, [&]() -> asio::awaitable<void> {
    auto count = [&](std::error_code ec, laneq::Response) {
      if (!ec) ++ok;
      else if (ec == errc::queue_full) ++full;
    };
    for (int i = 0; i < 10; ++i) submit_with(queue, chat(), {}, count);  // normal: waits
    // one in its call, two queued (full), the rest waiting for room (7, less any that moved up
    // as calls ended, should the machine stall)
    co_await laneq::test::wait_until([&] { return provider.in_flight() == 1; });
    const auto m = queue.metrics();
    CHECK(m.total.depth == 2);
    CHECK(m.total.waiting >= 1);
    CHECK(m.total.waiting + m.total.depth + m.total.in_flight + m.total.succeeded == 10);
    submit_with(queue, chat(), {.priority = Priority::background}, count);  // rejects
    co_await queue.shutdown();
  });
  CHECK(ok == 10);
  CHECK(full == 1);
  CHECK(queue.metrics().total.rejected == 1);
}

TEST_CASE("a critical request that finds the queue full starts at once on a parked reserved "
          "worker, past the waiting batch work",
          "[queue][backpressure][reserved]") {
  asio::io_context io;
  laneq::SimulatedProvider provider({.latency = 600ms});
  laneq::RequestQueue queue(io.get_executor(), provider,
                            {.workers = 2, .reserved_workers = 1, .max_pending = 2});
  queue.start();
  run(io, [&]() -> asio::awaitable<void> {
    // one low call in flight on the general worker, two low ones queued: the queue is full
    for (int i = 0; i < 3; ++i)
      submit_with(queue, chat(), {.priority = Priority::low}, [](auto, auto) {});
    co_await laneq::test::wait_until([&] { return provider.in_flight() == 1; });
    // and one more low one waiting for room
    submit_with(queue, chat(), {.priority = Priority::low}, [](auto, auto) {});
    co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);  // admitted
    CHECK(queue.metrics().total.waiting == 1);
    // The reserved worker is idle: it takes the critical request now, not when room appears
    // (~600 ms, when the general worker takes the next low request).
    const laneq::Response r = co_await queue.submit(chat(), {.priority = Priority::critical});
    CHECK(r.queue_wait < 300ms);
    co_await queue.shutdown({.drain = false});
  });
}

TEST_CASE("a critical request that waited for room while the reserved worker was busy goes to "
          "it as soon as it is free, before later critical ones",
          "[queue][backpressure][reserved]") {
  asio::io_context io;
  RecordingProvider provider(latency_by_text({{"c0", 150ms}, {"low", 1500ms}}));
  laneq::RequestQueue queue(io.get_executor(), provider,
                            {.workers = 2, .reserved_workers = 1, .max_pending = 2});
  queue.start();
  std::map<std::string, laneq::Response> done;
  std::map<std::string, std::error_code> ended;
  auto submit = [&](std::string name, Priority p) {
    submit_with(queue, chat(name), {.priority = p}, [&, name](std::error_code ec,
                                                              laneq::Response r) {
      ended[name] = ec;
      done[name] = std::move(r);
    });
  };
  submit("c0", Priority::critical);  // the reserved worker, 150 ms
  submit("low1", Priority::low);     // the general worker, 1.5 s
  submit("low2", Priority::low);     // queued: full
  submit("low3", Priority::low);
  run_until(io, [&] { return provider.seen().size() == 2; });
  submit("a", Priority::critical);   // the reserved worker is busy: waits for room
  submit("b", Priority::critical);
  run_until(io, [&] { return done.count("a") && done.count("b"); });
  CHECK_FALSE(ended["a"]);
  CHECK_FALSE(ended["b"]);
  CHECK(done["a"].queue_wait < 1s);  // at ~150 ms, when c0 is done; not ~1.5 s, at room
  const auto seen = provider.seen();
  const auto pos = [&](const std::string& n) {
    return std::find(seen.begin(), seen.end(), n) - seen.begin();
  };
  CHECK(pos("a") < pos("b"));
  // (without drain: the low ones' 1.5 s calls one after another are not what is tested)
  queue.async_shutdown({.drain = false}, [](std::error_code) {});
  io.run();
}

TEST_CASE("a free reserved worker does not park while a critical request waits for room, even "
          "when the waiter it took first had expired",
          "[queue][backpressure][reserved]") {
  asio::io_context io;
  // (k0's 300 ms: room for a loaded machine's stall before c1 and c2 are in)
  RecordingProvider provider(latency_by_text({{"k0", 300ms}, {"n1", 5s}}));
  laneq::RequestQueue queue(io.get_executor(), provider,
                            {.workers = 2, .reserved_workers = 1, .max_pending = 1});
  queue.start();
  std::map<std::string, std::error_code> ended;
  std::map<std::string, laneq::Response> done;
  asio::cancellation_signal cancel_n1;  // at the end: its 5 s call is not what is tested
  auto submit = [&](std::string name, Priority p, std::chrono::milliseconds timeout) {
    auto record = [&, name](std::error_code ec, laneq::Response r) {
      ended[name] = ec;
      done[name] = std::move(r);
    };
    if (name == "n1")
      queue.async_submit(chat(name), {.priority = p, .timeout = timeout},
                         asio::bind_cancellation_slot(cancel_n1.slot(), record));
    else
      submit_with(queue, chat(name), {.priority = p, .timeout = timeout}, record);
  };
  submit("n1", Priority::normal, 30s);  // the general worker, 5 s
  submit("n2", Priority::normal, 30s);  // queued: the queue is full
  run_until(io, [&] { return provider.seen().size() == 1; });
  submit("k0", Priority::critical, 30s);  // the reserved worker, 300 ms
  run_until(io, [&] { return provider.seen().size() == 2; });
  submit("c1", Priority::critical, 500ms);  // both wait for room: the reserved worker is busy
  submit("c2", Priority::critical, 30s);
  io.poll();
  // A busy loop: when it runs again, k0's answer (due 300 ms into its call) comes before the
  // queue's deadline timer (due 500 ms after c1's submit, later), so the reserved worker takes
  // c1 and finds it expired.
  std::this_thread::sleep_for(600ms);
  run_until(io, [&] { return ended.count("c2") > 0; });
  CHECK(ended["c1"] == errc::timeout);
  CHECK_FALSE(ended["c2"]);
  CHECK(done["c2"].queue_wait < 3s);  // at once on the reserved worker, not after n1's 5 s
  CHECK(ended.count("n1") == 0);  // (still in its call: the bound above means something)
  cancel_n1.emit(asio::cancellation_type::terminal);
  queue.async_shutdown({.drain = false}, [](std::error_code) {});
  io.run();
  CHECK(ended["n1"] == errc::cancelled);
}

TEST_CASE("when room appears, waiters go in by lane (with aging), not by arrival - a critical "
          "waiter goes before batch work that waited longer",
          "[queue][backpressure]") {
  asio::io_context io;
  RecordingProvider provider(latency_by_text({{"slow", 300ms}}, 5ms));
  auto lanes = laneq::default_lanes();
  lanes[3].age_step = 1ms;  // low: aged past critical by the time room appears
  laneq::RequestQueue queue(io.get_executor(), provider,
                            {.workers = 1, .reserved_workers = 0, .max_pending = 1,
                             .lanes = lanes});
  std::vector<std::string> done;
  auto submit = [&](std::string name, Priority p) {
    submit_with(queue, chat(name), {.priority = p},
                       [&, name](std::error_code ec, laneq::Response) {
                         CHECK_FALSE(ec);
                         done.push_back(name);
                       });
  };
  submit("q", Priority::background);  // queued: the queue is full
  submit("b1", Priority::background);  // waiting, in this order
  submit("b2", Priority::background);
  submit("n", Priority::normal);
  submit("c", Priority::critical);
  io.poll();
  CHECK(queue.metrics().total.waiting == 4);
  queue.start();
  run_until(io, [&] { return done.size() == 5; });
  // q is taken; room goes to c (critical), then n, then the background ones in arrival order.
  CHECK(provider.seen() == std::vector<std::string>{"q", "c", "n", "b1", "b2"});

  // Aging: a low waiter that has waited 20 age steps ranks with critical, and the older wins
  // (without aging the critical one, come later, would go first).
  done.clear();
  submit("slow", Priority::background);  // in flight for 300 ms
  io.poll();
  submit("fill", Priority::background);  // queued: full again
  submit("old-low", Priority::low);      // waiting
  io.run_for(20ms);
  submit("new-critical", Priority::critical);
  run_until(io, [&] { return done.size() == 4; });
  const auto seen = provider.seen();
  CHECK(std::vector<std::string>(seen.end() - 4, seen.end()) ==
        std::vector<std::string>{"slow", "fill", "old-low", "new-critical"});
  queue.async_shutdown({}, [](std::error_code) {});
  io.run();
}

TEST_CASE("a client over its pending limit gets client_queue_full, others still get in",
          "[queue][backpressure]") {
  asio::io_context io;
  laneq::SimulatedProvider provider({.latency = 5ms});
  laneq::RequestQueue queue(io.get_executor(), provider,
                            {.workers = 1, .max_pending_per_client = 3});
  std::map<std::string, int> ok, limited;
  int done = 0;
  for (int i = 0; i < 5; ++i)
    for (std::string c : {"a", "b"})
      submit_with(queue, chat(), {.client = c}, [&, c](std::error_code ec, laneq::Response) {
        if (!ec) ++ok[c];
        if (ec == errc::client_queue_full) ++limited[c];
        if (++done == 10) queue.async_shutdown({}, [](std::error_code) {});
      });
  io.poll();
  queue.start();
  io.run();
  CHECK(ok["a"] == 3);
  CHECK(ok["b"] == 3);
  CHECK(limited["a"] == 2);
  CHECK(limited["b"] == 2);
}

TEST_CASE("a client's requests waiting for room count toward its pending limit",
          "[queue][backpressure][metrics]") {
  asio::io_context io;
  laneq::SimulatedProvider provider({.latency = 5ms});
  laneq::RequestQueue queue(io.get_executor(), provider,
                            {.workers = 1, .max_pending = 3, .max_pending_per_client = 2});
  std::map<std::string, std::error_code> got;
  auto submit = [&](std::string name, std::string client, Priority p) {
    submit_with(queue, chat(name), {.priority = p, .client = client},
                       [&, name](std::error_code ec, laneq::Response) { got[name] = ec; });
  };
  // full with x1 (low) and y1, y2 (high): x2 waits for room; x3 would be x's third
  submit("x1", "x", Priority::low);
  submit("y1", "y", Priority::high);
  submit("y2", "y", Priority::high);
  submit("x2", "x", Priority::normal);
  submit("x3", "x", Priority::normal);
  io.poll();
  CHECK(got["x3"] == errc::client_queue_full);  // at once, not after waiting for room
  CHECK(queue.metrics().total.waiting == 1);
  queue.start();
  run_until(io, [&] { return got.size() == 5; });
  CHECK(got["x3"] == errc::client_queue_full);
  const auto m = queue.metrics().total;
  CHECK(m.rejected == 1);
  CHECK(m.failed == 0);
  CHECK(m.succeeded == 4);
  CHECK(m.waiting == 0);
  CHECK(m.depth == 0);
  queue.async_shutdown({}, [](std::error_code) {});
  io.run();
}

TEST_CASE("a request whose deadline passes while queued fails with timeout and never reaches "
          "the provider",
          "[queue][deadline]") {
  asio::io_context io;
  RecordingProvider provider({.latency = 60ms});
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 1});
  queue.start();
  run(io, [&]() -> asio::awaitable<void> {
    submit_with(queue, chat("long"), {}, [](auto, auto) {});
    auto [ec, r] = co_await queue.async_submit(chat("short-deadline"), {.timeout = 10ms},
                                               tuple_awaitable);
    CHECK(ec == errc::timeout);
    co_await queue.shutdown();
  });
  CHECK(provider.seen() == std::vector<std::string>{"long"});
  CHECK(queue.metrics().total.expired == 1);
}

TEST_CASE("a timeout of milliseconds::max() is no deadline: per request, over the lane's, and "
          "as a lane's own timeout or age step",
          "[queue][deadline]") {
  asio::io_context io;
  RecordingProvider provider({.latency = 30ms});
  constexpr auto forever = std::chrono::milliseconds::max();
  laneq::RequestQueue queue(
      io.get_executor(), provider,
      {.workers = 1,
       .lanes = {{.priority = Priority::high, .timeout = 1ms},
                 {.priority = Priority::normal, .timeout = forever, .age_step = forever}}});
  queue.start();
  run(io, [&]() -> asio::awaitable<void> {
    // now + max() overflowed the clock's nanoseconds: it expired at once (or never, by luck)
    auto [ec, r] = co_await queue.async_submit(chat("over-lane"),
                                               {.priority = Priority::high, .timeout = forever},
                                               tuple_awaitable);
    CHECK_FALSE(ec);
    auto [ec2, r2] = co_await queue.async_submit(chat("lane"), {.priority = Priority::normal},
                                                 tuple_awaitable);
    CHECK_FALSE(ec2);
    auto [ec3, r3] = co_await queue.async_submit(chat("lane-default"), {.priority = Priority::high},
                                                 tuple_awaitable);
    CHECK(ec3 == errc::timeout);  // the 1 ms lane itself still times out
    co_await queue.shutdown();
  });
}

TEST_CASE("a request that expires in a queue whose start() was never called fails with "
          "not_started, not a plain timeout",
          "[queue][deadline][errors]") {
  asio::io_context io;
  RecordingProvider provider;
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 1, .max_pending = 1});
  std::error_code queued, waiting;
  submit_with(queue, chat("queued"), {.timeout = 20ms},
              [&](std::error_code ec, auto) { queued = ec; });
  submit_with(queue, chat("waiting"), {.timeout = 30ms},
              [&](std::error_code ec, auto) { waiting = ec; });
  run_until(io, [&] { return queued && waiting; });
  CHECK(queued == errc::not_started);
  CHECK(waiting == errc::not_started);
  CHECK_THAT(queued.message(), Catch::Contains("start()"));
  CHECK(provider.seen().empty());
  CHECK(queue.metrics().total.expired == 2);
  // (Started, the same expiry is a timeout: "a request whose deadline passes while queued ...")
  queue.async_shutdown({}, [](std::error_code) {});
  io.run();
}

TEST_CASE("a request whose deadline passed before the queue's timer could run (a busy loop) is "
          "not handed to a worker - it expires, and a drain shutdown still ends",
          "[queue][deadline]") {
  asio::io_context io;
  RecordingProvider provider({.latency = 10ms});
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 1});
  queue.start();
  std::error_code first, second;
  bool shut = false;
  submit_with(queue, chat("first"), {}, [&](std::error_code ec, auto) { first = ec; });
  submit_with(queue, chat("second"), {.timeout = 20ms},
                     [&](std::error_code ec, auto) { second = ec; });
  run_until(io, [&] { return provider.seen().size() == 1; });  // both admitted, one started
  queue.async_shutdown({.drain = true}, [&](std::error_code) { shut = true; });
  // The loop is busy for 100 ms: when it gets back, the first call's answer (due 10 ms after it
  // started) and the second's deadline (20 ms) are both overdue, the answer first in line.
  asio::post(io, [] { std::this_thread::sleep_for(100ms); });
  run_until(io, [&] { return shut; });
  CHECK_FALSE(first);
  CHECK(second == errc::timeout);
  CHECK(provider.seen() == std::vector<std::string>{"first"});
  const auto m = queue.metrics().total;
  CHECK(m.started == 1);
  CHECK(m.expired == 1);
  CHECK(m.depth == 0);
}

TEST_CASE("a request whose deadline passed while its rate-limiter grant was on its way (a busy "
          "loop) makes no call - it expires, and its budget unit comes back",
          "[queue][deadline][rate]") {
  asio::io_context io;
  RecordingProvider provider({.latency = 1ms});
  laneq::RequestQueue queue(io.get_executor(), provider,
                            {.workers = 2, .rate_limits = {.requests = 1, .period = 200ms}});
  queue.start();
  std::error_code a, b;
  laneq::Response rb;
  submit_with(queue, chat("A"), {}, [&](std::error_code ec, auto) { a = ec; });  // the unit
  submit_with(queue, chat("B"), {.timeout = 250ms}, [&](std::error_code ec, laneq::Response r) {
    b = ec;
    rb = std::move(r);
  });  // at the limiter until ~200 ms
  run_until(io, [&] { return provider.seen().size() == 1; });
  // The loop is busy from ~150 ms to ~350 ms: then the limiter's timer (200 ms) runs before
  // the queue's deadline timer (250 ms), and B's grant reaches its worker first.
  asio::steady_timer busy(io, 150ms);
  busy.async_wait([](std::error_code) { std::this_thread::sleep_for(200ms); });
  run_until(io, [&] { return bool(b); });
  CHECK_FALSE(a);
  CHECK(b == errc::timeout);
  CHECK(provider.seen() == std::vector<std::string>{"A"});
  CHECK(rb.attempts == 0);
  // A's unit is out of the window by now (>= 350 ms), and B's came back
  CHECK(queue.limiter().snapshot().budgets.at(0).available == 1);
  queue.async_shutdown({}, [](std::error_code) {});
  io.run();
}

TEST_CASE("a lane's default timeout applies when the request sets none", "[queue][deadline]") {
  asio::io_context io;
  laneq::SimulatedProvider provider({.latency = 500ms});
  auto lanes = laneq::default_lanes();
  lanes[2].timeout = 20ms;  // normal
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 1, .lanes = lanes});
  queue.start();
  const auto t0 = std::chrono::steady_clock::now();
  run(io, [&]() -> asio::awaitable<void> {
    auto [ec, r] = co_await queue.async_submit(chat(), {}, tuple_awaitable);
    CHECK(ec == errc::timeout);  // in flight: the call is aborted at the deadline
    co_await queue.shutdown();
  });
  CHECK(std::chrono::steady_clock::now() - t0 < 400ms);
  CHECK(provider.aborted() == 1);
}

TEST_CASE("cancelling a queued request removes it - cancelling an in-flight one aborts the call",
          "[queue][cancel]") {
  asio::io_context io;
  RecordingProvider provider({.latency = 300ms});
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 1});
  queue.start();
  const auto t0 = std::chrono::steady_clock::now();
  run(io, [&]() -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    // in flight: cancelled once its call runs
    auto first = co_await (queue.async_submit(chat("inflight"), {}, tuple_awaitable) ||
                           laneq::test::wait_until([&] { return provider.inner.in_flight() == 1; }));
    CHECK(first.index() == 1);  // the wait won
    // queued behind a long call: cancelled before it starts
    submit_with(queue, chat("blocker"), {}, [](auto, auto) {});
    asio::steady_timer t2(ex, 20ms);
    auto second = co_await (queue.async_submit(chat("queued"), {}, tuple_awaitable) ||
                            t2.async_wait(tuple_awaitable));
    CHECK(second.index() == 1);
    co_await queue.shutdown({.drain = false});
  });
  CHECK(provider.seen() == std::vector<std::string>{"inflight", "blocker"});
  CHECK(provider.inner.aborted() == 1);
  const auto m = queue.metrics();
  CHECK(m.total.cancelled == 2);
  CHECK(m.total.succeeded == 1);
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);  // 300 ms blocker only (not a hang)
}

TEST_CASE("a cancelled submit completes with cancelled through a bound cancellation slot",
          "[queue][cancel]") {
  asio::io_context io;
  laneq::SimulatedProvider provider({.latency = 1s});
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 1});
  queue.start();
  asio::cancellation_signal sig;
  std::error_code got;
  queue.async_submit(chat(), {}, asio::bind_cancellation_slot(sig.slot(),
                                     [&](std::error_code ec, laneq::Response) {
                                       got = ec;
                                       queue.async_shutdown({}, [](std::error_code) {});
                                     }));
  laneq::test::when(io.get_executor(), [&] { return provider.in_flight() == 1; },
                    [&] { sig.emit(asio::cancellation_type::terminal); });
  io.run();
  CHECK(got == errc::cancelled);
  CHECK(provider.aborted() == 1);
}

TEST_CASE("cancellation types as Asio means them: any type removes a request nothing was sent "
          "for, only terminal aborts a call on the wire",
          "[queue][cancel]") {
  // total (no side effects) was ignored even for a queued request, which has none; partial
  // (side effects well defined) aborted a call whose outcome at the server is unknown
  using ct = asio::cancellation_type;
  for (const ct type : {ct::total, ct::partial, ct::terminal}) {
    INFO("type " << static_cast<int>(type));
    asio::io_context io;
    laneq::SimulatedProvider provider({.latency = 200ms});
    laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 1});
    queue.start();
    asio::cancellation_signal in_flight, queued;
    std::error_code first = errc::internal, second = errc::internal;
    int done = 0;
    const auto record = [&](std::error_code& into) {
      return [&](std::error_code ec, laneq::Response) {
        into = ec;
        if (++done == 2) queue.async_shutdown({}, [](std::error_code) {});
      };
    };
    queue.async_submit(chat("a"), {}, asio::bind_cancellation_slot(in_flight.slot(), record(first)));
    queue.async_submit(chat("b"), {}, asio::bind_cancellation_slot(queued.slot(), record(second)));
    // once "a" is on the wire, "b" queued behind it
    laneq::test::when(io.get_executor(), [&] { return provider.in_flight() == 1; }, [&] {
      in_flight.emit(type);
      queued.emit(type);
    });
    io.run();
    CHECK(second == errc::cancelled);  // nothing was sent for it: any type
    if (type == ct::terminal) {
      CHECK(first == errc::cancelled);
      CHECK(provider.aborted() == 1);
    } else {
      CHECK_FALSE(first);  // its call went on and answered
      CHECK(provider.aborted() == 0);
    }
    CHECK(provider.calls() == 1);  // "b" never reached it
  }
}

namespace {

// Ignores cancellation and reads its Request when it answers, 1 s later: the Request must stay
// alive although the submit was resolved (and its handler ran) long before. (Its callers resolve
// their requests 300 ms into the call: a loaded machine's stall of a few hundred ms must neither
// move that before the call starts nor make the answer come before the test looks.)
class StubbornProvider final : public laneq::Provider {
 public:
  void async_call(const laneq::Request& r, const laneq::CallContext& ctx,
                  laneq::CallCompletion done) noexcept override {
    auto timer = std::make_shared<asio::steady_timer>(ctx.executor, 1s);
    timer->async_wait([this, &r, timer, done = std::move(done)](std::error_code) mutable {
      read.push_back(r.messages.at(0).content);
      laneq::Response resp;
      resp.status = status;
      done(error, std::move(resp));
    });
  }
  const char* name() const noexcept override { return "stubborn"; }
  std::vector<std::string> read;  // on the queue's strand only
  std::error_code error{};        // what it answers
  int status = 200;
};

}  // namespace

TEST_CASE("a 503 counts as rate limited whatever error its body names", "[queue][metrics]") {
  // (a 429 and a 529 did; a 503 with a billing error body read as quota_exceeded did not)
  asio::io_context io;
  laneq::SimulatedProvider provider;
  provider.script({.error = errc::quota_exceeded, .status = 503});
  laneq::RequestQueue queue(io.get_executor(), provider,
                            {.workers = 1, .retry = {.max_attempts = 1}});
  queue.start();
  std::error_code got;
  run(io, [&]() -> asio::awaitable<void> {
    auto [e, r] = co_await queue.async_submit(chat("A"), {}, tuple_awaitable);
    got = e;
    co_await queue.shutdown({.drain = true});
  });
  CHECK(got == errc::quota_exceeded);
  CHECK(queue.metrics().total.rate_limited == 1);
}

TEST_CASE("a 429 that comes back after its request timed out is still counted as rate limited",
          "[queue][metrics][retry]") {
  asio::io_context io;
  StubbornProvider provider;
  provider.error = errc::rate_limited;
  provider.status = 429;
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 1});
  queue.start();
  std::error_code got;
  run(io, [&]() -> asio::awaitable<void> {
    auto [e, r] = co_await queue.async_submit(chat("A"), {.timeout = 300ms}, tuple_awaitable);
    got = e;
    co_await queue.shutdown({.drain = true});  // waits for the call's answer
  });
  CHECK(got == errc::timeout);
  CHECK(provider.read.size() == 1);
  const auto snap = queue.metrics();
  CHECK(snap.total.rate_limited == 1);  // the provider's answer, though nobody waited for it
  CHECK(snap.total.expired == 1);
  CHECK(snap.limiters.at(0).pauses == 1);
}

TEST_CASE("a request resolved while its call runs stays alive for the provider until it answers",
          "[queue][cancel][lifetime]") {
  asio::io_context io;
  StubbornProvider provider;
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 2});
  queue.start();
  std::error_code timed_out;
  run(io, [&]() -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    // cancelled (through ||) 300 ms into its call, and timed out 300 ms into its call: both
    // handlers run at once, the provider reads the requests 700 ms later
    asio::steady_timer t(ex, 300ms);
    submit_with(queue, chat("timed out"), {.timeout = 300ms},
                       [&](std::error_code ec, laneq::Response) { timed_out = ec; });
    auto first = co_await (queue.async_submit(chat("cancelled"), {}, tuple_awaitable) ||
                           t.async_wait(tuple_awaitable));
    CHECK(first.index() == 1);
    co_await queue.shutdown({.drain = true});  // waits for the workers, so for both calls
  });
  CHECK(timed_out == errc::timeout);
  CHECK(queue.metrics().total.cancelled == 1);
  CHECK(queue.metrics().total.expired == 1);
  std::sort(provider.read.begin(), provider.read.end());
  CHECK(provider.read == std::vector<std::string>{"cancelled", "timed out"});
}

namespace {

// Streams `ticks` deltas, one every `every`, through a copy of Request::on_delta (as the HTTP
// providers do), ignoring cancellation (like read handlers already queued on a transport's
// strand); then answers 200, or fails as a stream cut short (network, status 200). An exception
// from on_delta aborts the stream, as the HTTP providers do.
class StreamingProvider final : public laneq::Provider {
 public:
  // swallow: a throw from on_delta is caught and the stream goes on to its end (a custom
  // provider's choice; laneq's own abort the stream).
  StreamingProvider(int ticks, std::chrono::milliseconds every, bool cut, bool swallow = false)
      : ticks_(ticks), every_(every), cut_(cut), swallow_(swallow) {}
  void async_call(const laneq::Request& r, const laneq::CallContext& ctx,
                  laneq::CallCompletion done) noexcept override {
    ++calls;
    auto state = std::make_shared<call>(call{asio::steady_timer(ctx.executor), r.on_delta,
                                             std::move(done), 0});
    tick(state);
  }
  const char* name() const noexcept override { return "streaming"; }
  int calls = 0, finished = 0;  // on the queue's strand only

 private:
  struct call {
    asio::steady_timer timer;
    std::function<void(std::string_view)> on_delta;
    laneq::CallCompletion done;
    int sent;
  };
  void tick(std::shared_ptr<call> c) {
    c->timer.expires_after(every_);
    c->timer.async_wait([this, c](std::error_code) {
      laneq::Response r;
      r.status = 200;
      if (c->sent < ticks_) {
        try {
          ++c->sent;
          c->on_delta("x");
          return tick(c);
        } catch (...) {
          if (swallow_) return tick(c);
          ++finished;
          return c->done(errc::network, std::move(r));  // the stream aborted
        }
      }
      ++finished;
      c->done(cut_ ? make_error_code(errc::network) : std::error_code{}, std::move(r));
    });
  }
  int ticks_;
  std::chrono::milliseconds every_;
  bool cut_;
  bool swallow_;
};

laneq::Request streaming(std::function<void(std::string_view)> on_delta) {
  laneq::Request r = chat("stream");
  r.stream = true;
  r.on_delta = std::move(on_delta);
  return r;
}

}  // namespace

TEST_CASE("a streaming caller may destroy the queue from its on_delta (a handler of a one-thread "
          "loop): the request completes with shutting_down, no delta follows, nothing hangs",
          "[queue][stream][lifetime]") {
  asio::io_context io;
  StreamingProvider provider(20, 1ms, false);
  std::optional<laneq::RequestQueue> queue;
  queue.emplace(io.get_executor(), provider, laneq::QueueConfig{.workers = 1});
  queue->start();
  int deltas = 0;
  std::optional<std::error_code> got;
  submit_with(*queue, streaming([&](std::string_view) {
                        if (++deltas == 2) queue.reset();  // e.g. the user closed the session
                      }),
                      {}, [&](std::error_code ec, laneq::Response) { got = ec; });
  // A hang would be inside a handler, where no deadline of io.run_for() reaches: a watchdog.
  std::promise<void> ran;
  std::thread watchdog([done = ran.get_future()]() mutable {
    if (done.wait_for(60s) == std::future_status::timeout) {
      std::fprintf(stderr, "hung: on_delta destroyed the queue and never returned\n");
      std::_Exit(1);
    }
  });
  struct stop_watchdog {  // also if run() throws: a joinable thread's destructor terminates
    std::promise<void>& ran;
    std::thread& watchdog;
    ~stop_watchdog() {
      ran.set_value();
      watchdog.join();
    }
  };
  {
    stop_watchdog stop{ran, watchdog};
    io.run();
  }
  REQUIRE(got);
  CHECK(*got == errc::shutting_down);
  CHECK(deltas == 2);
  CHECK(provider.finished == 1);  // the provider went on to its end, unheard
}

TEST_CASE("no delta reaches a streaming caller after its request was resolved without it "
          "(deadline), though the provider goes on",
          "[queue][stream][lifetime]") {
  asio::io_context io;
  // (a 500 ms deadline, the first delta 50 ms into the call: a stall before the call starts
  // must not expire the request in the queue)
  StreamingProvider provider(20, 50ms, false);
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 1});
  queue.start();
  int deltas = 0, after = 0;
  bool resumed = false;
  std::error_code got;
  std::uint32_t attempts = 0;
  run(io, [&]() -> asio::awaitable<void> {
    auto [ec, r] = co_await queue.async_submit(streaming([&](std::string_view) {
                                                 ++deltas;
                                                 if (resumed) ++after;
                                               }),
                                               {.timeout = 500ms}, tuple_awaitable);
    resumed = true;
    got = ec;
    attempts = r.attempts;
    co_await queue.shutdown({.drain = true});  // waits for the call, all 20 ticks
  });
  CHECK(got == errc::timeout);
  CHECK(attempts == 1);  // the call cut short was made
  CHECK(provider.finished == 1);
  CHECK(deltas > 0);
  CHECK(after == 0);
}

TEST_CASE("an on_delta that throws ends its request with internal also when the provider "
          "catches the throw and goes on to a success",
          "[queue][stream]") {
  asio::io_context io;
  StreamingProvider provider(5, 1ms, false, true);
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 1});
  queue.start();
  int deltas = 0;
  std::error_code got;
  run(io, [&]() -> asio::awaitable<void> {
    auto [ec, r] = co_await queue.async_submit(streaming([&](std::string_view) {
                                                 if (++deltas == 2)
                                                   throw std::runtime_error("the view is gone");
                                               }),
                                               {}, tuple_awaitable);
    got = ec;
    co_await queue.shutdown();
  });
  CHECK(got == errc::internal);
  CHECK(deltas == 2);  // the gate closed at the throw
  CHECK(provider.finished == 1);
}

TEST_CASE("a streaming caller's on_delta that throws ends its request with internal, not retried",
          "[queue][stream][retry]") {
  asio::io_context io;
  StreamingProvider provider(5, 1ms, false);
  laneq::RequestQueue queue(io.get_executor(), provider,
                            {.workers = 1, .retry = {.max_attempts = 3, .base_delay = 1ms}});
  queue.start();
  std::error_code got;
  laneq::Response resp;
  run(io, [&]() -> asio::awaitable<void> {
    auto [ec, r] = co_await queue.async_submit(
        streaming([](std::string_view) { throw std::runtime_error("the view is gone"); }), {},
        tuple_awaitable);
    got = ec;
    resp = std::move(r);
    co_await queue.shutdown();
  });
  CHECK(got == errc::internal);
  CHECK_THAT(resp.error_message, Catch::Contains("the view is gone"));
  CHECK(provider.calls == 1);
}

TEST_CASE("a stream cut short after it delivered text is not retried: the caller would see the "
          "text twice",
          "[queue][stream][retry]") {
  asio::io_context io;
  StreamingProvider provider(2, 1ms, true);
  laneq::RequestQueue queue(io.get_executor(), provider,
                            {.workers = 1, .retry = {.max_attempts = 3, .base_delay = 1ms}});
  queue.start();
  int deltas = 0;
  std::error_code got;
  run(io, [&]() -> asio::awaitable<void> {
    auto [ec, r] = co_await queue.async_submit(streaming([&](std::string_view) { ++deltas; }), {},
                                               tuple_awaitable);
    got = ec;
    co_await queue.shutdown();
  });
  CHECK(got == errc::network);
  CHECK(deltas == 2);
  CHECK(provider.calls == 1);
}

TEST_CASE("a submit made after async_shutdown on the same thread fails with shutting_down and "
          "never reaches the provider",
          "[queue][shutdown]") {
  for (const bool drain : {false, true}) {
    INFO("drain " << drain);
    asio::io_context io;
    laneq::SimulatedProvider provider;
    laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 2});
    queue.start();
    io.poll();  // the workers are parked: a request admitted now would start at once
    std::error_code got;
    queue.async_shutdown({.drain = drain}, [](std::error_code) {});
    submit_with(queue, chat(), {}, [&](std::error_code ec, laneq::Response) { got = ec; });
    io.run();
    CHECK(got == errc::shutting_down);
    CHECK(provider.calls() == 0);
  }
}

TEST_CASE("submits keep their order around a shutdown call: one made before it is drained, one "
          "made after it refused, although both joined the same burst",
          "[queue][shutdown]") {
  // A burst's drain is posted by its first submit: the second joined it, after the shutdown
  // call, and was admitted with the first (the shutdown's handler came after that drain).
  asio::io_context io;
  laneq::SimulatedProvider provider;
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 2});
  queue.start();
  io.poll();  // the workers are parked
  std::error_code before{errc::internal}, after{errc::internal};
  submit_with(queue, chat("before"), {}, [&](std::error_code ec, laneq::Response) { before = ec; });
  queue.async_shutdown({.drain = true}, [](std::error_code) {});
  submit_with(queue, chat("after"), {}, [&](std::error_code ec, laneq::Response) { after = ec; });
  io.run();
  CHECK_FALSE(before);
  CHECK(after == errc::shutting_down);
  CHECK(provider.calls() == 1);
}

TEST_CASE("shutdown with drain finishes queued work - submits after it fail with shutting_down",
          "[queue][shutdown]") {
  asio::io_context io;
  laneq::SimulatedProvider provider({.latency = 1ms});
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 2});
  queue.start();
  int ok = 0;
  run(io, [&]() -> asio::awaitable<void> {
    for (int i = 0; i < 20; ++i)
      submit_with(queue, chat(), {}, [&](std::error_code ec, auto) { ok += ec ? 0 : 1; });
    co_await queue.shutdown({.drain = true});
    CHECK(ok == 20);
    auto [ec, r] = co_await queue.async_submit(chat(), {}, tuple_awaitable);
    CHECK(ec == errc::shutting_down);
    co_await queue.shutdown();  // again: completes at once
  });
  CHECK(provider.calls() == 20);
}

// n submits at once, counting those that succeed and those dropped by a shutdown.
static void submit_counting(laneq::RequestQueue& queue, int n, int& ok, int& dropped) {
  for (int i = 0; i < n; ++i)
    submit_with(queue, chat(), {}, [&ok, &dropped](std::error_code ec, auto) {
      if (!ec) ++ok;
      if (ec == errc::shutting_down) ++dropped;
    });
}

TEST_CASE("shutdown without drain fails queued work and lets in-flight calls finish",
          "[queue][shutdown]") {
  asio::io_context io;
  // (latency: the calls must still be in flight when shutdown comes, on a slow loop too)
  laneq::SimulatedProvider provider({.latency = 500ms});
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 2});
  queue.start();
  int ok = 0, dropped = 0;
  run(io, [&]() -> asio::awaitable<void> {
    submit_counting(queue, 10, ok, dropped);
    co_await laneq::test::wait_until([&] { return provider.in_flight() == 2; });
    co_await queue.shutdown({.drain = false});
  });
  CHECK(ok == 2);
  CHECK(dropped == 8);
  CHECK(provider.calls() == 2);
}

TEST_CASE("a second shutdown without drain turns a draining one into one without, and both "
          "complete",
          "[queue][shutdown]") {
  asio::io_context io;
  laneq::SimulatedProvider provider({.latency = 500ms});
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 1});
  queue.start();
  int ok = 0, dropped = 0, shutdowns = 0;
  const auto t0 = std::chrono::steady_clock::now();
  run(io, [&]() -> asio::awaitable<void> {
    submit_counting(queue, 6, ok, dropped);
    co_await laneq::test::wait_until([&] { return provider.in_flight() == 1; });
    queue.async_shutdown({.drain = true}, [&](std::error_code ec) {  // would take 3 s
      CHECK_FALSE(ec);
      ++shutdowns;
    });
    co_await queue.shutdown({.drain = false});  // changes its mind
    ++shutdowns;
  });
  CHECK(shutdowns == 2);
  CHECK(std::chrono::steady_clock::now() - t0 < 2500ms);  // not the 3 s of a drain
  CHECK(ok == 1);        // the call in flight
  CHECK(dropped == 5);   // the queued ones, not run
  CHECK(provider.calls() == 1);
}

TEST_CASE("a request waiting for room is removed by its cancellation slot and never reaches the "
          "provider",
          "[queue][cancel][backpressure]") {
  asio::io_context io;
  laneq::SimulatedProvider provider({.latency = 300ms});
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 1, .max_pending = 1});
  queue.start();
  asio::cancellation_signal sig;
  std::error_code waiting_ec = errc::internal;
  int ok = 0;
  run(io, [&]() -> asio::awaitable<void> {
    submit_with(queue, chat("a"), {}, [&](std::error_code ec, auto) { ok += !ec; });
    co_await laneq::test::wait_until([&] { return provider.in_flight() == 1; });
    submit_with(queue, chat("b"), {}, [&](std::error_code ec, auto) { ok += !ec; });  // queued
    queue.async_submit(chat("c"), {}, asio::bind_cancellation_slot(sig.slot(),
                                          [&](std::error_code ec, auto) { waiting_ec = ec; }));
    co_await laneq::test::wait_until([&] { return queue.metrics().total.waiting == 1; });
    sig.emit(asio::cancellation_type::total);  // nothing sent for it: any type
    co_await laneq::test::wait_until([&] { return waiting_ec != errc::internal; });
    CHECK(queue.metrics().total.waiting == 0);
    co_await queue.shutdown();  // drains a and b
  });
  CHECK(waiting_ec == errc::cancelled);
  CHECK(ok == 2);
  CHECK(provider.calls() == 2);
  const auto m = queue.metrics();
  CHECK(m.total.cancelled == 1);
  CHECK(m.total.submitted == m.total.succeeded + m.total.cancelled);
}

TEST_CASE("shutdown without drain: a call in flight that fails retryably is not tried again",
          "[queue][shutdown][retry]") {
  asio::io_context io;
  laneq::SimulatedProvider provider({.latency = 500ms});
  provider.script({.error = errc::server_error, .status = 503});  // retryable
  laneq::RequestQueue queue(io.get_executor(), provider,
                           {.workers = 1, .retry = {.max_attempts = 3, .base_delay = 1ms}});
  queue.start();
  std::error_code got;
  laneq::Response last;
  run(io, [&]() -> asio::awaitable<void> {
    submit_with(queue, chat(), {}, [&](std::error_code ec, laneq::Response r) {
      got = ec;
      last = std::move(r);
    });
    co_await laneq::test::wait_until([&] { return provider.in_flight() == 1; });  // in its call
    co_await queue.shutdown({.drain = false});
  });
  CHECK(got == errc::shutting_down);  // as a request waiting for its retry is
  CHECK(last.status == 503);          // with the last attempt's answer
  CHECK(last.attempts == 1);
  CHECK(provider.calls() == 1);
}

TEST_CASE("invalid configuration is rejected at construction with the field named",
          "[queue][config]") {
  asio::io_context io;
  laneq::SimulatedProvider provider;
  auto make = [&](laneq::QueueConfig c) { laneq::RequestQueue q(io.get_executor(), provider, c); };
  auto expect = [&](laneq::QueueConfig c, const std::string& field) {
    try {
      make(std::move(c));
      FAIL("accepted a bad config: " + field);
    } catch (const std::system_error& e) {
      CHECK(e.code() == errc::invalid_config);
      CHECK_THAT(e.what(), Catch::Contains(field));
    }
  };
  expect({.workers = 0}, "workers");
  expect({.workers = 65'537}, "workers must be at most 65536 (got 65537)");
  expect({.workers = SIZE_MAX, .reserved_workers = 1}, "workers must be at most 65536");
  expect({.lanes = {{.priority = Priority::normal, .when_full = static_cast<laneq::WhenFull>(2)}}},
         "when_full must be WhenFull::wait or WhenFull::reject (got 2)");
  expect({.workers = 2, .reserved_workers = 2}, "reserved_workers");
  expect({.max_pending = 0}, "max_pending");
  expect({.lanes = {}}, "lanes");
  expect({.lanes = {{.priority = Priority::normal}, {.priority = Priority::normal}}}, "priority");
  expect({.lanes = {{.priority = Priority::normal, .timeout = -1ms}}}, "timeout");
  expect({.workers = 2, .reserved_workers = 1, .lanes = {{.priority = Priority::normal}}},
         "reserved");
  expect({.client_weights = {{"x", 0}}}, "client_weights");
  expect({.client_weights = {{std::string(64, 'x'), 2}}}, "longer than a client name");
  expect({.model_rate_limits = {{"default", {.requests = 5}}}}, "the queue's own limiter");
  expect({.rate_limits = {.requests = -1}},
         "RateLimits::requests must be >= 0 (got -1) (QueueConfig::rate_limits)");
  expect({.model_rate_limits = {{"gpt-4o", {.tokens = -1}}}},
         "RateLimits::tokens must be >= 0 (got -1) (QueueConfig::model_rate_limits[\"gpt-4o\"])");
  expect({.model_rate_limits = {{"caf\xc3", {.requests = 5}}}}, "not valid UTF-8");
  expect({.quantum = 0}, "quantum");
  expect({.fair_share = static_cast<laneq::FairShare>(7)}, "fair_share must be FairShare::requests");
  expect({.lanes = {{.priority = Priority::high, .name = "x"}, {.priority = Priority::low, .name = "x"}}},
         "name");
  expect({.lanes = {{.priority = Priority::high, .name = "caf\xc3"}}}, "valid UTF-8");
  laneq::RequestQueue ok(io.get_executor(), provider, {});
  try {
    ok.set_client_weight("tenant", 0);
    FAIL("accepted weight 0");
  } catch (const std::system_error& e) {
    CHECK(e.code() == errc::invalid_config);
  }
  try {  // no SubmitOptions::client could ever name it
    ok.set_client_weight(std::string(64, 'x'), 2);
    FAIL("accepted a name longer than a client name");
  } catch (const std::system_error& e) {
    CHECK(e.code() == errc::invalid_config);
    CHECK_THAT(e.what(), Catch::Contains("longer than a client name (63 bytes)"));
  }
  CHECK_THROWS_AS(laneq::SubmitOptions{.client = std::string(64, 'x')}, std::length_error);
}

// The submit-time refusal tests: a started one-worker queue over a RecordingProvider.
struct refusal_fixture {
  asio::io_context io;
  RecordingProvider provider;
  laneq::RequestQueue queue{io.get_executor(), provider, {.workers = 1}};
  refusal_fixture() { queue.start(); }
};

TEST_CASE_METHOD(refusal_fixture,
                 "a timeout of 0 or less is refused at submit with bad_request, not expired at "
                 "once",
                 "[queue][errors]") {
  run(io, [&]() -> asio::awaitable<void> {
    for (const auto t : {0ms, -5ms}) {
      auto [ec, r] = co_await queue.async_submit(chat("bad"), {.timeout = t}, tuple_awaitable);
      CHECK(ec == errc::bad_request);  // was timeout, as if it had waited
      CHECK_THAT(r.error_message, Catch::Contains("SubmitOptions::timeout must be > 0"));
    }
    try {  // thrown: laneq's own refusal, not labelled as the provider's answer
      co_await queue.submit(chat("bad"), {.timeout = 0ms});
      FAIL("expected a failure");
    } catch (const laneq::RequestError& e) {
      CHECK(e.code() == errc::bad_request);
      CHECK(e.response().status == 0);
      const std::string what = e.what();
      CHECK_THAT(what, Catch::Contains("SubmitOptions::timeout must be > 0"));
      CHECK_THAT(what, !Catch::Contains("provider:") && !Catch::Contains("from the provider"));
    }
    auto [ec, r] = co_await queue.async_submit(chat("ok"), {.timeout = 5s}, tuple_awaitable);
    CHECK_FALSE(ec);
    co_await queue.shutdown();
  });
  CHECK(provider.seen() == std::vector<std::string>{"ok"});
  const auto m = queue.metrics();
  CHECK(m.total.rejected == 3);
  CHECK(m.total.expired == 0);
}

TEST_CASE("QueueConfig::journal = {} or nullptr turns journaling off, without an exception",
          "[queue][config]") {
  laneq::QueueConfig c;
  c.journal = "run.db";
  CHECK(c.journal.path == "run.db");
  c.journal = {};  // picks the const char* overload
  CHECK(c.journal.path.empty());
  c.journal = "run.db";
  c.journal = nullptr;
  CHECK(c.journal.path.empty());
  // and a queue made with it has no journal: a durable submit says so
  asio::io_context io;
  laneq::SimulatedProvider provider;
  laneq::RequestQueue queue(io.get_executor(), provider, c);
  CHECK(queue.journal() == nullptr);
  queue.start();
  run(io, [&]() -> asio::awaitable<void> {
    auto [ec, r] = co_await queue.async_submit(chat(), {.durable = true}, tuple_awaitable);
    CHECK(ec == errc::no_journal);
    co_await queue.shutdown();
  });
}

TEST_CASE_METHOD(refusal_fixture,
                 "a Request::extra that is not a JSON object is refused at submit with "
                 "bad_request, before any wait or call",
                 "[queue][errors]") {
  run(io, [&]() -> asio::awaitable<void> {
    for (const auto& [extra, says] :
         std::vector<std::pair<nlohmann::json, std::string>>{
             {nlohmann::json::array({1, 2}), "not array"},
             {"temperature=0", "not string"},
             {nlohmann::json::parse("{", nullptr, false), "not a discarded value"}}) {
      laneq::Request req = chat("bad");
      req.extra = extra;
      auto [ec, r] = co_await queue.async_submit(req, {}, tuple_awaitable);
      CHECK(ec == errc::bad_request);
      CHECK_THAT(r.error_message, Catch::Contains("Request::extra must be a JSON object") &&
                                      Catch::Contains(says));
    }
    laneq::Request ok = chat("ok");
    ok.extra = {{"temperature", 0}};
    auto [ec, r] = co_await queue.async_submit(ok, {}, tuple_awaitable);
    CHECK_FALSE(ec);
    co_await queue.shutdown();
  });
  CHECK(provider.seen() == std::vector<std::string>{"ok"});
  CHECK(queue.metrics().total.rejected == 3);
}

TEST_CASE_METHOD(refusal_fixture,
                 "a SubmitOptions::cost of 0 and a negative Request::max_tokens are refused at "
                 "submit with bad_request, not read as 1 and as the provider's default",
                 "[queue][errors]") {
  run(io, [&]() -> asio::awaitable<void> {
    auto [ec1, r1] = co_await queue.async_submit(chat("free"), {.cost = 0}, tuple_awaitable);
    CHECK(ec1 == errc::bad_request);
    CHECK_THAT(r1.error_message, Catch::Contains("SubmitOptions::cost must be >= 1 (got 0)"));
    auto [ec2, r2] = co_await queue.async_submit(chat("minus", -5), {}, tuple_awaitable);
    CHECK(ec2 == errc::bad_request);
    CHECK_THAT(r2.error_message, Catch::Contains("Request::max_tokens must be >= 0") &&
                                     Catch::Contains("got -5"));
    auto [ec3, r3] = co_await queue.async_submit(chat("ok", 0), {.cost = 1}, tuple_awaitable);
    CHECK_FALSE(ec3);  // 0: the provider's default
    co_await queue.shutdown();
  });
  CHECK(provider.seen() == std::vector<std::string>{"ok"});
  CHECK(queue.metrics().total.rejected == 2);
}

TEST_CASE_METHOD(refusal_fixture,
                 "a Request::extra nested deeper than 256 levels is refused at submit with "
                 "bad_request, without a walk that recurses",
                 "[queue][errors]") {
  // {"a": [[...]]}: 1 + `arrays` levels, parsed (nlohmann parses and destroys without recursion)
  // and moved, never copied: a copy of the deep one would overflow this test's own stack.
  const auto nested = [](std::size_t arrays) {
    return nlohmann::json::parse("{\"a\":" + std::string(arrays, '[') + std::string(arrays, ']') +
                                 "}");
  };
  run(io, [&]() -> asio::awaitable<void> {
    for (const std::size_t arrays : {std::size_t{256}, std::size_t{200'000}}) {
      laneq::Request req = chat("deep");
      req.extra = nested(arrays);
      auto [ec, r] = co_await queue.async_submit(std::move(req), {}, tuple_awaitable);
      CHECK(ec == errc::bad_request);
      CHECK_THAT(r.error_message, Catch::Contains("Request::extra nests deeper than 256 levels"));
    }
    laneq::Request ok = chat("ok");
    ok.extra = nested(255);  // 256 levels: the limit itself
    auto [ec, r] = co_await queue.async_submit(std::move(ok), {}, tuple_awaitable);
    CHECK_FALSE(ec);
    co_await queue.shutdown();
  });
  CHECK(provider.seen() == std::vector<std::string>{"ok"});
  CHECK(queue.metrics().total.rejected == 2);
}

TEST_CASE_METHOD(refusal_fixture,
                 "a NaN or an infinity anywhere in Request::extra is refused at submit with "
                 "bad_request, not sent as null (the provider's default in its place)",
                 "[queue][errors]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  run(io, [&]() -> asio::awaitable<void> {
    for (const nlohmann::json& extra :
         {nlohmann::json{{"temperature", nan}}, nlohmann::json{{"top_p", -inf}},
          nlohmann::json{{"logit_bias", {{"50256", inf}}}},
          nlohmann::json{{"stop", nlohmann::json::array({"x", nlohmann::json::array({nan})})}}}) {
      laneq::Request req = chat("nan");
      req.extra = extra;
      auto [ec, r] = co_await queue.async_submit(std::move(req), {}, tuple_awaitable);
      CHECK(ec == errc::bad_request);
      CHECK_THAT(r.error_message, Catch::Contains("Request::extra holds a NaN or infinite"));
    }
    laneq::Request ok = chat("ok");
    ok.extra = {{"temperature", 0.5}, {"max", std::numeric_limits<double>::max()}};
    auto [ec, r] = co_await queue.async_submit(std::move(ok), {}, tuple_awaitable);
    CHECK_FALSE(ec);
    co_await queue.shutdown();
  });
  CHECK(provider.seen() == std::vector<std::string>{"ok"});
  CHECK(queue.metrics().total.rejected == 4);
}

TEST_CASE("a priority that names no lane fails with unknown_lane, and the message lists the "
          "queue's lanes",
          "[queue][errors]") {
  asio::io_context io;
  RecordingProvider provider;
  laneq::RequestQueue queue(io.get_executor(), provider,
                            {.workers = 1,
                             .lanes = {{.priority = Priority::background, .name = "batch"},
                                       {.priority = Priority::critical}}});
  queue.start();
  run(io, [&]() -> asio::awaitable<void> {
    // SubmitOptions::priority defaults to normal, which these lanes do not include
    auto [ec, r] = co_await queue.async_submit(chat(), {}, tuple_awaitable);
    CHECK(ec == errc::unknown_lane);
    CHECK(r.error_message ==
          "SubmitOptions::priority 5 names no lane of this queue; its lanes: critical (0), "
          "batch (10)");
    co_await queue.shutdown();
  });
  CHECK(provider.seen().empty());
}

TEST_CASE("provider failures reach the caller with their code and details", "[queue][errors]") {
  asio::io_context io;
  laneq::SimulatedProvider provider;
  provider.script({.error = errc::server_error, .status = 503});
  laneq::RequestQueue queue(io.get_executor(), provider,
                            {.workers = 1, .retry = {.max_attempts = 1}});
  queue.start();
  run(io, [&]() -> asio::awaitable<void> {
    try {
      co_await queue.submit(chat());
      FAIL("expected a failure");
    } catch (const laneq::RequestError& e) {
      CHECK(e.code() == errc::server_error);
      CHECK(e.response().status == 503);
      CHECK_THAT(e.what(), Catch::Contains("server_error"));
      CHECK_THAT(e.what(), Catch::Contains("HTTP 503"));
    }
    co_await queue.shutdown();
  });
  CHECK(queue.metrics().total.failed == 1);
}

TEST_CASE("a prompt estimator that throws fails the submit with its message", "[queue][errors]") {
  asio::io_context io;
  RecordingProvider provider;
  laneq::RequestQueue queue(io.get_executor(), provider,
                            {.workers = 1, .prompt_estimator = [](const laneq::Request&)
                                                                   -> std::int64_t {
                               throw std::runtime_error("tokenizer file missing");
                             }});
  queue.start();
  run(io, [&]() -> asio::awaitable<void> {
    auto [ec, r] = co_await queue.async_submit(chat(), {}, tuple_awaitable);
    CHECK(ec == errc::internal);
    CHECK(r.error_message == "QueueConfig::prompt_estimator threw: tokenizer file missing");
    co_await queue.shutdown();
  });
  CHECK(provider.seen().empty());
  CHECK(queue.metrics().total.rejected == 1);
}

TEST_CASE("workers keep io_context::run busy until shutdown, which returns at once although "
          "lane deadlines are minutes away",
          "[queue][shutdown]") {
  asio::io_context io;
  laneq::SimulatedProvider provider({.latency = 1ms});
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 2});
  queue.start();
  int ok = 0;
  for (int i = 0; i < 5; ++i)
    submit_with(queue, chat(), {}, [&](std::error_code ec, auto) { ok += ec ? 0 : 1; });
  // the workers are running coroutines: without shutdown the loop does not run out of work
  run_until(io, [&] { return ok == 5; });
  io.poll();
  CHECK_FALSE(io.stopped());
  CHECK(ok == 5);
  const auto t0 = std::chrono::steady_clock::now();
  queue.async_shutdown({}, [](std::error_code) {});
  io.run();  // a deadline timer left armed (normal lane: 2 min) would hang here
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
}

TEST_CASE("a pending submit keeps its handler's io_context busy until the handler has run",
          "[queue][executor]") {
  asio::io_context io;     // the queue's
  asio::io_context other;  // the handler's
  laneq::SimulatedProvider provider({.latency = 0ms});
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 1});
  bool called = false;
  std::thread::id ran_on;
  auto handler = [&](std::error_code ec, auto) {
    CHECK_FALSE(ec);
    called = true;
    ran_on = std::this_thread::get_id();
  };
  // the handler's executor as the io_context's own type, or inside an any_io_executor (the
  // default for handlers: tracked through its concrete type)
  SECTION("io_context executor") {
    queue.async_submit(chat(), {}, asio::bind_executor(other, handler));
  }
  SECTION("any_io_executor") {
    queue.async_submit(chat(), {},
                       asio::bind_executor(asio::any_io_executor(other.get_executor()), handler));
  }
  // Nothing else is pending on `other`: only the submit's tracked work keeps it from stopping.
  CHECK(other.poll() == 0);
  CHECK_FALSE(other.stopped());
  queue.start();
  // until the call has finished and its completion is posted to `other`
  run_until(io, [&] { return queue.metrics().total.succeeded == 1; });
  io.poll();
  CHECK_FALSE(called);      // the completion waits on `other`, not on the queue's loop
  CHECK(other.run() == 1);  // runs the handler, then the work is gone and run() returns
  CHECK(called);
  CHECK(ran_on == std::this_thread::get_id());
  CHECK(other.stopped());
  queue.async_shutdown({}, [](std::error_code) {});
  io.restart();
  io.run();
}

// The adapters are recognized (a forward declaration that missed Asio's would not be).
using coroutine_handler = asio::detail::awaitable_handler<asio::any_io_executor, std::error_code>;
static_assert(laneq::detail::keeps_own_context_busy<coroutine_handler>::value);
static_assert(laneq::detail::keeps_own_context_busy<
              asio::experimental::detail::as_tuple_handler<coroutine_handler>>::value);
static_assert(laneq::detail::keeps_own_context_busy<
              asio::detail::redirect_error_handler<coroutine_handler>>::value);
static_assert(!laneq::detail::keeps_own_context_busy<
              asio::experimental::detail::as_tuple_handler<std::function<void()>>>::value);

TEST_CASE("a coroutine awaiting submit() keeps its own io_context busy until it has resumed",
          "[queue][executor]") {
  // A coroutine's submit does not count work itself: co_spawn's guard, held for the coroutine's
  // life, does. This holds laneq to that: if the guard went, `other` would stop below.
  asio::io_context io;     // the queue's
  asio::io_context other;  // the coroutine's
  laneq::SimulatedProvider provider({.latency = 0ms});
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 1});
  int status = 0;
  SECTION("submit()") {
    asio::co_spawn(other, [&]() -> asio::awaitable<void> {
      status = (co_await queue.submit(chat())).status;
    }, asio::detached);
  }
  SECTION("async_submit(use_awaitable)") {
    asio::co_spawn(other, [&]() -> asio::awaitable<void> {
      status = (co_await queue.async_submit(chat(), {}, asio::use_awaitable)).status;
    }, asio::detached);
  }
  SECTION("async_submit(as_tuple(use_awaitable))") {
    asio::co_spawn(other, [&]() -> asio::awaitable<void> {
      auto [ec, r] = co_await queue.async_submit(chat(), {}, tuple_awaitable);
      status = ec ? -1 : r.status;
    }, asio::detached);
  }
  SECTION("async_submit(redirect_error(use_awaitable, ec))") {
    asio::co_spawn(other, [&]() -> asio::awaitable<void> {
      std::error_code ec;
      auto r = co_await queue.async_submit(chat(), {}, asio::redirect_error(asio::use_awaitable, ec));
      status = ec ? -1 : r.status;
    }, asio::detached);
  }
  other.poll();  // the coroutine runs up to its co_await
  CHECK_FALSE(other.stopped());
  queue.start();
  run_until(io, [&] { return queue.metrics().total.succeeded == 1; });
  CHECK(status == 0);        // its completion waits on `other`
  CHECK_FALSE(other.stopped());
  other.run();               // resumes the coroutine, which ends; then nothing is left
  CHECK(status == 200);
  CHECK(other.stopped());
  queue.async_shutdown({}, [](std::error_code) {});
  io.run();
}

TEST_CASE("a coroutine's io_context may run out and be destroyed while a worker still holds "
          "the request its coroutine gave up on",
          "[queue][executor][lifetime]") {
  asio::io_context io;        // the queue's
  StubbornProvider provider;  // reads the request 1 s into the call, whatever happened
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 1});
  queue.start();
  std::error_code seen;
  bool ended = false;
  const bool on_strand = GENERATE(false, true);  // the coroutine on `other` or a strand of it
  {
    asio::io_context other;  // the coroutine's
    auto coro_ex = on_strand ? asio::any_io_executor(asio::make_strand(other))
                             : asio::any_io_executor(other.get_executor());
    asio::co_spawn(coro_ex, [&]() -> asio::awaitable<void> {
      try {
        co_await queue.submit(chat("late"), {.timeout = 300ms});  // times out in its call
      } catch (const laneq::RequestError& e) {
        seen = e.code();
      }
      ended = true;
    }, asio::detached);
    run_until(io, [&] {
      other.poll();
      return ended;
    });
    CHECK(provider.read.empty());  // the worker still holds the request
    other.run();                   // nothing left to wait for: returns at once
  }  // `other` is gone; the op must not be given back through it (ASan: use after free)
  run_until(io, [&] { return !provider.read.empty(); });
  CHECK(seen == errc::timeout);
  queue.async_shutdown({}, [](std::error_code) {});
  io.run();
}

TEST_CASE("a handler whose io_context is destroyed before it runs ends with that context, "
          "while a worker still holds the request",
          "[queue][executor][lifetime]") {
  // It ended when the worker let go, after `other` was gone: its executor's work count was
  // given back into freed memory (ASan: heap-use-after-free).
  asio::io_context io;        // the queue's
  StubbornProvider provider;  // reads the request 1 s into the call, whatever happened
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 1});
  queue.start();
  const auto token = std::make_shared<int>(0);  // held by the handler
  {
    asio::io_context other;  // the handler's
    queue.async_submit(chat("late"), {.timeout = 300ms},
                       asio::bind_executor(other, [token](std::error_code, laneq::Response) {
                         FAIL("the handler ran on a context that never ran");
                       }));
    run_until(io, [&] { return queue.metrics().total.expired == 1; });  // in its call
    CHECK(provider.read.empty());  // the worker still holds the request
    CHECK(token.use_count() == 2);
  }  // `other` destroyed with the completion posted, unrun
  CHECK(token.use_count() == 1);  // the handler went with it
  run_until(io, [&] { return !provider.read.empty(); });
  queue.async_shutdown({}, [](std::error_code) {});
  io.run();
}

namespace {

// Answers each call after the number of milliseconds its text says, cancelled or not.
class DelayedProvider final : public laneq::Provider {
 public:
  void async_call(const laneq::Request& r, const laneq::CallContext& ctx,
                  laneq::CallCompletion done) noexcept override {
    ++started;
    const auto delay = std::chrono::milliseconds(std::stoi(r.messages.at(0).content));
    auto timer = std::make_shared<asio::steady_timer>(ctx.executor, delay);
    timer->async_wait([this, &r, timer, done = std::move(done)](std::error_code) mutable {
      read.push_back(r.messages.at(0).content);
      done(errc::network, laneq::Response{});
    });
  }
  const char* name() const noexcept override { return "delayed"; }
  int started = 0;                // on the queue's strand only
  std::vector<std::string> read;  // on the queue's strand only
};

}  // namespace

TEST_CASE("a queue destroyed with calls in flight leaves nothing behind when its io_context goes "
          "before the last call comes back",
          "[queue][lifetime]") {
  // The worker whose aborted call came back first parked, waiting for work that never came:
  // its frame held the queue's state, and nothing let go of it (LeakSanitizer: a leak).
  DelayedProvider provider;  // outlives the io_context: its timers' handlers point to it
  const auto token = std::make_shared<int>(0);  // held by the queue's state (its config)
  int resolved = 0;
  {
    asio::io_context io;
    {
      laneq::RequestQueue queue(
          io.get_executor(), provider,
          {.workers = 2,
           .on_durable_result = [token](std::string_view, std::error_code,
                                        const laneq::Response&) {}});
      queue.start();
      for (const char* delay : {"100", "60000"})
        submit_with(queue, chat(delay), {}, [&](std::error_code, laneq::Response) { ++resolved; });
      run_until(io, [&] { return provider.started == 2; });
      CHECK(resolved == 0);
    }  // destroyed with both calls in flight
    run_until(io, [&] { return provider.read.size() == 1; });  // the first comes back
    io.poll();
    CHECK(resolved == 2);  // shutting_down, both
    CHECK(token.use_count() == 2);
  }  // the io_context destroyed with the second call still out
  CHECK(token.use_count() == 1);
}

namespace {

// Counts what it hands out, block by block; not default-constructible, like a pool's handle.
struct allocation_log {
  std::map<void*, std::size_t> live;  // block -> bytes
  std::size_t allocations = 0;
  std::size_t refuse = 0;  // that allocation (1-based) throws std::bad_alloc; 0 = none
  std::function<bool()> right_place = [] { return true; };  // checked at every deallocation
  std::size_t wrong_place = 0;
  std::size_t largest = 0;
  bool any_live_of_at_least(std::size_t bytes) const {
    return std::any_of(live.begin(), live.end(), [&](const auto& b) { return b.second >= bytes; });
  }
};

template <class T>
struct logging_allocator {
  using value_type = T;
  allocation_log* log;
  explicit logging_allocator(allocation_log* l) noexcept : log(l) {}
  template <class U>
  logging_allocator(const logging_allocator<U>& o) noexcept : log(o.log) {}
  T* allocate(std::size_t n) {
    if (log->allocations + 1 == log->refuse) {
      log->refuse = 0;
      throw std::bad_alloc();
    }
    T* p = std::allocator<T>().allocate(n);
    log->live.emplace(p, n * sizeof(T));
    ++log->allocations;
    log->largest = std::max(log->largest, n * sizeof(T));
    return p;
  }
  void deallocate(T* p, std::size_t n) {
    CHECK(log->live.erase(p) == 1);  // given back once, and only what it handed out
    if (!log->right_place()) ++log->wrong_place;
    std::allocator<T>().deallocate(p, n);
  }
  template <class U>
  bool operator==(const logging_allocator<U>& o) const noexcept { return log == o.log; }
};

}  // namespace

TEST_CASE("async_submit keeps its state in the handler's associated allocator and gives all "
          "of it back before the handler runs",
          "[queue][allocator]") {
  allocation_log log;
  // The op holds the Request and SubmitOptions by value: no other block is that big.
  const std::size_t op_bytes = sizeof(laneq::Request) + sizeof(laneq::SubmitOptions);
  // (ec, any block still allocated): as Asio's rule, so that a handler may own its arena (the
  // Response on its way back was given back after the handler ran)
  std::vector<std::pair<std::error_code, bool>> seen;
  auto handler = asio::bind_allocator(logging_allocator<void>(&log),
                                      [&](std::error_code ec, laneq::Response) {
                                        seen.emplace_back(ec, !log.live.empty());
                                      });
  SECTION("answered, and failed at admission") {
    asio::io_context io;
    laneq::SimulatedProvider provider({.latency = 0ms});
    laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 1});
    queue.start();
    // one at a time: while one runs, no other op is allocated
    queue.async_submit(chat(), {}, handler);
    run_until(io, [&] { return seen.size() == 1; });
    queue.async_submit(chat(), {.priority = Priority{3}}, handler);  // unknown lane
    run_until(io, [&] { return seen.size() == 2; });
    queue.async_shutdown({}, [](std::error_code) {});
    io.run();
    REQUIRE(seen.size() == 2);
    CHECK_FALSE(seen[0].first);
    CHECK(seen[1].first == errc::unknown_lane);
    CHECK_FALSE(seen[0].second);
    CHECK_FALSE(seen[1].second);
    CHECK(log.allocations >= 4);  // per submit: the op and the Response riding its completion
    CHECK(log.largest >= op_bytes);
  }
  SECTION("completion posted, then destroyed uncalled with its io_context") {
    {
      asio::io_context io;
      laneq::SimulatedProvider provider({.latency = 0ms});
      laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 1});
      queue.async_submit(chat(), {}, handler);  // never started: fails at the queue's end
    }
    CHECK(seen.empty());
    CHECK(log.allocations >= 2);
  }
  CHECK(log.live.empty());  // everything handed out came back
}

TEST_CASE("a handler with a cancellation slot may run, and be cancelled, after the queue and its "
          "io_context are gone",
          "[queue][lifetime][cancel]") {
  // The canceller in the handler's slot owned the queue's state: cleared on the handler's
  // executor after the queue's io_context was destroyed, it destroyed the queue's strand and
  // timer there, and a cancel emitted meanwhile posted to the dead strand (ASan: use after free).
  asio::io_context other;  // the handler's: outlives the queue's
  asio::cancellation_signal signal;
  std::error_code seen = errc::internal;
  bool called = false;
  {
    asio::io_context io;  // the queue's
    laneq::SimulatedProvider provider({.latency = 0ms});
    laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 1});
    queue.start();
    queue.async_submit(chat(), {},
                       asio::bind_cancellation_slot(
                           signal.slot(), asio::bind_executor(other, [&](std::error_code ec,
                                                                         laneq::Response) {
                             seen = ec;
                             called = true;
                           })));
    // answered: its completion is posted to `other`, which has not run yet
    run_until(io, [&] { return queue.metrics().total.succeeded == 1; });
  }
  signal.emit(asio::cancellation_type::terminal);  // too late: nothing to cancel, nowhere to go
  other.run();
  CHECK(called);
  CHECK_FALSE(seen);
}

TEST_CASE("a handler's allocator that refuses the Response's block or the post does not lose "
          "the handler",
          "[queue][allocator]") {
  // The completion went out through the handler's allocator only: a bounded pool that said no
  // threw out of the worker, and the handler never ran (its io_context never returned).
  for (const std::size_t refused : {2, 3}) {  // 1: the op (at submit); 2: the Response; 3: the post
    INFO("refused allocation " << refused);
    allocation_log log;
    log.refuse = refused;
    asio::io_context io;
    laneq::SimulatedProvider provider({.latency = 0ms});
    laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 1});
    queue.start();
    int calls = 0;
    std::error_code got = errc::internal;
    std::string text;
    queue.async_submit(chat(), {},
                       asio::bind_allocator(logging_allocator<void>(&log),
                                            [&](std::error_code ec, laneq::Response r) {
                                              ++calls;
                                              got = ec;
                                              text = r.text;
                                            }));
    run_until(io, [&] { return calls == 1; });
    queue.async_shutdown({}, [](std::error_code) {});
    io.run();
    CHECK(calls == 1);
    CHECK_FALSE(got);
    CHECK(text == "simulated");
    CHECK(log.refuse == 0);     // (the refusal happened)
    CHECK(log.live.empty());    // what it did hand out came back
  }
}

TEST_CASE("an op still held by a worker after its handler ran goes back to the handler's "
          "allocator on the handler's executor",
          "[queue][allocator][lifetime]") {
  asio::io_context io;     // the queue's
  asio::io_context other;  // the handler's: its allocator is called only from there
  allocation_log log;
  log.right_place = [&] { return other.get_executor().running_in_this_thread(); };
  StubbornProvider provider;  // reads the request 1 s into the call, whatever happened
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 1});
  queue.start();
  const std::size_t op_bytes = sizeof(laneq::Request) + sizeof(laneq::SubmitOptions);
  std::error_code seen;
  bool called = false, op_held = false;
  // Times out 300 ms into its call: the handler runs on `other` while the worker still holds
  // the op for the provider; the worker lets go on the queue's strand 700 ms later.
  queue.async_submit(chat("late"), {.timeout = 300ms},
                     asio::bind_executor(other, asio::bind_allocator(
                         logging_allocator<void>(&log), [&](std::error_code ec, laneq::Response) {
                           seen = ec;
                           called = true;
                           op_held = log.any_live_of_at_least(op_bytes);
                         })));
  run_until(io, [&] {  // the queue's loop a handler at a time, the handler's in between
    other.poll();
    return !provider.read.empty();
  });
  CHECK(called);
  CHECK(seen == errc::timeout);
  CHECK(op_held);  // the worker still had it when the handler ran
  other.restart();
  other.run();     // returns once the op went back: its tracked work kept `other` busy
  CHECK(log.live.empty());
  CHECK(log.wrong_place == 0);
  queue.async_shutdown({}, [](std::error_code) {});
  io.run();
}

namespace {

// An io_context's executor whose execute() throws bad_alloc once `fail` is set: a post that
// finds no memory.
struct failing_executor {
  asio::io_context::executor_type inner;
  const bool* fail;
  template <class F>
  void execute(F&& f) const {
    if (*fail) throw std::bad_alloc();
    asio::post(inner, std::forward<F>(f));
  }
  failing_executor require(asio::execution::blocking_t::never_t) const noexcept { return *this; }
  static constexpr asio::execution::blocking_t query(asio::execution::blocking_t) noexcept {
    return asio::execution::blocking.never;
  }
  asio::execution_context& query(asio::execution::context_t) const noexcept {
    return inner.context();
  }
  friend bool operator==(const failing_executor& a, const failing_executor& b) noexcept {
    return a.inner == b.inner && a.fail == b.fail;
  }
  friend bool operator!=(const failing_executor& a, const failing_executor& b) noexcept {
    return !(a == b);
  }
};
static_assert(asio::execution::is_executor<failing_executor>::value);

}  // namespace

TEST_CASE("an op whose late give-back cannot be posted goes back to its allocator at once, "
          "without terminating",
          "[queue][allocator][lifetime]") {
  allocation_log log;      // outlives both loops: what they hold goes back to it
  asio::io_context io;     // the queue's
  asio::io_context other;  // the handler's; nothing counts work there for this executor
  auto other_busy = asio::make_work_guard(other);
  log.right_place = [&] { return other.get_executor().running_in_this_thread(); };
  StubbornProvider provider;  // reads the request 1 s into the call, whatever happened
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 1});
  queue.start();
  bool fail = false;
  bool called = false;
  queue.async_submit(chat("late"), {.timeout = 300ms},
                     asio::bind_executor(failing_executor{other.get_executor(), &fail},
                                         asio::bind_allocator(logging_allocator<void>(&log),
                                                              [&](std::error_code, laneq::Response) {
                                                                called = true;
                                                                fail = true;  // from now on
                                                              })));
  run_until(io, [&] {
    other.poll();
    return !provider.read.empty();
  });
  CHECK(called);
  // The worker let go on the queue's thread, the post to `other` threw: given back there.
  CHECK(log.live.empty());
  CHECK(log.wrong_place == 1);
  other_busy.reset();
  queue.async_shutdown({}, [](std::error_code) {});
  io.run();
}

TEST_CASE("metrics count every request once and export as JSON and Prometheus text",
          "[queue][metrics]") {
  asio::io_context io;
  laneq::SimulatedProvider provider({.latency = 1ms});
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 2});
  queue.start();
  int done = 0;
  for (int i = 0; i < 30; ++i)
    submit_with(queue, chat(), {.priority = i % 2 ? Priority::critical : Priority::low,
                                .client = "t" + std::to_string(i % 3)},
                       [&](std::error_code, laneq::Response) {
                         if (++done == 30) queue.async_shutdown({}, [](std::error_code) {});
                       });
  io.run();
  const auto m = queue.metrics();
  CHECK(m.total.submitted == 30);
  CHECK(m.total.succeeded == 30);
  CHECK(m.total.depth == 0);
  CHECK(m.total.in_flight == 0);
  REQUIRE(m.lanes.size() == 5);
  CHECK(m.lanes[0].name == "critical");
  CHECK(m.lanes[0].stats.succeeded == 15);
  CHECK(m.lanes[3].stats.succeeded == 15);
  CHECK(m.clients.at("t1").submitted == 10);
  CHECK(m.total.service_time.count == 30);
  CHECK(m.total.service_time.p50_ms >= 0.9);
  const auto j = laneq::to_json(m);
  CHECK(j.dump().find("critical") != std::string::npos);
  const auto prom = laneq::to_prometheus(m);
  CHECK(prom.find("laneq_requests_submitted_total{lane=\"critical\"} 15") != std::string::npos);
  // Throughput counts whole seconds: once the second of the last call is over, the calls show,
  // in their clients too (the total is the lanes' sum).
  auto later = queue.metrics();
  const auto give_up = std::chrono::steady_clock::now() + 30s;
  while (later.total.throughput_per_s == 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(20ms);  // waiting for the clock, not for another thread
    later = queue.metrics();
  }
  CHECK(later.total.throughput_per_s > 0);
  double clients = 0;
  for (const auto& [name, c] : later.clients) clients += c.throughput_per_s;
  CHECK(clients == Approx(later.total.throughput_per_s));
}

// --- destroying a queue that still holds work (no thread runs the io_context meanwhile) ---

TEST_CASE("destroying a queue completes every request it holds with shutting_down - waiting, "
          "queued, in flight, awaited by a coroutine - and aborts the calls in flight",
          "[queue][lifetime]") {
  asio::io_context io;
  laneq::SimulatedProvider provider({.latency = 60s});
  std::map<int, std::vector<std::error_code>> got;  // per submit: every completion it had
  std::error_code awaited{};
  bool coroutine_done = false;
  {
    laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 2, .max_pending = 5});
    queue.start();
    for (int i = 0; i < 10; ++i)  // 2 in flight, 5 queued, 3 waiting for room
      submit_with(queue, chat(), {}, [&got, i](std::error_code ec, laneq::Response) {
        got[i].push_back(ec);
      });
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
      try {
        co_await queue.submit(chat());
      } catch (const laneq::RequestError& e) {
        awaited = e.code();
      }
      coroutine_done = true;
    }, asio::detached);
    run_until(io, [&] {
      const auto m = queue.metrics().total;
      return provider.in_flight() == 2 && m.submitted == 11 && m.waiting == 4;
    });
  }  // destroyed here: nothing runs the io_context
  CHECK(got.empty());  // handlers are posted, never run inside the destructor
  const auto t0 = std::chrono::steady_clock::now();
  io.run();  // the aborted calls end at once; their 60 s timers would otherwise hold it
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  REQUIRE(got.size() == 10);
  for (const auto& [i, codes] : got)
    CHECK(codes == std::vector<std::error_code>{make_error_code(errc::shutting_down)});
  CHECK(coroutine_done);
  CHECK(awaited == errc::shutting_down);
  CHECK(provider.calls() == 2);
  CHECK(provider.aborted() == 2);
  CHECK(provider.in_flight() == 0);
}

TEST_CASE("an io_context destroyed after the queue, without running again, takes the pending "
          "handlers and coroutine frames with it",
          "[queue][lifetime]") {
  laneq::SimulatedProvider provider({.latency = 60s});
  auto token = std::make_shared<int>(0);  // one copy per live handler or frame
  int called = 0;
  {
    asio::io_context io;
    {
      laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 1, .max_pending = 2});
      queue.start();
      for (int i = 0; i < 4; ++i)
        submit_with(queue, chat(), {}, [&called, token](std::error_code, laneq::Response) {
          ++called;
        });
      asio::co_spawn(io, [&queue, token]() -> asio::awaitable<void> {
        co_await queue.submit(chat());
      }, asio::detached);
      run_until(io, [&] { return provider.in_flight() == 1 && queue.metrics().total.submitted == 5; });
      CHECK(token.use_count() == 6);
    }
    CHECK(token.use_count() == 6);  // their completions are posted: alive until run or destroyed
  }
  CHECK(called == 0);
  CHECK(token.use_count() == 1);  // all destroyed with the io_context: nothing leaked
}

TEST_CASE("a queue destroyed by a coroutine of its own one-thread loop fails what it held, even "
          "submits it had not admitted yet",
          "[queue][lifetime]") {
  asio::io_context io;
  RecordingProvider provider({.latency = 1ms});
  std::vector<std::error_code> got;
  run(io, [&]() -> asio::awaitable<void> {
    auto queue = std::make_unique<laneq::RequestQueue>(io.get_executor(), provider,
                                                       laneq::QueueConfig{.workers = 2});
    queue->start();
    for (int i = 0; i < 5; ++i)
      submit_with(*queue, chat(), {}, [&](std::error_code ec, auto) { got.push_back(ec); });
    queue.reset();  // before the strand admitted them, before the workers started
    co_return;
  });
  CHECK(got == std::vector<std::error_code>(5, make_error_code(errc::shutting_down)));
  CHECK(provider.seen().empty());
}

// --- detail::post: the strand's own post() where Asio's would allocate ---

TEST_CASE("detail::post runs the function later, on the strand when given one - directly or "
          "inside an any_io_executor - and on any other executor as asio::post does",
          "[queue][post]") {
  asio::io_context io;
  const laneq::CallExecutor strand = asio::make_strand(io.get_executor());
  std::vector<std::string> ran;
  const auto record = [&](std::string what, bool want_strand) {
    return [&ran, &strand, what = std::move(what), want_strand] {
      CHECK(strand.running_in_this_thread() == want_strand);
      ran.push_back(what);
    };
  };
  laneq::detail::post(strand, record("strand", true));
  laneq::detail::post(asio::any_io_executor(strand), record("any(strand)", true));
  // Not a strand inside: Asio 1.22's target<T>() does not check the type, so this must not
  // be taken for one.
  laneq::detail::post(asio::any_io_executor(io.get_executor()), record("any(io)", false));
  laneq::detail::post(
      asio::any_io_executor(asio::prefer(io.get_executor(), asio::execution::outstanding_work.tracked)),
      record("any(io, tracked)", false));
  laneq::detail::post(io.get_executor(), record("io", false));
  CHECK(ran.empty());  // never inline
  io.run();
  std::sort(ran.begin(), ran.end());
  CHECK(ran == std::vector<std::string>{"any(io)", "any(io, tracked)", "any(strand)", "io", "strand"});
}

TEST_CASE("co_await (queue.submit(...) || timer) cancels the submit when the timer wins - the "
          "queued request is removed and never reaches the provider",
          "[queue][cancel]") {
  asio::io_context io;
  RecordingProvider provider({.latency = 200ms});
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 1});
  queue.start();
  run(io, [&]() -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    submit_with(queue, chat("blocker"), {}, [](auto, auto) {});  // holds the one worker
    asio::steady_timer t(ex, 20ms);
    auto won = co_await (queue.submit(chat("queued")) || t.async_wait(asio::use_awaitable));
    CHECK(won.index() == 1);  // the timer
    // The submit's own completion (cancelled) is swallowed by ||; the request is gone.
    const auto m = queue.metrics();
    CHECK(m.total.cancelled == 1);
    CHECK(m.total.depth == 0);
    co_await queue.shutdown();
  });
  CHECK(provider.seen() == std::vector<std::string>{"blocker"});
}

TEST_CASE("the README's || with as_tuple on both sides: a submit that fails at once wins with "
          "its error (the throwing form waits for the timer and loses it)", "[queue][cancel]") {
  asio::io_context io;
  RecordingProvider provider({.latency = 1ms});
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 1});
  queue.start();
  run(io, [&]() -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    const auto t0 = std::chrono::steady_clock::now();
    asio::steady_timer t(ex, 30s);
    auto r = co_await (queue.async_submit(chat(), {.timeout = 0ms}, tuple_awaitable) ||
                       t.async_wait(tuple_awaitable));
    REQUIRE(r.index() == 0);  // the submit, with its error
    CHECK(std::get<0>(std::get<0>(r)) == errc::bad_request);
    CHECK(std::chrono::steady_clock::now() - t0 < 10s);  // not the timer's 30 s
    asio::steady_timer t2(ex, 30s);  // and a success wins the same way
    auto ok = co_await (queue.async_submit(chat(), {}, tuple_awaitable) ||
                        t2.async_wait(tuple_awaitable));
    REQUIRE(ok.index() == 0);
    CHECK_FALSE(std::get<0>(std::get<0>(ok)));
    co_await queue.shutdown();
  });
}

TEST_CASE("a ClientId compares with a string_view, a std::string and a literal, both ways",
          "[queue][client]") {
  // (each was ambiguous with a string_view or a std::string: two conversions fit)
  const laneq::ClientId c("tenant-42");
  const std::string_view v = "tenant-42";
  const std::string s = "tenant-42";
  CHECK(c == v);
  CHECK(v == c);
  CHECK(c == s);
  CHECK(s == c);
  CHECK(c == "tenant-42");
  CHECK(c != std::string_view("tenant-7"));
  CHECK(c != std::string("tenant-7"));
  CHECK(c != "tenant-7");
  STATIC_REQUIRE(laneq::ClientId("a") == std::string_view("a"));
}
