// Concurrency tests of the node store: racing saves of one prefix store it
// once; branching saves share their base; and a few seconds of mixed saves,
// pins, loads, removals, lease expiry and namespace drops from many threads
// must never return a wrong byte and must leave consistent counters.
//
// Layout: layers=2 kv_heads=2 head_dim=16 bf16, 4 tokens a block: 256 B a
// token, 1 KiB a block. The KV of token i depends on its position and every
// token id up to it, so any byte from another branch or offset is caught.
#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/storage/kv_fixture.h"

#include "core/logging.h"
#include "ptstore/keys.h"
#include "ptstore/layout.h"
#include "ptstore/status.h"
#include "ptstore/types.h"
#include "storage/cache/store.h"
#include "tests/testing/status_matchers.h"

namespace ptstore::storage {
namespace {

using namespace testkv;  // NOLINT: the shared test fixture









std::unique_ptr<Store> OpenStore(uint64_t arena) {
  StoreOptions o;
  o.arena_bytes = arena;
  o.prefault = false;
  o.try_huge_pages = false;
  auto s = Store::Open(o);
  EXPECT_OK(s);
  return s.ok() ? std::move(*s) : nullptr;
}

Result<SaveResult> SaveKv(Store* store, const std::string& ns, const Tokens& t, uint64_t first_block = 0,
                          CacheClass cls = CacheClass::kOwned, uint32_t bt = kBt) {
  const uint64_t blocks = t.size() / bt;
  std::vector<uint8_t> data = Kv(t, first_block * bt, blocks * bt);
  return store->Save(ns, t, data.data(), data.size(), first_block, cls);
}

// True when the pinned extents hold exactly the KV of the first `matched`
// tokens of `t`.
bool PinnedBytesRight(const Store& store, const PrefixResult& p, const Tokens& t) {
  uint64_t total = 0;
  for (const Extent& x : p.extents) total += x.length;
  if (total != p.matched_tokens * kBpt) return false;
  const std::vector<uint8_t> expect = Kv(t, 0, p.matched_tokens);
  uint64_t at = 0;
  for (const Extent& x : p.extents) {
    if (x.arena_offset + x.length > store.arena_bytes()) return false;
    if (std::memcmp(store.arena_base() + x.arena_offset, expect.data() + at, x.length) != 0) return false;
    at += x.length;
  }
  return true;
}

TEST(StoreConcurrencyTest, SamePrefixSavedByManyThreadsIsStoredOnce) {
  auto store = OpenStore(16 * kMiB);
  ASSERT_TRUE(store);
  ASSERT_OK(store->CreateNamespace("ns", SmallLayout(), "", 0, 0, 0755, false));
  constexpr int kThreads = 8, kRounds = 25;
  constexpr uint64_t kBlocks = 48;
  for (int round = 0; round < kRounds; ++round) {
    const Tokens t = RandomTokens(round, kBlocks * kBt + 2);
    std::vector<SaveResult> results(kThreads);
    std::vector<Status> errors(kThreads);
    std::barrier start(kThreads);
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i) {
      threads.emplace_back([&, i] {
        const std::vector<uint8_t> data = Kv(t, 0, kBlocks * kBt);
        start.arrive_and_wait();
        auto r = store->Save("ns", t, data.data(), data.size(), 0);
        if (r.ok()) {
          results[i] = *r;
        } else {
          errors[i] = r.status();
        }
      });
    }
    for (auto& th : threads) th.join();
    int writers = 0;
    for (int i = 0; i < kThreads; ++i) {
      ASSERT_OK(errors[i]);
      if (results[i].new_bytes > 0) {
        ++writers;
        EXPECT_EQ(results[i].new_bytes, kBlocks * kBb);
        EXPECT_EQ(results[i].matched_tokens, 0u);
      } else {
        EXPECT_EQ(results[i].matched_tokens, kBlocks * kBt) << "a loser of the race finds the whole prefix";
        EXPECT_EQ(results[i].stored_tokens, 0u);
      }
    }
    EXPECT_EQ(writers, 1) << "round " << round;
    auto p = store->Pin("ns", t, 1);
    ASSERT_OK(p);
    EXPECT_EQ(p->matched_tokens, kBlocks * kBt);
    EXPECT_EQ(p->extents.size(), 1u);
    EXPECT_TRUE(PinnedBytesRight(*store, *p, t));
    ASSERT_OK(store->Release(p->lease_id, 1));
  }
  StoreStats s = store->Stats();
  EXPECT_EQ(s.saved_bytes, kRounds * kBlocks * kBb) << "each prefix written exactly once";
  EXPECT_EQ(s.dedup_bytes, kRounds * (kThreads - 1) * kBlocks * kBb);
  EXPECT_EQ(s.tensors, uint64_t{kRounds});
  EXPECT_EQ(s.prefix_nodes, uint64_t{kRounds});
  EXPECT_EQ(s.used_bytes, kRounds * kBlocks * kBb);
  EXPECT_EQ(s.pinned_bytes, 0u);
}

TEST(StoreConcurrencyTest, RacingSavesOfNestedPrefixesWriteEachBlockOnce) {
  auto store = OpenStore(16 * kMiB);
  ASSERT_TRUE(store);
  ASSERT_OK(store->CreateNamespace("ns", SmallLayout(), "", 0, 0, 0755, false));
  constexpr int kThreads = 8, kRounds = 20;
  uint64_t new_bytes_total = 0;
  for (int round = 0; round < kRounds; ++round) {
    const Tokens full = RandomTokens(100 + round, kThreads * 6 * kBt);
    std::vector<SaveResult> results(kThreads);
    std::barrier start(kThreads);
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i) {
      threads.emplace_back([&, i] {
        const Tokens mine = Head(full, (i + 1) * 6 * kBt);  // thread i saves 6(i+1) blocks
        start.arrive_and_wait();
        auto r = SaveKv(store.get(), "ns", mine);
        ASSERT_OK(r);
        results[i] = *r;
      });
    }
    for (auto& th : threads) th.join();
    uint64_t round_bytes = 0;
    for (const SaveResult& r : results) {
      EXPECT_EQ(r.new_bytes, r.stored_tokens * kBpt);
      round_bytes += r.new_bytes;
    }
    EXPECT_EQ(round_bytes, kThreads * 6 * kBb) << "every block written once, round " << round;
    new_bytes_total += round_bytes;
    for (int i = 0; i < kThreads; ++i) {
      const Tokens mine = Head(full, (i + 1) * 6 * kBt);
      auto p = store->Pin("ns", mine, 1);
      ASSERT_OK(p);
      EXPECT_EQ(p->matched_tokens, mine.size());
      EXPECT_TRUE(PinnedBytesRight(*store, *p, mine));
      ASSERT_OK(store->Release(p->lease_id, 1));
    }
  }
  StoreStats s = store->Stats();
  EXPECT_EQ(s.saved_bytes, new_bytes_total);
  EXPECT_EQ(s.pinned_bytes, 0u);
}

