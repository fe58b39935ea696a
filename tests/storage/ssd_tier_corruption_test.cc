// The SSD tier's scan of damaged segments (storage/ssd/ssd_tier.h Scan,
// ReadPayload): flipped bits in payloads and headers, truncated and torn
// records, holes, crafted headers inside payloads; every reported record is
// one that was written, byte-exact, and nothing after the damage is lost.
#include "storage/ssd/fault_env.h"
#include "tests/storage/ssd_tier_testing.h"
#include "tests/testing/temp_dir.h"

namespace ptstore::storage {
namespace {

using namespace ssd_tier_testing;  // NOLINT(google-build-using-namespace): the shared helpers
using testing::TempDir;

// ------------------------------------------------------------ corruption

TEST(SsdTierCorruption, PayloadBitFlipOnDisk) {
  for (bool compress : {false, true}) {
    SCOPED_TRACE(compress ? "compressed" : "raw");
    TempDir dir;
    const SsdOptions o = Options(dir.path(), compress);
    std::vector<Rec> recs = {Tensor(kBlockLayout, 64, 1, Fill::kBf16), Tensor(kOddLayout, 64, 2, Fill::kBf16),
                             Tensor(kBlockLayout, 32, 3, Fill::kBf16)};
    std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o);
    ASSERT_NE(tier, nullptr);
    for (Rec& r : recs) ASSERT_NO_FATAL_FAILURE(AppendOk(tier.get(), &r));
    if (compress) {
      EXPECT_TRUE(recs[1].loc.flags & kRecordCompressed);
    }
    const SsdLocation& bad = recs[1].loc;
    // A bit in the middle of the stored payload, then one in its last byte.
    ASSERT_NO_FATAL_FAILURE(
        FlipBitInFile(SegmentPath(o, bad.segment), bad.offset + bad.header_bytes + bad.stored_bytes / 2, 3));
    std::vector<uint8_t> out(bad.payload_bytes);
    Status s = tier->ReadPayload(bad, out);
    EXPECT_ERROR(s, Code::kCorruption);
    EXPECT_EQ(tier->Stats().read_errors, 1u);
    // Into an unaligned buffer too (the bounce path).
    Buffer skewed(bad.payload_bytes, 5);
    EXPECT_ERROR(tier->ReadPayload(bad, skewed.span()), Code::kCorruption);
    // Compaction refuses to copy it.
    EXPECT_ERROR(tier->CopyRecord(bad), Code::kCorruption);
    // Its neighbours are fine.
    EXPECT_TRUE(PayloadIs(tier.get(), recs[0].loc, recs[0].payload));
    EXPECT_TRUE(PayloadIs(tier.get(), recs[2].loc, recs[2].payload));
    tier.reset();

    ScanResult scan;
    tier = OpenTier(Env::Default(), o, &scan);
    ASSERT_NE(tier, nullptr);
    EXPECT_EQ(Seqs(scan), (std::set<uint64_t>{1, 3}));
    EXPECT_EQ(scan.stats.corrupt_records, 1u);
    EXPECT_EQ(scan.stats.records, 2u);
    // Accounting: only the good records are live.
    EXPECT_EQ(tier->live_bytes(), recs[0].loc.footprint() + recs[2].loc.footprint());
  }
}

TEST(SsdTierCorruption, PayloadBitFlipInTheLastPaddedByteIsCaught) {
  TempDir dir;
  const SsdOptions o = Options(dir.path());
  Rec a = Tensor(kOddLayout, 16, 1), b = Tensor(kOddLayout, 16, 2);
  {
    std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o);
    ASSERT_NO_FATAL_FAILURE(AppendOk(tier.get(), &a));
    ASSERT_NO_FATAL_FAILURE(AppendOk(tier.get(), &b));
    // The last stored byte (2560 bytes: not block aligned).
    ASSERT_NO_FATAL_FAILURE(
        FlipBitInFile(SegmentPath(o, a.loc.segment), a.loc.offset + a.loc.header_bytes + a.loc.stored_bytes - 1, 0));
    std::vector<uint8_t> out(a.payload.size());
    EXPECT_ERROR(tier->ReadPayload(a.loc, out), Code::kCorruption);
    // A flip in the padding after the payload is harmless.
    ASSERT_NO_FATAL_FAILURE(
        FlipBitInFile(SegmentPath(o, b.loc.segment), b.loc.offset + b.loc.header_bytes + b.loc.stored_bytes + 1, 0));
    EXPECT_TRUE(PayloadIs(tier.get(), b.loc, b.payload));
  }
  ScanResult scan;
  std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o, &scan);
  EXPECT_EQ(Seqs(scan), (std::set<uint64_t>{2}));
  EXPECT_EQ(scan.stats.corrupt_records, 1u);
}

