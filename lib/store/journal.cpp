#include "laneq/store/journal.hpp"

#include <algorithm>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <random>
#include <span>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <utility>
#include <variant>

#include "laneq/error.hpp"
#include "record_json.hpp"
#include "schema.hpp"
#include "sqlite.hpp"

namespace laneq {

namespace {

using sys_clock = std::chrono::system_clock;
using steady = std::chrono::steady_clock;
using store::sqlite::Db;
using store::sqlite::Stmt;

constexpr std::uint64_t retention_every = 1000;            // finished rows between passes
constexpr steady::duration retention_period = std::chrono::minutes(1);

std::int64_t to_ms(sys_clock::time_point t) noexcept {
  return std::chrono::floor<std::chrono::milliseconds>(t.time_since_epoch()).count();
}
sys_clock::time_point from_ms(std::int64_t ms) noexcept {
  // to_ms floors: time_point::min() is stored one millisecond beyond what reads back.
  constexpr std::int64_t lim =
      std::chrono::duration_cast<std::chrono::milliseconds>(sys_clock::duration::max()).count();
  if (ms > lim) return sys_clock::time_point::max();
  if (ms < -lim) return sys_clock::time_point::min();
  return sys_clock::time_point(
      std::chrono::duration_cast<sys_clock::duration>(std::chrono::milliseconds(ms)));
}
std::optional<std::int64_t> to_ms(const std::optional<sys_clock::time_point>& t) noexcept {
  if (!t) return std::nullopt;
  return to_ms(*t);
}
std::optional<sys_clock::time_point> opt_time(std::optional<std::int64_t> ms) noexcept {
  if (!ms) return std::nullopt;
  return from_ms(*ms);
}

// Codes of categories every process shares come back as they were written.
std::error_code restore_error(std::string_view category, int value) {
  if (category.empty()) return {};
  for (const std::error_category* c :
       {&error_category(), &std::generic_category(), &std::system_category()})
    if (category == c->name()) return {value, *c};
  return make_error_code(errc::internal);
}

// What an SQLite result code means for the owner of a journal file, and what to do.
std::string explain(int rc) {
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return "is locked by another process (or another Journal in this one); a journal has one "
             "owner at a time: stop the other owner or use another path";
    case SQLITE_NOTADB:
      return "is not a SQLite database; it was left untouched: move it away or use another path";
    case SQLITE_CORRUPT:
      return "is corrupt; it was left untouched: restore a backup, or move it away and start a "
             "new journal";
    case SQLITE_READONLY:
    case SQLITE_PERM:
      return "cannot be written (read-only file, directory or filesystem): make the file and its "
             "directory writable for this user, or use another path";
    case SQLITE_CANTOPEN:
      return "cannot be opened or created (missing directory, a path component that is not a "
             "directory, or no permission): check the path and its permissions";
    case SQLITE_FULL: return "cannot grow: the disk is full; free space and retry";
    case SQLITE_IOERR: return "hit an I/O error; check the disk and the filesystem";
    default: return std::string("failed: ") + sqlite3_errstr(rc);
  }
}

[[noreturn]] void bad_config(const std::string& what) {
  throw std::system_error(make_error_code(errc::invalid_config), what);
}

std::string random_owner() {
  std::random_device rd;
  std::uniform_int_distribution<std::uint64_t> u;
  char buf[17];
  std::uint64_t v = u(rd) ^ (static_cast<std::uint64_t>(rd()) << 32);
  for (int i = 15; i >= 0; --i, v >>= 4) buf[i] = "0123456789abcdef"[v & 0xf];
  buf[16] = '\0';
  return buf;
}

int sync_level(JournalSync s) noexcept { return static_cast<int>(s); }  // OFF=0 .. EXTRA=3

constexpr const char* record_columns =
    "row, id, state, priority, client, cost, timeout_ms, request, enqueued_at, deadline, "
    "attempts, lease_owner, lease_worker, lease_until, finished_at, error_category, error_value, "
    "error_message, response, interrupted";

// Reads one row of `SELECT record_columns ...`; throws nlohmann::json::exception on bad JSON.
JournalRecord read_record(const Stmt& s) {
  JournalRecord r;
  r.row = s.int64(0);
  r.id = s.text(1);
  r.state = static_cast<JournalState>(s.int64(2));
  r.priority = static_cast<int>(s.int64(3));
  r.client = s.text(4);
  r.cost = static_cast<std::uint32_t>(s.int64(5));
  if (auto t = s.opt_int64(6)) r.timeout = std::chrono::milliseconds(*t);
  r.request = store::parse_request(s.text(7));
  r.enqueued_at = from_ms(s.int64(8));
  r.deadline = opt_time(s.opt_int64(9));
  r.attempts = static_cast<std::uint32_t>(s.int64(10));
  r.lease_owner = s.text(11);
  r.lease_worker = static_cast<int>(s.int64(12));
  r.lease_until = opt_time(s.opt_int64(13));
  r.finished_at = opt_time(s.opt_int64(14));
  r.error = restore_error(s.text(15), static_cast<int>(s.int64(16)));
  r.error_message = s.text(17);
  if (!s.is_null(18)) r.response = store::parse_response(s.text(18));
  r.interrupted = static_cast<std::uint32_t>(s.int64(19));
  return r;
}

// Queued operations. Results are kept in the op until its batch committed.
struct AppendOp {
  JournalRecord rec;
  Journal::AppendHandler done;
  std::error_code ec{};
};
struct InFlightOp {
  std::int64_t row;
  int worker;
  std::int64_t lease_until_ms;
  std::uint32_t attempts;
};
struct ReleaseOp {
  std::int64_t row;
};
struct FinishOp {
  std::int64_t row;
  JournalState state;
  std::uint32_t attempts;
  std::error_code error;
  std::string message;
  std::optional<std::string> response;  // JSON
  std::int64_t finished_at_ms;
  Journal::DoneHandler done;
  std::error_code ec{};
};
struct FlushOp {
  Journal::DoneHandler done;
  std::error_code ec{};  // a write queued before it (since the previous flush) failed
};
struct LookupOp {
  std::string id;
  Journal::LookupHandler done;
  std::error_code ec{};
  std::optional<JournalRecord> result{};
};
struct ListOp {
  JournalListOptions what;
  Journal::ListHandler done;
  std::error_code ec{};
  std::vector<JournalRecord> result{};
};
using Op = std::variant<AppendOp, InFlightOp, ReleaseOp, FinishOp, FlushOp, LookupOp, ListOp>;

bool is_write(const Op& op) {
  return !std::holds_alternative<FlushOp>(op) && !std::holds_alternative<LookupOp>(op) &&
         !std::holds_alternative<ListOp>(op);
}

// Counts of one batch, added to the stats once it committed.
struct BatchCounts {
  std::uint64_t appended = 0, duplicates = 0, in_flight = 0, released = 0, finished = 0;
  std::uint64_t retention_passes = 0, retention_deleted = 0, write_errors = 0;
};

}  // namespace

