// The CLI's progress display and summary (tools/cli/progress), with time passed in.
#include <catch2/catch.hpp>

#include "cli/progress.hpp"

using namespace std::chrono_literals;
using laneq::cli::ProgressState;

namespace {
ProgressState sample() {
  ProgressState s;
  s.total = 300;
  s.done = 150;
  s.ok = 148;
  s.failed = 2;
  s.lanes = {{"critical", 10, 10, 10, 0}, {"background", 290, 140, 138, 2}};
  s.requests_per_s = 12.5;
  s.tokens_per_min = 42'000;
  s.tpm_limit = 100'000;
  s.rpm_limit = 1200;
  s.rate_limited = 3;
  s.eta_s = 12.0;
  return s;
}
}  // namespace

TEST_CASE("the terminal bar shows done/total, lanes, rates against limits, 429s and ETA",
          "[cli]") {
  const auto bar = laneq::cli::render_bar(sample(), 200);
  CHECK(bar.rfind("[", 0) == 0);
  CHECK(bar.find("150/300  50%") != std::string::npos);
  CHECK(bar.find("(2 failed)") != std::string::npos);
  CHECK(bar.find("critical 10/10 background 140/290") != std::string::npos);
  CHECK(bar.find("12.5 req/s (limit 1.2k/min)") != std::string::npos);
  CHECK(bar.find("42k tok/min of 100k") != std::string::npos);
  CHECK(bar.find("429s 3") != std::string::npos);
  CHECK(bar.find("ETA 12s") != std::string::npos);
  CHECK(laneq::cli::render_bar(sample(), 60).size() == 60);  // cut to the terminal
  auto almost = sample();
  almost.done = 299;  // 99.67 %: not 100 % while a line is left
  CHECK(laneq::cli::render_bar(almost, 200).find("299/300  99%") != std::string::npos);
  almost.done = 87;  // 29 %, which floor(87.0 / 300 * 100) reads as 28
  CHECK(laneq::cli::render_bar(almost, 200).find("87/300  29%") != std::string::npos);
  almost.done = 300;
  CHECK(laneq::cli::render_bar(almost, 200).find("300/300 100%") != std::string::npos);
}

TEST_CASE("a plain progress line stands alone in a log", "[cli]") {
  auto s = sample();
  s.eta_s.reset();
  const auto line = laneq::cli::render_plain(s, 65s);
  CHECK(line.rfind("laneq: 1m05s 150/300 done (148 ok, 2 failed)", 0) == 0);
  CHECK(line.find("ETA ?") != std::string::npos);
}

TEST_CASE("the summary has a row per lane and a total", "[cli]") {
  const auto table = laneq::cli::render_summary(
      {{"critical", 10, 10, 0, 0, 1.5, 3.0}, {"background", 290, 288, 2, 40, 800, 4000}});
  CHECK(table.find("lane") == 0);
  CHECK(table.find("critical") != std::string::npos);
  CHECK(table.find("4000ms") != std::string::npos);
  CHECK(table.find("all              300     298       2       40") != std::string::npos);
}

TEST_CASE("the rate meter counts recent completions and the last minute's tokens", "[cli]") {
  laneq::cli::RateMeter m(10s);
  const auto t0 = std::chrono::steady_clock::time_point{} + 1h;
  CHECK(m.per_second(t0) == 0);
  for (int i = 0; i < 100; ++i) m.add(t0 + i * 100ms, 10);  // 10 per second for 10 s
  CHECK(m.per_second(t0 + 10s) == Approx(9.9));  // the 99 after the first, in 10 s
  CHECK(m.per_second(t0 + 15s) == Approx(5.0));  // the window's 10 s: 50 completions
  CHECK(m.tokens_last_minute(t0 + 10s) == 1000);
  CHECK(m.per_second(t0 + 30s) == 0);                // nothing in the last 10 s
  CHECK(m.tokens_last_minute(t0 + 30s) == 1000);     // still within the minute
  CHECK(m.tokens_last_minute(t0 + 2min) == 0);
}

TEST_CASE("the rate does not count the completion its interval starts at - 8 completions in "
          "10 ms are 700 per second, not 800",
          "[cli]") {
  laneq::cli::RateMeter m(10s);
  const auto t0 = std::chrono::steady_clock::time_point{} + 1h;
  for (int i = 0; i < 8; ++i) m.add(t0 + std::chrono::microseconds(i * 10'000 / 7), 0);
  CHECK(m.per_second(t0 + 10ms) == Approx(700.0));
  laneq::cli::RateMeter two(10s);
  two.add(t0, 0);
  CHECK(two.per_second(t0 + 500ms) == 0);  // one completion is no rate yet
  two.add(t0 + 1s, 0);
  CHECK(two.per_second(t0 + 1s) == Approx(1.0));  // one interval of 1 s, not 2 per second
  CHECK(two.per_second(t0 + 2s) == Approx(0.5));
}

TEST_CASE("no ETA until the rate rests on at least 1 s of completions", "[cli]") {
  laneq::cli::RateMeter m(10s);
  const auto t0 = std::chrono::steady_clock::time_point{} + 1h;
  CHECK_FALSE(m.eta_s(t0, 100));  // no completion yet
  for (int i = 0; i < 8; ++i) m.add(t0 + std::chrono::milliseconds(i), 0);
  CHECK_FALSE(m.eta_s(t0 + 10ms, 1000));  // was "ETA 0s" at 800 req/s
  CHECK_FALSE(m.eta_s(t0 + 999ms, 1000));
  CHECK(m.eta_s(t0 + 10ms, 0) == 0.0);  // nothing left: done
  auto s = sample();
  s.eta_s = m.eta_s(t0 + 10ms, 150);
  CHECK(laneq::cli::render_bar(s, 200).find("ETA ?") != std::string::npos);  // unknown
  m.add(t0 + 1s, 0);
  const auto eta = m.eta_s(t0 + 1s, 80);  // 8 completions after the first in 1 s
  REQUIRE(eta);
  CHECK(*eta == Approx(10.0));
}

TEST_CASE("lines left never wrap below zero and an interrupt is exit 130 only when it left lines "
          "unrun",
          "[cli]") {
  using laneq::cli::lines_left;
  using laneq::cli::run_exit_code;
  ProgressState s;
  s.total = 10;
  s.done = 10;
  s.ok = 10;
  CHECK(lines_left(s) == 0);
  CHECK(run_exit_code(s, false) == 0);
  CHECK(run_exit_code(s, true) == 0);  // a signal during the final drain: every line done
  s.ok = 9;
  s.failed = 1;
  CHECK(run_exit_code(s, true) == 1);
  s.done = 7;
  CHECK(lines_left(s) == 3);
  CHECK(run_exit_code(s, true) == 130);  // interrupted with 3 lines not run
  CHECK(run_exit_code(s, false) == 1);   // lines left without an interrupt: never a success
  s.done = 12;                           // a line counted twice
  CHECK(lines_left(s) == 0);
  CHECK(run_exit_code(s, true) == 1);
}

TEST_CASE("durations read as people write them", "[cli]") {
  CHECK(laneq::cli::format_duration(0) == "0s");
  CHECK(laneq::cli::format_duration(42.4) == "42s");
  CHECK(laneq::cli::format_duration(65) == "1m05s");
  CHECK(laneq::cli::format_duration(7380) == "2h03m");
  CHECK(laneq::cli::format_duration(-5) == "0s");
}
