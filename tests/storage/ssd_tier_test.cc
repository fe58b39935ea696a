// The SSD tier (storage/ssd/ssd_tier.h): opening, round trips of every size
// and codec, the header rewrite (SetTimes), live tokens, space accounting and
// parallel appends and reads. Corruption, faults and crashes, and compaction
// are in ssd_tier_{corruption,crash,compaction}_test.cc.
#include <atomic>
#include <mutex>
#include <random>
#include <thread>

#include "tests/storage/ssd_tier_testing.h"
#include "tests/testing/temp_dir.h"

namespace ptstore::storage {
namespace {

using namespace ssd_tier_testing;  // NOLINT(google-build-using-namespace): the shared helpers
using testing::TempDir;

// ---------------------------------------------------------------- open

TEST(SsdTierOpen, RejectsSmallCapacityAndNoDirectory) {
  TempDir dir;
  SsdOptions o = Options(dir.path());
  for (uint64_t cap : {uint64_t{0}, uint64_t{1}, 8 * kMiB - 1, 4 * kMiB}) {
    o.capacity = cap;
    Result<std::unique_ptr<SsdTier>> t = SsdTier::Open(Env::Default(), o, 1);
    ASSERT_FALSE(t.ok()) << cap;
    EXPECT_ERROR(t, Code::kInvalidArgument) << cap;
  }
  o.capacity = 8 * kMiB;
  Result<std::unique_ptr<SsdTier>> ok = SsdTier::Open(Env::Default(), o, 1);
  ASSERT_OK(ok);
  EXPECT_EQ((*ok)->capacity(), 8 * kMiB);
  // At least eight segments fit.
  EXPECT_LE((*ok)->options().segment_bytes, 1 * kMiB);
  EXPECT_TRUE(std::filesystem::is_directory(o.dir));
  o.dir = "";
  EXPECT_ERROR(SsdTier::Open(Env::Default(), o, 1), Code::kInvalidArgument);
}

TEST(SsdTierOpen, FootprintBoundCoversTheRealFootprint) {
  TempDir dir;
  std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), Options(dir.path()));
  ASSERT_NE(tier, nullptr);
  std::vector<Rec> recs = {Namespace(1), Tensor(kBlockLayout, 16, 2), Tensor(kOddLayout, 48, 3),
                           Tensor(kBlockLayout, 1024, 4), Tensor(kBigLayout, 16, 5)};
  for (Rec& r : recs) {
    RecordHeader bound_of = r.h;
    bound_of.payload_bytes = r.payload.size();
    const uint64_t bound = SsdTier::FootprintBound(bound_of);
    ASSERT_NO_FATAL_FAILURE(AppendOk(tier.get(), &r));
    EXPECT_GE(bound, r.loc.footprint()) << "seq " << r.h.seq;
  }
}

// ---------------------------------------------------------- round trips

