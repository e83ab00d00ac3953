#pragma once
// The state of one async_submit, type-erased over its completion handler. The queue (lib/)
// works with submit_op_base only; the handler type lives in submit_op<Handler>.
//
// Lifetime: reference counted. One reference belongs to the completion path (released on the
// handler's executor just before the handler runs, or when its posted completion is destroyed
// uncalled with the io_context), one to each posted cancellation, and one to a worker whose
// request was resolved by someone else while it still had it (worker_ref). The
// cancellation slot handler is cleared on the handler's executor before the handler runs, which
// is where Asio requires slot operations to happen.
#include <atomic>
#include <cassert>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <system_error>
#include <type_traits>
#include <typeinfo>
#include <utility>

#include <asio/associated_allocator.hpp>
#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/any_io_executor.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/execution/executor.hpp>
#include <asio/execution/outstanding_work.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/prefer.hpp>
#include <asio/post.hpp>
#include <asio/use_awaitable.hpp>

#include "laneq/detail/post.hpp"
#include "laneq/detail/unique_function.hpp"
#include "laneq/metrics.hpp"
#include "laneq/request.hpp"

// Asio's adapters around a coroutine's handler (declared here to keep their headers out).
namespace asio::experimental::detail {
template <typename Handler>
class as_tuple_handler;
}  // namespace asio::experimental::detail
namespace asio::detail {
template <typename Handler>
class redirect_error_handler;
}  // namespace asio::detail

namespace laneq::detail {

class queue_impl;
struct submit_op_base;

// What only a durable request needs (allocated for those alone, so the others stay small).
struct durable_state {
  std::int64_t row = 0;     // the journal's row, once committed (0: not yet)
  bool recovered = false;   // re-queued from the journal at start: nobody awaits it
  std::uint32_t earlier_attempts = 0;  // calls made before a restart (the journal counts all)
  std::uint32_t started_attempts = 0;  // calls started, all runs (as marked in the journal)
  std::uint32_t interrupted = 0;       // earlier runs that ended with its call in flight
  // async_enqueue: the acknowledgement, sent once when the row is committed (or admission failed).
  unique_function<void(std::error_code, std::string)> ack{};
  std::error_code ec{};     // the outcome, held while the journal commits it
  Response result{};
};

// Keeps the handler's executor busy until the handler has run. For an executor of the standard
// model that is the executor itself, preferring outstanding_work.tracked: one executor, where
// executor_work_guard holds two (64 bytes less in every queued request).
template <class Executor, class = void>
class handler_work {
 public:
  explicit handler_work(const Executor& ex) : guard_(ex) {}
  Executor get_executor() const noexcept { return guard_.get_executor(); }

 private:
  asio::executor_work_guard<Executor> guard_;
};

template <class Executor>
class handler_work<Executor, std::enable_if_t<asio::execution::is_executor<Executor>::value>> {
  using tracked_type = std::decay_t<typename asio::prefer_result<
      const Executor&, asio::execution::outstanding_work_t::tracked_t>::type>;

 public:
  explicit handler_work(const Executor& ex) : ex_(track(ex)) {}
  const auto& get_executor() const noexcept { return ex_; }

 private:
  static tracked_type track(const Executor& ex) {
#if !defined(ASIO_NO_TYPEID)
    if constexpr (std::is_same_v<Executor, asio::any_io_executor>) {
      // The usual one, a plain io_context executor: tracked by a bit operation on the concrete
      // type, not through any_executor's type-erased prefer (which builds the result twice).
      using io_type = asio::io_context::executor_type;
      if (ex.target_type() == typeid(io_type))
        return tracked_type(asio::prefer(*ex.template target<io_type>(),
                                         asio::execution::outstanding_work.tracked));
    }
#endif
    return asio::prefer(ex, asio::execution::outstanding_work.tracked);
  }

  tracked_type ex_;
};

// A coroutine's handler (use_awaitable): the coroutine's context is already kept busy, by the
// work guard co_spawn holds for the coroutine's whole life (the handler owns the coroutine, so
// the guard lives while the submit is pending). A second count would be two atomic operations
// per submit for nothing.
template <class Handler>
struct keeps_own_context_busy : std::false_type {};
template <class Executor, class... Ts>
struct keeps_own_context_busy<asio::detail::awaitable_handler<Executor, Ts...>> : std::true_type {};
template <class Handler>  // as_tuple(use_awaitable)
struct keeps_own_context_busy<asio::experimental::detail::as_tuple_handler<Handler>>
    : keeps_own_context_busy<Handler> {};
template <class Handler>  // redirect_error(use_awaitable, ec)
struct keeps_own_context_busy<asio::detail::redirect_error_handler<Handler>>
    : keeps_own_context_busy<Handler> {};

template <class Executor>
class untracked_work {
 public:
  explicit untracked_work(const Executor& ex) : ex_(ex) {}
  const Executor& get_executor() const noexcept { return ex_; }

