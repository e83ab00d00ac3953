#pragma once
// Journal: a durable record of requests in one SQLite file (WAL), written by one writer thread
// that the Journal owns. No Asio: calls queue work and return at once; the writer thread runs
// what is queued in ONE transaction (group commit, up to max_batch operations) and then calls
// the completions of that batch, in the order the calls were made, on the writer thread. Keep
// completions short, never block in them, never let them throw; they may call the Journal
// again. A completion may be empty (nullptr).
//
//   auto journal = laneq::Journal::open({.path = "run.db"});   // or open({"run.db"})
//   for (auto& r : journal->take_recovered()) requeue(r);           // left open by a crash
//   journal->append(std::move(record), [](std::error_code ec, std::int64_t row) { ... });
//   journal->mark_in_flight(row, worker, lease_until, attempts);
//   journal->finish(row, laneq::JournalState::succeeded, 1, {}, "", &response, on_done);
//
// Every completion runs exactly once: after the COMMIT that holds its work, or with
// errc::journal if that transaction failed; the destructor commits what is queued and runs the
// remaining completions before it returns. See docs/journal.md.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "laneq/detail/unique_function.hpp"
#include "laneq/request.hpp"
#include "laneq/store/journal_record.hpp"

namespace laneq {

// PRAGMA synchronous, the journal always being in WAL mode. Any level keeps every committed
// row across a crash of the process (kill -9): the data is in the OS by then.
enum class JournalSync {
  off,     // no fsync at all: an OS crash or power loss may lose commits AND corrupt the file
  normal,  // fsync at checkpoints only: an OS crash or power loss may lose the last commits,
           // never corrupts
  full,    // fsync of the WAL at every group commit: commits survive power loss
  extra,   // full, plus the directory syncs SQLite adds for rollback journals (WAL: as full)
};

struct JournalConfig {
  std::string path{};                         // the SQLite file, created if missing; required
  JournalSync synchronous = JournalSync::normal;
  std::size_t max_batch = 4096;               // operations per transaction (group commit), >= 1
  // Retention of finished rows (never pending / in_flight ones), applied at open, after every
  // 1,000 finished rows and at least once a minute (also when idle): delete rows finished longer
  // ago than retention_max_age (0 = keep), then all but the newest retention_keep_last (0 = all).
  std::chrono::milliseconds retention_max_age{0};
  std::size_t retention_keep_last = 0;
  // Time of finish() stamps and of retention's age cut-off; default system_clock::now. Called
  // from finish()'s caller and from the writer thread: must be thread-safe. If it throws,
  // system_clock::now() is used for that reading.
  std::function<std::chrono::system_clock::time_point()> clock{};

  // `config.journal = "run.db"`: the defaults with this path. (Assignment, not a constructor:
  // the config stays an aggregate for designated initializers.)
  JournalConfig& operator=(std::string p) {
    *this = JournalConfig{.path = std::move(p)};
    return *this;
  }
  // (`= {}` and `= nullptr` pick this overload: no path, journaling off)
  JournalConfig& operator=(const char* p) {
    return p ? *this = std::string(p) : *this = JournalConfig{};
  }
};

struct JournalStats {
  std::uint64_t appended = 0;              // rows inserted (committed)
  std::uint64_t duplicates = 0;            // appends refused with duplicate_id
  std::uint64_t marked_in_flight = 0;
  std::uint64_t released = 0;              // in-flight rows returned to pending
  std::uint64_t finished = 0;
  std::uint64_t transactions = 0;          // group commits (including failed ones)
  std::uint64_t largest_batch = 0;         // most operations in one transaction
  std::chrono::nanoseconds mean_commit_time{0};  // BEGIN .. COMMIT of a batch, mean
  std::uint64_t recovered_pending = 0;     // open rows found at open() that were pending
  std::uint64_t recovered_in_flight = 0;   // ... and that were in_flight (now pending again)
  std::uint64_t retention_passes = 0;
  std::uint64_t retention_deleted = 0;     // finished rows deleted by retention
  std::uint64_t write_errors = 0;          // failed operations and failed transactions
  std::string last_error{};                // the latest write error in words ("" = none)
  std::size_t queued = 0;                  // operations waiting for the writer thread
};

// What list() returns: rows in these states, in row order, after `after_row` (for paging),
// at most `limit` of them (0 = all).
struct JournalListOptions {
  JournalStateSet states = JournalStateSet::all();
  std::int64_t after_row = 0;
  // 0 = every matching row. A list runs on the writer thread between commits and holds its
  // rows in memory: on a large journal, page (after_row = the last row seen, limit = 1000).
  std::size_t limit = 0;
};

class Journal {
 public:
  using AppendHandler = detail::unique_function<void(std::error_code, std::int64_t row)>;
  using DoneHandler = detail::unique_function<void(std::error_code)>;
  using LookupHandler =
      detail::unique_function<void(std::error_code, std::optional<JournalRecord>)>;
  using ListHandler = detail::unique_function<void(std::error_code, std::vector<JournalRecord>)>;

