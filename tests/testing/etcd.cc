#include "tests/testing/etcd.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "tests/testing/cluster.h"
#include "tests/testing/http_get.h"

extern char** environ;

namespace ptstore::testing {

std::string EtcdBinary() {
  const char* env = std::getenv("PTSTORE_ETCD");
  std::string path = env != nullptr && *env != '\0' ? env : "/usr/bin/etcd";
  return ::access(path.c_str(), X_OK) == 0 ? path : "";
}

EtcdServer::EtcdServer(size_t members, std::string host) : host_(std::move(host)), pids_(members, -1) {
  char templ[] = "/tmp/ptstore-etcd-XXXXXX";
  if (::mkdtemp(templ) != nullptr) dir_ = templ;
  std::vector<uint16_t> used;
  auto fresh = [&used] {
    uint16_t p;
    do {
      p = FreePort();
    } while (std::find(used.begin(), used.end(), p) != used.end());
    used.push_back(p);
    return p;
  };
  for (size_t i = 0; i < members; ++i) {
    client_ports_.push_back(fresh());
    peer_ports_.push_back(fresh());
  }
}

EtcdServer::~EtcdServer() {
  for (size_t i = 0; i < pids_.size(); ++i) Kill(i);
  if (!dir_.empty()) std::filesystem::remove_all(dir_);
}

std::string EtcdServer::endpoint(size_t i) const { return host_ + ":" + std::to_string(client_ports_[i]); }

std::string EtcdServer::Url(const std::string& prefix) const {
  std::string s = "etcd://";
  for (size_t i = 0; i < size(); ++i) s += (i ? "," : "") + endpoint(i);
  return s + "/" + prefix;
}

Status EtcdServer::Spawn(size_t i, bool fresh) {
  const std::string bin = EtcdBinary();
  if (bin.empty()) return NotFound("no etcd binary (apt install etcd-server, or set PTSTORE_ETCD)");
  if (dir_.empty()) return Internal("no temporary directory for etcd");
  const std::string name = "m" + std::to_string(i);
  const std::string peer = "http://" + host_ + ":" + std::to_string(peer_ports_[i]);
  const std::string client = "http://" + endpoint(i);
  std::string initial;
  for (size_t k = 0; k < size(); ++k) {
    initial += (k ? "," : "") + std::string("m") + std::to_string(k) + "=http://" + host_ + ":" +
               std::to_string(peer_ports_[k]);
  }
  std::vector<std::string> args = {bin,
                                   "--name", name,
                                   "--data-dir", dir_ + "/" + name,
                                   "--listen-client-urls", client,
                                   "--advertise-client-urls", client,
                                   "--listen-peer-urls", peer,
                                   "--initial-advertise-peer-urls", peer,
                                   "--initial-cluster", initial,
                                   "--initial-cluster-state", fresh ? "new" : "existing",
                                   "--initial-cluster-token", "ptstore-test",
                                   // Elections within a test's patience on a loaded machine.
                                   "--heartbeat-interval", "100",
                                   "--election-timeout", "1000",
                                   "--logger", "zap", "--log-outputs", "stderr"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  const std::string out = dir_ + "/" + name + ".out";
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, bin.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return ErrnoError("posix_spawn " + bin, rc);
  pids_[i] = pid;
  return Status::OK();
}

Status EtcdServer::WaitHealthy(size_t i, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::string last = "no answer";
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (pids_[i] > 0 && ::waitpid(pids_[i], &status, WNOHANG) == pids_[i]) {
      pids_[i] = -1;
      return Unavailable("etcd member " + std::to_string(i) + " exited at start (see " + dir_ + ")");
    }
    auto r = HttpExchange(client_ports_[i], "GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
                          std::chrono::milliseconds(500), host_);
    if (r.ok() && r->code == 200 && r->body.find("\"health\":\"true\"") != std::string::npos) return Status::OK();
    if (r.ok()) last = r->body;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return DeadlineExceeded("etcd member " + std::to_string(i) + " not healthy: " + last);
}

Status EtcdServer::Start() {
  for (size_t i = 0; i < size(); ++i) PTS_RETURN_IF_ERROR(Spawn(i, true));
  for (size_t i = 0; i < size(); ++i) PTS_RETURN_IF_ERROR(WaitHealthy(i, 30000));
  return Status::OK();
}

void EtcdServer::Kill(size_t i) {
  if (pids_[i] <= 0) return;
  ::kill(pids_[i], SIGKILL);
  ::waitpid(pids_[i], nullptr, 0);
  pids_[i] = -1;
}

Status EtcdServer::Restart(size_t i) {
  Kill(i);
  PTS_RETURN_IF_ERROR(Spawn(i, false));
  return WaitHealthy(i, 30000);
}

}  // namespace ptstore::testing
