#include "tests/testing/daemon.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/testing/stop_process.h"

namespace ptstore::testing {

std::string PtstoredPath() {
  // $PTSTORE_PTSTORED overrides this build's binary (test binaries run away
  // from their build tree: scripts/gpu-check's bundle).
  const char* env = std::getenv("PTSTORE_PTSTORED");
  if (env != nullptr && *env != '\0') return env;
  // An installed ptstore-demo finds the installed server on $PATH.
  return access(PTSTORE_PTSTORED_PATH, X_OK) == 0 ? PTSTORE_PTSTORED_PATH : "ptstored";
}

std::string MakeTempDir(const std::string& prefix) {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/" + prefix + "-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) return "";
  chmod(buf.data(), 0755);
  return buf.data();
}

uint16_t FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Daemon::Daemon() = default;
Result<pid_t> SpawnWithLog(std::vector<std::string> args, const std::string& log) {
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return ErrnoError("fork", errno);
  if (pid == 0) {
    // SIGTERM when the thread that started it goes (a test or benchmark
    // killed by a timeout leaves no server behind).
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      if (fd > 2) close(fd);
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "exec %s: %s\n", argv[0], std::strerror(errno));  // into the log
    _exit(127);
  }
  return pid;
}

Daemon::~Daemon() {
  Stop();
  RemoveDirIfOnlyOurs();
}

void Daemon::RemoveDirIfOnlyOurs() {
  // Only the socket and the log: nothing a test may still want (a test that
  // puts data there, e.g. an SSD tier, cleans up itself). A failed test
  // prints the logs it needs; PTSTORE_KEEP_TEST_DIRS=1 keeps them all.
  if (dir_.empty() || std::getenv("PTSTORE_KEEP_TEST_DIRS") != nullptr) return;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename();
    if (name != "ptstored.sock" && name != "ptstored.log") return;
  }
  if (!ec) std::filesystem::remove_all(dir_, ec);
}

Status Daemon::Start(const Options& options) {
  RemoveDirIfOnlyOurs();  // a restart gets a fresh directory
  dir_ = MakeTempDir(options.dir_prefix);
  if (dir_.empty()) return ErrnoError("mkdtemp", errno);
  socket_ = dir_ + "/ptstored.sock";
  log_ = dir_ + "/ptstored.log";
  return Spawn(options);
}

Status Daemon::Restart(const Options& options) {
  if (dir_.empty()) return Start(options);
  Stop();
  return Spawn(options);
}

Status Daemon::Spawn(const Options& options) {
  const std::string binary = options.binary.empty() ? PtstoredPath() : options.binary;
  std::vector<std::string> args = {binary, "--socket", socket_, "--arena-size", options.arena_size};
  if (!options.log_level.empty()) args.insert(args.end(), {"--log-level", options.log_level});
  args.insert(args.end(), options.extra_args.begin(), options.extra_args.end());
  args.insert(args.begin(), options.wrapper.begin(), options.wrapper.end());
  const auto t0 = std::chrono::steady_clock::now();
  PTS_ASSIGN_OR_RETURN(pid_, SpawnWithLog(args, log_));
  // Wait until the socket accepts a connection (or the daemon dies).
  const auto deadline = t0 + std::chrono::seconds(options.start_timeout_seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return Unavailable("ptstored exited during start (" + binary + "): " + ReadLog());
    }
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, socket_.c_str(), sizeof(addr.sun_path) - 1);
    bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    close(fd);
    if (ok) {
      startup_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return Status::OK();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  Kill();
  return DeadlineExceeded("ptstored did not start within " + std::to_string(options.start_timeout_seconds) +
                          " s: " + ReadLog());
}

int Daemon::Stop() {
  if (pid_ <= 0) return 0;
  kill(pid_, SIGTERM);
  int status = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (waitpid(pid_, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

void Daemon::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  int status;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

Status Daemon::Freeze() {
  if (pid_ <= 0) return Unavailable("freeze: ptstored is not running");
  Status s = StopChild(pid_);
  if (s.code() == Code::kUnavailable) {
    pid_ = -1;  // reaped
    return Unavailable("freeze: ptstored, " + s.message() + ": " + ReadLog());
  }
  return s.ok() ? s : s.WithContext("freeze ptstored");
}

Status Daemon::Thaw() {
  if (pid_ <= 0) return Unavailable("thaw: ptstored is not running");
  if (kill(pid_, SIGCONT) != 0) return ErrnoError("kill SIGCONT", errno);
  return Status::OK();
}

std::string Daemon::ReadLog() const { return ReadFile(log_); }

std::string Daemon::LogTail(size_t max_bytes) const {
  std::string s = ReadLog();
  return s.size() > max_bytes ? "..." + s.substr(s.size() - max_bytes) : s;
}

Result<std::unique_ptr<Daemon>> StartDaemon(const Daemon::Options& options) {
  auto d = std::make_unique<Daemon>();
  PTS_RETURN_IF_ERROR(d->Start(options));
  return d;
}

Result<ServerHandle> ConnectOrStart(const std::string& socket, const Daemon::Options& options, bool quiet) {
  ServerHandle h;
  if (!socket.empty()) {
    h.socket_path = socket;
    return h;
  }
  PTS_ASSIGN_OR_RETURN(h.owned, StartDaemon(options));
  h.socket_path = h.owned->socket_path();
  if (!quiet) {
    std::printf("started ptstored (pid %d, arena %s, pre-faulted in %.1f s) on %s\n",
                static_cast<int>(h.owned->pid()), options.arena_size.c_str(), h.owned->startup_seconds(),
                h.socket_path.c_str());
  }
  return h;
}

}  // namespace ptstore::testing