TEST(SsdTierCorruption, FlipBitOnReadIsCaught) {
  TempDir dir;
  FaultEnv env(Env::Default());
  const SsdOptions o = Options(dir.path());
  std::unique_ptr<SsdTier> tier = OpenTier(&env, o);
  Rec r = Tensor(kBlockLayout, 64, 1);
  ASSERT_NO_FATAL_FAILURE(AppendOk(tier.get(), &r));
  env.FlipBitOnRead(SegmentPath(o, r.loc.segment), r.loc.offset + r.loc.header_bytes + 100, 6);
  std::vector<uint8_t> out(r.payload.size());
  EXPECT_ERROR(tier->ReadPayload(r.loc, out), Code::kCorruption);
  // A flipped header bit on read: ReadHeader and SetLiveTokens refuse it.
  env.ClearFaults();
  EXPECT_TRUE(PayloadIs(tier.get(), r.loc, r.payload));
  env.FlipBitOnRead(SegmentPath(o, r.loc.segment), r.loc.offset + 30, 1);
  EXPECT_ERROR(tier->ReadHeader(r.loc), Code::kCorruption);
  EXPECT_ERROR(tier->SetLiveTokens(r.loc, 0), Code::kCorruption);
  env.ClearFaults();
  Result<RecordHeader> h = tier->ReadHeader(r.loc);
  ASSERT_OK(h);
  EXPECT_EQ(h->live_tokens, 64u) << "a refused rewrite must not have written anything";
}

// Appends records 1..5 (1 MiB segments), flips one bit of record 3's header
// at `byte`, and checks that a restart skips exactly record 3.
void CheckHeaderFlip(uint64_t byte, int bit) {
  SCOPED_TRACE("header byte " + std::to_string(byte) + " bit " + std::to_string(bit));
  TempDir dir;
  const SsdOptions o = Options(dir.path());
  std::map<uint64_t, Rec> recs;
  {
    std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o);
    ASSERT_NE(tier, nullptr);
    ASSERT_NO_FATAL_FAILURE(AppendSeqs(tier.get(), 1, 5, &recs, [](uint64_t seq) {
      return seq == 3 ? Tensor(kBlockLayout, 16 * 40, seq) : Tensor(kOddLayout, 32, seq);
    }));
  }
  const SsdLocation& victim = recs[3].loc;
  ASSERT_EQ(recs[5].loc.segment, victim.segment) << "records after the victim share its segment";
  ASSERT_NO_FATAL_FAILURE(FlipBitInFile(SegmentPath(o, victim.segment), victim.offset + byte, bit));
  ScanResult scan;
  std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o, &scan);
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(Seqs(scan), (std::set<uint64_t>{1, 2, 4, 5}));
  EXPECT_EQ(scan.stats.corrupt_records, 1u);
  EXPECT_EQ(scan.stats.records, 4u);
  for (uint64_t seq : {1, 2, 4, 5}) {
    ASSERT_TRUE(scan.by_seq.count(seq));
    EXPECT_EQ(scan.by_seq.at(seq).second, recs[seq].loc);
    EXPECT_TRUE(PayloadIs(tier.get(), recs[seq].loc, recs[seq].payload));
  }
  EXPECT_ERROR(tier->ReadHeader(victim), Code::kCorruption);
}

TEST(SsdTierCorruption, FlippedHeaderBitIsSkippedAndLaterRecordsFound) {
  // Magic, the low length bytes, kind, flags, seq, sizes, checksum fields,
  // tokens, and the header checksum itself (the victim's header is
  // 2,700-odd bytes: one block).
  for (auto [byte, bit] : std::vector<std::pair<uint64_t, int>>{
           {0, 0}, {7, 7}, {8, 0}, {8, 7}, {9, 2}, {9, 4}, {12, 0}, {14, 1}, {16, 5}, {24, 0}, {40, 3}, {56, 0},
           {100, 4}, {200, 7}, {1000, 1}, {2000, 0}}) {
    CheckHeaderFlip(byte, bit);
  }
}