TEST(SsdTierRoundTrip, EverySizeCompressOnOffDirectOnOff) {
  for (bool compress : {false, true}) {
    for (bool direct : {false, true}) {
      SCOPED_TRACE(std::string("compress=") + (compress ? "on" : "off") + " direct=" + (direct ? "on" : "off"));
      TempDir dir;
      const SsdOptions o = Options(dir.path(), compress, direct);
      std::map<uint64_t, Rec> recs;
      {
        std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o);
        ASSERT_NE(tier, nullptr);
        if (!direct) {
          EXPECT_FALSE(tier->Stats().direct_io);
        }
        std::vector<Rec> v = {
            Namespace(1),                                    // no payload
            Tensor(kBlockLayout, 16, 2, Fill::kRandom),      // exactly one 4 KiB block
            Tensor(kOddLayout, 48, 3, Fill::kRandom),        // 7680 bytes
            Tensor(kOddLayout, 16, 4, Fill::kBf16),          // 2560 bytes
            Tensor(kBigLayout, 256, 5, Fill::kBf16),         // 4 MiB
            Tensor(kBigLayout, 160, 6, Fill::kRandom),       // 2.5 MiB
            Tensor(kBlockLayout, 16 * 300, 7, Fill::kBf16),  // a header of several blocks
        };
        for (Rec& r : v) {
          ASSERT_NO_FATAL_FAILURE(AppendOk(tier.get(), &r));
          EXPECT_EQ(r.loc.payload_bytes, r.payload.size());
          EXPECT_EQ(r.loc.offset % kRecordAlignment, 0u);
          EXPECT_EQ(r.loc.header_bytes % kRecordAlignment, 0u);
          recs[r.h.seq] = r;
        }
        // Compression only where it pays, and only when enabled.
        for (auto& [seq, r] : recs) {
          const bool is_compressed = r.loc.flags & kRecordCompressed;
          if (!compress || r.payload.empty()) {
            EXPECT_FALSE(is_compressed) << seq;
          }
          if (is_compressed) {
            EXPECT_LT(r.loc.stored_bytes, r.loc.payload_bytes) << seq;
          } else {
            EXPECT_EQ(r.loc.stored_bytes, r.loc.payload_bytes) << seq;
          }
        }
        if (compress) {
          EXPECT_TRUE(recs[5].loc.flags & kRecordCompressed) << "4 MiB of bf16 should compress";
          EXPECT_TRUE(recs[7].loc.flags & kRecordCompressed);
          EXPECT_FALSE(recs[2].loc.flags & kRecordCompressed) << "random bytes are stored raw";
          EXPECT_FALSE(recs[6].loc.flags & kRecordCompressed) << "random bytes are stored raw";
        }
        for (auto& [seq, r] : recs) {
          EXPECT_TRUE(PayloadIs(tier.get(), r.loc, r.payload)) << seq;
          EXPECT_TRUE(PayloadIs(tier.get(), r.loc, r.payload, 1)) << seq << " unaligned";
          Result<RecordHeader> h = tier->ReadHeader(r.loc);
          ASSERT_OK(h);
          ExpectSameRecord(*h, r.h);
          EXPECT_EQ(h->live_tokens, r.h.live_tokens);
          EXPECT_EQ(h->payload_bytes, r.payload.size());
          EXPECT_EQ(h->stored_bytes, r.loc.stored_bytes);
          EXPECT_EQ(h->flags, r.loc.flags);
          EXPECT_EQ(h->payload_checksum, r.loc.payload_checksum);
        }
        const SsdTierStats st = tier->Stats();
        EXPECT_EQ(st.records_written, recs.size());
        EXPECT_EQ(st.write_errors, 0u);
        EXPECT_EQ(st.read_errors, 0u);
        uint64_t live = 0;
        for (auto& [seq, r] : recs) live += r.loc.footprint();
        EXPECT_EQ(st.live_bytes, live);
        EXPECT_EQ(st.file_bytes, live + st.segments * kSegmentHeaderBytes);
        EXPECT_GE(st.segments, 3u) << "1 MiB segments, 7 MiB of records";
      }
      // A restart finds every record where it was written.
      ScanResult scan;
      std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o, &scan);
      ASSERT_NE(tier, nullptr);
      EXPECT_EQ(scan.stats.records, recs.size());
      EXPECT_EQ(scan.stats.corrupt_records, 0u);
      EXPECT_EQ(scan.stats.dead_records, 0u);
      EXPECT_EQ(scan.stats.bad_segment_headers, 0u);
      ASSERT_EQ(scan.by_seq.size(), recs.size());
      for (auto& [seq, r] : recs) {
        const auto& [h, loc] = scan.by_seq.at(seq);
        EXPECT_EQ(loc, r.loc) << seq;
        ExpectSameRecord(h, r.h);
        EXPECT_TRUE(PayloadIs(tier.get(), loc, r.payload, seq % 2 ? 0 : 3)) << seq;
      }
    }
  }
}

