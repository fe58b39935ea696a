// Several real ptstored processes that form one cluster on loopback ports:
// a cluster file (TOML), a shared secret file, one daemon per node.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ptstore/client.h"
#include "ptstore/status.h"
#include "tests/testing/daemon.h"

namespace ptstore::testing {

class TestCluster {
 public:
  struct Options {
    size_t nodes = 3;
    std::string arena_size = "64MiB";
    std::string data_path = "tcp";  // or "rma"
    std::string host = "127.0.0.1";
    int heartbeat_ms = 100;
    int rpc_timeout_ms = 500;
    uint32_t replicate_after = 2;
    int negative_ttl_ms = -1;  // [cluster] negative_ttl_ms; < 0: the daemon's default
    std::vector<std::string> extra_args;  // for every node
    std::vector<std::vector<std::string>> node_args;  // node i's own extra arguments (e.g. its SSD directory)
    // Separate hosts: node i listens on hosts[i]:7400 and runs under
    // wrappers[i] (e.g. "ip netns exec ..."); empty: loopback ports.
    std::vector<std::string> hosts;
    std::vector<std::vector<std::string>> wrappers;
    // Start() lists only nodes [0, listed) in the cluster file and starts
    // only them (the others join later: WriteClusterFile, StartNode,
    // Hangup); 0: every node.
    size_t listed = 0;
    // Members in etcd (tests/testing/etcd.h) instead of the cluster file:
    // node i runs with --cluster etcd_url --advertise address(i).
    std::string etcd_url;
    int etcd_lease_s = 0;  // [cluster] etcd_lease_s; 0: the daemon's default
    // Node i runs binaries[i] instead of this build's ptstored when given
    // and not empty (e.g. the ptstored-peer-v1 of the upgrade tests).
    std::vector<std::string> binaries;
    // Lines added to node i's [cluster] config section (e.g.
    // "require_integrity = true").
    std::vector<std::string> cluster_config;
  };
  explicit TestCluster(Options options);
  ~TestCluster();  // stops every node, removes the directory

  // Writes the files and starts every node.
  Status Start();
  // Starts node i (again, after Kill/Stop), with `secret_file` instead of
  // the cluster's when not empty.
  Status StartNode(size_t i, const std::string& secret_file = "");
  // Extra arguments of node i from its next start on.
  void SetNodeArgs(size_t i, std::vector<std::string> args) { node_args_[i] = std::move(args); }
  // Node i reads `path` as its cluster file from its next start on (e.g. one
  // that lists another node at a proxy's port); empty: the cluster's.
  void SetClusterFileOf(size_t i, std::string path) { node_cluster_files_[i] = std::move(path); }
  void Kill(size_t i) { daemons_[i]->Kill(); }
  int Stop(size_t i) { return daemons_[i]->Stop(); }
  // Rewrites the cluster file (atomically: a node re-reading it never sees
  // half of it) to list exactly `members` at their addresses.
  Status WriteClusterFile(const std::vector<size_t>& members);
  // Writes `text` as the cluster file (atomically), e.g. a broken one.
  Status WriteClusterText(const std::string& text);
  // The cluster file's text for `members` (what WriteClusterFile writes).
  std::string ClusterText(const std::vector<size_t>& members) const;
  // SIGHUP to node i: it re-reads the cluster file.
  Status Hangup(size_t i);
  // Node i listens on another free port from its next start (and in the
  // next WriteClusterFile).
  void MovePort(size_t i);
  // Waits until node i's member list is exactly `members` (itself
  // included) and it sees every other one of them alive.
  Status WaitMembers(size_t i, const std::vector<size_t>& members, int timeout_ms = 10000);
  // Waits until every running node sees every running node alive.
  Status WaitConverged(int timeout_ms = 10000);
  // Waits until node i sees node j in state `state` ("alive", "dead").
  Status WaitState(size_t i, size_t j, MemberState state, int timeout_ms = 10000);

  Result<std::unique_ptr<Client>> Connect(size_t i) const;
  Daemon& node(size_t i) { return *daemons_[i]; }
  size_t size() const { return daemons_.size(); }
  const std::string& dir() const { return dir_; }
  const std::string& cluster_file() const { return cluster_file_; }
  const std::string& secret_file() const { return secret_file_; }
  std::string address(size_t i) const {
    return (options_.hosts.empty() ? options_.host : options_.hosts[i]) + ":" + std::to_string(ports_[i]);
  }
  // A secret file with other bytes (for the wrong-secret tests).
  std::string WriteOtherSecret() const;

 private:
  Options options_;
  std::string dir_;
  std::string cluster_file_;
  std::string secret_file_;
  std::vector<uint16_t> ports_;
  std::vector<bool> running_;
  std::vector<std::vector<std::string>> node_args_;
  std::vector<std::string> node_cluster_files_;
  std::vector<std::unique_ptr<Daemon>> daemons_;
};

}  // namespace ptstore::testing
