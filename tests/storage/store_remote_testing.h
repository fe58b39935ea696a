// What the node store's cluster-part tests share (tests/storage/store_remote*_test.cc):
// three in-process Stores for nodes 0, 1 and 2 (StoreRemoteTest), and
// PeerFetcher, a RemoteFetcher serving each node's FetchRequests from the
// owners' Stores with the cluster's own parts (storage/cluster/peer_transport.h:
// FetchMessage, the owner side PinForFetch, the in-process CopyServedFetch
// of the loopback transport), logging every call it served (SeenCall) and
// able to play a dead or failing owner. (A whole cluster of Stores and
// Clusters in one process: tests/cluster/in_process_cluster.h.) Test-only; PeerFetcher's log and dead set are
// guarded by its mutex (fetches come from the stores' threads).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/logging.h"
#include "ptstore/keys.h"
#include "ptstore/layout.h"
#include "ptstore/status.h"
#include "ptstore/types.h"
#include "storage/cache/remote.h"
#include "storage/cache/store.h"
#include "storage/cluster/peer_transport.h"
#include "tests/storage/kv_fixture.h"
#include "tests/testing/status_matchers.h"

namespace ptstore::storage::store_remote_testing {

using namespace testkv;  // NOLINT: the shared test fixture

inline constexpr int kNodes = 3;
inline constexpr uint64_t kSession = 77;
inline constexpr uint64_t kPeerSession = 0x9eed;  // the owner's session for serving fetches
inline const std::string kNs = "ns";
inline const std::string kSalt = "tenant-salt";

inline uint64_t Blocks(const Tokens& t) { return t.size() / kBt; }

inline StoreOptions NodeOptions(uint32_t node_id, uint64_t arena = 16 * kMiB) {
  StoreOptions o;
  o.arena_bytes = arena;
  o.node_id = node_id;
  o.prefault = false;
  o.try_huge_pages = false;
  return o;
}

using Nodes = std::array<std::unique_ptr<Store>, kNodes>;

// One requested segment as the fetcher saw it.
struct SeenSegment {
  uint64_t start_block = 0;
  uint64_t end_block = 0;
  bool operator==(const SeenSegment&) const = default;
};
struct SeenRequest {
  uint32_t owner = 0;
  std::vector<SeenSegment> segments;
};
struct SeenCall {
  std::string ns;
  std::string salt;
  uint32_t block_tokens = 0;
  size_t tokens = 0;
  std::vector<SeenRequest> requests;
};

// The cluster of the test: serves node `self`'s fetches from the other
// in-process stores, like storage/cluster/peer_service.cc's ServeFetch plus
// cluster_fetch.cc's TCP path do over the wire.
class PeerFetcher : public RemoteFetcher {
 public:
  PeerFetcher(uint32_t self, Nodes* nodes) : self_(self), nodes_(nodes) {}

  void Fetch(const NamespaceDef& ns, std::span<const uint32_t> tokens, std::vector<FetchRequest>& requests) override {
    calls_++;
    SeenCall call{ns.info.name, ns.salt, ns.info.layout.block_tokens, tokens.size(), {}};
    for (const FetchRequest& r : requests) {
      SeenRequest sr{r.owner, {}};
      for (const FetchSegment& s : r.segments) sr.segments.push_back({s.start_block, s.end_block});
      segments_ += r.segments.size();
      call.requests.push_back(std::move(sr));
    }
    {
      std::lock_guard lk(mu_);
      if (record_) log_.push_back(call);
    }
    if (fail_all_) return;  // every owner "dead": nothing arrives
    const uint64_t bb = ns.info.layout.BytesPerBlock();
    Store* me = (*nodes_)[self_].get();
    uint8_t* arena = const_cast<uint8_t*>(me->arena_base());
    for (FetchRequest& req : requests) {
      if (req.owner >= kNodes || req.owner == self_ || (*nodes_)[req.owner] == nullptr) {
        ADD_FAILURE() << "node " << self_ << " asked node " << req.owner << " for bytes";
        continue;
      }
      {
        std::lock_guard lk(mu_);
        if (dead_.count(req.owner)) continue;
      }
      for (const FetchSegment& seg : req.segments) {
        EXPECT_LT(seg.start_block, seg.end_block);
        EXPECT_LE(seg.arena_offset + (seg.end_block - seg.start_block) * bb, me->arena_bytes());
      }
      // The cluster's own message, owner side and copy (what the loopback
      // transport does between in-process nodes).
      const core::PeerFetch msg = FetchMessage(ns, tokens, req);
      Result<ServedFetch> served = PinForFetch((*nodes_)[req.owner].get(), msg, kPeerSession);
      if (!served.ok()) {
        ADD_FAILURE() << "the owner side of a fetch on node " << req.owner << ": " << served.status().ToString();
        continue;
      }
      EXPECT_OK(CopyServedFetch(*served, req, bb, arena));
    }  // each ServedFetch releases the owner's pins here
  }

  void SetDead(uint32_t node, bool dead) {
    std::lock_guard lk(mu_);
    if (dead) {
      dead_.insert(node);
    } else {
      dead_.erase(node);
    }
  }
  void FailAll(bool fail) { fail_all_ = fail; }
  void Record(bool on) {
    std::lock_guard lk(mu_);
    record_ = on;
  }
  std::vector<SeenCall> log() const {
    std::lock_guard lk(mu_);
    return log_;
  }
  uint64_t calls() const { return calls_; }
  uint64_t segments() const { return segments_; }

