// Local sessions cannot pin ptstored down (ptstored(8) server.frame_timeout_ms,
// server.max_sessions_per_uid): a real ptstored, a flood of half-open
// connections from another uid, and a client that is served all along.
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "ptstore/client.h"
#include "tests/testing/daemon.h"
#include "tests/testing/http_get.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/status_matchers.h"

namespace ptstore {
namespace {

using testing::Daemon;

constexpr int kPerUid = 8;
constexpr int kFlood = 40;
constexpr int kFrameTimeoutMs = 300;

// Threads of process `pid` now (/proc/PID/status).
int Threads(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

int ConnectTo(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// True once the server has closed `fd` (EOF or reset), within `ms`.
bool ClosedWithin(int fd, int ms) {
  struct timeval tv {ms / 1000, (ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char buf[256];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
    if (n < 0) return false;  // timed out: still open
  }
}

TEST(SessionLimitsTest, HalfOpenConnectionsOfOneUidNeitherHoldThreadsNorStopOthers) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to connect as another uid";
  ptstore::testing::TempDir dir;
  const std::string cfg = dir.path() + "/ptstored.toml";
  std::ofstream(cfg) << "[server]\nframe_timeout_ms = " << kFrameTimeoutMs << "\nmax_sessions_per_uid = " << kPerUid
                     << "\n";
  Daemon d;
  Daemon::Options o;
  o.extra_args = {"-c", cfg, "--metrics-port", "auto"};
  ASSERT_OK(d.Start(o)) << d.ReadLog();
  ClientOptions co;
  co.socket_path = d.socket_path();
  auto root = Client::Connect(co);
  ASSERT_OK(root);
  ASSERT_OK((*root)->Stats());
  const int base = Threads(d.pid());
  ASSERT_GT(base, 0);

  // A child as nobody: one idle connection, then a flood that each sends
  // half a frame header and stalls. It reports through `up` once they are
  // open and waits on `go`; its exit code says what it saw.
  int up[2], go[2];
  ASSERT_EQ(pipe(up), 0);
  ASSERT_EQ(pipe(go), 0);
  pid_t child = fork();
  if (child == 0) {
    if (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0) _exit(100);
    const int idle = ConnectTo(d.socket_path());
    if (idle < 0) _exit(101);
    std::vector<int> fds;
    const uint8_t half[10] = {0x50, 0x54, 0x53, 0x31, 1, 0, 2, 0, 1, 0};  // 10 of a header's 24 bytes
    for (int i = 0; i < kFlood; ++i) {
      int fd = ConnectTo(d.socket_path());
      if (fd < 0) _exit(102);
      // A connection refused at accept may be closed before this write (EPIPE, ECONNRESET).
      (void)!send(fd, half, sizeof(half), MSG_NOSIGNAL);
      fds.push_back(fd);
    }
    char c = 1;
    close(up[0]);
    close(go[1]);
    if (write(up[1], &c, 1) != 1 || read(go[0], &c, 1) != 1) _exit(104);
    // Every one of them is closed: refused at accept over the cap, or
    // closed once its frame stalled past the timeout.
    for (int fd : fds) {
      if (!ClosedWithin(fd, 20 * kFrameTimeoutMs + 5000)) _exit(105);
    }
    // The idle connection sent nothing: it is no stalled frame and stays.
    char b;
    if (recv(idle, &b, 1, MSG_DONTWAIT) != -1 || errno != EAGAIN) _exit(106);
    _exit(0);
  }
  ASSERT_GT(child, 0);
  close(up[1]);  // a child that exits early gives EOF here, not a hang
  close(go[0]);
  char c = 0;
  if (read(up[0], &c, 1) != 1) {
    int status = 0;
    waitpid(child, &status, 0);
    FAIL() << "the child stopped before the flood, exit " << (WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  }
  // During the flood: at most kPerUid session threads for it, and the root
  // client (and a new one) are served.
  EXPECT_LE(Threads(d.pid()), base + kPerUid) << "one uid holds more session threads than its cap";
  EXPECT_OK((*root)->Stats());
  auto another = Client::Connect(co);
  ASSERT_OK(another);
  EXPECT_OK((*another)->Stats());
  ASSERT_EQ(write(go[1], &c, 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's check that failed (see the _exit codes above)\n" << d.ReadLog();

  // The stalled sessions' threads are gone; the refusals are counted.
  int now = Threads(d.pid());
  for (int i = 0; i < 100 && now > base + 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    now = Threads(d.pid());
  }
  EXPECT_LE(now, base + 1) << "base " << base << " plus the one new client";
  const uint16_t port = testing::MetricsPortFromLog(d);
  ASSERT_NE(port, 0) << d.ReadLog();
  auto m = testing::HttpGet(port, "/metrics");
  ASSERT_OK(m);
  const std::string key = "ptstore_sessions_refused_total ";
  const size_t at = m->body.find("\n" + key);
  ASSERT_NE(at, std::string::npos) << m->body;
  EXPECT_GE(std::stoull(m->body.substr(at + 1 + key.size())), static_cast<uint64_t>(kFlood + 1 - kPerUid));
  const std::string log = d.ReadLog();
  EXPECT_NE(log.find("max_sessions_per_uid"), std::string::npos) << log;
  EXPECT_NE(log.find("sent part of a frame"), std::string::npos) << log;
}

}  // namespace
}  // namespace ptstore