// Payloads past the 8 MiB pieces ReadPayload reads in parallel and the
// 1 MiB chunks of the payload checksum, one of them not block aligned.
TEST(SsdTierRoundTrip, LargePayloadsAcrossReadPieces) {
  for (bool compress : {false, true}) {
    for (bool direct : {true, false}) {
      SCOPED_TRACE(std::string("compress=") + (compress ? "on" : "off") + " direct=" + (direct ? "on" : "off"));
      TempDir dir;
      const SsdOptions o = Options(dir.path(), compress, direct);
      Rec big = Tensor(kBigLayout, 16 * 48, 1, Fill::kRandom);    // 12 MiB
      Rec odd = Tensor(kOddLayout, 16 * 3500, 2, Fill::kRandom);  // 8,960,000 bytes
      Rec small = Tensor(kOddLayout, 16, 3);
      ASSERT_NE(odd.payload.size() % kRecordAlignment, 0u);
      {
        std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o);
        for (Rec* r : {&big, &odd, &small}) ASSERT_NO_FATAL_FAILURE(AppendOk(tier.get(), r));
        for (Rec* r : {&big, &odd}) {
          EXPECT_TRUE(PayloadIs(tier.get(), r->loc, r->payload)) << r->h.seq;
          EXPECT_TRUE(PayloadIs(tier.get(), r->loc, r->payload, 9)) << r->h.seq;
        }
        // A flipped bit in the second piece, in the last chunk.
        const SsdLocation& l = odd.loc;
        ASSERT_NO_FATAL_FAILURE(
            FlipBitInFile(SegmentPath(o, l.segment), l.offset + l.header_bytes + l.stored_bytes - 3, 2));
        std::vector<uint8_t> out(odd.payload.size());
        EXPECT_ERROR(tier->ReadPayload(l, out), Code::kCorruption);
        Buffer aligned(odd.payload.size(), 0);
        EXPECT_ERROR(tier->ReadPayload(l, aligned.span()), Code::kCorruption);
      }
      ScanResult scan;
      std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o, &scan);
      EXPECT_EQ(Seqs(scan), (std::set<uint64_t>{1, 3}));
      EXPECT_EQ(scan.stats.corrupt_records, 1u);
      EXPECT_TRUE(PayloadIs(tier.get(), big.loc, big.payload, 1));
    }
  }
}

TEST(SsdTierRoundTrip, AppendFromUnalignedSourceAndReadIntoAnyBuffer) {
  for (bool direct : {true, false}) {
    SCOPED_TRACE(direct ? "direct" : "buffered");
    TempDir dir;
    const SsdOptions o = Options(dir.path(), false, direct);
    std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o);
    ASSERT_NE(tier, nullptr);
    std::vector<Rec> recs = {Tensor(kBlockLayout, 32, 1), Tensor(kOddLayout, 80, 2), Tensor(kBigLayout, 48, 3)};
    for (Rec& r : recs) {
      // The source starts 1 byte past a 4 KiB boundary.
      Buffer src(r.payload.size(), 1);
      std::memcpy(src.span().data(), r.payload.data(), r.payload.size());
      Result<SsdLocation> loc = tier->Append(r.h, src.span());
      ASSERT_OK(loc);
      r.loc = *loc;
      // And an aligned source too.
      Rec again = r;
      again.h.seq += 100;
      Buffer aligned(r.payload.size(), 0);
      std::memcpy(aligned.span().data(), r.payload.data(), r.payload.size());
      loc = tier->Append(again.h, aligned.span());
      ASSERT_OK(loc);
      for (size_t skew : {0, 1, 7, 512, 4095}) {
        EXPECT_TRUE(PayloadIs(tier.get(), r.loc, r.payload, skew)) << "skew " << skew;
        EXPECT_TRUE(PayloadIs(tier.get(), *loc, r.payload, skew)) << "skew " << skew;
      }
    }
    // A destination of the wrong size is refused.
    std::vector<uint8_t> small(recs[0].payload.size() - 1);
    EXPECT_ERROR(tier->ReadPayload(recs[0].loc, small), Code::kInvalidArgument);
    std::vector<uint8_t> big(recs[0].payload.size() + 1);
    EXPECT_ERROR(tier->ReadPayload(recs[0].loc, big), Code::kInvalidArgument);
    // A location in a segment that does not exist.
    SsdLocation gone = recs[0].loc;
    gone.segment = 999;
    std::vector<uint8_t> out(gone.payload_bytes);
    EXPECT_ERROR(tier->ReadPayload(gone, out), Code::kNotFound);
  }
}