// A bit flip in the high bytes of the length field makes the header claim
// to run past the end of the file; the scanner must skip it like any other
// corrupt header rather than stop reading the segment (the length is not
// checked until the header's checksum is).
TEST(SsdTierCorruption, FlippedHighLengthBitDoesNotHideLaterRecords) {
  CheckHeaderFlip(10, 4);  // length + 1 MiB: past the end of the 1 MiB segment
  CheckHeaderFlip(11, 0);  // length + 16 MiB: still under the 16 MiB maximum
}

// Worse: when the damaged header is a segment's first record, the scan finds
// nothing live in the segment and Scan would delete the file with the
// intact records after it.
TEST(SsdTierCorruption, FlippedLengthBitOfAFirstRecordDoesNotDeleteTheSegment) {
  TempDir dir;
  const SsdOptions o = Options(dir.path());
  std::map<uint64_t, Rec> recs;
  {
    std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o);
    ASSERT_NO_FATAL_FAILURE(AppendSeqs(tier.get(), 1, 3, &recs, [](uint64_t seq) {
      return Tensor(kOddLayout, 32, seq);
    }));
  }
  ASSERT_NO_FATAL_FAILURE(FlipBitInFile(SegmentPath(o, recs[1].loc.segment), recs[1].loc.offset + 10, 4));
  ScanResult scan;
  std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o, &scan);
  EXPECT_EQ(Seqs(scan), (std::set<uint64_t>{2, 3}));
  EXPECT_TRUE(std::filesystem::exists(SegmentPath(o, recs[1].loc.segment)));
}

TEST(SsdTierCorruption, TruncatedLastRecord) {
  for (uint64_t cut_into_payload : {uint64_t{1}, uint64_t{4096}, uint64_t{5000}, uint64_t{40000}}) {
    SCOPED_TRACE("cut " + std::to_string(cut_into_payload) + " bytes into the payload");
    TempDir dir;
    const SsdOptions o = Options(dir.path());
    std::vector<Rec> recs = {Namespace(1), Tensor(kOddLayout, 32, 2), Tensor(kBlockLayout, 16 * 12, 3)};
    {
      std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o);
      for (Rec& r : recs) ASSERT_NO_FATAL_FAILURE(AppendOk(tier.get(), &r));
    }
    const SsdLocation& last = recs[2].loc;
    ASSERT_EQ(FileSize(SegmentPath(o, last.segment)), last.offset + last.footprint());
    std::filesystem::resize_file(SegmentPath(o, last.segment), last.offset + last.header_bytes + cut_into_payload);
    ScanResult scan;
    std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o, &scan);
    EXPECT_EQ(Seqs(scan), (std::set<uint64_t>{1, 2}));
    EXPECT_EQ(scan.stats.corrupt_records, 1u);
    EXPECT_TRUE(PayloadIs(tier.get(), recs[1].loc, recs[1].payload));
    // The tier keeps working: appends go to a new segment.
    Rec next = Tensor(kOddLayout, 16, 4);
    ASSERT_NO_FATAL_FAILURE(AppendOk(tier.get(), &next));
    EXPECT_GT(next.loc.segment, last.segment);
    EXPECT_TRUE(PayloadIs(tier.get(), next.loc, next.payload));
  }
}

TEST(SsdTierCorruption, TruncatedInsideAHeader) {
  TempDir dir;
  const SsdOptions o = Options(dir.path());
  // The last record's header spans three blocks; cut after the first one.
  std::vector<Rec> recs = {Tensor(kOddLayout, 32, 1), Tensor(kBlockLayout, 16 * 160, 2)};
  {
    std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o);
    for (Rec& r : recs) ASSERT_NO_FATAL_FAILURE(AppendOk(tier.get(), &r));
  }
  ASSERT_GT(recs[1].loc.header_bytes, kRecordAlignment);
  for (uint64_t keep : {kRecordAlignment + 100, kRecordAlignment, uint64_t{100}}) {
    std::filesystem::resize_file(SegmentPath(o, recs[1].loc.segment), recs[1].loc.offset + keep);
    ScanResult scan;
    std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o, &scan);
    EXPECT_EQ(Seqs(scan), (std::set<uint64_t>{1})) << keep;
    EXPECT_EQ(scan.stats.corrupt_records, 1u) << keep;
  }
}

