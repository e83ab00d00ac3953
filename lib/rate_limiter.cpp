#include "laneq/rate_limiter.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

#include <asio/error.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>

#include "laneq/detail/aging.hpp"
#include "laneq/error.hpp"
#include "laneq/rate_budget.hpp"
#include "laneq/rate_limit_headers.hpp"

namespace laneq {

namespace {

using steady = std::chrono::steady_clock;
constexpr auto never = steady::time_point::max();

// The four budget kinds, in RateLimits order.
enum kind : std::size_t { k_requests, k_tokens, k_input, k_output, k_count };
constexpr std::array<const char*, k_count> kind_names = {"requests", "tokens", "input_tokens",
                                                         "output_tokens"};

std::array<std::int64_t, k_count> limits_of(const RateLimits& l) {
  return {l.requests, l.tokens, l.input_tokens, l.output_tokens};
}

std::int64_t& limit_field(RateLimits& l, kind k) {
  switch (k) {
    case k_tokens: return l.tokens;
    case k_input: return l.input_tokens;
    case k_output: return l.output_tokens;
    default: return l.requests;
  }
}

// Every entry point that takes a RateCost (initiate, try_acquire, fits, reconcile, and waiters
// as serviced) reads it through here (the retry policy reads it the same way).
std::int64_t cost_of(kind k, const RateCost& c) {
  switch (k) {
    case k_requests: return budget_units(c.requests);
    case k_tokens: return token_units(c);
    case k_input: return budget_units(c.input_tokens);
    case k_output: return budget_units(c.output_tokens);
    default: return 0;
  }
}

}  // namespace

void validate_rate_limits(const RateLimits& l, std::string_view where) {
  const auto bad = [&](const std::string& what) {
    throw std::system_error(make_error_code(errc::invalid_config),
                            "RateLimits::" + what + " (" + std::string(where) + ")");
  };
  const auto limits = limits_of(l);
  for (std::size_t k = 0; k < k_count; ++k)
    if (limits[k] < 0)
      bad(std::string(kind_names[k]) + " must be >= 0 (got " + std::to_string(limits[k]) + ")");
  if (l.period.count() <= 0) bad("period must be > 0");
  // Bounds that keep the window's time and unit arithmetic far from overflow.
  if (l.period > std::chrono::hours(24 * 366)) bad("period must be at most a year");
  for (std::size_t k = 0; k < k_count; ++k)
    if (limits[k] > max_rate_limit) bad(std::string(kind_names[k]) + " must be at most 2^50");
}

namespace detail {

struct limiter_state : std::enable_shared_from_this<limiter_state> {
  // (priority now, since, arrival): the map's first is the head
  using key = std::tuple<int, steady::rep, std::uint64_t>;
  struct waiter {
    RateCost cost;
    RateLimiter::Completion done;
    int priority = 0;            // as asked; an aging waiter's key holds what it has aged to
    steady::duration age_step{0};
  };
  using ready_list = std::vector<std::pair<RateLimiter::Completion, std::pair<std::error_code,
                                                                              RateLimiter::Ticket>>>;

  limiter_state(asio::any_io_executor ex, RateLimits l, std::string n)
      : name(std::move(n)), limits(l), budgets(specs_for(l)), timer(std::move(ex)) {}

  std::vector<BudgetSpec> specs_for(const RateLimits& l) {
    std::vector<BudgetSpec> specs;
    index.fill(npos);
    const auto lims = limits_of(l);
    for (std::size_t k = 0; k < k_count; ++k) {
      if (lims[k] == 0) continue;
      index[k] = specs.size();
      specs.push_back({.name = kind_names[k], .limit = lims[k], .period = l.period,
                       .smooth = l.smooth});
    }
    return specs;
  }

  // New limits, under the lock: budgets keep what was spent; added or removed ones (or smooth
  // switched) make a new set that takes the old one's history.
  void apply(const RateLimits& l) {
    const auto old_l = limits_of(limits), now_l = limits_of(l);
    bool same_shape = l.smooth == limits.smooth;
    for (std::size_t k = 0; k < k_count; ++k) same_shape = same_shape && ((old_l[k] == 0) == (now_l[k] == 0));
    if (same_shape) {
      for (std::size_t k = 0; k < k_count; ++k)
        if (index[k] != npos) budgets.set_limit(index[k], now_l[k], l.period);
    } else {
      const auto old_index = index;
      RateBudgets old = std::move(budgets);
      budgets = RateBudgets(specs_for(l), old.next_ticket());
      for (std::size_t k = 0; k < k_count; ++k)
        if (old_index[k] != npos && index[k] != npos) budgets.take_history(index[k], old, old_index[k]);
      budgets.pause_until(old.paused_until());
    }
    limits = l;
  }

