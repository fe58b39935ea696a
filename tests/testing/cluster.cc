#include "tests/testing/cluster.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/testing/client.h"

namespace ptstore::testing {

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
  const size_t listed = options_.listed == 0 ? options_.nodes : std::min(options_.listed, options_.nodes);
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
    daemons_.push_back(std::make_unique<Daemon>());
  }
  std::vector<size_t> members;
  for (size_t i = 0; i < listed; ++i) members.push_back(i);
  PTS_RETURN_IF_ERROR(WriteClusterFile(members));
  running_.assign(options_.nodes, false);
  node_args_ = options_.node_args;
  node_args_.resize(options_.nodes);
  node_cluster_files_.resize(options_.nodes);
  for (size_t i = 0; i < listed; ++i) PTS_RETURN_IF_ERROR(StartNode(i));
  return Status::OK();
}

std::string TestCluster::ClusterText(const std::vector<size_t>& members) const {
  std::string text = "secret_file = \"" + secret_file_ + "\"\n";
  for (size_t i : members) {
    text += "[[node]]\nid = " + std::to_string(i) + "\naddress = \"" + address(i) + "\"\n";
  }
  return text;
}

Status TestCluster::WriteClusterFile(const std::vector<size_t>& members) {
  return WriteClusterText(ClusterText(members));
}

Status TestCluster::WriteClusterText(const std::string& text) {
  const std::string tmp = cluster_file_ + ".new";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << text;
    if (!f.flush()) return IOError("writing " + tmp);
  }
  if (std::rename(tmp.c_str(), cluster_file_.c_str()) != 0) return ErrnoError("rename " + tmp, errno);
  return Status::OK();
}

Status TestCluster::Hangup(size_t i) {
  const pid_t pid = daemons_[i]->pid();
  if (pid <= 0) return Unavailable("node " + std::to_string(i) + " is not running");
  if (kill(pid, SIGHUP) != 0) return ErrnoError("kill SIGHUP", errno);
  return Status::OK();
}

void TestCluster::MovePort(size_t i) {
  uint16_t port;
  do {
    port = FreePort();
  } while (std::find(ports_.begin(), ports_.end(), port) != ports_.end());
  ports_[i] = port;
}

Status TestCluster::WaitMembers(size_t i, const std::vector<size_t>& members, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::string last = "no answer";
  std::vector<uint32_t> want(members.begin(), members.end());
  std::sort(want.begin(), want.end());
  while (std::chrono::steady_clock::now() < deadline) {
    auto c = Connect(i);
    if (c.ok()) {
      auto st = (*c)->GetClusterStatus();
      if (st.ok()) {
        std::vector<uint32_t> ids;
        bool alive = true;
        last.clear();
        for (const ClusterMember& m : st->members) {
          ids.push_back(m.id);
          if (m.id != i && m.state != MemberState::kAlive) alive = false;
          last += std::to_string(m.id) + "@" + m.address + ":" + std::to_string(static_cast<int>(m.state)) + " ";
        }
        std::sort(ids.begin(), ids.end());
        if (ids == want && alive) return Status::OK();
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return DeadlineExceeded("node " + std::to_string(i) + " does not see exactly the wanted members alive; last: " +
                          last);
}

Status TestCluster::StartNode(size_t i, const std::string& secret_file) {
  Daemon::Options o;
  o.arena_size = options_.arena_size;
  o.extra_args = {"--node-id",        std::to_string(i),
                  "--cluster",        !options_.etcd_url.empty()          ? options_.etcd_url
                                      : !node_cluster_files_[i].empty() ? node_cluster_files_[i]
                                                                        : cluster_file_,
                  "--data-path",      options_.data_path,
                  "--replicate-after", std::to_string(options_.replicate_after)};
  if (!options_.etcd_url.empty()) {
    o.extra_args.insert(o.extra_args.end(), {"--advertise", address(i)});
    if (secret_file.empty()) o.extra_args.insert(o.extra_args.end(), {"--secret-file", secret_file_});
  }
  if (!secret_file.empty()) o.extra_args.insert(o.extra_args.end(), {"--secret-file", secret_file});
  const std::string config = dir_ + "/node" + std::to_string(i) + ".toml";
  std::ofstream(config) << "[cluster]\nheartbeat_ms = " << options_.heartbeat_ms
                        << "\nrpc_timeout_ms = " << options_.rpc_timeout_ms << "\n"
                        << (options_.negative_ttl_ms >= 0
                                ? "negative_ttl_ms = " + std::to_string(options_.negative_ttl_ms) + "\n"
                                : std::string())
                        << (options_.etcd_lease_s > 0 ? "etcd_lease_s = " + std::to_string(options_.etcd_lease_s) + "\n"
                                                      : std::string())
                        << (i < options_.cluster_config.size() ? options_.cluster_config[i] + "\n" : std::string());
  o.extra_args.insert(o.extra_args.end(), {"--config", config});
  o.extra_args.insert(o.extra_args.end(), options_.extra_args.begin(), options_.extra_args.end());
  o.extra_args.insert(o.extra_args.end(), node_args_[i].begin(), node_args_[i].end());
  if (i < options_.wrappers.size()) o.wrapper = options_.wrappers[i];
  if (i < options_.binaries.size() && !options_.binaries[i].empty()) {
    // The daemon runs `wrapper... ptstored args...`: this shell drops the
    // ptstored path ($1) and execs the other binary in place (same pid).
    o.wrapper.insert(o.wrapper.end(), {"/bin/sh", "-c", "shift; exec \"$0\" \"$@\"", options_.binaries[i]});
  }
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
