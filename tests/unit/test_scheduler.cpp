// Scheduler: pure logic on a virtual clock.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <unordered_set>
#include <vector>

#include "laneq/scheduler.hpp"

using namespace std::chrono_literals;
using laneq::Scheduler;
using laneq::SchedulerConfig;
using laneq::SchedulerLane;
using laneq::TimePoint;

namespace {

const TimePoint t0{};

SchedulerConfig five_lanes() {
  return {.lanes = {{.priority = 0, .reserved = true}, {.priority = 1}, {.priority = 5},
                    {.priority = 8}, {.priority = 10}}};
}

struct Fixture {
  explicit Fixture(SchedulerConfig c = five_lanes()) : s(std::move(c)) {}
  Scheduler s;
  std::uint64_t next = 1;

  std::uint64_t push(int priority, std::string client = "", TimePoint at = t0,
                     std::optional<TimePoint> deadline = std::nullopt, std::uint32_t cost = 1) {
    const auto payload = next++;
    auto r = s.push({.lane = s.lane_index(priority), .client = client, .payload = payload,
                     .enqueued_at = at, .deadline = deadline, .cost = cost});
    REQUIRE(r.status == Scheduler::PushStatus::ok);
    return payload;
  }
  std::uint64_t pop(TimePoint now = t0) {
    auto item = s.pop(now);
    return item ? item->payload : 0;
  }
  std::vector<std::uint64_t> drain(TimePoint now = t0) {
    std::vector<std::uint64_t> out;
    while (auto item = s.pop(now)) out.push_back(item->payload);
    return out;
  }
};

// Two backlogs of other clients in `lane`, one older and one newer than a light client's
// request, which is taken, then put back (a retry) and removed (a cancel) 30,000 times: each
// put-back must cost no walk through the backlogs (a walk: ~5 s in all, in RelWithDebInfo).
// Returns the light one, taken.
constexpr int backlog = 100'000;
Scheduler::Item retry_between_backlogs(Scheduler& s, std::size_t lane) {
  std::uint64_t payload = 1;
  const auto push_many = [&](const char* client) {
    for (int i = 0; i < backlog; ++i)
      REQUIRE(s.push({.lane = lane, .client = client, .payload = payload++, .enqueued_at = t0})
                  .status == Scheduler::PushStatus::ok);
  };
  push_many("older");
  const std::uint64_t light = payload++;
  REQUIRE(s.push({.lane = lane, .client = "light", .payload = light, .enqueued_at = t0}).status ==
          Scheduler::PushStatus::ok);
  push_many("newer");
  REQUIRE(s.pop(t0)->payload == 1);
  const auto item = s.pop(t0);
  REQUIRE(item->payload == light);
  int refused = 0, lost = 0;
  const auto t = std::chrono::steady_clock::now();
  for (int i = 0; i < 30'000; ++i) {
    const auto r = s.push({.lane = lane, .client = "light", .payload = light,
                           .enqueued_at = item->enqueued_at, .seq = item->seq});
    refused += r.status != Scheduler::PushStatus::ok;
    lost += !s.remove(r.id);
  }
  CHECK(std::chrono::steady_clock::now() - t < 2s);  // (a walk: ~5 s)
  CHECK(refused == 0);
  CHECK(lost == 0);
  return *item;
}

}  // namespace

TEST_CASE("strict priority: a lower priority value is always served first", "[scheduler]") {
  Fixture f;
  const auto bg = f.push(10), low = f.push(8), normal = f.push(5), high = f.push(1),
             crit = f.push(0);
  CHECK(f.drain() == std::vector<std::uint64_t>{crit, high, normal, low, bg});
}

TEST_CASE("equal priority from one client is served FIFO", "[scheduler]") {
  Fixture f;
  std::vector<std::uint64_t> in;
  for (int i = 0; i < 100; ++i) in.push_back(f.push(5, "a"));
  CHECK(f.drain() == in);
}

TEST_CASE("a critical request overtakes a backlog of 10000 low requests", "[scheduler]") {
  Fixture f;
  for (int i = 0; i < 10000; ++i) f.push(8, "batch");
  const auto crit = f.push(0, "chat");
  CHECK(f.pop() == crit);
  CHECK(f.s.size() == 10000);
}

TEST_CASE("equal clients in a lane alternate", "[scheduler]") {
  Fixture f;
  std::vector<std::uint64_t> a, b;
  for (int i = 0; i < 5; ++i) {
    a.push_back(f.push(5, "a"));
    b.push_back(f.push(5, "b"));
  }
  const auto out = f.drain();
  REQUIRE(out.size() == 10);
  for (int i = 0; i < 5; ++i) {
    CHECK(out[2 * i] == a[i]);
    CHECK(out[2 * i + 1] == b[i]);
  }
}

TEST_CASE("a client with 1000 queued delays another client's single request by at most one turn",
          "[scheduler]") {
  Fixture f;
  for (int i = 0; i < 1000; ++i) f.push(5, "heavy");
  f.pop();  // the heavy client is mid-turn
  const auto single = f.push(5, "light");
  const auto first = f.pop();
  const auto second = f.pop();
  CHECK((first == single || second == single));
}

TEST_CASE("weights give a client that many turns per round (deficit round-robin)",
          "[scheduler]") {
  Fixture f;
  f.s.set_client_weight("gold", 3);
  std::set<std::uint64_t> gold;
  for (int i = 0; i < 30; ++i) {
    gold.insert(f.push(5, "gold"));
    f.push(5, "free");
  }
  const auto out = f.drain();
  // in every window of 4 while both are backlogged: 3 gold, 1 free
  for (std::size_t w = 0; w + 4 <= 36; w += 4) {
    int g = 0;
    for (std::size_t i = w; i < w + 4; ++i) g += gold.count(out[i]) ? 1 : 0;
    CHECK(g == 3);
  }
}

TEST_CASE("cost-based DRR shares cost units, not request counts", "[scheduler]") {
  Fixture f(SchedulerConfig{.lanes = {{.priority = 5}}, .quantum = 100});
  std::set<std::uint64_t> big;
  for (int i = 0; i < 20; ++i) {
    big.insert(f.push(5, "big", t0, std::nullopt, 100));
    for (int k = 0; k < 4; ++k) f.push(5, "small", t0, std::nullopt, 25);
  }
  const auto out = f.drain();
  // while both are backlogged, each round serves 1 big (100) and 4 small (4 x 25)
  for (std::size_t w = 0; w + 5 <= 50; w += 5) {
    int b = 0;
    for (std::size_t i = w; i < w + 5; ++i) b += big.count(out[i]) ? 1 : 0;
    CHECK(b == 1);
  }
}