TEST(SsdTierCorruption, TornWriteOfTheLastRecord) {
  TempDir dir;
  FaultEnv env(Env::Default());
  const SsdOptions o = Options(dir.path());
  std::map<uint64_t, Rec> ok;
  {
    std::unique_ptr<SsdTier> tier = OpenTier(&env, o);
    ASSERT_NO_FATAL_FAILURE(AppendSeqs(tier.get(), 1, 3, &ok, [](uint64_t seq) {
      return Tensor(kOddLayout, 32, seq);
    }));
    // The payload goes first: this tears it after 1000 bytes.
    Rec torn = Tensor(kBlockLayout, 64, 4);
    env.TearNextWrite(1000);
    Result<SsdLocation> loc = tier->Append(torn.h, torn.payload);
    EXPECT_ERROR(loc, Code::kIOError);
    EXPECT_EQ(tier->Stats().write_errors, 1u);
    // Reads keep working.
    for (auto& [seq, r] : ok) EXPECT_TRUE(PayloadIs(tier.get(), r.loc, r.payload));
  }
  ScanResult scan;
  std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o, &scan);
  EXPECT_EQ(Seqs(scan), (std::set<uint64_t>{1, 2, 3}));
  EXPECT_EQ(scan.stats.corrupt_records, 1u);
  ExpectReportedRecordsValid(tier.get(), scan, ok);
}

TEST(SsdTierCorruption, TornWriteInTheMiddleIsSkipped) {
  TempDir dir;
  FaultEnv env(Env::Default());
  const SsdOptions o = Options(dir.path());
  std::map<uint64_t, Rec> ok;
  {
    std::unique_ptr<SsdTier> tier = OpenTier(&env, o);
    Rec a = Tensor(kOddLayout, 32, 1);
    ASSERT_NO_FATAL_FAILURE(AppendOk(tier.get(), &a));
    ok[1] = a;
    Rec torn = Tensor(kBlockLayout, 64, 2);
    env.TearNextWrite(5000);
    EXPECT_FALSE(tier->Append(torn.h, torn.payload).ok());
    Rec c = Tensor(kOddLayout, 32, 3);
    ASSERT_NO_FATAL_FAILURE(AppendOk(tier.get(), &c));
    ok[3] = c;
    EXPECT_EQ(c.loc.segment, a.loc.segment);
  }
  ScanResult scan;
  std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o, &scan);
  EXPECT_EQ(Seqs(scan), (std::set<uint64_t>{1, 3}));
  EXPECT_EQ(scan.stats.corrupt_records, 1u);
  ExpectReportedRecordsValid(tier.get(), scan, ok);
}

// The header is written last; a write torn inside the header's padding
// leaves a complete, valid-looking header behind. An Append that failed
// must never come back after a restart: the caller was told it is not there.
TEST(SsdTierCorruption, FailedAppendWithACompleteTornHeaderIsNotRecovered) {
  for (uint64_t keep : {uint64_t{4095}, uint64_t{3000}}) {
    SCOPED_TRACE("header write torn after " + std::to_string(keep) + " bytes");
    TempDir dir;
    FaultEnv env(Env::Default());
    const SsdOptions o = Options(dir.path());
    std::map<uint64_t, Rec> ok;
    {
      std::unique_ptr<SsdTier> tier = OpenTier(&env, o);
      Rec a = Namespace(1);
      ASSERT_NO_FATAL_FAILURE(AppendOk(tier.get(), &a));
      ok[1] = a;
      // A namespace record has no payload: its one write is the header.
      Rec b = Namespace(2);
      env.TearNextWrite(keep);
      Result<SsdLocation> failed = tier->Append(b.h, b.payload);
      ASSERT_FALSE(failed.ok());
      EXPECT_ERROR(failed, Code::kIOError);
      Rec c = Tensor(kOddLayout, 16, 3);
      ASSERT_NO_FATAL_FAILURE(AppendOk(tier.get(), &c));
      ok[3] = c;
    }
    ScanResult scan;
    std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o, &scan);
    EXPECT_EQ(Seqs(scan), (std::set<uint64_t>{1, 3}));
    ExpectReportedRecordsValid(tier.get(), scan, ok);
  }
}

