// RateBudgets: the limiter's arithmetic on a virtual clock.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include "laneq/rate_budget.hpp"

using namespace std::chrono_literals;
using laneq::BudgetSpec;
using laneq::RateBudgets;
using laneq::TimePoint;

namespace {

const TimePoint t0 = TimePoint{} + 1h;

std::vector<std::int64_t> c(std::initializer_list<std::int64_t> v) { return v; }

// Max sum of `cost` over grants inside any window [t, t + len).
template <class Grants>
std::int64_t max_in_window(const Grants& grants, laneq::Duration len) {
  std::int64_t best = 0;
  for (std::size_t i = 0; i < grants.size(); ++i) {
    std::int64_t sum = 0;
    for (std::size_t j = i; j < grants.size() && grants[j].first < grants[i].first + len; ++j)
      sum += grants[j].second;
    best = std::max(best, sum);
  }
  return best;
}

}  // namespace

TEST_CASE("a full budget may be spent in one burst, then waits for the oldest unit to age out",
          "[rate_budget]") {
  RateBudgets b({{.name = "requests", .limit = 50, .period = 5s}});
  for (int i = 0; i < 50; ++i) REQUIRE(b.try_acquire(c({1}), t0).granted);
  auto g = b.try_acquire(c({1}), t0 + 1s);
  CHECK_FALSE(g.granted);
  CHECK(g.ready_at == t0 + 5s);
  CHECK(b.try_acquire(c({1}), t0 + 5s).granted);
  CHECK(b.available(0, t0 + 5s) == 49);  // the burst aged out; one new unit is spent
}

TEST_CASE("spent units come back exactly one period after they were spent", "[rate_budget]") {
  RateBudgets b({{.name = "tokens", .limit = 100, .period = 10s}});
  REQUIRE(b.try_acquire(c({60}), t0).granted);
  REQUIRE(b.try_acquire(c({40}), t0 + 4s).granted);
  auto g = b.try_acquire(c({50}), t0 + 5s);
  CHECK_FALSE(g.granted);
  CHECK(g.ready_at == t0 + 10s);  // the 60 from t0 come back then
  CHECK(b.available(0, t0 + 10s) == 60);
  CHECK(b.available(0, t0 + 14s) == 100);
}

TEST_CASE("smooth mode spaces grants period / limit apart", "[rate_budget]") {
  RateBudgets b({{.name = "requests", .limit = 600, .period = 60s, .smooth = true}});
  REQUIRE(b.try_acquire(c({1}), t0).granted);
  auto g = b.try_acquire(c({1}), t0);
  CHECK_FALSE(g.granted);
  CHECK(g.ready_at == t0 + 100ms);
  CHECK(b.try_acquire(c({1}), t0 + 100ms).granted);
  CHECK_FALSE(b.try_acquire(c({1}), t0 + 150ms).granted);
}

