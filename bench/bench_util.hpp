#pragma once
// Shared by the benchmarks: heap and RSS readings, and their count argument.
#include <sys/resource.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <optional>
#include <string_view>

// Resident memory now. Heap growth is measured with this, not mallinfo2(): uordblks leaves out
// blocks malloc serves with mmap (every large vector, e.g. the scheduler's node table), which
// undercounted B1's bytes per queued request by a third.
inline std::size_t resident_bytes() {
  long pages = 0, resident = 0;
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
  std::fclose(f);
  return static_cast<std::size_t>(resident) * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

inline double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

// A request count from the command line (or the environment): a whole number from 1 to 10^12;
// anything else is nullopt, and the benchmark prints its usage line instead of throwing.
// `fallback` when `arg` is null (not given).
inline std::optional<std::size_t> count_arg(const char* arg, std::size_t fallback) {
  if (arg == nullptr) return fallback;
  const std::string_view s(arg);
  if (s.empty() || s.size() > 13 || s.find_first_not_of("0123456789") != s.npos) return {};
  std::size_t n = 0;
  for (char c : s) n = n * 10 + static_cast<std::size_t>(c - '0');
  if (n == 0 || n > 1'000'000'000'000) return {};
  return n;
}
