#pragma once
// A direct-mapped cache in front of an unordered_map keyed by name: the slot is the name's hash
// masked (no division), a hit costs one compare of the hash and one of the name. The scheduler
// and the metrics each resolve every request's client name; with a few hundred active clients
// nearly every look-up hits, where unordered_map's bucket modulo and node walk cost ~3 % of B1.
// Holds pointers to the map's keys (stable while their nodes live): clear() when the map erases.
// One thread at a time, like the map it fronts.
#include <array>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace laneq::detail {

template <class Value, std::size_t Slots = 256>
class name_cache {
  static_assert((Slots & (Slots - 1)) == 0, "Slots must be a power of two");

 public:
  // The value cached for `name` (whose hash is `hash`), or nullptr.
  const Value* find(std::string_view name, std::size_t hash) const noexcept {
    const entry& e = slots_[hash & (Slots - 1)];
    return e.name != nullptr && e.hash == hash && *e.name == name ? &e.value : nullptr;
  }
  // The value for `name`: cached, else found in `map` (the unordered_map this cache fronts,
  // keyed by name) and cached, `value_of` turning the map's mapped value into a Value; or
  // nullptr when the map has no such name.
  template <class Map, class ValueOf = std::identity>
  const Value* find(const Map& map, std::string_view name, std::size_t hash,
                    ValueOf value_of = {}) {
    if (const Value* cached = find(name, hash)) return cached;
    const auto it = map.find(name);
    if (it == map.end()) return nullptr;
    put(it->first, hash, value_of(it->second));
    return &slots_[hash & (Slots - 1)].value;
  }
  // `name` is the map's key for `value`: it must stay valid until clear().
  void put(const std::string& name, std::size_t hash, Value value) noexcept {
    slots_[hash & (Slots - 1)] = {hash, &name, value};
  }
  void clear() noexcept { slots_.fill(entry{}); }

 private:
  struct entry {
    std::size_t hash = 0;
    const std::string* name = nullptr;
    Value value{};
  };
  std::array<entry, Slots> slots_{};
};

}  // namespace laneq::detail
