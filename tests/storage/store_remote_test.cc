// Tests of the node store's cluster part (storage/cache/store_remote.cc): three
// real in-process Stores stand for three nodes (node ids 0, 1, 2), and a
// RemoteFetcher serves each FetchRequest the way the cluster does, by
// PinHeld on the owner's Store, copying the pinned bytes from the owner's
// arena into the requester's, and reporting `gone` when the owner does not
// hold the segment's blocks past those it sent (none, or a head of them).
//
// Covered: Resolve / InsertRemote / fetch-on-pin with byte-exact loads;
// one request per owner with all its segments; replicate_after; failing
// and `gone` fetches; replica eviction (replica share, owned pressure);
// RemoveFrom (splits, idempotence); PinHeld past remote placeholders;
// track_lost / TakeLostIncrements / ListOwned; Save past a remote prefix;
// and a multi-threaded smoke test.
//
// Layout (kv_fixture.h): 256 B a token, 4 tokens a block: 1 KiB a block.
// The KV of token i depends on its position and every token id up to it, so
// bytes from another prompt, another owner's wrong range or a wrong arena
// offset never match.
//
// The thread smoke test is most useful under ThreadSanitizer; the tree has
// no TSan option, so configure a separate build dir with
//   cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
//     -DPTSTORE_BUILD_BENCH=OFF -DCMAKE_CXX_FLAGS=-fsanitize=thread
//     -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread   (one command line)
//   ninja -C build-tsan store_remote_test && build-tsan/tests/storage/store_remote_test
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "tests/storage/kv_fixture.h"

#include "core/logging.h"
#include "ptstore/keys.h"
#include "ptstore/layout.h"
#include "ptstore/status.h"
#include "ptstore/types.h"
#include "storage/cache/remote.h"
#include "storage/cache/store.h"
#include "tests/testing/status_matchers.h"

namespace ptstore::storage {
namespace {

using namespace testkv;  // NOLINT: the shared test fixture

constexpr int kNodes = 3;
constexpr uint64_t kSession = 77;
constexpr uint64_t kPeerSession = 0x9eed;  // the owner's session for serving fetches
const std::string kNs = "ns";
const std::string kSalt = "tenant-salt";

uint64_t Blocks(const Tokens& t) { return t.size() / kBt; }

StoreOptions NodeOptions(uint32_t node_id, uint64_t arena = 16 * kMiB) {
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
    const uint32_t bt = ns.info.layout.block_tokens;
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
      Store* owner = (*nodes_)[req.owner].get();
      for (FetchSegment& seg : req.segments) {
        EXPECT_LT(seg.start_block, seg.end_block);
        EXPECT_LE(seg.arena_offset + (seg.end_block - seg.start_block) * bb, me->arena_bytes());
        const uint64_t end = std::min<uint64_t>(seg.end_block, tokens.size() / bt);
        if (end <= seg.start_block) {
          seg.gone = true;
          continue;
        }
        auto prompt = tokens.first(end * bt);
        Result<PrefixResult> pin = owner->PinHeld(ns.info.name, prompt, seg.start_block, kPeerSession);
        if (!pin.ok()) {
          ADD_FAILURE() << "PinHeld on node " << req.owner << ": " << pin.status().ToString();
          continue;
        }
        const uint64_t got_end = pin->matched_tokens / bt;
        if (got_end < end) {
          Result<bool> held = owner->Holds(ns.info.name, prompt, std::max(got_end, seg.start_block));
          seg.gone = !held.ok() || !*held;
        }
        if (got_end <= seg.start_block) {
          if (pin->lease_id) owner->Release(pin->lease_id, kPeerSession).IgnoreError();
          continue;
        }
        const uint64_t blocks = std::min(got_end, seg.end_block) - seg.start_block;
        uint64_t copied = 0;
        for (const Extent& x : pin->extents) {
          if (copied + x.length > blocks * bb) {
            ADD_FAILURE() << "PinHeld extents hold more than the " << blocks << " blocks pinned";
            break;
          }
          std::memcpy(arena + seg.arena_offset + copied, owner->arena_base() + x.arena_offset, x.length);
          copied += x.length;
        }
        EXPECT_EQ(copied, blocks * bb) << "PinHeld extents do not cover the pinned blocks exactly";
        seg.fetched_blocks = copied == blocks * bb ? blocks : 0;
        EXPECT_OK(owner->Release(pin->lease_id, kPeerSession));
      }
    }
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

// ---------------------------------------------------------------- basics

TEST_F(StoreRemoteTest, ResolveOnTheOwnerNamesItself) {
  const Tokens p = Gen(1, 12 * kBt + 3);
  SaveOn(0, p);
  Ownership o = ResolveOn(0, p);
  EXPECT_EQ(o.blocks, 12u);
  ASSERT_EQ(o.ranges.size(), 1u);
  EXPECT_EQ(o.ranges[0], (OwnedRange{12, 0}));
  EXPECT_EQ(o.held, std::vector<bool>{true});
  // Another node that only knows of it: owner 0, bytes not held there.
  Share(0, 1, p);
  Ownership there = ResolveOn(1, p);
  ASSERT_EQ(there.ranges.size(), 1u);
  EXPECT_EQ(there.ranges[0], (OwnedRange{12, 0}));
  EXPECT_EQ(there.held, std::vector<bool>{false});
  // A longer prompt resolves to the stored part; an unknown one to nothing.
  o = ResolveOn(0, Cat(p, Gen(2, 16)));
  EXPECT_EQ(o.blocks, 12u);
  o = ResolveOn(0, Gen(3, 32));
  EXPECT_EQ(o.blocks, 0u);
  EXPECT_TRUE(o.ranges.empty());
  EXPECT_ERROR(N(0).Resolve("nope", p), Code::kNotFound);
}

TEST_F(StoreRemoteTest, RemoteIncrementIsMatchedListedAndFetchedByteExact) {
  const Tokens p = Gen(10, 12 * kBt);
  SaveOn(0, p);
  EXPECT_EQ(Share(0, 1, p), 12u);
  EXPECT_EQ(N(1).Stats().remote_tensors, 1u);
  EXPECT_EQ(N(1).Stats().used_bytes, 0u);  // metadata only

  // Lookup matches the whole prompt without fetching anything.
  EXPECT_EQ(Matched(1, p), p.size());
  EXPECT_EQ(Matched(1, Cat(p, Gen(11, 9))), p.size());
  EXPECT_EQ(F(1).calls(), 0u);

  // Listed as a remote increment owned by node 0, before the load.
  std::vector<PrefixNodeInfo> tree = Tree(1);
  ASSERT_EQ(tree.size(), 1u);
  EXPECT_EQ(tree[0].tier, kTierRemote);
  EXPECT_EQ(tree[0].tensor.owner().value, 0u);
  EXPECT_EQ(tree[0].cache_class, CacheClass::kReplica);
  EXPECT_EQ(tree[0].tokens, p.size());
  EXPECT_EQ(tree[0].bytes, 12 * kBb);
  EXPECT_EQ(tree[0].start_token, 0u);

  // The owner's own listing names itself.
  std::vector<PrefixNodeInfo> own = Tree(0);
  ASSERT_EQ(own.size(), 1u);
  EXPECT_EQ(own[0].tier, kTierDram);
  EXPECT_EQ(own[0].tensor.owner().value, 0u);

  // Pin: fetched from node 0, byte-exact.
  const uint64_t hits_before = N(1).Stats().hits;  // (lookups count too)
  EXPECT_EQ(PinCheck(1, Cat(p, Gen(12, 2))), p.size());
  EXPECT_EQ(F(1).calls(), 1u);
  EXPECT_EQ(F(1).segments(), 1u);
  std::vector<SeenCall> log = F(1).log();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0].ns, kNs);
  EXPECT_EQ(log[0].salt, kSalt);
  EXPECT_EQ(log[0].block_tokens, kBt);
  EXPECT_EQ(log[0].tokens, p.size());  // the prompt up to the last segment's end
  ASSERT_EQ(log[0].requests.size(), 1u);
  EXPECT_EQ(log[0].requests[0].owner, 0u);
  EXPECT_EQ(log[0].requests[0].segments, (std::vector<SeenSegment>{{0, 12}}));