TEST(SsdTierRoundTrip, InvalidHeadersAreRefusedBeforeWriting) {
  TempDir dir;
  std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), Options(dir.path()));
  ASSERT_NE(tier, nullptr);
  const uint64_t before = tier->file_bytes();
  // A payload that does not hold the header's tokens.
  Rec r = Tensor(kBlockLayout, 32, 1);
  r.payload.resize(r.payload.size() - 1);
  Result<SsdLocation> loc = tier->Append(r.h, r.payload);
  EXPECT_ERROR(loc, Code::kInvalidArgument);
  // Tokens that are not whole blocks.
  Rec partial = Tensor(kBlockLayout, 32, 2);
  partial.h.tokens.resize(20);
  partial.h.live_tokens = 16;
  partial.payload.resize(20 * kBlockLayout.BytesPerToken());
  EXPECT_ERROR(tier->Append(partial.h, partial.payload), Code::kInvalidArgument);
  // live_tokens past the tokens.
  Rec over = Tensor(kBlockLayout, 32, 3);
  over.h.live_tokens = 48;
  EXPECT_ERROR(tier->Append(over.h, over.payload), Code::kInvalidArgument);
  // A namespace record with a payload.
  Rec ns = Namespace(4);
  ns.payload = RandomBytes(100, 4);
  EXPECT_ERROR(tier->Append(ns.h, ns.payload), Code::kInvalidArgument);
  EXPECT_EQ(tier->file_bytes(), before);
  EXPECT_EQ(tier->live_bytes(), 0u);
  // Nothing that would not read back reached the disk.
  tier.reset();
  ScanResult scan;
  tier = OpenTier(Env::Default(), Options(dir.path()), &scan);
  EXPECT_EQ(scan.stats.records, 0u);
  EXPECT_EQ(scan.stats.corrupt_records, 0u);
}

TEST(SsdTierTest, SetTimesRewritesTheHeaderInPlaceAndKeepsThePayload) {
  TempDir dir;
  const SsdOptions o = Options(dir.path());
  std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o);
  Rec r = Tensor(kBlockLayout, 64, 1);
  ASSERT_NO_FATAL_FAILURE(AppendOk(tier.get(), &r));
  const Times later{111, 222, 333};
  ASSERT_OK(tier->SetTimes(r.loc, later));
  Result<RecordHeader> h = tier->ReadHeader(r.loc);
  ASSERT_OK(h);
  EXPECT_EQ(h->times, later);
  EXPECT_EQ(h->live_tokens, 64u);
  EXPECT_TRUE(PayloadIs(tier.get(), r.loc, r.payload));
  // Both rewrites keep each other's field.
  ASSERT_OK(tier->SetLiveTokens(r.loc, 32));
  h = tier->ReadHeader(r.loc);
  ASSERT_OK(h);
  EXPECT_EQ(h->times, later);
  EXPECT_EQ(h->live_tokens, 32u);
}

// --------------------------------------------------------- live tokens

