// The scheduler's view of where prefixes are, from the nodes' KV-event
// streams (docs/kv-events.md): it subscribes to every node, keeps its own
// index of which blocks each node holds, and answers Locate without an RPC.
//
// Each node's stream is followed as docs/kv-events.md "Incarnations" says:
// the next seq is applied; a gap is closed by a replay from the first
// missing seq; another incarnation (a restart) by a replay from its start
// (AllBlocksCleared, then what the node announced). A node quiet for a
// second is asked for a replay from its next seq, so that a restart whose
// announcement came before the SUB socket reconnected is seen too. A node's stream is
// *unknown* until its first replay has answered, and again while a replay
// fails: while any node's is unknown, and for namespaces whose keys this
// index cannot compute (salted: no token ids; never seen: no block size),
// Locate asks the fallback (the store's LocatePrefix, sched/store_index.h).
//
// Keys: a prompt's block hashes are PTStore's chain keys of an unsalted
// namespace (RootKey(ns, ""), ChainKeys), int form (the low 64 bits).
//
// Thread safety: Locate from many threads (a shared lock on the index); one
// thread of its own reads the streams.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/mutex.h"
#include "sched/scheduler.h"

namespace ptstore::sched {

class EventIndex : public PrefixIndex {
 public:
  struct Source {
    uint32_t node = 0;
    std::string pub;     // "tcp://host:port" of its PUB socket
    std::string replay;  // and of its ROUTER replay socket
  };
  struct Stats {
    uint64_t from_events = 0;    // Locate answered from the index
    uint64_t from_fallback = 0;  // Locate handed to the fallback
    uint64_t batches = 0, gaps = 0, restarts = 0, replays = 0, replay_failures = 0;
  };

  // `fallback` (may be null: a miss instead) must outlive the index.
  EventIndex(std::vector<Source> sources, PrefixIndex* fallback);
  ~EventIndex() override;  // stops the thread

  Result<PrefixLocation> Locate(const std::string& ns, std::span<const uint32_t> tokens) override EXCLUDES(mu_);
  // Whether every node's stream is known (tests, benchmarks).
  bool AllKnown() const EXCLUDES(mu_);
  Stats stats() const;

  // Parses "NODE=PUB,REPLAY" (ptstore-sched --events).
  static Result<Source> ParseSource(const std::string& text);

 private:
  struct NodeState;
  void Loop() EXCLUDES(mu_);
  void Apply(NodeState& n, uint64_t seq, const std::string& payload, const std::string* topic_ns) EXCLUDES(mu_);
  bool Replay(NodeState& n, uint64_t start) EXCLUDES(mu_);

  std::vector<std::unique_ptr<NodeState>> nodes_;
  PrefixIndex* fallback_;
  // Guards the namespace tables below and every NodeState's holdings (those
  // are members of NodeState, where GUARDED_BY cannot name this mutex: see
  // there).
  mutable core::SharedMutex mu_;
  std::unordered_map<std::string, uint32_t> block_size_ GUARDED_BY(mu_);  // learnt from BlockStored
  std::unordered_set<std::string> salted_ GUARDED_BY(mu_);                // BlockStored without token ids
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> from_events_{0}, from_fallback_{0};
  std::atomic<uint64_t> batches_{0}, gaps_{0}, restarts_{0}, replays_{0}, replay_failures_{0};
  std::thread thread_;
};

}  // namespace ptstore::sched
