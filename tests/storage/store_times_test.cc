// The times of increments (ptstore(7) "Times"): a save stamps them, uses
// (lookups, pins, loads, peers' fetches) move atime and listings do not, a
// split moves ctime, SetTimes sets them, and they survive a restart with the
// SSD tier.
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "storage/cache/store.h"
#include "tests/storage/kv_fixture.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/status_matchers.h"

namespace ptstore::storage {
namespace {

using namespace testkv;  // NOLINT: the shared test fixture

constexpr uint64_t kSession = 4;

// Lets the wall clock move on, so that a time taken afterwards is later.
void Tick() { std::this_thread::sleep_for(std::chrono::milliseconds(2)); }

class StoreTimesTest : public ::testing::Test {
 protected:
  void Open(bool ssd) {
    store_.reset();
    StoreOptions o;
    o.arena_bytes = 1 * kMiB;
    o.prefault = false;
    o.try_huge_pages = false;
    o.times_sync_ms = 0;  // only when the test asks
    if (ssd) {
      o.ssd.dir = dir_.path() + "/ssd";
      o.ssd.capacity = 64 * kMiB;
      o.ssd.segment_bytes = 1 * kMiB;
      o.ssd.sync = SsdOptions::Sync::kNone;
      o.ssd.background_compaction = false;
    }
    auto s = Store::Open(o);
    ASSERT_OK(s);
    store_ = std::move(*s);
    if (!store_->GetNamespace("m").ok()) {
      ASSERT_OK(store_->CreateNamespace("m", SmallLayout(), "", 0, 0, 0755, false));
    }
  }
  void Save(const Tokens& t) {
    std::vector<uint8_t> kv = Kv(t, 0, t.size());
    ASSERT_OK(store_->Save("m", t, kv.data(), kv.size(), 0));
  }
  // The increment that ends at token `end`.
  PrefixNodeInfo At(uint64_t end) {
    auto tree = store_->ListTree("m", ChainKey{}, true);
    EXPECT_OK(tree);
    for (const auto& n : *tree) {
      if (n.start_token + n.tokens == end) return n;
    }
    ADD_FAILURE() << "no increment ends at " << end;
    return {};
  }
  Times TimesAt(uint64_t end) { return At(end).times; }