  std::vector<std::int64_t> costs(const RateCost& c) const {
    std::vector<std::int64_t> out(budgets.size(), 0);
    for (std::size_t k = 0; k < k_count; ++k)
      if (index[k] != npos) out[index[k]] = cost_of(static_cast<kind>(k), c);
    return out;
  }

  // Grants from the head while possible; arms the timer for the head's ready time. Completions
  // are collected and run by the caller after unlocking (they post; never under our lock).
  void service(ready_list& ready) {
    service_waiters(ready);
    refresh();
  }

  // The lock-free fast path of a limiter without budgets (a queue with no limits configured):
  // it grants at once unless someone waits or a server-requested pause holds. These mirror
  // what it needs; refresh() runs under `mu` after every change to budgets, waiters or pause.
  std::atomic<bool> unmetered{false};            // no budgets and nobody waiting
  std::atomic<std::int64_t> paused_until_ns{0};  // budgets.paused_until(), steady clock
  std::atomic<std::uint64_t> fast_granted{0};    // grants made by the fast path

  void refresh() {
    paused_until_ns.store(budgets.paused_until().time_since_epoch().count(),
                          std::memory_order_release);
    unmetered.store(budgets.size() == 0 && waiters.empty(), std::memory_order_release);
  }

  bool open_now() const {
    if (!unmetered.load(std::memory_order_acquire)) return false;
    const auto until = paused_until_ns.load(std::memory_order_acquire);
    return until == 0 || steady::now().time_since_epoch().count() >= until;
  }

  // No budgets (a pause alone held it): nothing was charged, so nothing may be reconciled
  // later, even against a budget set_limits adds meanwhile.
  RateLimiter::Ticket ticket_of(const RateBudgets::Grant& g) const {
    return budgets.size() == 0 ? RateLimiter::unmetered_ticket : g.ticket;
  }

  // An aging waiter's priority at `now` (RateLimiter's WaitRank), as the scheduler ages lanes.
  static int aged(int priority, steady::time_point since, steady::duration step,
                  steady::time_point now) {
    return static_cast<int>(detail::aged_rank(priority, since, step, now));
  }

  // When a waiter aging from `since` by `step` improves next, after `now`.
  static steady::time_point next_step(steady::time_point since, steady::duration step,
                                      steady::time_point now) {
    const auto stepped = now <= since ? 0 : (now - since) / step;
    return since + (stepped + 1) * step;
  }

  void add_aging(std::uint64_t arrival, const key& k, steady::duration step,
                 steady::time_point now) {
    const auto next = next_step(steady::time_point(steady::duration(std::get<1>(k))), step, now);
    aging.emplace(arrival, aging_entry{k, next});
    aging_due.emplace(next, arrival);
  }
  void erase_aging(std::uint64_t arrival) {
    const auto a = aging.find(arrival);
    if (a == aging.end()) return;
    if (a->second.next != never) aging_due.erase({a->second.next, arrival});
    aging.erase(a);
  }

  // Moves the aging waiters whose next step has come up to the priority they have reached;
  // returns when the next one improves again (never: none will), so the timer can look at the
  // head again then. Only those due are touched: O(log A) per step of a waiter, not a walk
  // over all A at each of the A wake-ups a step period brings.
  steady::time_point reage(steady::time_point now) {
    while (!aging_due.empty() && aging_due.begin()->first <= now) {
      const std::uint64_t arrival = aging_due.begin()->second;
      aging_due.erase(aging_due.begin());
      aging_entry& e = aging.at(arrival);
      auto it = waiters.find(e.k);
      const steady::time_point since{steady::duration(std::get<1>(e.k))};
      const auto step = it->second.age_step;  // read first: extract() invalidates `it`
      const int p = aged(it->second.priority, since, step, now);
      if (p < std::get<0>(e.k)) {
        auto node = waiters.extract(it);
        e.k = key{p, std::get<1>(e.k), arrival};
        node.key() = e.k;
        waiters.insert(std::move(node));
      }
      // At 0 it ages no more; it stays in `aging`, where its key is found.
      e.next = p > 0 ? next_step(since, step, now) : never;
      if (e.next != never) aging_due.emplace(e.next, arrival);
    }
    return aging_due.empty() ? never : aging_due.begin()->first;
  }

