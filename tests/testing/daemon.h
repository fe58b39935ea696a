// A real ptstored process owned by a test or a benchmark: started on a
// private socket in a temporary directory, stopped (SIGTERM, then SIGKILL)
// when destroyed. No GoogleTest: the tests, the benchmarks and the installed
// ptstore-demo all start their servers with it.
//
// Thread safety: a Daemon belongs to one thread (start it from a thread that
// outlives it: SpawnWithLog); the free functions are safe from any thread.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ptstore/status.h"

namespace ptstore::testing {

// The ptstored to start: $PTSTORE_PTSTORED when set, else this build's
// (set by CMake) when it is there, else "ptstored", looked up on $PATH (an
// installed ptstore-demo, away from its build tree).
std::string PtstoredPath();
// A fresh directory under $TMPDIR, removed by the caller (or left for
// post-mortems when a test fails).
std::string MakeTempDir(const std::string& prefix);
// The contents of a file; empty when it cannot be read.
std::string ReadFile(const std::string& path);
// A loopback TCP port nothing listens on right now (bound to port 0, then
// closed: another process may take it before the caller binds it).
uint16_t FreePort();

// Starts `args` (args[0]: the binary's path, or a name looked up on $PATH)
// in a child process with its standard output and error going to `log`. The
// child gets SIGTERM when the calling thread ends (PR_SET_PDEATHSIG): start
// children from a thread that outlives them.
Result<pid_t> SpawnWithLog(std::vector<std::string> args, const std::string& log);

class Daemon {
 public:
  // New fields go last, each with an initializer: tests write
  // {arena_size, extra_args}.
  struct Options {
    std::string arena_size = "64MiB";
    std::vector<std::string> extra_args;
    // Runs ptstored under this command (e.g. {"ip", "netns", "exec", "ns0"}),
    // which must exec it in place (the pid stays ptstored's).
    std::vector<std::string> wrapper{};
    std::string binary{};     // empty: PtstoredPath()
    std::string log_level{};  // --log-level; empty: ptstored's default
    // How long to wait for the socket: ptstored pre-faults its arena before
    // it listens (fresh pages fault in at 0.3-0.9 GB/s on these VMs: the
    // benchmarks' big arenas wait up to 120 s).
    int start_timeout_seconds = 60;
    // The temporary directory: $TMPDIR/<dir_prefix>-XXXXXX.
    std::string dir_prefix = "ptstored-test";
  };
  Daemon();
  ~Daemon();  // Stop()
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Starts ptstored and waits until its socket accepts connections.
  // Unavailable when it exits first, DeadlineExceeded when it does not
  // accept within start_timeout_seconds (then it is killed); the messages
  // carry its log.
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
  // The last `max_bytes` of the log ("..." before them when cut).
  std::string LogTail(size_t max_bytes = 4096) const;
  // Seconds from the last start to the first accepted connection (the
  // arena's pre-faulting, mostly).
  double startup_seconds() const { return startup_seconds_; }

 private:
  void RemoveDirIfOnlyOurs();
  Status Spawn(const Options& options);  // in dir_, on socket_

  pid_t pid_ = -1;
  double startup_seconds_ = 0;
  std::string dir_;
  std::string socket_;
  std::string log_;
};

// A Daemon on the heap, started with `options` (for a caller that hands it
// around); Start's errors.
Result<std::unique_ptr<Daemon>> StartDaemon(const Daemon::Options& options);

// Where a program's server is: the socket it was given, or a Daemon started
// for it (kept alive by `owned`).
struct ServerHandle {
  std::string socket_path;
  std::unique_ptr<Daemon> owned;
};
// `socket` non-empty: that server, as it is. Else a Daemon started with
// `options`, announced on stdout unless `quiet` ("started ptstored (pid P,
// arena A, pre-faulted in S s) on SOCKET").
Result<ServerHandle> ConnectOrStart(const std::string& socket, const Daemon::Options& options, bool quiet);

}  // namespace ptstore::testing
