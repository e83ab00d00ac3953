// Stress over HTTP: the whole path (queue -> provider -> CurlTransport -> the mock API server on
// 127.0.0.1) on a 4-thread io_context, with every fault the mock injects at random (500, 503,
// 529, connection resets, malformed bodies, stalls, streams cut or ending in an error event),
// random deadlines and cancels, plain and streamed calls. Every submit completes exactly once,
// the books balance, a success carries its whole text, and no transfer or connection is left.
#include <catch2/catch.hpp>

#include <atomic>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/bind_executor.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>

#include "laneq/laneq.hpp"
#include "mock_api/mock_server_thread.hpp"
#include "support/run.hpp"
#include "support/temp_dir.hpp"

using namespace std::chrono_literals;

namespace {

enum class Api { openai, anthropic };

struct Outcomes {
  std::atomic<int> ok{0}, timeout{0}, cancelled{0}, failed{0};
  std::atomic<int> text_mismatch{0};   // a success whose streamed deltas are not its text
  std::atomic<int> off_strand{0};      // a handler run elsewhere than its strand
};

// One submit's record. `deltas` is written by on_delta (the transport's strand) and read by
// the completion, which a success's deltas all happen before.
struct Slot {
  std::atomic<int> completions{0};
  std::string deltas;
  bool stream = false;
  asio::cancellation_signal cancel;  // the submitter's strand only
};

// With `durable`, every third submit is journaled first (a SQLite journal in a temp directory).
void stress_http(Api api, bool durable = false) {
  constexpr int n = 1500;
  laneq::test::TempDir dir;
  laneq::mock::MockServerThread mock({.latency = 1ms,
                                      .jitter = 4ms,
                                      .error_rate_500 = 0.03,
                                      .error_rate_503 = 0.02,
                                      .error_rate_529 = 0.02,
                                      .reset_rate = 0.03,
                                      .malformed_rate = 0.02,
                                      .stall_rate = 0.02,
                                      .stream_error_rate = 0.05,
                                      .stream_cut_rate = 0.05,
                                      .seed = 7});
  asio::io_context io(4);
  // A stalled answer ends after 1 s as a network error and is retried (not a worker held
  // until the request's deadline). Real time: a sanitizer build on a loaded machine may take
  // hundreds of ms for an exchange that is not stalled (300 ms here failed one TSan run).
  auto transport = std::make_unique<laneq::CurlTransport>(
      io.get_executor(), laneq::CurlTransportConfig{.timeout = 1s});
  std::unique_ptr<laneq::Provider> provider;
  if (api == Api::openai)
    provider = std::make_unique<laneq::OpenAIProvider>(
        *transport, laneq::OpenAIConfig{.api_key = "sk-test", .base_url = mock.base_url()});
  else
    provider = std::make_unique<laneq::AnthropicProvider>(
        *transport, laneq::AnthropicConfig{.api_key = "sk-test", .base_url = mock.base_url()});
  laneq::QueueConfig cfg{.workers = 16,
                         .retry = {.max_attempts = 3, .base_delay = 2ms, .max_delay = 10ms}};
  if (durable) cfg.journal = dir.file("journal.db");
  laneq::RequestQueue queue(io.get_executor(), *provider, std::move(cfg));
  queue.start();

  auto slots = std::make_unique<Slot[]>(n);
  Outcomes out;
  std::atomic<int> completed{0};
  const laneq::Priority prios[] = {laneq::Priority::critical, laneq::Priority::high,
                                   laneq::Priority::normal, laneq::Priority::low,
                                   laneq::Priority::background};
  for (int s = 0; s < 4; ++s) {
    auto strand = asio::make_strand(io);
    asio::post(strand, [&, s, strand] {
      std::mt19937_64 rng(99 + s);
      for (int i = s; i < n; i += 4) {
        Slot& slot = slots[i];
        laneq::Request req = laneq::test::chat("request " + std::to_string(i), 24);
        if (rng() % 10 < 3) {
          slot.stream = req.stream = true;
          req.on_delta = [&slot](std::string_view d) { slot.deltas.append(d); };
        }
        // A fifth get a deadline that ends them queued or in flight; the rest one no loaded
        // machine reaches (all are queued at once: a lane's last waits for the others).
        const auto timeout = rng() % 5 == 0 ? std::chrono::milliseconds(1 + rng() % 30) : 60s;
        laneq::SubmitOptions o{.priority = prios[rng() % 5],
                               .client = "c" + std::to_string(rng() % 7),
                               .timeout = timeout,
                               .durable = durable && i % 3 == 0};
        queue.async_submit(
            std::move(req), o,
            asio::bind_cancellation_slot(
                slot.cancel.slot(),
                asio::bind_executor(strand, [&, i, strand](std::error_code ec, laneq::Response r) {
                  if (!strand.running_in_this_thread()) ++out.off_strand;
                  Slot& sl = slots[i];
                  sl.completions.fetch_add(1);
                  if (!ec) {
                    ++out.ok;
                    if (sl.stream ? sl.deltas != r.text : r.text.empty()) ++out.text_mismatch;
                  } else if (ec == laneq::errc::timeout) {
                    ++out.timeout;
                  } else if (ec == laneq::errc::cancelled) {
                    ++out.cancelled;
                  } else {
                    ++out.failed;
                  }
                  if (completed.fetch_add(1) + 1 == n)
                    queue.async_shutdown({}, [](std::error_code) {});
                })));
        if (rng() % 10 == 0) {  // a cancel, queued or in flight (terminal: either way)
          auto t = std::make_shared<asio::steady_timer>(strand,
                                                        std::chrono::microseconds(rng() % 5000));
          t->async_wait([&, i, t](std::error_code) {
            if (slots[i].completions.load() == 0)
              slots[i].cancel.emit(asio::cancellation_type::terminal);
          });
        }
      }
    });
  }

  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back([&] { io.run(); });
  // A lost completion must fail the test, not hang it: stop the loop after 120 s (CTest: 300).
  std::atomic<bool> gave_up{false};
  std::thread watchdog([&] {
    const auto until = std::chrono::steady_clock::now() + 120s;
    while (completed.load() < n || !io.stopped()) {
      if (std::chrono::steady_clock::now() > until) {
        gave_up = true;
        io.stop();
        return;
      }
      std::this_thread::sleep_for(10ms);  // a watchdog's poll, not a wait for a result
    }
  });
  for (auto& t : threads) t.join();
  watchdog.join();
  INFO("completed " << completed.load() << " of " << n << ": ok " << out.ok << ", timeout "
       << out.timeout << ", cancelled " << out.cancelled << ", failed " << out.failed);
  REQUIRE_FALSE(gave_up.load());

  CHECK(out.off_strand == 0);
  for (int i = 0; i < n; ++i) REQUIRE(slots[i].completions.load() == 1);
  CHECK(out.text_mismatch == 0);
  const auto m = queue.metrics().total;
  CHECK(m.submitted == static_cast<std::uint64_t>(n));
  CHECK(m.succeeded == static_cast<std::uint64_t>(out.ok.load()));
  CHECK(m.expired == static_cast<std::uint64_t>(out.timeout.load()));
  CHECK(m.cancelled == static_cast<std::uint64_t>(out.cancelled.load()));
  CHECK(m.failed == static_cast<std::uint64_t>(out.failed.load()));
  CHECK(m.depth == 0);
  CHECK(m.in_flight == 0);
  CHECK(m.waiting == 0);
  // Every kind of ending happened (the fault rates make each one near certain in 1,500).
  CHECK(out.ok > n / 2);
  CHECK(out.timeout > 0);
  CHECK(out.cancelled > 0);
  CHECK(out.failed > 0);  // malformed bodies and mid-stream errors are not retried
  CHECK(m.retried > 0);
  if (durable) {
    // Every row the journal took has its outcome: none is left open (pending or in flight).
    const auto journal = queue.journal();
    REQUIRE(journal);
    std::promise<std::vector<laneq::JournalRecord>> open_rows;
    journal->list({.states = laneq::JournalStateSet::open()},
                  [&](std::error_code, std::vector<laneq::JournalRecord> rows) {
                    open_rows.set_value(std::move(rows));
                  });
    CHECK(open_rows.get_future().get().empty());
    const auto js = journal->stats();
    CHECK(js.appended > static_cast<std::uint64_t>(n / 4));  // most of the n / 3 durable
    CHECK(js.finished == js.appended);
    CHECK(js.write_errors == 0);
  }
  CHECK(transport->in_flight() == 0);
  transport.reset();  // its connections close: the server sees none left
  CHECK(mock.wait_stats([](const nlohmann::json& s) { return s["connections"]["current"] == 0; }));
  CHECK(mock.stats()["in_flight"] == 0);
}

}  // namespace

TEST_CASE("stress over HTTP: OpenAI, 1500 random submits on 4 threads with every injected fault, "
          "each completes exactly once", "[stress][http]") {
  stress_http(Api::openai);
}

TEST_CASE("stress over HTTP: Anthropic, 1500 random submits on 4 threads with every injected "
          "fault, each completes exactly once", "[stress][http]") {
  stress_http(Api::anthropic);
}

TEST_CASE("stress over HTTP with a journal: a third of the submits durable, each completes "
          "exactly once and leaves no row open", "[stress][http][journal]") {
  stress_http(Api::openai, true);
}
