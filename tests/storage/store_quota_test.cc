// Byte quotas per namespace in the store (storage/cache/store_quota.cc): exact
// accounting of each namespace's DRAM and SSD use, a flood in one namespace
// evicting only its own increments, saves larger than the quota storing the
// prefix that fits, pinned data, lowering a quota, SSD quotas, and quotas
// surviving a restart with the SSD tier. Every load is checked byte for
// byte (tests/storage/kv_fixture.h).
//
// Prompts of 16 tokens are 4 blocks of 1 KiB: one 4 KiB arena allocation
// (the arena's alignment), so the expected use is a count of prompts.
#include <algorithm>
#include <atomic>
#include <thread>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "storage/ssd_format/record.h"
#include "storage/cache/store.h"
#include "tests/storage/kv_fixture.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/status_matchers.h"

namespace ptstore::storage {
namespace {

using namespace testkv;  // NOLINT: the shared test fixture

constexpr uint64_t kPromptTokens = 16;
constexpr uint64_t kPromptBytes = 4 * kKiB;  // its allocation

class StoreQuotaTest : public ::testing::Test {
 protected:
  void TearDown() override { store_.reset(); }  // before tmp_ goes

  StoreOptions Options(bool ssd, uint64_t arena = 16 * kMiB, uint64_t ssd_capacity = 64 * kMiB) {
    StoreOptions o;
    o.arena_bytes = arena;
    o.prefault = false;
    o.try_huge_pages = false;
    if (ssd) {
      o.ssd.dir = tmp_.path() + "/ssd";
      o.ssd.capacity = ssd_capacity;
      o.ssd.segment_bytes = 1 * kMiB;
      o.ssd.sync = SsdOptions::Sync::kNone;
      o.ssd.background_compaction = false;
    }
    return o;
  }

  void Open(const StoreOptions& o, bool create = true) {
    store_.reset();
    auto s = Store::Open(o);
    ASSERT_OK(s);
    store_ = std::move(*s);
    if (!create) return;
    for (const char* name : {"a", "b"}) {
      auto r = store_->CreateNamespace(name, SmallLayout(), "", 1000, 1000, 0755, true);
      ASSERT_OK(r);
    }
  }

  static Tokens Prompt(const std::string& ns, int i, size_t tokens = kPromptTokens) {
    return RandomTokens((ns == "a" ? 100000 : 200000) + i, tokens);
  }

  Result<SaveResult> Save(const std::string& ns, const Tokens& t) {
    std::vector<uint8_t> kv = Kv(t, 0, t.size() / kBt * kBt);
    return store_->Save(ns, t, kv.data(), kv.size(), 0);
  }

  // Loads the longest stored prefix of `t`, checking every byte; the tokens.
  uint64_t Load(const std::string& ns, const Tokens& t) {
    std::vector<uint8_t> out(t.size() * kBpt);
    auto r = store_->LoadCopy(ns, t, out.data(), out.size());
    EXPECT_OK(r);
    if (!r.ok()) return 0;
    std::vector<uint8_t> want = Kv(t, 0, *r);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), out.begin())) << "wrong bytes for a prefix of " << *r;
    return *r;
  }

  NamespaceQuota Quota(const std::string& ns) {
    auto q = store_->GetQuota(ns);
    EXPECT_OK(q);
    return q.ok() ? *q : NamespaceQuota{};
  }

  NamespaceQuota Set(const std::string& ns, std::optional<uint64_t> dram, std::optional<uint64_t> ssd = {}) {
    auto q = store_->SetQuota(ns, QuotaChange{dram, ssd});
    EXPECT_OK(q);
    return q.ok() ? *q : NamespaceQuota{};
  }

  testing::TempDir tmp_{"ptstore-store-quota"};
  std::unique_ptr<Store> store_;
};

