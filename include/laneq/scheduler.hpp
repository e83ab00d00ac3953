#pragma once
// The scheduler: pure decision logic (no Asio, no clock of its own, no I/O). It answers "which
// queued request runs next" and "which queued requests have expired", with time passed in.
//
// Order:
//   1. lanes: lower rank (= lower priority value) first; with aging, a request's effective rank
//      improves one step per its lane's `age_step` waited; equal effective rank -> older first;
//   2. inside a lane: clients in (deficit) round-robin, `weight` x `quantum` cost units per turn;
//      a round visits a lane's clients in the order they became active; a client that becomes
//      active joins the round under way at its end, or, if it had its turn in that round
//      already (it emptied and came back), the next round;
//   3. inside a client and lane: FIFO.
// A request promoted by aging past a better lane is taken from the head of its lane (the oldest
// one, which earned it); the lane that is served anyway keeps its clients' turns.
// "Oldest" and FIFO follow push order (seq), and a lane ages by its head's enqueued_at: an item
// pushed later than its enqueued_at (PushArgs::admitted: a durable request after its journal
// commit, a recovered one) queues behind items pushed before it, and ages from its own
// enqueued_at once it is its lane's head. Keeping lists in enqueued_at order instead would
// cost a walk past every item pushed meanwhile, per such push.
//
// Complexity (n = queued requests, c = clients, L = lanes, L <= 64):
//   push            O(1) amortized (+ O(log n) when the item has an explicit deadline, or when
//                   it does not come last by seq, see below; + O(log c) when a new client's
//                   first turn is not this round's or the next one's end, see pop);
//                   a requeue (PushArgs::seq) behind newer items is not walked to its place:
//                   it waits in a min-heap on seq beside its client's list in the lane (and
//                   beside its lane's list, when a lane ages), its lane-default deadline in
//                   the deadline heap, O(log n) each; a list's head is the older of its first
//                   item and its heap's top, O(1)
//   pop             O(L) when every client can pay for its head at its next turn (costs <=
//                   quantum*weight) and waits at the end of that round's list; otherwise
//                   O(L + log c): a client that needs several turns to pay waits in a heap
//                   keyed by the round in which it can, so rounds in which it could not are
//                   never walked through, and so does one whose place in its round is not
//                   last (a round's list only takes clients in the order they became active;
//                   one that emptied and came back, or whose head changed while it waited,
//                   may sit ahead of others in it)
//   remove(id)      O(1) (+ O(log n) for heap-held deadlines and requeued items, + O(log c)
//                   when it changes the head of a waiting client, or empties one that waits
//                   in the heap)
//   pop_expired     O(L + log n) per expired item; next_deadline O(L)
//   next_payload_hint  O(1) (what pop returns next, aging aside)
//   pop and remove are amortized: once more than 4096 clients are idle (no request queued)
//   and they are more than half of those known, one O(c) sweep forgets their names. Their
//   records are reused by new names, not freed: each distinct client costs ~72 B + 56 B per
//   lane while it is known, so one request per client (a client per end user) adds ~350 B
//   per queued request with the 5 default lanes, ~3.6 KB with 64; kept after the burst.
// Lane-default deadlines follow arrival order within a lane, so they need no heap: only
// per-request overrides live in a binary heap, and the rare lane default that does not follow
// (an item pushed after a later-enqueued one, e.g. a durable request whose journal commit took
// a while).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "laneq/detail/name_cache.hpp"
#include "laneq/detail/string_hash.hpp"

namespace laneq {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;
using Duration = Clock::duration;

// A lane timeout this long or longer means no deadline: enqueued_at + Duration::max() would
// overflow the clock and expire at once.
inline constexpr Duration no_deadline_beyond = std::chrono::hours(24 * 365 * 100);

struct SchedulerLane {
  int priority = 0;             // lanes are ranked by this (ascending); must be unique
  Duration timeout{0};          // default deadline after enqueue; 0 (or >= 100 years) = none
  Duration age_step{0};         // aging: one rank better per age_step waited; 0 = off
  bool reserved = false;        // reserved workers take only reserved lanes
};

struct SchedulerConfig {
  std::vector<SchedulerLane> lanes{};        // any order; ranked by priority
  std::size_t max_pending = 0;               // total capacity; 0 = unlimited
  std::size_t max_pending_per_client = 0;    // per client, all lanes; 0 = unlimited
  std::uint32_t quantum = 1;                 // DRR cost units per weight per turn
};

class Scheduler {
 public:
  using ItemId = std::uint64_t;                // 0 is never a valid id
  static constexpr std::uint32_t npos = 0xffffffffu;

