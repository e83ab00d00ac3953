#include "laneq/scheduler.hpp"

#include "indexed_heap.hpp"
#include "laneq/detail/aging.hpp"

#include <algorithm>
#include <bit>
#include <limits>
#include <stdexcept>

namespace laneq {

namespace {
constexpr std::uint8_t no_deadline = 0, lane_deadline = 1, explicit_deadline = 2;
constexpr std::uint8_t in_lane_heap = 1, in_client_heap = 2;  // Node::behind
// A heap of requeued items that empties gives its memory back above this many entries (a burst
// of retries), and keeps it below (the usual one or two).
constexpr std::size_t shrink_behind_above = 64;
constexpr std::size_t idle_client_sweep = 4096;  // idle clients kept before a sweep
// A turn's grant is capped far above any cost (costs are 32-bit): quantum x weight, both 32-bit,
// could overflow a signed 64-bit deficit otherwise; no realistic configuration reaches the cap.
constexpr std::uint64_t max_grant = std::uint64_t{1} << 40;

// The heaps' orders: explicit deadlines; requeued items by seq; clients by the (round,
// ring_seq) of their turn, rounds compared as serial numbers.
constexpr auto deadline_before = [](const auto& a, const auto& b) { return a.deadline < b.deadline; };
constexpr auto seq_before = [](const auto& a, const auto& b) { return a.seq < b.seq; };
constexpr auto turn_before = [](const auto& a, const auto& b) {
  return a.round != b.round ? static_cast<std::int64_t>(a.round - b.round) < 0 : a.seq < b.seq;
};
}  // namespace

Scheduler::Scheduler(SchedulerConfig config) : cfg_(std::move(config)) {
  if (cfg_.lanes.empty()) throw std::invalid_argument("SchedulerConfig::lanes: no lanes");
  if (cfg_.lanes.size() > 64)
    throw std::invalid_argument("SchedulerConfig::lanes: at most 64 lanes");
  if (cfg_.quantum == 0) throw std::invalid_argument("SchedulerConfig::quantum must be >= 1");
  std::sort(cfg_.lanes.begin(), cfg_.lanes.end(),
            [](const SchedulerLane& a, const SchedulerLane& b) { return a.priority < b.priority; });
  for (std::size_t i = 0; i < cfg_.lanes.size(); ++i) {
    const auto& l = cfg_.lanes[i];
    if (i > 0 && cfg_.lanes[i - 1].priority == l.priority)
      throw std::invalid_argument("SchedulerConfig::lanes: duplicate priority " +
                                  std::to_string(l.priority));
    if (l.timeout.count() < 0)
      throw std::invalid_argument("SchedulerLane::timeout must be >= 0 (lane " +
                                  std::to_string(l.priority) + ")");
    if (l.age_step.count() < 0)
      throw std::invalid_argument("SchedulerLane::age_step must be >= 0 (lane " +
                                  std::to_string(l.priority) + ")");
    lanes_.push_back(Lane{.spec = l});
    if (l.timeout >= no_deadline_beyond) lanes_.back().spec.timeout = Duration{0};
    if (l.reserved) reserved_mask_ |= std::uint64_t{1} << i;
    if (l.age_step.count() > 0) aging_mask_ |= std::uint64_t{1} << i;
  }
}

std::uint32_t Scheduler::lane_index(int priority) const noexcept {
  for (std::size_t i = 0; i < lanes_.size(); ++i)
    if (lanes_[i].spec.priority == priority) return static_cast<std::uint32_t>(i);
  return npos;
}

std::uint32_t Scheduler::client_for(std::string_view name) {
  const std::size_t hash = detail::hash_name(name);
  if (const std::uint32_t* known = recent_clients_.find(clients_by_name_, name, hash)) {
    if (clients_[*known].pending == 0) --idle_clients_;
    return *known;
  }
  std::uint32_t id;
  if (!free_clients_.empty()) {
    id = free_clients_.back();
    free_clients_.pop_back();
  } else {
    id = static_cast<std::uint32_t>(clients_.size());
    clients_.emplace_back();
  }
  Client& c = clients_[id];
  c.name.assign(name);
  auto w = weights_.find(c.name);
  c.weight = w == weights_.end() ? 1 : w->second;
  c.pending = 0;
  c.lanes.assign(lanes_.size(), ClientLane{});
  const auto it = clients_by_name_.emplace(c.name, id).first;
  recent_clients_.put(it->first, hash, id);
  return id;
}

// A forgotten client starts afresh: one that had its turn in the round under way and comes back
// gets a turn in it again (drr_join) - at most once per sweep, i.e. per 4,096 idle clients.
void Scheduler::collect_idle_clients() {
  recent_clients_.clear();  // it points at names erased here
  for (auto it = clients_by_name_.begin(); it != clients_by_name_.end();) {
    if (clients_[it->second].pending == 0) {
      free_clients_.push_back(it->second);
      it = clients_by_name_.erase(it);
    } else {
      ++it;
    }
  }
  idle_clients_ = 0;
}

template <std::uint32_t Scheduler::Node::*prev, std::uint32_t Scheduler::Node::*next>
void Scheduler::append(std::uint32_t slot, std::uint32_t& head, std::uint32_t& tail) {
  nodes_[slot].*prev = tail;
  nodes_[slot].*next = npos;
  (tail == npos ? head : nodes_[tail].*next) = slot;
  tail = slot;
}

// --- requeued items behind newer ones: a min-heap on seq beside each list, so a requeue is
// O(log n), not a walk to its place (under DRR a light client's retry may be newer than one
// heavy client's backlog and older than another's). A node's position lives in the prev link
// of the list it stays out of. ---

// Into / out of such a heap; the node's position lives in its link `pos` (cl_prev, lane_prev).
template <std::uint32_t Scheduler::Node::*pos>
void Scheduler::seq_heap_push(std::vector<SeqEntry>& h, std::uint32_t slot) {
  detail::heap_push(h, SeqEntry{nodes_[slot].seq, slot}, seq_before,
                    [&](std::size_t p, const SeqEntry& e) {
                      h[p] = e;
                      nodes_[e.slot].*pos = static_cast<std::uint32_t>(p);
                    });
}

template <std::uint32_t Scheduler::Node::*pos>
void Scheduler::seq_heap_erase(std::vector<SeqEntry>& h, std::uint32_t slot) {
  detail::heap_erase(h, nodes_[slot].*pos, seq_before, [&](std::size_t p, const SeqEntry& e) {
    h[p] = e;
    nodes_[e.slot].*pos = static_cast<std::uint32_t>(p);
  });
  if (h.empty() && h.capacity() > shrink_behind_above) std::vector<SeqEntry>().swap(h);
}

void Scheduler::push_behind_client(std::size_t l, std::uint32_t c, std::uint32_t slot) {
  ClientLane& q = clients_[c].lanes[l];
  if (q.behind == npos) {
    if (free_behind_heaps_.empty()) {
      behind_heaps_.emplace_back();  // first: q.behind never names a heap that is not there
      q.behind = static_cast<std::uint32_t>(behind_heaps_.size() - 1);
    } else {
      q.behind = free_behind_heaps_.back();
      free_behind_heaps_.pop_back();
    }
  }
  nodes_[slot].behind |= in_client_heap;
  seq_heap_push<&Node::cl_prev>(behind_heaps_[q.behind], slot);
}

void Scheduler::erase_behind_client(ClientLane& q, std::uint32_t slot) {
  seq_heap_erase<&Node::cl_prev>(behind_heaps_[q.behind], slot);
  if (behind_heaps_[q.behind].empty()) {  // a client-lane holds a heap only while it needs one
    free_behind_heaps_.push_back(q.behind);
    q.behind = npos;
  }
}

void Scheduler::push_behind_lane(std::size_t l, std::uint32_t slot) {
  nodes_[slot].behind |= in_lane_heap;
  seq_heap_push<&Node::lane_prev>(lanes_[l].behind, slot);
}

Scheduler::PushResult Scheduler::push(const PushArgs& a) {
  if (a.lane >= lanes_.size()) return {PushStatus::unknown_lane};
  // A requeue (a.seq) was admitted once already: limits do not apply to it again, so a retry
  // is never lost to a queue that filled up meanwhile (overshoot <= requests in flight). The
  // same for one the caller admitted before (a.admitted).
  const bool admitted = a.seq || a.admitted;
  if (!admitted && full()) return {PushStatus::queue_full};
  const std::uint32_t c = client_for(a.client);
  Client* cl = &clients_[c];
  if (!admitted && cfg_.max_pending_per_client != 0 && cl->pending >= cfg_.max_pending_per_client)
    return {PushStatus::client_queue_full};  // pending >= 1 here, so the client is not idle

  std::uint32_t slot;
  if (free_head_ != npos) {
    slot = free_head_;
    free_head_ = nodes_[slot].lane_next;
  } else {
    slot = static_cast<std::uint32_t>(nodes_.size());
    nodes_.push_back(Node{});
  }
  Node& n = nodes_[slot];
  Lane& lane = lanes_[a.lane];
  n.seq = a.seq ? *a.seq : next_seq_++;
  n.enqueued_at = a.enqueued_at;
  n.payload = a.payload;
  n.client = c;
  n.cost = std::max<std::uint32_t>(1, a.cost);
  n.lane = static_cast<std::uint16_t>(a.lane);
  n.behind = 0;

  // lane list in seq order, only when some lane ages (a lane's oldest item): a new item appends; a
  // requeued one (a.seq) behind newer ones goes to the lane's heap
  if (aging_mask_ != 0) {
    if (lane.tail == npos || nodes_[lane.tail].seq < n.seq) [[likely]]
      append<&Node::lane_prev, &Node::lane_next>(slot, lane.head, lane.tail);
    else
      push_behind_lane(a.lane, slot);
  }
  ++lane.count;
  nonempty_ |= std::uint64_t{1} << a.lane;

  // client-in-lane FIFO; a newly active client joins the round under way, at its end
  ClientLane& q = cl->lanes[a.lane];
  if (q.count == 0) {
    append<&Node::cl_prev, &Node::cl_next>(slot, q.head, q.tail);
    q.count = 1;
    drr_join(a.lane, c);
  } else if (q.behind == npos && nodes_[q.tail].seq < n.seq) [[likely]] {
    append<&Node::cl_prev, &Node::cl_next>(slot, q.head, q.tail);  // the head stays
    ++q.count;
  } else {  // a requeue, or a client with requeued items: the head may change
    const std::uint32_t old_head = head_of(q);
    if (q.tail == npos || nodes_[q.tail].seq < n.seq)
      append<&Node::cl_prev, &Node::cl_next>(slot, q.head, q.tail);
    else
      push_behind_client(a.lane, c, slot);
    ++q.count;
    if (head_of(q) != old_head) drr_head_changed(a.lane, c);  // back in front of its client
  }
  ++cl->pending;

  // deadline
  if (a.deadline) {
    heap_push(slot, *a.deadline);
  } else if (lane.spec.timeout.count() > 0) {
    // The list keeps lane-default deadlines in deadline order by appending only. An item that
    // does not append in order has its deadline in the heap, O(log n), instead of a walk to its
    // place: a requeue behind newer items, or one pushed later than its enqueued_at (a durable
    // request pushed once its journal row is committed; clocks read on several threads).
    const std::uint32_t t = lane.dl_tail;
    if (t == npos || (nodes_[t].seq < n.seq && nodes_[t].enqueued_at <= n.enqueued_at)) {
      n.deadline_kind = lane_deadline;
      append<&Node::dl_prev, &Node::dl_next>(slot, lane.dl_head, lane.dl_tail);
    } else {
      heap_push(slot, n.enqueued_at + lane.spec.timeout);
    }
  } else {
    n.deadline_kind = no_deadline;
  }
  ++size_;
  return {PushStatus::ok, id_of(slot)};
}


Scheduler::Item Scheduler::unlink(std::uint32_t slot) {
  Node& n = nodes_[slot];
  Lane& lane = lanes_[n.lane];
  Item item{id_of(slot), n.payload, n.lane, n.enqueued_at, std::nullopt, n.seq};
  if (n.deadline_kind != no_deadline) item.deadline = deadline_of(slot);

  if (aging_mask_ != 0) {
    if (n.behind & in_lane_heap) [[unlikely]] {
      seq_heap_erase<&Node::lane_prev>(lane.behind, slot);
    } else {
      if (n.lane_prev != npos) nodes_[n.lane_prev].lane_next = n.lane_next; else lane.head = n.lane_next;
      if (n.lane_next != npos) nodes_[n.lane_next].lane_prev = n.lane_prev; else lane.tail = n.lane_prev;
    }
  }
  if (--lane.count == 0) nonempty_ &= ~(std::uint64_t{1} << n.lane);

  Client& cl = clients_[n.client];
  ClientLane& q = cl.lanes[n.lane];
  const bool was_head = head_of(q) == slot;
  if (n.behind & in_client_heap) [[unlikely]] {
    erase_behind_client(q, slot);
  } else {
    if (n.cl_prev != npos) nodes_[n.cl_prev].cl_next = n.cl_next; else q.head = n.cl_next;
    if (n.cl_next != npos) nodes_[n.cl_next].cl_prev = n.cl_prev; else q.tail = n.cl_prev;
  }
  if (--q.count == 0) {
    drr_leave(n.lane, n.client);
  } else if (was_head) {
    drr_head_changed(n.lane, n.client);
  }
  if (--cl.pending == 0) ++idle_clients_;

  if (n.deadline_kind == lane_deadline) {
    dl_list_erase(slot);
  } else if (n.deadline_kind == explicit_deadline) {
    heap_erase(n.dl_prev);
  }

  // free the slot; bumping the generation invalidates outstanding ids. A slot whose
  // generation wrapped is retired (64 bytes per 2^32 reuses): reused, an id from 2^32
  // generations ago would name its new item.
  n.client = npos;
  if (++n.gen != 0) {
    n.lane_next = free_head_;
    free_head_ = slot;
  }
  --size_;
  if (idle_clients_ > idle_client_sweep && idle_clients_ > clients_by_name_.size() / 2)
    collect_idle_clients();
  return item;
}

std::int64_t Scheduler::effective_rank(std::size_t lane, TimePoint enqueued_at,
                                       TimePoint now) const noexcept {
  return detail::aged_rank(static_cast<std::int64_t>(lane), enqueued_at, lanes_[lane].spec.age_step,
                           now);
}

void Scheduler::heap_push(std::uint32_t slot, TimePoint deadline) {
  nodes_[slot].deadline_kind = explicit_deadline;
  detail::heap_push(heap_, HeapEntry{deadline, slot}, deadline_before,
                    [this](std::size_t p, const HeapEntry& e) { heap_set(p, e); });
}

void Scheduler::dl_list_erase(std::uint32_t slot) {
  const Node& n = nodes_[slot];
  Lane& lane = lanes_[n.lane];
  (n.dl_prev != npos ? nodes_[n.dl_prev].dl_next : lane.dl_head) = n.dl_next;
  (n.dl_next != npos ? nodes_[n.dl_next].dl_prev : lane.dl_tail) = n.dl_prev;
}

std::int64_t Scheduler::grant(std::uint32_t client) const noexcept {
  return static_cast<std::int64_t>(
      std::min(std::uint64_t{cfg_.quantum} * clients_[client].weight, max_grant));
}

// --- deficit round-robin inside a lane ------------------------------------------------------
//
// Turn by turn, DRR visits the lane's clients in rounds (in ring_seq order, the order they
// became active); a visit grants quantum x weight and serves the client while its deficit pays
// for its head. Here the visits in which a client cannot pay are never made: each waiting
// client sits where its next paying turn is (round, ring_seq), and grants are added lazily, all
// a client got since its last turn at once. The order is exactly turn by turn's.

// A waiting client's next turn: in this round if its place in the round is still ahead (and
// its last turn was not in this round), else in the next.
Scheduler::Round Scheduler::drr_next_turn(const Lane& lane, const ClientLane& q) const noexcept {
  return q.ring_seq > lane.current_seq && q.round != lane.round ? lane.round : lane.round + 1;
}

void Scheduler::drr_join(std::size_t l, std::uint32_t c) {
  Lane& lane = lanes_[l];
  ClientLane& q = clients_[c].lanes[l];
  ++lane.active;
  // Last in the round under way - unless it had its turn in it already (it emptied and came
  // back, e.g. a caller that submits its next request as soon as one is taken, or a retry): a
  // second turn in one round would let it go ahead of everyone, again and again.
  q.ring_seq = lane.next_ring_seq++;
  if (q.round != lane.round) q.round = lane.round - 1;  // as if its last turn were the round before
  q.deficit = 0;
  drr_place(l, c, q.round + drr_turns_to_pay(c, q));
}

void Scheduler::drr_leave(std::size_t l, std::uint32_t c) {
  Lane& lane = lanes_[l];
  ClientLane& q = clients_[c].lanes[l];
  if (q.place == Place::current) {  // the usual case: its last request was just taken
    lane.current = npos;
    q.place = Place::none;
  } else {
    q.round = drr_next_turn(lane, q) - 1;  // its last turn, made explicit (drr_join reads it)
    drr_unplace(l, c);
  }
  q.deficit = 0;  // an emptied client's deficit is forgotten (DRR)
  --lane.active;
}

void Scheduler::drr_head_changed(std::size_t l, std::uint32_t c) {
  // The current client's turn goes on until a pop finds it cannot pay (its head may change
  // again before then: a retry put back in front, a removal).
  if (clients_[c].lanes[l].place == Place::current) return;
  drr_unplace(l, c);
  drr_wait(l, c);
}

// Turns after its turn of q.round until its deficit pays for its head (no division in the usual
// case: one turn pays).
std::int64_t Scheduler::drr_turns_to_pay(std::uint32_t c, const ClientLane& q) const noexcept {
  const std::int64_t g = grant(c);
  const std::int64_t need = std::int64_t{nodes_[head_of(q)].cost} - q.deficit;
  return need <= g ? 1 : (need + g - 1) / g;
}

// The first round in which a waiting client's deficit pays for its head.
Scheduler::Round Scheduler::drr_paying_round(const Lane& lane, std::uint32_t c,
                                             const ClientLane& q) const noexcept {
  const Round next = drr_next_turn(lane, q);
  const Round paying = q.round + static_cast<Round>(drr_turns_to_pay(c, q));
  return round_before(paying, next) ? next : paying;
}

void Scheduler::drr_wait(std::size_t l, std::uint32_t c) {
  drr_place(l, c, drr_paying_round(lanes_[l], c, clients_[c].lanes[l]));
}

// Waits for its paying round `at`: in a list when that is this round or the next and it comes
// last in it (the usual case), else in the heap.
void Scheduler::drr_place(std::size_t l, std::uint32_t c, Round at) {
  Lane& lane = lanes_[l];
  ClientLane& q = clients_[c].lanes[l];
  if (at - lane.round <= 1) {  // at is never before lane.round
    const auto parity = static_cast<std::size_t>(at & 1);
    ClientList& list = lane.lists[parity];
    if (list.tail == npos || list.tail_seq < q.ring_seq) {
      q.prev = list.tail;
      q.next = npos;
      (list.tail == npos ? list.head : clients_[list.tail].lanes[l].next) = c;
      list.tail = c;
      list.tail_seq = q.ring_seq;
      q.place = parity == 0 ? Place::list0 : Place::list1;
      return;
    }
  }
  drr_place_later(l, c, at);
}

void Scheduler::drr_place_later(std::size_t l, std::uint32_t c, Round at) {
  ClientLane& q = clients_[c].lanes[l];
  q.place = Place::heap;
  detail::heap_push(lanes_[l].later, TurnEntry{at, q.ring_seq, c}, turn_before,
                    [this, l](std::size_t p, const TurnEntry& e) { later_set(l, p, e); });
}

// Out of its list (list0 or list1).
void Scheduler::drr_list_erase(std::size_t l, ClientLane& q) {
  ClientList& list = lanes_[l].lists[q.place == Place::list0 ? 0 : 1];
  (q.prev == npos ? list.head : clients_[q.prev].lanes[l].next) = q.next;
  if (q.next != npos) {
    clients_[q.next].lanes[l].prev = q.prev;
  } else {
    list.tail = q.prev;
    if (q.prev != npos) list.tail_seq = clients_[q.prev].lanes[l].ring_seq;
  }
  q.place = Place::none;
  q.prev = q.next = npos;
}

void Scheduler::drr_unplace(std::size_t l, std::uint32_t c) {
  Lane& lane = lanes_[l];
  ClientLane& q = clients_[c].lanes[l];
  switch (q.place) {
    case Place::none: break;
    case Place::current: lane.current = npos; break;
    case Place::list0:
    case Place::list1: drr_list_erase(l, q); return;
    case Place::heap:
      detail::heap_erase(lane.later, q.prev, turn_before,
                         [this, l](std::size_t p, const TurnEntry& e) { later_set(l, p, e); });
      break;
  }
  q.place = Place::none;
  q.prev = q.next = npos;
}

// The client a pop serves: the current one while it can pay, else the first by (round,
// ring_seq) among the lists' fronts, the heap's top and the current one once its turn is over.
// The lane has at least one client.
std::uint32_t Scheduler::drr_next_client(std::size_t l) const noexcept {
  const Lane& lane = lanes_[l];
  std::uint32_t best = npos;
  Round round = 0;
  std::uint64_t seq = 0;
  const auto consider = [&](std::uint32_t c, Round r, std::uint64_t s) {
    if (best == npos || round_before(r, round) || (r == round && s < seq)) {
      best = c;
      round = r;
      seq = s;
    }
  };
  if (lane.current != npos) {
    const ClientLane& q = clients_[lane.current].lanes[l];
    if (nodes_[head_of(q)].cost <= q.deficit) return lane.current;
  }
  // The usual case: the next in this round (a current client that cannot pay pays later).
  if (const std::uint32_t c = lane.lists[static_cast<std::size_t>(lane.round & 1)].head;
      c != npos && lane.later.empty())
    return c;
  if (lane.current != npos) {
    const ClientLane& q = clients_[lane.current].lanes[l];
    consider(lane.current, drr_paying_round(lane, lane.current, q), q.ring_seq);
  }
  for (const Round r : {lane.round, lane.round + 1})
    if (const std::uint32_t c = lane.lists[static_cast<std::size_t>(r & 1)].head; c != npos) {
      consider(c, r, clients_[c].lanes[l].ring_seq);
      break;
    }
  if (!lane.later.empty()) consider(lane.later.front().client, lane.later.front().round,
                                    lane.later.front().seq);
  return best;
}

std::uint32_t Scheduler::pop_round_robin(std::size_t l) {
  Lane& lane = lanes_[l];
  if (const std::uint32_t c = lane.current; c != npos) {
    ClientLane& q = clients_[c].lanes[l];
    if (const std::uint32_t head = head_of(q); nodes_[head].cost <= q.deficit) {  // its turn goes on
      q.deficit -= nodes_[head].cost;
      return head;
    }
    lane.current = npos;  // its turn is over; the round goes on after its place
    q.place = Place::none;
    drr_place(l, c, q.round + drr_turns_to_pay(c, q));  // q.round is this round
  }
  // The next client's turn comes: in this round, the next (the lists swap roles by parity), or
  // later (the lists are empty then). The grants of the turns it could not pay in come at once.
  Round at = lane.round;
  std::uint32_t c = lane.lists[static_cast<std::size_t>(at & 1)].head;
  if (c == npos) c = lane.lists[static_cast<std::size_t>(++at & 1)].head;  // this round is over
  if (c == npos || !lane.later.empty()) {  // not the usual case: a list's first, heap empty
    c = drr_next_client(l);
    const ClientLane& w = clients_[c].lanes[l];
    at = w.place == Place::heap ? lane.later.front().round
         : (w.place == Place::list0) == ((lane.round & 1) == 0) ? lane.round
                                                              : lane.round + 1;
  }
  ClientLane& q = clients_[c].lanes[l];
  if (q.place == Place::heap) {
    drr_unplace(l, c);
  } else {
    drr_list_erase(l, q);  // the usual case, without drr_unplace's call
  }
  lane.round = at;
  lane.current = c;
  lane.current_seq = q.ring_seq;
  q.place = Place::current;
  // (at - q.round - 1) x grant < cost <= 2^32: no overflow
  const std::uint32_t head = head_of(q);
  q.deficit += static_cast<std::int64_t>(at - q.round) * grant(c) - nodes_[head].cost;
  q.round = at;
  return head;
}

// --- the heap of clients that can pay only in a later round, min on (round, ring_seq); a
// client-lane's heap position lives in its `prev` ---

void Scheduler::later_set(std::size_t l, std::size_t pos, TurnEntry e) {
  lanes_[l].later[pos] = e;
  clients_[e.client].lanes[l].prev = static_cast<std::uint32_t>(pos);
}

std::optional<Scheduler::Item> Scheduler::pop_masked(TimePoint now, std::uint64_t mask) {
  std::uint64_t avail = nonempty_ & mask;
  if (avail == 0) return std::nullopt;
  std::size_t best = static_cast<std::size_t>(std::countr_zero(avail));
  const std::size_t natural = best;  // the best lane without aging
  if ((avail & aging_mask_) != 0) {
    // effective rank = rank - waited / age_step of the lane's oldest item; ties -> older wins
    auto eff = [&](std::size_t r) { return effective_rank(r, nodes_[head_of(lanes_[r])].enqueued_at, now); };
    std::int64_t best_eff = eff(best);
    for (std::uint64_t rest = avail & (avail - 1); rest != 0; rest &= rest - 1) {
      const auto r = static_cast<std::size_t>(std::countr_zero(rest));
      if ((aging_mask_ >> r & 1) == 0) continue;
      const std::int64_t e = eff(r);
      if (e < best_eff ||
          (e == best_eff && nodes_[head_of(lanes_[r])].seq < nodes_[head_of(lanes_[best])].seq)) {
        best = r;
        best_eff = e;
      }
    }
  }
  // Promoted past a better lane: its oldest request, the one that earned it. The lane served
  // anyway keeps its clients' turns, however long its requests have waited.
  const std::uint32_t slot = best != natural ? head_of(lanes_[best]) : pop_round_robin(best);
  return unlink(slot);
}

std::optional<Scheduler::Item> Scheduler::pop(TimePoint now) { return pop_masked(now, ~0ull); }

std::uint64_t Scheduler::next_payload_hint() const noexcept {
  if (nonempty_ == 0) return 0;
  const auto l = static_cast<std::size_t>(std::countr_zero(nonempty_));
  return nodes_[head_of(clients_[drr_next_client(l)].lanes[l])].payload;
}

std::optional<Scheduler::Item> Scheduler::pop_reserved(TimePoint now) {
  return pop_masked(now, reserved_mask_);
}

std::optional<Scheduler::Item> Scheduler::remove(ItemId id) {
  const auto slot = static_cast<std::uint32_t>(id & 0xffffffffu);
  const auto gen = static_cast<std::uint32_t>(id >> 32);
  if (slot >= nodes_.size() || nodes_[slot].client == npos || nodes_[slot].gen != gen)
    return std::nullopt;
  return unlink(slot);
}

TimePoint Scheduler::deadline_of(std::uint32_t slot) const noexcept {
  const Node& n = nodes_[slot];
  switch (n.deadline_kind) {
    case lane_deadline: return n.enqueued_at + lanes_[n.lane].spec.timeout;
    case explicit_deadline: return heap_[n.dl_prev].deadline;
    default: return TimePoint::max();
  }
}

std::optional<TimePoint> Scheduler::next_deadline() const {
  TimePoint best = TimePoint::max();
  if (!heap_.empty()) best = heap_.front().deadline;
  for (const Lane& lane : lanes_)
    if (lane.dl_head != npos) best = std::min(best, deadline_of(lane.dl_head));
  if (best == TimePoint::max()) return std::nullopt;
  return best;
}

std::optional<Scheduler::Item> Scheduler::pop_expired(TimePoint now) {
  std::uint32_t slot = npos;
  TimePoint best = TimePoint::max();
  if (!heap_.empty()) {
    slot = heap_.front().slot;
    best = heap_.front().deadline;
  }
  for (const Lane& lane : lanes_) {
    if (lane.dl_head == npos) continue;
    if (const TimePoint d = deadline_of(lane.dl_head); d < best) {
      slot = lane.dl_head;
      best = d;
    }
  }
  if (slot == npos || best > now) return std::nullopt;
  return unlink(slot);
}

void Scheduler::set_client_weight(std::string_view client, std::uint32_t weight) {
  weight = std::max<std::uint32_t>(1, weight);
  if (weight == 1) {
    if (auto w = weights_.find(client); w != weights_.end()) weights_.erase(w);
  } else {
    weights_[std::string(client)] = weight;
  }
  auto it = clients_by_name_.find(client);
  if (it == clients_by_name_.end()) return;
  const std::uint32_t c = it->second;
  // From its next turn: where it waits, the turns it had so far were granted at the old
  // weight (made explicit here), those to come at the new one. A current turn keeps its grant.
  std::uint64_t waiting = 0;  // lanes (<= 64) where it waits
  for (std::size_t l = 0; l < lanes_.size(); ++l) {
    ClientLane& q = clients_[c].lanes[l];
    if (q.count == 0 || q.place == Place::current) continue;
    const Round last = drr_next_turn(lanes_[l], q) - 1;
    if (round_before(q.round, last)) {  // fewer turns than it needed: < its head's cost
      q.deficit += static_cast<std::int64_t>(last - q.round) * grant(c);
      q.round = last;
    }
    drr_unplace(l, c);
    waiting |= std::uint64_t{1} << l;
  }
  clients_[c].weight = weight;
  for (; waiting != 0; waiting &= waiting - 1)
    drr_wait(static_cast<std::size_t>(std::countr_zero(waiting)), c);
}

std::size_t Scheduler::client_size(std::string_view client) const {
  auto it = clients_by_name_.find(client);
  return it == clients_by_name_.end() ? 0 : clients_[it->second].pending;
}

// --- explicit-deadline min-heap of {deadline, slot}; a node's heap position lives in dl_prev ---

void Scheduler::heap_set(std::size_t pos, HeapEntry e) {
  heap_[pos] = e;
  nodes_[e.slot].dl_prev = static_cast<std::uint32_t>(pos);
}

void Scheduler::heap_erase(std::size_t pos) {
  detail::heap_erase(heap_, pos, deadline_before,
                     [this](std::size_t p, const HeapEntry& e) { heap_set(p, e); });
}

}  // namespace laneq
