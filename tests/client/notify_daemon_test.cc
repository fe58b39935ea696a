// ptstored under a real notify socket (sd_notify(3)'s protocol, as systemd's
// Type=notify uses it): the test binds a unix datagram socket, starts a real
// ptstored with NOTIFY_SOCKET naming it, and checks that READY=1 arrives
// once, only when the socket accepts and the store has recovered its SSD
// tier (a load right after READY=1 returns every byte saved by the previous
// run), and that SIGTERM sends STOPPING=1 before the process exits.
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/sd_notify.h"
#include "ptstore/client.h"
#include "tests/storage/kv_fixture.h"
#include "tests/testing/client.h"
#include "tests/testing/cluster.h"
#include "tests/testing/daemon.h"
#include "tests/testing/status_matchers.h"

namespace ptstore {
namespace {

using namespace storage::testkv;  // NOLINT: the shared KV fixture

// A unix datagram socket the test listens on, in $NOTIFY_SOCKET's syntax:
// "@name" (abstract) or an absolute path.
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& address) : address_(address) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::memcpy(sa.sun_path, address.data(), address.size());
    socklen_t len = offsetof(sockaddr_un, sun_path) + address.size();
    if (address[0] == '@') {
      sa.sun_path[0] = '\0';
    } else {
      len += 1;
    }
    ok_ = fd_ >= 0 && bind(fd_, reinterpret_cast<sockaddr*>(&sa), len) == 0;
  }
  ~NotifySocket() {
    if (fd_ >= 0) close(fd_);
    if (!address_.empty() && address_[0] == '/') unlink(address_.c_str());
  }
  bool ok() const { return ok_; }
  const std::string& address() const { return address_; }
  // The next datagram, or "" after `timeout_ms` without one.
  std::string Receive(int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) != 1) return "";
    char buf[4096];
    ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  }

 private:
  std::string address_;
  int fd_ = -1;
  bool ok_ = false;
};

bool HasLine(const std::string& msg, const std::string& line) {
  size_t at = 0;
  while (at <= msg.size()) {
    size_t nl = msg.find('\n', at);
    if (msg.substr(at, nl == std::string::npos ? std::string::npos : nl - at) == line) return true;
    if (nl == std::string::npos) break;
    at = nl + 1;
  }
  return false;
}

std::string UniqueName(const char* what) {
  std::random_device rd;
  return std::string(what) + "-" + std::to_string(getpid()) + "-" + std::to_string(rd());
}

class NotifyDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("ptstore-notify");
    ASSERT_FALSE(dir_.empty());
    socket_ = dir_ + "/ptstored.sock";
  }
  void TearDown() override {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }

  // ptstored with NOTIFY_SOCKET=`notify` (through env(1), which execs it in
  // place: the pid is ptstored's).
  void Spawn(const std::string& notify, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"/usr/bin/env", "NOTIFY_SOCKET=" + notify, testing::PtstoredPath(),
                                     "--socket", socket_, "--arena-size", "16MiB", "--no-prefault"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto pid = testing::SpawnWithLog(args, dir_ + "/ptstored.log");
    ASSERT_OK(pid);
    pid_ = *pid;
  }
  // SIGTERM, then the exit status.
  int Terminate() {
    kill(pid_, SIGTERM);
    int st = 0;
    waitpid(pid_, &st, 0);
    pid_ = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
  }
  std::string Log() const { return testing::ReadFile(dir_ + "/ptstored.log"); }

  // Waits for READY=1 (at most 60 s), collecting what came before it.
  std::string WaitReady(NotifySocket& ns, std::vector<std::string>* before) {
    for (int i = 0; i < 600; ++i) {
      std::string m = ns.Receive(100);
      if (m.empty()) continue;
      if (HasLine(m, "READY=1")) return m;
      before->push_back(m);
    }
    return "";
  }

  std::string dir_;
  std::string socket_;
  pid_t pid_ = -1;
};

