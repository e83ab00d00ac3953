#pragma once
// Blocking look-ups on a Journal for tests: each waits for its completion (which runs on the
// journal's writer thread) and checks that it reported no error.
#include <future>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include <catch2/catch.hpp>

#include "laneq/store/journal.hpp"

namespace laneq::test {

inline std::vector<JournalRecord> list_wait(Journal& j, JournalListOptions what = {}) {
  std::promise<std::vector<JournalRecord>> p;
  j.list(what, [&p](std::error_code ec, std::vector<JournalRecord> r) {
    CHECK_FALSE(ec);
    p.set_value(std::move(r));
  });
  return p.get_future().get();
}

inline std::optional<JournalRecord> lookup_wait(Journal& j, std::string id) {
  std::promise<std::optional<JournalRecord>> p;
  j.lookup(std::move(id), [&p](std::error_code ec, std::optional<JournalRecord> r) {
    CHECK_FALSE(ec);
    p.set_value(std::move(r));
  });
  return p.get_future().get();
}

inline std::vector<std::string> ids_of(const std::vector<JournalRecord>& rs) {
  std::vector<std::string> ids;
  for (const auto& r : rs) ids.push_back(r.id);
  return ids;
}

}  // namespace laneq::test