struct Journal::Impl {
  explicit Impl(JournalConfig c) : config(std::move(c)), owner(random_owner()) {}

  // --- open (on the caller's thread, before the writer starts) ---
  void open();
  [[noreturn]] void fail_open(int rc, const std::string& step) const;
  void exec_or_fail(const char* sql, const char* step);
  std::int64_t query_int(const char* sql, const char* step);
  void quick_check();
  void migrate(int from);
  void recover();
  void prepare_statements();

  // --- writer thread ---
  void run();
  void run_batch(std::span<Op> batch, bool retention_due);
  std::error_code statement_failed(std::string what, BatchCounts& n);
  bool transaction_lost() const noexcept { return sqlite3_get_autocommit(db.get()) != 0; }
  int step_once(Stmt& s);  // step + reset; an error's message goes to sql_error
  // Retention inside the open transaction; false (message in sql_error) on failure.
  bool retention_pass(BatchCounts& n);
  // retention_pass in a savepoint: its failure undoes only its own deletes (counted as a write
  // error); false only if the transaction itself was lost.
  bool retention_isolated(BatchCounts& n);

  void execute(AppendOp& o, BatchCounts& n);
  void execute(InFlightOp& o, BatchCounts& n);
  void execute(ReleaseOp& o, BatchCounts& n);
  void execute(FinishOp& o, BatchCounts& n);
  void execute(FlushOp& o, BatchCounts&) {
    if (std::exchange(writes_lost, false)) o.ec = make_error_code(errc::journal);
  }
  void execute(LookupOp& o, BatchCounts& n);
  void execute(ListOp& o, BatchCounts& n);

