#pragma once
// MockServer: a mock OpenAI / Anthropic API server — real HTTP/1.1 with keep-alive — on
// 127.0.0.1, running on the caller's io_context. It answers POST /v1/chat/completions and
// POST /v1/messages (plain and streamed), enforces per-API-key rate limits, injects faults, and
// reports what it saw on GET /stats. See docs/mock_api.md.
//
// Threads: the io_context may be run by any number of threads (each connection has its own
// strand). stats(), reset*(), set_config(), script() and stop() are thread-safe.
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "mock_api/mock_config.hpp"
#include "mock_api/mock_outcome.hpp"

namespace laneq::mock {

namespace detail {
struct ServerCore;
}

class MockServer {
 public:
  // Validates `config` (std::invalid_argument) and binds 127.0.0.1:config.port, listening at
  // once: connections made before start() wait in the backlog. A taken port throws
  // std::system_error.
  MockServer(asio::io_context& io, MockConfig config = {});
  ~MockServer();  // stop()
  MockServer(const MockServer&) = delete;
  MockServer& operator=(const MockServer&) = delete;

  unsigned short port() const noexcept;
  std::string base_url() const;  // "http://127.0.0.1:<port>"

  void start();  // starts accepting; once
  // Closes the listener and every connection (answers being prepared are dropped). Returns at
  // once; the io_context runs out of the server's work soon after. Idempotent.
  void stop();

  nlohmann::json stats() const;  // the GET /stats body
  void reset_stats();
  void reset();  // stats, rate-limit buckets and script (POST /control/reset)
  // Blocks until pred(stats()) holds or `timeout` passes; returns whether it held.
  bool wait_stats(const std::function<bool(const nlohmann::json&)>& pred,
                  std::chrono::milliseconds timeout = std::chrono::seconds(10)) const;

  // Later calls use `config` (its port is ignored); the rate-limit buckets restart full.
  void set_config(MockConfig config);
  MockConfig config() const;
  // Appended (POST /control/script); all or none: an outcome out of bounds (see
  // outcome_from_json) throws std::invalid_argument.
  void script(std::vector<MockOutcome> outcomes);

 private:
  std::shared_ptr<detail::ServerCore> core_;
};

}  // namespace laneq::mock
