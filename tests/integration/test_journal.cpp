// The durable journal on real SQLite files, each test in a fresh temporary directory.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <limits>
#include <filesystem>
#include <functional>
#include <fstream>
#include <future>
#include <iterator>
#include <mutex>
#include <random>
#include <semaphore>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "laneq/laneq.hpp"
#include "store/record_json.hpp"
#include "store/schema.hpp"
#include "store/sqlite.hpp"
#include "support/child_guard.hpp"
#include "support/journal_wait.hpp"
#include "support/raw_sql.hpp"
#include "support/temp_dir.hpp"

using namespace std::chrono_literals;
using laneq::errc;
using laneq::Journal;
using laneq::JournalRecord;
using laneq::JournalState;
using laneq::test::ids_of;
using laneq::test::list_wait;
using laneq::test::lookup_wait;
using laneq::test::sql;
using laneq::test::TempDir;
using sys_clock = std::chrono::system_clock;
namespace fs = std::filesystem;

namespace {

sys_clock::time_point at_ms(std::int64_t ms) { return sys_clock::time_point(std::chrono::milliseconds(ms)); }

constexpr std::int64_t t0_ms = 1'700'000'000'123;

JournalRecord make_record(std::string id, std::string text = "hello") {
  JournalRecord r;
  r.id = std::move(id);
  r.priority = 1;
  r.client = "tenant-7";
  r.cost = 3;
  r.timeout = 30s;
  r.request = {.model = "gpt-x",
               .messages = {{"system", "be brief"}, {"user", std::move(text)}},
               .max_tokens = 64,
               .stream = true,
               .extra = {{"temperature", 0.5}, {"tags", {"a", "b"}}}};
  r.enqueued_at = at_ms(t0_ms);
  r.deadline = at_ms(t0_ms + 30'000);
  r.attempts = 0;
  return r;
}

laneq::Response make_response() {
  laneq::Response r;
  r.status = 200;
  r.text = "Grüße ✓ \"quoted\"\n";
  r.usage = {.input_tokens = 12, .output_tokens = 34};
  r.finish_reason = "stop";
  r.headers = {{"x-ratelimit-remaining-requests", "59"}, {"Set-Cookie", "a"}, {"set-cookie", "b"}};
  r.raw = {{"id", "chatcmpl-1"}, {"choices", {{{"index", 0}}}}};
  r.error_type = "";
  r.error_message = "";
  r.attempts = 2;
  r.queue_wait = 1234567ns;
  r.service_time = 7654321ns;
  return r;
}

void check_same(const laneq::Request& a, const laneq::Request& b) {
  CHECK(a.model == b.model);
  REQUIRE(a.messages.size() == b.messages.size());
  for (std::size_t i = 0; i < a.messages.size(); ++i) {
    CHECK(a.messages[i].role == b.messages[i].role);
    CHECK(a.messages[i].content == b.messages[i].content);
  }
  CHECK(a.max_tokens == b.max_tokens);
  CHECK(a.stream == b.stream);
  CHECK(a.extra == b.extra);
}

void check_same(const laneq::Response& a, const laneq::Response& b) {
  CHECK(a.status == b.status);
  CHECK(a.text == b.text);
  CHECK(a.usage.input_tokens == b.usage.input_tokens);
  CHECK(a.usage.output_tokens == b.usage.output_tokens);
  CHECK(a.finish_reason == b.finish_reason);
  CHECK(a.headers == b.headers);
  CHECK(a.raw == b.raw);
  CHECK(a.error_type == b.error_type);
  CHECK(a.error_message == b.error_message);
  CHECK(a.attempts == b.attempts);
  CHECK(a.queue_wait == b.queue_wait);
  CHECK(a.service_time == b.service_time);
}

// What append() stores of a record.
void check_same_admission(const JournalRecord& a, const JournalRecord& b) {
  CHECK(a.id == b.id);
  CHECK(a.priority == b.priority);
  CHECK(a.client == b.client);
  CHECK(a.cost == b.cost);
  CHECK(a.timeout == b.timeout);
  check_same(a.request, b.request);
  CHECK(a.enqueued_at == b.enqueued_at);
  CHECK(a.deadline == b.deadline);
  CHECK(a.attempts == b.attempts);
}

// Blocking helpers: each waits for its completion (which runs on the writer thread).
std::pair<std::error_code, std::int64_t> append_wait(Journal& j, JournalRecord r) {
  std::promise<std::pair<std::error_code, std::int64_t>> p;
  j.append(std::move(r), [&p](std::error_code ec, std::int64_t row) { p.set_value({ec, row}); });
  return p.get_future().get();
}

std::int64_t append_ok(Journal& j, JournalRecord r) {
  auto [ec, row] = append_wait(j, std::move(r));
  REQUIRE_FALSE(ec);
  REQUIRE(row > 0);
  return row;
}

std::error_code flush_wait(Journal& j) {
  std::promise<std::error_code> p;
  j.flush([&p](std::error_code ec) { p.set_value(ec); });
  return p.get_future().get();
}

std::error_code finish_wait(Journal& j, std::int64_t row, JournalState state,
                            std::uint32_t attempts, std::error_code error = {},
                            std::string message = "", const laneq::Response* resp = nullptr) {
  std::promise<std::error_code> p;
  j.finish(row, state, attempts, error, std::move(message), resp,
           [&p](std::error_code ec) { p.set_value(ec); });
  return p.get_future().get();
}

// The message of the std::system_error(errc::journal) that opening `path` throws.
std::string open_error(const std::string& path) {
  try {
    Journal::open({path});
  } catch (const std::system_error& e) {
    CHECK(e.code() == errc::journal);
    return e.what();
  }
  FAIL("Journal::open did not throw");
  return {};
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

std::string request_json(const laneq::Request& r) {
  std::string out;
  laneq::store::append_json(out, r);
  return out;
}

// A settable clock for finish() stamps and retention.
struct ManualClock {
  std::shared_ptr<std::atomic<std::int64_t>> ms = std::make_shared<std::atomic<std::int64_t>>(t0_ms);
  std::function<sys_clock::time_point()> fn() const {
    return [ms = ms] { return at_ms(ms->load()); };
  }
  void set(std::int64_t v) const { ms->store(v); }
};


void write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t k = ::write(fd, text.data(), text.size());
    if (k <= 0) return;
    text.remove_prefix(static_cast<std::size_t>(k));
  }
}

// A forked child process that runs body(fd) and exits, never returning into Catch2; what it
// writes to fd, the parent reads. The body catches its own exceptions. Fork while no Journal
// (no writer thread) is open in the parent.
class Child {
 public:
  template <class Body>
  explicit Child(Body body) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      laneq::test::guard_child(parent);
      ::close(fds[0]);
      body(fds[1]);
      ::_exit(0);
    }
    ::close(fds[1]);
    fd_ = fds[0];
  }
  ~Child() {
    ::close(fd_);
    if (pid_ > 0) wait();
  }

  // Reads what the child writes until it closes the pipe or `enough(text so far)`.
  std::string& read(const std::function<bool(const std::string&)>& enough = nullptr) {
    char buf[4096];
    while (!(enough && enough(out_))) {
      const ssize_t k = ::read(fd_, buf, sizeof buf);
      if (k <= 0) break;
      out_.append(buf, static_cast<std::size_t>(k));
    }
    return out_;
  }
  void kill() const { ::kill(pid_, SIGKILL); }
  int wait() {  // the exit status
    int status = 0;
    ::waitpid(std::exchange(pid_, 0), &status, 0);
    return status;
  }

 private:
  pid_t pid_ = 0;
  int fd_ = -1;
  std::string out_;
};

}  // namespace

