#pragma once
// Admitted requests waiting for room in a full scheduler (QueueConfig::max_pending reached,
// WhenFull::wait). One FIFO per lane, linked through the op's `wait` links; room goes to the
// waiter with the best effective rank (its lane's, improved by the lane's aging as the
// scheduler does; ties: the earlier submit), so a critical request never waits behind batch work
// that happened to come first. Within a lane: arrival order. Counts per client, so that
// max_pending_per_client covers the waiting requests too. Internal (lib/); strand only.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "laneq/detail/submit_op.hpp"

namespace laneq::detail {

class waiting_room {
 public:
  explicit waiting_room(std::size_t lanes) : lanes_(lanes) {}

  bool empty() const noexcept { return size_ == 0; }

  // How many of `client`'s requests wait here.
  std::size_t client_size(std::string_view client) const {
    if (size_ == 0) return 0;
    const auto it = per_client_.find(client);
    return it == per_client_.end() ? 0 : it->second;
  }

  void push(submit_op_base* op) {
    const std::string_view client = op->options.client;
    if (auto it = per_client_.find(client); it != per_client_.end())
      ++it->second;
    else
      per_client_.emplace(std::string(client), 1);  // first: it may throw, the links not
    fifo& l = lanes_[op->lane];
    op->wait = {l.tail, nullptr};
    (l.tail ? l.tail->wait.next : l.head) = op;
    l.tail = op;
    ++size_;
  }

  void erase(submit_op_base* op) {
    fifo& l = lanes_[op->lane];
    (op->wait.prev ? op->wait.prev->wait.next : l.head) = op->wait.next;
    (op->wait.next ? op->wait.next->wait.prev : l.tail) = op->wait.prev;
    op->wait = {nullptr, nullptr};
    --size_;
    const auto it = per_client_.find(std::string_view(op->options.client));
    if (it != per_client_.end() && --it->second == 0) per_client_.erase(it);
  }

  // The waiter room goes to next: the lowest rank(lane, op) over the oldest waiters of the
  // lanes in `lanes` (a bit per lane); nullptr when none waits there. O(lanes).
  template <class Rank>
  submit_op_base* best(Rank rank, std::uint64_t lanes) const {
    submit_op_base* pick = nullptr;
    std::int64_t pick_rank = 0;
    for (std::size_t lane = 0; lane < lanes_.size(); ++lane) {
      submit_op_base* head = lanes_[lane].head;
      if (head == nullptr || (lanes >> lane & 1) == 0) continue;
      const std::int64_t r = rank(lane, *head);
      if (pick == nullptr || r < pick_rank ||
          (r == pick_rank && head->submitted_at < pick->submitted_at)) {
        pick = head;
        pick_rank = r;
      }
    }
    return pick;
  }

  // Whether anyone waits in the lanes of `lanes` (a bit per lane).
  bool any_in(std::uint64_t lanes) const noexcept {
    for (std::size_t lane = 0; lane < lanes_.size(); ++lane)
      if ((lanes >> lane & 1) != 0 && lanes_[lane].head != nullptr) return true;
    return false;
  }

  // Any waiter (shutdown empties the room in no particular order).
  submit_op_base* any() const noexcept {
    for (const fifo& l : lanes_)
      if (l.head != nullptr) return l.head;
    return nullptr;
  }

 private:
  struct fifo {
    submit_op_base* head = nullptr;
    submit_op_base* tail = nullptr;
  };
  std::vector<fifo> lanes_;
  std::size_t size_ = 0;
  std::map<std::string, std::size_t, std::less<>> per_client_;
};

}  // namespace laneq::detail
