#include "laneq/request_queue.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <future>
#include <limits>
#include <mutex>
#include <random>
#include <set>
#include <unordered_map>
#include <utility>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/bind_executor.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/dispatch.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>
#include <asio/use_awaitable.hpp>

#include "laneq/detail/json_depth.hpp"
#include "laneq/detail/post.hpp"
#include "laneq/rate_limit_headers.hpp"
#include "laneq/scheduler.hpp"
#include "delta_failure.hpp"
#include "json_text.hpp"
#include "waiting_room.hpp"

namespace laneq {

std::vector<LaneConfig> default_lanes() {
  using namespace std::chrono_literals;
  return {
      {.priority = Priority::critical, .name = "critical", .timeout = 30s, .reserved = true},
      {.priority = Priority::high, .name = "high", .timeout = 60s},
      {.priority = Priority::normal, .name = "normal", .timeout = 120s},
      {.priority = Priority::low, .name = "low", .timeout = 300s},
      {.priority = Priority::background, .name = "background", .timeout = 600s},
  };
}

namespace detail {
namespace {

using steady = std::chrono::steady_clock;
// Worker coroutines run on the typed strand (see CallExecutor): no type-erased re-wrapping.
template <class T>
using strand_awaitable = asio::awaitable<T, CallExecutor>;
constexpr asio::use_awaitable_t<CallExecutor> on_strand{};
using op_ptr = submit_op_base*;
using state = submit_op_base::state;
constexpr auto never = steady::time_point::max();
// A timeout this long is none: milliseconds::max() (and anything past a lifetime) means "no
// deadline", where now + it would overflow the clock's nanoseconds.
// Compared in milliseconds: milliseconds::max() as nanoseconds would overflow.
constexpr auto no_deadline_beyond =
    std::chrono::duration_cast<std::chrono::milliseconds>(laneq::no_deadline_beyond);

steady::time_point deadline_after(steady::time_point now, std::chrono::milliseconds timeout) {
  return timeout >= no_deadline_beyond ? never : now + timeout;
}

[[noreturn]] void bad_config(const std::string& what) {
  throw std::system_error(make_error_code(errc::invalid_config), what);
}

std::string lane_name(const LaneConfig& l) {
  if (!l.name.empty()) return l.name;
  const auto n = priority_name(l.priority);
  if (!n.empty()) return std::string(n);
  std::string name = std::to_string(static_cast<int>(l.priority));
  name.insert(0, 1, 'p');  // not "p" + ...: GCC 12 -O3 reports a false -Wrestrict for it
  return name;
}

constexpr std::size_t max_workers = 65'536;

void validate(const QueueConfig& c) {
  if (c.workers == 0) bad_config("QueueConfig::workers must be >= 1 (got 0)");
  // Each is a coroutine and a call in flight: a count far beyond any API's concurrency is a
  // mistake (SIZE_MAX would fail in start(), out of io.run(), with bad_alloc).
  if (c.workers > max_workers)
    bad_config("QueueConfig::workers must be at most " + std::to_string(max_workers) + " (got " +
               std::to_string(c.workers) + ")");
  if (c.reserved_workers >= c.workers)
    bad_config("QueueConfig::reserved_workers must be < workers (got " +
               std::to_string(c.reserved_workers) + " of " + std::to_string(c.workers) + ")");
  if (c.max_pending == 0) bad_config("QueueConfig::max_pending must be >= 1 (got 0)");
  if (c.quantum == 0) bad_config("QueueConfig::quantum must be >= 1 (got 0)");
  if (c.fair_share != FairShare::requests && c.fair_share != FairShare::tokens)
    bad_config("QueueConfig::fair_share must be FairShare::requests or FairShare::tokens (got " +
               std::to_string(static_cast<int>(c.fair_share)) + ")");
  if (c.lanes.empty()) bad_config("QueueConfig::lanes must name at least one lane");
  if (c.lanes.size() > 64) bad_config("QueueConfig::lanes: at most 64 lanes");
  bool any_reserved = false;
  for (std::size_t i = 0; i < c.lanes.size(); ++i) {
    const auto& l = c.lanes[i];
    const std::string where = "QueueConfig::lanes[" + std::to_string(i) + "] (" + lane_name(l) + ")";
    if (!l.name.empty() && !detail::is_valid_utf8(l.name))  // metrics export it as a label
      bad_config(where + ".name must be valid UTF-8");
    if (l.timeout.count() < 0) bad_config(where + ".timeout must be >= 0");
    if (l.age_step.count() < 0) bad_config(where + ".age_step must be >= 0");
    if (l.when_full != WhenFull::wait && l.when_full != WhenFull::reject)
      bad_config(where + ".when_full must be WhenFull::wait or WhenFull::reject (got " +
                 std::to_string(static_cast<int>(l.when_full)) + ")");
    for (std::size_t j = 0; j < i; ++j) {
      const std::string also = " is used by lanes[" + std::to_string(j) + "] too";
      if (c.lanes[j].priority == l.priority)
        bad_config(where + ".priority " + std::to_string(static_cast<int>(l.priority)) + also);
      if (lane_name(c.lanes[j]) == lane_name(l))
        bad_config(where + ".name \"" + lane_name(l) + "\"" + also);
    }
    any_reserved = any_reserved || l.reserved;
  }
  if (c.reserved_workers > 0 && !any_reserved)
    bad_config("QueueConfig::reserved_workers > 0 but no lane has reserved = true");
  for (const auto& [client, w] : c.client_weights) {
    if (w == 0) bad_config("QueueConfig::client_weights[\"" + client + "\"] must be >= 1");
    if (client.size() > ClientId::max_size)  // no SubmitOptions::client could ever name it
      bad_config("QueueConfig::client_weights: \"" + client + "\" is longer than a client name (" +
                 std::to_string(ClientId::max_size) + " bytes)");
  }
  if (c.retry.max_attempts < 1 || c.retry.max_attempts > 100)
    bad_config("QueueConfig::retry.max_attempts must be in 1..100 (got " +
               std::to_string(c.retry.max_attempts) + ")");
  if (c.retry.base_delay.count() < 0 || c.retry.max_delay.count() < 0 ||
      c.retry.max_retry_after.count() < 0)
    bad_config("QueueConfig::retry delays must be >= 0");
  if (c.default_max_tokens < 0) bad_config("QueueConfig::default_max_tokens must be >= 0");
  validate_rate_limits(c.rate_limits, "QueueConfig::rate_limits");
  for (const auto& [model, limits] : c.model_rate_limits) {
    if (model.empty()) bad_config("QueueConfig::model_rate_limits: a model name is empty");
    // Limiter names are metrics labels: the queue's own is "default", and labels are UTF-8.
    if (model == "default")
      bad_config("QueueConfig::model_rate_limits: \"default\" is the queue's own limiter "
                 "(QueueConfig::rate_limits)");
    if (!detail::is_valid_utf8(model))
      bad_config("QueueConfig::model_rate_limits: a model name is not valid UTF-8");
    validate_rate_limits(limits, "QueueConfig::model_rate_limits[\"" + model + "\"]");
  }
}

SchedulerConfig scheduler_config(const QueueConfig& c) {
  SchedulerConfig s{.max_pending = c.max_pending,
                    .max_pending_per_client = c.max_pending_per_client,
                    .quantum = c.quantum};
  for (const auto& l : c.lanes)  // (as nanoseconds: a lifetime or more is none / never)
    s.lanes.push_back({.priority = static_cast<int>(l.priority),
                       .timeout = l.timeout >= no_deadline_beyond ? Duration{0} : Duration{l.timeout},
                       .age_step = std::min(l.age_step, no_deadline_beyond),
                       .reserved = l.reserved});
  return s;
}

// The config lanes in the scheduler's lane order (by priority): index i is scheduler lane i.
std::vector<const LaneConfig*> lanes_by_rank(const Scheduler& s, const QueueConfig& c) {
  std::vector<const LaneConfig*> out;
  for (std::size_t i = 0; i < s.lane_count(); ++i)
    for (const auto& l : c.lanes)
      if (static_cast<int>(l.priority) == s.lane(i).priority) out.push_back(&l);
  return out;
}

RateLimitInfo without_retry_after(RateLimitInfo info) {
  info.retry_after.reset();
  return info;
}

std::vector<Metrics::LaneInfo> metric_lanes(const Scheduler& s, const QueueConfig& c) {
  std::vector<Metrics::LaneInfo> out;
  for (const LaneConfig* l : lanes_by_rank(s, c))
    out.push_back({lane_name(*l), static_cast<int>(l->priority)});
  return out;
}

}  // namespace

// A burst as a vector of values (its capacity is kept from burst to burst).
template <class T>
class vector_batch {
 public:
  using value_type = T;
  bool add(T item) {  // true when it was the first
    items_.push_back(std::move(item));
    return items_.size() == 1;
  }
  void swap(vector_batch& other) noexcept { items_.swap(other.items_); }
  template <class F>
  void consume(F&& each) {  // in order, then empty
    for (auto& item : items_) each(item);
    items_.clear();
  }
  void clear() noexcept { items_.clear(); }

 private:
  std::vector<T> items_;
};

// A burst of submits linked through the ops themselves (submit_op_base::wait.next): no vector to
// grow and keep, so a queued request costs no intake memory.
class op_batch {
 public:
  using value_type = op_ptr;
  bool add(op_ptr op) {  // true when it was the first
    op->wait = {nullptr, nullptr};
    (tail_ ? tail_->wait.next : head_) = op;
    tail_ = op;
    return head_ == op;
  }
  void swap(op_batch& other) noexcept {
    std::swap(head_, other.head_);
    std::swap(tail_, other.tail_);
  }
  template <class F>
  void consume(F&& each) {  // in order, then empty
    op_ptr op = std::exchange(head_, nullptr);
    tail_ = nullptr;
    while (op) {
      // Read before admission: it reuses the links, and a completion it posts may run (and
      // free the op) on another thread.
      op_ptr next = op->wait.next;
      each(op);
      op = next;
    }
  }
  void clear() noexcept { head_ = tail_ = nullptr; }

