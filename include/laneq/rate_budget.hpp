#pragma once
// RateBudgets: the limiter's arithmetic, pure (no Asio, no clock: `now` is passed in).
//
// Each budget allows `limit` units per `period` (requests/min, tokens/min, input or output
// tokens/min). A unit spent at t comes back at exactly t + period, so no window of length
// `period` ever holds more than `limit` units: a full budget may be spent in one burst, yet
// there is no overshoot at window edges (a classic token bucket with a full start lets
// limit + refill through in the first period). `smooth` additionally spaces grants
// cost * period / limit apart: providers enforce minute limits in short slices, and a burst
// that fits the minute still gets 429s.
//
// try_acquire either grants every cost at once or grants nothing and returns the exact time
// when it would (the earliest time every budget fits). Costs are estimates; reconcile()
// refunds or charges the difference once the actual usage is known (a charge beyond the
// limit is debt: later grants wait until it ages out). pause_until() holds every grant (the
// provider's 429 / retry-after; with no budgets at all, only the pause applies), then spaces
// them as smooth mode does for a period in budgets of a minute or less; lower_remaining()
// adopts a lower remaining budget reported by
// the provider. Memory: one entry per grant still inside its budget's window.
#include <chrono>
#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <vector>

#include "laneq/scheduler.hpp"  // TimePoint, Duration

namespace laneq {

struct BudgetSpec {
  std::string name;                               // "requests", "tokens", ...
  std::int64_t limit = 0;                         // units per period, 1 to 2^50
  Duration period = std::chrono::minutes(1);      // > 0, at most a year (366 days)
  bool smooth = false;                            // space grants cost x period / limit apart
};

class RateBudgets {
 public:
  using Ticket = std::uint64_t;                   // 0 = none

  struct Grant {
    bool granted = false;
    TimePoint ready_at{};                         // granted: now; else when it would be
    Ticket ticket = 0;                            // for reconcile()
    bool never = false;                           // a cost exceeds its budget's limit
  };

  // Throws std::invalid_argument naming the bad field. `first_ticket`: when budgets are rebuilt,
  // pass the old next_ticket() so a ticket from before never names a grant made after.
  explicit RateBudgets(std::vector<BudgetSpec> specs, Ticket first_ticket = 1);
  Ticket next_ticket() const noexcept { return next_ticket_; }

  std::size_t size() const noexcept { return budgets_.size(); }
  const BudgetSpec& spec(std::size_t i) const { return budgets_.at(i).spec; }

  // costs[i] is charged to budget i (0 = untouched); costs.size() must equal size(). Costs (and
  // reconcile's counts) are read as budget_units (rate_cost.hpp): below 0 as 0, above 2^50 as
  // 2^50 + 1, more than any limit.
  bool fits(std::span<const std::int64_t> costs) const;
  Grant try_acquire(std::span<const std::int64_t> costs, TimePoint now);

  // Replaces a granted estimate by the actual amount: refunds or charges the difference. If the
  // grant already aged out of the window (a call longer than the period), a refund is moot and
  // an extra charge is taken as debt from now. Once per ticket: a second call after the grant
  // aged out would charge the extra again. Ticket 0 (no grant) changes nothing.
  void reconcile(Ticket ticket, std::size_t budget, std::int64_t estimate, std::int64_t actual,
                 TimePoint now);

  // Holds every grant until `until`; then, for one period of each budget of a minute or
  // less, its grants are spaced as in smooth mode (see pause_until in rate_budget.cpp).
  void pause_until(TimePoint until) noexcept;
  TimePoint paused_until() const noexcept { return paused_until_; }

  // Runtime change of a budget; units already spent stay spent. The wait still ahead after
  // the last grant (smooth mode's, or a pause's pacing) is respaced at the new rate.
  void set_limit(std::size_t budget, std::int64_t limit, Duration period);
  // Budget `budget` takes over what `from`'s `from_budget` spent (its grants still in the
  // window, their tickets, its smooth spacing at this budget's rate): for a rebuilt set of
  // budgets. `from` keeps that budget empty.
  void take_history(std::size_t budget, RateBudgets& from, std::size_t from_budget);

  // The provider reports fewer remaining units than we think we have: spend the difference.
  void lower_remaining(std::size_t budget, std::int64_t remaining, TimePoint now);

  // Units available now (negative while in debt).
  std::int64_t available(std::size_t budget, TimePoint now);

 private:
  struct Entry {
    TimePoint at;
    std::int64_t cost;
    Ticket ticket;
  };
  struct Budget {
    BudgetSpec spec{};
    std::deque<Entry> window{};                   // grants not yet aged out, oldest first
    std::int64_t spent = 0;                       // sum of window costs
    TimePoint next_smooth{};                      // earliest next grant, read when smooth
                                                  // or paced (kept in every mode)
    TimePoint paced_from{}, paced_until{};        // spaced as smooth then (after a pause)
    Ticket last_ticket = 0;                       // the grant next_smooth was set by
    TimePoint last_grant_at{};                    // respacing counts from it (not window.back())
  };

  void expire(Budget& b, TimePoint now);
  static void respace(Budget& b, const BudgetSpec& old, const BudgetSpec& now);
  void spend_now(Budget& b, std::int64_t units, TimePoint now);
  Duration spacing(const Budget& b, std::int64_t cost) const;

  std::vector<Budget> budgets_;
  TimePoint paused_until_{};
  Ticket next_ticket_ = 1;
};

}  // namespace laneq
