// RateLimiter on a real io_context and real time: short periods, exact lower bounds (a grant
// can never come before its budget allows, and Asio timers never fire early), generous upper
// bounds. Arrival order is fixed by program order: async_acquire registers a waiter before it
// returns, and a coroutine registers its acquire before any other handler runs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <limits>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/error.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>

#include "laneq/error.hpp"
#include "laneq/rate_limiter.hpp"
#include "support/run.hpp"

using namespace std::chrono_literals;
using laneq::errc;
using laneq::RateCost;
using laneq::RateLimiter;
using laneq::test::run;
using Clock = std::chrono::steady_clock;

namespace {

auto tuple_awaitable = asio::experimental::as_tuple(asio::use_awaitable);

// Grant times are read when the completion runs, a little after the grant itself, so the
// checks below are lower bounds from a time taken before the first grant (a grant is never
// early: they need no slack for a completion that runs late).

double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// co_spawn completion: a spawned coroutine's exception leaves io_context::run().
void rethrow(std::exception_ptr e) {
  if (e) std::rethrow_exception(e);
}

struct Outcome {
  int calls = 0;
  std::error_code ec;
  RateLimiter::Ticket ticket = 0;
  Clock::time_point at{};
};

// A completion handler recording into `o`, and appending `id` to `order` when given.
auto record(Outcome& o, std::vector<int>* order = nullptr, int id = 0) {
  return [&o, order, id](std::error_code ec, RateLimiter::Ticket t) {
    ++o.calls;
    o.ec = ec;
    o.ticket = t;
    o.at = Clock::now();
    if (order) order->push_back(id);
  };
}

RateCost tokens(std::int64_t n) { return RateCost{.requests = 1, .input_tokens = n}; }

// Lets every handler already queued run (no sleeping) until `pred()` holds; fails if it never does.
template <class Pred>
asio::awaitable<void> until(Pred pred) {
  auto ex = co_await asio::this_coro::executor;
  for (int i = 0; i < 10'000 && !pred(); ++i) co_await asio::post(ex, asio::use_awaitable);
  REQUIRE(pred());
}

// The largest number of `t` inside any window [t_i, t_i + len).
std::size_t max_in_window(std::vector<Clock::time_point> t, Clock::duration len) {
  std::sort(t.begin(), t.end());
  std::size_t best = 0;
  for (std::size_t i = 0, j = 0; i < t.size(); ++i) {
    while (j < t.size() && t[j] < t[i] + len) ++j;
    best = std::max(best, j - i);
  }
  return best;
}

}  // namespace

TEST_CASE("an acquire the budget allows is granted at once, its completion never inline",
          "[limiter]") {
  asio::io_context io;
  RateLimiter lim(io.get_executor(), {.requests = 3, .period = 10s}, "sim-1");
  const auto t0 = Clock::now();
  const RateLimiter::Ticket first = lim.try_acquire({});
  CHECK(first != 0);

  Outcome cb;
  lim.async_acquire({}, 0, record(cb));
  CHECK(cb.calls == 0);  // granted, but the completion is posted, not run inline

  RateLimiter::Ticket third = 0;
  run(io, [&]() -> asio::awaitable<void> { third = co_await lim.acquire({}); });
  CHECK(cb.calls == 1);
  CHECK_FALSE(cb.ec);
  CHECK(cb.ticket != 0);
  CHECK(third != 0);
  CHECK(first != cb.ticket);
  CHECK(cb.ticket != third);
  CHECK(first != third);
  CHECK(ms(Clock::now() - t0) < 500);  // nobody waited for the 10 s period

  const auto snap = lim.snapshot();
  CHECK(lim.name() == "sim-1");
  CHECK(snap.name == "sim-1");
  CHECK(snap.granted == 3);
  CHECK(snap.waiting == 0);
  REQUIRE(snap.budgets.size() == 1);
  CHECK(snap.budgets[0].name == "requests");
  CHECK(snap.budgets[0].limit == 3);
  CHECK(snap.budgets[0].available == 0);
  CHECK(lim.try_acquire({}) == 0);  // spent for the next 10 s
}

TEST_CASE("waiters of one priority are granted in arrival order, at most the budget per window",
          "[limiter]") {
  asio::io_context io;
  // (a 600 ms period: room for a loaded machine's stalls under the first bound)
  RateLimiter lim(io.get_executor(), {.requests = 2, .period = 600ms});
  std::vector<int> arrived, completed;
  std::vector<Clock::time_point> started;
  const auto t0 = Clock::now();
  for (int i = 0; i < 6; ++i)
    asio::co_spawn(
        io,
        [&, i]() -> asio::awaitable<void> {
          arrived.push_back(i);  // the acquire below registers before any other handler runs
          const RateLimiter::Ticket t = co_await lim.acquire({});
          CHECK(t != 0);
          completed.push_back(i);
          started.push_back(Clock::now());
        },
        rethrow);
  io.run();

  REQUIRE(arrived.size() == 6);
  REQUIRE(completed.size() == 6);
  CHECK(completed == arrived);
  // Two per 600 ms: the 3rd and 4th one period after the first grant, the 5th and 6th two.
  CHECK(ms(started[1] - t0) < 550);
  CHECK(ms(started[2] - t0) >= 600);
  CHECK(ms(started[4] - t0) >= 1200);
  CHECK(ms(started[5] - t0) < 1200 + 1000);
  // No more than two a period: the k-th pair no earlier than k periods on (grants are never
  // early, so these bounds need no slack for a completion that runs late).
  for (std::size_t i = 0; i < started.size(); ++i)
    CHECK(started[i] - t0 >= static_cast<int>(i / 2) * 600ms);
  // ... nor a late burst: 3 real grants span a period, so they look closer than half of one
  // only through a completion 300 ms late
  CHECK(max_in_window(started, 300ms) <= 2);
  CHECK(lim.snapshot().granted == 6);
}

TEST_CASE("a waiter with a lower priority number is served before earlier, less urgent ones",
          "[limiter]") {
  asio::io_context io;
  RateLimiter lim(io.get_executor(), {.requests = 1, .period = 100ms});
  REQUIRE(lim.try_acquire({}) != 0);  // spent: everyone below waits
  std::vector<int> order;
  Outcome o[5];
  lim.async_acquire({}, 5, record(o[0], &order, 0));  // a batch request, first to arrive
  lim.async_acquire({}, 5, record(o[1], &order, 1));
  lim.async_acquire({}, 1, record(o[2], &order, 2));
  lim.async_acquire({}, 0, record(o[3], &order, 3));  // the most urgent, arrives late
  lim.async_acquire({}, 1, record(o[4], &order, 4));
  CHECK(lim.snapshot().waiting == 5);
  io.run();
  CHECK(order == std::vector<int>{3, 2, 4, 0, 1});
  for (const auto& x : o) {
    CHECK(x.calls == 1);
    CHECK_FALSE(x.ec);
  }
}

TEST_CASE("an aging waiter moves up while it waits, and among equals the one waiting longer goes "
          "first",
          "[limiter][aging]") {
  asio::io_context io;
  RateLimiter lim(io.get_executor(), {.requests = 1, .period = 200ms});
  REQUIRE(lim.try_acquire({}) != 0);  // spent: everyone below waits ~200 ms
  const auto t0 = Clock::now();
  std::vector<int> order;
  Outcome o[4];
  // priority 3, one step per 20 ms: level with 0 after 60 ms, long before the next grant
  lim.async_acquire({}, laneq::WaitRank{.priority = 3, .since = t0, .age_step = 20ms},
                    record(o[0], &order, 0));
  lim.async_acquire({}, 0, record(o[1], &order, 1));  // urgent, but it came later
  // already aged to 0 when it arrives: older than both
  lim.async_acquire({}, laneq::WaitRank{.priority = 4, .since = t0 - 10s, .age_step = 1s},
                    record(o[2], &order, 2));
  // aging too slowly to matter: 1 s per step
  lim.async_acquire({}, laneq::WaitRank{.priority = 2, .since = t0, .age_step = 1s},
                    record(o[3], &order, 3));
  io.run();
  CHECK(order == std::vector<int>{2, 0, 1, 3});
  for (const auto& x : o) CHECK_FALSE(x.ec);
}

TEST_CASE("a waiter whose rank aged is cancelled by its slot, and an aging waiter behind the head "
          "is served at its aging step",
          "[limiter][aging][cancel]") {
  asio::io_context io;
  // tokens: a large urgent head waits for its tokens (1 s); behind it, a small aging one
  RateLimiter lim(io.get_executor(), {.tokens = 100, .period = 1s});
  REQUIRE(lim.try_acquire(tokens(60)) != 0);
  const auto t0 = Clock::now();
  asio::cancellation_signal sig;
  std::vector<int> order;
  Outcome big, aging, cancelled;
  lim.async_acquire(tokens(90), 0, record(big, &order, 90));
  // its rank (5) drops one step per 50 ms; once at 0 it is older than the head (since t0 - 1ms)
  // and its 30 fit: granted at the step that levels it, ~250 ms, not when the head is (1 s)
  lim.async_acquire(tokens(30),
                    laneq::WaitRank{.priority = 5, .since = t0 - 1ms, .age_step = 50ms},
                    record(aging, &order, 30));
  lim.async_acquire(tokens(5),
                    laneq::WaitRank{.priority = 5, .since = t0 + 100ms, .age_step = 10ms},
                    asio::bind_cancellation_slot(sig.slot(), record(cancelled, &order, 5)));
  asio::steady_timer t(io, 120ms);
  t.async_wait([&](std::error_code) {
    sig.emit(asio::cancellation_type::terminal);  // found where its rank took it (by 110 ms)
  });
  io.run();
  CHECK(cancelled.calls == 1);
  CHECK(cancelled.ec == asio::error::operation_aborted);
  CHECK(order == std::vector<int>{5, 30, 90});
  CHECK_FALSE(aging.ec);
  CHECK(ms(aging.at - t0) >= 240);
  CHECK(ms(aging.at - t0) < 900);  // not behind the head's 1 s
  CHECK_FALSE(big.ec);
  CHECK(ms(big.at - t0) >= 990);  // (its 90 fit once the 60 and the 30 age out: ~1.25 s)
  CHECK(lim.snapshot().waiting == 0);
}

TEST_CASE("a waiter that aged all the way to 0 is still found and cancelled by its slot",
          "[limiter][aging][cancel]") {
  asio::io_context io;
  const auto t0 = Clock::now();
  // spent: the waiters below wait ~600 ms, long after the cancel at 150 ms (a stall of
  // hundreds of ms could not move the grant before it)
  RateLimiter lim(io.get_executor(), {.requests = 1, .period = 600ms});
  REQUIRE(lim.try_acquire({}) != 0);
  asio::cancellation_signal sig;
  Outcome aged, other;
  // priority 2, one step per 20 ms: at 0 from 40 ms on, where it ages no more
  lim.async_acquire({}, laneq::WaitRank{.priority = 2, .since = t0, .age_step = 20ms},
                    asio::bind_cancellation_slot(sig.slot(), record(aged)));
  lim.async_acquire({}, 1, record(other));
  asio::steady_timer t(io, 150ms);
  t.async_wait([&](std::error_code) {
    CHECK(lim.snapshot().waiting == 2);
    sig.emit(asio::cancellation_type::terminal);
    CHECK(lim.snapshot().waiting == 1);
  });
  io.run();
  CHECK(aged.calls == 1);
  CHECK(aged.ec == asio::error::operation_aborted);
  CHECK(other.calls == 1);
  CHECK_FALSE(other.ec);
  CHECK(ms(other.at - t0) >= 600);  // granted when the budget came back, not by the cancel
  CHECK(lim.snapshot().waiting == 0);
}

TEST_CASE("no barging: a small request waits behind a large head that waits for its tokens",
          "[limiter]") {
  asio::io_context io;
  RateLimiter lim(io.get_executor(), {.tokens = 100, .period = 400ms});
  const auto t0 = Clock::now();
  REQUIRE(lim.try_acquire(tokens(80)) != 0);
  std::vector<int> order;
  Outcome big, small;
  lim.async_acquire(tokens(90), 0, record(big, &order, 90));  // needs the 80 back: 400 ms
  // 80 + 5 fits the budget, yet neither try_acquire nor acquire may pass the waiting head.
  CHECK(lim.try_acquire(tokens(5)) == 0);
  lim.async_acquire(tokens(5), 0, record(small, &order, 5));
  CHECK(lim.snapshot().waiting == 2);
  io.run();
  CHECK(order == std::vector<int>{90, 5});
  CHECK_FALSE(big.ec);
  CHECK_FALSE(small.ec);
  CHECK(ms(big.at - t0) >= 400);
  CHECK(ms(small.at - t0) >= 400);
  CHECK(small.at >= big.at);
  CHECK(ms(small.at - t0) < 400 + 1000);
}

TEST_CASE("a cancelled head completes with operation_aborted and the next waiter moves up",
          "[limiter][cancel]") {
  asio::io_context io;
  // (a 3 s period: the bounds below have 2.5 s of room for a loaded machine's stalls)
  RateLimiter lim(io.get_executor(), {.tokens = 100, .period = 3s});
  const auto t0 = Clock::now();
  REQUIRE(lim.try_acquire(tokens(60)) != 0);
  asio::cancellation_signal sig;
  std::vector<int> order;
  Outcome head, next;
  lim.async_acquire(tokens(90), 0,
                    asio::bind_cancellation_slot(sig.slot(), record(head, &order, 1)));
  lim.async_acquire(tokens(30), 0, record(next, &order, 2));  // fits now, but behind the head
  REQUIRE(lim.snapshot().waiting == 2);
  // Emitted on the handler's executor, as Asio requires.
  asio::post(io, [&] { sig.emit(asio::cancellation_type::terminal); });
  io.run();

  CHECK(head.calls == 1);
  CHECK(head.ec == asio::error::operation_aborted);
  CHECK(head.ticket == 0);
  CHECK(next.calls == 1);
  CHECK_FALSE(next.ec);
  CHECK(next.ticket != 0);
  CHECK(order == std::vector<int>{1, 2});
  // Granted when the head left, not when the head's tokens would have come back (3 s) ...
  CHECK(ms(next.at - t0) < 2500);
  // ... and run() returned without waiting out the head's timer.
  CHECK(ms(Clock::now() - t0) < 2500);
  const auto snap = lim.snapshot();
  CHECK(snap.waiting == 0);
  CHECK(snap.granted == 2);  // the 60 and the 30; the cancelled head charged nothing
}

TEST_CASE("cancelling a waiter behind the head leaves the others in order", "[limiter][cancel]") {
  asio::io_context io;
  RateLimiter lim(io.get_executor(), {.requests = 1, .period = 100ms});
  const auto t0 = Clock::now();
  REQUIRE(lim.try_acquire({}) != 0);
  asio::cancellation_signal sig;
  std::vector<int> order;
  Outcome a, b, c;
  lim.async_acquire({}, 0, record(a, &order, 1));
  lim.async_acquire({}, 0, asio::bind_cancellation_slot(sig.slot(), record(b, &order, 2)));
  lim.async_acquire({}, 0, record(c, &order, 3));
  asio::post(io, [&] { sig.emit(asio::cancellation_type::terminal); });
  io.run();
  CHECK(order == std::vector<int>{2, 1, 3});  // b at once, then a and c at their grants
  CHECK(b.ec == asio::error::operation_aborted);
  CHECK_FALSE(a.ec);
  CHECK_FALSE(c.ec);
  CHECK(ms(a.at - t0) >= 100);
  CHECK(ms(c.at - t0) >= 200);  // c took b's place, one period after a
  CHECK(lim.snapshot().granted == 3);
}

TEST_CASE("a coroutine's acquire is cancelled through as_tuple(use_awaitable)",
          "[limiter][cancel]") {
  asio::io_context io;
  RateLimiter lim(io.get_executor(), {.requests = 1, .period = 2s});
  const auto t0 = Clock::now();
  REQUIRE(lim.try_acquire({}) != 0);
  asio::cancellation_signal sig;
  bool done = false;
  std::error_code got;
  RateLimiter::Ticket got_ticket = 99;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto [ec, t] = co_await lim.async_acquire(
            {}, 0,
            asio::bind_cancellation_slot(sig.slot(),
                                         asio::experimental::as_tuple(asio::use_awaitable)));
        got = ec;
        got_ticket = t;
        done = true;
      },
      rethrow);
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        co_await until([&] { return lim.snapshot().waiting == 1; });
        CHECK_FALSE(done);
        sig.emit(asio::cancellation_type::terminal);
      },
      rethrow);
  io.run();
  CHECK(done);
  CHECK(got == asio::error::operation_aborted);
  CHECK(got_ticket == 0);
  CHECK(ms(Clock::now() - t0) < 1000);  // the cancelled head's 2 s timer did not hold run()
  CHECK(lim.snapshot().waiting == 0);
}

