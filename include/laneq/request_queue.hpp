#pragma once
// RequestQueue: priority lanes + fair scheduling in front of a Provider, inside the user's own
// io_context. State lives on a strand; a fixed set of worker coroutines (co_spawned by start())
// take requests from the Scheduler and call the Provider; each submit completes exactly once.
//
//   laneq::RequestQueue queue{io.get_executor(), provider, {.workers = 8, .reserved_workers = 2}};
//   queue.start();
//   laneq::Response r = co_await queue.submit(req, {.priority = laneq::Priority::critical});
//
// Lifetime: destroy the queue when no thread runs its io_context (after run() returned, or from
// a handler of a one-thread loop); shutdown() first is the orderly way. Destroying it is a
// shutdown without drain that cannot wait: every request it still holds completes with
// shutting_down (handlers posted as usual) and in-flight calls are aborted; what they leave
// finishes on the next run() or goes with the io_context. The Provider must outlive the queue,
// and the calls a destroyed queue aborted (that next run(), or the io_context). With a journal,
// the destructor waits for the journal's writer thread to commit what it holds: never drop the
// last owner of a queue inside a Journal completion (flush, lookup, list), which runs on that
// thread (it would wait for itself).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include <asio/any_io_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/awaitable.hpp>

#include "laneq/detail/submit_op.hpp"
#include "laneq/error.hpp"
#include "laneq/metrics.hpp"
#include "laneq/priority.hpp"
#include "laneq/provider.hpp"
#include "laneq/rate_limiter.hpp"
#include "laneq/request.hpp"
#include "laneq/retry_policy.hpp"
#include "laneq/store/journal.hpp"
#include "laneq/token_estimate.hpp"

namespace laneq {

// What a lane does when the queue holds max_pending requests.
enum class WhenFull { wait, reject };

// What a client's turn in its lane pays for (deficit round-robin's cost of a request).
//   requests: SubmitOptions::cost (1 by default): clients share the lane's requests.
//   tokens:   the request's token estimate, as the rate limiter charges it (prompt estimate +
//             max_tokens, at least 1; SubmitOptions::cost is not used): clients share the
//             lane's tokens, so a tenant of long prompts cannot take most of a TPM budget.
enum class FairShare { requests, tokens };

struct LaneConfig {
  Priority priority = Priority::normal;
  std::string name{};                        // for metrics; "" = priority_name() or "p<N>"
  std::chrono::milliseconds timeout{0};      // default deadline (queue wait + call); 0 = none
  std::chrono::milliseconds age_step{0};     // aging: one lane better per age_step; 0 = off
  bool reserved = false;                     // reserved workers serve only reserved lanes
  WhenFull when_full = WhenFull::wait;       // backpressure: wait for room, or fail queue_full
};

// critical (reserved, 30 s), high (60 s), normal (2 min), low (5 min), background (10 min);
// all wait for room when full; no aging.
std::vector<LaneConfig> default_lanes();

struct QueueConfig {
  std::size_t workers = 8;                   // worker coroutines (= max calls in flight), 1..65,536
  std::size_t reserved_workers = 0;          // of `workers`, serving reserved lanes only; < workers
  std::size_t max_pending = 100'000;         // queued requests (all lanes), >= 1; beyond: wait
                                             // for room (best lane first) or queue_full
  std::size_t max_pending_per_client = 0;    // queued + waiting; 0 = unlimited; beyond ->
                                             // client_queue_full
  std::vector<LaneConfig> lanes = default_lanes();
  std::uint32_t quantum = 1;                 // DRR cost units per weight per turn, >= 1
  FairShare fair_share = FairShare::requests;  // what a turn pays for: requests or tokens
  std::map<std::string, std::uint32_t> client_weights{};  // DRR weights (default 1), each >= 1
  std::size_t metrics_max_clients = 1000;    // distinct clients tracked in metrics

