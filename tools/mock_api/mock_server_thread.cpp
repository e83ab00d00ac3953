#include "mock_api/mock_server_thread.hpp"

namespace laneq::mock {

MockServerThread::MockServerThread(MockConfig config) {
  server_.emplace(io_, std::move(config));
  server_->start();
  thread_ = std::thread([this] { io_.run(); });
}

MockServerThread::~MockServerThread() {
  // stop() closes the listener and every connection; run() returns once their coroutines end.
  server_->stop();
  thread_.join();
  server_.reset();
}

}  // namespace laneq::mock