TEST_F(NotifyDaemonTest, ReadyOnlyOnceTheSocketAcceptsAndTheStoreIsRecovered) {
  const std::string ssd = dir_ + "/ssd";
  const std::vector<std::string> ssd_args = {"--ssd-dir", ssd, "--ssd-capacity", "64MiB"};
  const Tokens t = RandomTokens(7, 256);
  const std::vector<uint8_t> kv = Kv(t, 0, t.size());
  {
    // A first run (no notify socket: nothing is sent and nothing fails)
    // saves a prompt; SIGTERM writes it to the SSD tier.
    testing::Daemon d;
    testing::Daemon::Options o;
    o.arena_size = "16MiB";
    o.extra_args = ssd_args;
    // Daemon uses its own directory; point the SSD tier at ours.
    ASSERT_OK(d.Start(o)) << d.ReadLog();
    auto c = testing::ConnectTo(d.socket_path());
    ASSERT_OK(c);
    ASSERT_OK((*c)->CreateNamespace("m", SmallLayout()));
    ASSERT_OK((*c)->Save("m", t, kv.data(), kv.size()));
    c->reset();
    ASSERT_EQ(d.Stop(), 0) << d.ReadLog();
  }

  NotifySocket ns("@" + UniqueName("ptstore-notify"));
  ASSERT_TRUE(ns.ok()) << std::strerror(errno);
  Spawn(ns.address(), ssd_args);
  std::vector<std::string> before;
  const std::string ready = WaitReady(ns, &before);
  ASSERT_FALSE(ready.empty()) << "no READY=1 within 60 s; log:\n" << Log();
  EXPECT_TRUE(before.empty()) << "before READY=1: " << before[0];
  EXPECT_TRUE(HasLine(ready, "STATUS=serving on " + socket_)) << ready;

  // At READY=1 the socket accepts and the recovered store serves the first
  // run's prompt, every byte of it.
  auto c = testing::ConnectTo(socket_);
  ASSERT_OK(c) << "READY=1 came before the socket accepted: " << c.status().ToString();
  std::vector<uint8_t> out(kv.size());
  auto n = (*c)->Load("m", t, out.data(), out.size());
  ASSERT_OK(n);
  EXPECT_EQ(*n, t.size()) << "READY=1 came before the SSD tier was recovered";
  EXPECT_TRUE(out == kv) << "wrong bytes after the restart";
  c->reset();

  // Nothing more while it serves: READY=1 is sent once.
  EXPECT_EQ(ns.Receive(300), "");

  kill(pid_, SIGTERM);
  const std::string stopping = ns.Receive(30000);
  EXPECT_TRUE(HasLine(stopping, "STOPPING=1")) << "after SIGTERM: '" << stopping << "'; log:\n" << Log();
  EXPECT_EQ(Terminate(), 0) << Log();
  std::filesystem::remove_all(ssd);
}

TEST_F(NotifyDaemonTest, PathSocketGetsReadyAndStopping) {
  // A notify socket given as a file path (systemd's own is /run/systemd/notify).
  NotifySocket ns(dir_ + "/notify");
  ASSERT_TRUE(ns.ok()) << std::strerror(errno);
  Spawn(ns.address());
  std::vector<std::string> before;
  ASSERT_FALSE(WaitReady(ns, &before).empty()) << Log();
  auto c = testing::ConnectTo(socket_);
  ASSERT_OK(c);
  auto st = (*c)->Stats();
  EXPECT_OK(st);
  c->reset();
  kill(pid_, SIGTERM);
  EXPECT_TRUE(HasLine(ns.Receive(30000), "STOPPING=1")) << Log();
  EXPECT_EQ(Terminate(), 0) << Log();
}