namespace {
// Deficit round-robin turn by turn, for a backlog pushed before the first pop: clients in order
// of their first request, `quantum` x weight per turn, a client's turn lasts while it can pay.
std::vector<std::uint64_t> drr_reference(
    const std::vector<std::tuple<std::string, std::uint32_t, std::uint64_t>>& pushes,  // client, cost, payload
    std::uint32_t quantum, const std::map<std::string, std::uint32_t>& weights) {
  std::vector<std::string> ring;
  std::map<std::string, std::vector<std::pair<std::uint32_t, std::uint64_t>>> queues;
  for (const auto& [c, cost, payload] : pushes) {
    if (queues[c].empty() && std::find(ring.begin(), ring.end(), c) == ring.end())
      ring.push_back(c);
    queues[c].emplace_back(cost, payload);
  }
  std::map<std::string, std::int64_t> deficit;
  std::vector<std::uint64_t> out;
  for (std::size_t i = 0; !ring.empty();) {
    const std::string c = ring[i];
    auto& q = queues[c];
    deficit[c] += std::int64_t{quantum} * (weights.count(c) ? weights.at(c) : 1);
    std::size_t served = 0;
    while (served < q.size() && q[served].first <= deficit[c]) {
      deficit[c] -= q[served].first;
      out.push_back(q[served++].second);
    }
    q.erase(q.begin(), q.begin() + static_cast<long>(served));
    if (q.empty()) {
      ring.erase(ring.begin() + static_cast<long>(i));
      deficit[c] = 0;
      if (!ring.empty()) i %= ring.size();
    } else {
      i = (i + 1) % ring.size();
    }
  }
  return out;
}
}  // namespace

TEST_CASE("costs far above quantum x weight: the same order as turn-by-turn DRR, without "
          "turning over turn by turn",
          "[scheduler]") {
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    std::mt19937_64 rng(seed);
    const std::uint32_t quantum = 1 + static_cast<std::uint32_t>(rng() % 3);
    Fixture f(SchedulerConfig{.lanes = {{.priority = 5}}, .quantum = quantum});
    std::map<std::string, std::uint32_t> weights;
    for (int c = 0; c < 5; ++c)
      if (rng() % 2) f.s.set_client_weight("c" + std::to_string(c), weights["c" + std::to_string(c)] =
                                                1 + static_cast<std::uint32_t>(rng() % 3));
    std::vector<std::tuple<std::string, std::uint32_t, std::uint64_t>> pushes;
    for (int i = 0; i < 60; ++i) {
      const std::string c = "c" + std::to_string(rng() % 5);
      const auto cost = 1 + static_cast<std::uint32_t>(rng() % 3000);
      pushes.emplace_back(c, cost, f.push(5, c, t0, std::nullopt, cost));
    }
    INFO("seed " << seed);
    CHECK(f.drain() == drr_reference(pushes, quantum, weights));
  }
  SECTION("costs near 2^32 with quantum 1 and 100 clients end at once") {
    Fixture f(SchedulerConfig{.lanes = {{.priority = 5}}, .quantum = 1});
    for (int c = 0; c < 100; ++c)  // turn by turn: ~4e11 turns
      f.push(5, "c" + std::to_string(c), t0, std::nullopt, 0xFFFFFFF0u - static_cast<std::uint32_t>(c));
    const auto start = std::chrono::steady_clock::now();
    const auto out = f.drain();
    // "at once": milliseconds (turn by turn would be hours; 5 s leaves room for sanitizers)
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
    REQUIRE(out.size() == 100);
    CHECK(out.front() == 100);  // the cheapest pays first
  }
  SECTION("quantum and weight at their maximum do not overflow the deficit") {
    Fixture f(SchedulerConfig{.lanes = {{.priority = 5}}, .quantum = 0xFFFFFFFFu});
    f.s.set_client_weight("a", 0xFFFFFFFFu);
    for (int i = 0; i < 3; ++i) f.push(5, "a", t0, std::nullopt, 0xFFFFFFFFu);
    f.push(5, "b", t0, std::nullopt, 0xFFFFFFFFu);
    CHECK(f.drain().size() == 4);
  }
}

namespace {
// Deficit round-robin turn by turn in one lane, with arrivals, removals, requeues and weight
// changes at any time: clients in the order they became active (a newly active one is last in
// the round under way, unless it had a turn in that round already: it emptied and came back);
// a visit grants quantum x weight (the weight of that moment); a turn lasts while the deficit
// pays for the head; an emptied client leaves and forgets its deficit.
class DrrModel {
 public:
  explicit DrrModel(std::uint32_t quantum) : quantum_(quantum) {}

  void push(const std::string& c, std::uint64_t seq, std::uint32_t cost, std::uint64_t payload) {
    auto it = active_.find(c);
    if (it == active_.end()) it = active_.emplace(c, Client{next_ring_++, 0, {}}).first;
    auto& items = it->second.items;
    const auto at = std::find_if(items.begin(), items.end(),
                                 [&](const Item& i) { return i.seq > seq; });
    items.insert(at, {seq, cost, payload});
  }
  void erase(std::uint64_t payload) {
    for (auto& [name, c] : active_)
      for (auto i = c.items.begin(); i != c.items.end(); ++i)
        if (i->payload == payload) {
          c.items.erase(i);
          if (c.items.empty()) leave(name);
          return;
        }
    FAIL("not queued: " << payload);
  }
  void set_weight(const std::string& c, std::uint32_t w) { weights_[c] = w; }
  bool empty() const { return active_.empty(); }

  // The payload the next pop returns, and the pop itself.
  std::uint64_t pop() {
    for (;;) {
      if (cur_) {
        Client& c = active_.at(*cur_);
        if (c.items.front().cost <= c.deficit) {
          const Item served = c.items.front();
          c.deficit -= served.cost;
          erase(served.payload);
          return served.payload;
        }
        cur_.reset();  // its turn is over
      }
      // the next client in the round (one turn per round each), or the first of the next round
      const auto first_after = [&](std::uint64_t seq) {
        auto next = active_.end();
        for (auto it = active_.begin(); it != active_.end(); ++it)
          if (it->second.ring > seq && visited_[it->first] != round_ &&
              (next == active_.end() || it->second.ring < next->second.ring))
            next = it;
        return next;
      };
      auto next = first_after(cur_seq_);
      if (next == active_.end()) {
        ++round_;
        next = first_after(0);
      }
      const auto w = weights_.count(next->first) ? weights_.at(next->first) : 1;
      next->second.deficit += std::int64_t{quantum_} * w;
      visited_[next->first] = round_;
      cur_ = next->first;
      cur_seq_ = next->second.ring;
    }
  }

 private:
  struct Item {
    std::uint64_t seq;
    std::uint32_t cost;
    std::uint64_t payload;
  };
  struct Client {
    std::uint64_t ring;
    std::int64_t deficit;
    std::vector<Item> items;  // seq order
  };
  void leave(std::string name) {  // a copy: the map's key it may come from is erased here
    active_.erase(name);
    if (cur_ == name) cur_.reset();  // the round goes on after its place
  }

  std::uint32_t quantum_;
  std::map<std::string, std::uint32_t> weights_;
  std::map<std::string, Client> active_;
  std::map<std::string, std::uint64_t> visited_;  // the round of each client's last turn
  std::optional<std::string> cur_;
  std::uint64_t cur_seq_ = 0, next_ring_ = 1, round_ = 1;
};
}  // namespace