  // Rate limits (none by default). Workers acquire {1 request, prompt estimate + max_tokens}
  // (reserved_output_tokens: extra's max_tokens too) before each call and reconcile with the
  // reported usage after it. A request whose estimate exceeds a whole budget fails at submit
  // with exceeds_rate_limit; a prompt estimate above 2^31 - 1 with request_too_large.
  RateLimits rate_limits{};
  // Separate budgets per Request::model (a cheap model's budget is not the expensive one's);
  // models not listed use rate_limits.
  std::map<std::string, RateLimits> model_rate_limits{};
  RetryPolicy retry{};
  PromptEstimator prompt_estimator{};        // default: estimate_prompt_tokens (~4 bytes/token)
  // Reserved when Request::max_tokens is 0, >= 0: what the provider sends then (Anthropic's
  // AnthropicConfig::default_max_tokens, 4096 too); a different value is reconciled only when
  // the call reports its usage.
  std::int64_t default_max_tokens = 4096;
  // Jitter source for retry back-off, uniform in [0, 1); default: a seeded mt19937_64. Values
  // outside are clamped; if it throws (or gives NaN), the default stands in for that draw.
  std::function<double()> random{};

  // Durability (opt-in; docs/journal.md). With a journal, a request submitted with
  // SubmitOptions::durable is committed to it before it is queued, its outcome after it
  // resolves; at construction the rows an earlier run left open are queued again (their
  // original lane, client and enqueue time). `journal = "run.db"` opens one;
  // `journal_store` shares a journal you opened (it wins over `journal`), e.g. to read it;
  // one queue per journal: the first to open it recovers every open row (rows a destroyed
  // queue left pending wait for the file's next Journal::open, not for a later queue).
  JournalConfig journal{};
  std::shared_ptr<Journal> journal_store{};
  // Durable requests nobody awaits (recovered at construction, or async_enqueue'd) report here,
  // once each, on the queue's executor, after their outcome is committed: on a loop of several
  // threads, two reports may run at once (make it thread-safe, or post to a strand of yours).
  // Not called for one a shutdown leaves pending: it runs again next time. It runs as a
  // handler: an exception it throws leaves io_context::run() (the outcome stays committed).
  std::function<void(std::string_view id, std::error_code, const Response&)> on_durable_result{};
  // A recovered request whose call was in flight when this many runs ended (a crash, kill -9:
  // JournalRecord::interrupted) is not called again: it fails with interrupted_too_often, since
  // it may be what ends the process. 0 = no limit (it runs again after every restart).
  std::uint32_t max_interrupted_runs = 3;
};

struct ShutdownOptions {
  bool drain = true;  // true: finish queued + in-flight; false: fail queued with shutting_down
};

// Thrown by the coroutine wrappers; carries the Response: the provider's answer when there was
// one (status != 0), else laneq's or the transport's reason in error_message.
class RequestError : public std::system_error {
 public:
  RequestError(std::error_code ec, Response r)
      : std::system_error(ec, what_of(r)), response_(std::move(r)) {}
  const Response& response() const noexcept { return response_; }

 private:
  static std::string what_of(const Response& r) {
    std::string w = "laneq request failed";
    if (r.status != 0)
      w += " (HTTP " + std::to_string(r.status) +
           (r.error_message.empty() ? ")" : " from the provider: " + r.error_message + ")");
    else if (!r.error_message.empty())
      w += " (" + r.error_message + ")";
    return w;
  }
  Response response_;
};

// Every member may be called from any thread: the queue's state lives on its strand, and entry
// points post there.
class RequestQueue {
 public:
  using executor_type = asio::any_io_executor;

  // Throws std::system_error(errc::invalid_config) naming the bad field, or (errc::journal) when
  // QueueConfig::journal names a file that cannot be opened (locked, corrupt, unwritable).
  RequestQueue(executor_type ex, Provider& provider, QueueConfig config = {});
  ~RequestQueue();
  RequestQueue(const RequestQueue&) = delete;
  RequestQueue& operator=(const RequestQueue&) = delete;