  enum class PushStatus { ok, queue_full, client_queue_full, unknown_lane };

  struct PushArgs {
    std::size_t lane = 0;                      // lane index (see lane_index())
    std::string_view client;
    std::uint64_t payload = 0;                 // opaque, returned by pop
    TimePoint enqueued_at{};
    std::optional<TimePoint> deadline{};       // overrides the lane default
    std::uint32_t cost = 1;                    // DRR cost (>= 1)
    // Requeue (retry): the Item::seq it had, with its original enqueued_at, puts it back at its
    // original place in its lane and client (FIFO and aging as if it had never left). It was
    // admitted once: max_pending and max_pending_per_client do not reject it again.
    std::optional<std::uint64_t> seq{};
    // New here, but admitted once already (a durable request acknowledged before it is queued,
    // or recovered from a journal): like a requeue, max_pending and max_pending_per_client do
    // not reject it; it gets a new seq.
    bool admitted = false;
  };

  struct PushResult {
    PushStatus status;
    ItemId id = 0;
  };

  struct Item {
    ItemId id = 0;
    std::uint64_t payload = 0;
    std::size_t lane = 0;
    TimePoint enqueued_at{};
    std::optional<TimePoint> deadline{};
    std::uint64_t seq = 0;                      // arrival order; pass back to requeue
  };

  // Throws std::invalid_argument naming the bad field (no lanes, > 64 lanes, duplicate priority,
  // zero quantum, negative timeout/age_step).
  explicit Scheduler(SchedulerConfig config);

  // Lane index for a priority value, or npos.
  std::uint32_t lane_index(int priority) const noexcept;
  // A lane's rank (its index) improved by aging: one step per the lane's age_step waited since
  // `enqueued_at`, never below 0. What pop() compares lanes by, for anyone ranking alike.
  std::int64_t effective_rank(std::size_t lane, TimePoint enqueued_at, TimePoint now) const noexcept;
  std::size_t lane_count() const noexcept { return lanes_.size(); }
  const SchedulerLane& lane(std::size_t index) const { return lanes_[index].spec; }

  PushResult push(const PushArgs& args);

  // Best item for any worker / for a reserved worker (reserved lanes only), or nullopt.
  std::optional<Item> pop(TimePoint now);
  std::optional<Item> pop_reserved(TimePoint now);
  // The payload pop() returns next unless aging promotes a request (then it is a hint, e.g. to
  // prefetch), or 0 when empty. O(1).
  std::uint64_t next_payload_hint() const noexcept;
  bool has_reserved_work() const noexcept { return (nonempty_ & reserved_mask_) != 0; }
  // The reserved lanes, a bit per lane index.
  std::uint64_t reserved_lanes() const noexcept { return reserved_mask_; }

  // Removes a queued item (cancel). nullopt if it is not queued (popped, removed, unknown).
  std::optional<Item> remove(ItemId id);

  // Earliest deadline among queued items, if any.
  std::optional<TimePoint> next_deadline() const;
  // Removes and returns one item whose deadline is <= now, earliest first.
  std::optional<Item> pop_expired(TimePoint now);

  // Weight of a client for DRR (default 1). Applies from its next turn. Weight 1 forgets the
  // name: only names with another weight are kept (weighted_clients()), so a set of tenants
  // that come and go does not grow memory when each is set back to 1.
  void set_client_weight(std::string_view client, std::uint32_t weight);
  std::size_t weighted_clients() const noexcept { return weights_.size(); }

  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  bool full() const noexcept { return cfg_.max_pending != 0 && size_ >= cfg_.max_pending; }
  std::size_t lane_size(std::size_t lane) const { return lanes_[lane].count; }
  std::size_t client_size(std::string_view client) const;
  std::size_t client_count() const noexcept { return clients_by_name_.size(); }
  std::size_t max_pending() const noexcept { return cfg_.max_pending; }