TEST_CASE("DRR with arrivals, removals, requeues and weight changes at any time - the exact order "
          "of turn-by-turn DRR, for costs below and far above quantum x weight",
          "[scheduler][property]") {
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    std::mt19937_64 rng(seed);
    const std::uint32_t quantum = 1 + static_cast<std::uint32_t>(rng() % 3);
    // costs: all payable in one turn / mostly / far above a turn's grant
    const std::uint32_t max_cost = seed % 3 == 0 ? quantum : seed % 3 == 1 ? 3 * quantum : 2000;
    Scheduler s(SchedulerConfig{.lanes = {{.priority = 5}}, .quantum = quantum});
    DrrModel model(quantum);
    struct Live {
      Scheduler::ItemId id;
      std::string client;
      std::uint32_t cost;
    };
    std::map<std::uint64_t, Live> live;
    // taken and not back yet: retries come back later, in any order, each at its original
    // place (often in front of its client's newer items, changing the client's head)
    std::map<std::uint64_t, std::pair<Live, std::uint64_t>> out;  // payload -> (item, seq)
    const auto requeue = [&](std::map<std::uint64_t, std::pair<Live, std::uint64_t>>::iterator it) {
      const auto& [item, seq] = it->second;
      const auto again = s.push({.lane = 0, .client = item.client, .payload = it->first,
                                 .cost = item.cost, .seq = seq});
      REQUIRE(again.status == Scheduler::PushStatus::ok);
      model.push(item.client, seq, item.cost, it->first);
      live[it->first] = {again.id, item.client, item.cost};
      out.erase(it);
    };
    std::uint64_t next_payload = 1, next_seq = 1;
    INFO("seed " << seed);
    for (int step = 0; step < 600; ++step) {
      const auto op = rng() % 21;
      if (op < 9) {
        const std::string c = "c" + std::to_string(rng() % 6);
        const auto cost = 1 + static_cast<std::uint32_t>(rng() % max_cost);
        const auto r = s.push({.lane = 0, .client = c, .payload = next_payload, .cost = cost});
        REQUIRE(r.status == Scheduler::PushStatus::ok);
        model.push(c, next_seq++, cost, next_payload);  // the scheduler's seq: push order
        live[next_payload++] = {r.id, c, cost};
      } else if (op < 16) {
        if (live.empty()) {
          REQUIRE_FALSE(s.pop(t0));
          continue;
        }
        REQUIRE(s.next_payload_hint() != 0);
        const auto hint = s.next_payload_hint();
        const auto want = model.pop();
        const auto got = s.pop(t0);
        REQUIRE(got);
        REQUIRE(got->payload == want);
        CHECK(hint == want);
        const auto taken = out.emplace(want, std::pair{live.at(want), got->seq}).first;
        live.erase(want);
        if (rng() % 4 == 0) {
          requeue(taken);  // a retry at once
        } else if (rng() % 2 == 0) {
          out.erase(taken);  // done
        }
      } else if (op == 20) {
        if (out.empty()) continue;
        auto it = out.begin();
        std::advance(it, static_cast<long>(rng() % out.size()));
        requeue(it);  // a retry after its back-off
      } else if (op < 18) {
        if (live.empty()) continue;
        auto it = live.begin();
        std::advance(it, static_cast<long>(rng() % live.size()));
        REQUIRE(s.remove(it->second.id));
        model.erase(it->first);
        live.erase(it);
      } else {
        const std::string c = "c" + std::to_string(rng() % 6);
        const auto w = 1 + static_cast<std::uint32_t>(rng() % 4);
        s.set_client_weight(c, w);
        model.set_weight(c, w);
      }
    }
    while (!out.empty()) requeue(std::next(out.begin(), static_cast<long>(rng() % out.size())));
    while (!live.empty()) {
      const auto want = model.pop();
      const auto got = s.pop(t0);
      REQUIRE(got);
      REQUIRE(got->payload == want);
      live.erase(want);
    }
    CHECK(model.empty());
    CHECK_FALSE(s.pop(t0));
  }
}

TEST_CASE("a client that empties and comes back at once (a closed-loop caller, a retry) gets "
          "one turn per round, not every pop",
          "[scheduler]") {
  Fixture f;
  SECTION("it submits its next request as soon as one is taken") {
    std::map<std::uint64_t, char> who;
    for (int i = 0; i < 3; ++i) {
      who[f.push(5, "a")] = 'a';
      who[f.push(5, "b")] = 'b';
    }
    who[f.push(5, "x")] = 'x';
    std::string order;
    for (int i = 0; i < 9; ++i) {
      const auto p = f.pop();
      order += who.at(p);
      if (who.at(p) == 'x') who[f.push(5, "x")] = 'x';
    }
    CHECK(order == "abxabxabx");
  }
  SECTION("its only request fails and goes back to its place") {
    const auto a1 = f.push(5, "a");
    const auto a2 = f.push(5, "a");
    const auto x = f.push(5, "x");
    std::vector<std::uint64_t> order;
    for (int i = 0; i < 4; ++i) {
      auto item = f.s.pop(t0);
      REQUIRE(item);
      order.push_back(item->payload);
      if (item->payload == x && i < 2)  // retried once
        REQUIRE(f.s.push({.lane = item->lane, .client = "x", .payload = x,
                          .enqueued_at = item->enqueued_at, .seq = item->seq})
                    .status == Scheduler::PushStatus::ok);
    }
    CHECK(order == std::vector<std::uint64_t>{a1, x, a2, x});
  }
}

TEST_CASE("pop stays cheap with many clients whose costs far exceed a turn's grant",
          "[scheduler][complexity]") {
  // 40,000 clients, one request each of ~2^31 units, quantum 1: turn by turn would take ~2^31
  // turns per pop; skipping rounds by walking every client made each pop O(clients) (~5 s in a
  // Release build, far more in a sanitizer's). Waiting by paying round, each pop is O(log c).
  Scheduler s(SchedulerConfig{.lanes = {{.priority = 5}}, .quantum = 1});
  constexpr int clients = 40'000;
  for (int c = 0; c < clients; ++c)
    REQUIRE(s.push({.lane = 0, .client = "c" + std::to_string(c),
                    .payload = static_cast<std::uint64_t>(c + 1),
                    .cost = 0x80000000u + static_cast<std::uint32_t>((c * 7919) % clients)})
                .status == Scheduler::PushStatus::ok);
  const auto t = std::chrono::steady_clock::now();
  std::uint32_t last_cost = 0;
  int popped = 0;
  while (auto item = s.pop(t0)) {
    // all got the same grants: cheaper requests pay first
    const auto cost = 0x80000000u + static_cast<std::uint32_t>((item->payload - 1) * 7919 % clients);
    CHECK(cost >= last_cost);
    last_cost = cost;
    ++popped;
  }
  CHECK(popped == clients);
  // ~30 ms in Release, ~0.5 s under TSan; the old walk took 7.5 s in Release
  CHECK(std::chrono::steady_clock::now() - t < 4s);
}