  // Notifies under the lock: once it is released, a completion may drop the last reference
  // and free this Impl. Only an idle writer is woken; a busy one finds the op when it looks.
  void push(Op op) {
    std::lock_guard lock(mu);
    queue.push_back(std::move(op));
    if (writer_idle) cv.notify_one();
  }

  JournalConfig config;
  const std::string owner;
  Db db;
  struct {
    Stmt begin, commit, rollback, insert, in_flight, release, finish, lookup, list;
    Stmt retention_age, retention_oldest;
  } st;

  // Queue, shared with the callers. The writer swaps it with its own empty vector, so both
  // keep their capacity and queuing does not allocate in a steady state; past a burst's (more
  // than kept_ops, ~750 B each) the writer's is given back, so both shrink within two rounds.
  static constexpr std::size_t kept_ops = 8192;
  mutable std::mutex mu;
  std::condition_variable cv;
  std::vector<Op> queue;
  bool stopping = false;
  bool writer_idle = false;
  std::vector<JournalRecord> recovered;
  std::thread writer;

  // Stats, shared with stats().
  mutable std::mutex stats_mu;
  JournalStats stats;
  std::chrono::nanoseconds commit_total{0};

  // Writer-thread state.
  std::string scratch;                // the request JSON of the append being written
  std::string sql_error;              // SQLite's message for the latest failed step
  std::string op_error;               // this batch's latest failed operation
  std::uint64_t finished_since_pass = 0;
  // A write queued since the last flush was not committed: that flush's done() says so (it
  // promises that everything queued before it is committed).
  bool writes_lost = false;
  std::int64_t finished_rows = 0;     // finished rows in the file (keep_last)
  steady::time_point last_pass{};
};

// ------------------------------------------------------------------------------------------
// open

void Journal::Impl::fail_open(int rc, const std::string& step) const {
  const bool has_message = db.get() && sqlite3_errcode(db.get()) != SQLITE_OK;
  std::string what = "laneq journal '" + config.path + "' " + explain(rc);
  what += " (" + step + ": " + (has_message ? db.errmsg() : sqlite3_errstr(rc)) + ")";
  throw std::system_error(make_error_code(errc::journal), what);
}

void Journal::Impl::exec_or_fail(const char* sql, const char* step) {
  if (const int rc = db.exec(sql); rc != SQLITE_OK) fail_open(rc, step);
}

std::int64_t Journal::Impl::query_int(const char* sql, const char* step) {
  Stmt s;
  int rc = s.prepare(db.get(), sql, false);
  if (rc == SQLITE_OK) rc = s.step();
  if (rc != SQLITE_ROW) fail_open(rc, step);
  return s.int64(0);
}

void Journal::Impl::quick_check() {
  Stmt s;
  int rc = s.prepare(db.get(), "PRAGMA quick_check(1)", false);
  if (rc == SQLITE_OK) rc = s.step();
  if (rc != SQLITE_ROW) fail_open(rc, "integrity check");
  if (const std::string_view result = s.text(0); result != "ok")
    throw std::system_error(make_error_code(errc::journal),
                            "laneq journal '" + config.path + "' " + explain(SQLITE_CORRUPT) +
                                " (PRAGMA quick_check: " + std::string(result) + ")");
}

void Journal::Impl::migrate(int from) {
  for (int v = from; v < store::schema_version; ++v) {
    const std::string step = "migration to schema version " + std::to_string(v + 1);
    if (const int rc = db.exec(store::migrations[v]); rc != SQLITE_OK) fail_open(rc, step);
  }
  if (from != store::schema_version) {
    const std::string sql = "PRAGMA user_version = " + std::to_string(store::schema_version);
    exec_or_fail(sql.c_str(), "setting the schema version");
  }
}

void Journal::Impl::recover() {
  // The exclusive lock is ours: whoever held an in_flight lease is gone, so the lease is void.
  exec_or_fail("UPDATE requests SET state = 0, interrupted = interrupted + 1, lease_owner = '', "
               "lease_worker = -1, lease_until = NULL WHERE state = 1",
               "recovery");
  const auto was_in_flight = static_cast<std::uint64_t>(sqlite3_changes(db.get()));
  Stmt s;
  const std::string sql = std::string("SELECT ") + record_columns +
                          " FROM requests WHERE state < 2 ORDER BY row";
  int rc = s.prepare(db.get(), sql, false);
  while (rc == SQLITE_OK && (rc = s.step()) == SQLITE_ROW) {
    try {
      recovered.push_back(read_record(s));
    } catch (const std::exception& e) {
      throw std::system_error(make_error_code(errc::journal),
                              "laneq journal '" + config.path + "': row " +
                                  std::to_string(s.int64(0)) + " cannot be read (" + e.what() +
                                  "); it was left untouched: fix or delete that row");
    }
    rc = SQLITE_OK;
  }
  if (rc != SQLITE_DONE) fail_open(rc, "loading the open rows");
  stats.recovered_in_flight = was_in_flight;
  stats.recovered_pending = recovered.size() - was_in_flight;
  finished_rows = query_int("SELECT count(*) FROM requests WHERE state >= 2", "counting rows");
}

