#include "mock_api/mock_config.hpp"

#include <chrono>
#include <stdexcept>
#include <string>

namespace laneq::mock {

namespace {

void require(bool ok, const char* field, const char* rule) {
  if (!ok) throw std::invalid_argument(std::string("MockConfig::") + field + " " + rule);
}

}  // namespace

void validate(const MockConfig& c) {
  // (bounded so that they convert to nanoseconds, and add up, without overflow:
  // milliseconds::max() as "never answer" would wrap negative, an answer at once)
  constexpr std::chrono::milliseconds century = std::chrono::hours(24 * 36525);
  require(c.latency.count() >= 0 && c.latency <= century, "latency", "must be in [0, 100 years]");
  require(c.jitter.count() >= 0 && c.jitter <= century, "jitter", "must be in [0, 100 years]");
  require(c.stream_chunk_delay.count() >= 0 && c.stream_chunk_delay <= century,
          "stream_chunk_delay", "must be in [0, 100 years]");
  require(c.completion_tokens >= 1, "completion_tokens", "must be >= 1");
  require(c.rpm >= 0, "rpm", "must be >= 0 (0 = no limit)");
  require(c.rpm_slice.count() >= 0 && c.rpm_slice <= std::chrono::minutes(1), "rpm_slice",
          "must be in [0, 60000] ms (0 = the whole minute)");
  require(c.rpm_slice.count() == 0 || c.rpm > 0, "rpm_slice", "needs rpm (the limit it slices)");
  require(c.tpm >= 0, "tpm", "must be >= 0 (0 = no limit)");
  require(c.input_tpm >= 0, "input_tpm", "must be >= 0 (0 = no limit)");
  require(c.output_tpm >= 0, "output_tpm", "must be >= 0 (0 = no limit)");
  require(c.max_body_bytes >= 1, "max_body_bytes", "must be >= 1");
  require(c.stats_max_keys >= 1, "stats_max_keys", "must be >= 1");
  const struct {
    double value;
    const char* name;
  } rates[] = {{c.error_rate_500, "error_rate_500"},
               {c.error_rate_503, "error_rate_503"},
               {c.error_rate_529, "error_rate_529"},
               {c.insufficient_quota_rate, "insufficient_quota_rate"},
               {c.too_large_rate, "too_large_rate"},
               {c.reset_rate, "reset_rate"},
               {c.malformed_rate, "malformed_rate"},
               {c.stall_rate, "stall_rate"},
               {c.stream_error_rate, "stream_error_rate"},
               {c.stream_cut_rate, "stream_cut_rate"}};
  double sum = 0;
  for (const auto& r : rates) {
    require(r.value >= 0.0 && r.value <= 1.0, r.name, "must be in [0, 1]");
    sum += r.value;
  }
  if (sum > 1.0 + 1e-9)
    throw std::invalid_argument("MockConfig: the error injection rates add up to more than 1");
}

}  // namespace laneq::mock
