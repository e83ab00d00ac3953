#pragma once
// `laneq run`: pushes a JSONL file of OpenAI Batch API lines through a RequestQueue (lanes,
// fairness, rate limits, retries, optional journal for crash-safe resume) and writes one output
// line per input line as each finishes.
#include <chrono>
#include <cstdint>
#include <string>

namespace laneq::cli {

struct RunOptions {
  std::string input;                 // requests.jsonl
  std::string output;                // results.jsonl
  std::string provider = "openai";   // openai | anthropic
  std::string base_url;              // "" = the provider's default / environment
  std::int64_t rpm = 0;              // requests per minute, 0 = no limit
  std::int64_t tpm = 0;              // tokens per minute, 0 = no limit
  bool smooth = false;               // space starts evenly instead of bursting
  bool fair_by_tokens = false;       // clients of a lane share its tokens, not its lines
  std::int64_t workers = 8;          // calls in flight at most
  std::int64_t reserved_workers = 1; // of those, kept for critical lines (< workers)
  bool reserved_workers_given = false;  // said on the command line (else capped at workers - 1)
  std::string journal;               // "" = not durable, no resume
  std::chrono::seconds timeout{0};   // per call attempt (the transport's); 0 = none
  std::int64_t max_attempts = 3;     // calls per line, retries included
  bool mock = false;                 // start the bundled mock API server and call it
  std::chrono::milliseconds mock_latency{50};
  bool mock_latency_given = false;
  std::chrono::milliseconds mock_rpm_slice{0};  // MockConfig::rpm_slice
  bool mock_rpm_slice_given = false;
  std::string progress = "auto";     // auto | bar | plain | none
  std::chrono::milliseconds progress_interval{5000};  // plain lines
  bool help = false;
};

// Exit codes (README): 0 every line succeeded (this run or an earlier one); 1 some line failed
// or was malformed, or with --mock the mock answered a 429; 2 bad usage or set-up (flags, files, API key, journal); 130 interrupted by
// SIGINT/SIGTERM before every line ran (run again with the same --journal to resume).
int run_batch(const RunOptions& options);

}  // namespace laneq::cli
