#pragma once
// ChildProcess: a program run as a child with its stdout and stderr on pipes, for tests and
// benchmarks that drive real processes (laneq-mock-api, the laneq CLI, a kill -9 crash test).
// Never leaves a child behind: the destructor SIGKILLs and reaps one still running, and its
// process group with it (the child leads one of its own: a script's children too, e.g.
// scripts/chaos's mock server when a test gives up on the script).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

extern char** environ;

namespace laneq::test {

class ChildProcess {
 public:
  // Starts `exe` with `args`; the child's stdin is /dev/null. `env` entries ("NAME=value")
  // replace or add to this process's environment (the last of a name wins). Throws
  // std::runtime_error when it cannot start.
  ChildProcess(const std::string& exe, std::vector<std::string> args,
               const std::vector<std::string>& env = {}) {
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
      throw std::runtime_error("ChildProcess: pipe2 failed");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, err[1], 2);
    args.insert(args.begin(), exe);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_copy(env);
    const auto overridden = [&](std::string_view entry) {
      const auto name = entry.substr(0, entry.find('=') + 1);  // "NAME="
      for (auto it = env_copy.rbegin(); it != env_copy.rend(); ++it)
        if (std::string_view(*it).substr(0, name.size()) == name) return &*it;
      return static_cast<std::string*>(nullptr);
    };
    std::vector<char*> envp;
    for (char** e = environ; *e; ++e)
      if (!overridden(*e)) envp.push_back(*e);
    for (auto& e : env_copy)
      if (overridden(e) == &e) envp.push_back(e.data());  // the last of each name
    envp.push_back(nullptr);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);  // a group of its own, led by the child
    const int rc = ::posix_spawn(&pid_, exe.c_str(), &fa, &attr, argv.data(), envp.data());
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&fa);
    ::close(out[1]);
    ::close(err[1]);
    out_ = out[0];
    err_ = err[0];
    if (rc != 0) {
      pid_ = -1;
      throw std::runtime_error("ChildProcess: cannot start " + exe);
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess() {
    if (pid_ > 0) {
      ::kill(-pid_, SIGKILL);  // the group: the child, and what it started that is still in it
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (out_ >= 0) ::close(out_);
    if (err_ >= 0) ::close(err_);
  }

  pid_t pid() const noexcept { return pid_; }
  int stdout_fd() const noexcept { return out_; }
  int stderr_fd() const noexcept { return err_; }

  // What the child wrote to stdout (or stderr) until a line end (when `line`), EOF or timeout.
  std::string read_stdout(bool line, std::chrono::milliseconds timeout) {
    return read_fd(out_, line, timeout);
  }
  std::string read_stderr(bool line, std::chrono::milliseconds timeout) {
    return read_fd(err_, line, timeout);
  }

  // Whatever stdout has now, waiting at most `timeout` for something ("" at EOF or timeout).
  std::string read_stdout_some(std::chrono::milliseconds timeout) {
    pollfd p{out_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return {};
    char buf[65536];
    const auto n = ::read(out_, buf, sizeof buf);
    return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
  }

  void signal(int sig) {
    if (pid_ > 0) ::kill(pid_, sig);
  }

  // The raw wait status once the child exited, or nullopt after `timeout` (a pidfd: no
  // polling loop).
  std::optional<int> wait(std::chrono::milliseconds timeout) {
    if (pid_ <= 0) throw std::logic_error("ChildProcess::wait: already reaped");
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
    if (pidfd < 0) throw std::runtime_error("ChildProcess: pidfd_open failed");
    pollfd p{pidfd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(timeout.count()));
    ::close(pidfd);
    if (ready <= 0) return std::nullopt;
    int status = 0;
    if (::waitpid(pid_, &status, 0) != pid_) throw std::runtime_error("ChildProcess: waitpid failed");
    pid_ = -1;
    return status;
  }

  // The exit code, or -signal when a signal ended it; throws when it did not end in time.
  int exit_code(std::chrono::milliseconds timeout) {
    const auto s = wait(timeout);
    if (!s) throw std::runtime_error("ChildProcess: the child did not exit in time");
    return WIFEXITED(*s) ? WEXITSTATUS(*s) : -WTERMSIG(*s);
  }

  static std::string read_fd(int fd, bool line, std::chrono::milliseconds timeout) {
    std::string got;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (line && got.find('\n') != std::string::npos) return got;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return got;
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return got;
      char buf[4096];
      const auto n = ::read(fd, buf, line ? 1 : sizeof buf);  // a line: never read past it
      if (n <= 0) return got;
      got.append(buf, static_cast<std::size_t>(n));
    }
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  int err_ = -1;
};

}  // namespace laneq::test