 private:
  op_ptr head_ = nullptr;
  op_ptr tail_ = nullptr;
};

// Items handed to the strand from any thread: only the first of a burst posts, and the strand
// takes the whole burst in order (one strand trip per burst, not per item). Closed, it drops.
// Batch holds a burst: vector_batch<T> (values) or op_batch (submits, linked through the ops).
template <class Batch>
class strand_inbox {
 public:
  // True when this item started a burst: the caller posts one drain.
  bool push(typename Batch::value_type item) {
    std::lock_guard lock(mu_);
    if (closed_) return false;
    return pending_.add(std::move(item));
  }
  template <class F>
  void drain(F&& each) {  // strand only; one lock per burst
    Batch cut;
    {
      std::lock_guard lock(mu_);
      cut.swap(before_);                       // set aside by a cut (see below): first
      if (!cutting_) pending_.swap(running_);  // else end_cut's caller takes them
    }
    cut.consume(each);
    running_.consume(each);
  }
  // An event in the items' order (a shutdown): what was pushed before cut() is set aside for
  // drain_cut(); what is pushed from then on waits (a drain meanwhile leaves it) until
  // end_cut(), whose caller drains it. A burst's drain is posted after its first push, so
  // without the cut a push made before the event (its burst's drain not posted yet, its
  // first pusher preempted on another thread) could be taken after it, and one made after it
  // (joining a burst whose drain was posted before) ahead of it.
  void cut() {
    std::lock_guard lock(mu_);
    if (cutting_) return;  // what comes now is after the cut under way too
    cutting_ = true;
    before_.swap(pending_);  // (before_ is empty while not cutting)
  }
  template <class F>
  void drain_cut(F&& each) {  // strand only
    Batch taken;
    {
      std::lock_guard lock(mu_);
      taken.swap(before_);
    }
    taken.consume(each);
  }
  void end_cut() {
    std::lock_guard lock(mu_);
    cutting_ = false;
  }
  void close() {
    std::lock_guard lock(mu_);
    closed_ = true;
    pending_.clear();
  }

 private:
  std::mutex mu_;
  bool closed_ = false;   // guarded by mu_
  bool cutting_ = false;  // guarded by mu_
  Batch pending_;         // guarded by mu_
  Batch before_;          // guarded by mu_: pushed before the cut under way
  Batch running_;         // strand only
};

struct worker {
  explicit worker(const CallExecutor& strand) : call_context{strand, signal.slot()} {}
  worker(const worker&) = delete;  // call_context holds a slot of its signal
  worker& operator=(const worker&) = delete;

  int index = 0;
  bool reserved = false;
  op_ptr current = nullptr;
  bool acquiring = false;  // `current` waits on the rate limiter: no call made yet
  // The provider's answer, for the worker's resume (only the error code travels it): the
  // provider's own Response when the worker resumes inside the completion, else `result`.
  Response* answer = nullptr;
  Response result;
  asio::cancellation_signal signal;
  // What every call of this worker's gets (its deadline set per call): built once, so a call
  // copies no strand (an atomic increment and decrement each).
  CallContext call_context;
  unique_function<void(op_ptr)> parked;
};

// A made-up id for a durable request without one: a random per-process prefix and a counter,
// unique across restarts of the same journal (any thread).
std::string make_request_id() {
  static const std::uint64_t prefix = std::random_device{}() | (std::uint64_t{std::random_device{}()} << 32);
  static std::atomic<std::uint64_t> counter{0};
  char buf[48];
  std::snprintf(buf, sizeof buf, "lq-%016llx-%llx", static_cast<unsigned long long>(prefix),
                static_cast<unsigned long long>(counter.fetch_add(1, std::memory_order_relaxed)));
  return buf;
}

// Completions from the journal's writer thread, delivered to the strand in order: one post per
// burst (as for submits), and none once the queue is gone (the journal may outlive it).
struct journal_event {
  enum class kind : std::uint8_t { appended, finished, flushed };
  kind what;
  submit_op_base* op = nullptr;
  std::error_code ec{};
  std::int64_t row = 0;
};

struct journal_link : std::enable_shared_from_this<journal_link> {
  journal_link(queue_impl* queue, CallExecutor ex) : q(queue), strand(std::move(ex)) {}
  void push(journal_event e) {
    if (events.push(e)) detail::post(strand, [self = shared_from_this()] { self->drain(); });
  }
  void drain();  // strand; after queue_impl
  void close() { events.close(); }

  queue_impl* q;
  CallExecutor strand;
  strand_inbox<vector_batch<journal_event>> events;
};

// A streaming caller's Request::on_delta, wrapped at admission (providers copy the function, so
// every copy shares the gate). Once the queue resolves the request while its call still runs
// (cancel, deadline, shutdown), the gate closes before the caller's handler is posted: no delta
// reaches the caller after it resumed, when what its callback uses may be gone. The callback
// runs under the gate's lock, which closing waits for. An exception from it ends the attempt
// (the provider aborts its stream) and is not retried, nor is a stream that delivered text.
struct delta_gate {
  // Recursive: a callback that destroys the queue (from a handler of a one-thread loop, as
  // allowed) closes this gate again from inside (abandon -> keep_for_worker) on this thread.
  std::recursive_mutex mu;
  bool open = true;
  bool delivered = false;     // a retry would show the caller the text again
  bool threw = false;         // the callback threw: the attempt ends, not retried
  std::string thrown;         // its what()
  std::function<void(std::string_view)> user;
};
struct guarded_delta {
  std::shared_ptr<delta_gate> g;
  void operator()(std::string_view delta) const {
    std::lock_guard lock(g->mu);
    if (!g->open) return;
    g->delivered = true;
    try {
      g->user(delta);
    } catch (...) {
      g->threw = true, g->thrown = detail::current_what(), g->open = false;
      throw;
    }
  }
};
delta_gate* gate_of(const Request& r) noexcept {
  const auto* w = r.on_delta ? r.on_delta.target<guarded_delta>() : nullptr;
  return w ? w->g.get() : nullptr;
}

// The handler of a durable request nobody awaits (recovered, or async_enqueue'd): its final
// outcome goes to QueueConfig::on_durable_result.
struct durable_result_handler {
  std::shared_ptr<queue_impl> q;  // it may run after the RequestQueue was destroyed
  std::string id;
  void operator()(std::error_code ec, Response r);  // after queue_impl
};

class queue_impl : public std::enable_shared_from_this<queue_impl> {
 public:
  queue_impl(asio::any_io_executor ex, Provider& provider, QueueConfig cfg)
      : cfg_((validate(cfg), std::move(cfg))),
        strand_(asio::make_strand(ex)),
        provider_(provider),
        sched_(scheduler_config(cfg_)),
        metrics_(metric_lanes(sched_, cfg_), cfg_.metrics_max_clients),
        timer_(strand_),
        waiting_(sched_.lane_count()),
        limiter_(std::make_unique<RateLimiter>(ex, cfg_.rate_limits, "default")),
        rng_(std::random_device{}()),
        executor_(ex) {
    for (const auto& [model, limits] : cfg_.model_rate_limits)
      model_limiters_.emplace(model, std::make_unique<RateLimiter>(ex, limits, model));
    for (const auto& [client, w] : cfg_.client_weights) sched_.set_client_weight(client, w);
    for (const LaneConfig* l : lanes_by_rank(sched_, cfg_)) lane_when_full_.push_back(l->when_full);
    journal_ = cfg_.journal_store ? cfg_.journal_store
                                  : (cfg_.journal.path.empty() ? nullptr : Journal::open(cfg_.journal));
    if (journal_) link_ = std::make_shared<journal_link>(this, strand_);
  }

  // After construction (handlers hold the impl by shared_ptr).
  void post_recover() {
    // On the strand like all state changes (threads may already run the io_context), and
    // before any submit made after construction, which queues behind it.
    if (journal_) detail::post(strand_, [self = shared_from_this()] { self->recover(); });
  }

  // The RequestQueue is being destroyed while no thread runs the io_context (its documented
  // contract), so the strand's state is ours. A shutdown without drain that cannot wait: every
  // request still held completes with shutting_down (handlers posted as usual), in-flight calls
  // are aborted and parked workers end. What is left - the aborted calls' completions, posted
  // handlers - holds this impl by shared_ptr and finishes on the next run(), or is destroyed with
  // the io_context. Nothing a caller submitted is dropped uncalled while the context lives on.
  void abandon() {
    stopping_ = true;
    drain_ = false;
    // A worker whose aborted call comes back later ends instead of parking: parked, its frame
    // (which holds this impl) would wait for a wake-up nobody sends, and leak with the impl if
    // the context is destroyed before the other calls come back.
    stop_workers_ = true;
    intake_.end_cut();  // a shutdown's cut under way: its begin_shutdown comes too late
    admit_intake();     // rejected: stopping_
    intake_.close();
    fail_unstarted();
    for (auto& w : workers_) {
      if (w->current && w->current->st == state::in_flight)
        fail_call(*w, errc::shutting_down, Metrics::Outcome::cancelled);
      // The provider heard the cancel; its slot handler must not keep its call state alive
      // (which holds the worker's frame, which holds this impl) if the context never runs again.
      w->signal.slot().clear();
      // Its frame (and its reference to this impl) is let go: Asio 1.22 posts the frame's
      // destruction, so it goes when the context next runs, or with the context.
      if (w->parked) {
        w->parked.reset();
        --workers_alive_;
      }
    }
    idle_any_.clear();
    idle_reserved_.clear();
    if (journal_) {
      // Rows being committed and outcomes being committed come back through link_: let the
      // writer get through them (its own thread), then resolve their requests here.
      // Twice: resolving a row's request may write its outcome (one cancelled while its row
      // was being written), whose commit the second pass waits for; that pass only delivers.
      for (int pass = 0; pass < 2; ++pass) {
        std::promise<void> flushed;
        journal_->flush([&flushed](std::error_code) { flushed.set_value(); });
        flushed.get_future().wait();
        link_->drain();
      }
      link_->close();  // later completions find no queue
      journal_.reset();  // if it was ours alone: commits the releases, then closes the file
    }
    timer_.cancel();
    timer_expiry_ = never;
    if (!stopped_) notify_shutdown();  // a shutdown() in progress completes too
  }

  const std::shared_ptr<Journal>& journal() const noexcept { return journal_; }

  void lookup(std::string id,
              unique_function<void(std::error_code, std::optional<JournalRecord>)> done) {
    if (!journal_) return done(errc::no_journal, std::nullopt);
    journal_->lookup(std::move(id), std::move(done));
  }

