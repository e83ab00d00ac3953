// B5-journal: the durable journal's store layer alone (no queue, no HTTP), SQLite in WAL mode.
//   appends_per_s:                  N appends (~205-byte request JSON) from one producer thread,
//                                   at most `window` unacknowledged, until the last is committed
//   requests_per_s_with_outcomes:   the same, and each acknowledged row is then marked in_flight
//                                   and finished with a small Response by a second thread (as
//                                   the queue's strand would): 3 writes per request
// Usage: b5_journal [normal|off|full|extra]; B5_N (default 200000) and B5_DIR (default: a fresh
// directory under the system temp dir, removed afterwards) override.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <future>
#include <mutex>
#include <semaphore>
#include <stdexcept>
#include <string>
#include <thread>

#include "bench_util.hpp"
#include "laneq/laneq.hpp"

namespace fs = std::filesystem;
using steady = std::chrono::steady_clock;

namespace {

constexpr std::ptrdiff_t window = 10'000;  // unacknowledged appends, like a bounded queue

laneq::JournalRecord make_record(std::size_t i) {
  laneq::JournalRecord r;
  r.id = "req-" + std::to_string(i);
  r.priority = static_cast<int>(i % 5);
  r.client = "tenant-" + std::to_string(i % 100);
  r.request = {.model = "gpt-4o-mini",
               .messages = {{"system", "You are terse."},
                            {"user", "Summarise ticket #" + std::to_string(i) +
                                         ": cannot log in after a password reset."}},
               .max_tokens = 256};
  r.enqueued_at = std::chrono::system_clock::now();
  r.deadline = r.enqueued_at + std::chrono::minutes(2);
  return r;
}

const laneq::Response response{
    .status = 200,
    .text = "The customer is locked out after two password resets and needs the account unlocked.",
    .usage = {.input_tokens = 41, .output_tokens = 18},
    .finish_reason = "stop",
    .headers = {{"x-ratelimit-remaining-requests", "4999"},
                {"x-ratelimit-remaining-tokens", "3999000"}},
    .attempts = 1};

// Rows handed from the writer thread's completions to a worker thread.
class RowQueue {
 public:
  void push(std::int64_t row) {
    {
      std::lock_guard lock(mu_);
      rows_.push_back(row);
    }
    cv_.notify_one();
  }
  std::int64_t pop() {  // 0 = closed
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !rows_.empty() || closed_; });
    if (rows_.empty()) return 0;
    const auto row = rows_.front();
    rows_.pop_front();
    return row;
  }
  void close() {
    {
      std::lock_guard lock(mu_);
      closed_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::int64_t> rows_;
  bool closed_ = false;
};

struct Run {
  double per_s;
  laneq::JournalStats stats;
};

// with_outcomes: each appended row is marked in_flight and finished by a worker thread.
Run run(const std::string& path, laneq::JournalSync sync, std::size_t n, bool with_outcomes) {
  // A fresh file each run: a B5_DIR kept from a run before holds every id already (unique).
  for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(path + suffix);
  auto journal = laneq::Journal::open({.path = path, .synchronous = sync});
  std::counting_semaphore<> room(window);
  std::promise<void> all_done;
  std::atomic<std::size_t> done{0};
  std::atomic<bool> failed{false};
  std::once_flag first;  // the first failure's words (the writer's thread, or the worker's)
  std::string why;
  const auto fail = [&](std::error_code ec) {
    std::call_once(first, [&] { why = ec.message(); });
    failed = true;
  };
  auto one_done = [&] {
    if (++done == n) all_done.set_value();
  };
  RowQueue rows;
  std::thread worker;
  if (with_outcomes)
    worker = std::thread([&] {
      for (std::int64_t row; (row = rows.pop()) != 0;) {
        journal->mark_in_flight(row, 0, std::chrono::system_clock::now() + std::chrono::minutes(2), 1);
        journal->finish(row, laneq::JournalState::succeeded, 1, {}, "", &response,
                        [&](std::error_code ec) {
                          if (ec) fail(ec);
                          room.release();
                          one_done();
                        });
      }
    });

  const auto t0 = steady::now();
  for (std::size_t i = 0; i < n; ++i) {
    room.acquire();
    journal->append(make_record(i), [&](std::error_code ec, std::int64_t row) {
      if (ec) fail(ec);
      if (with_outcomes && !ec) {
        rows.push(row);
        return;
      }
      room.release();
      one_done();
    });
  }
  all_done.get_future().get();
  const double secs = std::chrono::duration<double>(steady::now() - t0).count();
  rows.close();
  if (worker.joinable()) worker.join();
  if (failed) throw std::runtime_error("a journal write failed: " + why);
  return {static_cast<double>(n) / secs, journal->stats()};
}

}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "normal";
  laneq::JournalSync sync = laneq::JournalSync::normal;
  if (!std::strcmp(mode, "off")) sync = laneq::JournalSync::off;
  else if (!std::strcmp(mode, "full")) sync = laneq::JournalSync::full;
  else if (!std::strcmp(mode, "extra")) sync = laneq::JournalSync::extra;
  else if (std::strcmp(mode, "normal")) {
    std::fprintf(stderr, "usage: b5_journal [normal|off|full|extra]\n");
    return 2;
  }
  const auto count = count_arg(std::getenv("B5_N"), 200'000);
  if (!count) {
    std::fprintf(stderr, "b5_journal: B5_N must be a whole number from 1 to 10^12\n");
    return 2;
  }
  const std::size_t n = *count;
  const fs::path dir = std::getenv("B5_DIR")
                           ? fs::path(std::getenv("B5_DIR"))
                           : fs::temp_directory_path() / ("laneq-b5-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  Run appends{}, outcomes{};
  try {
    appends = run((dir / "appends.db").string(), sync, n, false);
    outcomes = run((dir / "outcomes.db").string(), sync, n, true);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "b5_journal: %s\n", e.what());
    std::error_code ignored;
    if (!std::getenv("B5_DIR")) fs::remove_all(dir, ignored);
    return 1;
  }
  if (!std::getenv("B5_DIR")) fs::remove_all(dir);

  std::printf(
      "{\"bench\":\"B5-journal\",\"sync\":\"%s\",\"n\":%zu,\"appends_per_s\":%.0f,"
      "\"requests_per_s_with_outcomes\":%.0f,\"append_transactions\":%llu,"
      "\"append_largest_batch\":%llu,\"outcome_transactions\":%llu,"
      "\"outcome_mean_commit_us\":%.1f}\n",
      mode, n, appends.per_s, outcomes.per_s,
      static_cast<unsigned long long>(appends.stats.transactions),
      static_cast<unsigned long long>(appends.stats.largest_batch),
      static_cast<unsigned long long>(outcomes.stats.transactions),
      static_cast<double>(outcomes.stats.mean_commit_time.count()) / 1000.0);
  return 0;
}
