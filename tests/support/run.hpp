#pragma once
// Test helpers: run a coroutine to completion on an io_context and rethrow its exception; run
// an io_context until a condition holds.
#include <chrono>
#include <exception>
#include <functional>
#include <stdexcept>
#include <utility>

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>

#include "laneq/request.hpp"

namespace laneq::test {

// A failure (a Catch REQUIRE, an unexpected exception) stops the loop: a queue not shut down
// keeps io.run() busy for ever, which hung the test and hid the failure.
// (Not a template: compiled once in support/run.cpp instead of co_spawn's machinery once per
// test's lambda, a sixth of the largest test file's compile time.)
void run(asio::io_context& io, const std::function<asio::awaitable<void>()>& make);

// Runs `io` a handler at a time until `done()` holds, so the loop is the caller's in between
// (e.g. to destroy a queue while nothing runs it). Bounded: a hang throws after 30 s instead of
// timing the test out.
inline void run_until(asio::io_context& io, const std::function<bool()>& done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!done()) {
    if (std::chrono::steady_clock::now() >= until)
      throw std::runtime_error("run_until: the condition did not hold within 30 s");
    if (io.stopped()) io.restart();
    io.run_one_for(std::chrono::milliseconds(10));
  }
}

// Inside a coroutine on the loop: lets the loop run until `done()` holds (for what other
// handlers bring about, e.g. calls in flight), instead of a timer that guesses how long that
// takes. Throws after 30 s.
inline asio::awaitable<void> wait_until(std::function<bool()> done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!done()) {
    if (std::chrono::steady_clock::now() >= until)
      throw std::runtime_error("wait_until: the condition did not hold within 30 s");
    co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
  }
}

// For handlers, not coroutines: runs `then` on `ex` once `done()` holds, checked once per turn
// of the loop (so a test acts when a call is in flight, not after a guessed delay). Throws out
// of the loop's run() after 30 s.
inline void when(const asio::any_io_executor& ex, std::function<bool()> done,
                 std::function<void()> then,
                 std::chrono::steady_clock::time_point until = std::chrono::steady_clock::now() +
                                                               std::chrono::seconds(30)) {
  asio::post(ex, [ex, done = std::move(done), then = std::move(then), until]() mutable {
    if (done()) return then();
    if (std::chrono::steady_clock::now() >= until)
      throw std::runtime_error("when: the condition did not hold within 30 s");
    when(ex, std::move(done), std::move(then), until);
  });
}

inline Request chat(std::string text = "hello", std::int32_t max_tokens = 32) {
  return Request{.model = "sim-1", .messages = {{"user", std::move(text)}},
                 .max_tokens = max_tokens};
}

}  // namespace laneq::test
