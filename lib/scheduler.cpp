#include "laneq/scheduler.hpp"

#include <algorithm>
#include <bit>
#include <limits>
#include <stdexcept>

namespace laneq {

namespace {
constexpr std::uint8_t no_deadline = 0, lane_deadline = 1, explicit_deadline = 2;
constexpr std::size_t idle_client_sweep = 4096;  // idle clients kept before a sweep
// A turn's grant is capped far above any cost (costs are 32-bit): quantum x weight, both 32-bit,
// could overflow a signed 64-bit deficit otherwise; no realistic configuration reaches the cap.
constexpr std::uint64_t max_grant = std::uint64_t{1} << 40;
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

// The list's links are template arguments: three lists per push, each with direct offsets.
template <std::uint32_t Scheduler::Node::*prev, std::uint32_t Scheduler::Node::*next>
void Scheduler::insert_by_seq(std::uint32_t slot, std::uint32_t& head, std::uint32_t& tail) {
  // A new item is the newest: append. A requeued one goes back to its place, found from the
  // head: it was taken from near the head, so few older items precede it.
  const std::uint64_t seq = nodes_[slot].seq;
  std::uint32_t before = npos;
  if (tail != npos && nodes_[tail].seq > seq) {
    before = head;
    while (nodes_[before].seq < seq) before = nodes_[before].*next;
  }
  const std::uint32_t after = before == npos ? tail : nodes_[before].*prev;
  nodes_[slot].*prev = after;
  nodes_[slot].*next = before;
  (after == npos ? head : nodes_[after].*next) = slot;
  (before == npos ? tail : nodes_[before].*prev) = slot;
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

  // lane list in seq order: a new item appends; a requeued one (a.seq) goes back to its place
  insert_by_seq<&Node::lane_prev, &Node::lane_next>(slot, lane.head, lane.tail);
  ++lane.count;
  nonempty_ |= std::uint64_t{1} << a.lane;

  // client-in-lane FIFO; a newly active client joins the ring at the end of the round
  ClientLane& q = cl->lanes[a.lane];
  insert_by_seq<&Node::cl_prev, &Node::cl_next>(slot, q.head, q.tail);
  if (q.count++ == 0) ring_insert(a.lane, c);
  ++cl->pending;

  // deadline
  if (a.deadline) {
    heap_push(slot, *a.deadline);
  } else if (lane.spec.timeout.count() > 0) {
    n.deadline_kind = lane_deadline;
    insert_by_seq<&Node::dl_prev, &Node::dl_next>(slot, lane.dl_head, lane.dl_tail);
    // The list is in seq order, which is deadline order only while enqueued_at grows with seq.
    // An item admitted earlier than its push (a durable request pushed once its journal row is
    // committed; clocks read on several threads) may break that: its deadline goes to the heap.
    const bool after_prev = n.dl_prev == npos || nodes_[n.dl_prev].enqueued_at <= n.enqueued_at;
    const bool before_next = n.dl_next == npos || n.enqueued_at <= nodes_[n.dl_next].enqueued_at;
    if (!after_prev || !before_next) {
      dl_list_erase(slot);
      heap_push(slot, n.enqueued_at + lane.spec.timeout);
    }
  } else {
    n.deadline_kind = no_deadline;
  }
  ++size_;
  return {PushStatus::ok, id_of(slot)};
}


void Scheduler::ring_insert(std::size_t l, std::uint32_t c) {
  Lane& lane = lanes_[l];
  ClientLane& q = clients_[c].lanes[l];
  q.deficit = 0;
  ++lane.ring_size;
  if (lane.current == npos) {
    q.ring_prev = q.ring_next = c;
    lane.current = c;
    lane.fresh_turn = true;
    return;
  }
  // before current = last in the round
  const std::uint32_t cur = lane.current;
  const std::uint32_t prev = clients_[cur].lanes[l].ring_prev;
  q.ring_prev = prev;
  q.ring_next = cur;
  clients_[prev].lanes[l].ring_next = c;
  clients_[cur].lanes[l].ring_prev = c;
}

void Scheduler::ring_erase(std::size_t l, std::uint32_t c) {
  Lane& lane = lanes_[l];
  ClientLane& q = clients_[c].lanes[l];
  q.deficit = 0;
  --lane.ring_size;
  if (q.ring_next == c) {
    lane.current = npos;
  } else {
    clients_[q.ring_prev].lanes[l].ring_next = q.ring_next;
    clients_[q.ring_next].lanes[l].ring_prev = q.ring_prev;
    if (lane.current == c) {
      lane.current = q.ring_next;
      lane.fresh_turn = true;
    }
  }
  q.ring_prev = q.ring_next = npos;
}

Scheduler::Item Scheduler::unlink(std::uint32_t slot) {
  Node& n = nodes_[slot];
  Lane& lane = lanes_[n.lane];
  Item item{id_of(slot), n.payload, n.lane, n.enqueued_at, std::nullopt, n.seq};
  if (n.deadline_kind != no_deadline) item.deadline = deadline_of(slot);

  if (n.lane_prev != npos) nodes_[n.lane_prev].lane_next = n.lane_next; else lane.head = n.lane_next;
  if (n.lane_next != npos) nodes_[n.lane_next].lane_prev = n.lane_prev; else lane.tail = n.lane_prev;
  if (--lane.count == 0) nonempty_ &= ~(std::uint64_t{1} << n.lane);

  Client& cl = clients_[n.client];
  ClientLane& q = cl.lanes[n.lane];
  if (n.cl_prev != npos) nodes_[n.cl_prev].cl_next = n.cl_next; else q.head = n.cl_next;
  if (n.cl_next != npos) nodes_[n.cl_next].cl_prev = n.cl_prev; else q.tail = n.cl_prev;
  if (--q.count == 0) ring_erase(n.lane, n.client);
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
  const Duration step = lanes_[lane].spec.age_step;
  const auto rank = static_cast<std::int64_t>(lane);
  if (step.count() <= 0 || now <= enqueued_at) return rank;
  return std::max<std::int64_t>(0, rank - (now - enqueued_at) / step);
}

void Scheduler::heap_push(std::uint32_t slot, TimePoint deadline) {
  nodes_[slot].deadline_kind = explicit_deadline;
  nodes_[slot].dl_prev = static_cast<std::uint32_t>(heap_.size());
  heap_.push_back({deadline, slot});
  heap_up(heap_.size() - 1);
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

std::uint32_t Scheduler::pop_round_robin(std::size_t l) {
  Lane& lane = lanes_[l];
  std::uint32_t turns = 0;  // turned over in this pop, nobody served
  for (;;) {
    const std::uint32_t c = lane.current;
    ClientLane& q = clients_[c].lanes[l];
    if (lane.fresh_turn) {
      q.deficit += grant(c);
      lane.fresh_turn = false;
    }
    const std::uint32_t head = q.head;
    if (nodes_[head].cost <= q.deficit) {
      q.deficit -= nodes_[head].cost;
      return head;
    }
    lane.current = q.ring_next;  // turn over; the deficit carries to its next turn
    lane.fresh_turn = true;
    if (++turns == lane.ring_size) skip_rounds(l);
  }
}

// A whole round in which no client could pay for its head (costs above quantum x weight): the
// rounds until the first one can are granted at once, instead of turn by turn (which, with
// costs in tokens and quantum 1, would be millions of turns). Same order as turn by turn.
void Scheduler::skip_rounds(std::size_t l) {
  const Lane& lane = lanes_[l];
  std::int64_t rounds = std::numeric_limits<std::int64_t>::max();  // until the first can pay
  std::uint32_t c = lane.current;
  do {
    const ClientLane& q = clients_[c].lanes[l];
    const std::int64_t need = std::int64_t{nodes_[q.head].cost} - q.deficit;  // > 0 here
    const std::int64_t g = grant(c);
    rounds = std::min(rounds, (need + g - 1) / g);
    c = q.ring_next;
  } while (c != lane.current);
  if (rounds <= 1) return;
  do {  // (rounds - 1) x grant < need <= 2^32 for the client that decided it; less for others
    ClientLane& q = clients_[c].lanes[l];
    q.deficit += (rounds - 1) * grant(c);
    c = q.ring_next;
  } while (c != lane.current);
}

std::optional<Scheduler::Item> Scheduler::pop_masked(TimePoint now, std::uint64_t mask) {
  std::uint64_t avail = nonempty_ & mask;
  if (avail == 0) return std::nullopt;
  std::size_t best = static_cast<std::size_t>(std::countr_zero(avail));
  const std::size_t natural = best;  // the best lane without aging
  if ((avail & aging_mask_) != 0) {
    // effective rank = rank - waited / age_step of the lane's oldest item; ties -> older wins
    auto eff = [&](std::size_t r) { return effective_rank(r, nodes_[lanes_[r].head].enqueued_at, now); };
    std::int64_t best_eff = eff(best);
    for (std::uint64_t rest = avail & (avail - 1); rest != 0; rest &= rest - 1) {
      const auto r = static_cast<std::size_t>(std::countr_zero(rest));
      if ((aging_mask_ >> r & 1) == 0) continue;
      const std::int64_t e = eff(r);
      if (e < best_eff ||
          (e == best_eff && nodes_[lanes_[r].head].seq < nodes_[lanes_[best].head].seq)) {
        best = r;
        best_eff = e;
      }
    }
  }
  // Promoted past a better lane: its oldest request, the one that earned it. The lane served
  // anyway keeps its clients' turns, however long its requests have waited.
  const std::uint32_t slot = best != natural ? lanes_[best].head : pop_round_robin(best);
  return unlink(slot);
}

std::optional<Scheduler::Item> Scheduler::pop(TimePoint now) { return pop_masked(now, ~0ull); }

std::uint64_t Scheduler::next_payload_hint() const noexcept {
  if (nonempty_ == 0) return 0;
  const auto l = static_cast<std::size_t>(std::countr_zero(nonempty_));
  const Lane& lane = lanes_[l];
  std::uint32_t c = lane.current;
  const ClientLane& q = clients_[c].lanes[l];
  if (!lane.fresh_turn && nodes_[q.head].cost > q.deficit) c = q.ring_next;  // its turn is over
  return nodes_[clients_[c].lanes[l].head].payload;
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
  weights_[std::string(client)] = weight;
  auto it = clients_by_name_.find(client);
  if (it != clients_by_name_.end()) clients_[it->second].weight = weight;
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

void Scheduler::heap_up(std::size_t pos) {
  const HeapEntry e = heap_[pos];
  while (pos > 0) {
    const std::size_t parent = (pos - 1) / 2;
    if (heap_[parent].deadline <= e.deadline) break;
    heap_set(pos, heap_[parent]);
    pos = parent;
  }
  heap_set(pos, e);
}

void Scheduler::heap_down(std::size_t pos) {
  const HeapEntry e = heap_[pos];
  const std::size_t n = heap_.size();
  for (;;) {
    std::size_t child = 2 * pos + 1;
    if (child >= n) break;
    if (child + 1 < n && heap_[child + 1].deadline < heap_[child].deadline) ++child;
    if (e.deadline <= heap_[child].deadline) break;
    heap_set(pos, heap_[child]);
    pos = child;
  }
  heap_set(pos, e);
}

void Scheduler::heap_erase(std::size_t pos) {
  const HeapEntry last = heap_.back();
  heap_.pop_back();
  if (pos == heap_.size()) return;
  heap_set(pos, last);
  heap_up(pos);
  heap_down(nodes_[last.slot].dl_prev);
}

}  // namespace laneq