  StoreStats s1 = N(1).Stats();
  EXPECT_EQ(s1.remote_fetches, 1u);
  EXPECT_EQ(s1.remote_fetch_bytes, 12 * kBb);
  EXPECT_EQ(s1.remote_hits, 1u);
  EXPECT_EQ(s1.remote_fetch_failures, 0u);
  EXPECT_EQ(s1.hits, hits_before + 1);
  StoreStats s0 = N(0).Stats();
  EXPECT_EQ(s0.peer_served_bytes, 12 * kBb);
  EXPECT_EQ(s0.hits, 0u);  // serving a peer is not a client hit
  EXPECT_EQ(s0.pinned_bytes, 0u);
  EXPECT_EQ(s0.active_leases, 0u);
}

TEST_F(StoreRemoteTest, TreeShowsTheFetchedBytesWhilePinned) {
  const Tokens p = Gen(15, 6 * kBt);
  SaveOn(0, p);
  Share(0, 1, p);
  Result<PrefixResult> pin = N(1).Pin(kNs, p, kSession);
  ASSERT_OK(pin);
  ASSERT_EQ(pin->matched_tokens, p.size());
  ASSERT_EQ(pin->extents.size(), 1u);
  EXPECT_EQ(pin->extents[0].tensor.owner().value, 0u);
  EXPECT_TRUE(Read(1, pin->extents) == Kv(p, 0, p.size()));
  std::optional<PrefixNodeInfo> n = NodeAt(1, 0);
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->tier, kTierRemote | kTierDram);
  EXPECT_EQ(n->pins, 1u);
  EXPECT_GT(N(1).Stats().replica_bytes, 0u);
  EXPECT_GT(N(1).Stats().pinned_bytes, 0u);
  ASSERT_OK(N(1).Release(pin->lease_id, kSession));
  // First load of two (replicate_after = 2): transient, gone with the pin.
  n = NodeAt(1, 0);
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->tier, kTierRemote);
  EXPECT_EQ(N(1).Stats().replica_bytes, 0u);
  EXPECT_EQ(N(1).Stats().used_bytes, 0u);
  EXPECT_EQ(N(1).Stats().pinned_bytes, 0u);
}

TEST_F(StoreRemoteTest, InsertRemoteValidatesAndSkipsWhatIsHeld) {
  const Tokens p = Gen(16, 8 * kBt);
  // Ranges must grow within the prompt.
  EXPECT_ERROR(N(1).InsertRemote(kNs, p, std::vector<OwnedRange>{{0, 0}}), Code::kInvalidArgument);
  EXPECT_ERROR(N(1).InsertRemote(kNs, p, std::vector<OwnedRange>{{9, 0}}), Code::kInvalidArgument);
  EXPECT_ERROR(N(1).InsertRemote("nope", p, std::vector<OwnedRange>{{8, 0}}), Code::kNotFound);
  EXPECT_EQ(Matched(1, p), 0u);
  // (A range that does not grow after valid ones is refused too; the valid
  // ranges before it may have been filed by then: they are valid ownership.)
  EXPECT_ERROR(N(1).InsertRemote(kNs, Head(p, 2 * kBt), std::vector<OwnedRange>{{1, 0}, {1, 2}}), Code::kInvalidArgument);
  ASSERT_OK(N(1).RemoveFrom(kNs, p, 0));
  EXPECT_EQ(Matched(1, p), 0u);

  // Ranges naming this node are stale: nothing at or past them is filed.
  Result<uint64_t> r = N(1).InsertRemote(kNs, p, std::vector<OwnedRange>{{2, 0}, {4, 1}, {8, 2}});
  ASSERT_OK(r);
  EXPECT_EQ(*r, 2u);
  EXPECT_EQ(Matched(1, p), 2 * kBt);

  // Blocks held here already are skipped; the rest is filed after them.
  r = N(1).InsertRemote(kNs, p, std::vector<OwnedRange>{{6, 0}, {8, 2}});
  ASSERT_OK(r);
  EXPECT_EQ(*r, 8u);
  std::vector<PrefixNodeInfo> tree = Tree(1);
  ASSERT_EQ(tree.size(), 3u);
  EXPECT_EQ(tree[0].start_token, 0u);
  EXPECT_EQ(tree[0].tensor.owner().value, 0u);
  EXPECT_EQ(tree[1].start_token, 2 * kBt);  // blocks [2, 6) of node 0's range
  EXPECT_EQ(tree[1].tensor.owner().value, 0u);
  EXPECT_EQ(tree[2].start_token, 6 * kBt);
  EXPECT_EQ(tree[2].tensor.owner().value, 2u);
  for (const PrefixNodeInfo& n : tree) EXPECT_EQ(n.tier, kTierRemote);
  // Inserting the same again changes nothing.
  r = N(1).InsertRemote(kNs, p, std::vector<OwnedRange>{{8, 0}});
  ASSERT_OK(r);
  EXPECT_EQ(*r, 8u);
  EXPECT_EQ(Tree(1).size(), 3u);
  EXPECT_EQ(N(1).Stats().remote_tensors, 3u);

  // Resolve reports the owners as filed, adjacent ranges of one owner merged.
  Ownership o = ResolveOn(1, p);
  EXPECT_EQ(o.blocks, 8u);
  EXPECT_EQ(o.ranges, (std::vector<OwnedRange>{{6, 0}, {8, 2}}));
}

// ---------------------------------------------------- one request per owner

TEST_F(StoreRemoteTest, OneRequestPerOwnerCarriesAllItsSegments) {
  // Blocks [0,2) and [4,6) are node 0's, [2,4) node 1's, [6,8) node 2's own.
  const Tokens p = Gen(20, 8 * kBt);
  const Tokens p2 = Head(p, 2 * kBt), p4 = Head(p, 4 * kBt), p6 = Head(p, 6 * kBt);
  SaveOn(0, p2);
  EXPECT_EQ(Share(0, 1, p2), 2u);
  // Node 1 saves past the remote prefix: only blocks [2,4) are new.
  SaveResult s = SaveOn(1, p4);
  EXPECT_EQ(s.matched_tokens, 2 * kBt);
  EXPECT_EQ(s.stored_tokens, 2 * kBt);
  EXPECT_EQ(s.new_bytes, 2 * kBb);
  EXPECT_EQ(Share(1, 0, p4), 4u);
  s = SaveOn(0, p6, /*first_block=*/4);
  EXPECT_EQ(s.matched_tokens, 4 * kBt);
  EXPECT_EQ(s.stored_tokens, 2 * kBt);
  EXPECT_EQ(ResolveOn(0, p6).ranges, (std::vector<OwnedRange>{{2, 0}, {4, 1}, {6, 0}}));
  EXPECT_EQ(Share(0, 2, p6), 6u);
  s = SaveOn(2, p, /*first_block=*/6);
  EXPECT_EQ(s.matched_tokens, 6 * kBt);
  EXPECT_EQ(s.stored_tokens, 2 * kBt);
  EXPECT_EQ(ResolveOn(2, p).ranges, (std::vector<OwnedRange>{{2, 0}, {4, 1}, {6, 0}, {8, 2}}));

  EXPECT_EQ(PinCheck(2, p), p.size());
  EXPECT_EQ(F(2).calls(), 1u);
  EXPECT_EQ(F(2).segments(), 3u);
  std::vector<SeenCall> log = F(2).log();
  ASSERT_EQ(log.size(), 1u);
  ASSERT_EQ(log[0].requests.size(), 2u);
  std::map<uint32_t, std::vector<SeenSegment>> by_owner;
  for (const SeenRequest& r : log[0].requests) {
    EXPECT_FALSE(by_owner.count(r.owner)) << "two requests to node " << r.owner;
    by_owner[r.owner] = r.segments;
  }
  EXPECT_EQ(by_owner[0], (std::vector<SeenSegment>{{0, 2}, {4, 6}}));
  EXPECT_EQ(by_owner[1], (std::vector<SeenSegment>{{2, 4}}));
  EXPECT_EQ(log[0].tokens, 6 * kBt);  // up to the last remote segment's end
  EXPECT_EQ(N(2).Stats().remote_fetches, 3u);
  EXPECT_EQ(N(2).Stats().remote_fetch_bytes, 6 * kBb);
  EXPECT_EQ(N(0).Stats().peer_served_bytes, 4 * kBb);
  EXPECT_EQ(N(1).Stats().peer_served_bytes, 2 * kBb);
}