TEST_CASE("smooth mode: a limit changed between grants respaces the wait still ahead",
          "[rate_budget]") {
  RateBudgets b({{.name = "requests", .limit = 1, .period = 60s, .smooth = true}});
  REQUIRE(b.try_acquire(c({1}), t0).granted);
  CHECK(b.try_acquire(c({1}), t0).ready_at == t0 + 60s);
  b.set_limit(0, 600, 60s);  // raised: 100 ms apart from now on, from the last grant too
  CHECK(b.try_acquire(c({1}), t0).ready_at == t0 + 100ms);
  REQUIRE(b.try_acquire(c({1}), t0 + 100ms).granted);
  b.set_limit(0, 60, 60s);  // lowered: 1 s apart
  CHECK(b.try_acquire(c({1}), t0 + 100ms).ready_at == t0 + 1100ms);

  // cut hard: the respaced wait (10 min) is capped at a period, by when the window frees it
  RateBudgets t({{.name = "tokens", .limit = 2'000'000, .period = 60s, .smooth = true}});
  REQUIRE(t.try_acquire(c({100'000}), t0).granted);  // next in 3 s
  t.set_limit(0, 10'000, 60s);
  CHECK(t.try_acquire(c({1}), t0).ready_at <= t0 + 60s);
}

TEST_CASE("smooth mode: respacing counts from the last grant, not from debt or the server's "
          "view spent after it",
          "[rate_budget]") {
  // 64 per 64 s: 1 s apart, halved to 2 s (powers of two keep respace()'s long double exact).
  const BudgetSpec full{.name = "requests", .limit = 64, .period = 64s, .smooth = true};
  BudgetSpec half = full;
  half.limit = 32;

  SECTION("a lower remaining count, then set_limit") {
    RateBudgets b({full});
    REQUIRE(b.try_acquire(c({1}), t0).granted);  // next at t0 + 1 s
    b.lower_remaining(0, 53, t0 + 500ms);        // 10 units spent at t0 + 0.5 s, ticket 0
    b.set_limit(0, 32, 64s);
    // 1 s still ahead of the grant at t0 becomes 2 s (from t0 + 0.5 s it read t0 + 1.5 s)
    CHECK(b.try_acquire(c({1}), t0 + 1s).ready_at == t0 + 2s);
  }
  SECTION("debt from a reconcile, then set_limit") {
    RateBudgets b({full});
    const auto aged = b.try_acquire(c({1}), t0);
    REQUIRE(aged.granted);
    REQUIRE(b.try_acquire(c({1}), t0 + 65s).granted);  // next at t0 + 66 s
    b.reconcile(aged.ticket, 0, 1, 3, t0 + 65500ms);    // aged out: 2 as debt at t0 + 65.5 s
    b.set_limit(0, 32, 64s);
    CHECK(b.try_acquire(c({1}), t0 + 66s).ready_at == t0 + 67s);
  }
  SECTION("a lower remaining count, then budgets rebuilt at the new rate (take_history)") {
    RateBudgets b({full});
    REQUIRE(b.try_acquire(c({1}), t0).granted);
    b.lower_remaining(0, 53, t0 + 500ms);
    RateBudgets rebuilt({half}, b.next_ticket());
    rebuilt.take_history(0, b, 0);
    CHECK(rebuilt.try_acquire(c({1}), t0 + 1s).ready_at == t0 + 2s);
  }
  SECTION("newly smooth: spaced by the last grant, not by a later lower remaining count") {
    BudgetSpec burst = full;
    burst.smooth = false;
    RateBudgets b({burst});
    REQUIRE(b.try_acquire(c({1}), t0).granted);
    b.lower_remaining(0, 53, t0 + 500ms);  // 10 units: spaced as a grant they read t0 + 10.5 s
    RateBudgets rebuilt({full}, b.next_ticket());
    rebuilt.take_history(0, b, 0);
    CHECK(rebuilt.try_acquire(c({1}), t0 + 500ms).ready_at == t0 + 1s);
  }
}

TEST_CASE("smooth mode: respacing at a year's period and a limit of 2^50 does not overflow",
          "[rate_budget]") {
  // rest x period x limit was computed in int128: ~5e47 here, far beyond its 1.7e38
  const laneq::Duration year = std::chrono::hours(24 * 365);
  const std::int64_t most = std::int64_t{1} << 50;  // RateLimits' largest limit
  RateBudgets b({{.name = "tokens", .limit = most, .period = year, .smooth = true}});
  REQUIRE(b.try_acquire(c({most / 2}), t0).granted);
  CHECK(b.try_acquire(c({1}), t0).ready_at == t0 + year / 2);
  b.set_limit(0, most - 1, year);  // a hair lower: the wait ahead grows by a hair
  const auto lower = b.try_acquire(c({1}), t0).ready_at;
  CHECK(lower >= t0 + year / 2);
  CHECK(lower <= t0 + year / 2 + 1us);
  b.set_limit(0, most, year / 2);  // twice the rate: half the wait
  const auto faster = b.try_acquire(c({1}), t0).ready_at - t0;
  CHECK(faster >= year / 4 - 1us);
  CHECK(faster <= year / 4 + 1us);
}

TEST_CASE("every budget must fit at once, and the wait is for the slowest", "[rate_budget]") {
  RateBudgets b({{.name = "requests", .limit = 10, .period = 60s},
                 {.name = "tokens", .limit = 1000, .period = 60s}});
  REQUIRE(b.try_acquire(c({1, 600}), t0).granted);
  auto g = b.try_acquire(c({1, 600}), t0 + 1s);
  CHECK_FALSE(g.granted);
  CHECK(g.ready_at == t0 + 60s);
  CHECK(b.available(0, t0 + 1s) == 9);  // a refused acquire charges nothing
  CHECK(b.try_acquire(c({1, 300}), t0 + 1s).granted);
}

TEST_CASE("reconcile refunds an overestimate and charges an underestimate", "[rate_budget]") {
  RateBudgets b({{.name = "tokens", .limit = 1000, .period = 60s}});
  auto g1 = b.try_acquire(c({600}), t0);
  REQUIRE(g1.granted);
  CHECK_FALSE(b.try_acquire(c({600}), t0 + 1s).granted);
  b.reconcile(g1.ticket, 0, 600, 100, t0 + 2s);  // used 100 of 600
  CHECK(b.available(0, t0 + 2s) == 900);
  auto g2 = b.try_acquire(c({600}), t0 + 2s);
  REQUIRE(g2.granted);
  b.reconcile(g2.ticket, 0, 600, 850, t0 + 3s);  // used more than estimated
  CHECK(b.available(0, t0 + 3s) == 50);
}

TEST_CASE("a charge beyond the limit is debt paid from future budget", "[rate_budget]") {
  RateBudgets b({{.name = "tokens", .limit = 1000, .period = 60s}});
  auto g = b.try_acquire(c({100}), t0);
  b.reconcile(g.ticket, 0, 100, 1500, t0 + 1s);
  CHECK(b.available(0, t0 + 1s) == -500);
  auto next = b.try_acquire(c({1}), t0 + 30s);
  CHECK_FALSE(next.granted);
  CHECK(next.ready_at == t0 + 60s);
}

TEST_CASE("smooth mode: absurd usage delays the next grant by one period at most, and debt "
          "entries are no one's ticket",
          "[rate_budget]") {
  RateBudgets b({{.name = "tokens", .limit = 10'000, .period = 60s, .smooth = true}});
  auto g = b.try_acquire(c({100}), t0);
  REQUIRE(g.granted);
  b.reconcile(g.ticket, 0, 100, std::int64_t{1} << 40, t0 + 1s);  // the queue's own cap
  auto next = b.try_acquire(c({1}), t0 + 2s);
  CHECK_FALSE(next.granted);
  CHECK(next.ready_at <= t0 + 1s + 60s);  // was ~209 years (or wrapped negative)
  CHECK(b.try_acquire(c({1}), t0 + 2min).granted);

  RateBudgets d({{.name = "tokens", .limit = 1000, .period = 60s}});
  d.lower_remaining(0, 500, t0);  // the server says 500 remain: 500 spent, as ticket 0
  d.reconcile(0, 0, 10, 0, t0);   // not a grant: changes nothing
  CHECK(d.available(0, t0) == 500);
}

TEST_CASE("debt past any limit is not summed without bound: the spent count cannot overflow "
          "into a budget that grants freely",
          "[rate_budget]") {
  RateBudgets b({{.name = "tokens", .limit = 1000, .period = 60s}});
  auto g = b.try_acquire(c({100}), t0);
  REQUIRE(g.granted);
  // The grant has aged out: each report of an absurd usage (capped at 2^50 + 1 units) adds
  // its debt again; 8,192 of them are 2^63 units.
  for (int i = 0; i < 9000; ++i)
    b.reconcile(g.ticket, 0, 100, INT64_MAX, t0 + 61s);
  CHECK(b.available(0, t0 + 61s) < 0);
  CHECK_FALSE(b.try_acquire(c({1}), t0 + 62s).granted);
  CHECK(b.try_acquire(c({1}), t0 + 121s).granted);  // the debt ages out a period later
}

TEST_CASE("grants still in the window reported absurd one by one cannot overflow the spent count",
          "[rate_budget]") {
  // (as the debt of aged-out grants above: 8,192 grants of 1 unit, each reported 2^50 + 1)
  RateBudgets b({{.name = "tokens", .limit = std::int64_t{1} << 50, .period = 60s}});
  std::vector<RateBudgets::Ticket> tickets;
  for (int i = 0; i < 9000; ++i) {
    auto g = b.try_acquire(c({1}), t0);
    REQUIRE(g.granted);
    tickets.push_back(g.ticket);
  }
  for (const auto t : tickets) b.reconcile(t, 0, 1, INT64_MAX, t0 + 1s);
  CHECK(b.available(0, t0 + 1s) < 0);
  CHECK_FALSE(b.try_acquire(c({1}), t0 + 2s).granted);
  CHECK(b.try_acquire(c({1}), t0 + 61s).granted);  // the grants age out a period later
}

TEST_CASE("a call that outlives the period is charged its extra usage as debt", "[rate_budget]") {
  RateBudgets b({{.name = "tokens", .limit = 1000, .period = 10s}});
  auto g = b.try_acquire(c({100}), t0);
  b.reconcile(g.ticket, 0, 100, 400, t0 + 15s);  // the grant aged out at t0 + 10 s
  CHECK(b.available(0, t0 + 15s) == 700);
  b.reconcile(g.ticket, 0, 100, 50, t0 + 16s);  // an aged-out refund changes nothing
  CHECK(b.available(0, t0 + 16s) == 700);
}

TEST_CASE("a cost larger than a budget's limit can never be granted", "[rate_budget]") {
  RateBudgets b({{.name = "requests", .limit = 10, .period = 60s},
                 {.name = "tokens", .limit = 1000, .period = 60s}});
  CHECK_FALSE(b.fits(c({1, 1001})));
  auto g = b.try_acquire(c({1, 1001}), t0);
  CHECK_FALSE(g.granted);
  CHECK(g.never);
  CHECK(g.ready_at == TimePoint::max());
  CHECK(b.fits(c({1, 1000})));
}

TEST_CASE("a pause holds every grant until it ends", "[rate_budget]") {
  RateBudgets b({{.name = "requests", .limit = 100, .period = 60s}});
  b.pause_until(t0 + 3s);
  b.pause_until(t0 + 1s);  // an earlier pause does not shorten it
  auto g = b.try_acquire(c({1}), t0);
  CHECK_FALSE(g.granted);
  CHECK(g.ready_at == t0 + 3s);
  CHECK(b.try_acquire(c({1}), t0 + 3s).granted);
}

TEST_CASE("after a pause, grants are spaced as in smooth mode for one period - the waiters it "
          "held do not all start at its end - then burst again",
          "[rate_budget]") {
  RateBudgets b({{.name = "requests", .limit = 600, .period = 60s}});  // 10 per second
  for (int i = 0; i < 5; ++i) REQUIRE(b.try_acquire(c({1}), t0).granted);  // a burst: not paced
  b.pause_until(t0 + 1s);  // a 429
  REQUIRE(b.try_acquire(c({1}), t0 + 1s).granted);  // the first at the pause's end
  auto g = b.try_acquire(c({1}), t0 + 1s);           // the next 100 ms later, not at once
  CHECK_FALSE(g.granted);
  CHECK(g.ready_at == t0 + 1100ms);
  REQUIRE(b.try_acquire(c({1}), t0 + 1100ms).granted);
  CHECK_FALSE(b.try_acquire(c({1}), t0 + 1150ms).granted);
  // A period after the pause's end: bursts again.
  REQUIRE(b.try_acquire(c({1}), t0 + 61s).granted);
  CHECK(b.try_acquire(c({1}), t0 + 61s).granted);
  // A pause without end does not overflow the pacing's end.
  b.pause_until(TimePoint::max());
  CHECK_FALSE(b.try_acquire(c({1}), t0 + 62s).granted);
}

TEST_CASE("pacing after a pause is smooth mode's: a refund shortens the spacing, the wait ends "
          "with the paced window, and budgets longer than a minute are not paced",
          "[rate_budget]") {
  // An output budget; the estimate is max_tokens (4,096), the call used 300.
  RateBudgets out({{.name = "output_tokens", .limit = 8000, .period = 60s}});
  out.pause_until(t0);
  const auto g = out.try_acquire(c({4096}), t0);
  REQUIRE(g.granted);
  out.reconcile(g.ticket, 0, 4096, 300, t0 + 5s);
  // 300 tokens' spacing (2.25 s) from the grant, not 4,096's (30.7 s)
  CHECK(out.try_acquire(c({4096}), t0 + 5s).granted);

  RateBudgets two({{.name = "requests", .limit = 2, .period = 60s}});  // 30 s apart when paced
  two.pause_until(t0);
  REQUIRE(two.try_acquire(c({1}), t0).granted);
  REQUIRE(two.try_acquire(c({1}), t0 + 50s).granted);  // its spacing runs to t0 + 80 s
  const auto wait = two.try_acquire(c({1}), t0 + 55s);
  CHECK_FALSE(wait.granted);
  CHECK(wait.ready_at == t0 + 60s);  // the paced window's end (and the first grant's expiry)
  CHECK(two.try_acquire(c({1}), t0 + 60s).granted);

  RateBudgets daily({{.name = "requests", .limit = 200, .period = 24h}});
  daily.pause_until(t0 + 1s);
  REQUIRE(daily.try_acquire(c({1}), t0 + 1s).granted);
  CHECK(daily.try_acquire(c({1}), t0 + 1s).granted);  // not 7.2 min apart for a day
}

TEST_CASE("refunds of a burst's grants made before a pause do not cut its pacing short, and a "
          "budget switched to smooth is spaced from its last grant's actual cost",
          "[rate_budget]") {
  RateBudgets b({{.name = "tokens", .limit = 8000, .period = 60s}});
  const auto g1 = b.try_acquire(c({4096}), t0);  // a burst, not paced
  REQUIRE(g1.granted);
  REQUIRE(b.try_acquire(c({100}), t0).granted);
  b.pause_until(t0 + 1s);
  REQUIRE(b.try_acquire(c({100}), t0 + 1s).granted);  // paced from here: next at t0 + 1.75 s
  CHECK_FALSE(b.try_acquire(c({100}), t0 + 1100ms).granted);
  b.reconcile(g1.ticket, 0, 4096, 300, t0 + 1100ms);  // the burst's big one used 300
  CHECK_FALSE(b.try_acquire(c({100}), t0 + 1100ms).granted);  // still paced
  CHECK(b.try_acquire(c({100}), t0 + 1750ms).granted);

  // Not smooth, then smooth (a rebuilt set of budgets): from the last grant, by what it cost.
  RateBudgets before({{.name = "tokens", .limit = 100, .period = 10s}});
  const auto a = before.try_acquire(c({60}), t0);
  REQUIRE(a.granted);
  const auto f = before.try_acquire(c({30}), t0 + 1s);  // the last grant: 3 s of spacing
  REQUIRE(f.granted);
  before.reconcile(a.ticket, 0, 60, 0, t0 + 1s);  // an older grant's refund: not the spacing
  RateBudgets after({{.name = "tokens", .limit = 100, .period = 10s, .smooth = true}});
  after.take_history(0, before, 0);
  const auto next = after.try_acquire(c({1}), t0 + 1s);
  CHECK_FALSE(next.granted);
  CHECK(next.ready_at == t0 + 4s);
}

TEST_CASE("set_limit at runtime keeps what was spent", "[rate_budget]") {
  RateBudgets b({{.name = "requests", .limit = 50, .period = 5s}});
  for (int i = 0; i < 20; ++i) REQUIRE(b.try_acquire(c({1}), t0).granted);
  b.set_limit(0, 10, 5s);
  CHECK(b.available(0, t0 + 1s) == -10);
  CHECK_FALSE(b.try_acquire(c({1}), t0 + 1s).granted);
  CHECK(b.try_acquire(c({1}), t0 + 5s).granted);
  CHECK_THROWS_AS(b.set_limit(0, 0, 5s), std::invalid_argument);
}

TEST_CASE("the provider's lower remaining count is adopted, a higher one ignored",
          "[rate_budget]") {
  RateBudgets b({{.name = "requests", .limit = 50, .period = 60s}});
  for (int i = 0; i < 10; ++i) REQUIRE(b.try_acquire(c({1}), t0).granted);
  b.lower_remaining(0, 5, t0 + 1s);
  CHECK(b.available(0, t0 + 1s) == 5);
  b.lower_remaining(0, 45, t0 + 2s);
  CHECK(b.available(0, t0 + 2s) == 5);
  b.lower_remaining(0, -3, t0 + 2s);  // nonsense is ignored
  CHECK(b.available(0, t0 + 2s) == 5);
}

TEST_CASE("no budgets at all: only a pause holds grants", "[rate_budget]") {
  RateBudgets b({});
  CHECK(b.try_acquire({}, t0).granted);
  b.pause_until(t0 + 3s);
  const auto g = b.try_acquire({}, t0 + 1s);
  CHECK_FALSE(g.granted);
  CHECK(g.ready_at == t0 + 3s);
  CHECK(b.try_acquire({}, t0 + 3s).granted);
}

TEST_CASE("invalid budgets are rejected naming the field", "[rate_budget]") {
  CHECK_THROWS_WITH(RateBudgets({{.name = "rpm", .limit = 0}}), Catch::Contains("limit"));
  CHECK_THROWS_WITH(RateBudgets({{.name = "rpm", .limit = 5, .period = 0s}}),
                    Catch::Contains("period"));
  RateBudgets b({{.name = "rpm", .limit = 5}});
  CHECK_THROWS_AS(b.try_acquire(c({1, 2}), t0), std::invalid_argument);
}

TEST_CASE("a budget is refused beyond the limiter's bounds (2^50 units, a year), at once and "
          "by set_limit", "[rate_budget]") {
  const std::int64_t most = std::int64_t{1} << 50;
  CHECK_THROWS_WITH(RateBudgets({{.name = "tpm", .limit = most + 1}}), Catch::Contains("2^50"));
  CHECK_THROWS_WITH(RateBudgets({{.name = "tpm", .limit = INT64_MAX}}), Catch::Contains("2^50"));
  CHECK_THROWS_WITH(RateBudgets({{.name = "tpm", .limit = 5, .period = 367 * 24h}}),
                    Catch::Contains("at most a year"));
  CHECK_THROWS_WITH(RateBudgets({{.name = "tpm", .limit = 5, .period = laneq::Duration::max()}}),
                    Catch::Contains("at most a year"));
  RateBudgets b({{.name = "tpm", .limit = most, .period = 366 * 24h}});  // the bounds themselves
  CHECK_THROWS_WITH(b.set_limit(0, INT64_MAX, 60s), Catch::Contains("2^50"));
  CHECK_THROWS_WITH(b.set_limit(0, 5, laneq::Duration::max()), Catch::Contains("a year"));
  CHECK(b.spec(0).limit == most);  // unchanged
}

TEST_CASE("costs and counts at the ends of int64 are read as budget units, without overflow",
          "[rate_budget]") {
  RateBudgets b({{.name = "tokens", .limit = 1000, .period = 10s}});
  CHECK_FALSE(b.fits(c({INT64_MAX})));
  CHECK(b.try_acquire(c({INT64_MAX}), t0).never);
  CHECK(b.try_acquire(c({INT64_MIN}), t0).granted);  // a negative cost is 0: nothing spent
  CHECK(b.available(0, t0) == 1000);
  auto g = b.try_acquire(c({100}), t0);
  REQUIRE(g.granted);
  // Aged out (past 10 s): the extra is debt from now. The estimate INT64_MIN is read as 0, so
  // the debt is the count itself; actual - estimate overflowed before, and charged nothing.
  b.reconcile(g.ticket, 0, INT64_MIN, 300, t0 + 15s);
  CHECK(b.available(0, t0 + 15s) == 700);
  auto h = b.try_acquire(c({100}), t0 + 15s);
  REQUIRE(h.granted);
  b.reconcile(h.ticket, 0, 100, INT64_MAX, t0 + 16s);  // absurd usage: 2^50 + 1 units of debt
  CHECK(b.available(0, t0 + 16s) == 700 - (std::int64_t{1} << 50) - 1);
  CHECK(b.available(0, t0 + 30s) == 1000);  // all aged out
}

TEST_CASE("B3 arithmetic: 600 RPM as 50 per 5 s, 400 backlogged, 20 s", "[rate_budget][b3]") {
  for (bool smooth : {false, true}) {
    RateBudgets b({{.name = "requests", .limit = 50, .period = 5s, .smooth = smooth}});
    std::vector<std::pair<TimePoint, std::int64_t>> grants;
    TimePoint now = t0;
    int left = 400;
    while (left > 0 && now < t0 + 20s) {
      auto g = b.try_acquire(c({1}), now);
      if (g.granted) {
        grants.emplace_back(now, 1);
        --left;
      } else {
        REQUIRE(g.ready_at > now);  // (a refusal that names no later time would loop forever)
        now = g.ready_at;
      }
    }
    if (!grants.empty() && grants.back().first >= t0 + 20s) grants.pop_back();
    INFO("smooth = " << smooth);
    CHECK(max_in_window(grants, 5s) <= 50);
    CHECK(grants.size() >= 198);
    if (smooth) CHECK(max_in_window(grants, 1s) <= 11);
  }
}

TEST_CASE("property: for random request streams no window ever exceeds a budget",
          "[rate_budget][property]") {
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    std::mt19937_64 rng(seed);
    const bool smooth = seed % 2 == 0;
    RateBudgets b({{.name = "requests", .limit = 20, .period = 3s, .smooth = smooth},
                   {.name = "tokens", .limit = 2000, .period = 3s}});
    std::vector<std::pair<TimePoint, std::int64_t>> req, tok;
    std::vector<std::pair<RateBudgets::Ticket, std::size_t>> open;  // ticket, index in tok
    TimePoint now = t0;
    for (int step = 0; step < 2000; ++step) {
      now += std::chrono::milliseconds(rng() % 50);
      const std::int64_t estimate = 50 + static_cast<std::int64_t>(rng() % 300);
      auto g = b.try_acquire(c({1, estimate}), now);
      if (!g.granted) {
        REQUIRE(g.ready_at > now);
        REQUIRE_FALSE(g.never);
        now = g.ready_at;
        g = b.try_acquire(c({1, estimate}), now);
        REQUIRE(g.granted);  // the promised time is exact
      }
      req.emplace_back(now, 1);
      tok.emplace_back(now, estimate);
      open.emplace_back(g.ticket, tok.size() - 1);
      // reconcile some earlier grant with its actual usage (never more than estimated here)
      if (!open.empty() && rng() % 2 == 0) {
        const auto k = rng() % open.size();
        auto [ticket, idx] = open[k];
        const std::int64_t actual = static_cast<std::int64_t>(rng() % (tok[idx].second + 1));
        b.reconcile(ticket, 1, tok[idx].second, actual, now);
        tok[idx].second = actual;
        open.erase(open.begin() + static_cast<long>(k));
      }
    }
    INFO("seed " << seed);
    REQUIRE(max_in_window(req, 3s) <= 20);
    REQUIRE(max_in_window(tok, 3s) <= 2000);
    if (smooth)
      for (std::size_t i = 1; i < req.size(); ++i)
        REQUIRE(req[i].first - req[i - 1].first >= 150ms);
  }
}
