// Stopping a child process for real: SIGSTOP, then waiting until all of it
// has stopped.
//
// Header-only, so that tests linking only a production library can use it.
#pragma once

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <thread>

#include "ptstore/status.h"

namespace ptstore::testing {

// Sends SIGSTOP to `pid`, a child of the calling process, and returns once
// every thread of it has stopped. kill() returns before the stop takes
// effect: until its last thread stops, the process still runs, and a request
// that reaches it meanwhile is served. SIGCONT resumes it.
//
// Uses waitpid(pid, WUNTRACED), so it consumes the stop's report, and when
// the child exits instead it reaps it: nobody else may wait for `pid` while
// this runs, and after an Unavailable nobody may signal or wait for `pid`
// again (the pid can be reused).
//
// OK: stopped. Unavailable: it exited or was killed instead of stopping (and
// has been reaped); `*wait_status`, when not null, is waitpid's status.
// DeadlineExceeded: not stopped within `timeout_ms` (still running, or still
// stopping). Any other error: kill() or waitpid() failed (e.g. `pid` is not a
// child of the caller).
inline Status StopChild(pid_t pid, int timeout_ms = 10000, int* wait_status = nullptr) {
  if (pid <= 0) return InvalidArgument("StopChild: no such process " + std::to_string(pid));
  if (::kill(pid, SIGSTOP) != 0) return ErrnoError("kill SIGSTOP", errno);
  // The stop is reported to the parent once the last thread of the process
  // has stopped (the group stop is complete).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WUNTRACED | WNOHANG);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoError("waitpid", errno);
    if (r == pid && WIFSTOPPED(status)) return Status::OK();
    if (r == pid) {
      if (wait_status != nullptr) *wait_status = status;
      return Unavailable("process " + std::to_string(pid) + " exited instead of stopping (" +
                         (WIFEXITED(status) ? "status " + std::to_string(WEXITSTATUS(status))
                                            : "signal " + std::to_string(WTERMSIG(status))) +
                         ")");
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return DeadlineExceeded("process " + std::to_string(pid) + " did not stop within " +
                              std::to_string(timeout_ms) + " ms of SIGSTOP");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace ptstore::testing