TEST_CASE("a retry with long backlogs of other clients both older and newer than it costs no walk "
          "through them (lanes without aging)",
          "[scheduler][complexity]") {
  Scheduler s(SchedulerConfig{.lanes = {{.priority = 5, .timeout = 3600s}}});
  // (the lane-default deadline list was walked to the retry's place: 10^4 x 10^5 node visits)
  retry_between_backlogs(s, 0);
  CHECK(s.size() == 2 * backlog - 1);
}

TEST_CASE("a weight set back to 1 forgets the name: weights of tenants that come and go do not "
          "pile up",
          "[scheduler]") {
  Fixture f;
  for (int i = 0; i < 1000; ++i) {
    const std::string name = "tenant-" + std::to_string(i);
    f.s.set_client_weight(name, 3);
    f.push(5, name);
    CHECK(f.pop(t0));
    f.s.set_client_weight(name, 1);
  }
  CHECK(f.s.weighted_clients() == 0);
  f.s.set_client_weight("gold", 2);
  f.s.set_client_weight("silver", 0);  // (0 is 1)
  CHECK(f.s.weighted_clients() == 1);
  // and the weight still applies while set, and not after
  const auto g1 = f.push(5, "gold"), g2 = f.push(5, "gold"), g3 = f.push(5, "gold"),
             b1 = f.push(5, "bronze"), b2 = f.push(5, "bronze");
  CHECK(f.drain(t0) == std::vector<std::uint64_t>{g1, g2, b1, g3, b2});
  f.s.set_client_weight("gold", 1);
  const auto h1 = f.push(5, "gold"), h2 = f.push(5, "gold"), c1 = f.push(5, "bronze");
  CHECK(f.drain(t0) == std::vector<std::uint64_t>{h1, c1, h2});
}

