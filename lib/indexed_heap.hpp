#pragma once
// A binary min-heap in a vector whose entries know where they are: `place(pos, entry)` stores an
// entry at `pos` and records `pos` with the entry's owner, so an entry can be erased from the
// middle in O(log n). `before(a, b)` orders entries. Internal (lib/): the scheduler keeps them
// for explicit deadlines, clients waiting for a later round, and requeued items behind newer ones.
#include <cstddef>
#include <vector>

namespace laneq::detail {

template <class T, class Before, class Place>
void heap_sift_up(std::vector<T>& h, std::size_t pos, Before before, Place place) {
  const T e = h[pos];
  while (pos > 0) {
    const std::size_t parent = (pos - 1) / 2;
    if (!before(e, h[parent])) break;
    place(pos, h[parent]);
    pos = parent;
  }
  place(pos, e);
}

template <class T, class Before, class Place>
void heap_sift_down(std::vector<T>& h, std::size_t pos, Before before, Place place) {
  const T e = h[pos];
  for (;;) {
    std::size_t child = 2 * pos + 1;
    if (child >= h.size()) break;
    if (child + 1 < h.size() && before(h[child + 1], h[child])) ++child;
    if (!before(h[child], e)) break;
    place(pos, h[child]);
    pos = child;
  }
  place(pos, e);
}

template <class T, class Before, class Place>
void heap_push(std::vector<T>& h, const T& e, Before before, Place place) {
  h.push_back(e);
  heap_sift_up(h, h.size() - 1, before, place);
}

// Removes h[pos]: the last entry fills the hole and moves up or down from there.
template <class T, class Before, class Place>
void heap_erase(std::vector<T>& h, std::size_t pos, Before before, Place place) {
  const T last = h.back();
  h.pop_back();
  if (pos == h.size()) return;
  place(pos, last);
  if (pos > 0 && before(last, h[(pos - 1) / 2])) {
    heap_sift_up(h, pos, before, place);
  } else {
    heap_sift_down(h, pos, before, place);
  }
}

}  // namespace laneq::detail