TEST_F(StoreQuotaTest, UseIsCountedExactlyPerNamespace) {
  Open(Options(false));
  for (int i = 0; i < 10; ++i) ASSERT_OK(Save("a", Prompt("a", i)));
  for (int i = 0; i < 3; ++i) ASSERT_OK(Save("b", Prompt("b", i)));
  // A continuation of a stored prompt is one more tensor of its own blocks.
  ASSERT_OK(Save("a", Cat(Prompt("a", 0), RandomTokens(7, 8))));
  EXPECT_EQ(Quota("a").dram_bytes, 10 * kPromptBytes + 4 * kKiB);
  EXPECT_EQ(Quota("b").dram_bytes, 3 * kPromptBytes);
  EXPECT_EQ(Quota("a").dram_bytes + Quota("b").dram_bytes, store_->Stats().used_bytes);
  EXPECT_EQ(Quota("a").ssd_bytes, 0u);
  // A save of what is stored adds nothing; a removal gives its bytes back.
  ASSERT_OK(Save("a", Prompt("a", 1)));
  EXPECT_EQ(Quota("a").dram_bytes, 10 * kPromptBytes + 4 * kKiB);
  ASSERT_OK(store_->Remove("a", Prompt("a", 0)));  // and its continuation
  EXPECT_EQ(Quota("a").dram_bytes, 9 * kPromptBytes);
  ASSERT_OK(store_->DropNamespace("b"));
  EXPECT_EQ(Quota("a").dram_bytes, store_->Stats().used_bytes);
  auto all = store_->ListQuotas();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].ns, "a");
}

TEST_F(StoreQuotaTest, AFloodEvictsOnlyItsOwnIncrements) {
  Open(Options(false));
  for (int i = 0; i < 8; ++i) ASSERT_OK(Save("b", Prompt("b", i)));
  Set("a", 64 * kKiB);
  for (int i = 0; i < 200; ++i) {
    auto r = Save("a", Prompt("a", i));
    ASSERT_OK(r);
    EXPECT_EQ(r->stored_tokens, kPromptTokens) << "a save that fits its quota stores all of it";
    EXPECT_LE(Quota("a").dram_bytes, 64 * kKiB);
  }
  const NamespaceQuota a = Quota("a");
  EXPECT_EQ(a.dram_bytes, 64 * kKiB);
  EXPECT_EQ(a.dram_evictions, 200u - 16u);
  EXPECT_EQ(a.cut_saves, 0u);
  // The other namespace lost nothing.
  for (int i = 0; i < 8; ++i) EXPECT_EQ(Load("b", Prompt("b", i)), kPromptTokens) << i;
  EXPECT_EQ(Quota("b").dram_evictions, 0u);
  EXPECT_EQ(Quota("b").dram_bytes, 8 * kPromptBytes);
  // GDSF within the namespace: the newest prompts (inflated priority) stay.
  for (int i = 184; i < 200; ++i) EXPECT_EQ(Load("a", Prompt("a", i)), kPromptTokens) << i;
}

TEST_F(StoreQuotaTest, AncestorsStayWhileTheirDescendantsDo) {
  Open(Options(false));
  Set("a", 32 * kKiB);
  const Tokens head = RandomTokens(5, 16);
  ASSERT_OK(Save("a", head));
  for (int i = 0; i < 40; ++i) {
    ASSERT_OK(Save("a", Cat(head, RandomTokens(1000 + i, 16))));
    EXPECT_LE(Quota("a").dram_bytes, 32 * kKiB);
  }
  // Every continuation still stored loads whole, head included.
  int whole = 0;
  for (int i = 0; i < 40; ++i) {
    const uint64_t got = Load("a", Cat(head, RandomTokens(1000 + i, 16)));
    EXPECT_TRUE(got == 16 || got == 32) << got;
    whole += got == 32;
  }
  EXPECT_EQ(whole, 7);  // 8 allocations of 4 KiB, the head one of them
}

