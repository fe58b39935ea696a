// The soak's file-system worker: shell-like calls on a PTStore mount of one
// node while the cluster changes under it (docs/soak.md). It walks the tree
// (readdir, then each level's tokens and kv files, checking the kv bytes
// against the tokens read on the way down), loads whole prefixes by path
// through the ioctl fast path (Client::LoadPath), stats subtrees as du does,
// and removes subtrees as rm -r does. The tree changing between two calls
// (ENOENT, ENOTEMPTY) is expected; wrong bytes, sizes that disagree, and any
// other error while the mounted node stayed up are violations.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "ptstore/client.h"
#include "tests/soak/soak_state.h"
#include "tests/soak/worker.h"

namespace ptstore::soak {

// Where the mount of the soak's mounted node is (the fault loop mounts it
// again after that node restarts, before it marks the node up).
class MountPoint {
 public:
  void Set(std::string path) {
    std::lock_guard<std::mutex> lock(mu_);
    path_ = std::move(path);
  }
  std::string Get() const {
    std::lock_guard<std::mutex> lock(mu_);
    return path_;
  }

 private:
  mutable std::mutex mu_;
  std::string path_;
};

class FsWorker {
 public:
  FsWorker(uint32_t node, uint64_t seed, const NodeView& nodes, const MountPoint& mount, Violations& violations,
           const std::atomic<bool>& stop);
  void Run();  // until stop

  const WorkerTally& tally() const { return tally_; }
  const CallClock& clock() const { return clock_; }

 private:
  // A directory reached by a walk and the prefix's tokens down to it.
  struct Reached {
    std::string dir;
    const SoakNamespace* ns = nullptr;
    std::vector<uint32_t> tokens;
    int depth = 0;
  };
  // Walks from a namespace down at most `max_depth` levels checking every
  // kv file on the way; false when the walk met an error (already sorted).
  bool Walk(const std::string& root, int max_depth, Reached* out);
  void LoadByPath(const std::string& root);
  void RemoveTree(const std::string& root);
  void Du(const std::string& root);
  // errno `err` of `op` on `path`: expected, the fault's, or a violation.
  void Errno(const std::string& op, const std::string& path, int err);
  Client* ClientFor();

  const uint32_t node_;
  const NodeView& nodes_;
  const MountPoint& mount_;
  Violations& violations_;
  const std::atomic<bool>& stop_;
  std::mt19937_64 rng_;
  uint64_t epoch_ = 0;  // the mounted node's epoch when the current call began
  std::unique_ptr<Client> client_;
  uint64_t client_epoch_ = 0;
  WorkerTally tally_;
  CallClock clock_;
};

}  // namespace ptstore::soak
