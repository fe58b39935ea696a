// The SSD tier's compaction (storage/ssd/ssd_tier.h): copying live records
// out of a segment, picking the emptiest and deleting it keeps every byte
// and every live count.
#include "tests/storage/ssd_tier_testing.h"
#include "tests/testing/temp_dir.h"

namespace ptstore::storage {
namespace {

using namespace ssd_tier_testing;  // NOLINT(google-build-using-namespace): the shared helpers
using testing::TempDir;

// ------------------------------------------------------------ compaction

TEST(SsdTierCompaction, CopyPickDeleteKeepsBytesExact) {
  for (bool compress : {false, true}) {
    SCOPED_TRACE(compress ? "compressed" : "raw");
    TempDir dir;
    const SsdOptions o = Options(dir.path(), compress);
    std::map<uint64_t, Rec> recs;
    std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o);
    ASSERT_NO_FATAL_FAILURE(AppendSeqs(tier.get(), 1, 10, &recs, [](uint64_t seq) {
      return Tensor(kBigLayout, 16, seq, seq % 2 ? Fill::kBf16 : Fill::kRandom);
    }));
    Rec ns = Namespace(11);
    ASSERT_NO_FATAL_FAILURE(AppendOk(tier.get(), &ns));
    recs[11] = ns;
    std::map<uint64_t, std::vector<uint64_t>> by_segment;
    for (auto& [seq, r] : recs) by_segment[r.loc.segment].push_back(seq);
    ASSERT_GE(by_segment.size(), 3u);
    const uint64_t first = by_segment.begin()->first;
    const uint64_t second = std::next(by_segment.begin())->first;
    // Nothing dead yet: nothing to compact, even under pressure.
    EXPECT_FALSE(tier->PickSegmentToCompact(false).has_value());
    EXPECT_FALSE(tier->PickSegmentToCompact(true).has_value());

    // Kill one record of the second segment (a third dead): only pressure picks it.
    const uint64_t victim2 = by_segment[second][0];
    ASSERT_OK(tier->SetLiveTokens(recs[victim2].loc, 0));
    tier->Forget(recs[victim2].loc);
    EXPECT_FALSE(tier->PickSegmentToCompact(false).has_value());
    EXPECT_EQ(tier->PickSegmentToCompact(true), second);
    // Kill all but one of the first segment: it is the worst, and picked.
    std::vector<uint64_t>& firsts = by_segment[first];
    ASSERT_GE(firsts.size(), 2u);
    for (size_t i = 0; i + 1 < firsts.size(); ++i) {
      ASSERT_OK(tier->SetLiveTokens(recs[firsts[i]].loc, 0));
      tier->Forget(recs[firsts[i]].loc);
    }
    EXPECT_EQ(tier->PickSegmentToCompact(false), first);
    EXPECT_EQ(tier->PickSegmentToCompact(true), first);

    // The survivor (with a partial live count) moves to the active segment.
    const uint64_t survivor = firsts.back();
    Result<SsdLocation> copy = tier->CopyRecord(recs[survivor].loc);
    ASSERT_OK(copy);
    EXPECT_NE(copy->segment, first);
    EXPECT_EQ(copy->payload_bytes, recs[survivor].loc.payload_bytes);
    EXPECT_TRUE(PayloadIs(tier.get(), *copy, recs[survivor].payload));
    Result<RecordHeader> h = tier->ReadHeader(*copy);
    ASSERT_OK(h);
    ExpectSameRecord(*h, recs[survivor].h);
    const uint64_t live_before = tier->live_bytes();
    tier->Forget(recs[survivor].loc);
    EXPECT_EQ(tier->live_bytes(), live_before - recs[survivor].loc.footprint());
    recs[survivor].loc = *copy;
    recs[survivor].h.live_tokens = h->live_tokens;
    // The empty sealed segment went with the last Forget; deleting it again is fine.
    EXPECT_FALSE(std::filesystem::exists(SegmentPath(o, first)));
    EXPECT_OK(tier->DeleteSegment(first));
    for (size_t i = 0; i + 1 < firsts.size(); ++i) recs.erase(firsts[i]);

    // Compact the second segment the same way, explicitly deleting it.
    ASSERT_EQ(tier->PickSegmentToCompact(true), second);
    recs.erase(victim2);
    for (uint64_t seq : by_segment[second]) {
      if (seq == victim2) continue;
      Result<SsdLocation> c = tier->CopyRecord(recs[seq].loc);
      ASSERT_OK(c);
      recs[seq].loc = *c;
    }
    const uint64_t files_before = tier->file_bytes();
    const uint64_t seg_size = FileSize(SegmentPath(o, second));
    ASSERT_OK(tier->DeleteSegment(second));
    EXPECT_FALSE(std::filesystem::exists(SegmentPath(o, second)));
    EXPECT_EQ(tier->file_bytes(), files_before - seg_size);
    EXPECT_FALSE(tier->PickSegmentToCompact(false).has_value());
    for (auto& [seq, r] : recs) EXPECT_TRUE(PayloadIs(tier.get(), r.loc, r.payload)) << seq;
    tier.reset();

    // A restart finds the copies, not the originals.
    ScanResult scan;
    tier = OpenTier(Env::Default(), o, &scan);
    EXPECT_EQ(Seqs(scan), KeysOf(recs));
    for (auto& [seq, r] : recs) {
      ASSERT_TRUE(scan.by_seq.count(seq));
      EXPECT_EQ(scan.by_seq.at(seq).second, r.loc) << seq;
    }
    ExpectReportedRecordsValid(tier.get(), scan, recs);
  }
}

TEST(SsdTierCompaction, CopyKeepsAPartialLiveCount) {
  TempDir dir;
  const SsdOptions o = Options(dir.path(), true);
  std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o);
  Rec r = Tensor(kBlockLayout, 64, 1, Fill::kBf16);
  ASSERT_NO_FATAL_FAILURE(AppendOk(tier.get(), &r));
  ASSERT_OK(tier->SetLiveTokens(r.loc, 32));
  Result<SsdLocation> copy = tier->CopyRecord(r.loc);
  ASSERT_OK(copy);
  Result<RecordHeader> h = tier->ReadHeader(*copy);
  ASSERT_OK(h);
  EXPECT_EQ(h->live_tokens, 32u);
  EXPECT_EQ(h->seq, 1u);
  EXPECT_TRUE(PayloadIs(tier.get(), *copy, r.payload));
  EXPECT_EQ(copy->flags, r.loc.flags);
}

}  // namespace
}  // namespace ptstore::storage