TEST(StoreConcurrencyTest, BranchingSavesShareTheirBase) {
  auto store = OpenStore(16 * kMiB);
  ASSERT_TRUE(store);
  ASSERT_OK(store->CreateNamespace("ns", SmallLayout(), "", 0, 0, 0755, false));
  constexpr int kThreads = 8, kRounds = 20;
  constexpr uint64_t kBase = 20, kSuffix = 8;
  for (int round = 0; round < kRounds; ++round) {
    const Tokens base = RandomTokens(1000 + round, kBase * kBt);
    std::barrier start(kThreads);
    std::vector<std::thread> threads;
    std::atomic<uint64_t> written{0};
    for (int i = 0; i < kThreads; ++i) {
      threads.emplace_back([&, i] {
        const Tokens mine = Cat(base, RandomTokens(5000 + round * 100 + i, kSuffix * kBt + 1));
        start.arrive_and_wait();
        auto r = SaveKv(store.get(), "ns", mine);
        ASSERT_OK(r);
        written += r->new_bytes;
        auto p = store->Pin("ns", mine, i + 1);
        ASSERT_OK(p);
        EXPECT_EQ(p->matched_tokens, (kBase + kSuffix) * kBt);
        EXPECT_TRUE(PinnedBytesRight(*store, *p, mine));
        ASSERT_OK(store->Release(p->lease_id, i + 1));
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(written.load(), (kBase + kThreads * kSuffix) * kBb) << "the base is stored once";
  }
  StoreStats s = store->Stats();
  EXPECT_EQ(s.saved_bytes, kRounds * (kBase + kThreads * kSuffix) * kBb);
  EXPECT_EQ(s.tensors, uint64_t{kRounds} * kThreads);
  EXPECT_EQ(s.prefix_nodes, uint64_t{kRounds} * (kThreads + 1)) << "one base node and a branch per thread";
  EXPECT_EQ(s.pinned_bytes, 0u);
  EXPECT_EQ(s.active_leases, 0u);
}

// LoadCopy pins internally for the length of one copy. That pin must hold
// however short the configured lease is (server.lease_ms): if the reaper
// could expire it mid-copy, a racing removal and save would reuse the bytes
// being copied and the client would get another prompt's KV without an error.
TEST(StoreConcurrencyTest, LoadCopyIsNotCutShortByLeaseExpiry) {
  constexpr uint64_t kBlocks = 16 * 1024;  // 16 MiB prefixes
  StoreOptions o;
  o.arena_bytes = 2 * kBlocks * kBb;  // room for exactly two
  o.prefault = false;
  o.try_huge_pages = false;
  o.default_lease_ms = 1;
  auto opened = Store::Open(o);
  ASSERT_OK(opened);
  std::unique_ptr<Store> store = std::move(*opened);
  const core::LogLevel level = core::GetLogLevel();
  core::SetLogLevel(core::LogLevel::kError);
  ASSERT_OK(store->CreateNamespace("ns", SmallLayout(), "", 0, 0, 0755, false));
  const Tokens p = RandomTokens(1, kBlocks * kBt);
  const Tokens q1 = RandomTokens(2, kBlocks * kBt);
  const Tokens q2 = RandomTokens(3, kBlocks * kBt);
  const std::vector<uint8_t> p_kv = Kv(p, 0, p.size());
  const std::vector<uint8_t> q1_kv = Kv(q1, 0, q1.size());
  const std::vector<uint8_t> q2_kv = Kv(q2, 0, q2.size());
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    // The server's reaper, a client removing p and others saving two
    // prefixes that, once p's bytes are free, cover the whole arena.
    while (!stop.load()) {
      store->ExpireLeases(Store::Clock::now());
      store->Remove("ns", p).status().IgnoreError();
      store->Remove("ns", q1).status().IgnoreError();
      store->Remove("ns", q2).status().IgnoreError();
      store->Save("ns", q1, q1_kv.data(), q1_kv.size(), 0).status().IgnoreError();
      store->Save("ns", q2, q2_kv.data(), q2_kv.size(), 0).status().IgnoreError();
    }
  });
  int loads = 0, wrong = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2000);
  while (std::chrono::steady_clock::now() < until && loads < 25) {
    if (!store->Save("ns", p, p_kv.data(), p_kv.size(), 0).ok()) continue;
    // Fresh, untouched pages: the copy takes page faults, as a client's
    // new buffer would.
    std::unique_ptr<uint8_t[]> dst(new uint8_t[p_kv.size()]);
    Result<uint64_t> n = store->LoadCopy("ns", p, dst.get(), p_kv.size());
    if (!n.ok() || *n == 0) continue;
    ++loads;
    if (std::memcmp(dst.get(), p_kv.data(), *n * kBpt) != 0) ++wrong;
  }
  stop = true;
  churn.join();
  core::SetLogLevel(level);
  EXPECT_GT(loads, 0);
  EXPECT_EQ(wrong, 0) << wrong << " of " << loads << " loads returned bytes overwritten after the internal pin expired";
  store->ExpireLeases(Store::Clock::now() + std::chrono::seconds(1));
  EXPECT_EQ(store->Stats().pinned_bytes, 0u);
}