TEST_CASE("appended requests come back after a reopen in admission order with every field",
          "[journal]") {
  TempDir dir;
  const auto path = dir.file("j.db");
  std::vector<JournalRecord> sent;
  for (int i = 0; i < 3; ++i) sent.push_back(make_record("req-" + std::to_string(i)));
  sent[1].timeout.reset();
  sent[1].deadline.reset();
  sent[1].request.extra = nullptr;
  sent[1].request.stream = false;
  sent[2].request.messages[1].content = "ünïcödé \"quotes\" \\ and a newline\n";
  sent[2].attempts = 4;
  std::vector<std::int64_t> rows;
  {
    auto j = Journal::open({path});
    CHECK(j->take_recovered().empty());
    for (const auto& r : sent) rows.push_back(append_ok(*j, r));
    CHECK(std::is_sorted(rows.begin(), rows.end()));
    CHECK(j->stats().appended == 3);
  }
  auto j = Journal::open({path});
  const auto back = j->take_recovered();
  REQUIRE(back.size() == 3);
  for (std::size_t i = 0; i < back.size(); ++i) {
    check_same_admission(back[i], sent[i]);
    CHECK(back[i].row == rows[i]);
    CHECK(back[i].state == JournalState::pending);
    CHECK_FALSE(back[i].finished_at);
    CHECK_FALSE(back[i].response);
  }
  CHECK(j->take_recovered().empty());  // once
  CHECK(j->stats().recovered_pending == 3);
  CHECK(j->stats().recovered_in_flight == 0);
}

TEST_CASE("a request or response holding a discarded JSON value is stored as null - the journal "
          "opens again",
          "[journal]") {
  TempDir dir;
  const auto path = dir.file("j.db");
  {
    auto j = Journal::open({path});
    auto rec = make_record("bad-extra");
    rec.request.extra = nlohmann::json::parse("{not json", nullptr, false);
    REQUIRE(rec.request.extra.is_discarded());
    append_ok(*j, rec);
    laneq::Response resp;
    resp.raw = nlohmann::json::parse("neither", nullptr, false);
    const auto row = append_ok(*j, make_record("bad-raw"));
    CHECK_FALSE(finish_wait(*j, row, JournalState::succeeded, 1, {}, "", &resp));
    // Inside an object or an array too, and after a NaN (which dumps as null)
    auto nested = make_record("nested-extra");
    nested.request.extra = {{"n", std::numeric_limits<double>::quiet_NaN()},
                            {"schema", nlohmann::json::parse("{x", nullptr, false)}};
    append_ok(*j, nested);
    laneq::Response nested_raw;
    nested_raw.raw = {{"choices", nlohmann::json::array({nlohmann::json::parse("[", nullptr,
                                                                               false)})}};
    const auto row2 = append_ok(*j, make_record("nested-raw"));
    CHECK_FALSE(finish_wait(*j, row2, JournalState::succeeded, 1, {}, "", &nested_raw));
  }
  auto j = Journal::open({path});  // threw "row cannot be read" before
  const auto back = j->take_recovered();
  REQUIRE(back.size() == 2);
  CHECK(back[0].request.extra.is_null());
  CHECK(back[1].request.extra.is_null());
  for (const auto* id : {"bad-raw", "nested-raw"}) {
    const auto finished = lookup_wait(*j, id);
    REQUIRE(finished);
    REQUIRE(finished->response);
    CHECK(finished->response->raw.is_null());
  }
}