// ---------------------------------------------------------- replicate_after

TEST_F(StoreRemoteTest, SecondLoadKeepsAReplicaAndTheThirdDoesNotFetch) {
  const Tokens p = Gen(30, 10 * kBt);
  SaveOn(0, p);
  Share(0, 1, p);
  ASSERT_EQ(N(1).options().replicate_after, 2u);

  EXPECT_EQ(PinCheck(1, p), p.size());
  EXPECT_EQ(F(1).calls(), 1u);
  StoreStats s = N(1).Stats();
  EXPECT_EQ(s.replicas_kept, 0u);
  EXPECT_EQ(s.replica_bytes, 0u);
  EXPECT_EQ(s.used_bytes, 0u);  // the transient copy was freed with the pin

  EXPECT_EQ(PinCheck(1, p), p.size());
  EXPECT_EQ(F(1).calls(), 2u);
  s = N(1).Stats();
  EXPECT_EQ(s.replicas_kept, 1u);
  EXPECT_GE(s.replica_bytes, 10 * kBb);
  EXPECT_EQ(s.used_bytes, s.replica_bytes);
  EXPECT_EQ(s.pinned_bytes, 0u);
  std::optional<PrefixNodeInfo> n = NodeAt(1, 0);
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->tier, kTierRemote | kTierDram);

  EXPECT_EQ(PinCheck(1, p), p.size());
  EXPECT_EQ(F(1).calls(), 2u);  // served from the replica
  s = N(1).Stats();
  EXPECT_EQ(s.remote_fetches, 2u);
  EXPECT_EQ(s.remote_hits, 2u);
  EXPECT_EQ(s.hits, 3u);  // (no lookups in this test)
  // The replica is still owned by node 0, and Resolve says so.
  EXPECT_EQ(ResolveOn(1, p).ranges, (std::vector<OwnedRange>{{10, 0}}));
}

TEST_F(StoreRemoteTest, ReplicateAfterZeroNeverKeeps) {
  StoreOptions o = NodeOptions(1);
  o.replicate_after = 0;
  Reopen(1, o);
  const Tokens p = Gen(31, 5 * kBt);
  SaveOn(0, p);
  Share(0, 1, p);
  for (int i = 1; i <= 4; ++i) {
    EXPECT_EQ(PinCheck(1, p), p.size());
    EXPECT_EQ(F(1).calls(), static_cast<uint64_t>(i));
    StoreStats s = N(1).Stats();
    EXPECT_EQ(s.replicas_kept, 0u);
    EXPECT_EQ(s.replica_bytes, 0u);
    EXPECT_EQ(s.used_bytes, 0u);
  }
}

TEST_F(StoreRemoteTest, ReplicateAfterOneKeepsTheFirstLoad) {
  StoreOptions o = NodeOptions(1);
  o.replicate_after = 1;
  Reopen(1, o);
  const Tokens p = Gen(32, 5 * kBt);
  SaveOn(0, p);
  Share(0, 1, p);
  EXPECT_EQ(PinCheck(1, p), p.size());
  EXPECT_EQ(PinCheck(1, p), p.size());
  EXPECT_EQ(F(1).calls(), 1u);
  EXPECT_EQ(N(1).Stats().replicas_kept, 1u);
}

TEST_F(StoreRemoteTest, AKeptReplicaOfARestartedOwnerBecomesOwnedAndListed) {
  StoreOptions o = NodeOptions(1);
  o.replicate_after = 1;
  Reopen(1, o);
  const Tokens p = Gen(33, 5 * kBt);
  const Tokens q = Gen(34, 3 * kBt);
  SaveOn(0, p);
  SaveOn(0, q);
  Share(0, 1, p);
  Share(0, 1, q);
  EXPECT_EQ(PinCheck(1, p), p.size());  // kept; q stays a placeholder
  const StoreStats before = N(1).Stats();
  ASSERT_GT(before.replica_bytes, 0u);
  ASSERT_EQ(before.owned_bytes, 0u);
  ASSERT_TRUE(N(1).ListOwned().empty());

  EXPECT_EQ(N(1).AdoptReplicasOf(2), 0u);  // not the owner
  EXPECT_EQ(N(1).AdoptReplicasOf(0), 1u);
  const StoreStats after = N(1).Stats();
  EXPECT_EQ(after.replica_bytes, 0u);
  EXPECT_EQ(after.owned_bytes, before.replica_bytes);
  EXPECT_EQ(after.remote_tensors, before.remote_tensors - 1);
  const std::vector<HeldIncrement> owned = N(1).ListOwned();
  ASSERT_EQ(owned.size(), 1u);
  EXPECT_EQ(owned[0].tokens, p);
  // Served from here without a fetch, as this node's own; the placeholder
  // of q still fetches from node 0.
  const uint64_t calls = F(1).calls();
  EXPECT_EQ(PinCheck(1, p), p.size());
  EXPECT_EQ(F(1).calls(), calls);
  EXPECT_EQ(PinCheck(1, q), q.size());
  EXPECT_EQ(F(1).calls(), calls + 1);
  EXPECT_EQ(N(1).AdoptReplicasOf(0), 1u);  // q was kept by that load: adopted too
}

TEST_F(StoreRemoteTest, TwoPinsOfATransientFetchShareItUntilTheLastRelease) {
  const Tokens p = Gen(33, 4 * kBt);
  SaveOn(0, p);
  Share(0, 1, p);
  Result<PrefixResult> a = N(1).Pin(kNs, p, kSession);
  ASSERT_OK(a);
  ASSERT_EQ(a->matched_tokens, p.size());
  // The second pin finds the bytes in DRAM (no fetch) even though the first
  // load's copy is transient.
  Result<PrefixResult> b = N(1).Pin(kNs, p, kSession);
  ASSERT_OK(b);
  ASSERT_EQ(b->matched_tokens, p.size());
  EXPECT_EQ(F(1).calls(), 1u);
  ASSERT_OK(N(1).Release(a->lease_id, kSession));
  EXPECT_TRUE(Read(1, b->extents) == Kv(p, 0, p.size()));  // still there for b
  EXPECT_GT(N(1).Stats().replica_bytes, 0u);
  ASSERT_OK(N(1).Release(b->lease_id, kSession));
  EXPECT_EQ(N(1).Stats().replica_bytes, 0u);
}

// ----------------------------------------- prompts that end or branch inside

// A prompt that ends inside a remote increment loads the part it matches:
// a local increment serves any prefix of itself, and so must a remote one.
TEST_F(StoreRemoteTest, PrefixEndingInsideARemoteIncrementLoads) {
  const Tokens p = Gen(25, 8 * kBt);
  SaveOn(0, p);
  Share(0, 1, p);
  const Tokens head = Head(p, 5 * kBt);
  EXPECT_EQ(Matched(1, head), head.size());
  EXPECT_EQ(PinCheck(1, head), head.size());
  EXPECT_EQ(N(1).Stats().remote_fetch_failures, 0u);
  // The same prompt with other tokens after block 5 (it branches there).
  const Tokens branch = Cat(head, Gen(26, 3 * kBt));
  EXPECT_EQ(Matched(1, branch), head.size());
  EXPECT_EQ(PinCheck(1, branch), head.size());
  EXPECT_EQ(N(1).Stats().remote_fetch_failures, 0u);
}

// Two prompts share blocks [0,3) and branch at block 3; node 1 knows only
// p's remote increment [0,8). A load of q matches [0,3) inside that
// increment; whatever it fetches must be p's bytes (the increment's own
// tokens), never q's blocks [3,8) filed as p's: once kept as a replica,
// those would be served to every later load of p.
TEST_F(StoreRemoteTest, BranchInsideARemoteIncrementNeverFillsItWithTheOtherBranch) {
  StoreOptions o = NodeOptions(1);
  o.replicate_after = 1;  // the first fetch is kept
  Reopen(1, o);
  const Tokens base = Gen(27, 3 * kBt);
  const Tokens p = Cat(base, Gen(28, 5 * kBt));
  const Tokens q = Cat(base, Gen(29, 5 * kBt));
  SaveOn(0, p);
  SaveOn(0, q);
  Share(0, 1, p);
  EXPECT_EQ(Matched(1, q), base.size());
  EXPECT_EQ(PinCheck(1, q), base.size());  // q's first 3 blocks, from p's increment
  EXPECT_EQ(PinCheck(1, p), p.size());     // p's bytes, all 8 blocks
}

