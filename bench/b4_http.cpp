// B4 end-to-end HTTP (DESIGN.md).
//   b4_http [ratio]     against the mock API server on loopback (its own thread), zero latency,
//                       no limits, 64 in flight: req/s through the whole queue path (submit ->
//                       OpenAIProvider -> CurlTransport -> JSON -> resume) beside the transport
//                       alone (the same requests with async_http, no queue), and their ratio.
//                       Both loops have the same shape: 64 callers, each starting its next call
//                       when the last one ended. preload_*: all requests submitted up front
//                       instead (the queue holds them; its 64 workers drain it).
//                       B4_PATH=queue|preload|transport runs one path alone (for a profiler),
//                       B4_VERBOSE=1 prints each round.
//   b4_http concurrency 1,000 calls in flight at once (1,000 workers; the mock, a separate
//                       process, holds each answer 2 s): peak RSS of this process, so the
//                       figure is laneq's and curl's alone, and what the server saw at once.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>
#include <cstdlib>

#include <asio/io_context.hpp>

#include "bench_util.hpp"
#include "laneq/laneq.hpp"
#include "laneq/providers/openai_format.hpp"
#include "mock_api/mock_server_thread.hpp"
#include "support/child_process.hpp"

using steady = std::chrono::steady_clock;

namespace {

// Calls that failed, on any path: a run with failures prints them and exits 1 (its req/s would
// count answers that were errors).
int failures = 0;

constexpr int in_flight = 64;

double transport_alone(const std::string& base, int n) {
  asio::io_context io;
  laneq::CurlTransport transport(io.get_executor());
  const laneq::HttpRequest proto{
      .method = "POST",
      .url = base + "/v1/chat/completions",
      .headers = {{"Content-Type", "application/json"}, {"Authorization", "Bearer sk-bench"}},
      .body = laneq::openai::request_body(laneq::Request{
          .model = "bench", .messages = {{"user", "hello"}}, .max_tokens = 16})};
  int started = 0, done = 0;
  std::function<void()> next = [&] {
    if (started == n) return;
    ++started;
    laneq::async_http(transport, proto, [&](std::error_code ec, laneq::HttpResponse r) {
      const auto j = nlohmann::json::parse(r.body, nullptr, false);  // as the provider does
      if (ec || r.status != 200 || j.is_discarded()) {
        if (failures++ == 0)
          std::fprintf(stderr, "b4_http: transport failure: %d %s\n", r.status, r.error.c_str());
      }
      ++done;
      next();
    });
  };
  const auto t0 = steady::now();
  for (int i = 0; i < in_flight; ++i) next();
  io.run();
  return done / std::chrono::duration<double>(steady::now() - t0).count();
}

// preload = false: 64 callers, each submitting its next request when the last one resolved (the
// transport-alone loop's shape: 64 in flight, nothing queued). preload = true: all n submitted up
// front, so the queue holds them and its 64 workers drain it.
double queue_path(const std::string& base, int n, bool preload = false) {
  asio::io_context io;
  laneq::CurlTransport transport(io.get_executor());
  laneq::OpenAIProvider provider(transport, {.api_key = "sk-bench", .base_url = base});
  laneq::RequestQueue queue(io.get_executor(), provider,
                            {.workers = in_flight, .max_pending = static_cast<std::size_t>(n)});
  queue.start();
  int submitted = 0, done = 0;
  std::function<void()> next = [&] {
    if (submitted == n) return;
    ++submitted;
    queue.async_submit(laneq::Request{.model = "bench", .messages = {{"user", "hello"}},
                                      .max_tokens = 16},
                       {}, [&](std::error_code ec, laneq::Response) {
                         if (ec && failures++ == 0)
                           std::fprintf(stderr, "b4_http: queue failure: %s\n", ec.message().c_str());
                         if (++done == n) queue.async_shutdown({}, [](std::error_code) {});
                         if (!preload) next();
                       });
  };
  const auto t0 = steady::now();
  for (int i = 0; i < (preload ? n : in_flight); ++i) next();
  io.run();
  return done / std::chrono::duration<double>(steady::now() - t0).count();
}

}  // namespace