 private:
  // One cache line: every queued request has one. Its deadline is not stored: a lane default is
  // enqueued_at + the lane's timeout, an explicit one lives in its heap entry.
  struct Node {
    std::uint64_t seq;
    TimePoint enqueued_at;
    std::uint64_t payload;
    std::uint32_t gen = 1;
    std::uint32_t client = npos;          // npos = free slot
    std::uint32_t cost;
    std::uint32_t lane_prev, lane_next;   // lane list, seq order (or heap pos in lane_prev)
    std::uint32_t cl_prev, cl_next;       // client-in-lane FIFO (or heap pos in cl_prev)
    std::uint32_t dl_prev, dl_next;       // lane-default deadline list (or heap pos in dl_prev)
    std::uint16_t lane;
    std::uint8_t deadline_kind;           // 0 none, 1 lane default (list), 2 explicit (heap)
    std::uint8_t behind = 0;              // bits: in_lane_heap, in_client_heap (requeued behind
                                          // newer items: in a heap by seq, not in the list)
  };
  static_assert(sizeof(Node) == 64);
  struct HeapEntry {
    TimePoint deadline;
    std::uint32_t slot;
  };
  struct SeqEntry {  // a requeued item behind newer ones: min-heap on seq
    std::uint64_t seq;
    std::uint32_t slot;
  };
  // Rounds count up for ever, modulo 2^64: compared by their difference (a serial number, as
  // TCP's), which is below 2^34 between any two still in use.
  using Round = std::uint64_t;
  static bool round_before(Round a, Round b) noexcept { return static_cast<std::int64_t>(a - b) < 0; }
  // DRR, kept lazily: a client's deficit is `deficit` after its turn of round `round` (kept when
  // it leaves: its last turn); every later round grants it quantum x weight. It waits for its next paying turn in one of its
  // lane's places (Lane): a list (it can pay in this / the next round), or the heap.
  // The two lists are indexed by round parity (list0: even rounds), so when a round ends, `next`
  // becomes `now` without touching its clients.
  enum class Place : std::uint8_t { none, current, list0, list1, heap };
  struct ClientLane {
    std::uint32_t head = npos, tail = npos;  // the list: items pushed in seq order
    std::uint32_t behind = npos;             // requeued behind newer: index in behind_heaps_
    std::uint32_t count = 0;                 // list + heap
    Place place = Place::none;
    std::uint32_t prev = npos, next = npos;  // in `now` / `next`; heap position in `prev`
    std::uint64_t ring_seq = 0;              // when it became active: its place in a round
    Round round = ~Round{0};                 // never active: as if its last turn were long ago
    std::int64_t deficit = 0;
  };
  struct ClientList {  // clients in ring_seq order, appended at the tail
    std::uint32_t head = npos, tail = npos;
    std::uint64_t tail_seq = 0;  // the tail's ring_seq (read on every append)
  };
  struct TurnEntry {  // a client that can pay in round `round` (the heap's key: round, seq)
    Round round;
    std::uint64_t seq;
    std::uint32_t client;
  };
  struct Client {
    std::string name;
    std::uint32_t weight = 1;
    std::size_t pending = 0;
    std::vector<ClientLane> lanes;
  };
  struct Lane {
    SchedulerLane spec;
    std::uint32_t head = npos, tail = npos;        // all items, seq order (only when any lane ages),
    std::vector<SeqEntry> behind{};                // but those requeued behind newer ones
    std::uint32_t dl_head = npos, dl_tail = npos;  // lane-default deadline items
    std::size_t count = 0;
    // DRR: round `round` is under way; `current` is having its turn (npos: between turns),
    // after the client of ring_seq `current_seq`.
    std::uint32_t current = npos;
    std::uint64_t current_seq = 0;
    Round round = 0;
    std::uint64_t next_ring_seq = 1;
    std::uint32_t active = 0;                      // clients with items in the lane
    ClientList lists[2]{};                         // can pay in a round of that parity: this
                                                   // round or the next, in ring_seq order
    std::vector<TurnEntry> later{};                // any other: a min-heap on (round, seq)
  };

