// The SSD tier under injected faults and crashes (storage/ssd/fault_env.h):
// a full disk and write errors map to their codes, and after a "crash" that
// drops unsynced bytes each sync mode keeps what it promises and a reopen
// reports only complete records.
#include <functional>
#include <random>

#include "storage/ssd/fault_env.h"
#include "tests/storage/ssd_tier_testing.h"
#include "tests/testing/temp_dir.h"

namespace ptstore::storage {
namespace {

using namespace ssd_tier_testing;  // NOLINT(google-build-using-namespace): the shared helpers
using testing::TempDir;

// --------------------------------------------------------------- faults

// Appends records until the fault stops them, checks the error code, that
// reads keep working, and that a restart finds exactly the records whose
// Append succeeded.
void RunUntilFault(FaultEnv* env, const SsdOptions& o, Code want, const std::function<void()>& arm) {
  std::map<uint64_t, Rec> ok;
  std::mt19937_64 rng(o.capacity ^ static_cast<uint64_t>(want));
  int failures = 0;
  {
    std::unique_ptr<SsdTier> tier = OpenTier(env, o);
    ASSERT_NE(tier, nullptr);
    ASSERT_NO_FATAL_FAILURE(AppendSeqs(tier.get(), 1, 4, &ok, [](uint64_t seq) {
      return Tensor(kOddLayout, 32, seq);
    }));
    arm();
    for (uint64_t seq = 5; seq <= 40; ++seq) {
      const int pick = static_cast<int>(rng() % 4);
      Rec r = pick == 0   ? Namespace(seq)
              : pick == 1 ? Tensor(kOddLayout, 16 * (1 + rng() % 8), seq)
              : pick == 2 ? Tensor(kBlockLayout, 16 * (1 + rng() % 8), seq)
                          : Tensor(kBigLayout, 16, seq);
      Result<SsdLocation> loc = tier->Append(r.h, r.payload);
      if (loc.ok()) {
        r.loc = *loc;
        ok[seq] = r;
      } else {
        failures++;
        EXPECT_EQ(loc.status().code(), want) << loc.status().ToString();
      }
      // Reads keep working whatever the writes do.
      if (seq % 5 == 0) {
        for (auto& [s, rec] : ok) ASSERT_TRUE(PayloadIs(tier.get(), rec.loc, rec.payload)) << s;
      }
    }
    EXPECT_GT(failures, 0);
    EXPECT_GE(tier->Stats().write_errors, static_cast<uint64_t>(failures));
    for (auto& [s, rec] : ok) EXPECT_TRUE(PayloadIs(tier.get(), rec.loc, rec.payload)) << s;
    // Once the fault is gone, writes work again.
    env->ClearFaults();
    Rec after = Tensor(kOddLayout, 16, 1000);
    ASSERT_NO_FATAL_FAILURE(AppendOk(tier.get(), &after));
    ok[1000] = after;
  }
  ScanResult scan;
  std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o, &scan);
  EXPECT_EQ(Seqs(scan), KeysOf(ok));
  for (auto& [seq, v] : scan.by_seq) {
    ASSERT_TRUE(ok.count(seq));
    EXPECT_EQ(v.second, ok[seq].loc) << seq;
  }
  ExpectReportedRecordsValid(tier.get(), scan, ok);
}

TEST(SsdTierFaults, DiskFullIsResourceExhausted) {
  for (uint64_t disk : {uint64_t{40'000}, uint64_t{300'000}, uint64_t{1'500'000}, uint64_t{2'100'000}}) {
    SCOPED_TRACE("disk of " + std::to_string(disk) + " bytes");
    TempDir dir;
    FaultEnv env(Env::Default());
    const SsdOptions o = Options(dir.path(), false, true);
    RunUntilFault(&env, o, Code::kResourceExhausted, [&] { env.SetDiskCapacity(env.bytes_written() + disk); });
  }
}

TEST(SsdTierFaults, WriteErrorIsIOError) {
  // Fail after every possible number of further writes: the payload body,
  // its tail, the header, a new segment's header.
  for (uint64_t after = 0; after < 12; ++after) {
    for (bool compress : {false, true}) {
      SCOPED_TRACE("EIO after " + std::to_string(after) + " writes, compress " + (compress ? "on" : "off"));
      TempDir dir;
      FaultEnv env(Env::Default());
      const SsdOptions o = Options(dir.path(), compress, after % 2 == 0);
      RunUntilFault(&env, o, Code::kIOError, [&] { env.FailWritesAfter(after, EIO); });
    }
  }
}

// -------------------------------------------------------------- crashes

TEST(SsdTierCrash, SyncRecordKeepsEveryAppendedRecord) {
  TempDir dir;
  FaultEnv env(Env::Default());
  SsdOptions o = Options(dir.path());
  o.sync = SsdOptions::Sync::kRecord;
  std::map<uint64_t, Rec> recs;
  std::unique_ptr<SsdTier> tier = OpenTier(&env, o);
  ASSERT_NO_FATAL_FAILURE(AppendSeqs(tier.get(), 1, 12, &recs, [](uint64_t seq) {
    return seq % 3 == 0 ? Tensor(kBigLayout, 16, seq) : seq % 3 == 1 ? Tensor(kOddLayout, 32, seq) : Namespace(seq);
  }));
  ASSERT_OK(tier->SetLiveTokens(recs[1].loc, 16));
  recs[1].h.live_tokens = 16;
  ASSERT_OK(tier->SetLiveTokens(recs[2].loc, 0));
  recs[2].h.live_tokens = 0;
  ASSERT_OK(env.Crash());
  tier.reset();  // its handles are dead; the destructor must cope

  ScanResult scan;
  tier = OpenTier(Env::Default(), o, &scan);
  EXPECT_EQ(scan.by_seq.size(), recs.size());
  EXPECT_EQ(scan.stats.corrupt_records, 0u);
  ExpectReportedRecordsValid(tier.get(), scan, recs);
  for (auto& [seq, r] : recs) {
    ASSERT_TRUE(scan.by_seq.count(seq)) << seq;
    EXPECT_EQ(scan.by_seq.at(seq).first.live_tokens, r.h.live_tokens) << seq;
    EXPECT_EQ(scan.by_seq.at(seq).second, r.loc) << seq;
  }
}

// With Sync::kSegment a segment is made durable when it is sealed: a crash
// loses at most the records of the active segment.
TEST(SsdTierCrash, SyncSegmentKeepsSealedSegments) {
  TempDir dir;
  FaultEnv env(Env::Default());
  SsdOptions o = Options(dir.path());
  o.sync = SsdOptions::Sync::kSegment;
  std::map<uint64_t, Rec> recs;
  std::unique_ptr<SsdTier> tier = OpenTier(&env, o);
  ASSERT_NO_FATAL_FAILURE(AppendSeqs(tier.get(), 1, 10, &recs, [](uint64_t seq) {
    return Tensor(kBigLayout, 16, seq);  // three to a segment
  }));
  const uint64_t active = recs[10].loc.segment;
  ASSERT_NE(recs[1].loc.segment, active);
  ASSERT_OK(env.Crash());
  tier.reset();

  ScanResult scan;
  tier = OpenTier(Env::Default(), o, &scan);
  std::set<uint64_t> sealed;
  for (auto& [seq, r] : recs) {
    if (r.loc.segment != active) sealed.insert(seq);
  }
  std::set<uint64_t> found = Seqs(scan);
  for (uint64_t seq : sealed) EXPECT_TRUE(found.count(seq)) << "record " << seq << " of a sealed segment was lost";
  ExpectReportedRecordsValid(tier.get(), scan, recs);
}

TEST(SsdTierCrash, SyncSegmentCleanShutdownIsDurable) {
  TempDir dir;
  FaultEnv env(Env::Default());
  SsdOptions o = Options(dir.path());
  o.sync = SsdOptions::Sync::kSegment;
  std::map<uint64_t, Rec> recs;
  {
    std::unique_ptr<SsdTier> tier = OpenTier(&env, o);
    ASSERT_NO_FATAL_FAILURE(AppendSeqs(tier.get(), 1, 8, &recs, [](uint64_t seq) {
      return seq % 2 ? Tensor(kBigLayout, 16, seq) : Tensor(kOddLayout, 16, seq);
    }));
  }
  ASSERT_OK(env.Crash());
  ScanResult scan;
  std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o, &scan);
  EXPECT_EQ(scan.by_seq.size(), recs.size());
  ExpectReportedRecordsValid(tier.get(), scan, recs);
}

