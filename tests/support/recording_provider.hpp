#pragma once
// A Provider that records which request (by its first message's text, and its Request::id)
// reached it and when, then delegates to a SimulatedProvider (`inner`, for scripts and observations).
#include <chrono>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "laneq/simulated_provider.hpp"

namespace laneq::test {

class RecordingProvider final : public Provider {
 public:
  using clock = std::chrono::steady_clock;

  explicit RecordingProvider(SimulatedProviderConfig c = {}) : inner(std::move(c)) {}

  void async_call(const Request& r, const CallContext& ctx, CallCompletion done) noexcept override {
    {
      std::lock_guard lock(mu_);
      starts_.emplace_back(r.messages.at(0).content, clock::now());
      ids_.push_back(r.id);
    }
    inner.async_call(r, ctx, std::move(done));
  }
  const char* name() const noexcept override { return "recording"; }

  // (text, start time) of every call, in call order.
  std::vector<std::pair<std::string, clock::time_point>> starts() {
    std::lock_guard lock(mu_);
    return starts_;
  }
  // The texts alone, in call order.
  std::vector<std::string> seen() {
    std::vector<std::string> out;
    for (auto& [text, at] : starts()) out.push_back(text);
    return out;
  }

  // The Request::id of every call, in call order.
  std::vector<std::string> ids() {
    std::lock_guard lock(mu_);
    return ids_;
  }

  SimulatedProvider inner;

 private:
  std::mutex mu_;
  std::vector<std::pair<std::string, clock::time_point>> starts_;
  std::vector<std::string> ids_;
};

}  // namespace laneq::test
