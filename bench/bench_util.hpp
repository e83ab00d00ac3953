#pragma once
// Shared by the benchmarks: heap and RSS readings.
#include <sys/resource.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>

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