  void service_waiters(ready_list& ready) {
    const auto now = steady::now();
    const auto next_aging = aging.empty() ? never : reage(now);
    while (!waiters.empty()) {
      auto it = waiters.begin();
      const auto g = budgets.try_acquire(costs(it->second.cost), now);
      if (!g.granted && !g.never) {
        arm(std::min(g.ready_at, next_aging));  // an aged waiter may become the head first
        return;
      }
      if (it->second.age_step.count() > 0) erase_aging(std::get<2>(it->first));
      if (g.granted) ++granted;
      ready.emplace_back(std::move(it->second.done),
                         std::pair{g.never ? make_error_code(errc::exceeds_rate_limit)
                                           : std::error_code{},
                                   g.never ? RateLimiter::Ticket{0} : ticket_of(g)});
      waiters.erase(it);
    }
    disarm();
  }

  // After new limits: every waiter that can never fit now fails at once, not when its turn
  // comes (behind the head, a pause, or better-ranked arrivals, holding a worker meanwhile).
  void fail_unfit(ready_list& ready) {
    for (auto it = waiters.begin(); it != waiters.end();) {
      if (budgets.fits(costs(it->second.cost))) {
        ++it;
        continue;
      }
      if (it->second.age_step.count() > 0) erase_aging(std::get<2>(it->first));
      ready.emplace_back(std::move(it->second.done),
                         std::pair{make_error_code(errc::exceeds_rate_limit),
                                   RateLimiter::Ticket{0}});
      it = waiters.erase(it);
    }
  }

  // reconcile() under the lock, without granting: true if something was refunded.
  bool reconcile_costs(RateLimiter::Ticket ticket, const RateCost& estimate,
                       const RateCost& actual) {
    const auto now = steady::now();
    bool refunded = false;
    for (std::size_t k = 0; k < k_count; ++k) {
      if (index[k] == npos) continue;
      const auto e = cost_of(static_cast<kind>(k), estimate);
      const auto a = cost_of(static_cast<kind>(k), actual);
      if (e == a) continue;
      budgets.reconcile(ticket, index[k], e, a, now);
      refunded = refunded || a < e;
    }
    return refunded;
  }

  // observe() under the lock, without granting (new limits fail the waiters they rule out).
  void take_server_view(const RateLimitInfo& info, std::chrono::nanoseconds max_hold,
                        ready_list& ready);

  void arm(steady::time_point at) {
    if (at == armed_at) return;  // already set for exactly this time
    armed_at = at;
    timer.expires_at(at);
    timer.async_wait([self = shared_from_this(), gen = ++generation](std::error_code ec) {
      if (ec) return;
      ready_list ready;
      {
        std::lock_guard lock(self->mu);
        if (gen != self->generation) return;  // re-armed after this wait fired
        self->armed_at = never;
        self->service(ready);
      }
      run(ready);
    });
  }

  void disarm() {
    if (armed_at == never) return;
    armed_at = never;
    ++generation;
    timer.cancel();  // lets io_context::run() return when nobody waits
  }

  // Holds every grant for `d` (clamped to a day: a server's absurd value must not overflow).
  void pause(std::chrono::nanoseconds d) {
    const auto now = steady::now();
    d = std::min<std::chrono::nanoseconds>(d, RateLimiter::max_pause);
    if (budgets.paused_until() <= now) ++pauses;  // a new pause, not N workers' echoes of one
    budgets.pause_until(now + std::chrono::duration_cast<Duration>(d));
    refresh();
  }

  // Grants `c` now if every budget allows: the ticket, or 0.
  RateLimiter::Ticket grant_now(const std::vector<std::int64_t>& c) {
    const auto g = budgets.try_acquire(c, steady::now());
    if (!g.granted) return 0;
    ++granted;
    return ticket_of(g);
  }