  std::optional<Item> pop_masked(TimePoint now, std::uint64_t mask);
  std::uint32_t pop_round_robin(std::size_t lane);
  std::int64_t grant(std::uint32_t client) const noexcept;  // DRR units per turn
  // DRR places (see ClientLane): a client's turn ends or its head changed; it waits again.
  void drr_join(std::size_t lane, std::uint32_t client);
  void drr_leave(std::size_t lane, std::uint32_t client);
  void drr_head_changed(std::size_t lane, std::uint32_t client);
  void drr_wait(std::size_t lane, std::uint32_t client);   // placed by its paying round
  void drr_place(std::size_t lane, std::uint32_t client, Round round);
  [[gnu::noinline]] void drr_place_later(std::size_t lane, std::uint32_t client, Round round);
  std::int64_t drr_turns_to_pay(std::uint32_t client, const ClientLane& q) const noexcept;
  void drr_unplace(std::size_t lane, std::uint32_t client);
  void drr_list_erase(std::size_t lane, ClientLane& q);
  Round drr_next_turn(const Lane& lane, const ClientLane& q) const noexcept;
  Round drr_paying_round(const Lane& lane, std::uint32_t client,
                         const ClientLane& q) const noexcept;
  std::uint32_t drr_next_client(std::size_t lane) const noexcept;  // who pays next (no change)
  void later_set(std::size_t lane, std::size_t pos, TurnEntry e);  // pos kept in its prev
  void heap_push(std::uint32_t slot, TimePoint deadline);  // an explicit deadline, O(log n)
  void dl_list_erase(std::uint32_t slot);                   // out of its lane's deadline list
  std::uint32_t client_for(std::string_view name);
  Item unlink(std::uint32_t slot);
  template <std::uint32_t Node::*prev, std::uint32_t Node::*next>
  void append(std::uint32_t slot, std::uint32_t& head, std::uint32_t& tail);
  // Requeued behind newer items (see Node::behind): the client's and the lane's heaps.
  [[gnu::noinline]] void push_behind_client(std::size_t lane, std::uint32_t client, std::uint32_t slot);
  [[gnu::noinline]] void push_behind_lane(std::size_t lane, std::uint32_t slot);
  void erase_behind_client(ClientLane& q, std::uint32_t slot);
  template <std::uint32_t Node::*pos>
  void seq_heap_push(std::vector<SeqEntry>& h, std::uint32_t slot);
  template <std::uint32_t Node::*pos>
  void seq_heap_erase(std::vector<SeqEntry>& h, std::uint32_t slot);
  // The oldest of a list (its head) and its heap of requeued items.
  std::uint32_t oldest(std::uint32_t head, const std::vector<SeqEntry>* behind) const noexcept {
    if (behind == nullptr || behind->empty()) [[likely]] return head;
    const SeqEntry& top = behind->front();
    return head == npos || top.seq < nodes_[head].seq ? top.slot : head;
  }
  std::uint32_t head_of(const ClientLane& q) const noexcept {
    return oldest(q.head, q.behind == npos ? nullptr : &behind_heaps_[q.behind]);
  }
  std::uint32_t head_of(const Lane& lane) const noexcept { return oldest(lane.head, &lane.behind); }
  TimePoint deadline_of(std::uint32_t slot) const noexcept;  // max() when it has none
  void heap_set(std::size_t pos, HeapEntry e);  // heap_[pos] = e, pos kept in its node's dl_prev
  void heap_erase(std::size_t pos);
  void collect_idle_clients();
  ItemId id_of(std::uint32_t slot) const noexcept {
    return (static_cast<std::uint64_t>(nodes_[slot].gen) << 32) | slot;
  }

  SchedulerConfig cfg_;
  std::vector<Lane> lanes_;                // ranked by priority
  std::uint64_t nonempty_ = 0;             // bit r set: lane r has items
  std::uint64_t reserved_mask_ = 0;
  std::uint64_t aging_mask_ = 0;
  std::vector<Node> nodes_;
  std::uint32_t free_head_ = npos;         // free nodes, linked through lane_next
  std::vector<HeapEntry> heap_;            // explicit-deadline items, min-heap
  std::vector<std::vector<SeqEntry>> behind_heaps_;  // client-lanes' requeued items (ClientLane::behind)
  std::vector<std::uint32_t> free_behind_heaps_;
  std::vector<Client> clients_;
  std::vector<std::uint32_t> free_clients_;
  using NameMap =
      std::unordered_map<std::string, std::uint32_t, detail::string_hash, std::equal_to<>>;
  NameMap clients_by_name_;
  detail::name_cache<std::uint32_t> recent_clients_;  // in front of clients_by_name_
  NameMap weights_;
  std::size_t idle_clients_ = 0;
  std::size_t size_ = 0;
  std::uint64_t next_seq_ = 1;
};

}  // namespace laneq
