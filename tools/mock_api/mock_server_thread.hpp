#pragma once
// MockServerThread: a MockServer on its own io_context and thread, for test fixtures and
// programs that do not run an io_context. The destructor stops the server and joins the thread.
#include <optional>
#include <thread>

#include <asio/io_context.hpp>

#include "mock_api/mock_server.hpp"

namespace laneq::mock {

class MockServerThread {
 public:
  explicit MockServerThread(MockConfig config = {});
  ~MockServerThread();
  MockServerThread(const MockServerThread&) = delete;
  MockServerThread& operator=(const MockServerThread&) = delete;

  unsigned short port() const noexcept { return server_->port(); }
  std::string base_url() const { return server_->base_url(); }
  nlohmann::json stats() const { return server_->stats(); }
  void reset_stats() { server_->reset_stats(); }
  void reset() { server_->reset(); }
  bool wait_stats(const std::function<bool(const nlohmann::json&)>& pred,
                  std::chrono::milliseconds timeout = std::chrono::seconds(10)) const {
    return server_->wait_stats(pred, timeout);
  }
  void set_config(MockConfig config) { server_->set_config(std::move(config)); }
  MockConfig config() const { return server_->config(); }
  void script(std::vector<MockOutcome> outcomes) { server_->script(std::move(outcomes)); }
  MockServer& server() noexcept { return *server_; }

 private:
  asio::io_context io_{};
  std::optional<MockServer> server_;
  std::thread thread_;
};

}  // namespace laneq::mock
