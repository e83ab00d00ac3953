#pragma once
// post(ex, f): asio::post(ex, f), minus what Asio 1.22 spends on the type-erased executors the
// queue lives on, for the two it meets most:
//  - a strand of an any_io_executor (the queue's strand, laneq::CallExecutor), directly or
//    inside an any_io_executor. asio::post allocates twice there: prefer(blocking.never, ...)
//    on an any_io_executor holding a strand builds a new strand object, too big for
//    any_executor's small buffer; and the strand's execute() queries its inner any_io_executor's
//    blocking property, which any_executor returns on the heap. The strand's own post() member
//    does neither.
//  - an io_context executor inside an any_io_executor (a caller's handler by default): posted
//    to the concrete executor, the three prefer() calls are bit operations instead of three
//    type-erased copies; a tracked one is posted untracked (its copies would each count work).
// The function's associated allocator is kept. Other executors go through asio::post.
#include <type_traits>
#include <typeinfo>
#include <utility>

#include <asio/any_io_executor.hpp>
#include <asio/associated_allocator.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/strand.hpp>

namespace laneq::detail {

template <class Executor, class F>
void post(const Executor& ex, F&& f) {
#if defined(ASIO_NO_TS_EXECUTORS)  // no strand::post member: the plain way
  asio::post(ex, std::forward<F>(f));
#else
  using strand_type = asio::strand<asio::any_io_executor>;
  using io_type = asio::io_context::executor_type;
  using io_tracked_type = std::decay_t<typename asio::prefer_result<
      io_type, asio::execution::outstanding_work_t::tracked_t>::type>;
  if constexpr (std::is_same_v<Executor, strand_type>) {
    const auto alloc = asio::get_associated_allocator(f);
    ex.post(std::forward<F>(f), alloc);
  } else if constexpr (std::is_same_v<Executor, asio::any_io_executor>) {
#if !defined(ASIO_NO_TYPEID)
    // target<T>() does not check the type in Asio 1.22: target_type() does. Most likely first
    // (a caller's completion: a tracked io_context executor); a type_info comparison that
    // fails compares the names.
    const std::type_info& t = ex.target_type();
    if (t == typeid(io_tracked_type))  // the posted function counts as work by itself; every
      // copy of a tracked executor (asio::post makes three) is an atomic add and subtract
      return asio::post(asio::require(*ex.template target<io_tracked_type>(),
                                      asio::execution::outstanding_work.untracked),
                        std::forward<F>(f));
    if (t == typeid(io_type)) return asio::post(*ex.template target<io_type>(), std::forward<F>(f));
    if (t == typeid(strand_type))
      return detail::post(*ex.template target<strand_type>(), std::forward<F>(f));
#endif
    asio::post(ex, std::forward<F>(f));
  } else {
    asio::post(ex, std::forward<F>(f));
  }
#endif
}

}  // namespace laneq::detail
