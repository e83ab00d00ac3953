#include "mock_api/mock_config.hpp"

#include <stdexcept>
#include <string>

namespace laneq::mock {

namespace {

void require(bool ok, const char* field, const char* rule) {
  if (!ok) throw std::invalid_argument(std::string("MockConfig::") + field + " " + rule);
}

}  // namespace

void validate(const MockConfig& c) {
  require(c.latency.count() >= 0, "latency", "must be >= 0");
  require(c.jitter.count() >= 0, "jitter", "must be >= 0");
  require(c.stream_chunk_delay.count() >= 0, "stream_chunk_delay", "must be >= 0");
  require(c.completion_tokens >= 1, "completion_tokens", "must be >= 1");
  require(c.rpm >= 0, "rpm", "must be >= 0 (0 = no limit)");
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
