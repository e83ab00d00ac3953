#pragma once
// RateLimiter: the async face of RateBudgets. `co_await limiter.acquire(cost)` completes when
// every budget allows the cost; the queue's workers await it before each call.
//
// Waiting policy: strict head of line. Waiters are served in (priority, since, arrival) order
// and only the head may be granted: a later, smaller request never barges past a large one
// that waits for its tokens, so nothing starves. Priority is the lane's (lower = sooner), so a
// critical request that reaches the limiter waits behind no batch request; a waiter with a
// WaitRank::age_step moves up while it waits. One timer, armed for the head's ready time, or
// the next aging step when that comes first: no polling.
//
// Thread-safe: any thread may call any member. Completions run on the handler's associated
// executor, never inline. Cancellation (the handler's slot, any type) removes a waiter and
// completes it with asio::error::operation_aborted; emit it on the handler's executor, as Asio
// requires for every operation.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>

#include <asio/any_io_executor.hpp>
#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/awaitable.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/execution/outstanding_work.hpp>
#include <asio/prefer.hpp>
#include <asio/post.hpp>

#include "laneq/detail/unique_function.hpp"
#include "laneq/metrics.hpp"
#include "laneq/rate_cost.hpp"
#include "laneq/rate_limit_headers.hpp"
#include "laneq/request.hpp"

namespace laneq {

// Budgets per `period`; 0 = no such budget. All zero = no budgets: only server pauses apply.
struct RateLimits {
  std::int64_t requests = 0;       // requests per period (RPM with the default period)
  std::int64_t tokens = 0;         // input + output tokens per period (TPM)
  std::int64_t input_tokens = 0;   // Anthropic's separate input-tokens budget (ITPM)
  std::int64_t output_tokens = 0;  // Anthropic's separate output-tokens budget (OTPM)
  std::chrono::nanoseconds period = std::chrono::minutes(1);
  bool smooth = false;             // space starts cost x period / limit apart (no bursts);
                                   // off, starts are spaced so only for a period after a
                                   // pause (periods of a minute or less)
  // Adopt the limits the server reports (x-ratelimit-limit-*, anthropic-ratelimit-*-limit, per
  // minute, scaled to `period`), up or down; a kind left at 0 here gets a budget of the
  // server's. Off: the configured limits stand; the server can only lower what remains.
  bool adopt_server_limits = false;

  bool empty() const noexcept {
    return requests == 0 && tokens == 0 && input_tokens == 0 && output_tokens == 0;
  }
};

// Throws std::system_error(errc::invalid_config) for a negative limit or one above 2^50, or a
// period <= 0 or above a year: "RateLimits::requests must be >= 0 (got -1) (<where>)", where
// `where` says whose limits they are ("QueueConfig::rate_limits", "limiter \"default\"").
void validate_rate_limits(const RateLimits& limits, std::string_view where);

// A waiter's place in line: lower priority first; among equals, the one waiting since earlier.
// With age_step, its priority improves one step per age_step waited since `since`, down to 0
// (as the queue's lanes age), so a waiter that aged is not kept behind newer, better-ranked ones.
struct WaitRank {
  int priority = 0;
  std::chrono::steady_clock::time_point since{};  // default: when it starts to wait
  std::chrono::steady_clock::duration age_step{0};  // 0 = no aging
};

namespace detail {
struct limiter_state;
}

class RateLimiter {
 public:
  using executor_type = asio::any_io_executor;
  using Ticket = std::uint64_t;  // identifies a grant for reconcile(); 0 = none
  // A grant made while the limiter had no budgets: nothing was charged, nothing to reconcile.
  static constexpr Ticket unmetered_ticket = ~Ticket{0};
  using Completion = detail::unique_function<void(std::error_code, Ticket)>;

  // Throws std::system_error(errc::invalid_config) naming the bad field (see
  // validate_rate_limits).
  RateLimiter(executor_type ex, RateLimits limits, std::string name = "default");
  ~RateLimiter();
  RateLimiter(const RateLimiter&) = delete;
  RateLimiter& operator=(const RateLimiter&) = delete;

