#pragma once
// For a forked child, first thing: it dies with the test process (a test killed by CTest's
// timeout must not leave a child holding CTest's output pipe, which would hang the whole run)
// and after `limit` at the latest (SIGALRM ends it: a hung child fails its test instead of
// hanging it). Survives exec (nginx).
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

namespace laneq::test {

inline void guard_child(unsigned limit_seconds = 120) noexcept {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() == 1) ::_exit(126);  // the parent died before prctl
  ::alarm(limit_seconds);
}

}  // namespace laneq::test