TEST_F(NotifyDaemonTest, UnusableNotifySocketIsLoggedAndTheServerStillServes) {
  // Relative: not a notify socket address. ptstored says so and serves.
  Spawn("relative/notify");
  bool up = false;
  for (int i = 0; i < 600 && !up; ++i) {
    up = testing::ConnectTo(socket_).ok();
    if (!up) usleep(100 * 1000);
  }
  ASSERT_TRUE(up) << Log();
  // The warning follows the socket's start; give the log a moment.
  std::string log;
  for (int i = 0; i < 50; ++i) {
    log = Log();
    if (log.find("NOTIFY_SOCKET 'relative/notify'") != std::string::npos) break;
    usleep(100 * 1000);
  }
  EXPECT_NE(log.find("NOTIFY_SOCKET 'relative/notify' is neither an absolute path nor an abstract socket name"),
            std::string::npos)
      << log;
  EXPECT_EQ(Terminate(), 0) << Log();
}

TEST_F(NotifyDaemonTest, ASighupReloadIsReloadingThenReadyAndARefusalSaysWhy) {
  // A one-node cluster: SIGHUP re-reads its file.
  const std::string secret = dir_ + "/secret";
  std::ofstream(secret) << std::string(48, 's');
  chmod(secret.c_str(), 0600);
  const std::string file = dir_ + "/cluster.toml";
  const std::string good = "secret_file = \"" + secret + "\"\n[[node]]\nid = 0\naddress = \"127.0.0.1:" +
                           std::to_string(testing::FreePort()) + "\"\n";
  std::ofstream(file) << good;
  NotifySocket ns("@" + UniqueName("ptstore-notify-reload"));
  ASSERT_TRUE(ns.ok());
  Spawn(ns.address(), {"--cluster", file});
  std::vector<std::string> before;
  const std::string ready = WaitReady(ns, &before);
  ASSERT_FALSE(ready.empty()) << Log();
  EXPECT_TRUE(HasLine(ready, "STATUS=serving on " + socket_ + "; 1 cluster members")) << ready;

  kill(pid_, SIGHUP);
  std::string m = ns.Receive(30000);
  EXPECT_TRUE(HasLine(m, "RELOADING=1")) << m;
  m = ns.Receive(30000);
  EXPECT_TRUE(HasLine(m, "READY=1")) << m;
  EXPECT_EQ(m.find("refused"), std::string::npos) << m;

  std::ofstream(file, std::ios::trunc) << "[[node]\n";  // does not parse
  kill(pid_, SIGHUP);
  m = ns.Receive(30000);
  EXPECT_TRUE(HasLine(m, "RELOADING=1")) << m;
  m = ns.Receive(30000);
  EXPECT_TRUE(HasLine(m, "READY=1")) << m;
  EXPECT_NE(m.find("; 1 cluster members; last reload refused: cluster file " + file + " refused"), std::string::npos)
      << m;
  kill(pid_, SIGTERM);
  EXPECT_TRUE(HasLine(ns.Receive(30000), "STOPPING=1"));
  EXPECT_EQ(Terminate(), 0) << Log();
}

TEST(SdNotifyTest, SendsOneDatagramToAnAbstractName) {
  NotifySocket ns("@" + UniqueName("ptstore-sd-notify"));
  ASSERT_TRUE(ns.ok());
  ASSERT_OK(core::SdNotifyTo(ns.address(), "READY=1\nSTATUS=x"));
  EXPECT_EQ(ns.Receive(5000), "READY=1\nSTATUS=x");
}

TEST(SdNotifyTest, RefusesMalformedAddressesAndReportsAbsentListeners) {
  EXPECT_ERROR(core::SdNotifyTo("notify", "READY=1"), Code::kInvalidArgument);
  EXPECT_ERROR(core::SdNotifyTo("@", "READY=1"), Code::kInvalidArgument);
  EXPECT_ERROR(core::SdNotifyTo("/" + std::string(200, 'x'), "READY=1"), Code::kInvalidArgument);
  // Nothing bound there: the send fails (ECONNREFUSED or ENOENT), it does not hang.
  Status st = core::SdNotifyTo("@" + UniqueName("ptstore-nobody"), "READY=1");
  EXPECT_FALSE(st.ok());
  // Unset: nothing to do.
  unsetenv("NOTIFY_SOCKET");
  EXPECT_OK(core::SdNotify("READY=1"));
}

}  // namespace
}  // namespace ptstore
