#pragma once
// MockConfig: how the mock API server answers — latency, server-side rate limits, error
// injection. A plain aggregate with documented defaults; validate() checks it once (MockServer
// does) and names the bad field.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace laneq::mock {

struct MockConfig {
  unsigned short port = 0;  // 0 = any free port; the server only ever binds 127.0.0.1

  // Delay before each API answer: latency + uniform [0, jitter]. Streams wait before their
  // headers, then stream_chunk_delay between events.
  std::chrono::milliseconds latency{0};
  std::chrono::milliseconds jitter{0};
  std::chrono::milliseconds stream_chunk_delay{0};

  std::int64_t completion_tokens = 16;  // answer size in tokens, capped by the request's max_tokens

  // Server-side token buckets per API key, in units per minute, refilled continuously and
  // starting full; 0 = no limit. A call is charged 1 request and, up front, prompt tokens +
  // max_tokens (completion_tokens when the request has none), as the providers do.
  std::int64_t rpm = 0;
  // A minute's request limit enforced in short slices, as providers may (DESIGN: 60 RPM as 1
  // per second): a second requests bucket holds rpm x rpm_slice / 1 min (at least 1),
  // refilled at rpm per minute; the headers show the minute's bucket. 0 = none. 0..60,000 ms.
  std::chrono::milliseconds rpm_slice{0};
  std::int64_t tpm = 0;
  std::int64_t input_tpm = 0;        // Anthropic only: prompt tokens
  std::int64_t output_tpm = 0;       // Anthropic only: max_tokens
  bool refund_unused_tokens = true;  // unused max_tokens come back after the answer (Anthropic)
  bool rate_limit_headers_on_429 = true;  // false: 429s carry no rate-limit/retry-after headers
  bool round_anthropic_tokens = false;    // Anthropic token `remaining` to the nearest 1000
  std::optional<bool> should_retry{};     // x-should-retry on every error answer when set

  // Error injection: the share of admitted API calls answered this way. Each 0..1, sum <= 1.
  double error_rate_500 = 0.0;           // 500 (OpenAI server_error / Anthropic api_error)
  double error_rate_503 = 0.0;           // 503
  double error_rate_529 = 0.0;           // 529 overloaded_error
  double insufficient_quota_rate = 0.0;  // OpenAI 429 insufficient_quota (Anthropic: 400 billing)
  double too_large_rate = 0.0;           // Anthropic 413 request_too_large (OpenAI: 429 "Request too large")
  double reset_rate = 0.0;               // connection reset (RST) instead of an answer
  double malformed_rate = 0.0;           // 200 whose body is not valid JSON
  double stall_rate = 0.0;               // headers + part of the body, then silence until the client closes
  double stream_error_rate = 0.0;        // streams: an error event after some content
  double stream_cut_rate = 0.0;          // streams: closed before the final/usage events (plain: body cut)

  std::uint64_t seed = 42;                   // jitter and error injection draws
  std::size_t max_body_bytes = 32u << 20;    // larger request bodies get 413
  std::size_t stats_max_keys = 100'000;      // distinct values per /stats map; more count as "_other"
};

// Throws std::invalid_argument naming the field ("MockConfig::rpm must be >= 0").
void validate(const MockConfig& config);

}  // namespace laneq::mock
