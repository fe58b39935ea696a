#include "tests/testing/mount.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "tests/testing/daemon.h"

namespace ptstore::testing {

std::string PtstoreFusePath() {
#ifdef PTSTORE_FUSE_PATH
  if (access(PTSTORE_FUSE_PATH, X_OK) == 0) return PTSTORE_FUSE_PATH;
#endif
  return "ptstore-fuse";  // an installed ptstore-demo: the installed mount
}

bool IsMountPoint(const std::string& path) {
  struct stat a {}, b {};
  if (stat(path.c_str(), &a) != 0) return false;
  if (stat((path + "/..").c_str(), &b) != 0) return false;
  return a.st_dev != b.st_dev;
}

std::string WhyNoMount(const std::string& binary) {
  if (access("/dev/fuse", R_OK | W_OK) != 0) return "no usable /dev/fuse";
  if (geteuid() != 0) return "not root (ptstore-fuse needs the arena mapping and a mount)";
  if (binary.find('/') != std::string::npos && access(binary.c_str(), X_OK) != 0) return binary + " is missing";
  return "";
}

Mount::~Mount() {
  Unmount();
  if (!dir_.empty()) {
    if (own_mountpoint_) rmdir(mountpoint_.c_str());
    unlink(log_.c_str());
    rmdir(dir_.c_str());
  }
}

Status Mount::Start(const std::string& socket, const Options& options) {
  dir_ = MakeTempDir("ptstore-mount");
  if (dir_.empty()) return ErrnoError("mkdtemp", errno);
  log_ = dir_ + "/ptstore-fuse.log";
  own_mountpoint_ = options.mountpoint.empty();
  mountpoint_ = own_mountpoint_ ? dir_ + "/mnt" : options.mountpoint;
  if (own_mountpoint_ && mkdir(mountpoint_.c_str(), 0755) != 0) return ErrnoError("mkdir " + mountpoint_, errno);
  std::string opts = "socket=" + socket + (options.options.empty() ? "" : "," + options.options);
  const std::string binary = options.binary.empty() ? PtstoreFusePath() : options.binary;
  std::vector<std::string> args = {binary, mountpoint_, "-f", "-o", opts};
  args.insert(args.end(), options.extra_args.begin(), options.extra_args.end());
  PTS_ASSIGN_OR_RETURN(pid_, SpawnWithLog(args, log_));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return Unavailable("ptstore-fuse exited during start: " + ReadLog());
    }
    if (IsMountPoint(mountpoint_)) return Status::OK();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  Unmount();
  return DeadlineExceeded("ptstore-fuse did not mount within 20 s: " + ReadLog());
}

void Mount::UnmountLazy() {
  if (mountpoint_.empty()) return;
  std::string cmd = "umount -l '" + mountpoint_ + "' 2>/dev/null";
  if (std::system(cmd.c_str()) != 0) {
    cmd = "fusermount3 -u -z '" + mountpoint_ + "' 2>/dev/null";
    (void)std::system(cmd.c_str());
  }
}

int Mount::Wait(int timeout_ms) {
  if (pid_ <= 0) return 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  int status = 0;
  while (waitpid(pid_, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) return -1000;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

int Mount::Unmount() {
  if (!mountpoint_.empty() && IsMountPoint(mountpoint_)) {
    std::string cmd = "fusermount3 -u '" + mountpoint_ + "' 2>/dev/null";
    if (std::system(cmd.c_str()) != 0) UnmountLazy();
  }
  if (pid_ <= 0) return 0;
  int rc = Wait(10000);
  if (rc == -1000) Abort();  // stuck: never leave it behind
  return rc;
}

bool Mount::Abort() {
  if (!mountpoint_.empty()) {
    // The path is not looked into (no request reaches ptstore-fuse): the
    // FUSE superblock's umount_begin aborts the connection even when the
    // unmount itself then fails as busy, and MNT_DETACH takes it away.
    (void)umount2(mountpoint_.c_str(), MNT_FORCE);
    (void)umount2(mountpoint_.c_str(), MNT_DETACH);
  }
  bool ended = true;
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    ended = Wait(10000) != -1000;
  }
  // Without CAP_SYS_ADMIN the umount2 calls fail; the connection ended
  // with ptstore-fuse, and fusermount3 takes the dead mount away.
  UnmountLazy();
  return ended;
}

std::string Mount::ReadLog() const { return ReadFile(log_); }

}  // namespace ptstore::testing