// ------------------------------------------------------------------ the mix

// A prompt space with a lot of sharing: families with a common base, a few
// branches each, and sub-branches; every prompt is cut at a random length
// (partial blocks included).
struct PromptSpace {
  static constexpr uint64_t kFamilies = 24;
  Tokens Make(std::mt19937_64& rng) const {
    const uint64_t f = rng() % kFamilies;
    const uint64_t b = rng() % 4;
    const uint64_t c = rng() % 3;
    Tokens t = RandomTokens(f, (2 + f % 8) * kBt);
    t = Cat(t, RandomTokens(10000 + f * 10 + b, (1 + (f + b) % 6) * kBt + b));
    t = Cat(t, RandomTokens(20000 + f * 100 + b * 10 + c, (1 + c * 5) * kBt));
    return Head(t, kBt + rng() % t.size());
  }
};

struct Counters {
  std::atomic<uint64_t> wrong_bytes{0};
  std::atomic<uint64_t> errors{0};
  std::atomic<uint64_t> saves_ok{0};
  std::atomic<uint64_t> new_bytes{0};
  std::atomic<uint64_t> asks{0};  // successful lookups, pins and loads
  std::atomic<uint64_t> exhausted{0};
  std::atomic<uint64_t> aborted{0};
  std::atomic<uint64_t> removed_nodes{0};
  std::atomic<uint64_t> held_checks{0};
  std::mutex mu;
  std::vector<std::string> messages;
  std::vector<std::string> notes;  // expected refusals, shown for information
  void Error(const std::string& what) {
    errors++;
    std::lock_guard lk(mu);
    if (messages.size() < 20) messages.push_back(what);
  }
};