int concurrency() {
  constexpr int n = 1000;
  laneq::test::ChildProcess mock(LANEQ_MOCK_API_EXE, {"--latency-ms", "2000"});
  const auto line = mock.read_stdout(true, std::chrono::seconds(10));
  const auto colon = line.rfind(':');
  if (colon == std::string::npos) {
    std::fprintf(stderr, "b4_http: laneq-mock-api did not start: %s\n", line.c_str());
    return 1;
  }
  const std::string base = "http://127.0.0.1:" + std::to_string(std::atoi(line.c_str() + colon + 1));
  const double rss_before = peak_rss_mb();

  asio::io_context io;
  laneq::CurlTransport transport(io.get_executor());
  laneq::OpenAIProvider provider(transport, {.api_key = "sk-bench", .base_url = base});
  laneq::RequestQueue queue(io.get_executor(), provider, {.workers = n});
  queue.start();
  int done = 0, failed = 0;
  nlohmann::json seen;
  const auto t0 = steady::now();
  for (int i = 0; i < n; ++i)
    queue.async_submit(laneq::Request{.model = "bench", .messages = {{"user", "hello"}},
                                      .max_tokens = 16},
                       {}, [&](std::error_code ec, laneq::Response) {
                         if (ec) ++failed;
                         if (++done < n) return;
                         laneq::async_http(transport, {.method = "GET", .url = base + "/stats"},
                                           [&](std::error_code, laneq::HttpResponse r) {
                                             seen = nlohmann::json::parse(r.body, nullptr, false);
                                             queue.async_shutdown({}, [](std::error_code) {});
                                           });
                       });
  io.run();
  const double secs = std::chrono::duration<double>(steady::now() - t0).count();
  if (!seen.is_object()) {  // the server's counts are the point of this mode
    std::fprintf(stderr, "b4_http: GET /stats from the mock server failed\n");
    return 1;
  }
  std::printf(
      "{\"bench\":\"B4-concurrency\",\"in_flight\":%d,\"failed\":%d,"
      "\"server_peak_in_flight\":%s,\"server_peak_connections\":%s,\"seconds\":%.2f,"
      "\"rss_before_mb\":%.1f,\"peak_rss_mb\":%.1f}\n",
      n, failed, seen.value("peak_in_flight", nlohmann::json()).dump().c_str(),
      seen.contains("connections") ? seen["connections"]["peak"].dump().c_str() : "null", secs,
      rss_before, peak_rss_mb());
  // The claim is n calls on the wire at once (2 s each); fewer (a transport that caps its
  // connections) would make the figures, memory per call included, another benchmark's.
  if (seen.value("peak_in_flight", 0) < n) {
    std::fprintf(stderr, "b4_http: the server saw at most %d calls at once, not %d\n",
                 seen.value("peak_in_flight", 0), n);
    return 1;
  }
  return failed == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "ratio";
  if (mode == "concurrency") return concurrency();
  if (mode != "ratio") {
    std::fprintf(stderr, "usage: b4_http [ratio|concurrency]\n");
    return 2;
  }
  // (5 rounds of n / 5 calls each: fewer than 5 would make rounds of none)
  const auto count = count_arg(std::getenv("B4_N"), 20000);
  if (!count || *count < 5 || *count > 100'000'000) {
    std::fprintf(stderr, "b4_http: B4_N must be a whole number from 5 to 100000000\n");
    return 2;
  }
  const int n = static_cast<int>(*count);
  laneq::mock::MockServerThread mock;
  if (const char* only = std::getenv("B4_PATH")) {
    const std::string path = only;
    const double rate = path == "transport" ? transport_alone(mock.base_url(), n)
                                            : queue_path(mock.base_url(), n, path == "preload");
    std::printf("{\"bench\":\"B4\",\"mode\":\"%s\",\"n\":%d,\"req_per_s\":%.0f,\"failed\":%d}\n",
                path.c_str(), n, rate, failures);
    return failures == 0 ? 0 : 1;
  }
  // Rounds alternate the two paths, so a burst of noise on this machine hits both alike; the
  // figures are medians over the rounds, the ratio the median of the per-round ratios.
  constexpr int rounds = 5;
  transport_alone(mock.base_url(), 500);  // warm-up
  std::vector<double> t, q, p, r, rp;
  for (int i = 0; i < rounds; ++i) {
    t.push_back(transport_alone(mock.base_url(), n / rounds));
    q.push_back(queue_path(mock.base_url(), n / rounds));
    p.push_back(queue_path(mock.base_url(), n / rounds, true));
    r.push_back(q.back() / t.back());
    rp.push_back(p.back() / t.back());
    if (std::getenv("B4_VERBOSE"))
      std::fprintf(stderr, "round %d: transport %.0f queue %.0f preload %.0f req/s\n", i, t.back(),
                   q.back(), p.back());
  }
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf(
      "{\"bench\":\"B4\",\"mode\":\"ratio\",\"n\":%d,\"rounds\":%d,\"in_flight\":%d,"
      "\"queue_req_per_s\":%.0f,\"transport_req_per_s\":%.0f,\"ratio\":%.3f,"
      "\"preload_req_per_s\":%.0f,\"preload_ratio\":%.3f,\"peak_rss_mb\":%.1f,\"failed\":%d}\n",
      n, rounds, in_flight, median(q), median(t), median(r), median(p), median(rp), peak_rss_mb(),
      failures);
  return failures == 0 ? 0 : 1;
}