TEST_F(StoreQuotaTest, ASaveLargerThanTheQuotaStoresThePrefixThatFits) {
  Open(Options(false));
  Set("a", 8 * kKiB);
  const Tokens big = RandomTokens(9, 64);  // 16 KiB
  auto r = Save("a", big);
  ASSERT_OK(r);
  EXPECT_EQ(r->matched_tokens, 0u);
  EXPECT_EQ(r->stored_tokens, 32u);
  EXPECT_EQ(r->new_bytes, 8 * kKiB);
  EXPECT_EQ(Load("a", big), 32u);
  EXPECT_EQ(Quota("a").cut_saves, 1u);
  // Again: the stored half is matched, the rest does not fit beside it...
  r = Save("a", big);
  ASSERT_OK(r);
  EXPECT_EQ(r->matched_tokens, 32u);
  EXPECT_LE(Quota("a").dram_bytes, 8 * kKiB);
  EXPECT_GE(Load("a", big), 32u);
  // ...and a quota smaller than one allocation stores nothing, no error.
  Set("a", 2 * kKiB);
  EXPECT_EQ(Quota("a").dram_bytes, 0u) << "lowering the quota evicts at once";
  r = Save("a", RandomTokens(10, 16));
  ASSERT_OK(r);
  EXPECT_EQ(r->stored_tokens, 0u);
  EXPECT_EQ(Load("a", RandomTokens(10, 16)), 0u);
}

TEST_F(StoreQuotaTest, PinnedOwnDataIsNeverEvictedAndAFullQuotaOfItIsTheArenaFullError) {
  Open(Options(false));
  Set("a", 16 * kKiB);
  std::vector<uint64_t> leases;
  for (int i = 0; i < 4; ++i) {
    ASSERT_OK(Save("a", Prompt("a", i)));
    auto p = store_->Pin("a", Prompt("a", i), 1);
    ASSERT_OK(p);
    leases.push_back(p->lease_id);
  }
  auto r = Save("a", Prompt("a", 10));
  ASSERT_FALSE(r.ok());
  EXPECT_ERROR(r, Code::kResourceExhausted);
  EXPECT_NE(r.status().message().find("namespace 'a'"), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find("quota"), std::string::npos) << r.status().ToString();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(Load("a", Prompt("a", i)), kPromptTokens);
  // Unpinned, they make room again.
  for (uint64_t l : leases) ASSERT_OK(store_->Release(l, 1));
  r = Save("a", Prompt("a", 10));
  ASSERT_OK(r);
  EXPECT_EQ(r->stored_tokens, kPromptTokens);
}

TEST_F(StoreQuotaTest, BadQuotasAreRefusedAndChangeNothing) {
  Open(Options(false));
  Set("a", 64 * kKiB);
  auto r = store_->SetQuota("a", QuotaChange{kMaxQuotaBytes + 1, {}});
  ASSERT_FALSE(r.ok());
  EXPECT_ERROR(r, Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("too large"), std::string::npos) << r.status().ToString();
  r = store_->SetQuota("a", QuotaChange{{}, 1 * kMiB});
  ASSERT_FALSE(r.ok());
  EXPECT_ERROR(r, Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("SSD tier"), std::string::npos) << r.status().ToString();
  EXPECT_EQ(Quota("a").dram_quota, 64 * kKiB);
  EXPECT_ERROR(store_->SetQuota("nope", QuotaChange{1, {}}), Code::kNotFound);
  // 0 lifts it.
  EXPECT_EQ(Set("a", 0).dram_quota, 0u);
}