void Worker(Store* store, int id, std::chrono::steady_clock::time_point until, Counters* c) {
  std::mt19937_64 rng(id * 7777 + 1);
  const PromptSpace space;
  const uint64_t session = 100 + id;
  struct Held {
    Tokens tokens;
    PrefixResult pin;
  };
  std::vector<Held> held;  // pins kept across operations, checked later
  auto check_held = [&](const Held& h) {
    c->held_checks++;
    if (!PinnedBytesRight(*store, h.pin, h.tokens)) {
      c->wrong_bytes++;
      c->Error("held pin changed under its lease");
    }
  };
  while (std::chrono::steady_clock::now() < until) {
    // Volatile namespaces come and go: every operation may find them gone.
    const bool vol = rng() % 8 == 0;
    const std::string ns = vol ? (rng() % 2 ? "vol" : "vol8") : (rng() % 5 == 0 ? "rep" : "ns");
    const CacheClass cls = ns == "rep" ? CacheClass::kReplica : CacheClass::kOwned;
    const uint32_t bt = ns == "vol8" ? 8 : kBt;
    auto fine = [&](const Status& s) {
      if (s.ok()) return true;
      if (vol && s.code() == Code::kNotFound) return false;
      if (s.code() == Code::kResourceExhausted) {
        if (c->exhausted++ < 3) {
          std::lock_guard lk(c->mu);
          c->notes.push_back(ns + ": " + s.ToString());
        }
        return false;
      }
      if (s.code() == Code::kAborted) {
        c->aborted++;
        return false;
      }
      c->Error(ns + ": " + s.ToString());
      return false;
    };
    const Tokens t = space.Make(rng);
    const int op = static_cast<int>(rng() % 100);
    if (op < 35) {  // save, sometimes from where a lookup said the store was
      uint64_t first_block = 0;
      if (rng() % 3 == 0) {
        auto l = store->Lookup(ns, t);
        if (!fine(l.status())) continue;
        c->asks++;
        first_block = l->matched_tokens / bt;
      }
      auto r = SaveKv(store, ns, t, first_block, cls, bt);
      if (!r.ok() && r.status().code() == Code::kAborted && first_block > 0) {
        c->aborted++;
        r = SaveKv(store, ns, t, 0, cls, bt);
      }
      if (!fine(r.status())) continue;
      c->saves_ok++;
      c->new_bytes += r->new_bytes;
      if (r->new_bytes != r->stored_tokens * kBpt) c->Error("save: new_bytes does not match stored_tokens");
    } else if (op < 55) {  // pin, verify, release (or keep for a while)
      auto p = store->Pin(ns, t, session);
      if (!fine(p.status())) continue;
      c->asks++;
      if (p->matched_tokens == 0) continue;
      if (!PinnedBytesRight(*store, *p, t)) {
        c->wrong_bytes++;
        c->Error(ns + ": pinned bytes differ from the saved KV");
      }
      if (held.size() < 6 && rng() % 4 == 0) {
        held.push_back({t, *p});
      } else if (!store->Release(p->lease_id, session).ok()) {
        c->Error("release of a fresh lease failed");
      }
    } else if (op < 70) {  // load into a buffer of random size
      const uint64_t cap = (rng() % 40) * kBb + (rng() % 2 ? rng() % kBb : 0);
      std::vector<uint8_t> buf(cap + 16, 0x5A);
      auto n = store->LoadCopy(ns, t, buf.data(), cap);
      if (!fine(n.status())) continue;
      c->asks++;
      const uint64_t got = *n;
      if (got % bt != 0 || got * kBpt > cap || got > t.size()) {
        c->Error("load: " + std::to_string(got) + " tokens do not fit the rules");
        continue;
      }
      const std::vector<uint8_t> expect = Kv(t, 0, got);
      if (!std::equal(expect.begin(), expect.end(), buf.begin()) ||
          !std::all_of(buf.begin() + got * kBpt, buf.end(), [](uint8_t x) { return x == 0x5A; })) {
        c->wrong_bytes++;
        c->Error(ns + ": LoadCopy returned wrong bytes");
      }
    } else if (op < 80) {  // plain lookup
      auto l = store->Lookup(ns, t);
      if (!fine(l.status())) continue;
      c->asks++;
      uint64_t total = 0;
      for (const Extent& x : l->extents) total += x.length;
      if (total != l->matched_tokens * kBpt) c->Error("lookup: extents do not add up to the match");
    } else if (op < 85) {  // remove a prefix (often not stored: NotFound)
      auto r = store->Remove(ns, t);
      if (r.ok()) {
        c->removed_nodes += r->nodes;
      } else if (r.status().code() != Code::kNotFound && r.status().code() != Code::kInvalidArgument) {
        fine(r.status());
      }
    } else if (op < 87) {  // remove by a key of the prompt
      const auto keys = ChainKeys(RootKey(ns, ""), t, bt);
      if (keys.empty()) continue;
      auto r = store->RemoveByKey(ns, keys[rng() % keys.size()]);
      if (r.ok()) {
        c->removed_nodes += r->nodes;
      } else if (r.status().code() != Code::kNotFound) {
        fine(r.status());
      }
    } else if (op < 93) {  // a short lease nobody releases; never read
      auto p = store->Pin(ns, t, session + 1000, 1);
      if (!fine(p.status())) continue;
      c->asks++;
    } else if (op < 96) {
      store->ExpireLeases(std::chrono::steady_clock::now());
    } else {  // check and drop the held pins
      for (const Held& h : held) check_held(h);
      if (rng() % 2) {
        for (const Held& h : held) {
          if (!store->Release(h.pin.lease_id, session).ok()) c->Error("release of a held lease failed");
        }
      } else {
        store->ReleaseSession(session);
      }
      held.clear();
    }
  }
  for (const Held& h : held) check_held(h);
  store->ReleaseSession(session);
}

