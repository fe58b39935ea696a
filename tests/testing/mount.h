// A real PTStore mount owned by a test or a benchmark: ptstore-fuse (this
// build's) run in the foreground against a ptstored, on a fresh temporary
// mountpoint or on one the caller names, unmounted when destroyed. No
// GoogleTest (the benchmarks and ptstore-demo mount with it too).
//
// Thread safety: a Mount belongs to one thread (start it from a thread that
// outlives it: SpawnWithLog); the free functions are safe from any thread.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "ptstore/status.h"

namespace ptstore::testing {

// This build's ptstore-fuse (set by CMake) when it is there, else
// "ptstore-fuse", looked up on $PATH.
std::string PtstoreFusePath();
// True when `path` is a mount point (its device differs from its parent's).
bool IsMountPoint(const std::string& path);
// Why `binary` cannot mount here ("" when it can): no usable /dev/fuse, not
// root (ptstore-fuse maps the arena and mounts), or `binary` (a path) is
// missing. For callers that skip their mount rather than fail.
std::string WhyNoMount(const std::string& binary);

class Mount {
 public:
  struct Options {
    // Extra -o options (comma-separated), e.g. "allow_other".
    std::string options = "allow_other";
    std::vector<std::string> extra_args;  // e.g. {"-d"}
    std::string binary;                   // empty: PtstoreFusePath()
    // An existing, empty directory to mount on, left in place afterwards;
    // empty: <the temporary directory>/mnt.
    std::string mountpoint;
  };
  Mount() = default;
  ~Mount();  // Unmount()
  Mount(const Mount&) = delete;
  Mount& operator=(const Mount&) = delete;

  // Mounts the ptstored listening on `socket` and waits (up to 20 s) until
  // the mountpoint is mounted. The log (and the mountpoint, unless
  // options.mountpoint names one) lives in a fresh temporary directory
  // (mode 0755, so that other users reach it).
  Status Start(const std::string& socket, const Options& options);
  Status Start(const std::string& socket) { return Start(socket, Options{}); }
  // Unmounts (fusermount3 -u, falling back to a lazy umount -l when busy)
  // and waits for ptstore-fuse to exit; returns its exit status (or
  // -signal; 0 when it was not running).
  int Unmount();
  // Lazy unmount only (umount -l): open files stay usable until closed.
  void UnmountLazy();
  // Waits for ptstore-fuse to exit (after a lazy unmount) for up to
  // `timeout_ms`; returns its exit status, or -1000 on timeout.
  int Wait(int timeout_ms);
  // Ends the mount at once, whatever ptstore-fuse is doing, for a caller
  // that gives up on it (a hung call): the kernel's connection is aborted
  // (umount2 MNT_FORCE: every call waiting on the mount fails with
  // ENOTCONN, and so does a notification ptstore-fuse is blocked in, which
  // SIGKILL alone could not end), ptstore-fuse is killed and reaped (for up
  // to 10 s), and the mountpoint is detached. False when ptstore-fuse
  // still did not exit (then nothing more can be done to it).
  bool Abort();

  const std::string& path() const { return mountpoint_; }
  std::string Join(const std::string& rel) const { return mountpoint_ + "/" + rel; }
  pid_t pid() const { return pid_; }
  std::string ReadLog() const;

 private:
  pid_t pid_ = -1;
  std::string dir_;
  std::string mountpoint_;
  bool own_mountpoint_ = false;  // made under dir_: removed with it
  std::string log_;
};

}  // namespace ptstore::testing
