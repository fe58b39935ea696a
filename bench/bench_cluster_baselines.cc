#include "bench/bench_cluster_baselines.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <sstream>

#include "bench/bench_util.h"
#include "core/mutex.h"
#include "tests/testing/cluster.h"
#include "tests/testing/daemon.h"

namespace ptstore::bench::cluster_bench {
namespace {


bool SendAll(int fd, const uint8_t* p, uint64_t n) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<uint64_t>(w);
  }
  return true;
}

bool RecvAll(int fd, uint8_t* p, uint64_t n) {
  while (n > 0) {
    ssize_t r = recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<uint64_t>(r);
  }
  return true;
}

}  // namespace

// ---------------------------------------------------- raw loopback TCP

Result<std::unique_ptr<TcpBaseline>> TcpBaseline::Open(int n, const uint8_t* src, uint64_t bytes) {
  std::unique_ptr<TcpBaseline> t(new TcpBaseline());
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (lfd < 0) return ErrnoError("socket", errno);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(lfd, n) != 0 ||
      getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    Status st = ErrnoError("listen on loopback", errno);
    close(lfd);
    return st;
  }
  uint64_t off = 0;
  for (int k = 0; k < n; ++k) {
    Conn c;
    c.rx = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (connect(c.rx, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      Status st = ErrnoError("connect on loopback", errno);
      close(c.rx);
      close(lfd);
      return st;
    }
    c.tx = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (c.tx < 0) {
      Status st = ErrnoError("accept on loopback", errno);
      close(c.rx);
      close(lfd);
      return st;
    }
    // As the nodes' connections (rdma/tcp.cc TuneTcp); buffer sizes are
    // the kernel's (autotuned) on both.
    int one = 1;
    setsockopt(c.rx, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(c.tx, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    uint64_t end = k + 1 == n ? bytes : ((bytes * (k + 1) / n) & ~uint64_t{4095});
    c.off = off;
    c.len = end - off;
    off = end;
    t->conns_.push_back(std::move(c));
  }
  close(lfd);
  for (Conn& c : t->conns_) {
    c.sender = std::thread([fd = c.tx, p = src + c.off, len = c.len] {
      char req;
      while (recv(fd, &req, 1, 0) == 1) {
        if (!SendAll(fd, p, len)) return;
      }
    });
  }
  return t;
}

TcpBaseline::~TcpBaseline() {
  for (Conn& c : conns_) shutdown(c.rx, SHUT_RDWR);
  for (Conn& c : conns_) {
    if (c.sender.joinable()) c.sender.join();
    close(c.rx);
    close(c.tx);
  }
}

Result<double> TcpBaseline::Transfer(uint8_t* dst) {
  std::atomic<bool> ok{true};
  auto receive = [&](const Conn& c) {
    const char req = 'g';
    if (send(c.rx, &req, 1, MSG_NOSIGNAL) != 1 || !RecvAll(c.rx, dst + c.off, c.len)) ok = false;
  };
  const auto t0 = Clock::now();
  std::vector<std::thread> others;
  for (size_t k = 1; k < conns_.size(); ++k) others.emplace_back(receive, std::cref(conns_[k]));
  receive(conns_[0]);
  for (auto& t : others) t.join();
  const double s = SecondsSince(t0);
  if (!ok) return IOError("the loopback TCP baseline lost its connection");
  return s;
}

// ------------------------------------------------------------------ Redis

std::string FindInPath(const std::string& name) {
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    const std::string p = (dir.empty() ? "." : dir) + "/" + name;
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

#ifdef PTSTORE_BENCH_HIREDIS
Result<std::unique_ptr<RedisBaseline>> RedisBaseline::Start(const std::string& binary) {
  std::unique_ptr<RedisBaseline> r(new RedisBaseline());
  r->dir_ = ptstore::testing::MakeTempDir("bench-cluster-redis");
  if (r->dir_.empty()) return ErrnoError("mkdtemp", errno);
  r->port_ = ptstore::testing::FreePort();
  PTS_ASSIGN_OR_RETURN(r->pid_, ptstore::testing::SpawnWithLog(
                                    {binary, "--port", std::to_string(r->port_), "--bind", "127.0.0.1", "--save",
                                     "", "--appendonly", "no", "--dir", r->dir_, "--daemonize", "no"},
                                    r->dir_ + "/redis.log"));
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (Clock::now() < deadline) {
    int status;
    if (waitpid(r->pid_, &status, WNOHANG) == r->pid_) {
      r->pid_ = -1;
      return Unavailable("redis-server exited at start: " + ptstore::testing::ReadFile(r->dir_ + "/redis.log"));
    }
    if (redisContext* c = r->ConnectOne()) {
      redisReply* rep = static_cast<redisReply*>(redisCommand(c, "PING"));
      const bool up = rep != nullptr && rep->type == REDIS_REPLY_STATUS;
      if (rep) freeReplyObject(rep);
      if (up) {
        r->clients_.push_back(c);
        return r;
      }
      redisFree(c);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return DeadlineExceeded("redis-server did not answer within 20 s");
}

RedisBaseline::~RedisBaseline() {
  for (redisContext* c : clients_) redisFree(c);
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    int status;
    waitpid(pid_, &status, 0);
  }
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

Result<double> RedisBaseline::SetAll(const uint8_t* src, uint64_t bytes, uint64_t value) {
  redisContext* c = clients_[0];
  const uint64_t n = bytes / value;
  const auto t0 = Clock::now();
  for (uint64_t i = 0; i < n; ++i) {
    redisAppendCommand(c, "SET kv:%llu %b", static_cast<unsigned long long>(i), src + i * value,
                       static_cast<size_t>(value));
  }
  for (uint64_t i = 0; i < n; ++i) {
    void* rep = nullptr;
    if (redisGetReply(c, &rep) != REDIS_OK || rep == nullptr) return IOError(std::string("SET: ") + c->errstr);
    const bool ok = static_cast<redisReply*>(rep)->type == REDIS_REPLY_STATUS;
    freeReplyObject(rep);
    if (!ok) return IOError("SET refused");
  }
  return SecondsSince(t0);
}

Result<double> RedisBaseline::GetAll(uint8_t* dst, uint64_t bytes, uint64_t value, int depth, int clients) {
  while (clients_.size() < static_cast<size_t>(clients)) {
    redisContext* c = ConnectOne();
    if (c == nullptr) return Unavailable("cannot connect to redis-server");
    clients_.push_back(c);
  }
  const uint64_t n = bytes / value;
  std::atomic<bool> ok{true};
  core::Mutex err_mu;
  std::string err;
  auto fail = [&](const std::string& why) {
    core::MutexLock lk(err_mu);
    ok = false;
    err = why;
  };
  auto run = [&](redisContext* c, uint64_t first, uint64_t end) {
    auto take = [&](redisReply* rep, uint64_t i) {
      if (rep == nullptr || rep->type != REDIS_REPLY_STRING || static_cast<uint64_t>(rep->len) != value) {
        fail(std::string("GET kv:") + std::to_string(i) + ": " + (rep ? "wrong reply" : c->errstr));
      } else {
        std::memcpy(dst + i * value, rep->str, value);
      }
      if (rep) freeReplyObject(rep);
    };
    if (depth <= 1) {
      for (uint64_t i = first; i < end && ok; ++i) {
        take(static_cast<redisReply*>(redisCommand(c, "GET kv:%llu", static_cast<unsigned long long>(i))), i);
      }
      return;
    }
    uint64_t sent = first;
    for (uint64_t i = first; i < end && ok; ++i) {
      while (sent < end && sent < i + static_cast<uint64_t>(depth)) {
        redisAppendCommand(c, "GET kv:%llu", static_cast<unsigned long long>(sent++));
      }
      void* rep = nullptr;
      if (redisGetReply(c, &rep) != REDIS_OK) rep = nullptr;
      take(static_cast<redisReply*>(rep), i);
    }
  };
  const auto t0 = Clock::now();
  std::vector<std::thread> others;
  for (int k = 1; k < clients; ++k) {
    others.emplace_back(run, clients_[k], n * k / clients, n * (k + 1) / clients);
  }
  run(clients_[0], 0, n / clients);
  for (auto& t : others) t.join();
  const double s = SecondsSince(t0);
  if (!ok) return IOError(err);
  return s;
}

redisContext* RedisBaseline::ConnectOne() const {
  timeval tv{2, 0};
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port_, tv);
  if (c == nullptr) return nullptr;
  if (c->err) {
    redisFree(c);
    return nullptr;
  }
  return c;
}
#endif  // PTSTORE_BENCH_HIREDIS

}  // namespace ptstore::bench::cluster_bench
