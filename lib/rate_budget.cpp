#include "laneq/rate_budget.hpp"

#include <algorithm>
#include <stdexcept>

#include "laneq/rate_cost.hpp"

namespace laneq {

namespace {

__extension__ using int128 = __int128;  // GCC/Clang: cost * period overflows 64 bits for big TPM

// The RateLimiter's bounds (validate_rate_limits): they keep `at + period`, `spent + cost` and
// the spacing arithmetic far from overflow.
void check_spec(const BudgetSpec& s, const std::string& where) {
  if (s.limit < 1) throw std::invalid_argument(where + ".limit must be >= 1");
  if (s.limit > max_rate_limit) throw std::invalid_argument(where + ".limit must be at most 2^50");
  if (s.period.count() <= 0) throw std::invalid_argument(where + ".period must be > 0");
  if (s.period > std::chrono::hours(24 * 366))
    throw std::invalid_argument(where + ".period must be at most a year");
}

}  // namespace

RateBudgets::RateBudgets(std::vector<BudgetSpec> specs, Ticket first_ticket)
    : next_ticket_(std::max<Ticket>(1, first_ticket)) {
  for (std::size_t i = 0; i < specs.size(); ++i) {
    check_spec(specs[i], "BudgetSpec[" + std::to_string(i) + "] (" + specs[i].name + ")");
    budgets_.push_back(Budget{.spec = std::move(specs[i])});
  }
}

Duration RateBudgets::spacing(const Budget& b, std::int64_t cost) const {
  // cost * period / limit without overflow (periods are ns, costs may be millions of tokens);
  // never beyond one period either way: the window frees any cost by then
  const int128 period = b.spec.period.count();
  const int128 ns = std::clamp<int128>(static_cast<int128>(cost) * period / b.spec.limit, -period, period);
  return Duration(static_cast<Duration::rep>(ns));
}

// Which budgets a pause paces: a minute's or shorter (a daily quota's spacing would be minutes,
// for a day).
static bool paced_after_pause(const BudgetSpec& s) noexcept {
  return s.period <= std::chrono::minutes(1);
}

void RateBudgets::spend_now(Budget& b, std::int64_t units, TimePoint now) {
  // Debt beyond 2^62 (limits are at most 2^50) holds nothing more: the sum must not overflow
  // when a caller reports absurd usage over and over.
  units = std::min(units, (std::int64_t{1} << 62) - b.spent);
  if (units <= 0) return;
  b.window.push_back({now, units, 0});  // no ticket: debt or the server's view, not a grant
  b.spent += units;
}

void RateBudgets::expire(Budget& b, TimePoint now) {
  while (!b.window.empty() && b.window.front().at + b.spec.period <= now) {
    b.spent -= b.window.front().cost;
    b.window.pop_front();
  }
}

bool RateBudgets::fits(std::span<const std::int64_t> costs) const {
  if (costs.size() != budgets_.size()) return false;
  for (std::size_t i = 0; i < costs.size(); ++i)
    if (budget_units(costs[i]) > budgets_[i].spec.limit) return false;
  return true;
}

RateBudgets::Grant RateBudgets::try_acquire(std::span<const std::int64_t> costs, TimePoint now) {
  if (costs.size() != budgets_.size())
    throw std::invalid_argument("RateBudgets::try_acquire: one cost per budget expected");
  if (!fits(costs)) return {.granted = false, .ready_at = TimePoint::max(), .never = true};

  TimePoint ready = std::max(now, paused_until_);
  for (std::size_t i = 0; i < costs.size(); ++i) {
    const std::int64_t cost = budget_units(costs[i]);  // fits(): at most the limit
    if (cost <= 0) continue;
    Budget& b = budgets_[i];
    expire(b, now);
    if (b.spent + cost > b.spec.limit) {
      // the earliest time enough old grants have aged out
      std::int64_t need = b.spent + cost - b.spec.limit;
      for (const Entry& e : b.window) {
        need -= e.cost;
        if (need <= 0) {
          ready = std::max(ready, e.at + b.spec.period);
          break;
        }
      }
    }
    if (b.spec.smooth)
      ready = std::max(ready, b.next_smooth);
    else if (now < b.paced_until)  // (pacing ends there: no later than that)
      ready = std::max(ready, std::min(b.next_smooth, b.paced_until));
  }
  if (ready > now) return {.granted = false, .ready_at = ready};

  const Ticket ticket = next_ticket_++;
  for (std::size_t i = 0; i < costs.size(); ++i) {
    const std::int64_t cost = budget_units(costs[i]);
    if (cost <= 0) continue;
    Budget& b = budgets_[i];
    b.window.push_back({now, cost, ticket});
    b.spent += cost;
    b.last_grant_at = now;
    b.last_ticket = ticket;
    // (Kept in every mode: a pause's pacing starts from the real last grant.)
    b.next_smooth = now + spacing(b, cost);
  }
  return {.granted = true, .ready_at = now, .ticket = ticket};
}

void RateBudgets::reconcile(Ticket ticket, std::size_t budget, std::int64_t estimate,
                            std::int64_t actual, TimePoint now) {
  Budget& b = budgets_.at(budget);
  if (ticket == 0) return;  // debt and the server's view carry ticket 0: no grant of anyone's
  // In units a budget can hold: an absurd or negative count must not overflow the differences.
  actual = budget_units(actual);
  estimate = budget_units(estimate);
  expire(b, now);
  // Recent grants are at the back: search from there.
  for (auto it = b.window.rbegin(); it != b.window.rend(); ++it) {
    if (it->ticket != ticket) continue;
    std::int64_t diff = actual - it->cost;
    // As spend_now: grants still in the window reported absurd, again and again, stop adding
    // at 2^62 (8,192 of 2^50 + 1 units would overflow the sum into a budget that grants freely).
    if (diff > 0)
      diff = std::min(diff, std::max<std::int64_t>(0, (std::int64_t{1} << 62) - b.spent));
    it->cost += diff;
    b.spent += diff;
    // Spaced by what it really cost, but never later than a period from now: the window has
    // freed any debt by then (a server's absurd usage must not stop the budget for years).
    // Only grants whose spacing next_smooth holds: every grant when smooth, paced ones, and the
    // last grant (a burst's earlier grants were never spaced: their refunds must not cut a
    // later pacing short).
    if (b.spec.smooth || it->ticket == b.last_ticket ||
        (it->at >= b.paced_from && it->at < b.paced_until))
      b.next_smooth =
          std::min(std::max(it->at, b.next_smooth + spacing(b, diff)), now + b.spec.period);
    return;
  }
  if (const std::int64_t owed = actual - estimate; owed > 0) spend_now(b, owed, now);
}

void RateBudgets::pause_until(TimePoint until) noexcept {
  paused_until_ = std::max(paused_until_, until);
  if (until <= TimePoint{}) return;  // (no pause: a rebuild passing on none)
  // For a period after it, each budget of a minute or less spaces its grants as smooth mode
  // does: the waiters the pause held would all start at its end, into a server that enforces
  // its minute in short slices - 429s again, each a retry spent.
  for (auto& b : budgets_) {
    if (!paced_after_pause(b.spec)) continue;
    if (b.paced_until < until) b.paced_from = until;  // a new paced window (not an extension)
    b.paced_until = std::max(b.paced_until, until < TimePoint::max() - b.spec.period
                                                ? until + b.spec.period
                                                : TimePoint::max());
  }
}

void RateBudgets::set_limit(std::size_t budget, std::int64_t limit, Duration period) {
  Budget& b = budgets_.at(budget);
  BudgetSpec s = b.spec;
  s.limit = limit;
  s.period = period;
  check_spec(s, "RateBudgets::set_limit (" + s.name + ")");
  respace(b, b.spec, s);
  if (!paced_after_pause(s)) b.paced_until = {};
  b.spec = std::move(s);
}

// The wait still ahead after the last grant (smooth mode's, or a pause's pacing) was spaced at
// the old rate; at the new
// one it is (old limit / old period) / (new limit / new period) as long. Counted from the grant,
// not the window's last entry: debt or the server's view may have been spent after it.
void RateBudgets::respace(Budget& b, const BudgetSpec& old, const BudgetSpec& now) {
  if (b.next_smooth <= b.last_grant_at) return;  // no wait ahead (or never a grant)
  const TimePoint from = b.last_grant_at;
  // In long double (64-bit mantissa: well under a nanosecond at a year's nanoseconds): the
  // product of the rest, a period and a limit overflows even int128 at a year and 2^50.
  const long double scaled =
      std::min(static_cast<long double>((b.next_smooth - from).count()) / old.period.count() *
                   now.period.count() * old.limit / now.limit,
               static_cast<long double>(now.period.count()));  // the window frees it by then
  b.next_smooth = from + Duration(static_cast<Duration::rep>(scaled));
}

void RateBudgets::take_history(std::size_t budget, RateBudgets& from, std::size_t from_budget) {
  Budget& b = budgets_.at(budget);
  Budget& old = from.budgets_.at(from_budget);
  b.window = std::move(old.window);
  b.spent = old.spent;
  b.last_grant_at = old.last_grant_at;
  if (old.paced_until > b.paced_until) {
    b.paced_from = old.paced_from;
    b.paced_until = old.paced_until;
  }
  b.last_ticket = old.last_ticket;
  old.spent = 0;
  // (next_smooth is kept in every mode: newly smooth, or paced, it goes on from the last grant)
  b.next_smooth = old.next_smooth;
  respace(b, old.spec, b.spec);
}

void RateBudgets::lower_remaining(std::size_t budget, std::int64_t remaining, TimePoint now) {
  Budget& b = budgets_.at(budget);
  expire(b, now);
  const std::int64_t local = b.spec.limit - b.spent;
  if (remaining < 0 || remaining >= local) return;  // never raise, ignore nonsense
  spend_now(b, local - remaining, now);
}

std::int64_t RateBudgets::available(std::size_t budget, TimePoint now) {
  Budget& b = budgets_.at(budget);
  expire(b, now);
  return b.spec.limit - b.spent;
}

}  // namespace laneq