void Journal::Impl::prepare_statements() {
  const std::string select = std::string("SELECT ") + record_columns + " FROM requests ";
  const std::pair<Stmt*, std::string> all[] = {
      {&st.begin, "BEGIN"},
      {&st.commit, "COMMIT"},
      {&st.rollback, "ROLLBACK"},
      {&st.insert,
       "INSERT OR IGNORE INTO requests(id, priority, client, cost, timeout_ms, request, "
       "enqueued_at, deadline, attempts) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"},
      {&st.in_flight,
       "UPDATE requests SET state = 1, attempts = ?2, lease_owner = ?3, lease_worker = ?4, "
       "lease_until = ?5 WHERE row = ?1 AND state < 2"},
      // (in flight only: a pending row stays as it is, and stats().released counts real ones)
      {&st.release, "UPDATE requests SET state = 0, lease_until = NULL WHERE row = ?1 AND state = 1"},
      {&st.finish,
       "UPDATE requests SET state = ?2, attempts = ?3, finished_at = ?4, error_category = ?5, "
       "error_value = ?6, error_message = ?7, response = ?8 WHERE row = ?1 AND state < 2"},
      {&st.lookup, select + "WHERE id = ?1"},
      {&st.list, select + "WHERE row > ?1 AND ((1 << state) & ?2) != 0 ORDER BY row LIMIT ?3"},
      {&st.retention_age, "DELETE FROM requests WHERE state >= 2 AND finished_at < ?1"},
      {&st.retention_oldest,
       "DELETE FROM requests WHERE row IN (SELECT row FROM requests WHERE state >= 2 "
       "ORDER BY finished_at, row LIMIT ?1)"},
  };
  for (const auto& [stmt, sql] : all)
    if (const int rc = stmt->prepare(db.get(), sql, true); rc != SQLITE_OK)
      fail_open(rc, "preparing '" + sql + "'");
}

void Journal::Impl::open() {
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(
      config.path.c_str(), &raw,
      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE,
      nullptr);
  db = Db(raw);  // closed on every failure below
  if (rc != SQLITE_OK) fail_open(rc, "open");
  // SQLite opens a write-protected file read-only instead of failing: refuse that here.
  if (sqlite3_db_readonly(raw, "main") == 1) fail_open(SQLITE_READONLY, "open");
  exec_or_fail("PRAGMA locking_mode = EXCLUSIVE", "locking_mode");
  // The first read takes the lock and reads the header: locked / not a database fail here,
  // before anything is written.
  const auto version = query_int("PRAGMA user_version", "reading the schema version");
  if (version < 0)  // some other program's database: its migrations would index out of range
    throw std::system_error(
        make_error_code(errc::journal),
        "laneq journal '" + config.path + "' has schema version " + std::to_string(version) +
            ": not a laneq journal; it was left untouched: use another path");
  if (version > store::schema_version)
    throw std::system_error(
        make_error_code(errc::journal),
        "laneq journal '" + config.path + "' has schema version " + std::to_string(version) +
            ", newer than this laneq supports (" + std::to_string(store::schema_version) +
            "); it was left untouched: open it with a newer laneq, or use another path");
  // Version 0 is a new file or another program's database that never set a version: only an
  // empty one may become a journal. Checked before the first write (the WAL switch persists
  // in the file header), so another program's file is left as it was.
  if (version == 0) {
    const auto objects = query_int("SELECT count(*) FROM sqlite_master", "reading the schema");
    if (objects > 0)
      throw std::system_error(
          make_error_code(errc::journal),
          "not a laneq journal: " + config.path + " already has tables (" +
              std::to_string(objects) + " schema objects) and no laneq schema version; it was "
              "left untouched: use another path, or an empty or new file");
  }
  quick_check();
  {
    Stmt s;
    int wal = s.prepare(db.get(), "PRAGMA journal_mode = WAL", false);
    if (wal == SQLITE_OK) wal = s.step();
    if (wal != SQLITE_ROW) fail_open(wal, "switching to WAL mode");
    if (s.text(0) != "wal") fail_open(SQLITE_READONLY, "switching to WAL mode");
  }
  const std::string sync = "PRAGMA synchronous = " + std::to_string(sync_level(config.synchronous));
  exec_or_fail(sync.c_str(), "synchronous");
  exec_or_fail("BEGIN EXCLUSIVE", "taking the write lock");
  migrate(static_cast<int>(version));
  recover();
  prepare_statements();
  BatchCounts n;
  if (!retention_isolated(n))
    throw std::system_error(make_error_code(errc::journal),
                            "laneq journal '" + config.path + "': retention failed: " + sql_error);
  stats.retention_passes = n.retention_passes;
  stats.retention_deleted = n.retention_deleted;
  stats.write_errors = n.write_errors;
  if (n.write_errors) stats.last_error = "laneq journal '" + config.path + "': " + op_error;
  finished_rows -= static_cast<std::int64_t>(n.retention_deleted);
  exec_or_fail("COMMIT", "committing the open");
}

