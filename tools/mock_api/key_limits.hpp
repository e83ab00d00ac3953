#pragma once
// KeyLimits: the server-side rate limits of one API key — token buckets for requests, tokens,
// input tokens and output tokens, each `limit` per minute, refilled continuously, starting full
// (and, with MockConfig::rpm_slice, a second requests bucket holding only a slice's share).
// Pure: the caller passes `now`.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

#include "mock_api/mock_config.hpp"

namespace laneq::mock {

using SteadyTime = std::chrono::steady_clock::time_point;

class TokenBucket {
 public:
  TokenBucket() = default;  // unlimited
  // Holds `capacity` units (0: a whole minute's limit), refilled at limit_per_minute.
  TokenBucket(std::int64_t limit_per_minute, SteadyTime now, std::int64_t capacity = 0);

  bool limited() const noexcept { return limit_ > 0; }
  std::int64_t limit() const noexcept { return limit_; }
  double level(SteadyTime now) const noexcept;
  // Time until `amount` is available; nullopt when it exceeds the capacity (never).
  std::optional<std::chrono::nanoseconds> wait_for(double amount, SteadyTime now) const noexcept;
  std::chrono::nanoseconds until_full(SteadyTime now) const noexcept;
  void take(double amount, SteadyTime now) noexcept;
  void give(double amount, SteadyTime now) noexcept;  // capped at the capacity

 private:
  void refill(SteadyTime now) noexcept;
  std::int64_t limit_ = 0;
  double capacity_ = 0;
  double level_ = 0;
  SteadyTime at_{};
};

struct Charge {
  double requests = 1;
  double tokens = 0;
  double input_tokens = 0;
  double output_tokens = 0;
};

struct Rejection {
  std::string_view bucket;  // "requests", "tokens", "input_tokens" or "output_tokens"
  std::int64_t limit = 0;
  double requested = 0;
  std::optional<std::chrono::nanoseconds> retry_after{};  // nullopt: the charge can never fit
};

struct BucketView {
  bool limited = false;
  std::int64_t limit = 0;
  std::int64_t remaining = 0;            // whole units available now
  std::chrono::nanoseconds reset_after{0};  // until the bucket is full again
};

struct LimitsSnapshot {
  BucketView requests, tokens, input_tokens, output_tokens;
};

class KeyLimits {
 public:
  KeyLimits(const MockConfig& config, SteadyTime now);

  // Takes the whole charge, or nothing and says which bucket is short (the first that is,
  // in the order requests, tokens, input, output) and when the charge would fit.
  std::optional<Rejection> take(const Charge& charge, SteadyTime now);
  void give_back(const Charge& charge, SteadyTime now);
  LimitsSnapshot snapshot(SteadyTime now) const;

 private:
  TokenBucket requests_, tokens_, input_, output_;
  // MockConfig::rpm_slice: the same rpm enforced in short slices too. The headers show the
  // minute's bucket, as the providers' do.
  TokenBucket requests_slice_;
};

}  // namespace laneq::mock