TEST_F(StoreQuotaTest, OverItsDramQuotaANamespaceSpillsItsOwnToSsdAndKeepsUnderItsSsdQuota) {
  Open(Options(true));
  for (int i = 0; i < 8; ++i) ASSERT_OK(Save("b", Prompt("b", i)));
  Set("a", 32 * kKiB, 128 * kKiB);
  for (int i = 0; i < 100; ++i) {
    ASSERT_OK(Save("a", Prompt("a", i)));
    const NamespaceQuota q = Quota("a");
    EXPECT_LE(q.dram_bytes, 32 * kKiB);
    EXPECT_LE(q.ssd_bytes, 128 * kKiB);
  }
  store_->FlushSsd();
  const NamespaceQuota a = Quota("a");
  EXPECT_GT(a.ssd_bytes, 0u);
  EXPECT_GT(a.dram_evictions, 0u);
  EXPECT_GT(a.ssd_evictions, 0u);
  // Exact: the tier's live bytes are the two namespaces' records and their
  // two namespace records (4 KiB headers each).
  EXPECT_EQ(a.ssd_bytes + Quota("b").ssd_bytes + 2 * 4 * kKiB, store_->Stats().ssd_live_bytes);
  // What is indexed loads byte-exact (SSD-only ones are read back).
  uint64_t stored = 0;
  for (int i = 0; i < 100; ++i) stored += Load("a", Prompt("a", i)) == kPromptTokens;
  EXPECT_GE(stored, 8u);
  EXPECT_LE(Quota("a").dram_bytes, 32 * kKiB) << "reading back from SSD keeps inside the DRAM quota too";
  for (int i = 0; i < 8; ++i) EXPECT_EQ(Load("b", Prompt("b", i)), kPromptTokens) << i;
  EXPECT_EQ(Quota("b").dram_evictions + Quota("b").ssd_evictions, 0u);
}

TEST_F(StoreQuotaTest, QuotasSurviveARestartWithTheSsdTier) {
  Open(Options(true));
  Set("a", 48 * kKiB, 256 * kKiB);
  Set("b", {}, 512 * kKiB);
  for (int i = 0; i < 30; ++i) ASSERT_OK(Save("a", Prompt("a", i)));
  ASSERT_OK(store_->PersistAll());
  store_->FlushSsd();
  const uint64_t ssd_before = Quota("a").ssd_bytes;
  std::vector<uint64_t> loaded;
  for (int i = 0; i < 30; ++i) loaded.push_back(Load("a", Prompt("a", i)));
  store_->FlushSsd();
  Open(Options(true), /*create=*/false);
  NamespaceQuota a = Quota("a"), b = Quota("b");
  EXPECT_EQ(a.dram_quota, 48 * kKiB);
  EXPECT_EQ(a.ssd_quota, 256 * kKiB);
  EXPECT_EQ(b.dram_quota, 0u);
  EXPECT_EQ(b.ssd_quota, 512 * kKiB);
  EXPECT_EQ(a.dram_bytes, 0u) << "everything starts SSD-only";
  EXPECT_EQ(a.ssd_bytes, ssd_before);
  for (int i = 0; i < 30; ++i) EXPECT_EQ(Load("a", Prompt("a", i)), loaded[i]) << i;
  EXPECT_LE(Quota("a").dram_bytes, 48 * kKiB);
  // Changed again and restarted again: the newest record wins, and the
  // namespace's data is still its own (same incarnation).
  Set("a", 0, 64 * kKiB);
  store_->FlushSsd();
  Open(Options(true), /*create=*/false);
  a = Quota("a");
  EXPECT_EQ(a.dram_quota, 0u);
  EXPECT_EQ(a.ssd_quota, 64 * kKiB);
  EXPECT_LE(a.ssd_bytes, 64 * kKiB);
  EXPECT_GT(a.ssd_bytes, 0u);
  EXPECT_EQ(store_->Stats().recovery_dropped, 0u);
}

TEST_F(StoreQuotaTest, ConcurrentSavesNeverPassTheQuotaAndUseStaysExact) {
  for (bool ssd : {false, true}) {
    SCOPED_TRACE(ssd ? "with an SSD tier" : "DRAM only");
    Open(Options(ssd));
    Set("a", 64 * kKiB, ssd ? std::optional<uint64_t>(256 * kKiB) : std::nullopt);
    std::atomic<bool> done{false};
    std::atomic<uint64_t> worst{0}, worst_ssd{0};
    std::thread watch([&] {
      while (!done) {
        const NamespaceQuota q = Quota("a");
        worst = std::max<uint64_t>(worst, q.dram_bytes);
        worst_ssd = std::max<uint64_t>(worst_ssd, q.ssd_bytes);
      }
    });
    std::vector<std::thread> writers;
    for (int w = 0; w < 4; ++w) {
      writers.emplace_back([&, w] {
        for (int i = 0; i < 60; ++i) {
          // Every fourth prompt continues an earlier one of the same writer.
          Tokens t = i % 4 == 3 ? Cat(Prompt("a", w * 1000 + i - 1), RandomTokens(w * 1000 + i, 8))
                                : Prompt("a", w * 1000 + i);
          auto r = Save("a", t);
          EXPECT_OK(r);
          Load("a", t);
        }
      });
    }
    for (auto& t : writers) t.join();
    done = true;
    watch.join();
    EXPECT_LE(worst.load(), 64 * kKiB);
    if (ssd) EXPECT_LE(worst_ssd.load(), 256 * kKiB);
    // Exact afterwards: what the namespace is charged is what the arena holds.
    store_->FlushSsd();
    EXPECT_EQ(Quota("a").dram_bytes, store_->Stats().used_bytes);
    if (ssd) EXPECT_EQ(Quota("a").ssd_bytes + Quota("b").ssd_bytes + 2 * 4 * kKiB, store_->Stats().ssd_live_bytes);
  }
}