void Janitor(Store* store, std::chrono::steady_clock::time_point until, Counters* c) {
  std::mt19937_64 rng(99);
  while (std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5 + rng() % 20));
    for (const char* name : {"vol", "vol8"}) {
      if (rng() % 3 == 0) {
        auto d = store->DropNamespace(name);
        if (!d.ok() && d.status().code() != Code::kNotFound) c->Error("drop: " + d.status().ToString());
        auto n = store->CreateNamespace(name, SmallLayout(name == std::string("vol8") ? 8 : kBt), "", 0, 0, 0755,
                                        true);
        if (!n.ok()) c->Error("create: " + n.status().ToString());
      }
    }
    // The index is consistent whenever one looks.
    for (const char* name : {"ns", "rep"}) {
      auto tree = store->ListTree(name, ChainKey{}, true);
      if (!tree.ok()) {
        c->Error("list: " + tree.status().ToString());
        continue;
      }
      std::map<ChainKey, uint32_t> children;
      std::set<ChainKey> keys;
      for (const PrefixNodeInfo& n : *tree) {
        keys.insert(n.key);
        if (n.bytes != n.tokens * kBpt || n.tokens == 0 || n.tokens % kBt != 0) c->Error("list: bad node size");
        if (n.parent != ChainKey{}) children[n.parent]++;
      }
      for (const PrefixNodeInfo& n : *tree) {
        if (n.parent != ChainKey{} && !keys.count(n.parent)) c->Error("list: a node whose parent is not listed");
        if (n.children != children[n.key]) c->Error("list: child count differs from the listing");
      }
    }
  }
}