TEST(SsdTierLiveTokens, PartialAndZeroSurviveRestart) {
  TempDir dir;
  const SsdOptions o = Options(dir.path());
  Rec partial = Tensor(kBlockLayout, 64, 1);
  Rec dead = Tensor(kBlockLayout, 64, 2);
  Rec zero_first = Tensor(kOddLayout, 48, 3);
  Rec ns = Namespace(4);
  Rec keep = Tensor(kOddLayout, 16, 5);
  {
    std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o);
    for (Rec* r : {&partial, &dead, &zero_first, &ns, &keep}) ASSERT_NO_FATAL_FAILURE(AppendOk(tier.get(), r));
    EXPECT_OK(tier->SetLiveTokens(partial.loc, 32));
    // live_tokens only goes down: a larger value is a no-op.
    EXPECT_OK(tier->SetLiveTokens(partial.loc, 48));
    EXPECT_OK(tier->SetLiveTokens(partial.loc, 64));
    Result<RecordHeader> h = tier->ReadHeader(partial.loc);
    ASSERT_OK(h);
    EXPECT_EQ(h->live_tokens, 32u);
    ExpectSameRecord(*h, partial.h);
    // The payload is untouched.
    EXPECT_TRUE(PayloadIs(tier.get(), partial.loc, partial.payload));

    EXPECT_OK(tier->SetLiveTokens(dead.loc, 16));
    EXPECT_OK(tier->SetLiveTokens(dead.loc, 0));
    // Order does not matter: 0 then k stays 0.
    EXPECT_OK(tier->SetLiveTokens(zero_first.loc, 0));
    EXPECT_OK(tier->SetLiveTokens(zero_first.loc, 32));
    EXPECT_OK(tier->SetLiveTokens(zero_first.loc, 48));
    h = tier->ReadHeader(zero_first.loc);
    ASSERT_OK(h);
    EXPECT_EQ(h->live_tokens, 0u);
    EXPECT_OK(tier->SetLiveTokens(ns.loc, 0));
    // Rewrites do not touch the accounting.
    uint64_t all = 0;
    for (Rec* r : {&partial, &dead, &zero_first, &ns, &keep}) all += r->loc.footprint();
    EXPECT_EQ(tier->live_bytes(), all);
  }
  ScanResult scan;
  std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o, &scan);
  ASSERT_EQ(Seqs(scan), (std::set<uint64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(scan.by_seq.at(1).first.live_tokens, 32u);
  EXPECT_EQ(scan.by_seq.at(2).first.live_tokens, 0u);
  EXPECT_EQ(scan.by_seq.at(3).first.live_tokens, 0u);
  EXPECT_EQ(scan.by_seq.at(4).first.live_tokens, 0u);
  EXPECT_EQ(scan.by_seq.at(5).first.live_tokens, 16u);
  EXPECT_TRUE(scan.by_seq.at(2).first.dead());
  EXPECT_EQ(scan.stats.dead_records, 3u);
  EXPECT_EQ(scan.stats.records, 5u);
  EXPECT_EQ(scan.stats.corrupt_records, 0u);
  // Dead records do not count as live space.
  EXPECT_EQ(tier->live_bytes(), partial.loc.footprint() + keep.loc.footprint());
  EXPECT_TRUE(PayloadIs(tier.get(), partial.loc, partial.payload));
}

TEST(SsdTierLiveTokens, ValuesThatWouldCorruptTheHeaderAreRefused) {
  TempDir dir;
  const SsdOptions o = Options(dir.path());
  Rec r = Tensor(kBlockLayout, 64, 1);
  Rec ns = Namespace(2);
  {
    std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o);
    ASSERT_NO_FATAL_FAILURE(AppendOk(tier.get(), &r));
    ASSERT_NO_FATAL_FAILURE(AppendOk(tier.get(), &ns));
    // Not a whole number of blocks.
    for (uint64_t bad : {uint64_t{5}, uint64_t{17}, uint64_t{63}}) {
      Status s = tier->SetLiveTokens(r.loc, bad);
      EXPECT_ERROR(s, Code::kInvalidArgument) << bad << ": " << s.ToString();
      Result<RecordHeader> h = tier->ReadHeader(r.loc);
      ASSERT_OK(h) << "after SetLiveTokens(" << bad << "): " << h.status().ToString();
      EXPECT_EQ(h->live_tokens, 64u);
    }
    EXPECT_OK(tier->SetLiveTokens(r.loc, 16));
  }
  ScanResult scan;
  std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o, &scan);
  EXPECT_EQ(Seqs(scan), (std::set<uint64_t>{1, 2}));
  EXPECT_EQ(scan.by_seq.at(1).first.live_tokens, 16u);
  EXPECT_EQ(scan.stats.corrupt_records, 0u);
}