TEST_CASE("a cost beyond a budget's whole limit fails with exceeds_rate_limit", "[limiter]") {
  asio::io_context io;

  SECTION("tokens: input + output") {
    RateLimiter lim(io.get_executor(), {.tokens = 100, .period = 10s});
    CHECK(lim.fits(tokens(100)));
    CHECK(lim.fits({.requests = 1, .input_tokens = 60, .output_tokens = 40}));
    CHECK_FALSE(lim.fits(tokens(101)));
    CHECK_FALSE(lim.fits({.requests = 1, .input_tokens = 60, .output_tokens = 41}));
    CHECK(lim.try_acquire(tokens(101)) == 0);

    Outcome cb;
    lim.async_acquire(tokens(101), 0, record(cb));
    bool threw = false;
    run(io, [&]() -> asio::awaitable<void> {
      try {
        co_await lim.acquire({.requests = 1, .output_tokens = 500});
      } catch (const std::system_error& e) {
        threw = true;
        CHECK(e.code() == errc::exceeds_rate_limit);
      }
    });
    CHECK(threw);
    CHECK(cb.calls == 1);
    CHECK(cb.ec == errc::exceeds_rate_limit);
    CHECK(cb.ticket == 0);
    const auto snap = lim.snapshot();
    CHECK(snap.granted == 0);
    CHECK(snap.budgets.at(0).available == 100);  // nothing was charged
  }
  SECTION("each budget by its own kind") {
    RateLimiter lim(io.get_executor(),
                    {.requests = 2, .input_tokens = 50, .output_tokens = 20, .period = 10s});
    CHECK(lim.fits({.requests = 2, .input_tokens = 50, .output_tokens = 20}));
    CHECK_FALSE(lim.fits({.requests = 3}));
    CHECK_FALSE(lim.fits({.requests = 1, .input_tokens = 51}));
    CHECK_FALSE(lim.fits({.requests = 1, .output_tokens = 21}));
    Outcome cb;
    lim.async_acquire({.requests = 1, .output_tokens = 21}, 0, record(cb));
    io.run();
    CHECK(cb.ec == errc::exceeds_rate_limit);
  }
}