TEST(StoreConcurrencyTest, MixedWorkloadNeverReturnsAWrongByte) {
  // 3 MiB: far less than the prompt space, so eviction runs all the time.
  auto store = OpenStore(3 * kMiB);
  ASSERT_TRUE(store);
  ASSERT_OK(store->CreateNamespace("ns", SmallLayout(), "", 0, 0, 0755, false));
  ASSERT_OK(store->CreateNamespace("rep", SmallLayout(), "", 0, 0, 0755, false));
  ASSERT_OK(store->CreateNamespace("vol", SmallLayout(), "", 0, 0, 0755, false));
  ASSERT_OK(store->CreateNamespace("vol8", SmallLayout(8), "", 0, 0, 0755, false));
  // Lease expiry and session ends log a line each: thousands here.
  const core::LogLevel level = core::GetLogLevel();
  core::SetLogLevel(core::LogLevel::kError);
  struct RestoreLevel {
    core::LogLevel level;
    ~RestoreLevel() { core::SetLogLevel(level); }
  } restore{level};
  Counters c;
  constexpr int kWorkers = 6;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(3500);
  std::vector<std::thread> threads;
  for (int i = 0; i < kWorkers; ++i) threads.emplace_back(Worker, store.get(), i, until, &c);
  threads.emplace_back(Janitor, store.get(), until, &c);
  for (auto& th : threads) th.join();
  store->ExpireLeases(std::chrono::steady_clock::now() + std::chrono::seconds(1));  // the 1 ms leases

  for (const std::string& m : c.messages) ADD_FAILURE() << m;
  for (const std::string& m : c.notes) std::printf("refused (expected: pins, fragmentation, replicas never evict owned data): %s\n", m.c_str());
  EXPECT_EQ(c.wrong_bytes.load(), 0u);
  EXPECT_EQ(c.errors.load(), 0u);
  EXPECT_GT(c.saves_ok.load(), 1000u) << "the mix did too little to mean anything";
  EXPECT_GT(c.held_checks.load(), 0u);
  StoreStats s = store->Stats();
  std::printf("mix: %llu saves, %llu asks, %llu evictions, %llu removed nodes, %llu aborted, %llu exhausted\n",
              static_cast<unsigned long long>(c.saves_ok.load()), static_cast<unsigned long long>(c.asks.load()),
              static_cast<unsigned long long>(s.evictions), static_cast<unsigned long long>(c.removed_nodes.load()),
              static_cast<unsigned long long>(c.aborted.load()), static_cast<unsigned long long>(c.exhausted.load()));
  EXPECT_GT(s.evictions, 100u);
  EXPECT_EQ(s.active_leases, 0u);
  EXPECT_EQ(s.pinned_bytes, 0u) << "a pin leaked";
  EXPECT_EQ(s.saved_bytes, c.new_bytes.load()) << "saved_bytes is the sum of what saves reported";
  EXPECT_EQ(s.hits + s.misses, c.asks.load()) << "every successful lookup or load is one hit or one miss";
  EXPECT_EQ(s.used_bytes, s.owned_bytes + s.replica_bytes);
  EXPECT_LE(s.used_bytes, s.arena_bytes);
  EXPECT_LE(s.replica_bytes, static_cast<uint64_t>(0.25 * static_cast<double>(s.arena_bytes)));

  // The index and the counters agree: every live tensor is in some tree.
  std::set<uint64_t> tensors;
  uint64_t nodes = 0, ns_bytes = 0;
  for (const NamespaceInfo& n : store->ListNamespaces()) {
    auto tree = store->ListTree(n.name, ChainKey{}, true);
    ASSERT_OK(tree);
    nodes += tree->size();
    EXPECT_EQ(n.prefixes, tree->size()) << n.name;
    for (const PrefixNodeInfo& x : *tree) {
      tensors.insert(x.tensor.value);
      EXPECT_EQ(x.pins, 0u);
    }
    ns_bytes += n.bytes;
  }
  EXPECT_EQ(s.prefix_nodes, nodes);
  EXPECT_EQ(s.tensors, tensors.size()) << "a tensor outside the index was not freed";
  EXPECT_LE(ns_bytes, s.used_bytes);
  EXPECT_GE(ns_bytes + tensors.size() * 4096, s.used_bytes) << "used bytes beyond what the tensors round up to";

  // Everything still stored loads byte-exact.
  std::mt19937_64 rng(5);
  const PromptSpace space;
  for (int i = 0; i < 3000; ++i) {
    const Tokens t = space.Make(rng);
    auto p = store->Pin("ns", t, 1);
    ASSERT_OK(p);
    if (p->matched_tokens == 0) continue;
    EXPECT_TRUE(PinnedBytesRight(*store, *p, t));
    ASSERT_OK(store->Release(p->lease_id, 1));
  }
  // And everything can be taken away.
  for (const NamespaceInfo& n : store->ListNamespaces()) ASSERT_OK(store->DropNamespace(n.name));
  s = store->Stats();
  EXPECT_EQ(s.used_bytes, 0u);
  EXPECT_EQ(s.tensors, 0u);
  EXPECT_EQ(s.owned_bytes, 0u);
  EXPECT_EQ(s.replica_bytes, 0u);
  EXPECT_EQ(s.pinned_bytes, 0u);
}

}  // namespace
}  // namespace ptstore::storage