// ------------------------------------------------------------- accounting

TEST(SsdTierAccounting, ForgetDropsLiveBytesAndDeletesEmptySealedSegments) {
  TempDir dir;
  const SsdOptions o = Options(dir.path());
  std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o);
  std::vector<Rec> recs;
  for (uint64_t seq = 1; seq <= 8; ++seq) {
    recs.push_back(Tensor(kBigLayout, 16, seq));  // 260 KiB each: three to a 1 MiB segment
    ASSERT_NO_FATAL_FAILURE(AppendOk(tier.get(), &recs.back()));
  }
  std::map<uint64_t, std::vector<Rec*>> by_segment;
  for (Rec& r : recs) by_segment[r.loc.segment].push_back(&r);
  ASSERT_GE(by_segment.size(), 3u);
  uint64_t live = 0;
  for (Rec& r : recs) live += r.loc.footprint();
  EXPECT_EQ(tier->live_bytes(), live);
  EXPECT_EQ(tier->file_bytes(), live + by_segment.size() * kSegmentHeaderBytes);
  for (auto& [seg, v] : by_segment) {
    uint64_t bytes = kSegmentHeaderBytes;
    for (Rec* r : v) bytes += r->loc.footprint();
    EXPECT_EQ(FileSize(SegmentPath(o, seg)), bytes) << seg;
  }

  const uint64_t first = by_segment.begin()->first;
  const uint64_t active = by_segment.rbegin()->first;
  std::vector<Rec*>& sealed = by_segment.begin()->second;
  ASSERT_GE(sealed.size(), 2u);
  // Forgetting some of a sealed segment keeps it.
  tier->Forget(sealed[0]->loc);
  live -= sealed[0]->loc.footprint();
  EXPECT_EQ(tier->live_bytes(), live);
  EXPECT_TRUE(std::filesystem::exists(SegmentPath(o, first)));
  EXPECT_EQ(tier->Stats().segments_deleted, 0u);
  // The last live record of a sealed segment takes it with it.
  const uint64_t file_before = tier->file_bytes();
  const uint64_t seg_size = FileSize(SegmentPath(o, first));
  for (size_t i = 1; i < sealed.size(); ++i) {
    tier->Forget(sealed[i]->loc);
    live -= sealed[i]->loc.footprint();
  }
  EXPECT_EQ(tier->live_bytes(), live);
  EXPECT_FALSE(std::filesystem::exists(SegmentPath(o, first)));
  EXPECT_EQ(tier->Stats().segments_deleted, 1u);
  EXPECT_EQ(tier->file_bytes(), file_before - seg_size);
  EXPECT_EQ(tier->Stats().segments, by_segment.size() - 1);
  std::vector<uint8_t> out(sealed[1]->loc.payload_bytes);
  EXPECT_ERROR(tier->ReadPayload(sealed[1]->loc, out), Code::kNotFound);
  EXPECT_ERROR(tier->SetLiveTokens(sealed[1]->loc, 0), Code::kNotFound);
  // Forgetting a record of a segment that is gone is harmless.
  tier->Forget(sealed[1]->loc);
  EXPECT_EQ(tier->live_bytes(), live);

  // The active segment stays even with nothing live.
  for (Rec* r : by_segment[active]) {
    tier->Forget(r->loc);
    live -= r->loc.footprint();
  }
  EXPECT_EQ(tier->live_bytes(), live);
  EXPECT_TRUE(std::filesystem::exists(SegmentPath(o, active)));
  // And takes the next record.
  Rec next = Tensor(kOddLayout, 16, 100);
  ASSERT_NO_FATAL_FAILURE(AppendOk(tier.get(), &next));
  EXPECT_EQ(next.loc.segment, active);
  EXPECT_EQ(tier->live_bytes(), live + next.loc.footprint());
  // Everything not forgotten reads back.
  for (auto& [seg, v] : by_segment) {
    if (seg == first || seg == active) continue;
    for (Rec* r : v) EXPECT_TRUE(PayloadIs(tier.get(), r->loc, r->payload));
  }
}