  // co_spawns the worker coroutines, once. Submits made before start() wait in the queue (one
  // whose deadline passes before it fails with not_started). After shutdown it does nothing.
  void start();

  // Queues a request; completes with void(std::error_code, Response), exactly once, on the
  // handler's associated executor (default: the queue's executor).
  // Errors: bad_request (invalid options or extra), unknown_lane, queue_full,
  // client_queue_full, shutting_down, exceeds_rate_limit, request_too_large (a prompt
  // estimate above 2^31 - 1), internal (a token estimator that threw), and for durable submits no_journal and duplicate_id (at submit); timeout,
  // cancelled, shutting_down, not_started, journal (durable: its row could not be written),
  // internal (an on_delta that threw) (later); provider errors from the last attempt
  // (retryable failures are retried first, see RetryPolicy). A timeout after a failed attempt
  // carries that attempt's Response (status, error type and message).
  // Cancellation (the handler's cancellation slot): a request nothing was sent for yet
  // (waiting, queued, waiting on the limiter, no attempt made) is removed by any type and
  // completes with `cancelled` without reaching the provider; one that made calls (in a
  // retry's back-off, or queued or at the limiter again for its retry) by partial or terminal;
  // a call on the wire only by terminal: it completes with `cancelled` at once and the call
  // is aborted.
  template <class CompletionToken>
  auto async_submit(Request request, SubmitOptions options, CompletionToken&& token) {
    return asio::async_initiate<CompletionToken, void(std::error_code, Response)>(
        [this](auto handler, auto&& req, const SubmitOptions& opts) {
          using op_type = detail::submit_op<std::decay_t<decltype(handler)>>;
          admit(op_type::create(std::move(handler), std::forward<decltype(req)>(req), opts,
                               executor_));
        },
        token, std::move(request), std::move(options));
  }

  // Coroutine convenience: throws RequestError (a std::system_error) on failure. Beside a
  // timer in an awaitable_operators `||`, use async_submit(..., as_tuple(use_awaitable)) and
  // an as_tuple timer: Asio 1.22's `||` waits for a side to succeed, so a submit that throws
  // at once waits for the timer, which then wins, and its error is lost.
  asio::awaitable<Response> submit(Request request, SubmitOptions options = {});

  // Stops admission (new submits fail with shutting_down); with drain, requests waiting for
  // room, queued, waiting on the rate limiter, waiting out a retry's back-off and in flight all
  // finish; without, all but the calls in flight fail with shutting_down (nothing was sent for
  // them), and in-flight calls finish (one that needs a retry then fails with shutting_down,
  // carrying its last answer). Completes void(std::error_code) once every
  // worker has stopped; before start() there are no workers, so queued requests fail.
  // Not cancellable: the handler's cancellation slot is never used, so a cancellation (e.g. the
  // losing side of an awaitable_operators `||`) changes nothing and the operation completes
  // only when the shutdown has finished. To cut a drain short, call it again with
  // drain = false (the calls in flight still finish).
  template <class CompletionToken>
  auto async_shutdown(ShutdownOptions options, CompletionToken&& token) {
    return asio::async_initiate<CompletionToken, void(std::error_code)>(
        [this](auto handler, ShutdownOptions opts) {
          start_shutdown(opts, detail::unique_function<void(std::error_code)>(
                                   wrap_on_associated_executor(std::move(handler))));
        },
        token, options);
  }
  asio::awaitable<void> shutdown(ShutdownOptions options = {});