TEST_CASE("a huge cost exceeds every budget and a negative cost field counts as zero",
          "[limiter]") {
  asio::io_context io;
  constexpr std::int64_t huge = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t most = std::int64_t{1} << 50;  // RateLimits' largest limit

  SECTION("INT64_MAX input and output: their sum never wraps into a free grant") {
    RateLimiter lim(io.get_executor(), {.requests = 10, .tokens = 1000, .period = 10s});
    const RateCost both{.requests = 1, .input_tokens = huge, .output_tokens = huge};
    CHECK_FALSE(lim.fits({.requests = 1, .input_tokens = huge, .output_tokens = 1}));
    CHECK_FALSE(lim.fits(both));
    CHECK(lim.try_acquire(both) == 0);
    Outcome cb;
    lim.async_acquire(both, 0, record(cb));
    io.run();
    CHECK(cb.calls == 1);
    CHECK(cb.ec == errc::exceeds_rate_limit);
    CHECK(cb.ticket == 0);
    const auto snap = lim.snapshot();
    CHECK(snap.granted == 0);
    REQUIRE(snap.budgets.size() == 2);
    CHECK(snap.budgets[0].available == 10);  // the requests budget was not charged either
  }
  SECTION("INT64_MAX exceeds even budgets of the largest limit") {
    RateLimiter lim(io.get_executor(), {.requests = most, .tokens = most, .input_tokens = most,
                                        .output_tokens = most, .period = 10s});
    CHECK(lim.fits({.requests = most, .input_tokens = most}));
    CHECK_FALSE(lim.fits({.requests = huge}));
    CHECK_FALSE(lim.fits({.requests = 1, .input_tokens = huge}));
    CHECK_FALSE(lim.fits({.requests = 1, .output_tokens = huge}));
    CHECK_FALSE(lim.fits({.requests = 1, .input_tokens = most, .output_tokens = 1}));
    CHECK(lim.try_acquire({.requests = 1, .input_tokens = huge}) == 0);
    CHECK(lim.snapshot().granted == 0);
  }
  SECTION("a negative field neither hides the other's tokens nor refunds") {
    RateLimiter lim(io.get_executor(), {.tokens = 100, .period = 10s});
    // input + output read 50 here: output's 1050 tokens hid behind a negative input
    CHECK_FALSE(lim.fits({.requests = 1, .input_tokens = -1000, .output_tokens = 1050}));
    CHECK(lim.try_acquire({.requests = 1, .input_tokens = -1000, .output_tokens = 1050}) == 0);
    const RateCost estimate{.requests = 1, .input_tokens = -50, .output_tokens = 100};
    const RateLimiter::Ticket ticket = lim.try_acquire(estimate);
    REQUIRE(ticket != 0);
    CHECK(lim.snapshot().budgets.at(0).available == 0);  // charged 100, not 50
    lim.reconcile(ticket, estimate, {.requests = 1, .input_tokens = -1000, .output_tokens = 40});
    CHECK(lim.snapshot().budgets.at(0).available == 60);  // used 40 of the 100
  }
}