  void on_journal_event(const journal_event& e) {
    switch (e.what) {
      case journal_event::kind::appended: return journaled(e.op, e.ec, e.row);
      case journal_event::kind::finished: {
        auto& d = *e.op->durable;
        if (e.ec) {
          // Not committed (e.g. a full disk): the row is still open and runs again after a
          // restart. The caller gets the result with that said, not a promise the journal broke.
          // Pending, not in flight: no run ended during its call, so the next one must not count
          // it as interrupted (max_interrupted_runs would give it up for a full disk).
          journal_->release(d.row);
          std::string why = "the outcome (" + (d.ec ? error_name(d.ec) : std::string("succeeded")) +
                            ") could not be committed to the journal; the request may run "
                            "again after a restart";
          if (!d.result.error_message.empty()) why += " (" + d.result.error_message + ")";
          d.result.error_message = std::move(why);
          return e.op->deliver(make_error_code(errc::journal), std::move(d.result));
        }
        return e.op->deliver(d.ec, std::move(d.result));
      }
      case journal_event::kind::flushed: return notify_shutdown();
    }
  }

  void report_durable(std::string_view id, std::error_code ec, const Response& r) const {
    if (ec != errc::shutting_down && cfg_.on_durable_result) cfg_.on_durable_result(id, ec, r);
  }

  // --- entry points (any thread) ---

  // Submits from any thread land in a small intake; only the first of a burst posts to the
  // strand, which admits the whole burst in order (one strand trip per burst, not per submit).
  void post_admit(op_ptr op) {
    if (intake_.push(op))
      detail::post(strand_, [self = shared_from_this()] { self->admit_intake(); });
  }

  void post_cancel(op_ptr op, asio::cancellation_type type) {
    op->add_ref();
    detail::post(strand_, [self = shared_from_this(), op = submit_op_base::ref<>(op), type] {
      self->cancel(op.get(), type);
    });
  }

  void start() {
    detail::post(strand_, [self = shared_from_this()] {
      if (self->started_ || self->stopping_) return;
      self->started_ = true;
      for (std::size_t i = 0; i < self->cfg_.workers; ++i) {
        auto w = std::make_unique<worker>(self->strand_);
        w->index = static_cast<int>(i);
        w->reserved = i < self->cfg_.reserved_workers;
        ++self->workers_alive_;
        asio::co_spawn(self->strand_, self->run_worker(*w, self), asio::detached);
        self->workers_.push_back(std::move(w));
      }
    });
  }

  void start_shutdown(ShutdownOptions opts, unique_function<void(std::error_code)> done) {
    intake_.cut();  // submits made before this call are admitted first, those after refused
    detail::post(strand_, [self = shared_from_this(), opts, done = std::move(done)]() mutable {
      self->begin_shutdown(opts, std::move(done));
    });
  }

  void set_client_weight(std::string client, std::uint32_t weight) {
    detail::post(strand_, [self = shared_from_this(), client = std::move(client), weight] {
      self->sched_.set_client_weight(client, weight);
    });
  }

  MetricsSnapshot metrics() const {
    auto snap = metrics_.snapshot();
    snap.limiters.push_back(limiter_->snapshot());
    for (const auto& [model, l] : model_limiters_) snap.limiters.push_back(l->snapshot());
    return snap;
  }

  RateLimiter& limiter_for(std::string_view model) const {
    if (!model_limiters_.empty())
      if (auto it = model_limiters_.find(model); it != model_limiters_.end()) return *it->second;
    return *limiter_;
  }
  const QueueConfig& config() const noexcept { return cfg_; }

 private:
  // --- admission (strand) ---

  // The burst of submits the intake holds. One clock read for all: they were made before the
  // drain began.
  void admit_intake() {
    intake_.drain([this, now = steady::now()](op_ptr o) { admit(o, now); });
  }

  void admit(op_ptr op, steady::time_point now) {
    const bool recovered = op->durable && op->durable->recovered;  // keeps its enqueue time
    if (!recovered) op->submitted_at = now;
    const auto lane = sched_.lane_index(static_cast<int>(op->options.priority));
    if (lane == Scheduler::npos) {
      // Which lanes there are: SubmitOptions::priority defaults to normal, which a queue of
      // custom lanes may not have.
      Response r;
      r.error_message = "SubmitOptions::priority " +
                        std::to_string(static_cast<int>(op->options.priority)) +
                        " names no lane of this queue; its lanes: " + lane_list();
      // A recovered one's row must end too. Not through reject(): it would count the request
      // in lane 0 (op->lane), a lane it never had; like a submit naming no lane, none counts it.
      if (recovered)
        return settle_durable(op, errc::unknown_lane, Metrics::Outcome::failed, std::move(r));
      op->complete(errc::unknown_lane, std::move(r));
      return;
    }
    op->lane = static_cast<std::uint16_t>(lane);
    if (op->request.on_delta && !gate_of(op->request)) {
      auto gate = std::make_shared<delta_gate>();
      gate->user = std::move(op->request.on_delta);
      op->request.on_delta = guarded_delta{std::move(gate)};
    }
    op->client_ref = metrics_.client(op->options.client);
    metrics_.submitted(lane, op->client_ref);
    if (op->cancel_requested) {  // cancelled before it reached the strand
      metrics_.waiting(lane, op->client_ref);
      return finish(op, errc::cancelled, Metrics::Outcome::cancelled, Metrics::From::waiting);
    }
    if (recovered && cfg_.max_interrupted_runs != 0 &&
        op->durable->interrupted >= cfg_.max_interrupted_runs) {
      // Its calls ended the process (or happened to be in flight when it ended) that often:
      // running it again may end this run too. Given up, with its row, instead of a crash loop.
      metrics_.waiting(lane, op->client_ref);
      Response r;
      r.error_message = "given up: in flight when " + std::to_string(op->durable->interrupted) +
                        " runs ended (QueueConfig::max_interrupted_runs = " +
                        std::to_string(cfg_.max_interrupted_runs) + ")";
      return finish(op, errc::interrupted_too_often, Metrics::Outcome::failed,
                    Metrics::From::waiting, std::move(r));
    }
    if (stopping_) return reject(op, errc::shutting_down);
    if (op->options.durable && !journal_) return reject(op, errc::no_journal);
    // Merged into the request body: anything but an object could never be sent. Said now, not
    // after the queue wait and a rate-limit grant; and a failed parse's value (discarded) could
    // not be journaled as it is.
    if (const auto& x = op->request.extra; !recovered && !x.is_null() && !x.is_object())
      return reject(op, errc::bad_request,
                    std::string("Request::extra must be a JSON object or null, not ") +
                        (x.is_discarded() ? "a discarded value (a failed parse)" : x.type_name()));
    // Copies and dumps of a JSON value recurse (the estimate, the body, the journal): a value
    // a caller parsed from untrusted text, nested 100,000 deep, would overflow the stack.
    // And a NaN or an infinity would go out as null: the caller's setting silently dropped.
    if (!recovered) switch (detail::json_value_fault_of(op->request.extra)) {
        case detail::json_value_fault::none: break;
        case detail::json_value_fault::too_deep:
          return reject(op, errc::bad_request,
                        "Request::extra nests deeper than " +
                            std::to_string(detail::kMaxJsonDepth) +
                            " levels of arrays and objects");
        case detail::json_value_fault::non_finite:
          return reject(op, errc::bad_request,
                        "Request::extra holds a NaN or infinite number, which JSON cannot "
                        "carry (it would be sent as null)");
        case detail::json_value_fault::discarded:  // inside it: the whole one is said above
          return reject(op, errc::bad_request,
                        "Request::extra holds a discarded value (a failed parse) inside it, "
                        "which is no JSON (it would be sent as the text <discarded>)");
      }
    // A timeout of 0 or less would expire at once: a mistake (0 means "none" elsewhere), said so.
    if (const auto& t = op->options.timeout; !recovered && t && t->count() <= 0)
      return reject(op, errc::bad_request,
                    "SubmitOptions::timeout must be > 0 (" + std::to_string(t->count()) +
                        " ms); leave it empty for the lane's, milliseconds::max() for none");
    // Nonsense said at once, not quietly read as something else (cost 0 as 1, a negative
    // max_tokens as the provider's default). FairShare::tokens does not use the cost.
    if (!recovered && op->options.cost == 0 && cfg_.fair_share == FairShare::requests)
      return reject(op, errc::bad_request, "SubmitOptions::cost must be >= 1 (got 0)");
    if (const auto m = op->request.max_tokens; !recovered && m < 0)
      return reject(op, errc::bad_request,
                    "Request::max_tokens must be >= 0 (0: the provider's default; got " +
                        std::to_string(m) + ")");
    // A recovered request was acknowledged in an earlier run: the per-client limit must not
    // fail it now (only its deadline ends it); enqueue() lets it past the scheduler's too.
    // (Durable requests whose rows are being written count too: a burst of them must not all
    // pass before any is queued, and be acknowledged past the limit.)
    if (!recovered && cfg_.max_pending_per_client != 0 &&
        sched_.client_size(op->options.client) + waiting_.client_size(op->options.client) +
                journaling_of(op->options.client) >=
            cfg_.max_pending_per_client)
      return reject(op, errc::client_queue_full);
    // Estimated once; a cost beyond a whole budget could never be granted: say so now.
    std::int64_t prompt = 0;
    try {
      prompt = cfg_.prompt_estimator ? cfg_.prompt_estimator(op->request)
                                     : estimate_prompt_tokens(op->request);
    } catch (const std::exception& e) {
      return reject(op, errc::internal,
                    std::string("QueueConfig::prompt_estimator threw: ") + e.what());
    } catch (...) {
      return reject(op, errc::internal, "QueueConfig::prompt_estimator threw a non-exception");
    }
    // (Against the budgets at its full size: an estimator's "never", INT64_MAX, is refused
    // by a budget of 2^31 tokens or more too.)
    if (!limiter_for(op->request.model).fits(estimated_cost(*op, prompt)))
      return reject(op, errc::exceeds_rate_limit);
    // A queued request carries it in 32 bits; more than that is no model's prompt.
    if (prompt > std::numeric_limits<std::int32_t>::max())
      return reject(op, errc::request_too_large,
                    "the prompt's estimate, " + std::to_string(prompt) +
                        " tokens, is above 2^31 - 1, the most a request may carry");
    op->prompt_tokens = static_cast<std::int32_t>(std::max<std::int64_t>(prompt, 0));

    if (!recovered) {
      if (op->options.timeout) {
        op->deadline = deadline_after(now, *op->options.timeout);
      } else if (const auto t = sched_.lane(lane).timeout; t.count() > 0) {
        op->deadline = now + t;
      }
    }
    if (op->deadline <= now) {
      op->st = state::waiting;  // count it through the waiting path so the books balance
      metrics_.waiting(lane, op->client_ref);
      return finish(op, errc::timeout, Metrics::Outcome::expired, Metrics::From::waiting);
    }
    if (op->options.durable && (!op->durable || op->durable->row == 0)) {
      // Once acknowledged it always waits for room: a full lane that rejects says so first.
      if (refused_when_full(op) && must_wait(op, true)) return reject(op, errc::queue_full);
      return start_journaling(op, now);
    }
    place(op);
  }