TEST_F(StoreQuotaTest, QuotaChangesWhileSavingKeepTheAccountingExact) {
  Open(Options(true, 16 * kMiB, 1 * kMiB * 64));
  std::atomic<bool> done{false};
  std::thread changer([&] {
    for (int i = 0; !done; ++i) {
      auto r = store_->SetQuota("a", QuotaChange{(i % 2 ? 32 : 96) * kKiB, (i % 3 ? 128 : 512) * kKiB});
      EXPECT_OK(r);
    }
  });
  std::vector<std::thread> writers;
  for (int w = 0; w < 3; ++w) {
    writers.emplace_back([&, w] {
      for (int i = 0; i < 80; ++i) {
        const Tokens t = Prompt("a", w * 1000 + i);
        auto r = Save("a", t);
        EXPECT_OK(r);
        Load("a", t);
        if (i % 10 == 9) store_->Remove("a", Prompt("a", w * 1000 + i - 5)).status().IgnoreError();
      }
    });
  }
  for (auto& t : writers) t.join();
  done = true;
  changer.join();
  store_->FlushSsd();
  const NamespaceQuota q = Quota("a");
  EXPECT_LE(q.dram_bytes, q.dram_quota);
  EXPECT_LE(q.ssd_bytes, q.ssd_quota);
  EXPECT_EQ(q.dram_bytes, store_->Stats().used_bytes);
  EXPECT_EQ(q.ssd_bytes + Quota("b").ssd_bytes + 2 * 4 * kKiB, store_->Stats().ssd_live_bytes);
  // And after a restart the last quotas are the ones in force.
  const NamespaceQuota last = q;
  Open(Options(true, 16 * kMiB, 1 * kMiB * 64), /*create=*/false);
  EXPECT_EQ(Quota("a").dram_quota, last.dram_quota);
  EXPECT_EQ(Quota("a").ssd_quota, last.ssd_quota);
}

TEST(NamespaceRecordTest, QuotasRoundTripAndRecordsWithoutThemAreUnchanged) {
  RecordHeader h;
  h.kind = RecordKind::kNamespace;
  h.seq = 7;
  h.live_tokens = 1;
  h.ns_name = "m";
  h.ns_incarnation = 3;
  h.layout = SmallLayout();
  h.uid = 1000;
  h.mode = 0750;
  const std::vector<uint8_t> plain = EncodeRecordHeader(h, 42);
  h.flags |= kRecordQuotas;
  h.dram_quota = 4ull << 30;
  h.ssd_quota = 1ull << 40;
  auto d = DecodeRecordHeader(EncodeRecordHeader(h, 42), 42);
  ASSERT_OK(d);
  EXPECT_EQ(d->dram_quota, 4ull << 30);
  EXPECT_EQ(d->ssd_quota, 1ull << 40);
  EXPECT_EQ(d->ns_incarnation, 3u);
  auto p = DecodeRecordHeader(plain, 42);
  ASSERT_OK(p);
  EXPECT_EQ(p->flags & kRecordQuotas, 0);
  EXPECT_EQ(p->dram_quota, 0u);
}

}  // namespace
}  // namespace ptstore::storage