 private:
  Executor ex_;
};

// Defined in lib/request_queue.cpp.
void queue_admit(queue_impl* q, submit_op_base* op);
void queue_cancel(queue_impl* q, submit_op_base* op, asio::cancellation_type type);
// The Response box a refused completion post hands back (submit_op::post_boxed), per thread.
inline thread_local void* refused_box = nullptr;

struct submit_op_base {
  // journaling: a durable request's row is being committed (admission continues after).
  // retry_wait: a failed attempt waits out its back-off before going back to its lane.
  enum class state : std::uint8_t { created, journaling, waiting, queued, in_flight, retry_wait, done };

  // The request is moved in once: each Request move costs its strings, vector, json and function.
  template <class R>
  submit_op_base(R&& r, const SubmitOptions& o) : request(std::forward<R>(r)), options(o) {}
  submit_op_base(const submit_op_base&) = delete;
  submit_op_base& operator=(const submit_op_base&) = delete;

  // Resolves the caller: stores the result and posts the handler to its executor. Exactly once.
  void complete(std::error_code ec, Response&& r) {
    resolve();
    deliver(ec, std::move(r));
  }
  // The two halves, for a durable request whose result waits for its journal commit: resolved
  // at once (nothing else may touch it), delivered after the commit.
  void resolve() {
    assert(st != state::done && "a submit must complete exactly once");
    st = state::done;
  }
  void deliver(std::error_code ec, Response&& r) {
    if (durable && durable->ack) {  // admission failed before the acknowledgement
      std::exchange(durable->ack, nullptr)(ec, std::string(request.id));
      deliver_result = false;
    }
    post_completion(ec, std::move(r));
  }

  void add_ref() noexcept { refs.fetch_add(1, std::memory_order_relaxed); }
  void release() noexcept {
    if ((refs.fetch_sub(1, std::memory_order_acq_rel) & ~flags) == 1) destroy();
  }
  // The completion path's release, as its handler is about to run (nobody can take a new
  // reference then). True: it was the last. Otherwise the op is marked, so that the last
  // holder (a worker, a posted cancel) knows the handler has run.
  bool release_before_handler() noexcept {
    return (refs.fetch_add(handler_ran - 1, std::memory_order_acq_rel) & ~flags) == 1;
  }
  // The same for a completion destroyed unrun (its executor's context destroyed), whose
  // handler ended there: the last holder only gives the memory back.
  bool release_without_handler() noexcept {
    return (refs.fetch_add(handler_ran + handler_gone - 1, std::memory_order_acq_rel) & ~flags) ==
           1;
  }
  // For the last holder: its release synchronized with the mark.
  bool handler_has_run() const noexcept {
    return (refs.load(std::memory_order_relaxed) & handler_ran) != 0;
  }
  bool handler_is_gone() const noexcept {
    return (refs.load(std::memory_order_relaxed) & handler_gone) != 0;
  }
  // A reference held by something Asio may destroy without running (a posted function, a
  // coroutine frame): dropped either way.
  struct releaser {
    void operator()(submit_op_base* op) const noexcept { op->release(); }
  };
  template <class Op = submit_op_base>
  using ref = std::unique_ptr<Op, releaser>;

  Request request;
  SubmitOptions options;
  // Bookkeeping owned by the queue (touched on its strand only). Every queued request carries
  // it, so it is packed: no padding, and one slot for the links no two states need at once.
  state st = state::created;
  bool cancel_requested = false;
  bool deliver_result = true;  // false: the handler is dropped uncalled (a failed enqueue)
  std::uint8_t attempts = 0;   // provider calls made (RetryPolicy::max_attempts <= 100)
  // Resolved by someone else (cancel, deadline, shutdown) while a worker still has it: the
  // worker holds a reference, which it drops when it is done with the request.
  bool worker_ref = false;
  // A provider call of the current attempt began (and has not ended in a retry): the service
  // time is that call's. (In the byte of padding before `lane`.)
  bool in_call = false;
  std::uint16_t lane = 0;      // < 64 lanes
  std::int32_t prompt_tokens = 0;  // prompt estimate, made once at admission

 private:
  static constexpr int handler_ran = 1 << 30;  // flags beside the count, in the same atomic
  static constexpr int handler_gone = 1 << 29;  // (with handler_ran: it ended without running)
  static constexpr int flags = handler_ran | handler_gone;
  std::atomic<int> refs{1};