  // "critical (0), batch (10)": the lanes by rank, with their priority values.
  std::string lane_list() const {
    std::string out;
    for (const LaneConfig* l : lanes_by_rank(sched_, cfg_)) {
      if (!out.empty()) out += ", ";
      out += lane_name(*l) + " (" + std::to_string(static_cast<int>(l->priority)) + ")";
    }
    return out;
  }

  // Admitted: into the scheduler, or the waiting list when it is full.
  // Counted: a durable request counted as waiting while its row was written (start_journaling).
  // A template argument: the submit path's `false` folds away.
  template <bool Counted = false>
  void place(op_ptr op) {
    // A lane that rejects counts the durable requests whose rows are being written as queued
    // (they will be, acknowledged): a submit that would overfill it with them is refused.
    if (must_wait(op, journaling_reject_ > 0 && refused_when_full(op)))
      return wait_for_room(op, Counted);  // (refuses it, on such a lane)
    enqueue(op, Counted, sched_.full());  // full: for the reserved worker, past capacity
    hand_out();
  }

  // No room, unless a parked reserved worker takes it at once: it needs none (it leaves the
  // scheduler as it enters), so a critical request never waits for a full queue of batch work.
  // (Not past an earlier waiter of a reserved lane: that one goes first, see take_next.)
  // `journaling` (for a lane that rejects): the durable requests of such lanes whose rows are
  // being written need room too, once acknowledged (a burst of durable submits passed the
  // check all at once, then all were acknowledged past the limit). Those of reserved lanes may
  // take parked reserved workers instead; the others, and this one unless it is of a reserved
  // lane, need room: this one fits if all of them do.
  // Without rows being written (or not counting them) this is: full or waiters there, and no
  // parked reserved worker this one may take.
  bool must_wait(const submit_op_base* op, bool journaling = false) const {
    const std::size_t rows = journaling ? journaling_reject_ : 0;
    const std::size_t rows_reserved = journaling ? journaling_reserved_ : 0;
    const auto cap = sched_.max_pending();
    if ((cap == 0 || sched_.size() + rows < cap) && waiting_.empty()) return false;  // room
    const bool reserved = sched_.lane(op->lane).reserved;
    const std::size_t workers =
        waiting_.any_in(sched_.reserved_lanes()) ? 0 : idle_reserved_.size();
    if (!waiting_.empty() && !(reserved && workers > 0)) return true;  // waiters go first
    if (cap == 0) return false;  // (no limit: nobody waits for room)
    const std::size_t room = sched_.size() >= cap ? 0 : cap - sched_.size();
    const std::size_t need_room = rows - rows_reserved + (reserved ? 0 : 1);
    const std::size_t either = rows_reserved + (reserved ? 1 : 0);
    // (one of a reserved lane needs no room: the rows that do wait once acknowledged, if they
    // find none, whether it takes a worker or not)
    if (reserved) return either > workers + (room > need_room ? room - need_room : 0);
    return need_room > room || need_room + either > room + std::min(workers, either);
  }

  // Its lane fails it with queue_full when full, rather than waiting - unless it is a durable
  // request acknowledged already (journaled, or recovered): that one always waits for room.
  bool refused_when_full(const submit_op_base* op) const {
    return lane_when_full_[op->lane] == WhenFull::reject && !(op->durable && op->durable->row > 0);
  }

  void wait_for_room(op_ptr op, bool counted) {
    if (refused_when_full(op)) {
      if (!counted) return reject(op, errc::queue_full);
      return finish(op, errc::queue_full, Metrics::Outcome::rejected, Metrics::From::waiting);
    }
    op->st = state::waiting;
    waiting_.push(op);
    if (!counted) metrics_.waiting(op->lane, op->client_ref);
    if (op->deadline != never) {
      wait_deadlines_.emplace(op->deadline, op);
      arm_timer(op->deadline);
    }
  }

  // --- durability (strand) ---

  // Commits a durable request's row; admission goes on in journaled() once it is committed.
  void start_journaling(op_ptr op, steady::time_point now) {
    if (!op->durable) op->durable = std::make_unique<durable_state>();
    if (op->request.id.empty()) op->request.id = make_request_id();
    op->st = state::journaling;
    count_journaling(op, true);
    // Counted as waiting until its row is committed: the books balance meanwhile too
    // (submitted = outcomes + waiting + depth + in flight).
    metrics_.waiting(op->lane, op->client_ref);
    const auto wall = std::chrono::system_clock::now();
    JournalRecord rec{.id = op->request.id,
                      .priority = static_cast<int>(op->options.priority),
                      .client = op->options.client.str(),
                      .cost = op->options.cost,
                      .timeout = op->options.timeout,
                      .request = op->request,
                      .enqueued_at = wall};
    rec.request.on_delta = nullptr;
    if (op->deadline != never)
      rec.deadline = wall + std::chrono::duration_cast<std::chrono::system_clock::duration>(op->deadline - now);
    journal_->append(std::move(rec), [link = link_, op](std::error_code ec, std::int64_t row) {
      link->push({journal_event::kind::appended, op, ec, row});
    });
  }

  // The counts of rows being written (journaling_ and the ones must_wait and the per-client
  // limit read): one place for both ends, so they cannot drift apart.
  void count_journaling(const submit_op_base* op, bool started) {
    const auto step = [started](std::size_t& n) { started ? ++n : --n; };
    step(journaling_);
    if (lane_when_full_[op->lane] == WhenFull::reject) {
      step(journaling_reject_);
      if (sched_.lane(op->lane).reserved) step(journaling_reserved_);
    }
    if (cfg_.max_pending_per_client == 0) return;
    if (started) {
      ++journaling_by_client_[op->options.client.str()];
    } else {
      const auto it = journaling_by_client_.find(std::string_view(op->options.client));
      if (--it->second == 0) journaling_by_client_.erase(it);
    }
  }

  void journaled(op_ptr op, std::error_code ec, std::int64_t row) {
    count_journaling(op, false);
    if (ec) {  // not acknowledged (duplicate_id, or the journal failed): nothing runs
      metrics_.finished(op->lane, op->client_ref, Metrics::Outcome::rejected,
                        Metrics::From::waiting, Metrics::no_call);
      op->complete(ec, Response{});
    } else {
      op->durable->row = row;
      if (op->durable->ack) std::exchange(op->durable->ack, nullptr)({}, op->request.id);
      if (op->cancel_requested || (stopping_ && (!drain_ || !started_))) {
        finish(op, op->cancel_requested ? errc::cancelled : errc::shutting_down,
               Metrics::Outcome::cancelled, Metrics::From::waiting);
      } else {
        place<true>(op);
      }
    }
    check_shutdown();
  }

  // A durable request resolved: its outcome is committed before its handler runs, so whoever
  // hears of it (an awaiting caller, on_durable_result) can rely on the journal. Dropped by a
  // shutdown, it goes back to pending instead: it runs again next time.
  void settle_durable(op_ptr op, std::error_code ec, Metrics::Outcome outcome, Response&& resp) {
    const std::int64_t row = op->durable->row;
    if (ec == errc::shutting_down) {
      release_lease(*op);  // (one that never started, or waits to retry, is pending already)
      return op->complete(ec, std::move(resp));
    }
    op->resolve();
    op->durable->ec = ec;
    op->durable->result = std::move(resp);
    const Response& r = op->durable->result;
    std::string message = !ec ? "" : r.error_message.empty() ? ec.message() : r.error_message;
    // (Both count a call cut short mid-flight; the journal's count is the one from earlier
    // runs when this run's calls were fewer.)
    const auto attempts = std::max(op->durable->started_attempts,
                                   op->durable->earlier_attempts + op->attempts);
    journal_->finish(row, journal_state(outcome), attempts, ec,
                     std::move(message), &r,
                     [link = link_, op](std::error_code ec) {
                       // A failed outcome write leaves the row open: it runs again next time
                       // (at-least-once); Journal::stats() counts the failure, and the caller
                       // hears of it (below).
                       link->push({journal_event::kind::finished, op, ec});
                     });
  }

  static JournalState journal_state(Metrics::Outcome o) {
    switch (o) {
      case Metrics::Outcome::succeeded: return JournalState::succeeded;
      case Metrics::Outcome::failed: return JournalState::failed;
      case Metrics::Outcome::expired: return JournalState::expired;
      case Metrics::Outcome::cancelled: return JournalState::cancelled;
      case Metrics::Outcome::rejected: return JournalState::failed;
    }
    return JournalState::failed;
  }

  // The rows an earlier run left open, queued again ahead of anything new, in their order.
  void recover() {
    // Destroyed (or shut down) before this ran: the rows stay pending for the next run.
    if (!journal_ || stopping_) return;
    const auto now = steady::now();
    const auto wall = std::chrono::system_clock::now();
    const auto to_steady = [&](std::chrono::system_clock::time_point t) {
      return now + std::chrono::duration_cast<steady::duration>(t - wall);
    };
    for (auto& rec : journal_->take_recovered()) {
      SubmitOptions opts{.priority = static_cast<Priority>(rec.priority),
                         .timeout = rec.timeout,
                         .cost = rec.cost,
                         .durable = true};
      try {
        opts.client = rec.client;
      } catch (const std::length_error&) {  // not from this laneq: the default client
      }
      rec.request.id = rec.id;
      auto* op = submit_op<durable_result_handler>::create(
          durable_result_handler{shared_from_this(), rec.id}, std::move(rec.request), opts,
          executor_);
      op->durable = std::make_unique<durable_state>();
      op->durable->row = rec.row;
      op->durable->recovered = true;
      op->durable->earlier_attempts = rec.attempts;  // this run retries afresh
      op->durable->interrupted = rec.interrupted;
      op->submitted_at = std::min(now, to_steady(rec.enqueued_at));
      if (rec.deadline) op->deadline = to_steady(*rec.deadline);
      admit(op, now);
    }
  }

  RateCost estimated_cost(const submit_op_base& op) const {
    return estimated_cost(op, op.prompt_tokens);
  }
  RateCost estimated_cost(const submit_op_base& op, std::int64_t prompt_tokens) const {
    return {.requests = 1,
            .input_tokens = prompt_tokens,
            .output_tokens = reserved_output_tokens(op.request, cfg_.default_max_tokens)};
  }