  static void run(ready_list& ready) {
    for (auto& [done, result] : ready) done(result.first, result.second);
  }

  static constexpr std::size_t npos = static_cast<std::size_t>(-1);

  mutable std::mutex mu;
  std::string name;
  RateLimits limits;
  std::array<std::size_t, k_count> index{};  // kind -> budget index, npos = none
  RateBudgets budgets;
  std::map<key, waiter> waiters;
  // Waiters whose rank ages, by arrival: their current key, and when they improve next
  // (never: at 0); `aging_due` orders the latter.
  struct aging_entry {
    key k;
    steady::time_point next;
  };
  std::map<std::uint64_t, aging_entry> aging;
  std::set<std::pair<steady::time_point, std::uint64_t>> aging_due;
  std::uint64_t next_arrival = 0;
  std::uint64_t granted = 0;
  std::uint64_t pauses = 0;
  asio::steady_timer timer;
  steady::time_point armed_at = never;
  std::uint64_t generation = 0;
};

}  // namespace detail

namespace {

struct canceller {
  std::weak_ptr<detail::limiter_state> state;
  detail::limiter_state::key key;  // as placed: an aging waiter's is found through `aging`

  void operator()(asio::cancellation_type type) const {
    if ((type & asio::cancellation_type::all) == asio::cancellation_type::none) return;
    auto s = state.lock();
    if (!s) return;
    detail::limiter_state::ready_list ready;
    RateLimiter::Completion done;
    {
      std::lock_guard lock(s->mu);
      auto k = key;
      if (const auto a = s->aging.find(std::get<2>(key)); a != s->aging.end()) {
        k = a->second.k;
        s->erase_aging(std::get<2>(key));
      }
      auto it = s->waiters.find(k);
      if (it == s->waiters.end()) return;  // granted already; its completion is on its way
      const bool was_head = it == s->waiters.begin();
      done = std::move(it->second.done);
      s->waiters.erase(it);
      if (was_head) s->service(ready);  // the next head may be ready sooner
      s->refresh();
    }
    done(asio::error::operation_aborted, 0);
    detail::limiter_state::run(ready);
  }
};

}  // namespace

RateLimiter::RateLimiter(executor_type ex, RateLimits limits, std::string name)
    : executor_(ex) {
  validate_rate_limits(limits, "limiter \"" + name + "\"");
  state_ = std::make_shared<detail::limiter_state>(ex, limits, std::move(name));
  state_->refresh();
}

RateLimiter::~RateLimiter() {
  std::map<detail::limiter_state::key, detail::limiter_state::waiter> dropped;
  {
    std::lock_guard lock(state_->mu);
    dropped.swap(state_->waiters);
    state_->aging.clear();
    state_->aging_due.clear();
    state_->disarm();
  }
  // `dropped` goes here, outside the lock: a handler's destructor may call back into us.
}

void RateLimiter::initiate(RateCost cost, WaitRank rank, asio::cancellation_slot slot,
                           Completion done) {
  auto& s = *state_;
  detail::limiter_state::ready_list ready;
  {
    std::lock_guard lock(s.mu);
    const auto c = s.costs(cost);
    if (!s.budgets.fits(c)) {
      ready.emplace_back(std::move(done),
                         std::pair{make_error_code(errc::exceeds_rate_limit), Ticket{0}});
    } else if (const auto t = s.waiters.empty() ? s.grant_now(c) : Ticket{0}; t != 0) {
      ready.emplace_back(std::move(done), std::pair{std::error_code{}, t});
    } else {
      const auto now = steady::now();
      // Bounded so that the aging arithmetic cannot overflow: a step of a century or more is no
      // aging; `since` within a century of now.
      constexpr steady::duration century = std::chrono::hours(24 * 365 * 100);
      if (rank.age_step >= century) rank.age_step = steady::duration::zero();
      const auto since = rank.since == steady::time_point{}
                             ? now
                             : std::clamp(rank.since, now - century, now + century);
      const auto arrival = s.next_arrival++;
      const detail::limiter_state::key key{
          detail::limiter_state::aged(rank.priority, since, rank.age_step, now),
          since.time_since_epoch().count(), arrival};
      s.waiters.emplace(key, detail::limiter_state::waiter{cost, std::move(done), rank.priority,
                                                           rank.age_step});
      const bool ages = rank.age_step.count() > 0 && std::get<0>(key) > 0;
      if (ages) s.add_aging(arrival, key, rank.age_step, now);
      if (slot.is_connected()) slot.emplace<canceller>(canceller{state_, key});
      // The head changed, or an aging waiter came: the timer must also wake at its next step
      // (service re-arms for the earlier of the head's ready time and that).
      if (ages || s.waiters.begin()->first == key) s.service(ready);
      s.refresh();
    }
  }
  detail::limiter_state::run(ready);
}

asio::awaitable<RateLimiter::Ticket> RateLimiter::acquire(RateCost cost, int priority) {
  auto [ec, t] =
      co_await async_acquire(cost, priority, asio::experimental::as_tuple(asio::use_awaitable));
  if (ec) throw std::system_error(ec);
  co_return t;
}

RateLimiter::Ticket RateLimiter::try_acquire(RateCost cost) {
  auto& s = *state_;
  if (s.open_now()) {  // no budgets: nothing to charge, nothing to reconcile
    s.fast_granted.fetch_add(1, std::memory_order_relaxed);
    return unmetered_ticket;
  }
  std::lock_guard lock(s.mu);
  if (!s.waiters.empty()) return 0;  // no barging past waiters
  return s.grant_now(s.costs(cost));
}

bool RateLimiter::fits(RateCost cost) const {
  auto& s = *state_;
  if (s.unmetered.load(std::memory_order_acquire)) return true;  // no budgets
  std::lock_guard lock(s.mu);
  return s.budgets.fits(s.costs(cost));
}

void RateLimiter::reconcile(Ticket ticket, RateCost estimate, RateCost actual) {
  settle(ticket, estimate, actual, RateLimitInfo{});  // grants only if something was refunded
}

void RateLimiter::settle(Ticket ticket, RateCost estimate, RateCost actual,
                         const RateLimitInfo& info, std::chrono::nanoseconds max_hold) {
  const bool metered = ticket != 0 && ticket != unmetered_ticket;
  const bool seen = info.requests.any() || info.tokens.any() || info.input_tokens.any() ||
                    info.output_tokens.any();
  if (!metered && !seen) return;  // nothing to reconcile nor to learn: no lock (the B1 path)
  auto& s = *state_;
  detail::limiter_state::ready_list ready;
  {
    std::lock_guard lock(s.mu);
    const bool refunded = metered && s.reconcile_costs(ticket, estimate, actual);
    if (seen) s.take_server_view(info, max_hold, ready);
    if (refunded || seen) s.service(ready);  // one grant decision, with the server's view in
  }
  detail::limiter_state::run(ready);
}

void RateLimiter::observe(const Headers& headers) {
  if (headers.empty()) return;
  observe(parse_rate_limit_headers(headers, std::chrono::system_clock::now()));
}

void RateLimiter::observe(const RateLimitInfo& info, std::chrono::nanoseconds max_hold) {
  // Nothing about budgets in `info` (retry-after alone is the retry policy's): nothing to do.
  settle(0, {}, {}, info, max_hold);
}

namespace detail {

void limiter_state::take_server_view(const RateLimitInfo& info, std::chrono::nanoseconds max_hold,
                                     ready_list& ready) {
  const auto now = steady::now();
  // The same answer's retry-after bounds an exhausted bucket's hold: the server's word on when
  // to call again wins over a reset that says when the bucket is full (Anthropic sends both).
  if (info.retry_after && info.retry_after->count() > 0)
    max_hold = std::min(max_hold, *info.retry_after);
  const std::array<const RateLimitInfo::Bucket*, k_count> buckets = {
      &info.requests, &info.tokens, &info.input_tokens, &info.output_tokens};
  const bool per_minute = limits.period == std::chrono::minutes(1);
  const bool split = info.input_tokens.limit || info.output_tokens.limit;
  if (limits.adopt_server_limits) {
    // The server's limits, up or down; a kind the config left at 0 gets a budget of its own,
    // except a combined tokens one where the server states input and output limits apart:
    // Anthropic's tokens headers show the most restrictive of those, not an input + output
    // budget (a configured combined budget keeps its own limit then).
    RateLimits adopted = limits;
    for (std::size_t k = 0; k < k_count; ++k) {
      const auto& b = *buckets[k];
      if (!b.limit || *b.limit <= 0) continue;
      if (k == k_tokens && split) continue;  // (configured or not: it is not input + output)
      // Providers state limits per minute; our budget counts per `period`.
      // (capped at 2^50 before the conversion: a server's absurd limit must not overflow it)
      limit_field(adopted, static_cast<kind>(k)) = std::max<std::int64_t>(
          1, static_cast<std::int64_t>(std::min<long double>(
                 static_cast<long double>(*b.limit) * limits.period.count() /
                     std::chrono::nanoseconds(std::chrono::minutes(1)).count(),
                 static_cast<long double>(max_rate_limit))));
    }
    if (limits_of(adopted) != limits_of(limits)) {
      apply(adopted);
      fail_unfit(ready);
    }
  }
  for (std::size_t k = 0; k < k_count; ++k) {
    const auto i = index[k];
    const auto& b = *buckets[k];
    // Exhausted, budget or not: nothing more until the server's reset. A reset that is due
    // now or past by our clock (Anthropic's whole-second resets, a clock ahead of the
    // server's, OpenAI's "0s") still said 0 left: a short hold, after which the server's next
    // answer tells, instead of calls straight into 429s.
    const bool exhausted = b.remaining && *b.remaining == 0;
    if (exhausted && max_hold.count() <= 0) continue;  // no holds: nor spent
    if (exhausted && b.reset_after)
      pause(std::min(b.reset_after->count() > 0
                         ? *b.reset_after
                         : std::chrono::nanoseconds(RateLimiter::past_reset_hold),
                     max_hold));
    if (i == npos) continue;
    // `remaining` counts the server's minute; it only compares with a per-minute budget. An
    // exhausted bucket with a reset paused above; without one (missing, unreadable) the
    // budget is spent instead, so its units come back within the minute.
    // (Not a combined tokens budget from Anthropic's tokens headers beside input and output
    // ones: they show the most restrictive of those, not what input + output has left.)
    if (k == k_tokens && split) continue;
    if (b.remaining && (*b.remaining > 0 || !b.reset_after) && per_minute)
      budgets.lower_remaining(i, *b.remaining, now);
  }
}

}  // namespace detail

void RateLimiter::pause_for(std::chrono::nanoseconds d) {
  if (d.count() <= 0) return;
  auto& s = *state_;
  detail::limiter_state::ready_list ready;
  {
    std::lock_guard lock(s.mu);
    s.pause(d);
    // Re-arm for the new ready time. A head that became ready before the pause (its timer not
    // run yet) may be granted here: run it, never drop it.
    s.service(ready);
  }
  detail::limiter_state::run(ready);
}

void RateLimiter::set_limits(RateLimits limits) {
  auto& s = *state_;
  validate_rate_limits(limits, "limiter \"" + s.name + "\"");
  detail::limiter_state::ready_list ready;
  {
    std::lock_guard lock(s.mu);
    s.apply(limits);
    s.fail_unfit(ready);  // exceeds_rate_limit for every waiter that can never fit now
    s.service(ready);     // grants what fits
  }
  detail::limiter_state::run(ready);
}

RateLimits RateLimiter::limits() const {
  std::lock_guard lock(state_->mu);
  return state_->limits;
}

LimiterSnapshot RateLimiter::snapshot() const {
  auto& s = *state_;
  std::lock_guard lock(s.mu);
  const auto now = steady::now();
  LimiterSnapshot out;
  out.name = s.name;
  for (std::size_t i = 0; i < s.budgets.size(); ++i) {
    const auto& spec = s.budgets.spec(i);
    out.budgets.push_back({.name = spec.name,
                           .limit = spec.limit,
                           .period_s = std::chrono::duration<double>(spec.period).count(),
                           .available = s.budgets.available(i, now)});
  }
  out.waiting = s.waiters.size();
  out.granted = s.granted + s.fast_granted.load(std::memory_order_relaxed);
  out.pauses = s.pauses;
  const auto paused = s.budgets.paused_until();
  out.paused_for_s = paused > now ? std::chrono::duration<double>(paused - now).count() : 0.0;
  return out;
}

const std::string& RateLimiter::name() const noexcept { return state_->name; }

}  // namespace laneq