  // Opens or creates the journal: WAL mode, PRAGMA locking_mode=EXCLUSIVE (one owner at a
  // time), integrity check (PRAGMA quick_check, reads the whole file), schema migrations in one
  // transaction, retention, then loads the rows an earlier run left open (take_recovered()).
  // Throws std::system_error(errc::invalid_config) naming a bad field, or
  // std::system_error(errc::journal) naming the path and what to do when the file is locked by
  // another owner, cannot be created or written, is not a database or is corrupt, or has a
  // schema newer than this laneq. It never recreates a file or drops its data.
  static std::shared_ptr<Journal> open(JournalConfig config);

  // Commits everything queued, runs every remaining completion, joins the writer thread.
  // (If the last reference is dropped inside a completion, the writer finishes on its own.)
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  // The rows an earlier run left open, in row (admission) order: every pending row and every
  // in_flight row. In-flight rows were set back to pending at open (attempts kept, lease
  // cleared): the exclusive lock proves their lease holder is gone. Returned once; then {}.
  std::vector<JournalRecord> take_recovered();

  // The calls below are thread-safe and never block on I/O: they queue work for the writer.
  // Rows are addressed by the number append() returned.

  // Inserts rec as a pending row (rec.row, state, lease and outcome fields are ignored).
  // done(ec, row) after its commit; ec = duplicate_id if the id exists, journal on failure.
  void append(JournalRecord rec, AppendHandler done);
  // An open row is leased by `worker` of this owner() until lease_until; no completion.
  void mark_in_flight(std::int64_t row, int worker,
                      std::chrono::system_clock::time_point lease_until, std::uint32_t attempts);
  // An in-flight row back to pending (e.g. dropped by a shutdown: it runs again next time); a
  // pending or finished row is left as it is; no completion.
  void release(std::int64_t row);
  // Writes the outcome of an open row: state must be finished (succeeded .. cancelled), else
  // std::invalid_argument. finished_at = config.clock(). `response` (nullable) is copied
  // before finish returns. done(ec) after its commit; ec = journal if the row is not open.
  void finish(std::int64_t row, JournalState state, std::uint32_t attempts, std::error_code error,
              std::string error_message, const Response* response, DoneHandler done);
  // done(ec) once everything queued before it is committed; ec = errc::journal if a write
  // queued since the previous flush (any transaction) was not.
  void flush(DoneHandler done);
  // The row with this id (nullopt if none), as of everything queued before the call.
  void lookup(std::string id, LookupHandler done);
  void list(JournalListOptions what, ListHandler done);

  const std::string& path() const noexcept;
  // This open's random instance id, stored as lease_owner by mark_in_flight().
  const std::string& owner() const noexcept;
  JournalStats stats() const;  // thread-safe

 private:
  struct Impl;  // lib/store/journal.cpp
  explicit Journal(std::shared_ptr<Impl> impl) noexcept;
  std::shared_ptr<Impl> impl_;
};

}  // namespace laneq
