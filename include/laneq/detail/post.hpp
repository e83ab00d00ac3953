#pragma once
// post(ex, f): asio::post(ex, f) without the two heap allocations Asio 1.22 spends when `ex` is
// a strand of an any_io_executor (the queue's strand, laneq::CallExecutor), directly or inside
// an any_io_executor:
//  - prefer(blocking.never, ...) on an any_io_executor that holds a strand builds a new strand
//    object, too big for any_executor's small buffer, so it goes to the heap;
//  - the strand's execute() queries its inner any_io_executor's blocking property, and
//    any_executor returns class-type query results on the heap.
// The strand's own post() member does neither. Other executors go through asio::post.
#include <memory>
#include <type_traits>
#include <typeinfo>
#include <utility>

#include <asio/any_io_executor.hpp>
#include <asio/post.hpp>
#include <asio/strand.hpp>

namespace laneq::detail {

template <class Executor, class F>
void post(const Executor& ex, F&& f) {
#if defined(ASIO_NO_TS_EXECUTORS)  // no strand::post member: the plain way
  asio::post(ex, std::forward<F>(f));
#else
  using strand_type = asio::strand<asio::any_io_executor>;
  if constexpr (std::is_same_v<Executor, strand_type>) {
    ex.post(std::forward<F>(f), std::allocator<void>());
  } else if constexpr (std::is_same_v<Executor, asio::any_io_executor>) {
#if !defined(ASIO_NO_TYPEID)
    // target<T>() does not check the type in Asio 1.22: target_type() does.
    if (ex.target_type() == typeid(strand_type))
      return ex.template target<strand_type>()->post(std::forward<F>(f), std::allocator<void>());
#endif
    asio::post(ex, std::forward<F>(f));
  } else {
    asio::post(ex, std::forward<F>(f));
  }
#endif
}

}  // namespace laneq::detail