TEST_F(StoreRemoteTest, BranchInsideARemoteIncrementThenSecondLoadKeepsTheRightBytes) {
  // The same with the default replicate_after = 2: p loaded once, then q
  // (its load is the increment's second, which keeps it), then p again.
  const Tokens base = Gen(35, 3 * kBt);
  const Tokens p = Cat(base, Gen(36, 5 * kBt));
  const Tokens q = Cat(base, Gen(37, 7 * kBt));
  SaveOn(0, p);
  SaveOn(0, q);
  Share(0, 1, p);
  EXPECT_EQ(PinCheck(1, p), p.size());
  EXPECT_EQ(PinCheck(1, q), base.size());
  EXPECT_EQ(PinCheck(1, p), p.size());
}

TEST_F(StoreRemoteTest, BothBranchesOfARemoteIncrementFetchEachWithItsOwnBytes) {
  // Node 1 knows p as one remote increment, then learns q, which branches
  // inside it: p's tensor now has two tree nodes, the shared head and p's
  // tail, and q's tail is a second remote tensor. A pin of q needs both
  // tensors, which are not on one path: each must be named by its own
  // prefix (found by bench_e2e: q's tail came back with p's bytes).
  for (uint32_t replicate_after : {0u, 1u, 2u}) {
    SCOPED_TRACE(replicate_after);
    StoreOptions o = NodeOptions(1);
    o.replicate_after = replicate_after;
    Reopen(1, o);
    const Tokens base = Gen(50 + replicate_after, 2 * kBt);
    const Tokens p = Cat(base, Gen(60 + replicate_after, 6 * kBt));
    const Tokens q = Cat(base, Gen(70 + replicate_after, 6 * kBt));
    SaveOn(0, p);
    SaveOn(0, q);
    Share(0, 1, p);
    Share(0, 1, q);
    EXPECT_EQ(Matched(1, q), q.size());
    EXPECT_EQ(PinCheck(1, q), q.size());
    EXPECT_EQ(PinCheck(1, p), p.size());
    EXPECT_EQ(PinCheck(1, q), q.size());
  }
}

// ----------------------------------------------------------------- failures

TEST_F(StoreRemoteTest, FailingFetchCutsThePinAtTheFirstRemoteBlock) {
  const Tokens p = Gen(40, 6 * kBt);
  SaveOn(0, p);
  SaveOn(1, Head(p, 2 * kBt));  // node 1 holds blocks [0,2) itself
  EXPECT_EQ(Share(0, 1, p), 6u);
  EXPECT_EQ(ResolveOn(1, p).ranges, (std::vector<OwnedRange>{{2, 1}, {6, 0}}));

  F(1).SetDead(0, true);
  EXPECT_EQ(PinCheck(1, p), 2 * kBt);  // the local part, no error
  EXPECT_EQ(F(1).calls(), 1u);          // tried once, not again in the same pin
  StoreStats s = N(1).Stats();
  EXPECT_EQ(s.remote_fetch_failures, 1u);
  EXPECT_EQ(s.remote_fetches, 0u);
  EXPECT_EQ(s.replica_bytes, 0u);
  EXPECT_EQ(s.pinned_bytes, 0u);
  // A failure is not a removal: the remote increment stays known.
  EXPECT_EQ(Matched(1, p), p.size());
  EXPECT_EQ(N(1).Stats().remote_tensors, 1u);

  // Every owner down: same, through the other failure path.
  F(1).SetDead(0, false);
  F(1).FailAll(true);
  EXPECT_EQ(PinCheck(1, p), 2 * kBt);
  EXPECT_EQ(N(1).Stats().remote_fetch_failures, 2u);

  // Back: the next pin fetches it.
  F(1).FailAll(false);
  EXPECT_EQ(PinCheck(1, p), p.size());
  EXPECT_EQ(N(1).Stats().remote_fetches, 1u);
}

TEST_F(StoreRemoteTest, FailingFetchOfAFullyRemotePromptIsAMiss) {
  const Tokens p = Gen(41, 3 * kBt);
  SaveOn(0, p);
  Share(0, 1, p);
  F(1).FailAll(true);
  Result<PrefixResult> pin = N(1).Pin(kNs, p, kSession);
  ASSERT_OK(pin);
  EXPECT_EQ(pin->matched_tokens, 0u);
  EXPECT_EQ(pin->lease_id, 0u);
  EXPECT_TRUE(pin->extents.empty());
  EXPECT_EQ(N(1).Stats().misses, 1u);
  EXPECT_EQ(N(1).Stats().used_bytes, 0u);
  // LoadCopy too.
  std::vector<uint8_t> buf(p.size() * kBpt);
  Result<uint64_t> got = N(1).LoadCopy(kNs, p, buf.data(), buf.size());
  ASSERT_OK(got);
  EXPECT_EQ(*got, 0u);
}

TEST_F(StoreRemoteTest, WithoutAFetcherRemoteBlocksAreMisses) {
  const Tokens p = Gen(42, 3 * kBt);
  SaveOn(0, p);
  Share(0, 1, p);
  N(1).SetFetcher(nullptr);
  EXPECT_EQ(PinCheck(1, p), 0u);
  EXPECT_EQ(F(1).calls(), 0u);
  N(1).SetFetcher(&F(1));
  EXPECT_EQ(PinCheck(1, p), p.size());
}

TEST_F(StoreRemoteTest, GoneDropsTheIncrementAndWhatHangsBelowIt) {
  const Tokens p = Gen(43, 6 * kBt);
  const Tokens q = Cat(p, Gen(44, 2 * kBt));  // node 1's own blocks [6,8) below
  SaveOn(0, p);
  SaveOn(1, Head(p, 2 * kBt));
  EXPECT_EQ(Share(0, 1, p), 6u);
  SaveResult s = SaveOn(1, q, /*first_block=*/6);
  EXPECT_EQ(s.stored_tokens, 2 * kBt);
  EXPECT_EQ(Matched(1, q), q.size());
  EXPECT_EQ(Tree(1).size(), 3u);

  // The owner drops blocks [2, ...): its index no longer reaches block 2.
  Result<RemoveResult> rm = N(0).RemoveFrom(kNs, p, 2);
  ASSERT_OK(rm);
  EXPECT_EQ(rm->nodes, 1u);
  EXPECT_EQ(ResolveOn(0, p).blocks, 2u);

  EXPECT_EQ(PinCheck(1, q), 2 * kBt);
  EXPECT_EQ(F(1).calls(), 1u);
  StoreStats st = N(1).Stats();
  EXPECT_EQ(st.remote_fetch_failures, 1u);
  EXPECT_EQ(st.remote_tensors, 0u);
  // The remote increment and node 1's own blocks below it left the index.
  EXPECT_EQ(Matched(1, q), 2 * kBt);
  std::vector<PrefixNodeInfo> tree = Tree(1);
  ASSERT_EQ(tree.size(), 1u);
  EXPECT_EQ(tree[0].tokens, 2 * kBt);
  EXPECT_EQ(st.owned_bytes, 4096u);  // blocks [0,2), one aligned allocation
  EXPECT_EQ(st.pinned_bytes, 0u);
  // Nothing left to fetch.
  EXPECT_EQ(PinCheck(1, q), 2 * kBt);
  EXPECT_EQ(F(1).calls(), 1u);
}

TEST_F(StoreRemoteTest, GoneOfTheFirstOwnerSegmentDropsLaterSegmentsToo) {
  // Node 2 asks node 0 for [0,2) and [4,6) and node 1 for [2,4) in one load;
  // node 0 no longer has any of it: everything from block 0 goes.
  const Tokens p = Gen(45, 6 * kBt);
  SaveOn(0, Head(p, 2 * kBt));
  Share(0, 1, Head(p, 2 * kBt));
  SaveOn(1, Head(p, 4 * kBt));
  Share(1, 0, Head(p, 4 * kBt));
  SaveOn(0, p, 4);
  Share(0, 2, p);
  ASSERT_EQ(Matched(2, p), p.size());
  ASSERT_OK(N(0).RemoveFrom(kNs, p, 0));
  EXPECT_EQ(ResolveOn(0, p).blocks, 0u);
  EXPECT_EQ(PinCheck(2, p), 0u);
  EXPECT_EQ(Matched(2, p), 0u);
  EXPECT_EQ(N(2).Stats().remote_tensors, 0u);
  EXPECT_EQ(N(2).Stats().used_bytes, 0u);
  EXPECT_EQ(N(2).Stats().pinned_bytes, 0u);
}