 public:
  struct links {
    submit_op_base* prev;
    submit_op_base* next;
  };
  struct scheduled {
    // queued: the scheduler's id (for remove). Taken by a worker: the scheduler's seq, so a
    // retry goes back to its original place.
    std::uint64_t id;
    // Taken by a worker (and between attempts): when its attempt started.
    std::chrono::steady_clock::duration started;  // since the clock's epoch
  };
  union {
    // created: `wait.next` links the intake. waiting: the waiting-for-room list.
    links wait{nullptr, nullptr};
    // From queued on (the links are dead by then): 8 bytes less per request.
    scheduled sched;
  };
  std::chrono::steady_clock::time_point started_at() const noexcept {
    return std::chrono::steady_clock::time_point(sched.started);
  }
  Metrics::ClientRef client_ref{};
  std::chrono::steady_clock::time_point submitted_at{};
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  std::unique_ptr<durable_state> durable{};  // SubmitOptions::durable or recovered

 protected:
  virtual ~submit_op_base() = default;
  // The result travels with the posted completion, so a queued op carries no Response.
  virtual void post_completion(std::error_code ec, Response&& r) = 0;
  virtual void destroy() noexcept = 0;
};

// Its memory comes from the handler's associated allocator (Asio's rule for an operation's
// memory: asio::bind_allocator lets a caller give a pool or an arena), and is given back before
// the handler is called, so the handler may reuse it.
template <class Handler>
class submit_op final : public submit_op_base {
  using alloc_type = typename std::allocator_traits<
      asio::associated_allocator_t<Handler>>::template rebind_alloc<submit_op>;
  using alloc_traits = std::allocator_traits<alloc_type>;
  // std::allocator may be called from any thread: an op that outlives its handler goes back to
  // it wherever its last holder lets go. Any other allocator gets it back on the handler's
  // executor, which must then still run: its work is counted until then.
  static constexpr bool gives_back_anywhere =
      std::is_same_v<alloc_type, std::allocator<submit_op>>;
  // A coroutine's context is kept busy by co_spawn until the coroutine ends, which may be
  // before a late give-back: only where that needs no post is the count left to co_spawn.
  static constexpr bool counts_no_work =
      keeps_own_context_busy<Handler>::value && gives_back_anywhere;

 public:
  using executor_type = asio::associated_executor_t<Handler, asio::any_io_executor>;

  // async_submit: the handler is there at once.
  template <class R>
  static submit_op* create(Handler h, R&& r, const SubmitOptions& o,
                           const asio::any_io_executor& io_ex) {
    alloc_type a(asio::get_associated_allocator(h));
    unbound_ptr op(make(a, std::forward<R>(r), o));
    op->bind(std::move(h), io_ex);
    return op.release();
  }

  // submit(): the op, and the Request moved into it once, exist before the handler, which comes
  // when the awaitable is co_awaited (so the allocator is the default one of the handler's
  // type). Until bind(), only an unbound_ptr may end it.
  struct unbound_deleter {
    void operator()(submit_op* op) const noexcept { op->deallocate_self(); }
  };
  using unbound_ptr = std::unique_ptr<submit_op, unbound_deleter>;
  template <class R>
  static unbound_ptr create_unbound(R&& r, const SubmitOptions& o) {
    static_assert(std::is_default_constructible_v<alloc_type>,
                  "submit() binds its handler late: its allocator must be default-constructible");
    return unbound_ptr(make(alloc_type(), std::forward<R>(r), o));
  }

  void bind(Handler h, const asio::any_io_executor& io_ex) {
    ::new (static_cast<void*>(&b_)) bound(std::move(h), io_ex);
  }

  // Cancellation: installed in the caller's slot at initiation; it only forwards to the strand.
  // It does not own the queue's state: the slot is cleared on the handler's executor, which may
  // come after the queue's io_context is gone, and the last owner would destroy the queue's
  // strand and timer there. A cancel after the queue's state is gone finds nothing to do: the
  // RequestQueue's destruction completed every op.
  void install_cancellation(const std::shared_ptr<queue_impl>& q) {
    auto slot = asio::get_associated_cancellation_slot(b_.handler);
    if (slot.is_connected()) slot.template emplace<canceller>(q, this);
  }

 private:
  struct bound {
    bound(Handler h, const asio::any_io_executor& io_ex)
        : handler(std::move(h)), work(asio::get_associated_executor(handler, io_ex)) {}
    Handler handler;
    std::conditional_t<counts_no_work, untracked_work<executor_type>, handler_work<executor_type>>
        work;
  };

