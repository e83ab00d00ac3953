#include "cli/progress.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace laneq::cli {

namespace {

std::string fmt(const char* format, auto... args) {
  char buf[256];
  const int n = std::snprintf(buf, sizeof buf, format, args...);
  return std::string(buf, static_cast<std::size_t>(std::clamp(n, 0, static_cast<int>(sizeof buf) - 1)));
}

// 1234 -> "1.2k", 2500000 -> "2.5M"
std::string compact(std::int64_t n) {
  if (n >= 10'000'000) return fmt("%.0fM", n / 1e6);
  if (n >= 1'000'000) return fmt("%.1fM", n / 1e6);
  if (n >= 10'000) return fmt("%.0fk", n / 1e3);
  if (n >= 1'000) return fmt("%.1fk", n / 1e3);
  return std::to_string(n);
}

std::string rates(const ProgressState& s) {
  std::string out = fmt("%.1f req/s", s.requests_per_s);
  if (s.rpm_limit > 0) out += fmt(" (limit %s/min)", compact(s.rpm_limit).c_str());
  out += ", " + compact(s.tokens_per_min) + " tok/min";
  if (s.tpm_limit > 0) out += " of " + compact(s.tpm_limit);
  return out;
}

std::string lanes_text(const ProgressState& s) {
  std::string out;
  for (const auto& l : s.lanes) {
    if (!out.empty()) out += ' ';
    out += l.name + ' ' + std::to_string(l.done) + '/' + std::to_string(l.total);
  }
  return out;
}

}  // namespace

std::string format_duration(double seconds) {
  const auto total = static_cast<long long>(std::llround(std::max(0.0, seconds)));
  if (total < 60) return fmt("%llds", total);
  if (total < 3600) return fmt("%lldm%02llds", total / 60, total % 60);
  return fmt("%lldh%02lldm", total / 3600, (total % 3600) / 60);
}

std::size_t lines_left(const ProgressState& s) noexcept {
  return s.done < s.total ? s.total - s.done : 0;
}

int run_exit_code(const ProgressState& s, bool interrupted) noexcept {
  if (lines_left(s) > 0) return interrupted ? 130 : 1;
  return s.failed == 0 ? 0 : 1;
}

std::string render_bar(const ProgressState& s, std::size_t width) {
  const double frac = s.total == 0 ? 1.0 : static_cast<double>(s.done) / static_cast<double>(s.total);
  // Whole percents rounded down, in integers (29/100 in doubles is 28.999...): 299/300 is
  // 99 %, never 100 % before the last line is done.
  const std::size_t percent = s.total == 0 ? 100 : std::min(s.done, s.total) * 100 / s.total;
  std::string tail = fmt(" %zu/%zu %3zu%%", s.done, s.total, percent);
  if (s.failed > 0) tail += fmt(" (%zu failed)", s.failed);
  tail += " | " + lanes_text(s) + " | " + rates(s);
  if (s.rate_limited > 0) tail += fmt(" | 429s %llu", static_cast<unsigned long long>(s.rate_limited));
  tail += " | ETA " + (s.eta_s ? format_duration(*s.eta_s) : std::string("?"));
  // The bar takes what the text leaves, 10..30 columns; the text is cut to fit the terminal.
  const std::size_t bar = std::clamp<std::size_t>(width > tail.size() + 2 ? width - tail.size() - 2 : 10, 10, 30);
  const auto filled = static_cast<std::size_t>(frac * static_cast<double>(bar));
  std::string out = "[" + std::string(filled, '#') + std::string(bar - filled, '.') + "]" + tail;
  if (out.size() > width) out.resize(width);
  return out;
}

std::string render_plain(const ProgressState& s, std::chrono::steady_clock::duration elapsed) {
  std::string out = fmt("laneq: %s %zu/%zu done (%zu ok, %zu failed); ",
                        format_duration(std::chrono::duration<double>(elapsed).count()).c_str(),
                        s.done, s.total, s.ok, s.failed);
  out += lanes_text(s) + "; " + rates(s);
  out += fmt("; 429s %llu", static_cast<unsigned long long>(s.rate_limited));
  out += "; ETA " + (s.eta_s ? format_duration(*s.eta_s) : std::string("?"));
  return out;
}

std::string render_summary(const std::vector<LaneSummary>& lanes) {
  std::string out = fmt("%-12s %7s %7s %7s %8s %10s %10s\n", "lane", "lines", "ok", "failed",
                        "earlier", "wait p50", "wait p99");
  LaneSummary all{.name = "all"};
  for (const auto& l : lanes) {
    out += fmt("%-12s %7zu %7zu %7zu %8zu %8.0fms %8.0fms\n", l.name.c_str(), l.count, l.ok,
               l.failed, l.earlier, l.wait_p50_ms, l.wait_p99_ms);
    all.count += l.count;
    all.ok += l.ok;
    all.failed += l.failed;
    all.earlier += l.earlier;
  }
  out += fmt("%-12s %7zu %7zu %7zu %8zu\n", all.name.c_str(), all.count, all.ok, all.failed, all.earlier);
  return out;
}

void RateMeter::add(std::chrono::steady_clock::time_point now, std::int64_t tokens) {
  if (!first_) first_ = now;
  if (buckets_.empty() || now - buckets_.back().start >= std::chrono::milliseconds(100))
    buckets_.push_back({now});
  ++buckets_.back().count;
  buckets_.back().tokens += tokens;
  trim(now);
}

void RateMeter::trim(std::chrono::steady_clock::time_point now) {
  while (!buckets_.empty() && now - buckets_.front().start > std::chrono::minutes(1))
    buckets_.pop_front();
}

double RateMeter::per_second(std::chrono::steady_clock::time_point now) {
  trim(now);
  if (!first_) return 0;
  // Over the window, or over the time since the first completion while that is shorter. That
  // interval starts at the first completion: the completions in it are the n - 1 after it
  // (8 in 10 ms are 700/s, not 800/s; one alone is no rate yet).
  const auto since_first = now - *first_;
  const bool from_first = since_first <= window_;
  const auto span = from_first ? since_first : window_;
  const double secs = std::chrono::duration<double>(span).count();
  if (secs <= 0) return 0;
  std::int64_t n = 0;
  for (const auto& b : buckets_)
    if (now - b.start <= span) n += b.count;
  if (from_first) n = std::max<std::int64_t>(n - 1, 0);
  return static_cast<double>(n) / secs;
}

std::optional<double> RateMeter::eta_s(std::chrono::steady_clock::time_point now,
                                       std::size_t left) {
  if (left == 0) return 0.0;
  if (!first_) return std::nullopt;
  const auto span = std::min(window_, now - *first_);
  if (span < std::min<std::chrono::steady_clock::duration>(window_, std::chrono::seconds(1)))
    return std::nullopt;
  const double rate = per_second(now);
  if (rate <= 0) return std::nullopt;
  return static_cast<double>(left) / rate;
}

std::int64_t RateMeter::tokens_last_minute(std::chrono::steady_clock::time_point now) {
  trim(now);
  std::int64_t sum = 0;
  for (const auto& b : buckets_) sum += b.tokens;
  return sum;
}

}  // namespace laneq::cli