TEST_F(StoreRemoteTest, AShortFetchServesTheHeadAndDropsWhatTheOwnerNoLongerHolds) {
  // The owner holds only the head of what was asked (the rest went without
  // a removal reaching the requester, as when a node is killed): it sends
  // the head and says the rest is gone; the requester serves the head and
  // drops the rest from its index.
  const Tokens p = Gen(46, 8 * kBt);
  SaveOn(0, p);
  Share(0, 1, p);
  ASSERT_OK(N(0).RemoveFrom(kNs, p, 5));
  EXPECT_EQ(PinCheck(1, p), 5 * kBt);  // one segment [0,8): its 5 blocks held
  EXPECT_EQ(N(1).Stats().remote_fetch_failures, 0u);
  EXPECT_EQ(N(1).Stats().remote_fetch_bytes, 5 * kBb);
  EXPECT_EQ(Matched(1, p), 5 * kBt);
  EXPECT_EQ(PinCheck(1, p), 5 * kBt);  // transient: fetched again, now as [0,5)
  std::vector<SeenCall> log = F(1).log();
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0].requests.at(0).segments, (std::vector<SeenSegment>{{0, 8}}));
  EXPECT_EQ(log[1].requests.at(0).segments, (std::vector<SeenSegment>{{0, 5}}));
  EXPECT_EQ(N(1).Stats().pinned_bytes, 0u);
}

TEST_F(StoreRemoteTest, ARunWhoseOtherBranchItsOwnerLostStillLoadsTheBranchItHolds) {
  // Node 1 knows node 0's document and first question as one remote
  // increment (one run of node 0's blocks, though node 0 stores two). Node 0
  // loses the question without a removal reaching node 1 (it was killed
  // before the question reached its SSD tier) and saves a second question;
  // node 1 files it below the document, splitting its increment, which keeps
  // the first question as its tail and is fetched named by it. Node 0 holds
  // the document of that: node 1 loads the second question whole (it got
  // none of it before: the soak's final check, docs/soak.md).
  for (uint32_t replicate_after : {0u, 1u, 2u}) {
    SCOPED_TRACE(replicate_after);
    for (uint32_t i : {0u, 1u}) {
      StoreOptions o = NodeOptions(i);
      o.replicate_after = replicate_after;
      Reopen(i, o);
    }
    const Tokens doc = Gen(80 + replicate_after, 3 * kBt);
    const Tokens q1 = Cat(doc, Gen(83 + replicate_after, 3 * kBt));
    const Tokens q2 = Cat(doc, Gen(86 + replicate_after, 2 * kBt));
    SaveOn(0, doc);
    SaveOn(0, q1, 3);
    ASSERT_EQ(Share(0, 1, q1), Blocks(q1));
    ASSERT_EQ(N(1).Stats().remote_tensors, 1u);
    ASSERT_OK(N(0).RemoveFrom(kNs, q1, 3));  // node 1 is not told
    SaveOn(0, q2, 3);
    ASSERT_EQ(Share(0, 1, q2), Blocks(q2));
    EXPECT_EQ(PinCheck(1, q2), q2.size());
    EXPECT_EQ(Matched(1, q1), doc.size());  // the lost question left node 1's index
    EXPECT_EQ(PinCheck(1, q1), doc.size());
    EXPECT_EQ(PinCheck(1, q2), q2.size());
    EXPECT_EQ(N(1).Stats().remote_fetch_failures, 0u);
    EXPECT_EQ(N(1).Stats().pinned_bytes, 0u);
  }
}

// ---------------------------------------------------------- replica eviction

TEST_F(StoreRemoteTest, ReplicaShareEvictsBytesButKeepsTheRemoteEntry) {
  StoreOptions o = NodeOptions(1, 1 * kMiB);
  o.replica_share = 0.25;  // 256 KiB
  o.replicate_after = 1;   // every fetch is kept
  Reopen(1, o);
  const Tokens a = Gen(50, 160 * kBt), b = Gen(51, 160 * kBt);  // 160 KiB each
  SaveOn(0, a);
  SaveOn(0, b);
  Share(0, 1, a);
  Share(0, 1, b);
  EXPECT_EQ(PinCheck(1, a), a.size());
  EXPECT_EQ(N(1).Stats().replicas_kept, 1u);

  // b does not fit next to a in the replica share: a's bytes go.
  EXPECT_EQ(PinCheck(1, b), b.size());
  StoreStats s = N(1).Stats();
  EXPECT_EQ(s.replicas_kept, 2u);
  EXPECT_LE(s.replica_bytes, 256 * kKiB);
  EXPECT_GE(s.evictions, 1u);
  EXPECT_EQ(s.remote_tensors, 2u);
  // a is still known, as a remote increment without bytes.
  EXPECT_EQ(Matched(1, a), a.size());
  int remote_only = 0;
  for (const PrefixNodeInfo& n : Tree(1)) remote_only += n.tier == kTierRemote;
  EXPECT_EQ(remote_only, 1);
  // A later pin of a fetches it again.
  EXPECT_EQ(PinCheck(1, a), a.size());
  EXPECT_EQ(F(1).calls(), 3u);
  // b is served from its replica, or fetched again if a pushed it out.
  EXPECT_EQ(PinCheck(1, b), b.size());
}

// A load must be served whether or not its fetched bytes may be kept: a
// copy that cannot be a replica (larger than the replica share, or the share
// full of pinned replicas) can still serve the load transiently, as the first
// load did (AllocateLocked: "A transient replica ... may exceed the replica
// share").
TEST_F(StoreRemoteTest, HotIncrementLargerThanTheReplicaShareStillLoads) {
  StoreOptions o = NodeOptions(1, 1 * kMiB);
  o.replica_share = 0.1;  // ~102 KiB
  Reopen(1, o);           // replicate_after = 2
  const Tokens a = Gen(52, 200 * kBt);  // 200 KiB
  SaveOn(0, a);
  Share(0, 1, a);
  EXPECT_EQ(PinCheck(1, a), a.size());  // first load: transient
  EXPECT_EQ(F(1).calls(), 1u);
  // Second load: it would be kept, but cannot be; it must still load.
  EXPECT_EQ(PinCheck(1, a), a.size());
  EXPECT_EQ(PinCheck(1, a), a.size());
  EXPECT_LE(N(1).Stats().replica_bytes, 102 * kKiB);
  EXPECT_EQ(N(1).Stats().replicas_kept, 0u);
  EXPECT_EQ(N(1).Stats().pinned_bytes, 0u);
}

TEST_F(StoreRemoteTest, ReplicaShareFullOfPinnedReplicasStillLoads) {
  StoreOptions o = NodeOptions(1, 1 * kMiB);
  o.replica_share = 0.25;  // 256 KiB
  o.replicate_after = 1;
  Reopen(1, o);
  const Tokens a = Gen(54, 160 * kBt), b = Gen(55, 160 * kBt);
  SaveOn(0, a);
  SaveOn(0, b);
  Share(0, 1, a);
  Share(0, 1, b);
  Result<PrefixResult> pa = N(1).Pin(kNs, a, kSession);  // a's replica stays pinned
  ASSERT_OK(pa);
  ASSERT_EQ(pa->matched_tokens, a.size());
  // b cannot be kept next to the pinned a; the load must still be served.
  EXPECT_EQ(PinCheck(1, b), b.size());
  EXPECT_TRUE(Read(1, pa->extents) == Kv(a, 0, a.size()));
  ASSERT_OK(N(1).Release(pa->lease_id, kSession));
  EXPECT_EQ(PinCheck(1, b), b.size());  // now it can be kept
  EXPECT_EQ(N(1).Stats().pinned_bytes, 0u);
}