// Sync::kNone: whatever the crash keeps, the scan reports only complete,
// valid records, and everything made durable before is there.
TEST(SsdTierCrash, SyncNoneReportsOnlyCompleteRecords) {
  TempDir dir;
  FaultEnv env(Env::Default());
  SsdOptions durable = Options(dir.path());
  durable.sync = SsdOptions::Sync::kRecord;
  std::map<uint64_t, Rec> recs;
  {
    std::unique_ptr<SsdTier> tier = OpenTier(&env, durable);
    ASSERT_NO_FATAL_FAILURE(AppendSeqs(tier.get(), 1, 4, &recs, [](uint64_t seq) {
      return Tensor(kOddLayout, 32, seq);
    }));
  }
  SsdOptions o = durable;
  o.sync = SsdOptions::Sync::kNone;
  std::set<uint64_t> must_survive = {1, 2, 3, 4};
  {
    ScanResult first;
    std::unique_ptr<SsdTier> tier = OpenTier(&env, o, &first);
    ASSERT_EQ(first.by_seq.size(), 4u);
    // An unsynced kill of record 1 is undone by the crash.
    ASSERT_OK(tier->SetLiveTokens(recs[1].loc, 0));
    ASSERT_NO_FATAL_FAILURE(AppendSeqs(tier.get(), 5, 8, &recs, [](uint64_t seq) {
      return Tensor(kBlockLayout, 32, seq);
    }));
    // Someone fsyncs the new segment (as the kernel may write back at any
    // time): records 5..8 become durable.
    {
      OpenOptions ro;
      Result<std::unique_ptr<File>> f = env.Open(SegmentPath(o, recs[8].loc.segment), ro);
      ASSERT_OK(f);
      ASSERT_OK((*f)->Sync());
    }
    must_survive.insert({5, 6, 7, 8});
    for (uint64_t seq = 9; seq <= 14; ++seq) {
      Rec r = seq % 2 ? Tensor(kBigLayout, 16, seq) : Tensor(kOddLayout, 48, seq);
      if (seq == 12) env.TearNextWrite(3000);
      Result<SsdLocation> loc = tier->Append(r.h, r.payload);
      if (loc.ok()) {
        r.loc = *loc;
        recs[seq] = r;
      }
    }
    ASSERT_OK(env.Crash());
  }
  ScanResult scan;
  std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o, &scan);
  for (uint64_t seq : must_survive) EXPECT_TRUE(scan.by_seq.count(seq)) << seq;
  ExpectReportedRecordsValid(tier.get(), scan, recs);
  ASSERT_TRUE(scan.by_seq.count(1));
  EXPECT_EQ(scan.by_seq.at(1).first.live_tokens, 32u) << "the unsynced rewrite was lost in the crash";
}