TEST_CASE("an in-flight request is recovered as pending with its attempts kept and its lease void",
          "[journal]") {
  TempDir dir;
  const auto path = dir.file("j.db");
  {
    auto j = Journal::open({path});
    const auto row = append_ok(*j, make_record("a"));
    append_ok(*j, make_record("b"));
    j->mark_in_flight(row, 3, at_ms(t0_ms + 60'000), 2);
    const auto leased = lookup_wait(*j, "a");
    REQUIRE(leased);
    CHECK(leased->state == JournalState::in_flight);
    CHECK(leased->lease_owner == j->owner());
    CHECK(leased->lease_worker == 3);
    CHECK(leased->lease_until == at_ms(t0_ms + 60'000));
    CHECK(leased->attempts == 2);
  }
  auto j = Journal::open({path});
  const auto back = j->take_recovered();
  REQUIRE(ids_of(back) == std::vector<std::string>{"a", "b"});
  CHECK(back[0].state == JournalState::pending);
  CHECK(back[0].attempts == 2);
  CHECK(back[0].lease_owner.empty());
  CHECK(back[0].lease_worker == -1);
  CHECK_FALSE(back[0].lease_until);
  CHECK(j->stats().recovered_in_flight == 1);
  CHECK(j->stats().recovered_pending == 1);
  CHECK(lookup_wait(*j, "a")->state == JournalState::pending);  // also in the file
}

TEST_CASE("finished requests are not recovered and keep their outcome", "[journal]") {
  TempDir dir;
  const auto path = dir.file("j.db");
  ManualClock clock;
  const auto response = make_response();
  {
    auto j = Journal::open({.path = path, .clock = clock.fn()});
    const auto ok_row = append_ok(*j, make_record("ok"));
    const auto bad_row = append_ok(*j, make_record("bad"));
    const auto sys_row = append_ok(*j, make_record("sys"));
    append_ok(*j, make_record("open"));
    j->mark_in_flight(ok_row, 0, at_ms(t0_ms + 1000), 1);
    clock.set(t0_ms + 5000);
    CHECK_FALSE(finish_wait(*j, ok_row, JournalState::succeeded, 1, {}, "", &response));
    CHECK_FALSE(finish_wait(*j, bad_row, JournalState::failed, 3, errc::rate_limited, "429 twice"));
    CHECK_FALSE(finish_wait(*j, sys_row, JournalState::expired, 0,
                            std::make_error_code(std::errc::timed_out), "deadline"));
    CHECK(j->stats().finished == 3);
  }
  auto j = Journal::open({.path = path, .clock = clock.fn()});
  CHECK(ids_of(j->take_recovered()) == std::vector<std::string>{"open"});

  const auto ok = lookup_wait(*j, "ok");
  REQUIRE(ok);
  CHECK(ok->state == JournalState::succeeded);
  CHECK(ok->attempts == 1);
  CHECK(ok->finished_at == at_ms(t0_ms + 5000));
  CHECK_FALSE(ok->error);
  REQUIRE(ok->response);
  check_same(*ok->response, response);

  const auto bad = lookup_wait(*j, "bad");
  REQUIRE(bad);
  CHECK(bad->state == JournalState::failed);
  CHECK(bad->attempts == 3);
  CHECK(bad->error == errc::rate_limited);
  CHECK(bad->error_message == "429 twice");
  CHECK_FALSE(bad->response);

  const auto sys = lookup_wait(*j, "sys");
  REQUIRE(sys);
  CHECK(sys->state == JournalState::expired);
  CHECK(sys->error == std::errc::timed_out);
}

TEST_CASE("lookup finds a request by id and list filters by state in row order with paging",
          "[journal]") {
  TempDir dir;
  auto j = Journal::open({dir.file("j.db")});
  std::vector<std::int64_t> rows;
  for (int i = 0; i < 6; ++i) rows.push_back(append_ok(*j, make_record("r" + std::to_string(i))));
  j->mark_in_flight(rows[1], 0, at_ms(t0_ms), 1);
  CHECK_FALSE(finish_wait(*j, rows[2], JournalState::succeeded, 1));
  CHECK_FALSE(finish_wait(*j, rows[4], JournalState::cancelled, 0, errc::cancelled));

  CHECK_FALSE(lookup_wait(*j, "nope"));
  const auto r3 = lookup_wait(*j, "r3");
  REQUIRE(r3);
  CHECK(r3->row == rows[3]);
  check_same_admission(*r3, make_record("r3"));

  CHECK(ids_of(list_wait(*j)) == std::vector<std::string>{"r0", "r1", "r2", "r3", "r4", "r5"});
  CHECK(ids_of(list_wait(*j, {.states = laneq::JournalStateSet::finished()})) ==
        std::vector<std::string>{"r2", "r4"});
  CHECK(ids_of(list_wait(*j, {.states = {JournalState::in_flight}})) ==
        std::vector<std::string>{"r1"});
  CHECK(ids_of(list_wait(*j, {.states = laneq::JournalStateSet::open()})) ==
        std::vector<std::string>{"r0", "r1", "r3", "r5"});
  CHECK(ids_of(list_wait(*j, {.after_row = rows[1], .limit = 2})) ==
        std::vector<std::string>{"r2", "r3"});
}

TEST_CASE("appending an id that is already in the journal fails with duplicate_id", "[journal]") {
  TempDir dir;
  auto j = Journal::open({dir.file("j.db")});
  const auto row = append_ok(*j, make_record("same", "first"));
  auto [ec, dup_row] = append_wait(*j, make_record("same", "second"));
  CHECK(ec == errc::duplicate_id);
  CHECK(dup_row == 0);

  // Twice in one batch: queued back to back, the second loses.
  std::promise<std::error_code> first, second;
  j->append(make_record("twin"), [&](std::error_code e, std::int64_t) { first.set_value(e); });
  j->append(make_record("twin"), [&](std::error_code e, std::int64_t) { second.set_value(e); });
  CHECK_FALSE(first.get_future().get());
  CHECK(second.get_future().get() == errc::duplicate_id);

  const auto kept = lookup_wait(*j, "same");
  REQUIRE(kept);
  CHECK(kept->row == row);
  CHECK(kept->request.messages[1].content == "first");
  CHECK(j->stats().duplicates == 2);
  CHECK(j->stats().write_errors == 0);
}

TEST_CASE("appends from 4 threads are group-committed and each completion runs exactly once",
          "[journal]") {
  TempDir dir;
  const auto path = dir.file("j.db");
  constexpr int threads = 4, per_thread = 2500, total = threads * per_thread;
  std::vector<std::atomic<int>> calls(total);
  std::vector<std::int64_t> rows(total, 0);  // each slot written by its own completion only
  std::atomic<int> errors{0};
  {
    auto j = Journal::open({.path = path, .max_batch = 512});
    std::vector<std::thread> producers;
    for (int t = 0; t < threads; ++t)
      producers.emplace_back([&, t] {
        for (int i = 0; i < per_thread; ++i) {
          const int k = t * per_thread + i;
          j->append(make_record("t" + std::to_string(k)), [&, k](std::error_code ec, std::int64_t row) {
            if (ec) ++errors;
            rows[static_cast<std::size_t>(k)] = row;
            ++calls[static_cast<std::size_t>(k)];
          });
        }
      });
    for (auto& p : producers) p.join();
    REQUIRE_FALSE(flush_wait(*j));
    const auto s = j->stats();
    CHECK(s.appended == total);
    CHECK(s.transactions < static_cast<std::uint64_t>(total));
    CHECK(s.largest_batch > 1);
    CHECK(s.largest_batch <= 512);
    CHECK(s.queued == 0);
  }
  CHECK(errors == 0);
  for (const auto& c : calls) REQUIRE(c == 1);
  for (int t = 0; t < threads; ++t)  // one thread's appends keep their order
    CHECK(std::is_sorted(rows.begin() + t * per_thread, rows.begin() + (t + 1) * per_thread));
  CHECK(std::set<std::int64_t>(rows.begin(), rows.end()).size() == total);

  auto j = Journal::open({path});
  const auto back = j->take_recovered();
  REQUIRE(back.size() == total);
  std::set<std::string> ids;
  for (const auto& r : back) ids.insert(r.id);
  CHECK(ids.size() == total);
}

TEST_CASE("retention deletes finished rows older than the maximum age and never open ones",
          "[journal][retention]") {
  TempDir dir;
  const auto path = dir.file("j.db");
  ManualClock clock;
  {
    auto j = Journal::open({.path = path, .clock = clock.fn()});
    for (int i = 0; i < 4; ++i) append_ok(*j, make_record("r" + std::to_string(i)));
    j->mark_in_flight(4, 0, at_ms(t0_ms), 1);  // open, and old: kept
    CHECK_FALSE(finish_wait(*j, 1, JournalState::succeeded, 1));
    clock.set(t0_ms + 30 * 60'000);
    CHECK_FALSE(finish_wait(*j, 2, JournalState::failed, 1));
  }
  clock.set(t0_ms + 65 * 60'000);  // r0 finished 65 min ago, r1 35 min ago
  auto j = Journal::open({.path = path, .retention_max_age = 1h, .clock = clock.fn()});
  CHECK(j->stats().retention_deleted == 1);
  CHECK(ids_of(list_wait(*j)) == std::vector<std::string>{"r1", "r2", "r3"});
}

TEST_CASE("a clock that throws is replaced by the system clock for that reading: finish stamps "
          "and completes, and retention by age runs",
          "[journal][retention]") {
  TempDir dir;
  const auto path = dir.file("j.db");
  const auto throwing = []() -> sys_clock::time_point { throw std::runtime_error("no time"); };
  const auto before = sys_clock::now() - 1s;  // stored in whole milliseconds
  {
    auto j = Journal::open({.path = path, .retention_max_age = 1h, .clock = throwing});
    append_ok(*j, make_record("r0"));
    CHECK_FALSE(finish_wait(*j, 1, JournalState::succeeded, 1));
  }
  auto j = Journal::open({.path = path, .retention_max_age = 1h, .clock = throwing});
  const auto rows = list_wait(*j);  // finished just now: kept by the 1 h retention
  REQUIRE(rows.size() == 1);
  REQUIRE(rows[0].finished_at);
  CHECK(*rows[0].finished_at >= before);
  CHECK(*rows[0].finished_at <= sys_clock::now() + 1s);
}

TEST_CASE("retention set to keep for ever with the type's maximum keeps every row",
          "[journal][retention]") {
  TempDir dir;
  const auto path = dir.file("j.db");
  {
    auto j = Journal::open({.path = path});
    for (int i = 0; i < 3; ++i) append_ok(*j, make_record("r" + std::to_string(i)));
    for (int row : {1, 2}) CHECK_FALSE(finish_wait(*j, row, JournalState::succeeded, 1));
  }
  for (const laneq::JournalConfig& cfg :
       {laneq::JournalConfig{.path = path, .retention_max_age = std::chrono::milliseconds::max()},
        laneq::JournalConfig{.path = path, .retention_keep_last = SIZE_MAX}}) {
    auto j = Journal::open(cfg);
    CHECK(j->stats().retention_deleted == 0);
    CHECK(list_wait(*j).size() == 3);
  }
}

TEST_CASE("a retention pass that fails undoes only its own deletes: the journal opens and keeps "
          "working, and counts the failure",
          "[journal][retention]") {
  TempDir dir;
  const auto path = dir.file("j.db");
  ManualClock clock;
  {
    auto j = Journal::open({.path = path, .clock = clock.fn()});
    for (int i = 0; i < 3; ++i) append_ok(*j, make_record("r" + std::to_string(i)));
    for (int row : {1, 2}) CHECK_FALSE(finish_wait(*j, row, JournalState::succeeded, 1));
  }
  // every delete fails, as it may when the disk is too full for the WAL
  sql(path, "CREATE TRIGGER refuse BEFORE DELETE ON requests BEGIN "
            "SELECT RAISE(ABORT, 'deletes refused'); END;");
  clock.set(t0_ms + 2 * 60 * 60'000);
  auto j = Journal::open({.path = path, .retention_max_age = 1h, .clock = clock.fn()});
  const auto stats = j->stats();
  CHECK(stats.retention_deleted == 0);
  CHECK(stats.write_errors == 1);
  CHECK_THAT(stats.last_error, Catch::Contains("deletes refused"));
  CHECK(list_wait(*j).size() == 3);
  CHECK(j->take_recovered().size() == 1);  // r2, still pending, recovered as usual
  append_ok(*j, make_record("r3"));       // and it keeps working
  CHECK(list_wait(*j).size() == 4);
}

TEST_CASE("retention keeps only the newest finished rows when keep_last is set",
          "[journal][retention]") {
  TempDir dir;
  const auto path = dir.file("j.db");
  ManualClock clock;
  {
    auto j = Journal::open({.path = path, .clock = clock.fn()});
    for (int i = 0; i < 6; ++i) append_ok(*j, make_record("r" + std::to_string(i)));
    // finish in the order 5, 1, 3, 0, 2 (r4 stays pending), one second apart
    for (int row : {6, 2, 4, 1, 3}) {
      clock.set(clock.ms->load() + 1000);
      CHECK_FALSE(finish_wait(*j, row, JournalState::succeeded, 1));
    }
  }
  auto j = Journal::open({.path = path, .retention_keep_last = 2, .clock = clock.fn()});
  CHECK(j->stats().retention_deleted == 3);
  CHECK(ids_of(list_wait(*j)) == std::vector<std::string>{"r0", "r2", "r4"});
}

TEST_CASE("retention also runs on the writer thread after every 1000 finished rows",
          "[journal][retention]") {
  TempDir dir;
  auto j = Journal::open({.path = dir.file("j.db"), .retention_keep_last = 10});
  constexpr int n = 1200;
  std::atomic<int> failures{0};
  for (int i = 0; i < n; ++i)
    j->append(make_record("r" + std::to_string(i)), [&](std::error_code ec, std::int64_t row) {
      if (ec) ++failures;
      // a completion may call the journal again
      j->finish(row, JournalState::succeeded, 1, {}, "", nullptr,
                [&](std::error_code e) { failures += e ? 1 : 0; });
    });
  REQUIRE_FALSE(flush_wait(*j));  // the finishes were queued before this flush's batch ran
  REQUIRE_FALSE(flush_wait(*j));
  CHECK(failures == 0);
  const auto s = j->stats();
  CHECK(s.finished == n);
  CHECK(s.retention_passes >= 2);  // at open, then once 1000 rows finished
  CHECK(s.retention_deleted >= 990);
  const auto left = list_wait(*j);
  CHECK(left.size() == n - s.retention_deleted);
  CHECK(left.back().id == "r1199");  // the newest are kept
}

TEST_CASE("flush completes after everything queued before it, in call order", "[journal]") {
  TempDir dir;
  auto j = Journal::open({dir.file("j.db")});
  std::mutex mu;
  std::vector<std::string> order;
  auto note = [&](std::string what) {
    std::lock_guard lock(mu);
    order.push_back(std::move(what));
  };
  std::promise<void> done;
  j->append(make_record("a"), [&](std::error_code, std::int64_t) { note("append a"); });
  j->finish(1, JournalState::succeeded, 1, {}, "", nullptr, [&](std::error_code) { note("finish a"); });
  j->lookup("a", [&](std::error_code, std::optional<JournalRecord> r) {
    note(r && r->state == JournalState::succeeded ? "lookup a: succeeded" : "lookup a: ?");
  });
  j->flush([&](std::error_code) { note("flush 1"); });
  j->append(make_record("b"), [&](std::error_code, std::int64_t) { note("append b"); });
  j->flush([&](std::error_code) {
    note("flush 2");
    done.set_value();
  });
  done.get_future().get();
  CHECK(order == std::vector<std::string>{"append a", "finish a", "lookup a: succeeded", "flush 1",
                                          "append b", "flush 2"});
}

TEST_CASE("flush reports a write queued before it that was not committed, once", "[journal]") {
  TempDir dir;
  auto j = Journal::open({dir.file("j.db")});
  const auto row = append_ok(*j, make_record("a"));
  CHECK_FALSE(flush_wait(*j));
  // mark_in_flight and release have no completion: only a flush can say they failed
  j->mark_in_flight(row + 1000, 1, at_ms(t0_ms), 1);  // no such row
  CHECK(flush_wait(*j) == errc::journal);
  CHECK_FALSE(flush_wait(*j));  // nothing failed since the last flush
  // the same when the failed write is in an earlier transaction than the flush
  auto small = Journal::open({.path = dir.file("k.db"), .max_batch = 1});
  small->mark_in_flight(1000, 1, at_ms(t0_ms), 1);
  CHECK(flush_wait(*small) == errc::journal);
  CHECK_FALSE(flush_wait(*small));
}

TEST_CASE("a batch rolled back by a failed write fails its flush, and the next flush has "
          "nothing lost to report",
          "[journal][errors]") {
  TempDir dir;
  const auto path = dir.file("j.db");
  Journal::open({path});  // the schema
  // an outcome's write rolls back the whole transaction (as SQLITE_FULL may)
  sql(path, "CREATE TRIGGER rb BEFORE UPDATE OF state ON requests WHEN NEW.state >= 2 "
            "BEGIN SELECT RAISE(ROLLBACK, 'disk full'); END;");
  auto j = Journal::open({path});
  const auto row = append_ok(*j, make_record("a"));
  std::promise<std::error_code> first;
  // Queued from a completion, on the writer thread: the finish and the flush are one batch.
  j->flush([&](std::error_code) {
    j->finish(row, JournalState::succeeded, 1, {}, "", nullptr, nullptr);
    j->flush([&](std::error_code ec) { first.set_value(ec); });
  });
  CHECK(first.get_future().get() == errc::journal);
  CHECK_FALSE(flush_wait(*j));
}

TEST_CASE("the destructor commits queued work and runs every completion", "[journal]") {
  TempDir dir;
  const auto path = dir.file("j.db");
  constexpr int n = 3000;
  std::atomic<int> ok{0}, failed{0};
  {
    auto j = Journal::open({path});
    for (int i = 0; i < n; ++i)
      j->append(make_record("r" + std::to_string(i)),
                [&](std::error_code ec, std::int64_t) { ++(ec ? failed : ok); });
  }  // no flush: the destructor drains
  CHECK(ok == n);
  CHECK(failed == 0);
  CHECK(Journal::open({path})->take_recovered().size() == n);
}

TEST_CASE("a completion may drop the last reference to the journal", "[journal]") {
  TempDir dir;
  auto j = Journal::open({dir.file("j.db")});
  std::promise<std::error_code> p;
  j->append(make_record("a"), [keep = j, &p](std::error_code ec, std::int64_t) mutable {
    keep.reset();  // not the last one yet
    p.set_value(ec);
  });
  std::promise<void> gone;
  j->flush([keep = std::move(j), &gone](std::error_code) mutable {
    keep.reset();  // the last reference: ~Journal runs on the writer thread
    gone.set_value();
  });
  CHECK_FALSE(p.get_future().get());
  gone.get_future().get();
}

TEST_CASE("finishing a row that is not open fails with journal and counts a write error",
          "[journal]") {
  TempDir dir;
  auto j = Journal::open({dir.file("j.db")});
  const auto row = append_ok(*j, make_record("a"));
  CHECK_FALSE(finish_wait(*j, row, JournalState::succeeded, 1));
  CHECK(finish_wait(*j, row, JournalState::failed, 2) == errc::journal);
  CHECK(finish_wait(*j, 999, JournalState::failed, 2) == errc::journal);
  const auto s = j->stats();
  CHECK(s.write_errors == 2);
  CHECK(s.last_error.find("row 999") != std::string::npos);
  CHECK(lookup_wait(*j, "a")->state == JournalState::succeeded);  // the first outcome stays
  CHECK_THROWS_AS(j->finish(row, JournalState::in_flight, 1, {}, "", nullptr, nullptr),
                  std::invalid_argument);
}

TEST_CASE("release puts an in-flight row back to pending and keeps its attempts", "[journal]") {
  TempDir dir;
  auto j = Journal::open({dir.file("j.db")});
  const auto row = append_ok(*j, make_record("a"));
  j->mark_in_flight(row, 1, at_ms(t0_ms), 2);
  j->release(row);
  const auto r = lookup_wait(*j, "a");
  REQUIRE(r);
  CHECK(r->state == JournalState::pending);
  CHECK(r->attempts == 2);
  CHECK_FALSE(r->lease_until);
  CHECK(j->stats().released == 1);
}

TEST_CASE("an invalid journal config is rejected naming the field", "[journal][errors]") {
  TempDir dir;
  auto field_of = [](laneq::JournalConfig c) {
    try {
      Journal::open(std::move(c));
    } catch (const std::system_error& e) {
      CHECK(e.code() == errc::invalid_config);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(field_of({}), Catch::Contains("JournalConfig::path"));
  CHECK_THAT(field_of({.path = dir.file("j.db"), .max_batch = 0}),
             Catch::Contains("JournalConfig::max_batch"));
  CHECK_THAT(field_of({.path = dir.file("j.db"), .retention_max_age = -1ms}),
             Catch::Contains("JournalConfig::retention_max_age"));

  laneq::JournalConfig c{.path = "x.db", .max_batch = 7};
  c = "run.db";  // a path alone means the defaults
  CHECK(c.path == "run.db");
  CHECK(c.max_batch == 4096);
}

TEST_CASE("a second open of a journal that is open is refused as locked", "[journal][errors]") {
  TempDir dir;
  const auto path = dir.file("j.db");
  auto first = Journal::open({path});
  append_ok(*first, make_record("a"));
  const auto msg = open_error(path);
  CHECK_THAT(msg, Catch::Contains("is locked by another process"));
  CHECK_THAT(msg, Catch::Contains(path));
  append_ok(*first, make_record("b"));  // the owner is unaffected
  first.reset();
  CHECK(Journal::open({path})->take_recovered().size() == 2);
}

TEST_CASE("a journal under a path whose parent is not a directory cannot be created",
          "[journal][errors]") {
  TempDir dir;
  std::ofstream(dir.file("plain")) << "a file";
  const auto path = dir.file("plain") + "/j.db";
  const auto msg = open_error(path);
  CHECK_THAT(msg, Catch::Contains("cannot be opened or created"));
  CHECK_THAT(msg, Catch::Contains(path));
}

TEST_CASE("a read-only journal file or directory is refused with a clear error",
          "[journal][errors]") {
  // Root writes through permission bits, so when run as root the open is tried in a child
  // process that first becomes the unprivileged user `nobody`.
  TempDir dir;
  fs::permissions(dir.path(), fs::perms::all, fs::perm_options::replace);  // nobody may enter
  const auto ro_file = dir.file("ro.db");
  { Journal::open({ro_file}); }  // a valid journal
  ::chmod(ro_file.c_str(), 0444);
  fs::create_directory(dir.file("ro-dir"));
  ::chmod(dir.file("ro-dir").c_str(), 0555);
  const auto in_ro_dir = dir.file("ro-dir") + "/j.db";
  // a writable journal in a read-only directory: the WAL file cannot be created beside it
  fs::create_directory(dir.file("ro-dir2"));
  const auto writable_in_ro_dir = dir.file("ro-dir2") + "/j.db";
  { Journal::open({writable_in_ro_dir}); }
  ::chmod(writable_in_ro_dir.c_str(), 0666);
  ::chmod(dir.file("ro-dir2").c_str(), 0555);

  auto open_as_user = [](const std::string& path) -> std::string {
    Child child([&](int fd) {
      std::string out = "opened";
      if (::getuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) {
        out = "setuid failed";
      } else {
        try {
          Journal::open({path});
        } catch (const std::exception& e) {
          out = e.what();
        }
      }
      write_all(fd, out);
    });
    return child.read();
  };

  const auto file_msg = open_as_user(ro_file);
  CHECK_THAT(file_msg, Catch::Contains("cannot be written"));
  CHECK_THAT(file_msg, Catch::Contains(ro_file));
  const auto dir_msg = open_as_user(in_ro_dir);
  CHECK_THAT(dir_msg, Catch::Contains("cannot be opened or created"));
  CHECK_THAT(dir_msg, Catch::Contains(in_ro_dir));
  const auto wal_msg = open_as_user(writable_in_ro_dir);
  INFO(wal_msg);
  CHECK_THAT(wal_msg, Catch::Contains(writable_in_ro_dir));
  CHECK_THAT(wal_msg, Catch::Contains("cannot be written"));
}

TEST_CASE("a file of random bytes is refused as not a database and left untouched",
          "[journal][errors]") {
  TempDir dir;
  const auto path = dir.file("noise.db");
  std::string noise(64 * 1024, '\0');
  std::mt19937 rng(42);
  for (auto& c : noise) c = static_cast<char>(rng());
  std::ofstream(path, std::ios::binary) << noise;
  const auto msg = open_error(path);
  CHECK_THAT(msg, Catch::Contains("is not a SQLite database"));
  CHECK_THAT(msg, Catch::Contains(path));
  CHECK(read_file(path) == noise);
  CHECK(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()) == 1);
}

TEST_CASE("a journal with a newer schema version is refused and left untouched",
          "[journal][errors]") {
  TempDir dir;
  const auto path = dir.file("future.db");
  sql(path, "CREATE TABLE requests(x); PRAGMA user_version = 99;");
  const auto before = read_file(path);
  const auto msg = open_error(path);
  CHECK_THAT(msg, Catch::Contains("schema version 99, newer than this laneq supports"));
  CHECK(read_file(path) == before);
  // a negative version: some other program's database
  const auto other = dir.file("other.db");
  sql(other, "CREATE TABLE t(x); PRAGMA user_version = -1;");
  const auto other_before = read_file(other);
  CHECK_THAT(open_error(other), Catch::Contains("not a laneq journal"));
  CHECK(read_file(other) == other_before);
}

TEST_CASE("another program's database with schema version 0 is refused before any write and "
          "keeps its journal mode",
          "[journal][errors]") {
  TempDir dir;
  // One SQL text answer of a fresh connection (the C API directly, as another program would).
  auto answer = [](const std::string& path, const char* query) {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    REQUIRE(sqlite3_prepare_v2(db, query, -1, &st, nullptr) == SQLITE_OK);
    REQUIRE(sqlite3_step(st) == SQLITE_ROW);
    const auto* text = sqlite3_column_text(st, 0);
    std::string out = text ? reinterpret_cast<const char*>(text) : "";
    sqlite3_finalize(st);
    sqlite3_close(db);
    return out;
  };
  // `table`: some other table, or one that happens to be called like the journal's.
  for (const std::string table : {"notes", "requests"}) {
    INFO(table);
    const auto path = dir.file(table + ".db");
    {
      sqlite3* db = nullptr;
      REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
      const std::string create = "CREATE TABLE " + table + "(id INTEGER PRIMARY KEY, body TEXT);"
                                 "INSERT INTO " + table + "(body) VALUES('kept');";
      CHECK(sqlite3_exec(db, create.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
      sqlite3_close(db);
    }
    REQUIRE(answer(path, "PRAGMA user_version") == "0");
    REQUIRE(answer(path, "PRAGMA journal_mode") == "delete");
    const auto before = read_file(path);

    const auto msg = open_error(path);  // checks errc::journal
    CHECK_THAT(msg, Catch::Contains("not a laneq journal: " + path + " already has tables"));

    CHECK(answer(path, "PRAGMA journal_mode") == "delete");  // not switched to WAL
    CHECK(answer(path, "SELECT count(*) FROM sqlite_master") == "1");  // no laneq table or index
    CHECK(answer(path, "SELECT group_concat(name) FROM sqlite_master") == table);
    CHECK(answer(path, "PRAGMA user_version") == "0");
    CHECK(read_file(path) == before);
    CHECK_FALSE(fs::exists(path + "-wal"));
  }
  // An empty database (version 0, no tables) still becomes a journal.
  const auto empty = dir.file("empty.db");
  sql(empty, "PRAGMA user_version = 0;");
  CHECK(Journal::open({empty})->take_recovered().empty());
}

TEST_CASE("a version 1 journal is migrated to the current schema version and keeps its rows",
          "[journal]") {
  TempDir dir;
  const auto path = dir.file("v1.db");
  const std::string request = request_json(make_record("x").request);
  // A journal as the first schema left it: one pending and one in_flight row, one finished.
  sql(path, std::string(laneq::store::migrations[0]) +
                "PRAGMA user_version = 1;"
                "INSERT INTO requests(id, state, priority, client, request, enqueued_at, attempts)"
                " VALUES('p', 0, 5, 'c', '" + request + "', 1000, 0),"
                "       ('f', 1, 0, 'c', '" + request + "', 2000, 2);"
                "INSERT INTO requests(id, state, priority, request, enqueued_at, finished_at)"
                " VALUES('done', 2, 5, '" + request + "', 3000, 4000);");
  {
    auto j = Journal::open({path});
    const auto back = j->take_recovered();
    REQUIRE(ids_of(back) == std::vector<std::string>{"p", "f"});
    CHECK(back[1].attempts == 2);
    CHECK(back[1].priority == 0);
    CHECK(back[1].lease_worker == -1);
    check_same(back[0].request, make_record("x").request);
    const auto done = lookup_wait(*j, "done");
    REQUIRE(done);
    CHECK(done->finished_at == at_ms(4000));
    // the new columns work
    j->mark_in_flight(back[0].row, 5, at_ms(9000), 1);
    CHECK(lookup_wait(*j, "p")->lease_worker == 5);
  }
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(st) == SQLITE_ROW);
  CHECK(sqlite3_column_int(st, 0) == laneq::store::schema_version);
  sqlite3_finalize(st);
  sqlite3_close(db);
}

TEST_CASE("every acknowledged append survives a kill -9 of the writing process", "[journal]") {
  TempDir dir;
  const auto path = dir.file("j.db");
  Child child([&](int fd) {  // appends until killed, writing each acknowledged id to the pipe
    try {
      auto j = Journal::open({path});
      std::counting_semaphore<> window(256);  // bounded queue, no busy loop
      for (int i = 0;; ++i) {
        window.acquire();
        std::string id = "k" + std::to_string(i);
        j->append(make_record(id), [&window, fd, id](std::error_code ec, std::int64_t) {
          if (!ec) write_all(fd, id + "\n");  // one write of < PIPE_BUF bytes: atomic
          window.release();
        });
      }
    } catch (...) {
    }
  });
  child.read([](const std::string& text) { return std::count(text.begin(), text.end(), '\n') >= 3000; });
  child.kill();
  CHECK(WIFSIGNALED(child.wait()));
  const std::string& acked = child.read();  // what was written before the kill

  std::set<std::string> acknowledged;
  for (std::size_t at = 0, nl; (nl = acked.find('\n', at)) != std::string::npos; at = nl + 1)
    acknowledged.insert(acked.substr(at, nl - at));
  REQUIRE(acknowledged.size() >= 3000);

  auto j = Journal::open({path});
  std::set<std::string> stored;
  for (const auto& r : j->take_recovered()) stored.insert(r.id);
  std::size_t lost = 0;
  for (const auto& id : acknowledged) lost += stored.count(id) ? 0 : 1;
  CHECK(lost == 0);
  CHECK(stored.size() >= acknowledged.size());
}

TEST_CASE("a failed commit fails its whole batch once and the journal keeps working",
          "[journal][errors]") {
  // A child process caps its file size (RLIMIT_FSIZE), so SQLite's writes of the next batches
  // fail as on a full disk; then it lifts the cap. It reports what it saw through a pipe.
  TempDir dir;
  const auto path = dir.file("j.db");
  Child child([&](int fd) {
    std::string out;
    try {
      ::signal(SIGXFSZ, SIG_IGN);  // an oversized write fails with EFBIG instead of killing us
      auto j = Journal::open({path});
      std::error_code ec;
      const auto size = std::max(fs::file_size(path), fs::file_size(path + "-wal", ec));
      rlimit cap{};
      ::getrlimit(RLIMIT_FSIZE, &cap);
      const rlimit small{static_cast<rlim_t>(size + 4096), cap.rlim_max};
      ::setrlimit(RLIMIT_FSIZE, &small);
      constexpr int n = 500;
      std::vector<int> calls(n, 0);  // written by the writer thread, read after flush
      std::atomic<int> failed{0};
      std::promise<std::error_code> flush_done;
      // The appends and the flush are queued from a completion, on the writer thread, so the
      // writer finds them all queued at once: one batch (n + 1 < max_batch), one transaction,
      // far beyond the cap. Its COMMIT fails, and with it every op of the batch, the flush too.
      j->append(make_record("gate"), [&](std::error_code, std::int64_t) {
        for (int i = 0; i < n; ++i)
          j->append(make_record("r" + std::to_string(i), std::string(400, 'x')),
                    [&, i](std::error_code e, std::int64_t) {
                      ++calls[static_cast<std::size_t>(i)];
                      if (e == errc::journal) ++failed;
                    });
        j->flush([&](std::error_code e) { flush_done.set_value(e); });
      });
      const auto flushed = flush_done.get_future().get();
      const auto s = j->stats();
      ::setrlimit(RLIMIT_FSIZE, &cap);
      const auto after = append_wait(*j, make_record("after"));
      // that batch's failure was its flush's to say: the next one has nothing lost to report
      const auto flushed_after = flush_wait(*j);
      out = "calls_once=" + std::to_string(std::count(calls.begin(), calls.end(), 1) == n) +
            " failed=" + std::to_string(failed.load() == n) +
            " flush=" + std::to_string(flushed == errc::journal) +
            " write_errors=" + std::to_string(s.write_errors > 0) +
            " after=" + std::to_string(!after.first) +
            " flush_after=" + std::to_string(!flushed_after) + " last_error=" + s.last_error;
    } catch (const std::exception& e) {
      out = std::string("exception: ") + e.what();
    }
    write_all(fd, out);
  });
  const std::string out = child.read();
  INFO(out);
  CHECK_THAT(out, Catch::StartsWith("calls_once=1 failed=1 flush=1 write_errors=1 after=1 "
                                    "flush_after=1"));
  CHECK_THAT(out, Catch::Contains(path));
  // the append acknowledged after the cap was lifted is in the file
  CHECK(lookup_wait(*Journal::open({path}), "after"));
}

TEST_CASE("a text SQLite refuses to bind fails the statement instead of storing NULL",
          "[journal][errors]") {
  namespace sq = laneq::store::sqlite;
  sqlite3* raw = nullptr;
  REQUIRE(sqlite3_open(":memory:", &raw) == SQLITE_OK);
  sq::Db db(raw);
  REQUIRE(db.exec("CREATE TABLE t (id TEXT UNIQUE, body TEXT NOT NULL)") == SQLITE_OK);
  sqlite3_limit(db.get(), SQLITE_LIMIT_LENGTH, 100);  // as a value above 1e9 bytes would be
  sq::Stmt insert;
  REQUIRE(insert.prepare(db.get(), "INSERT OR IGNORE INTO t VALUES (?1, ?2)", false) == SQLITE_OK);
  insert.bind(1, std::string_view("a"));
  const std::string big(200, 'x');
  insert.bind(2, big);  // NULL, which OR IGNORE would skip as a duplicate
  CHECK(insert.step() == SQLITE_TOOBIG);
  insert.reset();
  insert.bind(1, std::string_view("a"));  // the statement works again after the failure
  insert.bind(2, std::string_view("short"));
  CHECK(insert.step() == SQLITE_DONE);
  insert.reset();
  CHECK(sqlite3_changes(db.get()) == 1);
}

TEST_CASE("the writer's queue gives a burst's memory back once it has written it", "[journal]") {
  // Ops are ~750 B (a JournalRecord inside): the queue of a 100k burst is ~75 MB, which both
  // of the writer's swapped vectors used to keep for the process's life.
  const auto heap = [] {  // in use, in the arenas and in mmap'd blocks (a large vector's)
    const auto m = ::mallinfo2();
    return static_cast<std::int64_t>(m.uordblks + m.hblkhd);
  };
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  WARN("a sanitizer's allocator: glibc's malloc statistics do not see it, nothing to measure");
  return;
#endif
  TempDir dir;
  auto j = Journal::open({dir.file("j.db")});
  // The first append's completion (on the writer) holds the writer while the burst queues.
  std::promise<void> go;
  std::shared_future<void> gate = go.get_future().share();
  j->append(make_record("gate"), [gate](std::error_code, std::int64_t) { gate.wait(); });
  const JournalRecord proto = make_record("proto");
  const auto before = heap();
  constexpr int n = 100'000;
  for (int i = 0; i < n; ++i) {
    JournalRecord r = proto;
    r.id = "burst-" + std::to_string(i);
    j->append(std::move(r), [](std::error_code, std::int64_t) {});
  }
  const auto queued = heap();
  go.set_value();
  REQUIRE_FALSE(flush_wait(*j));  // the burst's round
  REQUIRE_FALSE(flush_wait(*j));  // a round after it: the burst's vector came back to the writer
  const auto after = heap();
  INFO("heap before " << before << ", burst queued " << queued << ", after " << after);
  CHECK(queued - before > std::int64_t{n} * 500);  // (the measure sees the burst at all)
  CHECK(after - before < 16 * 1024 * 1024);         // not 2 x ~75 MB
  CHECK(j->stats().appended == n + 1);
}

TEST_CASE("the extreme time points read back as themselves, without overflow", "[journal]") {
  TempDir dir;
  auto j = Journal::open({dir.file("j.db")});
  using sys = std::chrono::system_clock;
  auto lo = make_record("lo");
  lo.enqueued_at = sys::time_point::min();  // stored floored: a millisecond below what reads back
  lo.deadline = sys::time_point::min();
  auto hi = make_record("hi");
  hi.enqueued_at = sys::time_point::max();
  hi.deadline = sys::time_point::max();
  append_ok(*j, lo);
  append_ok(*j, hi);
  const auto a = lookup_wait(*j, "lo");
  const auto b = lookup_wait(*j, "hi");
  REQUIRE(a);
  REQUIRE(b);
  CHECK(a->enqueued_at == sys::time_point::min());
  CHECK(a->deadline == sys::time_point::min());
  // max() is not a whole millisecond: it reads back as its last whole one
  CHECK(b->enqueued_at <= sys::time_point::max());
  CHECK(b->enqueued_at > sys::time_point::max() - 1ms);
}

TEST_CASE("requests and responses round-trip through their stored JSON", "[journal][json]") {
  auto req = make_record("x").request;
  req.messages.push_back({"tool", std::string("tab\t nl\n cr\r bell\x07 nul") + '\0' + " \"q\" \\ é € 😀"});
  const auto text = request_json(req);
  check_same(laneq::store::parse_request(text), req);
  nlohmann::json expected = {{"model", req.model},
                             {"messages", nlohmann::json::array()},
                             {"max_tokens", req.max_tokens},
                             {"stream", req.stream},
                             {"extra", req.extra}};
  for (const auto& m : req.messages)
    expected["messages"].push_back({{"role", m.role}, {"content", m.content}});
  CHECK(nlohmann::json::parse(text) == expected);
  check_same(laneq::store::parse_request(request_json({})), laneq::Request{});

  // Invalid UTF-8 (a stray continuation byte, a truncated sequence, a surrogate, an overlong
  // form) is replaced, so the stored JSON always parses.
  laneq::Request bad{.model = "m",
                     .messages = {{"user", "a\x80" "b \xe2\x82 \xed\xa0\x80 \xc0\xaf end\xf0"}}};
  const auto bad_back = laneq::store::parse_request(request_json(bad));
  CHECK(bad_back.messages[0].content.find("\xef\xbf\xbd") != std::string::npos);
  CHECK(bad_back.messages[0].content.substr(0, 1) == "a");
  CHECK(bad_back.messages[0].content.find(" end") != std::string::npos);

  const auto resp = make_response();
  check_same(laneq::store::parse_response(laneq::store::dump(laneq::store::to_json(resp))), resp);
  laneq::Response empty;
  check_same(laneq::store::parse_response(laneq::store::dump(laneq::store::to_json(empty))), empty);
  CHECK_THROWS(laneq::store::parse_request(R"({"model":"m"})"));
}