TEST_F(StoreRemoteTest, OwnedSavesPushAReplicaOutButNotItsIndexEntry) {
  StoreOptions o = NodeOptions(1, 1 * kMiB);
  o.replicate_after = 1;
  Reopen(1, o);
  const Tokens r = Gen(53, 160 * kBt);  // 160 KiB replica
  SaveOn(0, r);
  Share(0, 1, r);
  // 4 x 200 KiB of owned data, then the replica after them, then a fifth
  // 200 KiB save that fits only where the replica is.
  std::vector<Tokens> owned;
  for (int i = 0; i < 5; ++i) owned.push_back(Gen(60 + i, 200 * kBt));
  for (int i = 0; i < 4; ++i) SaveOn(1, owned[i]);
  EXPECT_EQ(PinCheck(1, r), r.size());
  ASSERT_GE(N(1).Stats().replica_bytes, 160 * kKiB);
  SaveOn(1, owned[4]);
  StoreStats s = N(1).Stats();
  EXPECT_EQ(s.replica_bytes, 0u);
  EXPECT_EQ(s.owned_bytes, 5 * 200 * kKiB);
  for (const Tokens& t : owned) EXPECT_EQ(Matched(1, t), t.size());
  EXPECT_EQ(Matched(1, r), r.size());  // still known, as remote
  std::optional<PrefixNodeInfo> n;
  for (const PrefixNodeInfo& x : Tree(1)) {
    if (x.tensor.owner().value == 0) n = x;
  }
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->tier, kTierRemote);
}

// ---------------------------------------------------------------- RemoveFrom

TEST_F(StoreRemoteTest, RemoveFromSplitsAnIncrement) {
  const Tokens p = Gen(70, 8 * kBt);
  const Tokens q = Cat(p, Gen(71, 4 * kBt));
  const Tokens other = Cat(Head(p, 2 * kBt), Gen(72, 3 * kBt));  // branches at block 2
  SaveOn(0, p);
  SaveOn(0, q);
  SaveOn(0, other);
  ASSERT_EQ(Matched(0, q), q.size());

  // From block 3, inside [2,8) (p's tensor split at 2 by `other`).
  Result<RemoveResult> r = N(0).RemoveFrom(kNs, q, 3);
  ASSERT_OK(r);
  EXPECT_EQ(r->nodes, 2u);                 // the tail [3,8) and q's [8,12)
  EXPECT_EQ(r->bytes, (5 + 4) * kBb);
  EXPECT_EQ(Matched(0, p), 3 * kBt);       // the head stays matchable
  EXPECT_EQ(Matched(0, q), 3 * kBt);
  EXPECT_EQ(Matched(0, other), other.size());  // the other branch stays
  EXPECT_EQ(PinCheck(0, p), 3 * kBt);
  EXPECT_EQ(PinCheck(0, other), other.size());
  // The head is one listed increment of 1 block below [0,2).
  int heads = 0;
  for (const PrefixNodeInfo& n : Tree(0)) heads += n.start_token == 2 * kBt && n.tokens == kBt;
  EXPECT_EQ(heads, 1);
  EXPECT_EQ(Tree(0).size(), 3u);  // [0,2), its head [2,3), other's [2,5)

  // Idempotent: a second call removes nothing.
  r = N(0).RemoveFrom(kNs, q, 3);
  ASSERT_OK(r);
  EXPECT_EQ(r->nodes, 0u);
  EXPECT_EQ(r->bytes, 0u);
  // A prompt not stored that far: a no-op.
  r = N(0).RemoveFrom(kNs, q, 5);
  ASSERT_OK(r);
  EXPECT_EQ(r->nodes, 0u);
  r = N(0).RemoveFrom(kNs, Gen(73, 16), 0);
  ASSERT_OK(r);
  EXPECT_EQ(r->nodes, 0u);
  r = N(0).RemoveFrom(kNs, Head(p, 2 * kBt), 3);  // tokens shorter than from_block
  ASSERT_OK(r);
  EXPECT_EQ(r->nodes, 0u);
  EXPECT_EQ(Matched(0, p), 3 * kBt);
  EXPECT_ERROR(N(0).RemoveFrom("nope", p, 0), Code::kNotFound);

  // At an increment boundary nothing is split.
  r = N(0).RemoveFrom(kNs, other, 2);
  ASSERT_OK(r);
  EXPECT_EQ(r->nodes, 1u);
  EXPECT_EQ(r->bytes, 3 * kBb);
  EXPECT_EQ(Matched(0, other), 2 * kBt);
  EXPECT_EQ(Matched(0, p), 3 * kBt);
  // From 0: everything.
  r = N(0).RemoveFrom(kNs, p, 0);
  ASSERT_OK(r);
  EXPECT_EQ(Matched(0, p), 0u);
  EXPECT_TRUE(Tree(0).empty());
  StoreStats s = N(0).Stats();
  EXPECT_EQ(s.used_bytes, 0u);
  EXPECT_EQ(s.owned_bytes, 0u);
  EXPECT_EQ(s.tensors, 0u);
}

TEST_F(StoreRemoteTest, RemoveFromARemoteIncrementFetchesOnlyTheHead) {
  const Tokens p = Gen(74, 8 * kBt);
  SaveOn(0, p);
  Share(0, 1, p);
  Result<RemoveResult> r = N(1).RemoveFrom(kNs, p, 3);
  ASSERT_OK(r);
  EXPECT_EQ(r->nodes, 1u);
  EXPECT_EQ(Matched(1, p), 3 * kBt);
  EXPECT_EQ(N(1).Stats().remote_tensors, 1u);
  EXPECT_EQ(PinCheck(1, p), 3 * kBt);
  std::vector<SeenCall> log = F(1).log();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0].requests.at(0).segments, (std::vector<SeenSegment>{{0, 3}}));
  EXPECT_EQ(N(1).Stats().remote_fetch_bytes, 3 * kBb);
  // All of it: the remote tensor leaves.
  ASSERT_OK(N(1).RemoveFrom(kNs, p, 0));
  EXPECT_EQ(N(1).Stats().remote_tensors, 0u);
  EXPECT_EQ(N(1).Stats().tensors, 0u);
}

// ------------------------------------------------------------------ PinHeld

TEST_F(StoreRemoteTest, PinHeldPastRemotePlaceholdersPinsOnlyHeldBlocks) {
  const Tokens p = Gen(80, 8 * kBt);
  SaveOn(1, Head(p, 4 * kBt));
  EXPECT_EQ(Share(1, 0, Head(p, 4 * kBt)), 4u);
  SaveResult s = SaveOn(0, p, 4);  // node 0 holds blocks [4,8)
  EXPECT_EQ(s.matched_tokens, 4 * kBt);
  const uint64_t hits_before = N(0).Stats().hits;

  for (uint64_t from : {4u, 5u, 7u}) {
    SCOPED_TRACE("from_block " + std::to_string(from));
    Result<PrefixResult> pin = N(0).PinHeld(kNs, p, from, kPeerSession);
    ASSERT_OK(pin);
    EXPECT_EQ(pin->matched_tokens, p.size());
    EXPECT_NE(pin->lease_id, 0u);
    uint64_t len = 0;
    for (const Extent& x : pin->extents) len += x.length;
    EXPECT_EQ(len, (8 - from) * kBb);
    EXPECT_TRUE(Read(0, pin->extents) == Kv(p, from * kBt, p.size()));
    EXPECT_EQ(N(0).Stats().pinned_bytes, 4096u);  // blocks [4,8), nothing of the placeholder
    EXPECT_OK(N(0).Release(pin->lease_id, kPeerSession));
  }
  EXPECT_EQ(N(0).Stats().peer_served_bytes, (4 + 3 + 1) * kBb);
  EXPECT_EQ(N(0).Stats().hits, hits_before);  // not client hits
  EXPECT_EQ(F(0).calls(), 0u);                // PinHeld never fetches

  // Blocks it does not hold: nothing pinned, nothing fetched, no error.
  for (uint64_t from : {0u, 2u, 8u, 9u}) {
    SCOPED_TRACE("from_block " + std::to_string(from));
    Result<PrefixResult> pin = N(0).PinHeld(kNs, p, from, kPeerSession);
    ASSERT_OK(pin);
    EXPECT_EQ(pin->matched_tokens, 0u);
    EXPECT_EQ(pin->lease_id, 0u);
    EXPECT_TRUE(pin->extents.empty());
  }
  EXPECT_EQ(F(0).calls(), 0u);
  EXPECT_EQ(N(0).Stats().active_leases, 0u);
  // Prompt shorter than the held part: up to the prompt's end.
  Result<PrefixResult> pin = N(0).PinHeld(kNs, Head(p, 6 * kBt), 4, kPeerSession);
  ASSERT_OK(pin);
  EXPECT_EQ(pin->matched_tokens, 6 * kBt);
  EXPECT_TRUE(Read(0, pin->extents) == Kv(p, 4 * kBt, 6 * kBt));
  EXPECT_OK(N(0).Release(pin->lease_id, kPeerSession));
}