  struct canceller {
    std::weak_ptr<queue_impl> q;
    submit_op_base* op;
    canceller(const std::shared_ptr<queue_impl>& queue, submit_op_base* o) : q(queue), op(o) {}
    void operator()(asio::cancellation_type type) const {
      if (type == asio::cancellation_type::none) return;
      if (const auto queue = q.lock()) queue_cancel(queue.get(), op, type);  // it weighs `type`
    }
  };

  // Posted to the handler's executor; the op stays alive through its reference. The Response
  // rides on the heap (the handler's allocator): Asio moves a posted function several times,
  // and a Response move costs more than the allocation.
  // Destroyed uncalled (its io_context destroyed first), it drops the op and so the handler.
  using response_alloc = typename alloc_traits::template rebind_alloc<Response>;
  struct response_deleter {
    [[no_unique_address]] response_alloc a;
    void operator()(Response* r) const noexcept {
      r->~Response();
      response_alloc al(a);
      std::allocator_traits<response_alloc>::deallocate(al, r, 1);
    }
  };
  // A completion destroyed unrun (its executor's io_context destroyed with it) ends the
  // handler and the work it counts there and then, as Asio's own do: a worker may hold the op
  // longer (a call that timed out, or was aborted), and would otherwise end them after that
  // context is gone (the work count in freed memory).
  struct unrun_releaser {
    void operator()(submit_op* op) const noexcept { op->drop_unrun(); }
  };
  using completion_ref = std::unique_ptr<submit_op, unrun_releaser>;
  void drop_unrun() noexcept {
    // (The slot is left alone, as Asio's operations leave theirs: its signal may be gone
    // already, destroyed before the io_context by its owner.)
    b_.~bound();
    if (release_without_handler()) deallocate_self();
  }

  struct invoker {
    completion_ref op;
    std::error_code ec;
    std::unique_ptr<Response, response_deleter> response;
    using allocator_type = asio::associated_allocator_t<Handler>;
    allocator_type get_allocator() const noexcept {
      return asio::get_associated_allocator(op->b_.handler);
    }
    void operator()() {
      if constexpr (gives_back_anywhere) {  // std::allocator: when the box goes back is moot
        op.release()->invoke(ec, std::move(*response));
      } else {
        invoke_unboxed(op, ec, response);
      }
    }
  };

  // The Response in a box from the handler's allocator (see above).
  std::unique_ptr<Response, response_deleter> boxed_response(Response& r) {
    response_alloc a(alloc_);
    Response* box = std::allocator_traits<response_alloc>::allocate(a, 1);
    ::new (static_cast<void*>(box)) Response(std::move(r));
    return {box, response_deleter{a}};
  }

  // Out of its box first: the box goes back to where it came from before the handler runs, as
  // Asio's own operations do (a handler may own that memory).
  template <class Box>
  static void invoke_unboxed(completion_ref& op, std::error_code ec, Box& box) {
    Response r(std::move(*box));
    box.reset();
    op.release()->invoke(ec, std::move(r));
  }

  // A post that was refused hands its box, and the op's reference it carries, back instead of
  // freeing them (see post_boxed).
  struct guarded_invoker : invoker {
    explicit guarded_invoker(invoker&& i) : invoker(std::move(i)) {}
    guarded_invoker(guarded_invoker&&) = default;
    ~guarded_invoker() {
      if (this->response && this->response.get() == refused_box) {
        refused_box = nullptr;
        (void)this->response.release();
        (void)this->op.release();
      }
    }
  };

  void post_completion(std::error_code ec, Response&& r) override {
    static_assert(std::is_nothrow_move_constructible_v<Response>);
    if constexpr (gives_back_anywhere) {  // std::allocator: only an out-of-memory refuses
      detail::post(b_.work.get_executor(), invoker{completion_ref(this), ec, boxed_response(r)});
    } else {
      // A caller's allocator may refuse (a bounded pool): the handler must not be lost to it.
      // Then the Response and the post go on the heap instead.
      bool posted = false;
      try {
        posted = post_boxed(ec, r);
      } catch (...) {  // the box was refused: `r` is untouched
      }
      if (!posted) post_on_heap(ec, std::move(r));
    }
  }

