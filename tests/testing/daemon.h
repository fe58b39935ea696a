// A real ptstored process owned by a test: started on a private socket in a
// temporary directory, stopped (SIGTERM, then SIGKILL) when destroyed.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "ptstore/status.h"

namespace ptstore::testing {

// Path of the ptstored binary of this build (set by CMake), or
// $PTSTORE_PTSTORED when set.
std::string PtstoredPath();
// A fresh directory under $TMPDIR, removed by the caller (or left for
// post-mortems when a test fails).
std::string MakeTempDir(const std::string& prefix);
// The contents of a file; empty when it cannot be read.
std::string ReadFile(const std::string& path);

// Starts `args` (args[0]: the binary's path) in a child process with its
// standard output and error going to `log`. The child gets SIGTERM when the
// calling thread ends (PR_SET_PDEATHSIG): start children from a thread that
// outlives them.
Result<pid_t> SpawnWithLog(std::vector<std::string> args, const std::string& log);

class Daemon {
 public:
  struct Options {
    std::string arena_size = "64MiB";
    std::vector<std::string> extra_args;
    // Runs ptstored under this command (e.g. {"ip", "netns", "exec", "ns0"}),
    // which must exec it in place (the pid stays ptstored's).
    std::vector<std::string> wrapper;
  };
  Daemon();
  ~Daemon();  // Stop()
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Starts ptstored and waits until its socket accepts connections.
  Status Start(const Options& options);
  Status Start() { return Start(Options{}); }
  // Stops ptstored (SIGTERM) if it runs and starts it again in the same
  // directory, on the same socket (a mount of it stays mounted).
  Status Restart(const Options& options);
  // SIGTERM and wait; returns the exit status (or -signal).
  int Stop();
  // SIGKILL: the server dies without cleaning up.
  void Kill();
  // SIGSTOP, then waits until the whole process has stopped
  // (StopChild, stop_process.h). kill() returns before the stop takes
  // effect: until every thread has stopped, the daemon still answers (a
  // request that arrives meanwhile is served). Unavailable if it is not
  // running or exits instead (then it has been reaped: pid() is -1);
  // DeadlineExceeded if it has not stopped within 10 s.
  Status Freeze();
  // SIGCONT: a frozen daemon carries on.
  Status Thaw();
  pid_t pid() const { return pid_; }
  const std::string& socket_path() const { return socket_; }
  const std::string& dir() const { return dir_; }
  const std::string& log_path() const { return log_; }
  std::string ReadLog() const;

 private:
  void RemoveDirIfOnlyOurs();
  Status Spawn(const Options& options);  // in dir_, on socket_

  pid_t pid_ = -1;
  std::string dir_;
  std::string socket_;
  std::string log_;
};

}  // namespace ptstore::testing
