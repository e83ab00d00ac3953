// B1 memory floor: what B1 preload's memory alone costs, with no queue around it. Per request,
// as laneq holds it: an op block of laneq's own size (sizeof submit_op for a callback handler
// like B1's: the Request and SubmitOptions moved in, the bookkeeping written) and a 64 B
// scheduler node; then every op taken in B1's order (strict lanes, round-robin across the
// clients of a lane, FIFO per client), its request read, destroyed and freed. No Asio, no
// scheduling logic, no metrics, no provider: a ceiling for B1 preload on this machine (a
// queue cannot beat the memory it must touch), next to b1_floor's ceiling for the Asio path.
//   laneq:   ops and nodes of laneq's sizes (the default)
//   payload: ops of the caller's payload and a link alone, no node: a queue with no
//            bookkeeping at all
// Prints one JSON line.
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <system_error>
#include <vector>

#include "b1_jobs.hpp"
#include "bench_util.hpp"
#include "laneq/detail/submit_op.hpp"

namespace {

// B1 preload's handler: a lambda capturing four references (failed, done, n, queue).
struct preload_handler {
  void* a;
  void* b;
  void* c;
  void* d;
  void operator()(std::error_code, laneq::Response) const {}
};
constexpr std::size_t op_bytes = sizeof(laneq::detail::submit_op<preload_handler>);
constexpr std::size_t node_bytes = 64;  // laneq::Scheduler's node (static_assert'ed there)

// The start of an op block; the rest of the block stands for the queue's bookkeeping.
struct record {
  laneq::Request request;
  laneq::SubmitOptions options;
  record* next = nullptr;  // the client's FIFO (laneq links it through its scheduler node)
  void* node = nullptr;
};
static_assert(sizeof(record) <= op_bytes);

struct fifo {
  record* head = nullptr;
  record* tail = nullptr;
};

// One lane: a FIFO per client, and the clients with work in round-robin order.
struct lane {
  std::vector<fifo> per_client = std::vector<fifo>(b1::client_count);
  std::vector<std::size_t> turn;  // clients in the order they became active
};

std::size_t client_index(const laneq::ClientId& c, const b1::JobMaker& names) {
  for (std::size_t i = 0; i < names.clients.size(); ++i)
    if (names.clients[i] == c) return i;
  return 0;
}

std::size_t lane_index(laneq::Priority p) {
  std::size_t i = 0;
  while (b1::prios[i] != p) ++i;
  return i;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "laneq";
  const auto count = count_arg(argc > 2 ? argv[2] : nullptr, 200'000);
  if ((mode != "laneq" && mode != "payload") || !count) {
    std::fprintf(stderr, "usage: b1_memory [laneq|payload] [n > 0]\n");
    return 2;
  }
  const std::size_t n = *count;
  const bool bookkeeping = mode == "laneq";
  const std::size_t block_bytes = bookkeeping ? op_bytes : sizeof(record);
  auto jobs = b1::make_jobs(n);
  const b1::JobMaker names;
  // Looked up before the clock (laneq hashes names and priorities on the way).
  std::vector<std::size_t> client(n), lane_of(n);
  for (std::size_t i = 0; i < n; ++i) {
    client[i] = client_index(jobs[i].options.client, names);
    lane_of[i] = lane_index(jobs[i].options.priority);
  }
  std::vector<lane> lanes(std::size(b1::prios));
  for (auto& l : lanes) l.turn.reserve(b1::client_count);

  const auto rss0 = resident_bytes();
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < n; ++i) {
    void* block = ::operator new(block_bytes);
    auto* r = ::new (block) record{std::move(jobs[i].request), jobs[i].options};
    std::memset(static_cast<char*>(block) + sizeof(record), 0, block_bytes - sizeof(record));
    if (bookkeeping) {
      r->node = ::operator new(node_bytes);
      std::memset(r->node, 0, node_bytes);
      std::memcpy(r->node, &r, sizeof r);
    }
    lane& l = lanes[lane_of[i]];
    fifo& f = l.per_client[client[i]];
    if (f.tail != nullptr) {
      f.tail->next = r;
    } else {
      f.head = r;
      l.turn.push_back(client[i]);
    }
    f.tail = r;
  }
  const auto t1 = std::chrono::steady_clock::now();
  const double bytes_per_request =
      static_cast<double>(resident_bytes() - rss0) / static_cast<double>(n);

  std::size_t done = 0, checksum = 0;
  for (lane& l : lanes) {
    while (!l.turn.empty()) {
      std::size_t kept = 0;
      for (std::size_t c : l.turn) {
        fifo& f = l.per_client[c];
        record* r = f.head;
        f.head = r->next;
        if (f.head == nullptr) f.tail = nullptr; else l.turn[kept++] = c;
        checksum += r->request.messages.front().content.size() + r->request.model.size() +
                    r->options.cost;
        if (r->node != nullptr) {
          checksum += *static_cast<record**>(r->node) == r ? 1 : 0;
          ::operator delete(r->node);
        }
        r->~record();
        ::operator delete(static_cast<void*>(r));
        ++done;
      }
      l.turn.resize(kept);
    }
  }
  const auto t2 = std::chrono::steady_clock::now();
  const auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  std::printf("{\"bench\":\"B1-memory\",\"mode\":\"%s\",\"n\":%zu,\"req_per_s\":%.0f,"
              "\"op_bytes\":%zu,\"node_bytes\":%zu,\"bytes_per_request\":%.0f,"
              "\"queue_ms\":%.1f,\"take_ms\":%.1f}\n",
              mode.c_str(), n, static_cast<double>(done) / (ms(t2 - t0) / 1000.0), block_bytes,
              bookkeeping ? node_bytes : 0, bytes_per_request, ms(t1 - t0), ms(t2 - t1));
  // "ping", "m", cost 1, and the node's back link
  return done == n && checksum == n * (4 + 1 + 1 + (bookkeeping ? 1 : 0)) ? 0 : 1;
}