  // What a turn in its lane costs the request (DRR): SubmitOptions::cost, or with
  // FairShare::tokens its token estimate. Worked out at each push, not stored: the journal
  // keeps the caller's cost, so a resume under the other setting schedules by that one.
  std::uint32_t drr_cost(const submit_op_base& op) const {
    return cfg_.fair_share == FairShare::tokens ? token_cost(op) : op.options.cost;
  }
  // Out of line: inlined into every push, it made the submit path's admit() too large to
  // inline what it calls (B1 stream +15 instructions per request).
  [[gnu::noinline]] std::uint32_t token_cost(const submit_op_base& op) const {
    constexpr std::int64_t most = std::numeric_limits<std::uint32_t>::max();
    const RateCost c = estimated_cost(op);  // each term capped first: no sum overflows
    return static_cast<std::uint32_t>(std::clamp<std::int64_t>(
        std::min<std::int64_t>(c.input_tokens, most) + std::min(c.output_tokens, most), 1, most));
  }

  void reject(op_ptr op, errc e, std::string why = {}) {
    metrics_.rejected(op->lane, op->client_ref);
    Response r;
    r.error_message = std::move(why);
    if (op->durable && op->durable->row > 0)  // recovered: its row ends too (or stays pending)
      return settle_durable(op, e, Metrics::Outcome::failed, std::move(r));
    op->complete(e, std::move(r));
  }

  // The scheduler keeps a lane's default deadline itself (cheaper); a deadline of the request's
  // own, or one recorded in an earlier run (the lane's timeout may have changed since), it is told.
  static bool explicit_deadline(const submit_op_base* op) {
    return op->options.timeout || (op->durable && op->durable->recovered);
  }

  // past_capacity: into a full scheduler, for a worker that takes it at once.
  // Inlined: GCC stopped inlining it into place() at a third call site, and the call cost
  // ~60 instructions per request on B1 (callgrind).
  [[gnu::always_inline]] void enqueue(op_ptr op, bool was_waiting, bool past_capacity = false) {
    Scheduler::PushArgs args{.lane = op->lane,
                             .client = op->options.client,
                             .payload = reinterpret_cast<std::uint64_t>(op),
                             .enqueued_at = op->submitted_at,
                             .deadline = std::nullopt,
                             .cost = drr_cost(*op)};
    if (explicit_deadline(op)) args.deadline = op->deadline;
    // Limits were checked at admission. A waiter was counted with its client's then (room is
    // there when it comes). An acknowledged durable request passed the per-client limit at
    // admission (or in an earlier run), but others of its client may have been queued while
    // its row was being committed: it must not fail now, so the limit does not apply to it again.
    args.admitted = was_waiting || past_capacity || (op->durable && op->durable->row > 0);
    const auto r = sched_.push(args);
    if (r.status != Scheduler::PushStatus::ok) {
      // Not expected (limits were checked at admission); failed, not lost, if it happens, and
      // counted where it was: a waiter, or nowhere yet.
      const auto e = r.status == Scheduler::PushStatus::client_queue_full ? errc::client_queue_full
                                                                          : errc::queue_full;
      if (!was_waiting) return reject(op, e);
      return finish(op, e, Metrics::Outcome::rejected, Metrics::From::waiting);
    }
    op->sched.id = r.id;
    op->st = state::queued;
    metrics_.enqueued(op->lane, op->client_ref, was_waiting);
    if (op->deadline != never) arm_timer(op->deadline);
  }

  void unlink_waiting(op_ptr op) {
    waiting_.erase(op);
    if (op->deadline != never) wait_deadlines_.erase({op->deadline, op});
  }

  // The waiter of `lanes` (a bit each) with the best effective rank, as the scheduler ranks.
  op_ptr best_waiter(steady::time_point now, std::uint64_t lanes) const {
    return waiting_.best(
        [&](std::size_t lane, const submit_op_base& head) {
          return sched_.effective_rank(lane, head.submitted_at, now);
        },
        lanes);
  }

  // Room appeared in the scheduler: waiters go in, the best effective rank first (a critical
  // waiter before batch work that came earlier; aging as in the scheduler), and parked workers
  // get what they may take (a critical waiter may be for a parked reserved worker).
  void admit_waiters() {
    if (waiting_.empty() || sched_.full()) return;
    const auto now = steady::now();
    while (!sched_.full()) {
      op_ptr op = best_waiter(now, ~std::uint64_t{0});
      if (!op) break;
      unlink_waiting(op);
      enqueue(op, true);
    }
    hand_out();
  }

  // --- hand-off to workers (strand) ---

  // Gives queued work to parked workers: reserved lanes to reserved workers first, so a general
  // worker stays free for everything else.
  void hand_out() {
    if (handing_out_) return;  // take_next() -> admit_waiters() -> here: the outer loop goes on
    handing_out_ = true;
    while (!idle_reserved_.empty() &&
           (sched_.has_reserved_work() ||
            (!waiting_.empty() && waiting_.any_in(sched_.reserved_lanes())))) {
      op_ptr op = take_next(true, steady::now());
      if (!op) break;  // what was left had expired
      worker* w = idle_reserved_.back();
      idle_reserved_.pop_back();
      resume(*w, op);
    }
    while (!idle_any_.empty() && !sched_.empty()) {
      op_ptr op = take_next(false, steady::now());
      if (!op) break;
      worker* w = idle_any_.back();
      idle_any_.pop_back();
      resume(*w, op);
    }
    handing_out_ = false;
  }

  // A parked worker takes its request at once, inline: we are on the strand, and the worker
  // only goes as far as starting its call (a provider never completes inline), so this saves a
  // strand trip per request. A hand_out its bookkeeping starts is folded into this one.
  void resume(worker& w, op_ptr op) { std::exchange(w.parked, nullptr)(op); }

  // Shutdown's wake-up goes through a post: an exiting worker may finish the shutdown, which
  // must not run inside check_shutdown's loop over the idle lists.
  void wake(worker& w, op_ptr op) {
    detail::post(strand_, [h = std::move(w.parked), op]() mutable { h(op); });
  }

  // The next request for a worker (a reserved one takes reserved lanes only), or nullptr. One
  // whose deadline passed before the queue's timer ran (a busy loop runs it late) expires here:
  // it never reaches the provider.
  op_ptr take_next(bool reserved, steady::time_point now) {
    bool expired = false;
    for (;;) {
      // A reserved lane's waiter (it came while every reserved worker was busy) goes to a free
      // reserved worker before room appears, and before any later one that may pass it. Again
      // after an expiry: a worker that parked with such waiters left would wait for room.
      if (reserved && !waiting_.empty() && !sched_.has_reserved_work())
        if (op_ptr op = best_waiter(now, sched_.reserved_lanes())) {
          unlink_waiting(op);
          enqueue(op, true);  // a waiter was admitted: it goes in past capacity
        }
      auto item = reserved ? sched_.pop_reserved(now) : sched_.pop(now);
      if (!item) break;
      auto* op = reinterpret_cast<op_ptr>(item->payload);
      if (op->deadline <= now) {
        finish(op, errc::timeout, Metrics::Outcome::expired, Metrics::From::queued);
        admit_waiters();  // room for a waiter, which may be next
        expired = true;
        continue;
      }
      return take(op, *item, now);
    }
    if (expired) {  // that may have been the last thing a shutdown waited for
      check_shutdown();
      maybe_idle();
    }
    return nullptr;
  }

  // Bookkeeping for a request leaving the scheduler towards a worker.
  op_ptr take(op_ptr op, const Scheduler::Item& item, steady::time_point now) {
    // A long queue has gone cold in memory: fetch the next request's lines now, so they
    // arrive while this one is handled. Its messages for the provider, which reads them next.
    if (const auto next = sched_.next_payload_hint()) prefetch(reinterpret_cast<op_ptr>(next));
    __builtin_prefetch(op->request.messages.data());
    op->st = state::in_flight;
    op->sched.started = now.time_since_epoch();
    op->sched.id = item.seq;  // a retry goes back to this place
    ++in_flight_;
    metrics_.started(op->lane, op->client_ref, op->started_at() - op->submitted_at);
    admit_waiters();
    return op;
  }

  // The op's lines a worker and the completion touch: the vtable pointer and the Request's
  // head, its model and messages, the queue's bookkeeping, and the handler with its executor.
  static void prefetch(op_ptr op) {
    const char* p = reinterpret_cast<const char*>(op);
    __builtin_prefetch(p);
    __builtin_prefetch(&op->request.messages);
    __builtin_prefetch(&op->st, 1);
    __builtin_prefetch(&op->deadline, 1);
    __builtin_prefetch(p + sizeof(submit_op_base));
    __builtin_prefetch(p + sizeof(submit_op_base) + 64);
  }

  strand_awaitable<op_ptr> park(worker& w) {
    return asio::async_initiate<const asio::use_awaitable_t<CallExecutor>&, void(op_ptr)>(
        [this, &w](auto handler) {
          w.parked = std::move(handler);
          (w.reserved ? idle_reserved_ : idle_any_).push_back(&w);
        },
        on_strand);
  }

  // An in-flight request (one a worker has) resolved by someone else: the worker still reads
  // it, and the provider may still read its Request, until the worker lets go.
  // Also closes a streaming request's delta gate: the caller hears of it before the provider.
  static void keep_for_worker(op_ptr op) {
    if (auto* g = gate_of(op->request)) {
      std::lock_guard lock(g->mu);
      g->open = false;
    }
    if (op->worker_ref) return;
    op->worker_ref = true;
    op->add_ref();
    // A call on the wire cut short was made all the same (Response::attempts, the journal's
    // count; end_attempt counts only the calls of requests still in flight).
    if (op->in_call) ++op->attempts;
  }
  // The worker's hold on its request: drops the reference keep_for_worker() took, if any. Only
  // while the request is alive: cleared before the worker resolves it itself.
  struct worker_claim {
    op_ptr op;
    explicit worker_claim(op_ptr o) : op(o) {}
    worker_claim(const worker_claim&) = delete;
    worker_claim& operator=(const worker_claim&) = delete;
    ~worker_claim() { drop(); }
    void drop() {
      if (op && op->worker_ref) {
        op->worker_ref = false;
        op->release();  // may free it
      }
      op = nullptr;
    }
  };