TEST_CASE("set_limits below a waiting head's cost fails that waiter, the others keep waiting",
          "[limiter]") {
  asio::io_context io;
  RateLimiter lim(io.get_executor(), {.tokens = 100, .period = 500ms});
  const auto t0 = Clock::now();
  REQUIRE(lim.try_acquire(tokens(100)) != 0);
  Outcome big, small, huge;
  lim.async_acquire(tokens(80), 0, record(big));
  lim.async_acquire(tokens(10), 0, record(small));
  lim.async_acquire(tokens(101), 0, record(huge));  // fails at once, not when its turn comes
  REQUIRE(lim.snapshot().waiting == 2);

  lim.set_limits({.tokens = 50, .period = 500ms});
  CHECK(lim.limits().tokens == 50);
  CHECK(lim.snapshot().budgets.at(0).limit == 50);
  CHECK(lim.snapshot().waiting == 1);  // the 80 can never fit now
  CHECK_FALSE(lim.fits(tokens(80)));
  io.run();

  CHECK(huge.calls == 1);
  CHECK(huge.ec == errc::exceeds_rate_limit);
  CHECK(big.calls == 1);
  CHECK(big.ec == errc::exceeds_rate_limit);
  CHECK(big.ticket == 0);
  CHECK(ms(big.at - t0) < 400);  // failed by set_limits, not when its tokens came back
  CHECK(small.calls == 1);
  CHECK_FALSE(small.ec);
  CHECK(ms(small.at - t0) >= 500);  // the 100 spent before the change stay spent
  CHECK(ms(small.at - t0) < 500 + 1000);
}

TEST_CASE("invalid limits are rejected with invalid_config naming the field", "[limiter]") {
  asio::io_context io;
  CHECK_THROWS_WITH(RateLimiter(io.get_executor(), {.requests = -1}), Catch::Contains("requests"));
  CHECK_THROWS_WITH(RateLimiter(io.get_executor(), {.tokens = 10, .period = 0s}),
                    Catch::Contains("period"));
  CHECK_THROWS_WITH(RateLimiter(io.get_executor(), {.tokens = 10, .period = std::chrono::hours(24 * 400)}),
                    Catch::Contains("period must be at most a year"));
  CHECK_THROWS_WITH(RateLimiter(io.get_executor(), {.tokens = (std::int64_t{1} << 50) + 1}),
                    Catch::Contains("tokens must be at most 2^50"));
  RateLimiter lim(io.get_executor(), {.requests = 5, .period = 10s});
  bool threw = false;
  try {
    lim.set_limits({.output_tokens = -5});
  } catch (const std::system_error& e) {
    threw = true;
    CHECK(e.code() == errc::invalid_config);
    CHECK_THAT(e.what(), Catch::Contains("output_tokens"));
  }
  CHECK(threw);
  CHECK(lim.limits().requests == 5);  // unchanged
  CHECK(lim.try_acquire({}) != 0);
}

