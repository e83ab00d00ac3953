#pragma once
// B1's workload (DESIGN.md): the same small chat per request; priorities uniform over the 5
// lanes and 100 clients, from a fixed seed. Shared by b1_scheduler and b1_memory.
#include <cstddef>
#include <random>
#include <string>
#include <vector>

#include "laneq/request.hpp"

namespace b1 {

inline constexpr laneq::Priority prios[] = {laneq::Priority::critical, laneq::Priority::high,
                                            laneq::Priority::normal, laneq::Priority::low,
                                            laneq::Priority::background};
inline constexpr std::size_t client_count = 100;

struct Job {
  laneq::Request request;
  laneq::SubmitOptions options;
};

struct JobMaker {
  std::mt19937_64 rng{42};
  std::vector<laneq::ClientId> clients = [] {
    std::vector<laneq::ClientId> names;
    for (std::size_t i = 0; i < client_count; ++i)
      names.emplace_back("client-" + std::to_string(i));
    return names;
  }();

  Job next() {
    Job j;
    j.request.model = "m";
    j.request.messages.push_back({"user", "ping"});
    j.request.max_tokens = 16;
    j.options.priority = prios[rng() % 5];
    j.options.client = clients[rng() % client_count];
    return j;
  }
};

inline std::vector<Job> make_jobs(std::size_t n) {
  JobMaker maker;
  std::vector<Job> jobs;
  jobs.reserve(n);
  for (std::size_t i = 0; i < n; ++i) jobs.push_back(maker.next());
  return jobs;
}

}  // namespace b1