TEST(SsdTierAccounting, ScanDeletesSegmentsWithNothingLive) {
  TempDir dir;
  const SsdOptions o = Options(dir.path());
  std::vector<Rec> recs;
  {
    std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o);
    for (uint64_t seq = 1; seq <= 7; ++seq) {
      recs.push_back(Tensor(kBigLayout, 16, seq));
      ASSERT_NO_FATAL_FAILURE(AppendOk(tier.get(), &recs.back()));
    }
    // Kill every record of the first segment.
    for (Rec& r : recs) {
      if (r.loc.segment == recs[0].loc.segment) {
        EXPECT_OK(tier->SetLiveTokens(r.loc, 0));
      }
    }
  }
  ScanResult scan;
  std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o, &scan);
  EXPECT_EQ(scan.by_seq.size(), recs.size()) << "dead records are reported";
  EXPECT_FALSE(std::filesystem::exists(SegmentPath(o, recs[0].loc.segment)));
  EXPECT_TRUE(std::filesystem::exists(SegmentPath(o, recs.back().loc.segment)));
  uint64_t live = 0;
  for (Rec& r : recs) {
    if (r.loc.segment != recs[0].loc.segment) live += r.loc.footprint();
  }
  EXPECT_EQ(tier->live_bytes(), live);
  // New records go to a new segment, never into an old file.
  Rec next = Tensor(kOddLayout, 16, 100);
  ASSERT_NO_FATAL_FAILURE(AppendOk(tier.get(), &next));
  EXPECT_GT(next.loc.segment, recs.back().loc.segment);
  tier.reset();
  tier = OpenTier(Env::Default(), o, &scan);
  EXPECT_TRUE(scan.by_seq.count(100));
  EXPECT_TRUE(PayloadIs(tier.get(), next.loc, next.payload));
}

TEST(SsdTierAccounting, AppendPastCapacityLosesNothing) {
  TempDir dir;
  SsdOptions o = Options(dir.path());
  o.capacity = 8 * kMiB;
  std::map<uint64_t, Rec> ok;
  {
    std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o);
    Status last;
    uint64_t seq = 1;
    for (; seq < 100; ++seq) {
      Rec r = Tensor(kBigLayout, 16, seq);
      Result<SsdLocation> loc = tier->Append(r.h, r.payload);
      if (!loc.ok()) {
        last = loc.status();
        break;
      }
      r.loc = *loc;
      ok[seq] = r;
      EXPECT_LE(tier->file_bytes(), o.capacity);
    }
    ASSERT_ERROR(last, Code::kResourceExhausted);
    EXPECT_GE(ok.size(), 20u);
    EXPECT_LE(tier->file_bytes(), o.capacity);
    // Still full.
    Rec more = Tensor(kBigLayout, 16, 200);
    EXPECT_ERROR(tier->Append(more.h, more.payload), Code::kResourceExhausted);
    for (auto& [s, r] : ok) EXPECT_TRUE(PayloadIs(tier.get(), r.loc, r.payload)) << s;
    // Freeing a sealed segment makes room again.
    const uint64_t first = ok.begin()->second.loc.segment;
    for (auto it = ok.begin(); it != ok.end();) {
      if (it->second.loc.segment == first) {
        tier->Forget(it->second.loc);
        it = ok.erase(it);
      } else {
        ++it;
      }
    }
    EXPECT_FALSE(std::filesystem::exists(SegmentPath(o, first)));
    ASSERT_NO_FATAL_FAILURE(AppendOk(tier.get(), &more));
    ok[200] = more;
  }
  ScanResult scan;
  std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o, &scan);
  EXPECT_EQ(scan.by_seq.size(), ok.size());
  EXPECT_EQ(scan.stats.corrupt_records, 0u);
  ExpectReportedRecordsValid(tier.get(), scan, ok);
}

