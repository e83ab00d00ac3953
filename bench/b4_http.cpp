// B4 end-to-end HTTP (DESIGN.md): against the mock API server on loopback (its own thread),
// zero latency, no limits, 64 in flight. Reports req/s through the whole queue path (submit ->
// OpenAIProvider -> CurlTransport -> JSON -> resume) beside the transport alone (the same
// requests with async_http, no queue), and their ratio; plus peak RSS.
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include <asio/io_context.hpp>

#include "bench_util.hpp"
#include "laneq/laneq.hpp"
#include "laneq/providers/openai_format.hpp"
#include "mock_api/mock_server_thread.hpp"

using steady = std::chrono::steady_clock;

namespace {

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
      if (ec || r.status != 200) std::fprintf(stderr, "transport failure: %s\n", r.error.c_str());
      const auto j = nlohmann::json::parse(r.body, nullptr, false);  // as the provider does
      if (j.is_discarded()) std::fprintf(stderr, "bad JSON\n");
      ++done;
      next();
    });
  };
  const auto t0 = steady::now();
  for (int i = 0; i < in_flight; ++i) next();
  io.run();
  return done / std::chrono::duration<double>(steady::now() - t0).count();
}

double queue_path(const std::string& base, int n) {
  asio::io_context io;
  laneq::CurlTransport transport(io.get_executor());
  laneq::OpenAIProvider provider(transport, {.api_key = "sk-bench", .base_url = base});
  laneq::RequestQueue queue(io.get_executor(), provider,
                            {.workers = in_flight, .max_pending = static_cast<std::size_t>(n)});
  queue.start();
  int done = 0;
  const auto t0 = steady::now();
  for (int i = 0; i < n; ++i)
    queue.async_submit(laneq::Request{.model = "bench", .messages = {{"user", "hello"}},
                                      .max_tokens = 16},
                       {}, [&](std::error_code ec, laneq::Response) {
                         if (ec) std::fprintf(stderr, "queue failure: %s\n", ec.message().c_str());
                         if (++done == n) queue.async_shutdown({}, [](std::error_code) {});
                       });
  io.run();
  return done / std::chrono::duration<double>(steady::now() - t0).count();
}

}  // namespace

int main() {
  const int n = std::getenv("B4_N") ? std::atoi(std::getenv("B4_N")) : 20000;
  laneq::mock::MockServerThread mock;
  transport_alone(mock.base_url(), 500);  // warm-up
  const double t = transport_alone(mock.base_url(), n);
  const double q = queue_path(mock.base_url(), n);
  std::printf(
      "{\"bench\":\"B4\",\"n\":%d,\"in_flight\":%d,\"queue_req_per_s\":%.0f,"
      "\"transport_req_per_s\":%.0f,\"ratio\":%.3f,\"peak_rss_mb\":%.1f}\n",
      n, in_flight, q, t, q / t, peak_rss_mb());
}
