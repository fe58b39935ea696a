#include "tests/testing/cluster.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/testing/client.h"

namespace ptstore::testing {

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

namespace {
void WriteSecret(const std::string& path, char fill) {
  std::ofstream(path) << std::string(48, fill);
  chmod(path.c_str(), 0600);
}
}  // namespace

TestCluster::TestCluster(Options options) : options_(std::move(options)) {}

TestCluster::~TestCluster() {
  for (auto& d : daemons_) d->Stop();
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

std::string TestCluster::WriteOtherSecret() const {
  const std::string path = dir_ + "/other-secret";
  WriteSecret(path, 'x');
  return path;
}

Status TestCluster::Start() {
  dir_ = MakeTempDir("ptstore-cluster");
  if (dir_.empty()) return ErrnoError("mkdtemp", errno);
  secret_file_ = dir_ + "/secret";
  WriteSecret(secret_file_, 's');
  cluster_file_ = dir_ + "/cluster.toml";
  std::ofstream f(cluster_file_);
  f << "secret_file = \"" << secret_file_ << "\"\n";
  for (size_t i = 0; i < options_.nodes; ++i) {
    uint16_t port = 7400;
    if (options_.hosts.empty()) {
      // Probed one by one, a closed probe's port may come back for the next
      // node: every node needs its own.
      do {
        port = FreePort();
      } while (std::find(ports_.begin(), ports_.end(), port) != ports_.end());
    }
    ports_.push_back(port);
    f << "[[node]]\nid = " << i << "\naddress = \"" << address(i) << "\"\n";
    daemons_.push_back(std::make_unique<Daemon>());
  }
  f.close();
  running_.assign(options_.nodes, false);
  node_args_ = options_.node_args;
  node_args_.resize(options_.nodes);
  for (size_t i = 0; i < options_.nodes; ++i) PTS_RETURN_IF_ERROR(StartNode(i));
  return Status::OK();
}

Status TestCluster::StartNode(size_t i, const std::string& secret_file) {
  Daemon::Options o;
  o.arena_size = options_.arena_size;
  o.extra_args = {"--node-id",        std::to_string(i),
                  "--cluster",        cluster_file_,
                  "--data-path",      options_.data_path,
                  "--replicate-after", std::to_string(options_.replicate_after)};
  if (!secret_file.empty()) o.extra_args.insert(o.extra_args.end(), {"--secret-file", secret_file});
  const std::string config = dir_ + "/node" + std::to_string(i) + ".toml";
  std::ofstream(config) << "[cluster]\nheartbeat_ms = " << options_.heartbeat_ms
                        << "\nrpc_timeout_ms = " << options_.rpc_timeout_ms << "\n"
                        << (options_.negative_ttl_ms >= 0
                                ? "negative_ttl_ms = " + std::to_string(options_.negative_ttl_ms) + "\n"
                                : std::string());
  o.extra_args.insert(o.extra_args.end(), {"--config", config});
  o.extra_args.insert(o.extra_args.end(), options_.extra_args.begin(), options_.extra_args.end());
  o.extra_args.insert(o.extra_args.end(), node_args_[i].begin(), node_args_[i].end());
  if (i < options_.wrappers.size()) o.wrapper = options_.wrappers[i];
  daemons_[i] = std::make_unique<Daemon>();
  return daemons_[i]->Start(o);
}

Result<std::unique_ptr<Client>> TestCluster::Connect(size_t i) const { return ConnectTo(daemons_[i]->socket_path()); }

Status TestCluster::WaitState(size_t i, size_t j, MemberState state, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  MemberState last = MemberState::kDead;
  while (std::chrono::steady_clock::now() < deadline) {
    auto c = Connect(i);
    if (c.ok()) {
      auto st = (*c)->GetClusterStatus();
      if (st.ok()) {
        for (const ClusterMember& m : st->members) {
          if (m.id == j) last = m.state;
        }
        if (last == state) return Status::OK();
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return DeadlineExceeded("node " + std::to_string(i) + " does not see node " + std::to_string(j) + " in state " +
                          std::to_string(static_cast<int>(state)) + " (last " + std::to_string(static_cast<int>(last)) +
                          ")");
}

Status TestCluster::WaitConverged(int timeout_ms) {
  for (size_t i = 0; i < daemons_.size(); ++i) {
    if (daemons_[i]->pid() <= 0) continue;
    for (size_t j = 0; j < daemons_.size(); ++j) {
      if (i == j || daemons_[j]->pid() <= 0) continue;
      PTS_RETURN_IF_ERROR(WaitState(i, j, MemberState::kAlive, timeout_ms));
    }
  }
  // One more heartbeat so that re-announcements after the changes are out.
  std::this_thread::sleep_for(std::chrono::milliseconds(options_.heartbeat_ms * 3));
  return Status::OK();
}

}  // namespace ptstore::testing