// ----------------------------------------------------------- concurrency

TEST(SsdTierConcurrency, ParallelAppendsAndReadsAreByteExact) {
  TempDir dir;
  SsdOptions o = Options(dir.path(), true);
  o.sync = SsdOptions::Sync::kSegment;
  std::unique_ptr<SsdTier> tier = OpenTier(Env::Default(), o);
  ASSERT_NE(tier, nullptr);
  constexpr int kThreads = 6;
  constexpr int kPerThread = 30;
  std::mutex mu;
  std::map<uint64_t, Rec> all;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t + 1);
      for (int i = 0; i < kPerThread; ++i) {
        const uint64_t seq = static_cast<uint64_t>(t) * 1000 + i + 1;
        const int pick = static_cast<int>(rng() % 8);
        Rec r = pick == 0   ? Namespace(seq)
                : pick <= 3 ? Tensor(kOddLayout, 16 * (1 + rng() % 10), seq, rng() % 2 ? Fill::kBf16 : Fill::kRandom)
                : pick <= 6 ? Tensor(kBlockLayout, 16 * (1 + rng() % 10), seq, rng() % 2 ? Fill::kBf16 : Fill::kRandom)
                            : Tensor(kBigLayout, 16, seq, Fill::kBf16);
        Result<SsdLocation> loc = tier->Append(r.h, r.payload);
        if (!loc.ok()) {
          failures++;
          ADD_FAILURE() << loc.status().ToString();
          continue;
        }
        r.loc = *loc;
        if (r.h.kind == RecordKind::kTensor && rng() % 4 == 0) {
          if (!tier->SetLiveTokens(r.loc, 16).ok()) failures++;
          r.h.live_tokens = 16;
        }
        std::vector<Rec> sample;
        {
          std::lock_guard lk(mu);
          all[seq] = r;
          for (int k = 0; k < 3; ++k) {
            auto it = all.lower_bound(rng() % (kThreads * 1000));
            if (it != all.end()) sample.push_back(it->second);
          }
        }
        sample.push_back(r);
        for (const Rec& s : sample) {
          if (!PayloadIs(tier.get(), s.loc, s.payload, rng() % 2 ? 0 : 1)) {
            failures++;
            ADD_FAILURE() << "seq " << s.h.seq << " read back wrong";
          }
        }
        (void)tier->Stats();
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  ASSERT_EQ(all.size(), static_cast<size_t>(kThreads * kPerThread));
  // No two records overlap.
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> extents;
  for (auto& [seq, r] : all) extents[{r.loc.segment, r.loc.offset}] = r.loc.footprint();
  ASSERT_EQ(extents.size(), all.size());
  for (auto it = extents.begin(); std::next(it) != extents.end(); ++it) {
    auto next = std::next(it);
    if (next->first.first == it->first.first) {
      EXPECT_LE(it->first.second + it->second, next->first.second);
    }
  }
  const SsdTierStats st = tier->Stats();
  EXPECT_EQ(st.records_written, all.size());
  uint64_t live = 0;
  for (auto& [seq, r] : all) live += r.loc.footprint();
  EXPECT_EQ(st.live_bytes, live);
  tier.reset();
  ScanResult scan;
  tier = OpenTier(Env::Default(), o, &scan);
  EXPECT_EQ(scan.by_seq.size(), all.size());
  EXPECT_EQ(scan.stats.corrupt_records, 0u);
  for (auto& [seq, r] : all) {
    ASSERT_TRUE(scan.by_seq.count(seq)) << seq;
    EXPECT_EQ(scan.by_seq.at(seq).first.live_tokens, r.h.live_tokens) << seq;
    EXPECT_EQ(scan.by_seq.at(seq).second, r.loc) << seq;
  }
  ExpectReportedRecordsValid(tier.get(), scan, all);
}

}  // namespace
}  // namespace ptstore::storage
