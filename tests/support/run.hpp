#pragma once
// Test helpers: run a coroutine to completion on an io_context and rethrow its exception.
#include <exception>
#include <utility>

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>

#include "laneq/request.hpp"

namespace laneq::test {

template <class MakeAwaitable>
void run(asio::io_context& io, MakeAwaitable&& make) {
  std::exception_ptr error;
  bool finished = false;
  asio::co_spawn(io, std::forward<MakeAwaitable>(make)(), [&](std::exception_ptr e) {
    error = e;
    finished = true;
  });
  io.run();
  if (error) std::rethrow_exception(error);
  if (!finished) throw std::runtime_error("test coroutine did not finish (io ran out of work)");
}

inline Request chat(std::string text = "hello", std::int32_t max_tokens = 32) {
  return Request{.model = "sim-1", .messages = {{"user", std::move(text)}},
                 .max_tokens = max_tokens};
}

}  // namespace laneq::test