// ------------------------------------------------------------------------------------------
// writer thread

int Journal::Impl::step_once(Stmt& s) {
  const int rc = s.step();
  if (rc != SQLITE_DONE && rc != SQLITE_ROW)
    sql_error = s.bind_error() ? sqlite3_errstr(rc) : db.errmsg();  // the connection's is stale
  s.reset();
  return rc;
}

std::error_code Journal::Impl::statement_failed(std::string what, BatchCounts& n) {
  ++n.write_errors;
  op_error = std::move(what);
  return make_error_code(errc::journal);
}

// Retention is housekeeping: a failure of its deletes (a disk too full for the WAL) must not roll
// back the appends and outcomes committed with it, every minute again.
bool Journal::Impl::retention_isolated(BatchCounts& n) {
  if (db.exec("SAVEPOINT retention") != SQLITE_OK) {
    statement_failed(std::string("retention: SAVEPOINT: ") + db.errmsg(), n);
    return !transaction_lost();
  }
  BatchCounts r = n;
  if (retention_pass(r) && db.exec("RELEASE retention") == SQLITE_OK) {
    n = r;
    return true;
  }
  const std::string why = sql_error;
  db.exec("ROLLBACK TO retention");
  db.exec("RELEASE retention");
  if (transaction_lost()) return false;
  statement_failed("retention: " + why, n);
  return true;
}

bool Journal::Impl::retention_pass(BatchCounts& n) {
  const bool by_age = config.retention_max_age.count() > 0;
  const bool by_count = config.retention_keep_last > 0;
  if (!by_age && !by_count) return true;
  ++n.retention_passes;
  std::int64_t deleted = 0;
  if (by_age) {
    const auto cut = config.clock() - config.retention_max_age;
    st.retention_age.bind(1, to_ms(cut));
    if (step_once(st.retention_age) != SQLITE_DONE) return false;
    deleted += sqlite3_changes(db.get());
  }
  // finished rows now: in the file before this batch, plus this batch's, less those just deleted
  const auto finished_now = finished_rows + static_cast<std::int64_t>(n.finished) - deleted;
  const auto keep = static_cast<std::int64_t>(config.retention_keep_last);
  if (by_count && finished_now > keep) {
    st.retention_oldest.bind(1, finished_now - keep);
    if (step_once(st.retention_oldest) != SQLITE_DONE) return false;
    deleted += sqlite3_changes(db.get());
  }
  n.retention_deleted += static_cast<std::uint64_t>(deleted);
  return true;
}

void Journal::Impl::execute(AppendOp& o, BatchCounts& n) {
  const JournalRecord& r = o.rec;
  scratch.clear();
  store::append_json(scratch, r.request);
  Stmt& s = st.insert;
  s.bind(1, r.id);
  s.bind(2, std::int64_t{r.priority});
  s.bind(3, r.client);
  s.bind(4, std::int64_t{r.cost});
  s.bind(5, r.timeout ? std::optional<std::int64_t>(r.timeout->count()) : std::nullopt);
  s.bind(6, scratch);
  s.bind(7, to_ms(r.enqueued_at));
  s.bind(8, to_ms(r.deadline));
  s.bind(9, std::int64_t{r.attempts});
  if (step_once(s) != SQLITE_DONE) {
    o.ec = statement_failed("append '" + r.id + "': " + sql_error, n);
  } else if (sqlite3_changes(db.get()) == 0) {
    o.ec = make_error_code(errc::duplicate_id);
    ++n.duplicates;
  } else {
    o.rec.row = sqlite3_last_insert_rowid(db.get());
    ++n.appended;
  }
}