TEST_CASE("pause_for holds an otherwise grantable acquire, and one pause counts once",
          "[limiter][pause]") {
  asio::io_context io;
  RateLimiter lim(io.get_executor(), {.requests = 100, .period = 10s});
  CHECK(lim.snapshot().pauses == 0);
  const auto t0 = Clock::now();
  lim.pause_for(200ms);
  lim.pause_for(100ms);  // other workers' echoes of the same 429: one pause, not shortened
  lim.pause_for(150ms);
  lim.pause_for(0ns);  // ignored
  lim.pause_for(-1s);
  const auto paused = lim.snapshot();
  CHECK(paused.pauses == 1);
  CHECK(paused.paused_for_s > 0);
  CHECK(paused.paused_for_s <= 0.2);
  CHECK(lim.try_acquire({}) == 0);  // the budget allows, the pause does not

  Clock::time_point granted_at{};
  run(io, [&]() -> asio::awaitable<void> {
    const RateLimiter::Ticket t = co_await lim.acquire({});
    CHECK(t != 0);
    granted_at = Clock::now();
  });
  CHECK(ms(granted_at - t0) >= 190);
  CHECK(ms(granted_at - t0) < 200 + 1000);

  const auto after = lim.snapshot();
  CHECK(after.paused_for_s == 0);
  CHECK(after.pauses == 1);
  lim.pause_for(50ms);  // the first pause is over: this is a new one
  CHECK(lim.snapshot().pauses == 2);
}

TEST_CASE("a longer pause while a request waits pushes its grant back", "[limiter][pause]") {
  asio::io_context io;
  RateLimiter lim(io.get_executor(), {.requests = 100, .period = 10s});
  const auto t0 = Clock::now();
  lim.pause_for(100ms);
  Outcome o;
  lim.async_acquire({}, 0, record(o));  // waits; the timer is set for the end of the pause
  REQUIRE(lim.snapshot().waiting == 1);
  lim.pause_for(300ms);  // must re-arm the timer, not grant at 100 ms
  io.run();
  CHECK(o.calls == 1);
  CHECK_FALSE(o.ec);
  CHECK(ms(o.at - t0) >= 290);
  CHECK(ms(o.at - t0) < 300 + 1000);
}