 private:
  const uint32_t self_;
  Nodes* nodes_;
  std::atomic<uint64_t> calls_{0};
  std::atomic<uint64_t> segments_{0};
  std::atomic<bool> fail_all_{false};
  mutable std::mutex mu_;
  std::set<uint32_t> dead_;
  bool record_ = true;
  std::vector<SeenCall> log_;
};

class StoreRemoteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    log_level_ = core::GetLogLevel();
    core::SetLogLevel(core::LogLevel::kWarn);  // three stores' INFO lines per test
    for (uint32_t i = 0; i < kNodes; ++i) {
      fetchers_[i] = std::make_unique<PeerFetcher>(i, &nodes_);
      Reopen(i, NodeOptions(i));
    }
  }
  void TearDown() override {
    for (auto& n : nodes_) n.reset();  // before the fetchers they point at
    core::SetLogLevel(log_level_);
  }

  void Reopen(uint32_t i, const StoreOptions& o) {
    nodes_[i].reset();
    auto s = Store::Open(o);
    ASSERT_OK(s);
    nodes_[i] = std::move(*s);
    auto ns = nodes_[i]->CreateNamespace(kNs, SmallLayout(), kSalt, 1000, 1000, 0755, false);
    ASSERT_OK(ns);
    nodes_[i]->SetFetcher(fetchers_[i].get());
  }

  Store& N(uint32_t i) { return *nodes_[i]; }
  PeerFetcher& F(uint32_t i) { return *fetchers_[i]; }

  SaveResult SaveOn(uint32_t node, const Tokens& tokens, uint64_t first_block = 0) {
    std::vector<uint8_t> data = Kv(tokens, first_block * kBt, Blocks(tokens) * kBt);
    Result<SaveResult> r = N(node).Save(kNs, tokens, data.data(), data.size(), first_block);
    EXPECT_OK(r);
    return r.ok() ? *r : SaveResult{};
  }

  Ownership ResolveOn(uint32_t node, const Tokens& tokens) {
    Result<Ownership> o = N(node).Resolve(kNs, tokens);
    EXPECT_OK(o);
    return o.ok() ? *o : Ownership{};
  }

  // What an index shard does: `from` says who owns the blocks of `tokens`
  // it knows, `to` files them. Returns `to`'s local match afterwards.
  uint64_t Share(uint32_t from, uint32_t to, const Tokens& tokens) {
    Ownership o = ResolveOn(from, tokens);
    Result<uint64_t> r = N(to).InsertRemote(kNs, tokens, o.ranges);
    EXPECT_OK(r);
    return r.ok() ? *r : 0;
  }

  uint64_t Matched(uint32_t node, const Tokens& tokens) {
    Result<PrefixResult> r = N(node).Lookup(kNs, tokens);
    EXPECT_OK(r);
    return r.ok() ? r->matched_tokens : 0;
  }

  std::vector<uint8_t> Read(uint32_t node, const std::vector<Extent>& xs) {
    std::vector<uint8_t> out;
    for (const Extent& x : xs) {
      EXPECT_LE(x.arena_offset + x.length, N(node).arena_bytes());
      const uint8_t* p = N(node).arena_base() + x.arena_offset;
      out.insert(out.end(), p, p + x.length);
    }
    return out;
  }

  // Pins `tokens` on `node` (fetching what other nodes own), checks that
  // the pinned bytes are the KV of the matched tokens, releases. Returns the
  // matched tokens.
  uint64_t PinCheck(uint32_t node, const Tokens& tokens) {
    Result<PrefixResult> pin = N(node).Pin(kNs, tokens, kSession);
    EXPECT_OK(pin);
    if (!pin.ok()) return 0;
    uint64_t total = 0;
    for (const Extent& x : pin->extents) total += x.length;
    EXPECT_EQ(total, pin->matched_tokens * kBpt);
    EXPECT_TRUE(Read(node, pin->extents) == Kv(tokens, 0, pin->matched_tokens))
        << "wrong bytes for the " << pin->matched_tokens << " tokens pinned on node " << node;
    if (pin->lease_id) {
      EXPECT_OK(N(node).Release(pin->lease_id, kSession));
    }
    return pin->matched_tokens;
  }

  std::vector<PrefixNodeInfo> Tree(uint32_t node) {
    auto r = N(node).ListTree(kNs, ChainKey{}, true);
    EXPECT_OK(r);
    return r.ok() ? *r : std::vector<PrefixNodeInfo>{};
  }

  // The listing entry of the increment that starts at `start_token`.
  std::optional<PrefixNodeInfo> NodeAt(uint32_t node, uint64_t start_token) {
    for (const PrefixNodeInfo& n : Tree(node)) {
      if (n.start_token == start_token) return n;
    }
    return std::nullopt;
  }

  core::LogLevel log_level_ = core::LogLevel::kInfo;
  // Declared before the stores: destroyed after them.
  std::array<std::unique_ptr<PeerFetcher>, kNodes> fetchers_;
  Nodes nodes_;
};

}  // namespace ptstore::storage::store_remote_testing
