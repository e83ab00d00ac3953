// B5 durable submit (DESIGN.md). Two parts, one JSON line:
//   throughput: 100,000 durable requests through async_enqueue (a callback token, one thread),
//     a no-op provider, the SQLite journal at its default synchronous level in a temp dir:
//     acknowledgements per second (each one a committed row), and requests per second with
//     every outcome committed too.
//   kill -9: a child process (this program, "child" mode) enqueues durable requests without
//     end and prints each acknowledged id; the parent kills it with SIGKILL mid-run, opens the
//     journal and counts acknowledged ids it does not hold (must be 0).
//   b5_durable [n]
#include <signal.h>
#include <cstdlib>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <future>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_set>
#include <vector>

#include <asio/io_context.hpp>

#include "bench_util.hpp"
#include "laneq/laneq.hpp"
#include "support/child_process.hpp"

namespace fs = std::filesystem;
using steady = std::chrono::steady_clock;

namespace {

fs::path temp_dir() {
  std::random_device rd;
  auto p = fs::temp_directory_path() / ("laneq-b5-" + std::to_string(rd()) + std::to_string(rd()));
  fs::create_directories(p);
  return p;
}

laneq::Request request(std::size_t i) {
  // ~200 bytes of request JSON, like a short chat call.
  return {.id = "req-" + std::to_string(i),
          .model = "gpt-4o-mini",
          .messages = {{"system", "You are a concise assistant."},
                       {"user", "Summarise document " + std::to_string(i) + " in three bullets."}},
          .max_tokens = 128};
}

struct Throughput {
  double acks_per_s = 0, outcomes_per_s = 0;
  std::uint64_t transactions = 0;
};

Throughput throughput(const fs::path& dir, std::size_t n) {
  asio::io_context io(1);
  laneq::SimulatedProvider provider;
  std::size_t acked = 0, outcomes = 0, refused = 0, failed = 0;
  steady::time_point t_acked, t_done;
  std::optional<laneq::RequestQueue> queue;
  // A refused enqueue has no outcome: the run ends when every request has one or the other
  // (waiting for n outcomes would wait for ever, the workers keeping io.run() going).
  const auto settled = [&] {
    if (outcomes + refused != n) return;
    t_done = steady::now();
    queue->async_shutdown({}, [](std::error_code) {});
  };
  queue.emplace(
      io.get_executor(), provider,
      laneq::QueueConfig{
          .workers = 8, .max_pending = n + 1, .journal = {.path = (dir / "b5.db").string()},
          .on_durable_result = [&](std::string_view, std::error_code ec, const laneq::Response&) {
            if (ec && failed++ == 0)
              std::fprintf(stderr, "b5: a request failed: %s\n", ec.message().c_str());
            ++outcomes;
            settled();
          }});
  queue->start();
  const auto t0 = steady::now();
  for (std::size_t i = 0; i < n; ++i)
    queue->async_enqueue(request(i), {}, [&](std::error_code ec, std::string) {
      if (ec) {  // not an acknowledgement: it is not counted as one
        if (refused++ == 0) std::fprintf(stderr, "b5: enqueue failed: %s\n", ec.message().c_str());
        return settled();
      }
      if (++acked == n) t_acked = steady::now();
    });
  io.run();
  if (refused != 0 || acked != n || failed != 0)
    throw std::runtime_error(std::to_string(n - acked) + " of " + std::to_string(n) +
                             " enqueues refused, " + std::to_string(failed) + " requests failed");
  const auto secs = [&](steady::time_point t) { return std::chrono::duration<double>(t - t0).count(); };
  return {n / secs(t_acked), n / secs(t_done), queue->journal()->stats().transactions};
}

// The child: enqueue without end, keeping ~10,000 unacknowledged; one line per acknowledgement.
int child(const std::string& db) {
  asio::io_context io(1);
  laneq::SimulatedProvider provider;
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = 8, .journal = {.path = db}});
  queue.start();
  std::size_t next = 0;
  std::function<void()> more = [&] {
    queue.async_enqueue(request(next++), {}, [&](std::error_code ec, std::string id) {
      if (ec) return;
      id += '\n';
      if (::write(STDOUT_FILENO, id.data(), id.size()) < 0) std::_Exit(1);
      more();
    });
  };
  for (int i = 0; i < 10'000; ++i) more();
  io.run();
  return 0;
}

std::pair<std::size_t, std::size_t> kill_test(const std::string& self, const fs::path& dir) {
  const std::string db = (dir / "kill.db").string();
  std::unordered_set<std::string> acked;
  {
    laneq::test::ChildProcess p(self, {"child", db});
    std::string buf;
    while (acked.size() < 50'000) {  // then kill it, mid-run
      std::string chunk = p.read_stdout_some(std::chrono::seconds(30));
      if (chunk.empty()) break;
      buf += chunk;
      std::size_t pos;
      while ((pos = buf.find('\n')) != std::string::npos) {
        acked.insert(buf.substr(0, pos));
        buf.erase(0, pos + 1);
      }
    }
    // (a child that ended early, or acknowledged too little, tests nothing: fail, not pass)
    // (thrown, not exit(): the ChildProcess ends the child, main removes the directory)
    if (acked.size() < 50'000)
      throw std::runtime_error("the child acknowledged only " + std::to_string(acked.size()) +
                               " before it went quiet");
    p.signal(SIGKILL);
    if (const int code = p.exit_code(std::chrono::seconds(10)); code != -SIGKILL)
      throw std::runtime_error("the child ended by itself (" + std::to_string(code) +
                               ") before the kill");
    // Acknowledgements printed before the kill landed are acknowledged too.
    for (std::string chunk; !(chunk = p.read_stdout(false, std::chrono::seconds(1))).empty();) buf += chunk;
    for (std::size_t pos; (pos = buf.find('\n')) != std::string::npos; buf.erase(0, pos + 1))
      acked.insert(buf.substr(0, pos));
  }
  auto journal = laneq::Journal::open({.path = db});
  std::promise<std::vector<laneq::JournalRecord>> rows;
  journal->list({}, [&](std::error_code, std::vector<laneq::JournalRecord> v) { rows.set_value(std::move(v)); });
  std::unordered_set<std::string> held;
  for (auto& r : rows.get_future().get()) held.insert(r.id);
  std::size_t lost = 0;
  for (const auto& id : acked) lost += !held.contains(id);
  return {acked.size(), lost};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 2 && std::string(argv[1]) == "child") return child(argv[2]);
  const auto count = count_arg(argc > 1 ? argv[1] : nullptr, 100'000);
  if (!count) {
    std::fprintf(stderr, "usage: b5_durable [n > 0]\n");
    return 2;
  }
  const std::size_t n = *count;
  const fs::path dir = temp_dir();
  Throughput t;
  std::size_t acked = 0, lost = 0;
  try {
    t = throughput(dir, n);
    std::tie(acked, lost) = kill_test(fs::canonical("/proc/self/exe").string(), dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "b5: %s\n", e.what());
    std::error_code ignored;
    fs::remove_all(dir, ignored);
    return 1;
  }
  fs::remove_all(dir);
  std::printf("{\"bench\":\"B5\",\"n\":%zu,\"durable_per_s\":%.0f,\"with_outcomes_per_s\":%.0f,"
              "\"transactions\":%llu,\"acknowledged_at_kill\":%zu,\"lost_acknowledged\":%zu}\n",
              n, t.acks_per_s, t.outcomes_per_s, static_cast<unsigned long long>(t.transactions),
              acked, lost);
  return lost == 0 ? 0 : 1;
}
