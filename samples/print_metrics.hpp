#pragma once
// Shared by the samples: a per-lane table of a metrics snapshot.
#include <cstdio>

#include "laneq/metrics.hpp"

inline void print_lane_table(const laneq::MetricsSnapshot& m) {
  std::printf("%-11s %6s %6s %6s %7s %9s %9s %9s\n", "lane", "subm", "ok", "fail", "expired",
              "wait p50", "wait p99", "svc p50");
  for (const auto& l : m.lanes) {
    const auto& s = l.stats;
    if (s.submitted == 0) continue;
    std::printf("%-11s %6llu %6llu %6llu %7llu %7.1fms %7.1fms %7.1fms\n", l.name.c_str(),
                static_cast<unsigned long long>(s.submitted),
                static_cast<unsigned long long>(s.succeeded),
                static_cast<unsigned long long>(s.failed),
                static_cast<unsigned long long>(s.expired), s.queue_wait.p50_ms,
                s.queue_wait.p99_ms, s.service_time.p50_ms);
  }
}