TEST(SsdTierCorruption, HoleIsSkippedSilently) {
  TempDir dir;
  FaultEnv env(Env::Default());
  const SsdOptions o = Options(dir.path());
  std::map<uint64_t, Rec> ok;
  Rec a = Tensor(kOddLayout, 32, 1), c = Tensor(kOddLayout, 32, 3);
  {
    std::unique_ptr<SsdTier> tier = OpenTier(&env, o);
    ASSERT_NO_FATAL_FAILURE(AppendOk(tier.get(), &a));
    // Nothing of record 2 reaches the file: its reservation stays a hole.
    env.FailWritesAfter(0, EIO);
    Rec b = Tensor(kBlockLayout, 64, 2);
    Result<SsdLocation> failed = tier->Append(b.h, b.payload);
    EXPECT_ERROR(failed, Code::kIOError);
    env.ClearFaults();
    ASSERT_NO_FATAL_FAILURE(AppendOk(tier.get(), &c));
    ok[1] = a;
    ok[3] = c;
    EXPECT_EQ(c.loc.segment, a.loc.segment);
    EXPECT_GT(c.loc.offset, a.loc.offset + a.loc.footprint()) << "a hole between them";
  }
  // An extra hole at the end of the file, as a reservation a crash cut
  // short leaves when the file system extended the file.
  std::filesystem::resize_file(SegmentPath(o, c.loc.segment), c.loc.offset + c.loc.footprint() + 3 * 4096);
  ScanResult scan;
  std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o, &scan);
  EXPECT_EQ(Seqs(scan), (std::set<uint64_t>{1, 3}));
  EXPECT_EQ(scan.stats.corrupt_records, 0u);
  ExpectReportedRecordsValid(tier.get(), scan, ok);
}

// A client's payload holding record headers (magic, plausible length,
// valid checksum) encoded with a seed other than the directory's: once the
// real header before it is corrupt, the scanner walks through the payload
// block by block, and must take none of them for a record.
TEST(SsdTierCorruption, CraftedHeadersInAPayloadAreNeverReported) {
  TempDir dir;
  const SsdOptions o = Options(dir.path());
  constexpr uint64_t kBlocks = 24;
  // Fake records: namespace (no payload to verify) and tensor ones, live
  // and dead, one per 4 KiB block of the victim's payload.
  auto crafted_payload = [&](uint64_t seed) {
    std::vector<uint8_t> payload;
    for (uint64_t i = 0; i < kBlocks; ++i) {
      RecordHeader fake;
      if (i % 2 == 0) {
        fake = Namespace(1000 + i).h;
        fake.live_tokens = i % 4 == 0 ? 1 : 0;
        fake.payload_checksum = PayloadChecksum({}, seed);  // an empty payload's checksum: passes
      } else {
        fake = Tensor(kBlockLayout, 16, 1000 + i).h;
        fake.payload_bytes = fake.stored_bytes = 16 * kBlockLayout.BytesPerToken();
        fake.live_tokens = 0;  // dead: its payload is not verified
      }
      std::vector<uint8_t> enc = EncodeRecordHeader(fake, seed);
      EXPECT_EQ(enc.size(), kRecordAlignment);
      payload.insert(payload.end(), enc.begin(), enc.end());
    }
    return payload;
  };
  auto run = [&](bool same_seed) -> ScanResult {
    std::filesystem::remove_all(o.dir);
    std::map<uint64_t, Rec> recs;
    uint64_t seed = 0;
    {
      std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o);
      Rec first = Tensor(kOddLayout, 16, 1);
      EXPECT_NO_FATAL_FAILURE(AppendOk(tier.get(), &first));
      // The directory's seed, for the control run only.
      std::vector<uint8_t> seg(kSegmentHeaderBytes);
      const int fd = ::open(SegmentPath(o, first.loc.segment).c_str(), O_RDONLY | O_CLOEXEC);
      EXPECT_GE(fd, 0);
      EXPECT_EQ(::pread(fd, seg.data(), seg.size(), 0), static_cast<ssize_t>(seg.size()));
      ::close(fd);
      Result<SegmentHeader> sh = DecodeSegmentHeader(seg);
      EXPECT_OK(sh);
      seed = same_seed ? sh->seed : sh->seed ^ 0x9e3779b97f4a7c15ull;
      Rec victim = Tensor(kBlockLayout, 16 * kBlocks, 2);
      victim.payload = crafted_payload(seed);
      EXPECT_NO_FATAL_FAILURE(AppendOk(tier.get(), &victim));
      Rec after = Tensor(kOddLayout, 16, 3);
      EXPECT_NO_FATAL_FAILURE(AppendOk(tier.get(), &after));
      EXPECT_EQ(after.loc.segment, victim.loc.segment);
      EXPECT_TRUE(PayloadIs(tier.get(), victim.loc, victim.payload));
      recs = {{1, first}, {2, victim}, {3, after}};
    }
    {
      // Intact, the payload is skipped as a whole.
      ScanResult intact;
      std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o, &intact);
      EXPECT_EQ(Seqs(intact), (std::set<uint64_t>{1, 2, 3}));
      EXPECT_EQ(intact.stats.corrupt_records, 0u);
    }
    // Now the victim's seq field gets a flipped bit.
    const SsdLocation& v = recs[2].loc;
    EXPECT_NO_FATAL_FAILURE(FlipBitInFile(SegmentPath(o, v.segment), v.offset + 20, 0));
    ScanResult scan;
    std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o, &scan);
    return scan;
  };
  ScanResult scan = run(/*same_seed=*/false);
  EXPECT_EQ(Seqs(scan), (std::set<uint64_t>{1, 3}));
  EXPECT_EQ(scan.stats.corrupt_records, 1u);
  for (const auto& [seq, v] : scan.by_seq) EXPECT_LT(seq, 1000u) << "a crafted header was taken for a record";

  // Control: with the directory's own seed the fakes do pass, so the test
  // above is about the seed and nothing else.
  ScanResult control = run(/*same_seed=*/true);
  EXPECT_GT(control.by_seq.size(), 2u);
  EXPECT_TRUE(control.by_seq.count(1000));
}