  ptstore::testing::TempDir dir_;
  std::unique_ptr<Store> store_;
};

TEST_F(StoreTimesTest, ASaveStampsAllThreeAndTheNamespaceShowsTheNewest) {
  Open(false);
  const NamespaceInfo created = *store_->GetNamespace("m");
  EXPECT_GT(created.times.mtime_ns, 0u);
  Tick();
  const uint64_t before = WallClockNs();
  Save(RandomTokens(1, 32));
  const uint64_t after = WallClockNs();
  const Times t = TimesAt(32);
  EXPECT_GE(t.mtime_ns, before);
  EXPECT_LE(t.mtime_ns, after);
  EXPECT_EQ(t.atime_ns, t.mtime_ns);
  EXPECT_EQ(t.ctime_ns, t.mtime_ns);
  const NamespaceInfo ns = *store_->GetNamespace("m");
  EXPECT_EQ(ns.times, t) << "the namespace shows its newest increment's times";
  EXPECT_GT(ns.times.mtime_ns, created.times.mtime_ns);
}

TEST_F(StoreTimesTest, UsesMoveAtimeAndListingsDoNot) {
  Open(false);
  Tokens a = RandomTokens(2, 32);
  Tokens b = Cat(a, RandomTokens(3, 16));  // below a: a is its ancestor
  Save(a);
  Save(b);
  const Times a0 = TimesAt(32), b0 = TimesAt(48);
  Tick();
  // Listings, increment info, the cluster's probes and a miss are no use.
  ASSERT_OK(store_->ListTree("m", ChainKey{}, true));
  ASSERT_OK(store_->Increment("m", At(48).key, false, false, kSession));
  ASSERT_OK(store_->Resolve("m", b));
  ASSERT_OK(store_->Holds("m", b, 0));
  ASSERT_OK(store_->Lookup("m", RandomTokens(4, 32)));
  EXPECT_EQ(TimesAt(32), a0);
  EXPECT_EQ(TimesAt(48), b0);

  // A lookup of a uses a only.
  ASSERT_OK(store_->Lookup("m", a));
  const Times a1 = TimesAt(32);
  EXPECT_GT(a1.atime_ns, a0.atime_ns);
  EXPECT_EQ(a1.mtime_ns, a0.mtime_ns);
  EXPECT_EQ(a1.ctime_ns, a0.ctime_ns);
  EXPECT_EQ(TimesAt(48), b0);

  // A pin of b, a load of b, a pin of b's increment and a peer's fetch of b
  // each use b and its ancestor a.
  Times last_a = a1, last_b = b0;
  auto expect_both_used = [&](const char* what) {
    const Times na = TimesAt(32), nb = TimesAt(48);
    EXPECT_GT(na.atime_ns, last_a.atime_ns) << what;
    EXPECT_GT(nb.atime_ns, last_b.atime_ns) << what;
    EXPECT_EQ(nb.mtime_ns, b0.mtime_ns) << what;
    EXPECT_EQ(store_->GetNamespace("m")->times.atime_ns, nb.atime_ns) << what;
    last_a = na;
    last_b = nb;
  };
  Tick();
  auto pin = store_->Pin("m", b, kSession);
  ASSERT_OK(pin);
  ASSERT_OK(store_->Release(pin->lease_id, kSession));
  expect_both_used("pin");
  Tick();
  std::vector<uint8_t> dst(48 * kBpt);
  ASSERT_EQ(*store_->LoadCopy("m", b, dst.data(), dst.size()), 48u);
  expect_both_used("load");
  Tick();
  auto inc = store_->Increment("m", At(48).key, true, false, kSession);
  ASSERT_OK(inc);
  ASSERT_OK(store_->Release(inc->lease_id, kSession));
  expect_both_used("pin of an increment (a kv file opened on the mount)");
  Tick();
  auto held = store_->PinHeld("m", b, 8, kSession);
  ASSERT_OK(held);
  ASSERT_OK(store_->Release(held->lease_id, kSession));
  expect_both_used("a peer's fetch");
  // A save of the same prompt again uses what it matched.
  Tick();
  Save(b);
  expect_both_used("a save of a stored prompt");
}

TEST_F(StoreTimesTest, ASplitMovesCtimeOfBothHalvesAndKeepsMtime) {
  Open(false);
  Tokens a = RandomTokens(5, 64);
  Save(a);
  const Times a0 = TimesAt(64);
  Tick();
  Save(Cat(Head(a, 32), RandomTokens(6, 16)));  // branches inside a at token 32
  const Times upper = TimesAt(32), lower = TimesAt(64), branch = TimesAt(48);
  EXPECT_EQ(upper.mtime_ns, a0.mtime_ns);
  EXPECT_EQ(lower.mtime_ns, a0.mtime_ns);
  EXPECT_GT(upper.ctime_ns, a0.ctime_ns);
  EXPECT_EQ(lower.ctime_ns, upper.ctime_ns);
  EXPECT_GE(branch.mtime_ns, upper.ctime_ns);
  // The save used the upper half (its match); the lower half was not used.
  EXPECT_GT(upper.atime_ns, a0.atime_ns);
  EXPECT_EQ(lower.atime_ns, a0.atime_ns);
}

TEST_F(StoreTimesTest, SetTimesSetsAtimeAndMtimeAndALaterAtimeReachesTheAncestors) {
  Open(false);
  Tokens a = RandomTokens(7, 32);
  Tokens b = Cat(a, RandomTokens(8, 16));
  Save(a);
  Save(b);
  const PrefixNodeInfo an = At(32), bn = At(48);
  const uint64_t hour_ago = WallClockNs() - 3600ull * 1000000000;
  // Older times on both (deepest first): each keeps its own.
  ASSERT_OK(store_->SetTimes("m", bn.key, hour_ago, hour_ago));
  auto set = store_->SetTimes("m", an.key, hour_ago - 5, 0);
  ASSERT_OK(set);
  EXPECT_EQ(set->times.atime_ns, hour_ago - 5);
  EXPECT_EQ(set->times.mtime_ns, an.times.mtime_ns) << "0 leaves mtime as it was";
  EXPECT_GE(set->times.ctime_ns, an.times.ctime_ns);
  EXPECT_EQ(TimesAt(48).atime_ns, hour_ago);
  EXPECT_EQ(TimesAt(48).mtime_ns, hour_ago);
  // A later atime on b is a use of its prefix: a gets it too.
  ASSERT_OK(store_->SetTimes("m", bn.key, hour_ago + 7, 0));
  EXPECT_EQ(TimesAt(32).atime_ns, hour_ago + 7);
  EXPECT_ERROR(store_->SetTimes("m", ChainKey{1, 2}, 1, 0), Code::kNotFound);
  EXPECT_ERROR(store_->SetTimes("nope", bn.key, 1, 0), Code::kNotFound);
}

TEST_F(StoreTimesTest, TimesSurviveARestartWithTheSsdTier) {
  Open(true);
  Tokens a = RandomTokens(9, 32);
  Tokens b = Cat(a, RandomTokens(10, 16));
  Save(a);
  Save(b);
  ASSERT_OK(store_->PersistAll());
  ASSERT_EQ(store_->Stats().ssd_tensors, 2u);  // both on SSD, with the times they had
  const uint64_t t0 = WallClockNs() - 7200ull * 1000000000;
  // Changed after the records were written: SyncTimes writes them.
  ASSERT_OK(store_->SetTimes("m", At(48).key, t0, t0));
  ASSERT_OK(store_->SetTimes("m", At(32).key, t0 - 1, t0 - 2));
  Tick();
  ASSERT_OK(store_->Lookup("m", a));  // a used now
  const Times a1 = TimesAt(32), b1 = TimesAt(48);
  EXPECT_EQ(store_->SyncTimes(), 2u);
  EXPECT_EQ(store_->SyncTimes(), 0u) << "nothing changed since";
  const NamespaceInfo ns1 = *store_->GetNamespace("m");

  Open(true);  // a restart: the index comes back from the records
  EXPECT_EQ(TimesAt(32), a1);
  EXPECT_EQ(TimesAt(48), b1);
  // The namespace: its newest use, and nothing older than an increment's.
  const NamespaceInfo ns2 = *store_->GetNamespace("m");
  EXPECT_EQ(ns2.times.atime_ns, a1.atime_ns);
  EXPECT_GE(ns2.times.mtime_ns, b1.mtime_ns);
  EXPECT_LE(ns2.times.mtime_ns, ns1.times.mtime_ns);

  // A use after the restart reaches the record with the next sync.
  Tick();
  std::vector<uint8_t> dst(48 * kBpt);
  ASSERT_EQ(*store_->LoadCopy("m", b, dst.data(), dst.size()), 48u);
  EXPECT_EQ(dst, Kv(b, 0, 48));
  const Times b2 = TimesAt(48);
  EXPECT_GT(b2.atime_ns, b1.atime_ns);
  EXPECT_EQ(store_->SyncTimes(), 2u);
  Open(true);
  EXPECT_EQ(TimesAt(48), b2);
  EXPECT_EQ(TimesAt(32).atime_ns, b2.atime_ns);
}

}  // namespace
}  // namespace ptstore::storage
