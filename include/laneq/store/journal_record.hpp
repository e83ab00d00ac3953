#pragma once
// JournalRecord: one durable request as the journal stores it (see store/journal.hpp).
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <system_error>

#include "laneq/request.hpp"

namespace laneq {

// A request's life in the journal: pending -> in_flight -> one of the finished states.
// in_flight may go back to pending (release(), or a restart: see Journal::open).
enum class JournalState : int {
  pending = 0,    // admitted, waiting to run (or to run again)
  in_flight = 1,  // leased by a worker of the journal's owner
  succeeded = 2,  // finished: the states from here on are final
  failed = 3,
  expired = 4,
  cancelled = 5,
};

constexpr bool is_finished(JournalState s) noexcept { return s >= JournalState::succeeded; }

// A set of states, e.g. {JournalState::pending, JournalState::in_flight} or finished().
class JournalStateSet {
 public:
  constexpr JournalStateSet() noexcept = default;
  constexpr JournalStateSet(std::initializer_list<JournalState> states) noexcept {
    for (JournalState s : states) bits_ |= bit(s);
  }
  static constexpr JournalStateSet all() noexcept { return from_bits(0x3f); }
  static constexpr JournalStateSet open() noexcept { return from_bits(0x03); }
  static constexpr JournalStateSet finished() noexcept { return from_bits(0x3c); }

  constexpr bool contains(JournalState s) const noexcept { return (bits_ & bit(s)) != 0; }
  constexpr unsigned bits() const noexcept { return bits_; }  // bit i = JournalState(i)

 private:
  static constexpr unsigned bit(JournalState s) noexcept { return 1u << static_cast<int>(s); }
  static constexpr JournalStateSet from_bits(unsigned b) noexcept {
    JournalStateSet set;
    set.bits_ = b;
    return set;
  }
  unsigned bits_ = 0;
};

// Times are stored at millisecond precision (integer ms since the Unix epoch).
struct JournalRecord {
  std::string id{};                       // the caller's id, unique in the journal
  std::int64_t row = 0;                   // assigned by append(): admission order, never reused
  JournalState state = JournalState::pending;
  int priority = 5;                       // the lane (Priority value)
  std::string client{};                   // tenant
  std::uint32_t cost = 1;                 // fairness cost (SubmitOptions::cost)
  std::optional<std::chrono::milliseconds> timeout{};  // per-request override, if any
  Request request{};                      // all but on_delta, which is not stored
  std::chrono::system_clock::time_point enqueued_at{};
  std::optional<std::chrono::system_clock::time_point> deadline{};
  std::uint32_t attempts = 0;
  // Runs that ended (a crash, kill -9) while it was in_flight, counted by Journal::open: a
  // request that ends the process whenever it runs shows here (see max_interrupted_runs).
  std::uint32_t interrupted = 0;
  // The last lease (mark_in_flight): meaningful while in_flight, kept afterwards for the record.
  std::string lease_owner{};              // Journal::owner() of the process that ran it
  int lease_worker = -1;
  std::optional<std::chrono::system_clock::time_point> lease_until{};
  // Outcome (finished states only).
  std::optional<std::chrono::system_clock::time_point> finished_at{};
  std::error_code error{};                // laneq, generic and system categories are restored;
                                          // others read back as errc::internal
  std::string error_message{};
  std::optional<Response> response{};
};

}  // namespace laneq