void Journal::Impl::execute(InFlightOp& o, BatchCounts& n) {
  Stmt& s = st.in_flight;
  s.bind(1, o.row);
  s.bind(2, std::int64_t{o.attempts});
  s.bind(3, owner);
  s.bind(4, std::int64_t{o.worker});
  s.bind(5, o.lease_until_ms);
  if (step_once(s) != SQLITE_DONE) {
    statement_failed("mark_in_flight row " + std::to_string(o.row) + ": " + sql_error, n);
  } else if (sqlite3_changes(db.get()) == 0) {
    statement_failed("mark_in_flight row " + std::to_string(o.row) + ": not an open row", n);
  } else {
    ++n.in_flight;
  }
}

void Journal::Impl::execute(ReleaseOp& o, BatchCounts& n) {
  st.release.bind(1, o.row);
  if (step_once(st.release) != SQLITE_DONE)
    statement_failed("release row " + std::to_string(o.row) + ": " + sql_error, n);
  else
    n.released += static_cast<std::uint64_t>(sqlite3_changes(db.get()));
}

void Journal::Impl::execute(FinishOp& o, BatchCounts& n) {
  Stmt& s = st.finish;
  s.bind(1, o.row);
  s.bind(2, std::int64_t{static_cast<int>(o.state)});
  s.bind(3, std::int64_t{o.attempts});
  s.bind(4, o.finished_at_ms);
  if (o.error)
    s.bind(5, std::string_view(o.error.category().name()));
  else
    s.bind_null(5);
  s.bind(6, std::int64_t{o.error.value()});
  s.bind(7, o.message);
  if (o.response)
    s.bind(8, *o.response);
  else
    s.bind_null(8);
  if (step_once(s) != SQLITE_DONE) {
    o.ec = statement_failed("finish row " + std::to_string(o.row) + ": " + sql_error, n);
  } else if (sqlite3_changes(db.get()) == 0) {
    o.ec = statement_failed(
        "finish row " + std::to_string(o.row) + ": not an open row (unknown or finished)", n);
  } else {
    ++n.finished;
  }
}

void Journal::Impl::execute(LookupOp& o, BatchCounts& n) {
  Stmt& s = st.lookup;
  s.bind(1, o.id);
  std::string error;
  int rc = s.step();
  try {
    if (rc == SQLITE_ROW) o.result = read_record(s);
  } catch (const std::exception& e) {
    error = e.what();
    rc = SQLITE_CORRUPT;
  }
  if (rc != SQLITE_ROW && rc != SQLITE_DONE && error.empty()) error = db.errmsg();
  s.reset();
  if (!error.empty()) {
    o.result.reset();
    o.ec = statement_failed("lookup '" + o.id + "': " + error, n);
  }
}

void Journal::Impl::execute(ListOp& o, BatchCounts& n) {
  Stmt& s = st.list;
  s.bind(1, o.what.after_row);
  s.bind(2, std::int64_t{o.what.states.bits()});
  s.bind(3, o.what.limit ? static_cast<std::int64_t>(o.what.limit) : std::int64_t{-1});
  std::string error;
  int rc;
  try {
    while ((rc = s.step()) == SQLITE_ROW) o.result.push_back(read_record(s));
  } catch (const std::exception& e) {
    error = e.what();
    rc = SQLITE_CORRUPT;
  }
  if (rc != SQLITE_DONE && error.empty()) error = db.errmsg();
  s.reset();
  if (!error.empty()) {
    o.result.clear();
    o.ec = statement_failed("list: " + error, n);
  }
}