TEST_F(StoreRemoteTest, PinHeldAcrossTwoOwnIncrementsAfterAPlaceholder) {
  // [0,2) remote (node 1), [2,5) and [5,7) node 0's own: from_block 3 starts
  // inside the first own increment.
  const Tokens p = Gen(81, 7 * kBt);
  SaveOn(1, Head(p, 2 * kBt));
  Share(1, 0, Head(p, 2 * kBt));
  SaveOn(0, Head(p, 5 * kBt), 2);
  SaveOn(0, p, 5);
  Result<PrefixResult> pin = N(0).PinHeld(kNs, p, 3, kPeerSession);
  ASSERT_OK(pin);
  EXPECT_EQ(pin->matched_tokens, p.size());
  uint64_t len = 0;
  for (const Extent& x : pin->extents) len += x.length;
  EXPECT_EQ(len, 4 * kBb);
  EXPECT_EQ(pin->extents.size(), 2u);
  EXPECT_TRUE(Read(0, pin->extents) == Kv(p, 3 * kBt, p.size()));
  EXPECT_OK(N(0).Release(pin->lease_id, kPeerSession));
}

// ----------------------------------------------------- track_lost, ListOwned

TEST_F(StoreRemoteTest, EvictedOwnedIncrementIsReportedLost) {
  StoreOptions o = NodeOptions(0, 1 * kMiB);
  o.track_lost = true;
  Reopen(0, o);
  const Tokens z = Gen(90, 300 * kBt);                // 300 KiB, kept hot
  const Tokens x = Gen(91, 4 * kBt);                  // 4 KiB
  const Tokens y = Cat(x, Gen(92, 300 * kBt));        // + 300 KiB below x
  SaveOn(0, z);
  SaveOn(0, x);
  SaveOn(0, y);
  // A remote increment (node 1's) is not owned: never listed nor lost.
  const Tokens r = Gen(93, 3 * kBt);
  SaveOn(1, r);
  Share(1, 0, r);

  auto sorted = [](std::vector<HeldIncrement> v) {
    std::sort(v.begin(), v.end(), [](const HeldIncrement& a, const HeldIncrement& b) {
      return std::tie(a.first_block, a.tokens) < std::tie(b.first_block, b.tokens);
    });
    return v;
  };
  std::vector<HeldIncrement> held = sorted(N(0).ListOwned());
  ASSERT_EQ(held.size(), 3u);
  for (const HeldIncrement& h : held) EXPECT_EQ(h.ns, kNs);
  EXPECT_EQ(held[0].first_block, 0u);
  EXPECT_EQ(held[1].first_block, 0u);
  EXPECT_TRUE((held[0].tokens == x && held[1].tokens == z) || (held[0].tokens == z && held[1].tokens == x));
  EXPECT_EQ(held[2].first_block, 4u);
  EXPECT_EQ(held[2].tokens, y);  // the whole prefix, not just its own blocks
  EXPECT_TRUE(N(0).TakeLostIncrements().empty());

  for (int i = 0; i < 3; ++i) EXPECT_EQ(PinCheck(0, z), z.size());  // hits: z outranks y
  // 500 KiB more do not fit: y (the cheapest leaf) is evicted, with no SSD.
  const Tokens w = Gen(94, 500 * kBt);
  SaveOn(0, w);
  EXPECT_EQ(Matched(0, y), x.size());
  EXPECT_EQ(Matched(0, z), z.size());
  EXPECT_EQ(Matched(0, w), w.size());
  std::vector<RemovalPoint> lost = N(0).TakeLostIncrements();
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].ns, kNs);
  EXPECT_EQ(lost[0].from_block, 4u);
  EXPECT_EQ(lost[0].tokens, Head(y, 5 * kBt));  // up to from_block + 1 blocks
  EXPECT_TRUE(N(0).TakeLostIncrements().empty());  // taken

  held = sorted(N(0).ListOwned());
  ASSERT_EQ(held.size(), 3u);
  std::set<Tokens> owned_prefixes;
  for (const HeldIncrement& h : held) {
    EXPECT_EQ(h.first_block, 0u);
    owned_prefixes.insert(h.tokens);
  }
  EXPECT_EQ(owned_prefixes, (std::set<Tokens>{x, z, w}));
}

TEST_F(StoreRemoteTest, WithoutTrackLostNothingIsRecorded) {
  StoreOptions o = NodeOptions(0, 1 * kMiB);
  Reopen(0, o);
  for (int i = 0; i < 6; ++i) SaveOn(0, Gen(95 + i, 300 * kBt));
  EXPECT_GE(N(0).Stats().evictions, 1u);
  EXPECT_TRUE(N(0).TakeLostIncrements().empty());
}

TEST_F(StoreRemoteTest, RemovalsAndReplicaEvictionsAreNotLost) {
  StoreOptions o = NodeOptions(1, 1 * kMiB);
  o.track_lost = true;
  o.replicate_after = 1;
  o.replica_share = 0.25;
  Reopen(1, o);
  const Tokens a = Gen(110, 160 * kBt), b = Gen(111, 160 * kBt);
  SaveOn(0, a);
  SaveOn(0, b);
  Share(0, 1, a);
  Share(0, 1, b);
  EXPECT_EQ(PinCheck(1, a), a.size());
  EXPECT_EQ(PinCheck(1, b), b.size());  // evicts a's replica bytes
  const Tokens own = Gen(112, 8 * kBt);
  SaveOn(1, own);
  ASSERT_OK(N(1).RemoveFrom(kNs, own, 0));
  EXPECT_TRUE(N(1).TakeLostIncrements().empty());
}

TEST_F(StoreRemoteTest, GetNamespaceDefCarriesTheSalt) {
  Result<NamespaceDef> d = N(0).GetNamespaceDef(kNs);
  ASSERT_OK(d);
  EXPECT_EQ(d->salt, kSalt);
  EXPECT_EQ(d->info.name, kNs);
  EXPECT_TRUE(d->info.salted);
  EXPECT_EQ(d->info.layout, SmallLayout());
  EXPECT_ERROR(N(0).GetNamespaceDef("nope"), Code::kNotFound);
}

// ------------------------------------------------- save past a remote prefix

TEST_F(StoreRemoteTest, SaveAfterARemotePrefixStoresOnlyTheNewBlocks) {
  const Tokens p = Gen(120, 8 * kBt);
  SaveOn(0, Head(p, 5 * kBt));
  Share(0, 1, Head(p, 5 * kBt));
  // The whole KV, from block 0: only blocks [5,8) are stored.
  SaveResult s = SaveOn(1, p);
  EXPECT_EQ(s.matched_tokens, 5 * kBt);
  EXPECT_EQ(s.stored_tokens, 3 * kBt);
  EXPECT_EQ(s.new_bytes, 3 * kBb);
  StoreStats st = N(1).Stats();
  EXPECT_EQ(st.saved_bytes, 3 * kBb);
  EXPECT_EQ(st.remote_tensors, 1u);
  EXPECT_EQ(st.replica_bytes, 0u);
  EXPECT_EQ(F(1).calls(), 0u);  // saving never fetches
  // Saving again: nothing new.
  s = SaveOn(1, p);
  EXPECT_EQ(s.matched_tokens, p.size());
  EXPECT_EQ(s.new_bytes, 0u);
  // Only the new part, with first_block at the end of the remote prefix.
  const Tokens q = Cat(Head(p, 5 * kBt), Gen(121, 2 * kBt));
  s = SaveOn(1, q, 5);
  EXPECT_EQ(s.matched_tokens, 5 * kBt);
  EXPECT_EQ(s.stored_tokens, 2 * kBt);
  EXPECT_EQ(ResolveOn(1, p).ranges, (std::vector<OwnedRange>{{5, 0}, {8, 1}}));
  EXPECT_EQ(ResolveOn(1, q).ranges, (std::vector<OwnedRange>{{5, 0}, {7, 1}}));
  // Loads: the remote head is fetched, the rest is local, all byte-exact.
  EXPECT_EQ(PinCheck(1, p), p.size());
  EXPECT_EQ(PinCheck(1, q), q.size());
  // ListOwned names only node 1's increments, from block 5.
  std::vector<HeldIncrement> held = N(1).ListOwned();
  ASSERT_EQ(held.size(), 2u);
  for (const HeldIncrement& h : held) EXPECT_EQ(h.first_block, 5u);
}