TEST_CASE("without budgets only pauses hold grants", "[limiter][pause]") {
  asio::io_context io;
  RateLimiter lim(io.get_executor(), {});
  for (int i = 0; i < 1000; ++i) REQUIRE(lim.try_acquire(tokens(1'000'000)) != 0);
  CHECK(lim.fits(tokens(1'000'000'000)));
  CHECK(lim.snapshot().budgets.empty());
  const auto t0 = Clock::now();
  lim.pause_for(150ms);
  CHECK(lim.try_acquire({}) == 0);
  Outcome o;
  lim.async_acquire({}, 0, record(o));
  io.run();
  CHECK_FALSE(o.ec);
  CHECK(ms(o.at - t0) >= 140);
  CHECK(ms(o.at - t0) < 150 + 1000);
  CHECK(lim.snapshot().granted == 1001);  // the lock-free grants are counted too
  // Nothing was charged for it: a budget added later is not charged when it is reconciled.
  CHECK(o.ticket == RateLimiter::unmetered_ticket);
  lim.set_limits({.tokens = 1000});
  lim.reconcile(o.ticket, {}, tokens(600));
  CHECK(lim.snapshot().budgets.at(0).available == 1000);
  // With a budget the lock-free path is off: grants are charged, and (a period after the
  // pause above) paced as smooth mode paces them: the next one 30 s later.
  lim.set_limits({.requests = 2});
  CHECK(lim.try_acquire({}) != 0);
  CHECK(lim.snapshot().budgets.at(0).available == 1);
  CHECK(lim.try_acquire({}) == 0);
  CHECK_FALSE(lim.fits({.requests = 3}));
  lim.set_limits({});  // and back without budgets
  CHECK(lim.try_acquire({}) != 0);
}

TEST_CASE("a refund from reconcile lets a waiting request through at once", "[limiter]") {
  asio::io_context io;
  RateLimiter lim(io.get_executor(), {.tokens = 100, .period = 1s});
  const auto t0 = Clock::now();
  const RateCost estimate = tokens(100);
  const RateLimiter::Ticket ticket = lim.try_acquire(estimate);
  REQUIRE(ticket != 0);
  Outcome w;
  lim.async_acquire(tokens(50), 0, record(w));  // waits for the estimate to age out (1 s)
  REQUIRE(lim.snapshot().waiting == 1);
  asio::post(io, [&] {
    CHECK(w.calls == 0);
    lim.reconcile(ticket, estimate, tokens(30));  // the call used 30 of the 100 estimated
  });
  io.run();
  CHECK(w.calls == 1);
  CHECK_FALSE(w.ec);
  CHECK(w.ticket != 0);
  CHECK(w.ticket != ticket);
  CHECK(ms(w.at - t0) < 500);  // well before the 1 s period
  CHECK(ms(Clock::now() - t0) < 500);
}

TEST_CASE("reconcile charges an underestimate as debt and refunds a call that never happened",
          "[limiter]") {
  asio::io_context io;
  SECTION("debt") {
    RateLimiter lim(io.get_executor(), {.tokens = 100, .period = 10s});
    const RateLimiter::Ticket ticket = lim.try_acquire(tokens(10));
    REQUIRE(ticket != 0);
    lim.reconcile(ticket, tokens(10), tokens(150));
    CHECK(lim.snapshot().budgets.at(0).available == -50);
    CHECK(lim.try_acquire(tokens(1)) == 0);
    CHECK(lim.fits(tokens(100)));  // it still fits once the debt has aged out
    lim.reconcile(0, tokens(10), tokens(0));  // ticket 0: no grant, nothing happens
    CHECK(lim.snapshot().budgets.at(0).available == -50);
  }
  SECTION("no call made: actual {0, 0, 0}") {
    RateLimiter lim(io.get_executor(), {.requests = 2, .tokens = 100, .period = 10s});
    const RateCost estimate{.requests = 1, .input_tokens = 40, .output_tokens = 20};
    const RateLimiter::Ticket ticket = lim.try_acquire(estimate);
    REQUIRE(ticket != 0);
    lim.reconcile(ticket, estimate, RateCost{0, 0, 0});
    const auto snap = lim.snapshot();
    REQUIRE(snap.budgets.size() == 2);
    CHECK(snap.budgets[0].name == "requests");
    CHECK(snap.budgets[0].available == 2);
    CHECK(snap.budgets[1].name == "tokens");
    CHECK(snap.budgets[1].available == 100);
  }
}

TEST_CASE("an exhausted bucket in the server's headers pauses grants until its reset",
          "[limiter][headers]") {
  asio::io_context io;
  RateLimiter lim(io.get_executor(), {.requests = 100, .period = 10s});
  const auto t0 = Clock::now();
  lim.observe({{"x-ratelimit-limit-requests", "100"},
               {"x-ratelimit-remaining-requests", "0"},
               {"x-ratelimit-reset-requests", "300ms"}});
  CHECK(lim.try_acquire({}) == 0);
  const auto snap = lim.snapshot();
  CHECK(snap.paused_for_s > 0);
  CHECK(snap.paused_for_s <= 0.3);

  Clock::time_point at{};
  run(io, [&]() -> asio::awaitable<void> {
    const RateLimiter::Ticket t = co_await lim.acquire({});
    CHECK(t != 0);
    at = Clock::now();
  });
  CHECK(ms(at - t0) >= 290);
  CHECK(ms(at - t0) < 300 + 1000);
}

TEST_CASE("the same answer's retry-after bounds an exhausted bucket's hold: when to call again, "
          "not when the bucket is full (observe, as a standalone user calls it)",
          "[limiter][headers]") {
  asio::io_context io;
  RateLimiter lim(io.get_executor(), {});
  lim.observe({{"retry-after", "1"},
               {"x-ratelimit-limit-requests", "50"},
               {"x-ratelimit-remaining-requests", "0"},
               {"x-ratelimit-reset-requests", "20s"}});
  CHECK(lim.snapshot().paused_for_s > 0);
  CHECK(lim.snapshot().paused_for_s <= 1.0);  // not 20
  RateLimiter none(io.get_executor(), {});
  none.observe({{"retry-after", "0"},  // no advice: the reset stands
                {"x-ratelimit-remaining-requests", "0"},
                {"x-ratelimit-reset-requests", "20s"}});
  CHECK(none.snapshot().paused_for_s > 19.0);
}

TEST_CASE("an exhausted bucket whose reset is due or past by our clock still holds grants a "
          "moment",
          "[limiter][headers]") {
  // 0 left and a reset of "0s", or an RFC 3339 reset behind our clock (a clock ahead of the
  // server's): it was ignored, so calls went straight into 429s
  asio::io_context io;
  const auto past = "2001-01-01T00:00:00Z";
  for (const laneq::Headers& h : {laneq::Headers{{"x-ratelimit-remaining-requests", "0"},
                                                 {"x-ratelimit-reset-requests", "0s"}},
                                  laneq::Headers{{"anthropic-ratelimit-tokens-remaining", "0"},
                                                 {"anthropic-ratelimit-tokens-reset", past}}}) {
    RateLimiter lim(io.get_executor(), {});
    lim.observe(h);
    CHECK(lim.try_acquire({}) == 0);
    const auto snap = lim.snapshot();
    CHECK(snap.pauses == 1);
    CHECK(snap.paused_for_s > 0.5);
    CHECK(snap.paused_for_s <= 1.0);
  }
  // not exhausted: no hold
  RateLimiter lim(io.get_executor(), {});
  lim.observe({{"x-ratelimit-remaining-requests", "5"}, {"x-ratelimit-reset-requests", "0s"}});
  CHECK(lim.try_acquire({}) != 0);
}

TEST_CASE("the server's lower remaining count is adopted, a higher one ignored",
          "[limiter][headers]") {
  asio::io_context io;
  // The server counts per minute: a per-10 s budget is not comparable and stays as it is.
  RateLimiter ten(io.get_executor(), {.requests = 100, .period = 10s});
  ten.observe({{"x-ratelimit-remaining-requests", "3"}, {"x-ratelimit-reset-requests", "6s"}});
  CHECK(ten.snapshot().budgets.at(0).available == 100);

  RateLimiter lim(io.get_executor(), {.requests = 100, .period = 1min});
  lim.observe({{"x-ratelimit-remaining-requests", "3"}, {"x-ratelimit-reset-requests", "6s"}});
  CHECK(lim.snapshot().budgets.at(0).available == 3);
  for (int i = 0; i < 3; ++i) CHECK(lim.try_acquire({}) != 0);
  CHECK(lim.try_acquire({}) == 0);
  lim.observe({{"x-ratelimit-remaining-requests", "50"}});
  CHECK(lim.snapshot().budgets.at(0).available == 0);
  lim.observe(laneq::Headers{});
  CHECK(lim.snapshot().budgets.at(0).available == 0);

  // exhausted, with no reset the limiter can read: spent here too, not ignored
  RateLimiter blind(io.get_executor(), {.requests = 100, .period = 1min});
  blind.observe({{"x-ratelimit-remaining-requests", "0"}, {"x-ratelimit-reset-requests", "soon"}});
  CHECK(blind.snapshot().budgets.at(0).available == 0);
  CHECK(blind.try_acquire({}) == 0);
}

TEST_CASE("new limits (set_limits, or adopted from the server) fail every waiter that can never "
          "fit now, not only the head",
          "[limiter][headers]") {
  asio::io_context io;
  RateLimiter lim(io.get_executor(), {.tokens = 100, .adopt_server_limits = true});
  const auto t0 = Clock::now();
  REQUIRE(lim.try_acquire(tokens(100)) != 0);
  Outcome small, big;
  lim.async_acquire(tokens(10), 0, record(small));  // the head
  lim.async_acquire(tokens(80), 0, record(big));    // behind it
  REQUIRE(lim.snapshot().waiting == 2);
  SECTION("set_limits") { lim.set_limits({.tokens = 50, .adopt_server_limits = true}); }
  SECTION("adopted") { lim.observe({{"x-ratelimit-limit-tokens", "50"}}); }  // per minute
  CHECK(lim.snapshot().budgets.at(0).limit == 50);
  CHECK(lim.snapshot().waiting == 1);  // was 2: the 80 waited for its turn to fail
  io.run_for(std::chrono::milliseconds(200));  // the 80's completion; the 10 waits a minute
  CHECK(big.calls == 1);
  CHECK(big.ec == errc::exceeds_rate_limit);
  CHECK(ms(big.at - t0) < 30'000);  // not when its turn came, after the head's grant
  CHECK(small.calls == 0);
}

TEST_CASE("server limits are adopted only with adopt_server_limits, scaled to the period",
          "[limiter][headers]") {
  asio::io_context io;
  const laneq::Headers openai{{"x-ratelimit-limit-requests", "600"},
                              {"x-ratelimit-limit-tokens", "90000"}};

  SECTION("off: the configured limits stand") {
    RateLimiter lim(io.get_executor(), {.requests = 50, .tokens = 1000, .period = 10s});
    lim.observe(openai);
    const auto snap = lim.snapshot();
    REQUIRE(snap.budgets.size() == 2);
    CHECK(snap.budgets[0].limit == 50);
    CHECK(snap.budgets[1].limit == 1000);
    CHECK_FALSE(lim.fits(tokens(1001)));
  }
  SECTION("on: per minute, scaled to a 10 s period, up and down") {
    RateLimiter lim(io.get_executor(), {.requests = 50, .tokens = 1000, .period = 10s,
                                        .adopt_server_limits = true});
    lim.observe(openai);
    auto snap = lim.snapshot();
    REQUIRE(snap.budgets.size() == 2);
    CHECK(snap.budgets[0].name == "requests");
    CHECK(snap.budgets[0].limit == 100);  // 600 / min
    CHECK(snap.budgets[1].name == "tokens");
    CHECK(snap.budgets[1].limit == 15000);  // 90000 / min
    CHECK(lim.fits(tokens(15000)));
    CHECK_FALSE(lim.fits(tokens(15001)));

    lim.observe({{"x-ratelimit-limit-requests", "60"}});
    snap = lim.snapshot();
    CHECK(snap.budgets[0].limit == 10);
    CHECK(snap.budgets[1].limit == 15000);
  }
  SECTION("on: Anthropic's input and output budgets") {
    RateLimiter lim(io.get_executor(), {.input_tokens = 1000, .output_tokens = 100,
                                        .period = 30s, .adopt_server_limits = true});
    lim.observe({{"anthropic-ratelimit-input-tokens-limit", "40000"},
                 {"anthropic-ratelimit-output-tokens-limit", "8000"}});
    const auto snap = lim.snapshot();
    REQUIRE(snap.budgets.size() == 2);
    CHECK(snap.budgets[0].name == "input_tokens");
    CHECK(snap.budgets[0].limit == 20000);
    CHECK(snap.budgets[1].name == "output_tokens");
    CHECK(snap.budgets[1].limit == 4000);
  }
  SECTION("on: a kind the config did not set gets a budget of the server's, keeping what was "
          "spent") {
    RateLimiter alone(io.get_executor(), {.adopt_server_limits = true});
    alone.observe(openai);
    auto snap = alone.snapshot();
    REQUIRE(snap.budgets.size() == 2);
    CHECK(snap.budgets[0].limit == 600);
    CHECK(snap.budgets[1].limit == 90000);
    CHECK_FALSE(alone.fits(tokens(90001)));

    RateLimiter some(io.get_executor(), {.requests = 50, .adopt_server_limits = true});
    REQUIRE(some.try_acquire(tokens(10)) != 0);
    some.observe(openai);
    snap = some.snapshot();
    REQUIRE(snap.budgets.size() == 2);
    CHECK(snap.budgets[0].name == "requests");
    CHECK(snap.budgets[0].limit == 600);
    CHECK(snap.budgets[0].available == 599);  // the request spent before stays spent
    CHECK(snap.budgets[1].name == "tokens");
    CHECK(snap.budgets[1].limit == 90000);
  }
  SECTION("on: Anthropic's tokens headers (its most restrictive limit) make no combined budget "
          "beside its input and output ones") {
    RateLimiter lim(io.get_executor(), {.input_tokens = 1000, .output_tokens = 100,
                                        .adopt_server_limits = true});
    lim.observe({{"anthropic-ratelimit-input-tokens-limit", "40000"},
                 {"anthropic-ratelimit-output-tokens-limit", "8000"},
                 {"anthropic-ratelimit-tokens-limit", "8000"},
                 {"anthropic-ratelimit-requests-limit", "50"}});
    const auto snap = lim.snapshot();
    REQUIRE(snap.budgets.size() == 3);
    CHECK(snap.budgets[0].name == "requests");
    CHECK(snap.budgets[1].name == "input_tokens");
    CHECK(snap.budgets[2].name == "output_tokens");
    CHECK(lim.fits({.requests = 1, .input_tokens = 20000, .output_tokens = 4000}));
  }
  SECTION("Anthropic's tokens limit and remaining (its most restrictive bucket) do not cut a "
          "configured combined tokens budget, adopted or not") {
    const bool adopt = GENERATE(false, true);
    INFO("adopt_server_limits " << adopt);
    RateLimiter lim(io.get_executor(), {.tokens = 48000, .adopt_server_limits = adopt});
    lim.observe({{"anthropic-ratelimit-input-tokens-limit", "40000"},
                 {"anthropic-ratelimit-input-tokens-remaining", "39000"},
                 {"anthropic-ratelimit-output-tokens-limit", "8000"},
                 {"anthropic-ratelimit-output-tokens-remaining", "1000"},
                 {"anthropic-ratelimit-tokens-limit", "8000"},
                 {"anthropic-ratelimit-tokens-remaining", "1000"}});
    const auto snap = lim.snapshot();
    const auto tokens = std::find_if(snap.budgets.begin(), snap.budgets.end(),
                                     [](const auto& b) { return b.name == "tokens"; });
    REQUIRE(tokens != snap.budgets.end());
    CHECK(tokens->limit == 48000);      // not 8,000
    CHECK(tokens->available == 48000);  // not 1,000
  }
  SECTION("on: an absurd limit is capped, not overflowed") {
    RateLimiter lim(io.get_executor(), {.tokens = 1000, .period = 10min,
                                        .adopt_server_limits = true});
    lim.observe({{"x-ratelimit-limit-tokens", "9000000000000000000"}});  // x 10 > int64
    CHECK(lim.snapshot().budgets.at(0).limit == std::int64_t{1} << 50);
  }
}

TEST_CASE("io_context::run() returns as soon as nobody waits: no lingering timer", "[limiter]") {
  asio::io_context io;
  RateLimiter lim(io.get_executor(), {.tokens = 100, .period = 2s});
  const auto t0 = Clock::now();
  const RateLimiter::Ticket spent = lim.try_acquire(tokens(100));  // spent for 2 s
  REQUIRE(spent != 0);

  SECTION("nobody waits, even while paused") {
    lim.pause_for(2s);
    io.run();
  }
  SECTION("the head is granted by its timer") {
    lim.set_limits({.tokens = 100, .period = 200ms});  // same shape: the 100 stay spent
    Outcome o;
    lim.async_acquire(tokens(10), 0, record(o));
    io.run();
    CHECK_FALSE(o.ec);
    CHECK(ms(o.at - t0) >= 200);
  }
  SECTION("the head is granted early by a refund") {
    Outcome o;
    lim.async_acquire(tokens(10), 0, record(o));
    asio::post(io, [&] { lim.reconcile(spent, tokens(100), tokens(0)); });
    io.run();
    CHECK(o.calls == 1);
    CHECK_FALSE(o.ec);
  }
  SECTION("the head is cancelled") {
    asio::cancellation_signal sig;
    Outcome o;
    lim.async_acquire(tokens(10), 0, asio::bind_cancellation_slot(sig.slot(), record(o)));
    asio::post(io, [&] { sig.emit(asio::cancellation_type::terminal); });
    io.run();
    CHECK(o.ec == asio::error::operation_aborted);
  }
  SECTION("the head fails after set_limits") {
    Outcome o;
    lim.async_acquire(tokens(80), 0, record(o));
    asio::post(io, [&] { lim.set_limits({.tokens = 50, .period = 2s}); });
    io.run();
    CHECK(o.ec == errc::exceeds_rate_limit);
  }
  CHECK(ms(Clock::now() - t0) < 1000);  // not the 2 s the spent tokens take to come back
  CHECK(lim.snapshot().waiting == 0);
}

TEST_CASE("four threads, four strands, 100 acquires: no window holds more than the budget",
          "[limiter][threads]") {
  constexpr int limit = 25;
  constexpr auto period = 1s;
  // Four threads share two cores here (under TSan too): a completion may run hundreds of ms
  // after its grant (the window arithmetic itself is tested exactly in test_rate_budget).
  constexpr auto slack = 400ms;
  asio::io_context io(4);
  RateLimiter lim(io.get_executor(), {.requests = limit, .period = period});
  std::mutex mu;
  std::vector<Clock::time_point> grants;  // under mu
  std::atomic<int> failures{0}, off_strand{0}, finished{0};
  const auto t0 = Clock::now();
  for (int s = 0; s < 4; ++s) {
    auto strand = asio::make_strand(io);
    for (int c = 0; c < 5; ++c)
      asio::co_spawn(
          strand,
          [&, strand, c]() -> asio::awaitable<void> {
            for (int i = 0; i < 5; ++i) {
              auto [ec, t] = co_await lim.async_acquire({}, c % 2, tuple_awaitable);
              if (ec || t == 0) ++failures;
              if (!strand.running_in_this_thread()) ++off_strand;
              std::lock_guard lock(mu);
              grants.push_back(Clock::now());
            }
            ++finished;
          },
          [&](std::exception_ptr e) {
            if (e) ++failures;
          });
  }
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) threads.emplace_back([&] { io.run(); });
  for (auto& t : threads) t.join();

  CHECK(finished == 20);
  CHECK(failures == 0);
  CHECK(off_strand == 0);  // completions run on the awaiting coroutine's strand
  REQUIRE(grants.size() == 100);
  std::sort(grants.begin(), grants.end());
  // 25 per second: the last 25 grants cannot come before 3 periods have passed.
  CHECK(ms(grants.back() - t0) >= ms(3 * period));
  CHECK(ms(grants.back() - t0) < ms(3 * period) + 3000);
  CHECK(max_in_window(grants, period - slack) <= static_cast<std::size_t>(limit));
  const auto snap = lim.snapshot();
  CHECK(snap.granted == 100);
  CHECK(snap.waiting == 0);
}

TEST_CASE("a ticket from before set_limits rebuilt the budgets never names a later grant",
          "[limiter]") {
  asio::io_context io;
  RateLimiter lim(io.get_executor(), {.tokens = 100, .period = 10s});
  const auto old = lim.try_acquire({.requests = 1, .input_tokens = 60});
  REQUIRE(old != 0);
  lim.set_limits({.requests = 10, .tokens = 100, .period = 10s});  // a budget added: rebuilt
  CHECK(lim.snapshot().budgets.at(1).available == 40);  // the tokens spent stay spent
  CHECK(lim.snapshot().budgets.at(0).available == 10);  // the new budget starts empty
  CHECK(lim.try_acquire({.requests = 1, .input_tokens = 60}) == 0);
  const auto fresh = lim.try_acquire({.requests = 1, .input_tokens = 30});
  REQUIRE(fresh != 0);
  CHECK(fresh != old);
  // Reconciling the old grant refunds its own 60 tokens, not the fresh one's 30.
  lim.reconcile(old, {.requests = 1, .input_tokens = 60}, {.requests = 0, .input_tokens = 0});
  CHECK(lim.snapshot().budgets.at(1).available == 70);
  // switching smooth on keeps it too, and spaces the next grant from the last one
  lim.set_limits({.requests = 10, .tokens = 100, .period = 10s, .smooth = true});
  CHECK(lim.snapshot().budgets.at(1).available == 70);
  CHECK(lim.try_acquire({.requests = 1, .input_tokens = 1}) == 0);  // spaced from the last grant
}

TEST_CASE("an exhausted server bucket pauses even a limiter without that budget",
          "[limiter][headers]") {
  asio::io_context io;
  RateLimiter lim(io.get_executor(), {});
  CHECK(lim.try_acquire({}) != 0);
  lim.observe({{"x-ratelimit-remaining-requests", "0"}, {"x-ratelimit-reset-requests", "2s"}});
  CHECK(lim.try_acquire({}) == 0);
  const auto snap = lim.snapshot();
  CHECK(snap.pauses == 1);
  CHECK(snap.paused_for_s > 1.5);
  CHECK(snap.paused_for_s <= 2.0);
}
