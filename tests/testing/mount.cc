#include "tests/testing/mount.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "tests/testing/daemon.h"

namespace ptstore::testing {

std::string PtstoreFusePath() { return PTSTORE_FUSE_PATH; }

bool IsMountPoint(const std::string& path) {
  struct stat a {}, b {};
  if (stat(path.c_str(), &a) != 0) return false;
  if (stat((path + "/..").c_str(), &b) != 0) return false;
  return a.st_dev != b.st_dev;
}

Mount::~Mount() {
  Unmount();
  if (!dir_.empty()) {
    rmdir(mountpoint_.c_str());
    unlink(log_.c_str());
    rmdir(dir_.c_str());
  }
}

Status Mount::Start(const std::string& socket, const Options& options) {
  dir_ = MakeTempDir("ptstore-mount");
  if (dir_.empty()) return ErrnoError("mkdtemp", errno);
  mountpoint_ = dir_ + "/mnt";
  log_ = dir_ + "/ptstore-fuse.log";
  if (mkdir(mountpoint_.c_str(), 0755) != 0) return ErrnoError("mkdir " + mountpoint_, errno);
  std::string opts = "socket=" + socket + (options.options.empty() ? "" : "," + options.options);
  std::vector<std::string> args = {PtstoreFusePath(), mountpoint_, "-f", "-o", opts};
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
  if (rc == -1000) {  // stuck: never leave it behind
    kill(pid_, SIGKILL);
    int status;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    UnmountLazy();
  }
  return rc;
}

std::string Mount::ReadLog() const { return ReadFile(log_); }

}  // namespace ptstore::testing