  // One coroutine per worker, one frame for its whole life: the limiter wait and the provider
  // call are awaited here, the bookkeeping around them is plain functions (a nested coroutine
  // per call cost a frame and a resume each).
  // `self`: the frame keeps the impl alive (a call in flight outlives a destroyed RequestQueue).
  strand_awaitable<void> run_worker(worker& w, [[maybe_unused]] std::shared_ptr<queue_impl> self) {
    steady::time_point just_now{};  // a clock read of a moment ago, if any
    for (;;) {
      auto now = just_now != steady::time_point{} ? just_now : steady::now();
      just_now = {};
      op_ptr op = take_next(w.reserved, now);
      if (!op) {
        if (stop_workers_) break;
        op = co_await park(w);
        if (!op) break;
        now = op->started_at();
      }
      // A request the worker resolves itself needs no reference of the worker's: nobody else
      // completes it (and so frees it) before the worker has let go. One resolved by someone
      // else meanwhile got one (keep_for_worker), dropped below once the worker is done with
      // it, or with the frame if the io_context is destroyed while the worker is suspended. So
      // a request going through takes no atomic operation here.
      worker_claim claim(op);
      if (op->st == state::in_flight) {
        w.current = op;  // from here, cancel and deadline reach this worker (w.signal)
        RateLimiter& lim = limiter_for(op->request.model);
        const RateCost estimate = estimated_cost(*op);
        RateLimiter::Ticket ticket = lim.try_acquire(estimate);
        std::error_code ec;
        auto granted = now;  // no wait, no clock read
        if (ticket == 0) {
          w.acquiring = true;
          std::tie(ec, ticket) = co_await lim.async_acquire(
              estimate, limiter_rank(*op),
              asio::bind_cancellation_slot(w.signal.slot(), asio::experimental::as_tuple(on_strand)));
          w.acquiring = false;
          granted = steady::now();
        }
        metrics_.limiter_wait(op->lane, op->client_ref, granted - now);
        if (op->st != state::in_flight) {
          lim.reconcile(ticket, estimate, RateCost{0, 0, 0});  // resolved meanwhile: no call made
        } else if (ec) {
          claim.op = nullptr;  // resolved here, by the worker
          finish(op, ec == errc::exceeds_rate_limit ? ec : make_error_code(errc::internal),
                 Metrics::Outcome::failed, Metrics::From::in_flight);
        } else if (granted >= op->deadline) {
          // Its deadline passed while the grant was on its way (a busy loop ran the limiter's
          // timer before the queue's, which would have aborted the call just sent): as one
          // that expires queued, no call, and its budget back.
          lim.reconcile(ticket, estimate, RateCost{0, 0, 0});
          claim.op = nullptr;
          finish(op, errc::timeout, Metrics::Outcome::expired, Metrics::From::in_flight);
        } else {
          begin_attempt(w, op, granted);
          try {
            std::tie(ec) = co_await call_provider(w, op);
          } catch (...) {
            ec = errc::internal;
            w.result = Response{};
            w.answer = &w.result;
          }
          if (op->st == state::in_flight) claim.op = nullptr;  // resolved below, by the worker
          finished_at_ = {};
          end_attempt(op, lim, ticket, estimate, ec, *std::exchange(w.answer, nullptr));
          just_now = finished_at_;  // read by finish(), if it ran: the next take needs a time
        }
        w.current = nullptr;
      }
      --in_flight_;
      claim.drop();
      check_shutdown();
      maybe_idle();
    }
    if (--workers_alive_ == 0) finish_shutdown();
  }

  // A request's place among the limiter's waiters: its lane's rank, aging there as in the
  // scheduler (from its submit, one step per the lane's age_step), and older first among
  // equals. So a request that aged past newer, better-ranked ones does not wait behind them
  // again at the limiter, nor does one that reached it unaged starve there behind a stream of
  // better-ranked ones: its aging bound holds when the budget is the bottleneck.
  WaitRank limiter_rank(const submit_op_base& op) const {
    return {.priority = static_cast<int>(op.lane), .since = op.submitted_at,
            .age_step = sched_.lane(op.lane).age_step};
  }

  // Back to pending if this run marked it in flight. (Asked again after an earlier release,
  // it changes nothing: the journal releases in-flight rows only, so a release whose write
  // failed is made good by the next, and JournalStats::released counts each lease once.)
  void release_lease(submit_op_base& op) {
    if (!op.durable || op.durable->row <= 0) return;
    if (op.durable->started_attempts <= op.durable->earlier_attempts) return;  // never started
    journal_->release(op.durable->row);
  }

  void begin_attempt(worker& w, op_ptr op, steady::time_point now) {
    op->sched.started = now.time_since_epoch();  // service time = the call itself
    op->in_call = true;
    if (!op->durable) return;
    // The lease is informative (a journal has one owner at a time): the call's deadline.
    const auto lease = op->deadline != never ? op->deadline - now
                                             : steady::duration(std::chrono::hours(1));
    op->durable->started_attempts = op->durable->earlier_attempts + op->attempts + 1;
    journal_->mark_in_flight(
        op->durable->row, w.index,
        std::chrono::system_clock::now() +
            std::chrono::duration_cast<std::chrono::system_clock::duration>(lease),
        op->durable->started_attempts);
  }

  // The provider's answer is left at w.answer; only the error code travels the resume.
  strand_awaitable<std::tuple<std::error_code>> call_provider(worker& w, op_ptr op) {
    auto token = asio::experimental::as_tuple(on_strand);
    return asio::async_initiate<decltype(token), void(std::error_code)>(
        [this, &w, op](auto handler) {
          w.call_context.deadline = op->deadline;
          provider_.async_call(
              op->request, w.call_context,
              CallCompletion([this, h = std::move(handler), &w](std::error_code e,
                                                                Response&& r) mutable {
                // The worker is suspended on exactly this completion: nobody else touches
                // w.answer until the worker resumes on the strand.
                // Already on the strand (a provider that posts to ctx.executor, as ours do):
                // resume at once. dispatch() would too, after querying the strand's inner
                // any_io_executor for its blocking property, which allocates. The worker runs
                // inside this call up to its next co_await, which comes after it has used the
                // answer: the provider's Response is read where it is, not moved. (The
                // worker's executor is this strand: asked here, no copy of it is made.)
                if (strand_.running_in_this_thread()) {
                  w.answer = &r;
                  std::move(h)(e);
                } else {
                  w.result = std::move(r);
                  w.answer = &w.result;
                  auto ex = asio::get_associated_executor(h);
                  asio::dispatch(ex, asio::detail::bind_handler(std::move(h), e));
                }
              }));
        },
        token);
  }

  // After a call: the limiter learns what it cost, then the request succeeds, fails, or waits
  // for a retry.
  void end_attempt(op_ptr op, RateLimiter& lim, RateLimiter::Ticket ticket,
                   const RateCost& estimate, std::error_code ec, Response& resp) {
    // (A call cut short by cancel, deadline or shutdown was counted then: keep_for_worker.)
    if (op->st == state::in_flight) ++op->attempts;
    // Parsed once: the limiter adopts the server's view, the retry policy reads retry-after.
    const auto info =
        resp.headers.empty()
            ? RateLimitInfo{}
            : parse_rate_limit_headers(resp.headers, std::chrono::system_clock::now());
    const auto d =
        ec ? decide_retry(cfg_.retry, op->attempts, ec, resp.status, info, random01(), estimate)
           : RetryDecision{};
    // One pause for every worker, no longer than a request would wait for its own retry: a
    // longer retry-after (a daily limit, a clock skewed HTTP-date) fails this request, and the
    // next one after max_retry_after asks the server again instead of everything stopping.
    // It comes before the refund and the server's counts: either may grant a waiter at once,
    // which would then call straight into the 429 (even when this request was resolved
    // meanwhile, the server's answer holds for the others).
    // (The limiter's own cap too: a retry-after of 25 h, allowed by a max_retry_after of 48 h,
    // holds the others 24 h, and this request waits the rest on its own below.)
    const auto held =
        d.pause_all ? std::min({d.pause, cfg_.retry.retry_after_limit(),
                                std::chrono::nanoseconds(RateLimiter::max_pause)})
                    : std::chrono::nanoseconds{0};
    if (d.pause_all) lim.pause_for(held);
    // The refund and the server's view in one step: a refund alone could grant a waiter that
    // the same answer's exhausted bucket holds. An exhausted bucket holds every start no longer
    // than a request would wait for its own retry (the next start asks the server again), nor
    // than the same answer's retry-after (the limiter's rule).
    // (Only a 429/503/529's retry-after is the server's word on when to call again: a proxy
    // may add one to every answer, and the retry policy ignores a success's.)
    const bool says_when = resp.status == 429 || resp.status == 503 || resp.status == 529;
    lim.settle(ticket, estimate, actual_cost(ec, resp, estimate),
               info.retry_after && !says_when ? without_retry_after(info) : info,
               cfg_.retry.retry_after_limit());
    // (Counted also for a request resolved meanwhile: the provider's answer was still a 429.)
    if (says_when || ec == errc::rate_limited || ec == errc::overloaded)
      metrics_.rate_limited(op->lane, op->client_ref);
    if (op->st != state::in_flight) return;  // resolved by cancel / timeout meanwhile

    resp.attempts = op->attempts;
    bool streamed = false;  // text went to the caller: a retry would show it again
    // (Before success too: a provider that caught the throw and went on to a success closed
    // the gate all the same - later deltas were dropped, and the text is not what was shown.)
    if (auto* g = gate_of(op->request)) {
      std::string thrown;
      bool threw;
      {
        std::lock_guard lock(g->mu);
        streamed = g->delivered, threw = g->threw, thrown = g->thrown;
      }
      if (threw) {  // the caller's own callback ended the stream: not the provider's fault
        return finish(op, errc::internal, Metrics::Outcome::failed, Metrics::From::in_flight,
                      detail::delta_threw(std::move(resp), thrown));
      }
    }
    if (!ec)
      return finish(op, ec, Metrics::Outcome::succeeded, Metrics::From::in_flight, std::move(resp));
    if (!d.retry || streamed)
      return finish(op, ec, Metrics::Outcome::failed, Metrics::From::in_flight, std::move(resp));
    const auto now = steady::now();
    const auto at = now + d.delay;
    if (at >= op->deadline) {  // the retry could not finish in time: fail now, with the cause
      return finish(op, errc::timeout, Metrics::Outcome::expired, Metrics::From::in_flight,
                    std::move(resp));
    }
    // The call is over: if the request ends before another begins, its service time is this.
    resp.service_time = now - op->started_at();
    op->in_call = false;
    last_errors_.insert_or_assign(op, retry_info{std::move(resp), at});
    // (finish releases a durable row itself)
    if (stopping_ && !drain_)  // no new attempt: it ends as one waiting for its retry does
      return finish(op, errc::shutting_down, Metrics::Outcome::cancelled, Metrics::From::in_flight);
    // Out of its call until the retry starts: a run that ends meanwhile did not end inside it
    // (the journal counts in-flight rows at a restart as interrupted).
    release_lease(*op);
    if (d.pause_all && d.delay <= held) {
      // The limiter's pause holds every start until `at`: back to its place at once, so it goes
      // before requests queued behind it, not after those taken while it waited. (A request
      // that waits longer than the others, for a bucket it alone does not fit, or longer than
      // the pause max_retry_after allows the others, waits below.)
      requeue(op);
      hand_out();
      return;
    }
    op->st = state::retry_wait;
    retry_waits_.emplace(at, op);
    arm_timer(at);
  }