void Journal::Impl::run_batch(std::span<Op> batch, bool retention_due) {
  const auto t0 = steady::now();
  BatchCounts n;
  op_error.clear();
  std::string failure;  // non-empty: the transaction failed, every op of the batch fails
  if (step_once(st.begin) != SQLITE_DONE) failure = "BEGIN: " + sql_error;
  const bool lost_before = writes_lost;
  for (std::size_t i = 0; failure.empty() && i < batch.size(); ++i) {
    const auto errors_before = n.write_errors;
    std::visit([&](auto& op) { execute(op, n); }, batch[i]);
    if (transaction_lost()) failure = "transaction rolled back: " + op_error;
    if (n.write_errors != errors_before && is_write(batch[i])) writes_lost = true;
  }
  retention_due = retention_due || finished_since_pass + n.finished >= retention_every;
  if (retention_due) last_pass = t0;  // also after a failure: no retry loop
  if (failure.empty() && retention_due && !retention_isolated(n))
    failure = "retention: " + sql_error;
  if (failure.empty() && step_once(st.commit) != SQLITE_DONE) failure = "COMMIT: " + sql_error;
  if (!failure.empty() && !transaction_lost()) step_once(st.rollback);
  const auto elapsed = steady::now() - t0;

  const bool ok = failure.empty();
  // A failed batch's flushes fail with it, executed or not; what the next flush must say is
  // whether a write came after the last of them (or, with none, before or in this batch).
  if (!ok) {
    const auto last_flush = std::find_if(batch.rbegin(), batch.rend(), [](const Op& op) {
      return std::holds_alternative<FlushOp>(op);
    });
    const bool written_after = std::any_of(batch.rbegin(), last_flush, is_write);
    writes_lost = written_after || (last_flush == batch.rend() && lost_before);
  }
  if (ok) {
    finished_rows += static_cast<std::int64_t>(n.finished) -
                     static_cast<std::int64_t>(n.retention_deleted);
    finished_since_pass = retention_due ? 0 : finished_since_pass + n.finished;
  }
  {
    std::lock_guard lock(stats_mu);
    JournalStats& s = stats;
    ++s.transactions;
    s.largest_batch = std::max<std::uint64_t>(s.largest_batch, batch.size());
    commit_total += elapsed;
    s.mean_commit_time = commit_total / s.transactions;
    s.write_errors += n.write_errors + (ok ? 0 : 1);
    if (!ok)
      s.last_error = "laneq journal '" + config.path + "': " + failure;
    else if (n.write_errors)
      s.last_error = "laneq journal '" + config.path + "': " + op_error;
    if (ok) {
      s.appended += n.appended;
      s.duplicates += n.duplicates;
      s.marked_in_flight += n.in_flight;
      s.released += n.released;
      s.finished += n.finished;
      s.retention_passes += n.retention_passes;
      s.retention_deleted += n.retention_deleted;
    }
  }

  // Completions, in call order, after the COMMIT.
  const std::error_code failed = ok ? std::error_code{} : make_error_code(errc::journal);
  for (Op& op : batch) {
    std::visit(
        [&](auto& o) {
          using T = std::decay_t<decltype(o)>;
          if constexpr (std::is_same_v<T, AppendOp>) {
            if (o.done) o.done(ok ? o.ec : failed, ok && !o.ec ? o.rec.row : 0);
          } else if constexpr (std::is_same_v<T, FinishOp>) {
            if (o.done) o.done(ok ? o.ec : failed);
          } else if constexpr (std::is_same_v<T, FlushOp>) {
            if (o.done) o.done(ok ? o.ec : failed);
          } else if constexpr (std::is_same_v<T, LookupOp> || std::is_same_v<T, ListOp>) {
            if (!ok) o.result = {};
            if (o.done) o.done(ok ? o.ec : failed, std::move(o.result));
          }
        },
        op);
  }
}

void Journal::Impl::run() {
  const bool retention = config.retention_max_age.count() > 0 || config.retention_keep_last > 0;
  last_pass = steady::now();
  std::vector<Op> taken;  // everything queued, run in transactions of at most max_batch ops
  std::unique_lock lock(mu);
  for (;;) {
    const auto ready = [&] { return !queue.empty() || stopping; };
    bool due = false;
    writer_idle = true;
    if (!retention) {
      cv.wait(lock, ready);
    } else if (!cv.wait_until(lock, last_pass + retention_period, ready)) {
      due = true;  // a minute without work: a retention pass on its own
    }
    writer_idle = false;
    if (queue.empty() && stopping) break;
    due = due || (retention && steady::now() - last_pass >= retention_period);
    taken.swap(queue);
    lock.unlock();
    const std::span<Op> all(taken);
    for (std::size_t at = 0; at < all.size() || due; at += config.max_batch) {
      run_batch(all.subspan(at, std::min(config.max_batch, all.size() - at)), due);
      due = false;
    }
    taken.clear();  // destroys the ops (and their handlers) outside the lock
    if (taken.capacity() > kept_ops) std::vector<Op>().swap(taken);
    lock.lock();
  }
}