  // In a box from the handler's allocator; false (the Response back in `r`) if the post was
  // refused. Asio 1.22 moves the function before it allocates its operation, and a refusal
  // destroys that copy: while posting, the box's address is in `refused_box`, and an invoker
  // destroyed holding it gives it back instead of freeing it.
  bool post_boxed(std::error_code ec, Response& r) {
    auto boxed = boxed_response(r);
    Response* const box = boxed.get();
    const response_deleter give_back_box = boxed.get_deleter();
    refused_box = box;
    try {
      detail::post(b_.work.get_executor(),
                   guarded_invoker(invoker{completion_ref(this), ec, std::move(boxed)}));
    } catch (...) {
      if (refused_box != nullptr) {  // not handed back: the function lives on where it is
        refused_box = nullptr;
        return true;
      }
      std::unique_ptr<Response, response_deleter> back(box, give_back_box);
      r = std::move(*back);
      return false;  // and the op's reference is ours again, for the heap's post
    }
    refused_box = nullptr;
    return true;
  }

  struct heap_invoker {  // no associated allocator: Asio's default
    completion_ref op;
    std::error_code ec;
    std::unique_ptr<Response> response;
    void operator()() { invoke_unboxed(op, ec, response); }
  };
  void post_on_heap(std::error_code ec, Response&& r) {
    detail::post(b_.work.get_executor(),
                 heap_invoker{completion_ref(this), ec, std::make_unique<Response>(std::move(r))});
  }

  void invoke(std::error_code ec, Response&& r) {
    auto slot = asio::get_associated_cancellation_slot(b_.handler);
    if (slot.is_connected()) slot.clear();
    Handler h(std::move(b_.handler));
    const bool call = deliver_result;
    if constexpr (gives_back_anywhere) {
      // The handler's remains and its executor end here, on the handler's executor, whoever
      // lets go of the memory: a late last holder (on the queue's strand) must not destroy a
      // coroutine's strand whose io_context may be gone by then.
      // (The work guard ends with this block, before the handler runs: we run on the
      // handler's executor, whose context is busy running us anyway.)
      auto work = std::move(b_.work);
      b_.~bound();
      if (release_before_handler()) deallocate_self();
    } else {
      if (release_before_handler()) {
        auto work = std::move(b_.work);  // (ends with this block, as above)
        give_back();
      }
    }
    // Else a worker or a posted cancel lets go later, on the queue's strand: the memory then
    // goes back to std::allocator there, or to any other allocator here, on the handler's
    // executor (kept busy until then by b_.work): one submit's calls to its allocator never
    // overlap. (Different submits' may, on an executor of several threads, as with Asio.)
    if (call) std::move(h)(ec, std::move(r));
  }

  // The op's memory goes back to the handler's allocator on the handler's executor; if that
  // never runs (its io_context destroyed), when the posted function is destroyed.
  struct giver {
    submit_op* op;
    explicit giver(submit_op* o) noexcept : op(o) {}
    giver(giver&& o) noexcept : op(std::exchange(o.op, nullptr)) {}
    giver& operator=(giver&&) = delete;
    ~giver() {
      if (op != nullptr) op->give_back();
    }
    void operator()() { std::exchange(op, nullptr)->give_back(); }
  };
  void give_back() noexcept {
    b_.~bound();
    deallocate_self();
  }

  template <class R>
  submit_op(const alloc_type& a, R&& r, const SubmitOptions& o)
      : submit_op_base(std::forward<R>(r), o), alloc_(a) {}
  ~submit_op() override {}  // b_ is destroyed by destroy(); an unbound op never had one

  template <class R>
  static submit_op* make(alloc_type a, R&& r, const SubmitOptions& o) {
    submit_op* p = alloc_traits::allocate(a, 1);
    try {
      ::new (static_cast<void*>(p)) submit_op(a, std::forward<R>(r), o);
    } catch (...) {
      alloc_traits::deallocate(a, p, 1);
      throw;
    }
    return p;
  }
  void deallocate_self() noexcept {
    alloc_type a(std::move(alloc_));
    this->~submit_op();
    alloc_traits::deallocate(a, this, 1);
  }
  void destroy() noexcept override {
    if (handler_is_gone()) return deallocate_self();  // its executor is gone: here
    if constexpr (gives_back_anywhere) {
      if (handler_has_run()) return deallocate_self();  // b_ ended in invoke()
      return give_back();
    }
    if (handler_has_run()) {
      try {
        return detail::post(b_.work.get_executor(), giver(this));
      } catch (...) {
        // No memory for the post (or an executor that throws): the giver, destroyed unposted,
        // gave the op back here, on this thread. Better than terminating in a noexcept path.
        return;
      }
    }
    give_back();
  }

  [[no_unique_address]] alloc_type alloc_;  // std::allocator: no bytes
  union {
    bound b_;  // from bind()
  };
};

}  // namespace laneq::detail
