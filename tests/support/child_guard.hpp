#pragma once
// For a forked child, first thing: it dies with the test process (a test killed by CTest's
// timeout must not leave a child holding CTest's output pipe, which would hang the whole run),
// which survives exec (nginx); and, unless limit_seconds is 0, after that long at the latest
// (SIGALRM ends it: a hung child fails its test instead of hanging it; not across exec into a
// program with its own SIGALRM handler, as nginx has). `parent`: getpid() before the fork.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <unistd.h>

namespace laneq::test {

inline void guard_child(pid_t parent, unsigned limit_seconds = 120) noexcept {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(126);  // the parent died before prctl (re-parented)
  if (limit_seconds != 0) ::alarm(limit_seconds);
}

}  // namespace laneq::test
