#include "mock_api/key_limits.hpp"

#include <algorithm>
#include <cmath>

namespace laneq::mock {

namespace {

constexpr double minute_ns = 60e9;

}  // namespace

TokenBucket::TokenBucket(std::int64_t limit_per_minute, SteadyTime now, std::int64_t capacity)
    : limit_(limit_per_minute),
      capacity_(static_cast<double>(capacity > 0 ? capacity : limit_per_minute)),
      level_(capacity_),
      at_(now) {}

void TokenBucket::refill(SteadyTime now) noexcept {
  if (now <= at_) return;
  level_ = std::min(capacity_,
                    level_ + static_cast<double>((now - at_).count()) * static_cast<double>(limit_) /
                                 minute_ns);
  at_ = now;
}

double TokenBucket::level(SteadyTime now) const noexcept {
  TokenBucket b = *this;
  b.refill(now);
  return b.level_;
}

std::optional<std::chrono::nanoseconds> TokenBucket::wait_for(double amount,
                                                              SteadyTime now) const noexcept {
  if (!limited()) return std::chrono::nanoseconds{0};
  if (amount > capacity_) return std::nullopt;
  const double missing = amount - level(now);
  if (missing <= 0) return std::chrono::nanoseconds{0};
  return std::chrono::nanoseconds(
      static_cast<std::int64_t>(std::ceil(missing * minute_ns / static_cast<double>(limit_))));
}

std::chrono::nanoseconds TokenBucket::until_full(SteadyTime now) const noexcept {
  if (!limited()) return std::chrono::nanoseconds{0};
  const double missing = capacity_ - level(now);
  return std::chrono::nanoseconds(
      static_cast<std::int64_t>(std::ceil(missing * minute_ns / static_cast<double>(limit_))));
}

void TokenBucket::take(double amount, SteadyTime now) noexcept {
  if (!limited()) return;
  refill(now);
  level_ -= amount;
}

void TokenBucket::give(double amount, SteadyTime now) noexcept {
  if (!limited()) return;
  refill(now);
  level_ = std::min(capacity_, level_ + amount);
}

namespace {
// MockConfig::rpm_slice's bucket: rpm x slice / 1 min (at least 1), refilled at rpm; unlimited
// when no slice is set.
TokenBucket slice_bucket(const MockConfig& c, SteadyTime now) {
  if (c.rpm_slice.count() <= 0 || c.rpm <= 0) return {};
  const auto units = static_cast<std::int64_t>(static_cast<long double>(c.rpm) *
                                               static_cast<long double>(c.rpm_slice.count()) /
                                               60'000);
  return TokenBucket(c.rpm, now, std::max<std::int64_t>(units, 1));
}
}  // namespace

KeyLimits::KeyLimits(const MockConfig& config, SteadyTime now)
    : requests_(config.rpm, now),
      tokens_(config.tpm, now),
      input_(config.input_tpm, now),
      output_(config.output_tpm, now),
      requests_slice_(slice_bucket(config, now)) {}

std::optional<Rejection> KeyLimits::take(const Charge& charge, SteadyTime now) {
  const struct {
    TokenBucket& bucket;
    double amount;
    std::string_view name;
  } parts[] = {{requests_, charge.requests, "requests"},
               {requests_slice_, charge.requests, "requests"},
               {tokens_, charge.tokens, "tokens"},
               {input_, charge.input_tokens, "input_tokens"},
               {output_, charge.output_tokens, "output_tokens"}};
  const auto counts = [](const auto& p) { return p.bucket.limited() && p.amount > 0; };
  // A charge some bucket can never hold is refused naming that bucket (not the first one that
  // is only short for now).
  for (const auto& p : parts)
    if (counts(p) && !p.bucket.wait_for(p.amount, now))
      return Rejection{p.name, p.bucket.limit(), p.amount, std::nullopt};
  for (const auto& p : parts) {
    if (!counts(p)) continue;
    if (const auto wait = *p.bucket.wait_for(p.amount, now); wait.count() > 0) {
      // Report when the whole charge fits: the longest wait over every bucket.
      auto retry = wait;
      for (const auto& q : parts)
        if (counts(q)) retry = std::max(retry, *q.bucket.wait_for(q.amount, now));
      return Rejection{p.name, p.bucket.limit(), p.amount, retry};
    }
  }
  for (const auto& p : parts)
    if (p.amount > 0) p.bucket.take(p.amount, now);
  return std::nullopt;
}

void KeyLimits::give_back(const Charge& charge, SteadyTime now) {
  requests_.give(charge.requests, now);
  requests_slice_.give(charge.requests, now);
  tokens_.give(charge.tokens, now);
  input_.give(charge.input_tokens, now);
  output_.give(charge.output_tokens, now);
}

LimitsSnapshot KeyLimits::snapshot(SteadyTime now) const {
  const auto view = [&](const TokenBucket& b) {
    BucketView v;
    v.limited = b.limited();
    v.limit = b.limit();
    v.remaining = b.limited() ? static_cast<std::int64_t>(std::floor(std::max(0.0, b.level(now))))
                              : 0;
    v.reset_after = b.until_full(now);
    return v;
  };
  return {view(requests_), view(tokens_), view(input_), view(output_)};
}

}  // namespace laneq::mock