TEST(SsdTierCorruption, ScanFindsTheSeedWhenTheFirstSegmentHeaderIsCorrupt) {
  TempDir dir;
  const SsdOptions o = Options(dir.path());
  std::map<uint64_t, Rec> recs;
  {
    std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o);
    ASSERT_NO_FATAL_FAILURE(AppendSeqs(tier.get(), 1, 10, &recs, [](uint64_t seq) {
      return Tensor(kBigLayout, 16, seq);  // 260 KiB: three to a segment
    }));
    EXPECT_GE(tier->Stats().segments, 4u);
  }
  const uint64_t first = recs[1].loc.segment;
  // The seed field of the first segment's header.
  ASSERT_NO_FATAL_FAILURE(FlipBitInFile(SegmentPath(o, first), 32, 5));
  {
    ScanResult scan;
    std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o, &scan);
    EXPECT_EQ(scan.stats.bad_segment_headers, 1u);
    EXPECT_EQ(scan.stats.corrupt_records, 0u);
    EXPECT_EQ(scan.by_seq.size(), recs.size());
    ExpectReportedRecordsValid(tier.get(), scan, recs);
    // The records of the damaged segment can be rewritten and copied.
    EXPECT_OK(tier->SetLiveTokens(recs[1].loc, 0));
    Result<SsdLocation> copy = tier->CopyRecord(recs[2].loc);
    ASSERT_OK(copy);
    EXPECT_TRUE(PayloadIs(tier.get(), *copy, recs[2].payload));
  }
  // With every segment header damaged no record can be verified: none may
  // come back (they are dropped, never reported unverified).
  for (auto& entry : std::filesystem::directory_iterator(o.dir)) {
    ASSERT_NO_FATAL_FAILURE(FlipBitInFile(entry.path().string(), 0, 0));
  }
  ScanResult scan;
  std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o, &scan);
  EXPECT_EQ(scan.by_seq.size(), 0u);
  EXPECT_EQ(scan.stats.bad_segment_headers, scan.stats.segments);
}

TEST(SsdTierCorruption, VerifyOnRecoveryOffSkipsPayloadChecks) {
  TempDir dir;
  SsdOptions o = Options(dir.path());
  o.verify_on_recovery = false;
  Rec a = Tensor(kOddLayout, 32, 1);
  {
    std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o);
    ASSERT_NO_FATAL_FAILURE(AppendOk(tier.get(), &a));
  }
  ASSERT_NO_FATAL_FAILURE(FlipBitInFile(SegmentPath(o, a.loc.segment), a.loc.offset + a.loc.header_bytes + 7, 7));
  ScanResult scan;
  std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o, &scan);
  EXPECT_EQ(Seqs(scan), (std::set<uint64_t>{1}));
  // ...but the read still catches it.
  std::vector<uint8_t> out(a.payload.size());
  EXPECT_ERROR(tier->ReadPayload(a.loc, out), Code::kCorruption);
}

}  // namespace
}  // namespace ptstore::storage
