#pragma once
// What the CLI shows while it works and when it is done, pure (no I/O, time passed in): a live
// bar for a terminal, plain lines for logs, and the per-lane summary table.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

namespace laneq::cli {

struct LaneProgress {
  std::string name;
  std::size_t total = 0;   // lines of this lane in the file
  std::size_t done = 0;    // finished (this run or an earlier one)
  std::size_t ok = 0;
  std::size_t failed = 0;
};

struct ProgressState {
  std::size_t total = 0;             // lines in the file (bad ones included)
  std::size_t done = 0;              // finished, bad lines and earlier runs included
  std::size_t ok = 0;
  std::size_t failed = 0;            // failed + bad lines
  std::vector<LaneProgress> lanes;   // lanes with lines, in lane order
  double requests_per_s = 0;         // finished per second, recent
  std::int64_t tokens_per_min = 0;   // tokens used in the last minute
  std::int64_t tpm_limit = 0;        // 0 = none
  std::int64_t rpm_limit = 0;        // 0 = none
  std::uint64_t rate_limited = 0;    // 429 / 503 / 529 answers seen
  std::optional<double> eta_s;       // when a rate is known
};

// Lines not finished yet: total - done, never below 0 (a count gone wrong must not wrap).
std::size_t lines_left(const ProgressState& s) noexcept;

// The exit code of `laneq run` (README): 130 when an interrupt left lines unrun; otherwise 0
// if every line succeeded, 1 if one failed or was malformed (or, never expected, lines were
// left without an interrupt). A signal during the final drain, every line done, is no
// interruption.
int run_exit_code(const ProgressState& s, bool interrupted) noexcept;

// One line for a terminal, at most `width` columns (no newline; the caller redraws it with \r).
std::string render_bar(const ProgressState& s, std::size_t width);
// One self-contained line for a log.
std::string render_plain(const ProgressState& s, std::chrono::steady_clock::duration elapsed);

struct LaneSummary {
  std::string name;
  std::size_t count = 0, ok = 0, failed = 0, earlier = 0;  // earlier: finished in an earlier run
  double wait_p50_ms = 0, wait_p99_ms = 0;                  // queue wait, this run
};
std::string render_summary(const std::vector<LaneSummary>& lanes);

// Recent throughput: completions and tokens over a sliding window, time passed in. Events are
// kept in 100 ms buckets for a minute, so memory stays small at any rate.
class RateMeter {
 public:
  explicit RateMeter(std::chrono::steady_clock::duration window = std::chrono::seconds(10))
      : window_(window) {}
  void add(std::chrono::steady_clock::time_point now, std::int64_t tokens);
  // Completions per second over the window, or, while the first completion is younger than
  // the window, over the time since it (not counting it: it starts that interval).
  double per_second(std::chrono::steady_clock::time_point now);
  // Seconds to finish `left` more at that rate: 0 when none is left; none while the rate rests
  // on less than 1 s of completions (8 in the first 10 ms say little about the next 1000), or
  // is 0.
  std::optional<double> eta_s(std::chrono::steady_clock::time_point now, std::size_t left);
  std::int64_t tokens_last_minute(std::chrono::steady_clock::time_point now);

 private:
  void trim(std::chrono::steady_clock::time_point now);
  std::chrono::steady_clock::duration window_;
  struct Bucket {
    std::chrono::steady_clock::time_point start;
    std::int64_t count = 0;
    std::int64_t tokens = 0;
  };
  std::deque<Bucket> buckets_;  // the last minute
  std::optional<std::chrono::steady_clock::time_point> first_;
};

// "1m05s", "42s", "2h03m".
std::string format_duration(double seconds);

}  // namespace laneq::cli