  // Durable fire-and-forget: completes void(std::error_code, std::string id) as soon as the
  // request's journal row is committed (its acknowledgement: from then on it survives a crash),
  // with the request's id (Request::id, or one made up when empty). The request then runs like
  // any other; its outcome goes to the journal and to QueueConfig::on_durable_result. Errors
  // (no acknowledgement, nothing runs): no_journal, duplicate_id, journal, and the admission
  // errors of async_submit. Not cancellable: once acknowledged, only its deadline ends it.
  template <class CompletionToken>
  auto async_enqueue(Request request, SubmitOptions options, CompletionToken&& token) {
    return asio::async_initiate<CompletionToken, void(std::error_code, std::string)>(
        [this](auto handler, Request req, SubmitOptions opts) {
          enqueue_durable(std::move(req), opts,
                          detail::unique_function<void(std::error_code, std::string)>(
                              wrap_on_associated_executor<std::string>(std::move(handler))));
        },
        token, std::move(request), options);
  }

  // A durable request's journal row by id, e.g. its outcome after a restart: completes
  // void(std::error_code, std::optional<JournalRecord>) (nullopt: no such id). The lookup runs
  // on the journal's thread. Errors: no_journal, journal.
  // Not cancellable: the handler's cancellation slot is never used; once asked, the lookup runs
  // to its end (after the writes queued before it) and then completes.
  template <class CompletionToken>
  auto async_result(std::string id, CompletionToken&& token) {
    return asio::async_initiate<CompletionToken,
                                void(std::error_code, std::optional<JournalRecord>)>(
        [this](auto handler, std::string id) {
          lookup_durable(std::move(id),
                         detail::unique_function<void(std::error_code, std::optional<JournalRecord>)>(
                             wrap_on_associated_executor<std::optional<JournalRecord>>(
                                 std::move(handler))));
        },
        token, std::move(id));
  }
  // Coroutine convenience: throws std::system_error on failure.
  asio::awaitable<std::optional<JournalRecord>> result(std::string id);

  // The queue's journal (nullptr without one), e.g. for stats() or list().
  std::shared_ptr<Journal> journal() const noexcept;

  // Snapshot of the counters and latency percentiles, from any thread, without blocking the
  // queue; exact per counter, not one instant across counters (see Metrics).
  MetricsSnapshot metrics() const;

  // The limiter for `model` (its own when model_rate_limits names it, else the queue's, shared
  // by every model it does not name), e.g. for set_limits() at runtime or snapshot().
  // Thread-safe.
  RateLimiter& limiter(std::string_view model = {});

  // DRR weight of a client (>= 1; 0 throws invalid_config), from its next turn. Thread-safe
  // (posts to the strand). Setting 1 (the default) again forgets the name. config() keeps the
  // weights given at construction.
  void set_client_weight(std::string client, std::uint32_t weight);

  executor_type get_executor() const noexcept { return executor_; }
  const QueueConfig& config() const noexcept;

 private:
  template <class Op>
  void admit(Op* op) {
    op->install_cancellation(impl_);
    detail::queue_admit(impl_.get(), op);
  }
  // A handler invoked from the strand or another thread, posted to its own executor.
  template <class... Values, class Handler>
  auto wrap_on_associated_executor(Handler h) {
    auto ex = asio::get_associated_executor(h, executor_);
    return [h = std::move(h), work = asio::make_work_guard(ex)](std::error_code ec,
                                                                Values... v) mutable {
      auto ex2 = work.get_executor();
      asio::post(ex2, [h = std::move(h), ec, ... v = std::move(v)]() mutable {
        std::move(h)(ec, std::move(v)...);
      });
      work.reset();
    };
  }
  void start_shutdown(ShutdownOptions opts, detail::unique_function<void(std::error_code)> done);
  void enqueue_durable(Request request, SubmitOptions options,
                       detail::unique_function<void(std::error_code, std::string)> ack);
  void lookup_durable(std::string id,
                      detail::unique_function<void(std::error_code, std::optional<JournalRecord>)> done);

  executor_type executor_;
  // Shared with the worker coroutines and posted handlers: calls the destructor aborted finish
  // on the io_context after the RequestQueue is gone.
  std::shared_ptr<detail::queue_impl> impl_;
};

}  // namespace laneq
