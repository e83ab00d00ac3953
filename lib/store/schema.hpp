#pragma once
// The journal's schema, versioned by PRAGMA user_version: migrations[v] takes a journal from
// version v to v + 1; open() applies the missing ones in order, in one transaction.
// Internal (lib/). Never edit a released migration: append a new one.
#include <iterator>

namespace laneq::store {

inline constexpr const char* migrations[] = {
    // v1: the requests table; a partial index keeps the open rows (recovery) cheap to find.
    R"sql(
CREATE TABLE requests(
  row            INTEGER PRIMARY KEY AUTOINCREMENT,  -- admission order, never reused
  id             TEXT NOT NULL UNIQUE,
  state          INTEGER NOT NULL DEFAULT 0,
  priority       INTEGER NOT NULL,
  client         TEXT NOT NULL DEFAULT '',
  cost           INTEGER NOT NULL DEFAULT 1,
  timeout_ms     INTEGER,
  request        TEXT NOT NULL,                      -- JSON (store/record_json.hpp)
  enqueued_at    INTEGER NOT NULL,                   -- ms since the Unix epoch
  deadline       INTEGER,
  attempts       INTEGER NOT NULL DEFAULT 0,
  finished_at    INTEGER,
  error_category TEXT,
  error_value    INTEGER NOT NULL DEFAULT 0,
  error_message  TEXT NOT NULL DEFAULT '',
  response       TEXT                                -- JSON
);
CREATE INDEX requests_open ON requests(state) WHERE state < 2;
)sql",
    // v2: leases (which process and worker runs an in_flight row, until when), and an index on
    // finished rows by finish time so retention deletes without scanning the table.
    R"sql(
ALTER TABLE requests ADD COLUMN lease_owner TEXT NOT NULL DEFAULT '';
ALTER TABLE requests ADD COLUMN lease_worker INTEGER NOT NULL DEFAULT -1;
ALTER TABLE requests ADD COLUMN lease_until INTEGER;
CREATE INDEX requests_finished ON requests(finished_at) WHERE state >= 2;
)sql",
    // v3: how many runs ended while the row was in flight (open() counts them), so a request
    // that ends the process every time it runs can be given up instead of run for ever.
    R"sql(
ALTER TABLE requests ADD COLUMN interrupted INTEGER NOT NULL DEFAULT 0;
)sql",
};

inline constexpr int schema_version = static_cast<int>(std::size(migrations));

}  // namespace laneq::store