  // What the call cost in the end. Success: the reported usage (the estimate when none came).
  // The server refused it (an error status): one request, no tokens. An error after a 2xx (a
  // stream cut short or ending in an error event, a malformed body): the server counted the
  // tokens, so at least the estimate, or what it reported if more. No answer (network,
  // cancelled): unknown, so the estimate stands.
  static RateCost actual_cost(std::error_code ec, const Response& r, const RateCost& estimate) {
    // A count no call reaches (2^40), so that budgets' sums never overflow on a server's
    // absurd numbers; negative ones count as none.
    const auto sane = [](std::int64_t n) { return std::clamp<std::int64_t>(n, 0, std::int64_t{1} << 40); };
    const std::int64_t all_in = sane(r.usage.input_tokens), out = sane(r.usage.output_tokens);
    std::int64_t in = all_in;  // less what the provider's limits do not count
    if (r.usage.rate_exempt_input_tokens > 0) in -= std::min(in, sane(r.usage.rate_exempt_input_tokens));
    if (!ec) {
      if (all_in + out <= 0) return estimate;
      return {1, in, out};
    }
    if (r.status >= 200 && r.status < 300)
      return {1, std::max(estimate.input_tokens, in), std::max(estimate.output_tokens, out)};
    if (r.status != 0) return {1, 0, 0};
    // No HTTP status: refused before it was sent (a provider could not build it) costs nothing;
    // no answer (network, cancelled) is unknown, so the estimate stands.
    if (ec == errc::bad_request) return {0, 0, 0};
    return estimate;
  }

  // The user's source, kept in [0, 1); if it throws (on a worker, where nothing would catch
  // it), or gives NaN, the built-in one stands in.
  double random01() {
    if (cfg_.random) {
      try {
        const double r = cfg_.random();
        if (r >= 0.0 && r < 1.0) return r;
        if (r >= 1.0) return std::nextafter(1.0, 0.0);
        if (r < 0.0) return 0.0;
      } catch (...) {
      }
    }
    return std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
  }

  // A retry's back-off is over: back into its lane at its original place.
  void requeue(op_ptr op) {
    Scheduler::PushArgs args{.lane = op->lane,
                             .client = op->options.client,
                             .payload = reinterpret_cast<std::uint64_t>(op),
                             .enqueued_at = op->submitted_at,
                             .deadline = std::nullopt,
                             .cost = drr_cost(*op),
                             .seq = op->sched.id};
    if (explicit_deadline(op)) args.deadline = op->deadline;
    const auto r = sched_.push(args);  // a requeue is never rejected for capacity
    if (r.status != Scheduler::PushStatus::ok)
      return finish(op, errc::internal, Metrics::Outcome::failed, Metrics::From::in_flight);
    op->sched.id = r.id;
    op->st = state::queued;
    metrics_.requeued(op->lane, op->client_ref);
  }

  // --- resolution (strand) ---

  void finish(op_ptr op, std::error_code ec, Metrics::Outcome outcome, Metrics::From from) {
    finish(op, ec, outcome, from, Response{});
  }
  void finish(op_ptr op, std::error_code ec, Metrics::Outcome outcome, Metrics::From from,
              Response&& resp) {
    // The service time is the last call's: the one on the wire now, else the one before a
    // retry's wait; none if the request ends before any call (e.g. at the rate limiter).
    std::chrono::nanoseconds service = Metrics::no_call;
    if (from == Metrics::From::in_flight) {
      finished_at_ = steady::now();
      if (op->in_call) service = finished_at_ - op->started_at();
    }
    if (op->attempts > 0) {
      // A request between attempts that times out (or is cancelled) carries the last error.
      if (auto it = last_errors_.find(op); it != last_errors_.end()) {
        if (!op->in_call) service = it->second.last.service_time;
        if (ec && resp.status == 0 && resp.error_message.empty()) resp = std::move(it->second.last);
        last_errors_.erase(it);
      }
      resp.attempts = op->attempts;
    }
    metrics_.finished(op->lane, op->client_ref, outcome, from, service, finished_at_);
    // (A retry back in its lane that ends there has both: its call, and the time since.)
    if (from == Metrics::From::in_flight || service != Metrics::no_call) {
      const auto end = from == Metrics::From::in_flight ? finished_at_ : steady::now();
      // The rest of its time since submit: queued, at the limiter, earlier calls and back-offs.
      resp.service_time = service == Metrics::no_call ? std::chrono::nanoseconds{0} : service;
      resp.queue_wait = end - op->submitted_at - resp.service_time;
    }
    if (op->durable && op->durable->row > 0) return settle_durable(op, ec, outcome, std::move(resp));
    op->complete(ec, std::move(resp));
  }

  // Asio's cancellation types, by what the request has done: nothing sent yet (waiting, queued,
  // waiting on the limiter, no attempt made) has no side effects, so any type removes it (total
  // too); a request that made calls which failed (waiting out a retry's back-off, or queued or
  // at the limiter again for its retry) is in a state still well defined (partial or
  // terminal); a call on the wire may or may not have been carried out (terminal only).
  void cancel(op_ptr op, asio::cancellation_type type) {
    using ct = asio::cancellation_type;
    const bool partial = (type & (ct::terminal | ct::partial)) != ct::none;
    const bool terminal = (type & ct::terminal) != ct::none;
    if (!partial && op->attempts > 0) return;  // total: calls were made
    switch (op->st) {
      case state::created: op->cancel_requested = true; return;  // admit() resolves it
      case state::journaling: op->cancel_requested = true; return;  // journaled() resolves it
      case state::done: return;
      case state::waiting:
        unlink_waiting(op);
        finish(op, errc::cancelled, Metrics::Outcome::cancelled, Metrics::From::waiting);
        break;
      case state::queued:
        sched_.remove(op->sched.id);
        finish(op, errc::cancelled, Metrics::Outcome::cancelled, Metrics::From::queued);
        admit_waiters();
        break;
      case state::retry_wait:  // (attempts > 0: partial or terminal, checked above)
        retry_waits_.erase({last_errors_.at(op).at, op});
        finish(op, errc::cancelled, Metrics::Outcome::cancelled, Metrics::From::in_flight);
        break;
      case state::in_flight:
        if (!terminal && call_sent(op)) return;
        op->cancel_requested = true;
        keep_for_worker(op);
        finish(op, errc::cancelled, Metrics::Outcome::cancelled, Metrics::From::in_flight);
        abort_call(op);
        break;
    }
    maybe_idle();
    // A draining shutdown may have waited for this one alone (a retry's back-off, with every
    // worker parked): nobody else would look again.
    check_shutdown();
  }

  // In flight and past the limiter: the provider has (or is about to have) the call.
  bool call_sent(op_ptr op) const {
    for (const auto& w : workers_)
      if (w->current == op) return !w->acquiring;
    return true;
  }

  void abort_call(op_ptr op) {
    for (auto& w : workers_)
      if (w->current == op) w->signal.emit(asio::cancellation_type::terminal);
  }

  // --- deadlines: one timer for everything (strand) ---

  void arm_timer(steady::time_point t) {
    if (t >= timer_expiry_) return;
    timer_expiry_ = t;
    timer_.expires_at(t);
    timer_.async_wait([self = shared_from_this()](std::error_code ec) {
      if (ec != asio::error::operation_aborted) self->on_timer();
    });
  }

  void on_timer() {
    timer_expiry_ = never;
    const auto now = steady::now();
    // Expired waiting for a start() that never came: the caller's bug, said as such.
    const errc expired = started_ ? errc::timeout : errc::not_started;
    while (auto item = sched_.pop_expired(now))
      finish(reinterpret_cast<op_ptr>(item->payload), expired, Metrics::Outcome::expired,
             Metrics::From::queued);
    while (!retry_waits_.empty() && retry_waits_.begin()->first <= now) {
      op_ptr op = retry_waits_.begin()->second;
      retry_waits_.erase(retry_waits_.begin());
      requeue(op);
    }
    while (!wait_deadlines_.empty() && wait_deadlines_.begin()->first <= now) {
      op_ptr op = wait_deadlines_.begin()->second;
      unlink_waiting(op);
      finish(op, expired, Metrics::Outcome::expired, Metrics::From::waiting);
    }
    auto next = sched_.next_deadline().value_or(never);
    if (!wait_deadlines_.empty()) next = std::min(next, wait_deadlines_.begin()->first);
    if (!retry_waits_.empty()) next = std::min(next, retry_waits_.begin()->first);
    for (auto& w : workers_) {
      op_ptr op = w->current;
      if (!op || op->st != state::in_flight) continue;
      if (op->deadline <= now) {
        fail_call(*w, errc::timeout, Metrics::Outcome::expired);
      } else {
        next = std::min(next, op->deadline);
      }
    }
    admit_waiters();
    hand_out();
    if (next != never) arm_timer(next);
    check_shutdown();  // what expired may have been all a draining shutdown waited for
  }

  // Nothing pending: drop the timer so io_context::run() can return.
  void maybe_idle() {
    if (timer_expiry_ != never && sched_.empty() && waiting_.empty() && in_flight_ == 0 &&
        retry_waits_.empty()) {
      timer_.cancel();
      timer_expiry_ = never;
    }
  }

  // --- shutdown (strand) ---

  void begin_shutdown(ShutdownOptions opts, unique_function<void(std::error_code)> done) {
    // Submits made before this shutdown was called (start_shutdown's cut) are admitted, those
    // made after it are refused, whatever the order their bursts' drains were posted in.
    intake_.drain_cut([this, now = steady::now()](op_ptr o) { admit(o, now); });
    intake_.end_cut();
    if (stopped_) {
      admit_intake();  // refused
      done(std::error_code{});
      return;
    }
    stopping_ = true;
    if (!opts.drain) drain_ = false;
    admit_intake();  // made after the shutdown call: refused
    shutdown_waiters_.push_back(std::move(done));
    // Submits already waiting for room were made before shutdown: drain keeps them too.
    if (!drain_ || !started_) fail_unstarted();
    check_shutdown();
  }