// Random appends, header rewrites, a random sync point and a torn write,
// then a crash: every reported record is a complete, valid one, and every
// record made durable before the sync point is reported.
TEST(SsdTierCrash, RandomCrashesNeverReportGarbage) {
  for (uint64_t round = 0; round < 6; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    TempDir dir;
    FaultEnv env(Env::Default());
    SsdOptions o = Options(dir.path(), round % 2 == 1, round % 3 != 2);
    o.sync = SsdOptions::Sync::kNone;
    std::mt19937_64 rng(round * 31 + 7);
    std::map<uint64_t, Rec> recs;
    std::set<uint64_t> durable;
    const uint64_t sync_at = 5 + rng() % 20;
    {
      std::unique_ptr<SsdTier> tier = OpenTier(&env, o);
      for (uint64_t seq = 1; seq <= 30; ++seq) {
        const int pick = static_cast<int>(rng() % 3);
        Rec r = pick == 0 ? Namespace(seq)
                : pick == 1 ? Tensor(kOddLayout, 16 * (1 + rng() % 6), seq, seq % 2 ? Fill::kBf16 : Fill::kRandom)
                            : Tensor(kBigLayout, 16, seq, Fill::kBf16);
        if (rng() % 10 == 0) env.TearNextWrite(rng() % 9000);
        Result<SsdLocation> loc = tier->Append(r.h, r.payload);
        env.ClearFaults();
        if (loc.ok()) {
          r.loc = *loc;
          recs[seq] = r;
        }
        if (seq == sync_at) {
          // Make every segment durable.
          for (auto& entry : std::filesystem::directory_iterator(o.dir)) {
            Result<std::unique_ptr<File>> f = env.Open(entry.path().string(), OpenOptions{});
            ASSERT_OK(f);
            ASSERT_OK((*f)->Sync());
          }
          for (auto& [s, rec] : recs) durable.insert(s);
        }
      }
      ASSERT_OK(env.Crash());
    }
    ScanResult scan;
    std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o, &scan);
    for (uint64_t seq : durable) EXPECT_TRUE(scan.by_seq.count(seq)) << "durable record " << seq << " lost";
    ExpectReportedRecordsValid(tier.get(), scan, recs);
  }
}

}  // namespace
}  // namespace ptstore::storage