TEST_CASE("a retry goes back to its place without walking an older backlog of other clients",
          "[scheduler][complexity]") {
  // DRR serves a light client's new request while a heavy client's older backlog stays at the
  // lane's head: found from the head, each requeue of the light one walked the whole backlog
  // (twice: the lane list and, with a lane timeout, the deadline list).
  Scheduler s(SchedulerConfig{.lanes = {{.priority = 5, .timeout = 3600s}}});
  std::uint64_t payload = 1;
  for (int i = 0; i < backlog; ++i)
    REQUIRE(s.push({.lane = 0, .client = "heavy", .payload = payload++, .enqueued_at = t0})
                .status == Scheduler::PushStatus::ok);
  const std::uint64_t light = payload++;
  REQUIRE(s.push({.lane = 0, .client = "light", .payload = light, .enqueued_at = t0}).status ==
          Scheduler::PushStatus::ok);
  REQUIRE(s.push({.lane = 0, .client = "heavy", .payload = payload++, .enqueued_at = t0}).status ==
          Scheduler::PushStatus::ok);  // the tail is newer than the light one
  REQUIRE(s.pop(t0)->payload == 1);    // heavy's turn
  auto item = s.pop(t0);               // light's turn
  REQUIRE(item->payload == light);
  // (the outcomes checked after the timed part: Catch's own cost stays out of it)
  std::vector<std::uint64_t> heavy_got, light_got;
  heavy_got.reserve(10'000);
  light_got.reserve(10'000);
  int refused = 0;
  const auto t = std::chrono::steady_clock::now();
  for (int i = 0; i < 10'000; ++i) {
    refused += s.push({.lane = 0, .client = "light", .payload = light,
                       .enqueued_at = item->enqueued_at, .seq = item->seq})
                   .status != Scheduler::PushStatus::ok;
    // light had its turn in this round: heavy's comes first, then light's again
    heavy_got.push_back(s.pop(t0)->payload);
    item = s.pop(t0);
    light_got.push_back(item->payload);
  }
  // ~1 ms now; the walk from the head took ~2 x 10^9 node visits (seconds in Release)
  CHECK(std::chrono::steady_clock::now() - t < 1s);
  CHECK(refused == 0);
  for (int i = 0; i < 10'000; ++i) {
    REQUIRE(heavy_got[i] == static_cast<std::uint64_t>(i + 2));
    REQUIRE(light_got[i] == light);
  }
  // and the lane list is still in order: heavy's backlog, then the tail
  REQUIRE(s.push({.lane = 0, .client = "light", .payload = light, .enqueued_at = item->enqueued_at,
                  .seq = item->seq})
              .status == Scheduler::PushStatus::ok);
  std::vector<std::uint64_t> order;
  while (auto it = s.pop_expired(t0 + 7200s)) order.push_back(it->payload);
  REQUIRE(order.size() == backlog - 10'000 + 1);  // heavy's untaken backlog, light, the tail
  // (equal deadlines: light's, kept in the heap, may come anywhere among them)
  CHECK(std::count(order.begin(), order.end(), light) == 1);
  order.erase(std::find(order.begin(), order.end(), light));
  CHECK(std::is_sorted(order.begin(), order.end()));
  CHECK(order.front() == 10'002);
  CHECK(order.back() == payload - 1);
}

TEST_CASE("a retry in an aging lane costs no walk through the lane's older and newer backlogs",
          "[scheduler][complexity]") {
  // With aging, the lane keeps its items in seq order (its oldest ages it). A light client's
  // retry between two heavy backlogs was walked to its place from both ends: 10^5 node visits
  // per retry.
  Scheduler s(SchedulerConfig{.lanes = {{.priority = 1}, {.priority = 5, .age_step = 3600s}}});
  const Scheduler::Item item = retry_between_backlogs(s, 1);
  const std::uint64_t light = item.payload;
  // back in for good, at its place: behind "older"'s backlog, ahead of "newer"'s. Aging
  // promotes the lane's oldest past lane 0, one at a time, in seq order.
  REQUIRE(s.push({.lane = 1, .client = "light", .payload = light, .enqueued_at = item.enqueued_at,
                  .seq = item.seq})
              .status == Scheduler::PushStatus::ok);
  std::vector<std::uint64_t> promoted;
  promoted.reserve(backlog + 1);
  for (int i = 0; i < backlog + 1; ++i) {
    const auto critical = s.push({.lane = 0, .client = "x", .payload = 0xc0ffee, .enqueued_at = t0});
    REQUIRE(critical.status == Scheduler::PushStatus::ok);
    promoted.push_back(s.pop(t0 + 7200s)->payload);  // ranks tie at 0: the older goes first
    REQUIRE(s.remove(critical.id));
  }
  for (int i = 0; i < backlog - 1; ++i) REQUIRE(promoted[i] == static_cast<std::uint64_t>(i + 2));
  CHECK(promoted[backlog - 1] == light);
  CHECK(promoted[backlog] == light + 1);
}

TEST_CASE("many retries of one client go back in its FIFO order without walking each other",
          "[scheduler][complexity]") {
  // A client's retries come back in any order (their backoffs differ). Each went back to its
  // place by a walk past the client's requeued items older than it: O(retries^2) in all (~5 s here).
  Scheduler s(SchedulerConfig{.lanes = {{.priority = 5}}});
  constexpr int queued = 200'000, retried = 80'000;  // the walk from the tail is long too
  for (std::uint64_t p = 1; p <= queued; ++p)
    REQUIRE(s.push({.lane = 0, .client = "x", .payload = p, .enqueued_at = t0}).status ==
            Scheduler::PushStatus::ok);
  std::vector<Scheduler::Item> out;
  out.reserve(retried);
  for (int i = 0; i < retried; ++i) out.push_back(*s.pop(t0));
  int refused = 0;
  const auto t = std::chrono::steady_clock::now();
  for (const auto& item : out)  // oldest first: each is newer than all the others back already
    refused += s.push({.lane = 0, .client = "x", .payload = item.payload,
                       .enqueued_at = item.enqueued_at, .seq = item.seq})
                   .status != Scheduler::PushStatus::ok;
  CHECK(std::chrono::steady_clock::now() - t < 2s);  // (a walk: ~5 s)
  CHECK(refused == 0);
  // FIFO as if they had never left, with a newcomer after all of them
  REQUIRE(s.push({.lane = 0, .client = "x", .payload = queued + 1, .enqueued_at = t0}).status ==
          Scheduler::PushStatus::ok);
  for (std::uint64_t want = 1; want <= queued + 1; ++want) {
    const auto item = s.pop(t0);
    REQUIRE(item);
    REQUIRE(item->payload == want);
  }
  CHECK(s.empty());
}

TEST_CASE("property: with aging, requeues, removals and expiry, pop takes the best effective "
          "lane, a promoted lane's oldest, and FIFO per client",
          "[scheduler][property]") {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng(seed);
    auto cfg = five_lanes();
    cfg.lanes[2].age_step = 30ms;
    cfg.lanes[3].age_step = 20ms;
    cfg.lanes[4].age_step = 10ms;
    cfg.lanes[3].timeout = 200ms;
    Scheduler s(cfg);
    struct Ref {
      std::uint64_t id, seq;  // seq: push order of new items, as the scheduler counts it
      std::size_t lane;
      std::string client;
      TimePoint enqueued_at, deadline;
      std::optional<TimePoint> explicit_dl;
    };
    std::map<std::uint64_t, Ref> live, out;  // by payload: queued; taken (may come back)
    std::uint64_t next = 1, seq = 1;
    TimePoint now = t0;
    int requeues = 0, promoted = 0;
    const auto check_pop = [&](const Scheduler::Item& item) {
      const Ref& me = live.at(item.payload);
      REQUIRE(item.seq == me.seq);
      // each lane's oldest queued item; pop serves the best effective rank (ties: older)
      std::map<std::size_t, std::pair<std::uint64_t, std::uint64_t>> oldest;  // seq, payload
      for (const auto& [p, r] : live) {
        const auto [it, fresh] = oldest.try_emplace(r.lane, r.seq, p);
        if (!fresh && r.seq < it->second.first) it->second = {r.seq, p};
      }
      const std::size_t natural = oldest.begin()->first;
      std::size_t best = natural;
      const auto eff = [&](std::size_t l) {
        return s.effective_rank(l, live.at(oldest.at(l).second).enqueued_at, now);
      };
      for (const auto& [l, o] : oldest)
        if (eff(l) < eff(best) || (eff(l) == eff(best) && o.first < oldest.at(best).first))
          best = l;
      REQUIRE(item.lane == best);
      if (best != natural) {  // promoted: the lane's oldest, the one that earned it
        REQUIRE(item.payload == oldest.at(best).second);
        ++promoted;
      }
      for (const auto& [p, r] : live)  // FIFO inside its client and lane
        if (r.lane == me.lane && r.client == me.client) REQUIRE(r.seq >= me.seq);
    };
    for (int step = 0; step < 4000; ++step) {
      now += std::chrono::milliseconds(rng() % 3);
      const auto o = rng() % 10;
      if (o < 4) {
        const auto l = static_cast<std::size_t>(rng() % 5);
        std::optional<TimePoint> dl;
        if (rng() % 5 == 0) dl = now + std::chrono::milliseconds(rng() % 300);
        Ref r{0, seq++, l, "c" + std::to_string(rng() % 4), now,
              dl ? *dl : (l == 3 ? now + 200ms : TimePoint::max()), dl};
        const auto res = s.push({.lane = l, .client = r.client, .payload = next,
                                 .enqueued_at = now, .deadline = dl});
        REQUIRE(res.status == Scheduler::PushStatus::ok);
        r.id = res.id;
        live[next++] = r;
      } else if (o < 7) {
        const auto item = s.pop(now);
        REQUIRE(item.has_value() == !live.empty());
        if (!item) continue;
        check_pop(*item);
        out.insert(live.extract(item->payload));
      } else if (o < 8 && !out.empty()) {  // a retry, in any order, at its original place
        auto it = out.begin();
        std::advance(it, static_cast<long>(rng() % out.size()));
        Ref& r = it->second;
        const auto res = s.push({.lane = r.lane, .client = r.client, .payload = it->first,
                                 .enqueued_at = r.enqueued_at, .deadline = r.explicit_dl,
                                 .seq = r.seq});
        REQUIRE(res.status == Scheduler::PushStatus::ok);
        r.id = res.id;
        live.insert(out.extract(it));
        ++requeues;
      } else if (o < 9 && !live.empty()) {
        auto it = live.begin();
        std::advance(it, static_cast<long>(rng() % live.size()));
        const auto removed = s.remove(it->second.id);
        REQUIRE(removed);
        REQUIRE(removed->payload == it->first);
        live.erase(it);
      } else {
        while (const auto item = s.pop_expired(now)) {
          REQUIRE(live.at(item->payload).deadline <= now);
          live.erase(item->payload);
        }
        for (const auto& [p, r] : live) REQUIRE(r.deadline > now);
      }
      REQUIRE(s.size() == live.size());
    }
    CHECK(requeues > 300);
    CHECK(promoted > 50);
    while (const auto item = s.pop(now)) {  // nothing lost, and the same rules to the end
      check_pop(*item);
      live.erase(item->payload);
    }
    CHECK(live.empty());
  }
}

TEST_CASE("a lane timeout of a lifetime or more means no deadline, not an overflow",
          "[scheduler]") {
  // t0 + Duration::max() overflowed (undefined behaviour; in practice a deadline in the past)
  for (const laneq::Duration timeout : {laneq::Duration::max(), laneq::no_deadline_beyond}) {
    Scheduler s(SchedulerConfig{.lanes = {{.priority = 5, .timeout = timeout}}});
    REQUIRE(s.push({.lane = 0, .client = "a", .payload = 1, .enqueued_at = t0 + 1s}).status ==
            Scheduler::PushStatus::ok);
    CHECK_FALSE(s.next_deadline());
    CHECK_FALSE(s.pop_expired(t0 + 1s));
    CHECK(s.pop(t0 + 1s));
  }
  // just below: a deadline as asked
  Scheduler s(SchedulerConfig{.lanes = {{.priority = 5, .timeout = laneq::no_deadline_beyond - 1s}}});
  REQUIRE(s.push({.lane = 0, .client = "a", .payload = 1, .enqueued_at = t0 + 1s}).status ==
          Scheduler::PushStatus::ok);
  CHECK(s.next_deadline() == t0 + laneq::no_deadline_beyond);
}

TEST_CASE("aging lifts a waiting background request one lane per age_step", "[scheduler]") {
  auto cfg = five_lanes();
  cfg.lanes[4].age_step = 1s;  // background
  Fixture f(cfg);
  const auto bg = f.push(10, "batch", t0);
  // constant critical load: one new critical request per pop, each newer than the background one
  int served_before = 0;
  TimePoint now = t0;
  for (; served_before < 1000; ++served_before) {
    f.push(0, "chat", now);
    const auto got = f.pop(now);
    if (got == bg) break;
    now += 100ms;
  }
  // 4 lanes to climb (rank 4 -> 0) at one per second: served once 4 s have passed
  CHECK(now >= t0 + 4s);
  CHECK(now <= t0 + 4s + 100ms);
}

TEST_CASE("aging does not turn the lane that is served anyway into one FIFO: clients keep "
          "their turns",
          "[scheduler]") {
  auto cfg = five_lanes();
  cfg.lanes[2].age_step = 1s;  // normal
  Fixture f(cfg);
  const auto a1 = f.push(5, "a"), a2 = f.push(5, "a"), a3 = f.push(5, "a"), b1 = f.push(5, "b");
  // waited 2 age steps, but no better lane has anything: round-robin as without aging
  CHECK(f.drain(t0 + 2s) == std::vector<std::uint64_t>{a1, b1, a2, a3});
  // promoted past a better lane, the oldest goes first
  const auto c1 = f.push(5, "c", t0), d1 = f.push(5, "d", t0), hi = f.push(1, "h", t0 + 2s);
  CHECK(f.pop(t0 + 2s) == c1);  // 5 -> rank 0 beats rank 1; c1 is the oldest of the lane
  CHECK(f.drain(t0 + 2s) == std::vector<std::uint64_t>{d1, hi});
}

TEST_CASE("without aging a background request starves under constant critical load",
          "[scheduler]") {
  Fixture f;
  const auto bg = f.push(10, "batch", t0);
  TimePoint now = t0;
  for (int i = 0; i < 1000; ++i) {
    f.push(0, "chat", now);
    CHECK(f.pop(now) != bg);
    now += 100ms;
  }
}

TEST_CASE("a reserved pop only takes reserved lanes", "[scheduler]") {
  Fixture f;
  f.push(5);
  CHECK_FALSE(f.s.has_reserved_work());
  CHECK_FALSE(f.s.pop_reserved(t0));
  const auto crit = f.push(0);
  CHECK(f.s.has_reserved_work());
  auto item = f.s.pop_reserved(t0);
  REQUIRE(item);
  CHECK(item->payload == crit);
}

TEST_CASE("aging never makes a request eligible for a reserved worker", "[scheduler]") {
  // README: reserved workers keep critical traffic moving while an aged backlog drains
  auto cfg = five_lanes();
  cfg.lanes[4].age_step = 1s;  // background
  Fixture f(cfg);
  const auto bg = f.push(10, "batch", t0);
  CHECK_FALSE(f.s.has_reserved_work());
  CHECK_FALSE(f.s.pop_reserved(t0 + 1h));  // aged far past the critical lane
  const auto crit = f.push(0, "chat", t0 + 1h);
  CHECK(f.s.pop_reserved(t0 + 1h)->payload == crit);
  CHECK(f.pop(t0 + 1h) == bg);
}

TEST_CASE("capacity and per-client limits reject with distinct statuses", "[scheduler]") {
  Scheduler s({.lanes = {{.priority = 5}}, .max_pending = 3, .max_pending_per_client = 2});
  auto push = [&](std::string c) {
    return s.push({.lane = 0, .client = c, .payload = 1, .enqueued_at = t0}).status;
  };
  CHECK(push("a") == Scheduler::PushStatus::ok);
  CHECK(push("a") == Scheduler::PushStatus::ok);
  CHECK(push("a") == Scheduler::PushStatus::client_queue_full);
  CHECK(push("b") == Scheduler::PushStatus::ok);
  CHECK(push("c") == Scheduler::PushStatus::queue_full);
  CHECK(s.push({.lane = 7, .client = "x"}).status == Scheduler::PushStatus::unknown_lane);
  CHECK(s.full());
  CHECK(s.client_size("a") == 2);
}

TEST_CASE("an item admitted once already is not rejected by the limits and gets a new place",
          "[scheduler]") {
  Scheduler s({.lanes = {{.priority = 5}}, .max_pending = 2, .max_pending_per_client = 1});
  auto push = [&](std::string c, std::uint64_t payload, bool admitted) {
    return s.push({.lane = 0, .client = c, .payload = payload, .enqueued_at = t0,
                   .admitted = admitted}).status;
  };
  CHECK(push("a", 1, false) == Scheduler::PushStatus::ok);
  CHECK(push("a", 2, false) == Scheduler::PushStatus::client_queue_full);
  CHECK(push("a", 2, true) == Scheduler::PushStatus::ok);
  CHECK(s.full());
  CHECK(push("b", 3, false) == Scheduler::PushStatus::queue_full);
  CHECK(push("b", 3, true) == Scheduler::PushStatus::ok);
  CHECK(s.client_size("a") == 2);
  std::vector<std::uint64_t> order;
  while (auto item = s.pop(t0)) order.push_back(item->payload);
  CHECK(order == std::vector<std::uint64_t>{1, 3, 2});  // a, b, a: clients take turns
}

TEST_CASE("remove by id takes a queued item out once and only once", "[scheduler]") {
  Scheduler s(five_lanes());
  const auto a = s.push({.lane = 2, .client = "x", .payload = 11}).id;
  const auto b = s.push({.lane = 2, .client = "x", .payload = 22}).id;
  auto removed = s.remove(a);
  REQUIRE(removed);
  CHECK(removed->payload == 11);
  CHECK_FALSE(s.remove(a));
  auto item = s.pop(t0);
  REQUIRE(item);
  CHECK(item->id == b);
  CHECK_FALSE(s.remove(b));  // popped
  // a freed slot is reused with a new generation: the old id stays invalid
  const auto c = s.push({.lane = 2, .client = "x", .payload = 33}).id;
  CHECK(c != a);
  CHECK_FALSE(s.remove(a));
  CHECK(s.remove(c));
  CHECK_FALSE(s.remove(0));
}

TEST_CASE("lane default deadlines and explicit deadlines expire earliest first", "[scheduler]") {
  auto cfg = five_lanes();
  cfg.lanes[2].timeout = 10s;  // normal
  cfg.lanes[3].timeout = 3s;   // low
  Fixture f(cfg);
  const auto n1 = f.push(5, "a", t0);                   // 10 s
  const auto l1 = f.push(8, "a", t0 + 1s);              // 4 s
  const auto e1 = f.push(10, "a", t0, t0 + 2s);         // explicit 2 s
  const auto none = f.push(10, "a", t0);                // no deadline (background has none)
  const auto e2 = f.push(1, "a", t0, t0 + 20s);         // explicit 20 s
  (void)none;
  REQUIRE(f.s.next_deadline() == t0 + 2s);
  CHECK_FALSE(f.s.pop_expired(t0 + 1s));
  std::vector<std::uint64_t> expired;
  while (auto item = f.s.pop_expired(t0 + 15s)) expired.push_back(item->payload);
  CHECK(expired == std::vector<std::uint64_t>{e1, l1, n1});
  CHECK(f.s.next_deadline() == t0 + 20s);
  const auto popped = f.s.pop(t0);  // e2, the one with the explicit deadline, leaving `none`
  REQUIRE(popped);
  CHECK(popped->payload == e2);
  CHECK(f.s.remove(popped->id) == std::nullopt);
  CHECK_FALSE(f.s.next_deadline());
  CHECK(f.s.size() == 1);
}

TEST_CASE("a lane-default deadline out of arrival order (admitted before a later push) expires "
          "on time",
          "[scheduler]") {
  auto cfg = five_lanes();
  cfg.lanes[2].timeout = 100ms;
  Scheduler s(cfg);
  const auto lane = s.lane_index(5);
  // n enqueued at 1 ms; d (a durable request, say) enqueued at 0 but pushed after n
  REQUIRE(s.push({.lane = lane, .client = "x", .payload = 1, .enqueued_at = t0 + 1ms}).status ==
          Scheduler::PushStatus::ok);
  REQUIRE(s.push({.lane = lane, .client = "y", .payload = 2, .enqueued_at = t0,
                  .admitted = true}).status == Scheduler::PushStatus::ok);
  CHECK(s.next_deadline() == t0 + 100ms);
  auto first = s.pop_expired(t0 + 100ms);
  REQUIRE(first);
  CHECK(first->payload == 2);
  CHECK(first->deadline == t0 + 100ms);
  CHECK_FALSE(s.pop_expired(t0 + 100ms));
  auto second = s.pop_expired(t0 + 101ms);
  REQUIRE(second);
  CHECK(second->payload == 1);
  CHECK(s.empty());
}

TEST_CASE("a requeued item goes back to its original place in its lane and client",
          "[scheduler][requeue]") {
  auto cfg = five_lanes();
  cfg.lanes[2].timeout = 10s;
  Fixture f(cfg);
  const auto a = f.push(5, "x", t0);
  const auto b = f.push(5, "x", t0 + 1s);
  const auto c2 = f.push(5, "x", t0 + 2s);
  auto first = f.s.pop(t0 + 3s);  // a goes out (to a worker), then fails and is retried
  REQUIRE(first);
  REQUIRE(first->payload == a);
  const auto d = f.push(5, "x", t0 + 4s);
  auto r = f.s.push({.lane = first->lane, .client = "x", .payload = a,
                     .enqueued_at = first->enqueued_at, .seq = first->seq});
  REQUIRE(r.status == Scheduler::PushStatus::ok);
  CHECK(f.drain(t0 + 5s) == std::vector<std::uint64_t>{a, b, c2, d});
  // its deadline still counts from the original enqueue time, ahead of the newer ones
  f.push(5, "x", t0 + 6s);
  auto again = f.s.pop(t0 + 6s);
  REQUIRE(again);
  f.push(5, "y", t0 + 7s);
  f.s.push({.lane = again->lane, .client = "x", .payload = 99, .enqueued_at = again->enqueued_at,
            .seq = again->seq});
  REQUIRE(f.s.next_deadline() == t0 + 16s);
  auto exp = f.s.pop_expired(t0 + 16s);
  REQUIRE(exp);
  CHECK(exp->payload == 99);
}

TEST_CASE("invalid scheduler config throws naming the field", "[scheduler]") {
  CHECK_THROWS_WITH(Scheduler(SchedulerConfig{}), Catch::Contains("lanes"));
  CHECK_THROWS_WITH(Scheduler({.lanes = {{.priority = 1}, {.priority = 1}}}),
                    Catch::Contains("duplicate priority"));
  CHECK_THROWS_WITH(Scheduler({.lanes = {{.priority = 1}}, .quantum = 0}),
                    Catch::Contains("quantum"));
  CHECK_THROWS_WITH(Scheduler({.lanes = {{.priority = 1, .timeout = -1s}}}),
                    Catch::Contains("timeout"));
}

TEST_CASE("idle clients are forgotten so client names do not grow memory without bound",
          "[scheduler]") {
  Scheduler s({.lanes = {{.priority = 5}}});
  for (int i = 0; i < 20000; ++i) {
    s.push({.lane = 0, .client = "tenant-" + std::to_string(i), .payload = 1});
    REQUIRE(s.pop(t0));
  }
  CHECK(s.client_count() <= 4097 + 1);
}

TEST_CASE("client names resolve right across sweeps that recycle their slots", "[scheduler]") {
  Scheduler s({.lanes = {{.priority = 5}, {.priority = 9}}});
  const auto push = [&](std::size_t lane, const std::string& client, std::uint64_t payload) {
    REQUIRE(s.push({.lane = lane, .client = client, .payload = payload}).status ==
            Scheduler::PushStatus::ok);
  };
  // two clients with work queued in the lower lane outlive every sweep
  for (std::uint64_t i = 0; i < 3; ++i) push(1, "keep-a", 100 + i);
  push(1, "keep-b", 200);
  // 20,000 short-lived clients: 9,000 names, each back after sweeps recycled its slot, and
  // each twice in a row (a sweep in the first pop forgets the name the second push brings back)
  for (int i = 0; i < 20000; ++i) {
    const std::string name = "tenant-" + std::to_string(i % 9000);
    for (int twice = 0; twice < 2; ++twice) {
      push(0, name, 1);
      CHECK(s.client_size(name) == 1);
      const auto item = s.pop(t0);
      REQUIRE(item);
      CHECK(item->payload == 1);
      CHECK(s.client_size(name) == 0);
    }
  }
  CHECK(s.client_count() <= 4097 + 2);
  CHECK(s.client_size("keep-a") == 3);
  CHECK(s.client_size("keep-b") == 1);
  push(1, "keep-b", 201);  // found again, not made anew: it alternates with keep-a as before
  std::vector<std::uint64_t> order;
  while (auto item = s.pop(t0)) order.push_back(item->payload);
  CHECK(order == std::vector<std::uint64_t>{100, 200, 101, 201, 102});
}

TEST_CASE("next_payload_hint names what pop returns next (no aging, one turn per pop)",
          "[scheduler]") {
  Fixture f;
  CHECK(f.s.next_payload_hint() == 0);
  std::mt19937 rng(7);
  const int prios[] = {0, 1, 5, 8, 10};
  for (int round = 0; round < 20; ++round) {
    for (int i = 0; i < 50; ++i)
      f.push(prios[rng() % 5], "c" + std::to_string(rng() % 7));
    for (int i = 0; i < 40; ++i) {  // leave some behind: pushes interleave with pops
      const auto hint = f.s.next_payload_hint();
      REQUIRE(hint != 0);
      CHECK(f.pop() == hint);
    }
  }
  while (!f.s.empty()) {
    const auto hint = f.s.next_payload_hint();
    CHECK(f.pop() == hint);
  }
  CHECK(f.s.next_payload_hint() == 0);
}

// Reference model: strict lanes; in a lane, turn-by-turn DRR (DrrModel, one per lane) with
// limits, deadlines, expiry, admitted pushes and retries at any time.
TEST_CASE("property: random push/pop/remove/expire sequences match a reference model",
          "[scheduler][property]") {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng(seed);
    auto cfg = five_lanes();
    cfg.lanes[1].timeout = 50ms;
    cfg.max_pending = 200;
    cfg.max_pending_per_client = 60;
    Scheduler s(cfg);
    std::vector<DrrModel> model(cfg.lanes.size(), DrrModel(1));
    std::uint64_t model_seq = 1;  // push order, as the scheduler's seq

    struct Ref {
      std::uint64_t payload, id;
      std::size_t lane;
      std::string client;
      TimePoint deadline;
      std::optional<TimePoint> explicit_dl;
      std::uint64_t seq;  // the model's
    };
    std::map<std::uint64_t, Ref> live;  // by payload
    std::set<std::uint64_t> resolved;
    std::uint64_t next = 1;
    TimePoint now = t0;
    std::uniform_int_distribution<int> op(0, 9), lane(0, 4), client(0, 3);
    for (int step = 0; step < 3000; ++step) {
      now += std::chrono::milliseconds(rng() % 3);
      const int o = op(rng);
      if (o < 5) {
        const std::size_t l = static_cast<std::size_t>(lane(rng));
        const std::string c = "c" + std::to_string(client(rng));
        std::optional<TimePoint> dl;
        if (rng() % 4 == 0) dl = now + std::chrono::milliseconds(rng() % 40);
        std::size_t client_pending = 0;
        for (auto& [p, r] : live) client_pending += r.client == c ? 1 : 0;
        // now and then one admitted earlier (a durable request after its journal commit):
        // enqueued before items already queued, and exempt from the limits
        const bool admitted = rng() % 10 == 0;
        const TimePoint at = admitted ? now - std::chrono::milliseconds(rng() % 20) : now;
        auto res = s.push({.lane = l, .client = c, .payload = next, .enqueued_at = at,
                           .deadline = dl, .admitted = admitted});
        if (live.size() >= 200 && !admitted) {
          REQUIRE(res.status == Scheduler::PushStatus::queue_full);
        } else if (client_pending >= 60 && !admitted) {
          REQUIRE(res.status == Scheduler::PushStatus::client_queue_full);
        } else {
          REQUIRE(res.status == Scheduler::PushStatus::ok);
          const auto lane_dl = l == 1 ? at + 50ms : TimePoint::max();
          live[next] = {next, res.id, l, c, dl ? *dl : lane_dl, dl, model_seq};
          model[l].push(c, model_seq++, 1, next);
        }
        ++next;
      } else if (o < 8) {
        auto item = s.pop(now);
        if (live.empty()) {
          REQUIRE_FALSE(item);
          continue;
        }
        REQUIRE(item);
        // nothing in a better lane was waiting, and the lane's clients took turns
        for (auto& [p, r] : live) REQUIRE(r.lane >= item->lane);
        REQUIRE(item->payload == model[item->lane].pop());
        // FIFO inside the client and lane
        const auto& me = live.at(item->payload);
        for (auto& [p, r] : live)
          if (r.lane == me.lane && r.client == me.client) REQUIRE(p >= item->payload);
        if (rng() % 5 == 0) {  // a retry: back at its original place, same deadline
          auto& ref = live.at(item->payload);
          auto again = s.push({.lane = item->lane, .client = ref.client, .payload = item->payload,
                               .enqueued_at = item->enqueued_at, .deadline = ref.explicit_dl,
                               .seq = item->seq});
          REQUIRE(again.status == Scheduler::PushStatus::ok);
          ref.id = again.id;
          model[ref.lane].push(ref.client, ref.seq, 1, item->payload);
          continue;
        }
        REQUIRE(resolved.insert(item->payload).second);
        live.erase(item->payload);
      } else if (o < 9 && !live.empty()) {
        auto it = live.begin();
        std::advance(it, static_cast<long>(rng() % live.size()));
        auto removed = s.remove(it->second.id);
        REQUIRE(removed);
        REQUIRE(removed->payload == it->first);
        REQUIRE(resolved.insert(it->first).second);
        model[it->second.lane].erase(it->first);
        live.erase(it);
      } else {
        while (auto item = s.pop_expired(now)) {
          REQUIRE(live.at(item->payload).deadline <= now);
          REQUIRE(resolved.insert(item->payload).second);
          model[item->lane].erase(item->payload);
          live.erase(item->payload);
        }
        for (auto& [p, r] : live) REQUIRE(r.deadline > now);
      }
      REQUIRE(s.size() == live.size());
    }
    // nothing lost: what is left drains completely
    while (auto item = s.pop(now)) {
      REQUIRE(item->payload == model[item->lane].pop());
      REQUIRE(live.erase(item->payload) == 1);
    }
    REQUIRE(live.empty());
    for (const auto& m : model) CHECK(m.empty());
  }
}

TEST_CASE("the client-name hash: equal names hash alike, distinct names spread", "[scheduler][hash]") {
  using laneq::detail::hash_name;
  // every length from 0 to the longest client name, each byte counted (no byte ignored)
  std::string base(63, 'x');
  for (std::size_t len = 0; len <= base.size(); ++len) {
    const std::string s = base.substr(0, len);
    CHECK(hash_name(s) == hash_name(std::string_view(s)));
    for (std::size_t i = 0; i < len; ++i) {
      std::string t = s;
      t[i] = 'y';
      CHECK(hash_name(t) != hash_name(s));
    }
  }
  CHECK(hash_name(std::string_view("ab\0", 3)) != hash_name("ab"));
  // 100k typical names: no two equal hashes, and even buckets at a power-of-two size too
  std::unordered_set<std::size_t> seen;
  std::vector<int> buckets(1024);
  for (int i = 0; i < 100'000; ++i) {
    const auto h = hash_name((i % 2 ? "tenant-" : "client-") + std::to_string(i));
    seen.insert(h);
    ++buckets[h % buckets.size()];
  }
  CHECK(seen.size() == 100'000);
  const int most = *std::max_element(buckets.begin(), buckets.end());
  CHECK(most < 2 * 100'000 / 1024);  // a fair share is ~98
}
