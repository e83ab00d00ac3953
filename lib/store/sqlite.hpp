#pragma once
// A tiny RAII layer over the SQLite C API for the journal: a connection and prepared statements.
// Internal (lib/), not installed. Text binds are SQLITE_STATIC: the caller keeps the bytes alive
// until the statement is reset.
#include <sqlite3.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace laneq::store::sqlite {

class Db {
 public:
  Db() noexcept = default;
  explicit Db(sqlite3* db) noexcept : db_(db) {}
  Db(Db&& o) noexcept : db_(std::exchange(o.db_, nullptr)) {}
  Db& operator=(Db&& o) noexcept {
    std::swap(db_, o.db_);
    return *this;
  }
  ~Db() { sqlite3_close_v2(db_); }  // NULL is a no-op

  sqlite3* get() const noexcept { return db_; }
  std::string errmsg() const { return sqlite3_errmsg(db_); }
  // Runs SQL without results; returns the SQLite result code.
  int exec(const char* sql) noexcept { return sqlite3_exec(db_, sql, nullptr, nullptr, nullptr); }

 private:
  sqlite3* db_ = nullptr;
};

class Stmt {
 public:
  Stmt() noexcept = default;
  Stmt(Stmt&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  Stmt& operator=(Stmt&& o) noexcept {
    std::swap(s_, o.s_);
    return *this;
  }
  ~Stmt() { sqlite3_finalize(s_); }

  // persistent: a statement kept for the connection's life (SQLITE_PREPARE_PERSISTENT).
  int prepare(sqlite3* db, std::string_view sql, bool persistent) noexcept {
    sqlite3_finalize(s_);
    s_ = nullptr;
    return sqlite3_prepare_v3(db, sql.data(), static_cast<int>(sql.size()),
                              persistent ? SQLITE_PREPARE_PERSISTENT : 0, &s_, nullptr);
  }

  // Binds are 1-based, as in SQL. A bind that fails (a text above SQLite's length limit) would
  // leave its parameter NULL, which INSERT OR IGNORE reads as a duplicate and a nullable column
  // stores: the next step() fails with its code instead.
  void bind(int i, std::int64_t v) noexcept { note(sqlite3_bind_int64(s_, i, v)); }
  void bind(int i, std::string_view v) noexcept {  // never NULL: "" stays ""
    if (v.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()))
      return note(SQLITE_TOOBIG);  // an int length would wrap (a prefix would be stored)
    note(sqlite3_bind_text(s_, i, v.data() ? v.data() : "", static_cast<int>(v.size()),
                           SQLITE_STATIC));
  }
  void bind_null(int i) noexcept { note(sqlite3_bind_null(s_, i)); }
  void bind(int i, const std::optional<std::int64_t>& v) noexcept {
    if (v)
      bind(i, *v);
    else
      bind_null(i);
  }

  int step() noexcept { return bind_rc_ != SQLITE_OK ? bind_rc_ : sqlite3_step(s_); }
  // The failed bind step() reported, or 0.
  int bind_error() const noexcept { return bind_rc_; }
  // Ends a run: resets the statement so it can run again and releases its read of the table.
  void reset() noexcept {
    sqlite3_reset(s_);
    bind_rc_ = SQLITE_OK;
  }

  // Columns are 0-based, as in the C API.
  std::int64_t int64(int c) const noexcept { return sqlite3_column_int64(s_, c); }
  bool is_null(int c) const noexcept { return sqlite3_column_type(s_, c) == SQLITE_NULL; }
  std::optional<std::int64_t> opt_int64(int c) const noexcept {
    if (is_null(c)) return std::nullopt;
    return int64(c);
  }
  std::string_view text(int c) const noexcept {
    const auto* p = sqlite3_column_text(s_, c);
    return p ? std::string_view(reinterpret_cast<const char*>(p),
                                static_cast<std::size_t>(sqlite3_column_bytes(s_, c)))
             : std::string_view();
  }

 private:
  void note(int rc) noexcept {
    if (rc != SQLITE_OK && bind_rc_ == SQLITE_OK) bind_rc_ = rc;
  }
  sqlite3_stmt* s_ = nullptr;
  int bind_rc_ = SQLITE_OK;
};

}  // namespace laneq::store::sqlite
