#pragma once
// Raw SQLite access for tests that build old or foreign journal files, or sabotage one (never
// while a Journal holds the file).
#include <sqlite3.h>

#include <string>

#include <catch2/catch.hpp>

namespace laneq::test {

inline void sql(const std::string& path, const std::string& statements) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  char* err = nullptr;
  const int rc = sqlite3_exec(db, statements.c_str(), nullptr, nullptr, &err);
  const std::string msg = err ? err : "";
  sqlite3_free(err);
  sqlite3_close(db);
  INFO(msg);
  REQUIRE(rc == SQLITE_OK);
}

}  // namespace laneq::test