TEST_F(StoreRemoteTest, RemoteNodeHitsCountOnTheTreeNodes) {
  const Tokens p = Gen(122, 4 * kBt);
  SaveOn(0, p);
  Share(0, 1, p);
  EXPECT_EQ(PinCheck(1, p), p.size());
  std::optional<PrefixNodeInfo> n = NodeAt(1, 0);
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->hits, 1u);
}

// ------------------------------------------------------------ threads smoke

TEST_F(StoreRemoteTest, ConcurrentRemotePinsWithSavesAndRemovals) {
  core::SetLogLevel(core::LogLevel::kError);  // (TearDown restores it)
  StoreOptions o1 = NodeOptions(1, 2 * kMiB);
  o1.replica_share = 0.3;
  Reopen(1, o1);
  // Prompts without shared heads: a prompt never matches part of another's
  // remote increment (that case is the Branch... tests above), so any wrong
  // byte here comes from a race.
  constexpr int kPrompts = 12;
  std::vector<Tokens> prompts;
  for (int i = 0; i < kPrompts; ++i) {
    prompts.push_back(Gen(131 + i, (6 + i) * kBt));
    SaveOn(0, prompts.back());
  }
  for (const Tokens& t : prompts) Share(0, 1, t);
  F(1).Record(false);

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> pins{0}, full{0}, bad{0}, errors{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&, t] {
      std::mt19937_64 rng(1000 + t);
      const uint64_t session = 500 + t;
      while (!stop.load()) {
        const Tokens& p = prompts[rng() % kPrompts];
        Result<PrefixResult> pin = N(1).Pin(kNs, p, session);
        if (!pin.ok()) {
          errors++;
          continue;
        }
        pins++;
        if (pin->matched_tokens == p.size()) full++;
        std::vector<uint8_t> got;
        for (const Extent& x : pin->extents) {
          const uint8_t* b = N(1).arena_base() + x.arena_offset;
          got.insert(got.end(), b, b + x.length);
        }
        if (std::vector<uint8_t> want = Kv(p, 0, pin->matched_tokens); got != want) {
          if (bad++ < 3) {
            size_t at = 0;
            while (at < got.size() && got[at] == want[at]) ++at;
            std::string xs;
            for (const Extent& x : pin->extents) {
              xs += " {owner " + std::to_string(x.tensor.owner().value) + " seq " + std::to_string(x.tensor.seq()) +
                    " off " + std::to_string(x.offset) + " len " + std::to_string(x.length) + " arena " +
                    std::to_string(x.arena_offset) + "}";
            }
            ADD_FAILURE() << "wrong bytes: prompt of " << p.size() << " tokens, matched " << pin->matched_tokens
                          << ", first wrong byte " << at << " (block " << at / kBb << ");" << xs;
          }
        }
        if (pin->lease_id && !N(1).Release(pin->lease_id, session).ok()) errors++;
      }
    });
  }
  std::thread writer([&] {
    std::mt19937_64 rng(7);
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(800);
    while (std::chrono::steady_clock::now() < until) {
      const Tokens& p = prompts[rng() % kPrompts];
      const uint64_t from = rng() % Blocks(p);
      switch (rng() % 5) {
        case 0:  // the owner drops part of it (fetches then see gone or short)
          if (!N(0).RemoveFrom(kNs, p, from).ok()) errors++;
          break;
        case 1:  // and the removal reaches node 1
          if (!N(1).RemoveFrom(kNs, p, from).ok()) errors++;
          break;
        case 2:  // the owner saves it again (same bytes)
          SaveOn(0, p);
          break;
        default:  // the index shard tells node 1 again
          Share(0, 1, p);
          break;
      }
      // Node 1's own saves hanging below remote data.
      if (rng() % 4 == 0) {
        const Tokens own = Cat(p, Gen(rng() % 1000, 2 * kBt));
        std::vector<uint8_t> data = Kv(own, 0, own.size());
        Result<SaveResult> s = N(1).Save(kNs, own, data.data(), data.size(), 0);
        if (!s.ok() && s.status().code() != Code::kResourceExhausted) errors++;
      }
    }
    stop = true;
  });
  writer.join();
  for (auto& r : readers) r.join();

  EXPECT_EQ(bad.load(), 0u);
  EXPECT_EQ(errors.load(), 0u);
  EXPECT_GT(pins.load(), 100u);
  EXPECT_GT(full.load(), 0u);
  StoreStats s1 = N(1).Stats();
  EXPECT_EQ(s1.active_leases, 0u);
  EXPECT_EQ(s1.pinned_bytes, 0u);
  StoreStats s0 = N(0).Stats();
  EXPECT_EQ(s0.active_leases, 0u);
  EXPECT_EQ(s0.pinned_bytes, 0u);
  RecordProperty("pins", static_cast<int>(pins.load()));
  RecordProperty("fetches", static_cast<int>(F(1).calls()));
  // Everything still loads byte-exact once the owner holds it all again.
  for (const Tokens& p : prompts) {
    SaveOn(0, p);
    Share(0, 1, p);
  }
  for (const Tokens& p : prompts) EXPECT_EQ(PinCheck(1, p), p.size());
}

}  // namespace
}  // namespace ptstore::storage


namespace ptstore::storage {
namespace {

// Quotas (ptstore/quota.h) on a node that fetches: the bytes of another
// node's increments kept here count against the namespace's DRAM quota
// like its own, and make room among the namespace's data only.
TEST_F(StoreRemoteTest, KeptReplicasCountAgainstTheNamespaceQuotaAndEvictOnlyItsOwn) {
  ASSERT_OK(N(1).CreateNamespace("other", SmallLayout(), "", 1000, 1000, 0755, false));
  std::vector<uint8_t> kv;
  std::vector<Tokens> others;
  for (int i = 0; i < 4; ++i) {
    others.push_back(Gen(900 + i, 16 * kBt));
    kv = Kv(others.back(), 0, others.back().size());
    ASSERT_OK(N(1).Save("other", others.back(), kv.data(), kv.size(), 0));
  }
  // 16 blocks of 1 KiB: one 16 KiB allocation per prompt; room for 3.
  ASSERT_OK(N(1).SetQuota(kNs, QuotaChange{48 * kKiB, {}}));
  std::vector<Tokens> prompts;
  for (int i = 0; i < 8; ++i) {
    prompts.push_back(Gen(800 + i, 16 * kBt));
    SaveOn(0, prompts.back());
    Share(0, 1, prompts.back());
    EXPECT_EQ(PinCheck(1, prompts.back()), prompts.back().size());
    EXPECT_EQ(PinCheck(1, prompts.back()), prompts.back().size());  // the second load keeps it
    auto q = N(1).GetQuota(kNs);
    ASSERT_OK(q);
    EXPECT_LE(q->dram_bytes, 48 * kKiB) << i;
  }
  auto q = N(1).GetQuota(kNs);
  ASSERT_OK(q);
  EXPECT_EQ(q->dram_bytes, 48 * kKiB);
  EXPECT_GT(q->dram_evictions, 0u);
  EXPECT_EQ(N(1).Stats().replica_bytes, 48 * kKiB);
  // The other namespace kept everything; every prompt still loads (fetched
  // again where the quota evicted its replica).
  for (const Tokens& t : others) {
    std::vector<uint8_t> out(t.size() * kBpt);
    auto r = N(1).LoadCopy("other", t, out.data(), out.size());
    ASSERT_OK(r);
    EXPECT_EQ(*r, t.size());
  }
  for (const Tokens& t : prompts) EXPECT_EQ(PinCheck(1, t), t.size());
}

}  // namespace
}  // namespace ptstore::storage