  // Completes with void(std::error_code, Ticket) once every budget allows `cost`. Errors:
  // errc::exceeds_rate_limit (the cost exceeds a budget's whole limit: it could never be
  // granted), asio::error::operation_aborted (cancelled). A limiter destroyed while requests
  // wait drops them without calling them: destroy it after its io_context stopped running.
  template <class CompletionToken>
  auto async_acquire(RateCost cost, int priority, CompletionToken&& token) {
    return async_acquire(cost, WaitRank{.priority = priority},
                         std::forward<CompletionToken>(token));
  }
  template <class CompletionToken>
  auto async_acquire(RateCost cost, WaitRank rank, CompletionToken&& token) {
    return asio::async_initiate<CompletionToken, void(std::error_code, Ticket)>(
        [this](auto handler, RateCost c, WaitRank p) {
          auto slot = asio::get_associated_cancellation_slot(handler);
          // Tracked: the handler's context stays busy while the request waits.
          executor_type ex = asio::prefer(asio::get_associated_executor(handler, executor_),
                                          asio::execution::outstanding_work.tracked);
          initiate(c, p, slot,
                   Completion([h = std::move(handler), ex = std::move(ex), slot](
                                  std::error_code ec, Ticket t) mutable {
                     auto target = std::move(ex);
                     asio::post(target, [h = std::move(h), slot, ec, t]() mutable {
                       if (slot.is_connected()) slot.clear();  // on the handler's executor
                       std::move(h)(ec, t);
                     });
                   }));
        },
        token, cost, rank);
  }

  // Coroutine convenience: throws std::system_error on failure.
  asio::awaitable<Ticket> acquire(RateCost cost, int priority = 0);

  // Grants at once if nobody waits and every budget allows; 0 otherwise (then use acquire).
  Ticket try_acquire(RateCost cost);

  // Whether `cost` fits every budget's whole limit (false: it could never be granted).
  bool fits(RateCost cost) const;

  // The call is over: charge `actual` instead of `estimate` (refund or extra charge; an extra
  // charge beyond the limit is debt that later grants wait out). A call that never happened:
  // reconcile with actual = {0, 0, 0}. Once per ticket.
  void reconcile(Ticket ticket, RateCost estimate, RateCost actual);

  // The server's view from a response's rate-limit headers: lowers what remains (a bucket at 0
  // pauses until its reset, or past_reset_hold when that reset is due or past by our clock),
  // and with adopt_server_limits takes over its limits. An exhausted bucket holds grants at
  // most `max_hold` (a reset hours ahead from a skewed clock must not stop everything), and no
  // longer than the same answer's retry-after when it is above 0 (when to call again, where
  // the reset says when the bucket is full); with max_hold <= 0 it neither holds nor spends
  // the budget. Pass a retry-after only from a 429, 503 or 529 answer (reset `retry_after`
  // otherwise, as the queue does): a proxy may add one to every answer.
  static constexpr std::chrono::seconds past_reset_hold{1};
  void observe(const Headers& headers);
  void observe(const RateLimitInfo& info,  // the same, already parsed
               std::chrono::nanoseconds max_hold = std::chrono::nanoseconds::max());

  // reconcile() and observe(info, max_hold) in one step, for the end of a call: a refund
  // cannot grant a waiter before the same answer's exhausted bucket pauses the limiter (that
  // waiter would call straight into a 429).
  void settle(Ticket ticket, RateCost estimate, RateCost actual, const RateLimitInfo& info,
              std::chrono::nanoseconds max_hold = std::chrono::nanoseconds::max());

  // Holds every grant for `d` from now (a 429 / 503 / 529): one pause for all waiters. At most
  // max_pause (a longer `d` is taken as max_pause: a server's absurd reset must not stop a
  // process for good).
  static constexpr std::chrono::hours max_pause{24};
  void pause_for(std::chrono::nanoseconds d);

  // New limits at runtime. What was spent stays spent in every budget that remains (also when
  // budgets are added or removed, or smooth is switched); a new budget starts empty. Throws
  // like the constructor.
  void set_limits(RateLimits limits);
  RateLimits limits() const;

  LimiterSnapshot snapshot() const;
  const std::string& name() const noexcept;
  executor_type get_executor() const noexcept { return executor_; }

 private:
  void initiate(RateCost cost, WaitRank rank, asio::cancellation_slot slot, Completion done);

  executor_type executor_;
  std::shared_ptr<detail::limiter_state> state_;
};

}  // namespace laneq
