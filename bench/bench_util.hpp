#pragma once
// Shared by the benchmarks: heap and RSS readings.
#include <malloc.h>
#include <sys/resource.h>

#include <cstddef>

inline std::size_t heap_in_use() { return mallinfo2().uordblks; }

inline double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}