// ------------------------------------------------------------------------------------------
// Journal

Journal::Journal(std::shared_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}

std::shared_ptr<Journal> Journal::open(JournalConfig config) {
  if (config.path.empty()) bad_config("JournalConfig::path is empty: name the journal's file");
  if (config.max_batch < 1) bad_config("JournalConfig::max_batch must be >= 1");
  if (config.retention_max_age.count() < 0)
    bad_config("JournalConfig::retention_max_age must be >= 0 (0 = keep)");
  // "Keep for ever" written as a huge age or count (milliseconds::max(), SIZE_MAX) must not
  // wrap around into "delete everything": beyond a century there is nothing to cut.
  constexpr auto century = std::chrono::hours(24 * 365 * 100);
  if (config.retention_max_age > century) config.retention_max_age = century;
  constexpr auto max_keep = static_cast<std::size_t>(std::numeric_limits<std::int64_t>::max());
  if (config.retention_keep_last > max_keep) config.retention_keep_last = max_keep;
  if (static_cast<int>(config.synchronous) < 0 || static_cast<int>(config.synchronous) > 3)
    bad_config("JournalConfig::synchronous is not a JournalSync value");
  if (!config.clock) {
    config.clock = [] { return sys_clock::now(); };
  } else {
    // Called by finish() after the queue resolved a request, and on the writer thread: a throw
    // there would lose the request's outcome or end the process. The system clock stands in.
    config.clock = [given = std::move(config.clock)] {
      try {
        return given();
      } catch (...) {
        return sys_clock::now();
      }
    };
  }

  auto impl = std::make_shared<Impl>(std::move(config));
  impl->open();
  std::shared_ptr<Journal> journal(new Journal(impl));
  impl->writer = std::thread([impl] { impl->run(); });
  return journal;
}

Journal::~Journal() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_one();
  if (!impl_->writer.joinable()) return;  // its thread never started (open() threw)
  if (impl_->writer.get_id() == std::this_thread::get_id())
    impl_->writer.detach();  // the last reference dropped in a completion: finish on our own
  else
    impl_->writer.join();
}

std::vector<JournalRecord> Journal::take_recovered() {
  std::lock_guard lock(impl_->mu);
  return std::exchange(impl_->recovered, {});
}

void Journal::append(JournalRecord rec, AppendHandler done) {
  impl_->push(AppendOp{std::move(rec), std::move(done)});
}

void Journal::mark_in_flight(std::int64_t row, int worker, sys_clock::time_point lease_until,
                             std::uint32_t attempts) {
  impl_->push(InFlightOp{row, worker, to_ms(lease_until), attempts});
}

void Journal::release(std::int64_t row) { impl_->push(ReleaseOp{row}); }

void Journal::finish(std::int64_t row, JournalState state, std::uint32_t attempts,
                     std::error_code error, std::string error_message, const Response* response,
                     DoneHandler done) {
  if (!is_finished(state) || state > JournalState::cancelled)
    throw std::invalid_argument("Journal::finish: state must be succeeded, failed, expired or "
                                "cancelled");
  std::optional<std::string> json;
  if (response) json = store::dump(store::to_json(*response));
  impl_->push(FinishOp{row, state, attempts, error, std::move(error_message), std::move(json),
                       to_ms(impl_->config.clock()), std::move(done)});
}

void Journal::flush(DoneHandler done) { impl_->push(FlushOp{std::move(done)}); }

void Journal::lookup(std::string id, LookupHandler done) {
  impl_->push(LookupOp{std::move(id), std::move(done)});
}

void Journal::list(JournalListOptions what, ListHandler done) {
  impl_->push(ListOp{what, std::move(done)});
}

const std::string& Journal::path() const noexcept { return impl_->config.path; }

const std::string& Journal::owner() const noexcept { return impl_->owner; }

JournalStats Journal::stats() const {
  JournalStats s;
  {
    std::lock_guard lock(impl_->stats_mu);
    s = impl_->stats;
  }
  std::lock_guard lock(impl_->mu);
  s.queued = impl_->queue.size();
  return s;
}

}  // namespace laneq