  // Everything not yet sent fails with shutting_down: back-offs, waiters, queued requests and
  // those waiting on the rate limiter (nothing was sent for them either).
  void fail_unstarted() {
    while (!retry_waits_.empty()) {
      op_ptr op = retry_waits_.begin()->second;
      retry_waits_.erase(retry_waits_.begin());
      finish(op, errc::shutting_down, Metrics::Outcome::cancelled, Metrics::From::in_flight);
    }
    while (op_ptr op = waiting_.any()) {
      unlink_waiting(op);
      finish(op, errc::shutting_down, Metrics::Outcome::cancelled, Metrics::From::waiting);
    }
    while (auto item = sched_.pop(steady::now())) {
      auto* op = reinterpret_cast<op_ptr>(item->payload);
      finish(op, errc::shutting_down, Metrics::Outcome::cancelled, Metrics::From::queued);
    }
    for (auto& w : workers_)
      if (w->acquiring && w->current->st == state::in_flight)
        fail_call(*w, errc::shutting_down, Metrics::Outcome::cancelled);
  }

  // The worker's request ends now; its limiter wait or provider call is aborted (the worker
  // finds the request resolved when it resumes).
  void fail_call(worker& w, errc e, Metrics::Outcome outcome) {
    keep_for_worker(w.current);
    finish(w.current, e, outcome, Metrics::From::in_flight);
    w.signal.emit(asio::cancellation_type::terminal);
  }

  void check_shutdown() {
    if (!stopping_ || stop_workers_) return;
    if (!sched_.empty() || !waiting_.empty() || in_flight_ > 0 || !retry_waits_.empty() ||
        journaling_ > 0)
      return;
    stop_workers_ = true;
    for (auto* list : {&idle_any_, &idle_reserved_}) {
      for (worker* w : *list) wake(*w, nullptr);
      list->clear();
    }
    if (workers_alive_ == 0) finish_shutdown();
  }

  void finish_shutdown() {
    if (stopped_ || flushing_) return;
    timer_.cancel();
    timer_expiry_ = never;
    if (journal_) {  // outcomes still being committed are delivered before shutdown completes
      flushing_ = true;
      // The workers' coroutines, which kept the io_context running, have ended: without this
      // count, run() could return before the journal's answer arrives, and a shutdown (or a
      // durable outcome) whose handler waits elsewhere - a future, another context - would
      // wait for ever.
      flush_work_ = asio::prefer(strand_.get_inner_executor(),
                                 asio::execution::outstanding_work.tracked);
      journal_->flush([link = link_](std::error_code) {
        link->push({journal_event::kind::flushed});
      });
      return;
    }
    notify_shutdown();
  }

  void notify_shutdown() {
    stopped_ = true;
    flush_work_ = asio::any_io_executor();
    for (auto& done : shutdown_waiters_) done(std::error_code{});
    shutdown_waiters_.clear();
  }

  QueueConfig cfg_;
  CallExecutor strand_;
  strand_inbox<op_batch> intake_;  // submits
  Provider& provider_;
  Scheduler sched_;
  Metrics metrics_;
  asio::steady_timer timer_;
  steady::time_point timer_expiry_ = never;
  std::vector<WhenFull> lane_when_full_;
  std::vector<std::unique_ptr<worker>> workers_;
  std::vector<worker*> idle_any_, idle_reserved_;
  waiting_room waiting_;  // admitted, waiting for room in the scheduler
  std::set<std::pair<steady::time_point, op_ptr>> wait_deadlines_;
  std::vector<unique_function<void(std::error_code)>> shutdown_waiters_;
  std::unique_ptr<RateLimiter> limiter_;
  std::map<std::string, std::unique_ptr<RateLimiter>, std::less<>> model_limiters_;
  std::mt19937_64 rng_;
  struct retry_info {
    Response last;             // the failed attempt's answer, carried into a later timeout
    steady::time_point at;     // when its back-off ends
  };
  std::set<std::pair<steady::time_point, op_ptr>> retry_waits_;
  steady::time_point finished_at_{};  // the clock read of the last finish() from in flight
  std::unordered_map<op_ptr, retry_info> last_errors_;
  std::size_t in_flight_ = 0;
  std::size_t workers_alive_ = 0;
  asio::any_io_executor executor_;        // the user's: handlers of recovered requests run there
  std::shared_ptr<Journal> journal_;
  std::shared_ptr<journal_link> link_;
  std::size_t journaling_ = 0;            // durable requests whose row is being committed
  std::size_t journaling_reject_ = 0;     // ... of lanes that reject when full
  std::size_t journaling_reserved_ = 0;   // ... of those, of reserved lanes
  // ... per client, kept only with a per-client limit
  std::map<std::string, std::size_t, std::less<>> journaling_by_client_;
  std::size_t journaling_of(std::string_view client) const {
    const auto it = journaling_by_client_.find(client);
    return it == journaling_by_client_.end() ? 0 : it->second;
  }
  bool flushing_ = false;                 // shutdown waits for the journal's last commits
  asio::any_io_executor flush_work_;      // while flushing_: keeps the io_context running
  bool handing_out_ = false;
  bool started_ = false;
  bool stopping_ = false;
  bool drain_ = true;
  bool stop_workers_ = false;
  bool stopped_ = false;
};

void journal_link::drain() {
  events.drain([this](const journal_event& e) { q->on_journal_event(e); });
}

void durable_result_handler::operator()(std::error_code ec, Response r) {
  q->report_durable(id, ec, r);
}

void queue_admit(queue_impl* q, submit_op_base* op) { q->post_admit(op); }
void queue_cancel(queue_impl* q, submit_op_base* op, asio::cancellation_type type) {
  q->post_cancel(op, type);
}

}  // namespace detail

RequestQueue::RequestQueue(executor_type ex, Provider& provider, QueueConfig config)
    : executor_(ex),
      impl_(std::make_shared<detail::queue_impl>(ex, provider, std::move(config))) {
  impl_->post_recover();
}

RequestQueue::~RequestQueue() { impl_->abandon(); }

void RequestQueue::start() { impl_->start(); }

namespace {

// submit()'s handler: the error code becomes a RequestError (with the provider's answer) that
// use_awaitable throws in the awaiting coroutine. No coroutine of submit()'s own: that was a
// frame, a Request move and two Response moves per submit.
template <class Handler>
struct throw_request_error {
  Handler h;

  using executor_type = asio::associated_executor_t<Handler>;
  executor_type get_executor() const noexcept { return asio::get_associated_executor(h); }
  using cancellation_slot_type = asio::associated_cancellation_slot_t<Handler>;
  cancellation_slot_type get_cancellation_slot() const noexcept {
    return asio::get_associated_cancellation_slot(h);
  }
  using allocator_type = asio::associated_allocator_t<Handler>;
  allocator_type get_allocator() const noexcept { return asio::get_associated_allocator(h); }

  void operator()(std::error_code ec, Response&& r) {  // && : one move less on the way
    if (ec)
      std::move(h)(std::make_exception_ptr(RequestError(ec, std::move(r))), Response{});
    else
      std::move(h)(std::exception_ptr{}, std::move(r));
  }
};

}  // namespace

template <class Handler>
struct detail::keeps_own_context_busy<throw_request_error<Handler>>
    : detail::keeps_own_context_busy<Handler> {};

asio::awaitable<Response> RequestQueue::submit(Request request, SubmitOptions options) {
  using signature = void(std::exception_ptr, Response);
  using awaitable_handler = asio::async_result<asio::use_awaitable_t<>, signature>::handler_type;
  using op_type = detail::submit_op<throw_request_error<awaitable_handler>>;
  // The request moves into its op here, once: as an argument of async_initiate it would wait in
  // the awaitable's frame until co_await, two more moves of its strings, json and function.
  typename op_type::unbound_ptr op = op_type::create_unbound(std::move(request), options);
  return asio::async_initiate<const asio::use_awaitable_t<>&, signature>(
      [this](awaitable_handler handler, typename op_type::unbound_ptr&& op) {
        op->bind(throw_request_error<awaitable_handler>{std::move(handler)}, executor_);
        admit(op.release());
      },
      asio::use_awaitable, std::move(op));
}

asio::awaitable<void> RequestQueue::shutdown(ShutdownOptions options) {
  auto [ec] = co_await async_shutdown(options, asio::experimental::as_tuple(asio::use_awaitable));
  if (ec) throw std::system_error(ec);
}

void RequestQueue::start_shutdown(ShutdownOptions opts,
                                  detail::unique_function<void(std::error_code)> done) {
  impl_->start_shutdown(opts, std::move(done));
}

void RequestQueue::enqueue_durable(Request request, SubmitOptions options,
                                   detail::unique_function<void(std::error_code, std::string)> ack) {
  options.durable = true;
  if (request.id.empty()) request.id = detail::make_request_id();
  std::string id = request.id;
  auto* op = detail::submit_op<detail::durable_result_handler>::create(
      detail::durable_result_handler{impl_, std::move(id)}, std::move(request), options,
      executor_);
  op->durable = std::make_unique<detail::durable_state>();
  op->durable->ack = std::move(ack);
  detail::queue_admit(impl_.get(), op);
}

void RequestQueue::lookup_durable(
    std::string id,
    detail::unique_function<void(std::error_code, std::optional<JournalRecord>)> done) {
  impl_->lookup(std::move(id), std::move(done));
}

asio::awaitable<std::optional<JournalRecord>> RequestQueue::result(std::string id) {
  auto [ec, rec] = co_await async_result(std::move(id),
                                         asio::experimental::as_tuple(asio::use_awaitable));
  if (ec) throw std::system_error(ec);
  co_return std::move(rec);
}

std::shared_ptr<Journal> RequestQueue::journal() const noexcept { return impl_->journal(); }

MetricsSnapshot RequestQueue::metrics() const { return impl_->metrics(); }

RateLimiter& RequestQueue::limiter(std::string_view model) { return impl_->limiter_for(model); }

void RequestQueue::set_client_weight(std::string client, std::uint32_t weight) {
  if (weight == 0)
    throw std::system_error(make_error_code(errc::invalid_config),
                            "set_client_weight: weight must be >= 1 (client \"" + client + "\")");
  if (client.size() > ClientId::max_size)  // as in the constructor: it could never match
    throw std::system_error(make_error_code(errc::invalid_config),
                            "set_client_weight: \"" + client + "\" is longer than a client name (" +
                                std::to_string(ClientId::max_size) + " bytes)");
  impl_->set_client_weight(std::move(client), weight);
}

const QueueConfig& RequestQueue::config() const noexcept { return impl_->config(); }

}  // namespace laneq
