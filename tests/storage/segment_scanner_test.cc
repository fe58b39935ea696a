// The read-only segment scanner (storage/ssd_format/segment_scanner.h) over real
// segment files written by SsdTier, then damaged; and SsdTier::Scan, which
// counts what the scanner reports as the restart scan always did (a run of
// garbage is one corrupt record).
#include "storage/ssd_format/segment_scanner.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "storage/ssd_format/env.h"
#include "storage/ssd/ssd_tier.h"
#include "tests/testing/segment_files.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/status_matchers.h"

namespace ptstore::storage {
namespace {

using testing::FlipBit;
using testing::NamespaceRecord;
using testing::ReadAt;
using testing::SizeOf;
using testing::TensorRecord;
using testing::TempDir;
using testing::TestPayload;
using testing::TruncateTo;
using testing::WriteAt;

struct Seen {
  std::optional<Status> header_error;  // set when the header did not decode
  std::optional<SegmentHeader> header;
  struct Rec {
    RecordHeader h;
    SsdLocation loc;
    bool verified;
  };
  std::vector<Rec> records;
  std::vector<SegmentProblem> problems;
};

class SegmentScannerTest : public ::testing::Test {
 protected:
  void SetUp() override { tmp_.KeepIfFailed(); }
  void TearDown() override { tier_.reset(); }

  SsdOptions Options(bool compress = false) {
    SsdOptions o;
    o.dir = dir_;
    o.capacity = 64ull << 20;
    o.compress = compress;
    o.sync = SsdOptions::Sync::kNone;
    return o;
  }
  void OpenTier(bool compress = false) {
    auto t = SsdTier::Open(Env::Default(), Options(compress), 7);
    ASSERT_OK(t);
    tier_ = std::move(*t);
  }
  SsdLocation Append(RecordHeader h, uint32_t salt, bool compressible = false) {
    std::vector<uint8_t> payload =
        TestPayload(h.tokens.size() * h.layout.BytesPerToken(), salt, compressible);
    auto loc = tier_->Append(std::move(h), payload);
    EXPECT_OK(loc);
    return loc.ok() ? *loc : SsdLocation{};
  }
  // ns record, then three tensors of 16, 32 and 48 tokens.
  void WriteFour() {
    OpenTier();
    locs_.push_back(Append(NamespaceRecord("m", 1), 0));
    locs_.push_back(Append(TensorRecord("m", 1, 2, 0, 16), 2));
    locs_.push_back(Append(TensorRecord("m", 1, 3, 16, 32), 3));
    locs_.push_back(Append(TensorRecord("m", 1, 4, 48, 48), 4));
    seed_ = Seed();
    tier_.reset();
  }
  std::string SegPath(uint64_t id = 1) const { return dir_ + "/" + SegmentFileName(id); }
  uint64_t Seed() const {
    auto h = DecodeSegmentHeader(ReadAt(SegPath(), 0, kSegmentHeaderBytes));
    EXPECT_OK(h);
    return h.ok() ? h->seed : 0;
  }

  Seen ScanFile(uint64_t fallback_seed, bool verify = true, Status* status = nullptr) {
    auto f = Env::Default()->Open(SegPath(), OpenOptions{});  // read-only
    EXPECT_OK(f);
    Seen seen;
    SegmentVisitor v;
    v.segment_header = [&](const Result<SegmentHeader>& h) {
      if (h.ok()) {
        seen.header = *h;
      } else {
        seen.header_error = h.status();
      }
    };
    v.record = [&](const RecordHeader& h, const SsdLocation& loc, bool verified) {
      seen.records.push_back({h, loc, verified});
    };
    v.problem = [&](const SegmentProblem& p) { seen.problems.push_back(p); };
    Status s = ScanSegmentFile(f->get(), 1, fallback_seed, verify, v);
    if (status) {
      *status = s;
    } else {
      EXPECT_OK(s);
    }
    return seen;
  }

  TempDir tmp_{"ptstore-scanner-test"};
  const std::string dir_ = tmp_.path();
  std::unique_ptr<SsdTier> tier_;
  std::vector<SsdLocation> locs_;
  uint64_t seed_ = 0;
};

TEST_F(SegmentScannerTest, CleanSegmentVisitsEveryRecordInOrder) {
  OpenTier();
  locs_.push_back(Append(NamespaceRecord("m", 1), 0));
  locs_.push_back(Append(TensorRecord("m", 1, 2, 0, 16), 2));
  locs_.push_back(Append(TensorRecord("m", 1, 3, 16, 32), 3));
  ASSERT_OK(tier_->SetLiveTokens(locs_[2], 0));  // dead
  tier_.reset();
  const uint64_t before = SizeOf(SegPath());
  Seen s = ScanFile(/*fallback_seed=*/12345);
  ASSERT_TRUE(s.header.has_value());
  EXPECT_EQ(s.header->node_id, 7u);
  EXPECT_EQ(s.header->segment_id, 1u);
  EXPECT_TRUE(s.problems.empty());
  ASSERT_EQ(s.records.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(s.records[i].loc, locs_[i]) << i;
  EXPECT_EQ(s.records[0].h.kind, RecordKind::kNamespace);
  EXPECT_TRUE(s.records[0].verified);  // an empty payload verifies
  EXPECT_TRUE(s.records[1].verified);
  EXPECT_EQ(s.records[1].h.tokens.size(), 16u);
  EXPECT_TRUE(s.records[2].h.dead());
  EXPECT_FALSE(s.records[2].verified);  // dead: the payload is not read
  EXPECT_EQ(SizeOf(SegPath()), before);

  s = ScanFile(12345, /*verify=*/false);
  ASSERT_EQ(s.records.size(), 3u);
  EXPECT_FALSE(s.records[1].verified);
}

TEST_F(SegmentScannerTest, PayloadChecksumMismatchSkipsOnlyThatRecord) {
  WriteFour();
  FlipBit(SegPath(), locs_[2].offset + locs_[2].header_bytes + 5000);
  Seen s = ScanFile(seed_);
  ASSERT_EQ(s.problems.size(), 1u);
  EXPECT_EQ(s.problems[0].kind, SegmentProblemKind::kPayloadChecksum);
  EXPECT_EQ(s.problems[0].offset, locs_[2].offset);
  EXPECT_EQ(s.problems[0].length, locs_[2].footprint());
  ASSERT_EQ(s.records.size(), 3u);
  EXPECT_EQ(s.records[2].loc, locs_[3]);

  // Without payload checks the record looks fine.
  s = ScanFile(seed_, /*verify=*/false);
  EXPECT_TRUE(s.problems.empty());
  EXPECT_EQ(s.records.size(), 4u);
}

TEST_F(SegmentScannerTest, BadHeaderIsOneRunUpToTheNextRecord) {
  WriteFour();
  FlipBit(SegPath(), locs_[2].offset + 40);  // inside the header: checksum mismatch
  Seen s = ScanFile(seed_);
  ASSERT_EQ(s.problems.size(), 1u);
  EXPECT_EQ(s.problems[0].kind, SegmentProblemKind::kBadHeader);
  EXPECT_EQ(s.problems[0].offset, locs_[2].offset);
  EXPECT_EQ(s.problems[0].length, locs_[2].footprint());  // its payload blocks are in the run
  EXPECT_NE(s.problems[0].message.find("checksum"), std::string::npos) << s.problems[0].message;
  ASSERT_EQ(s.records.size(), 3u);
  EXPECT_EQ(s.records[2].loc, locs_[3]);
}

TEST_F(SegmentScannerTest, ZeroBlocksAreSkippedSilentlyAndDoNotEndARun) {
  WriteFour();
  // Record 1 entirely zeroed: skipped without a word.
  WriteAt(SegPath(), locs_[1].offset, std::vector<uint8_t>(locs_[1].footprint(), 0));
  // Record 2: a bad header, and its last payload block zeroed. The run is
  // one problem and its length stops at the last non-zero block.
  FlipBit(SegPath(), locs_[2].offset + 40);
  const uint64_t end2 = locs_[2].offset + locs_[2].footprint();
  WriteAt(SegPath(), end2 - kRecordAlignment, std::vector<uint8_t>(kRecordAlignment, 0));
  Seen s = ScanFile(seed_);
  ASSERT_EQ(s.problems.size(), 1u);
  EXPECT_EQ(s.problems[0].offset, locs_[2].offset);
  EXPECT_EQ(s.problems[0].length, locs_[2].footprint() - kRecordAlignment);
  ASSERT_EQ(s.records.size(), 2u);
  EXPECT_EQ(s.records[0].loc, locs_[0]);
  EXPECT_EQ(s.records[1].loc, locs_[3]);
}

TEST_F(SegmentScannerTest, TruncatedRecordIsTornAndEndsTheScan) {
  WriteFour();
  TruncateTo(SegPath(), locs_[3].offset + locs_[3].header_bytes + 3 * kRecordAlignment + 100);
  const uint64_t size = SizeOf(SegPath());
  Seen s = ScanFile(seed_);
  ASSERT_EQ(s.problems.size(), 1u);
  EXPECT_EQ(s.problems[0].kind, SegmentProblemKind::kTornRecord);
  EXPECT_EQ(s.problems[0].offset, locs_[3].offset);
  EXPECT_EQ(s.problems[0].length, size - locs_[3].offset);
  EXPECT_EQ(s.records.size(), 3u);

  // Cut inside the header's only block: less than a block is left.
  TruncateTo(SegPath(), locs_[3].offset + 100);
  s = ScanFile(seed_);
  ASSERT_EQ(s.problems.size(), 1u);
  EXPECT_EQ(s.problems[0].kind, SegmentProblemKind::kPartialBlock);
  EXPECT_EQ(s.problems[0].offset, locs_[3].offset);
  EXPECT_EQ(s.problems[0].length, 100u);
}

TEST_F(SegmentScannerTest, TruncatedMultiBlockHeaderIsTorn) {
  OpenTier();
  locs_.push_back(Append(TensorRecord("m", 1, 2, 0, 16), 2));
  locs_.push_back(Append(TensorRecord("m", 1, 3, 0, 1040), 3));  // 4 bytes a token: a 2-block header
  tier_.reset();
  ASSERT_EQ(locs_[1].header_bytes, 2 * kRecordAlignment);
  TruncateTo(SegPath(), locs_[1].offset + kRecordAlignment + 100);
  Seen s = ScanFile(0, true);  // the segment header is good: the fallback seed is unused
  ASSERT_EQ(s.problems.size(), 1u);
  EXPECT_EQ(s.problems[0].kind, SegmentProblemKind::kTornRecord);
  EXPECT_EQ(s.problems[0].offset, locs_[1].offset);
  EXPECT_EQ(s.problems[0].length, kRecordAlignment + 100);
  EXPECT_NE(s.problems[0].message.find("header cut short"), std::string::npos);
  EXPECT_EQ(s.records.size(), 1u);
}

// A header whose (unverified) length runs past the end of the file is only
// torn if nothing valid follows it: here the length was damaged, and the
// records after it are found.
TEST_F(SegmentScannerTest, DamagedLengthPastTheEndIsABadHeaderNotATear) {
  WriteFour();
  FlipBit(SegPath(), locs_[1].offset + 10, 0x10);  // length + 1 MiB
  Seen s = ScanFile(seed_);
  ASSERT_EQ(s.problems.size(), 1u);
  EXPECT_EQ(s.problems[0].kind, SegmentProblemKind::kBadHeader);
  EXPECT_EQ(s.problems[0].offset, locs_[1].offset);
  EXPECT_EQ(s.problems[0].length, locs_[1].footprint());
  EXPECT_NE(s.problems[0].message.find("past the end of the file"), std::string::npos) << s.problems[0].message;
  ASSERT_EQ(s.records.size(), 3u);
  EXPECT_EQ(s.records[1].loc, locs_[2]);
  EXPECT_EQ(s.records[2].loc, locs_[3]);

  // The same damage in the last record: nothing valid after it, so torn
  // (the partial block at the end is part of it).
  WriteAt(SegPath(), SizeOf(SegPath()), std::vector<uint8_t>(50, 7));
  FlipBit(SegPath(), locs_[3].offset + 10, 0x10);
  s = ScanFile(seed_);
  ASSERT_EQ(s.problems.size(), 2u);
  EXPECT_EQ(s.problems[1].kind, SegmentProblemKind::kTornRecord);
  EXPECT_EQ(s.problems[1].offset, locs_[3].offset);
  EXPECT_EQ(s.problems[1].length, locs_[3].footprint() + 50);
  EXPECT_EQ(s.records.size(), 2u);
}

TEST_F(SegmentScannerTest, PartialBlockAtTheEnd) {
  WriteFour();
  const uint64_t size = SizeOf(SegPath());
  WriteAt(SegPath(), size, std::vector<uint8_t>(123, 0xab));
  Seen s = ScanFile(seed_);
  ASSERT_EQ(s.problems.size(), 1u);
  EXPECT_EQ(s.problems[0].kind, SegmentProblemKind::kPartialBlock);
  EXPECT_EQ(s.problems[0].offset, size);
  EXPECT_EQ(s.problems[0].length, 123u);
  EXPECT_EQ(s.records.size(), 4u);
}

TEST_F(SegmentScannerTest, BadSegmentHeaderUsesTheFallbackSeed) {
  WriteFour();
  FlipBit(SegPath(), 20);
  Seen s = ScanFile(seed_);
  ASSERT_TRUE(s.header_error.has_value());
  EXPECT_EQ(s.header_error->code(), Code::kCorruption);
  EXPECT_TRUE(s.problems.empty());
  EXPECT_EQ(s.records.size(), 4u);

  // With the wrong seed nothing verifies: one run of garbage.
  s = ScanFile(seed_ + 1);
  EXPECT_TRUE(s.records.empty());
  ASSERT_EQ(s.problems.size(), 1u);
  EXPECT_EQ(s.problems[0].kind, SegmentProblemKind::kBadHeader);
  EXPECT_EQ(s.problems[0].offset, kSegmentHeaderBytes);
}

TEST_F(SegmentScannerTest, GarbageFileNeverCrashes) {
  // Random blocks, some dressed up as record headers with random lengths.
  std::vector<uint8_t> junk = TestPayload(300 * kRecordAlignment + 77, 99, false);
  for (uint64_t b = 1; b < 300; b += 3) {
    const uint64_t magic = kRecordMagic;
    std::memcpy(junk.data() + b * kRecordAlignment, &magic, 8);
    uint32_t len = static_cast<uint32_t>(junk[b * kRecordAlignment + 20]) << (b % 20);
    std::memcpy(junk.data() + b * kRecordAlignment + 8, &len, 4);
  }
  {
    std::FILE* f = std::fopen(SegPath().c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fwrite(junk.data(), 1, junk.size(), f);
    std::fclose(f);
  }
  Seen s = ScanFile(1);
  EXPECT_TRUE(s.header_error.has_value());
  EXPECT_TRUE(s.records.empty());
  ASSERT_FALSE(s.problems.empty());
  EXPECT_EQ(s.problems[0].offset, kSegmentHeaderBytes);
  uint64_t covered = 0;
  for (const auto& p : s.problems) {
    EXPECT_GT(p.length, 0u);
    covered += p.length;
  }
  EXPECT_LE(covered, junk.size() - kSegmentHeaderBytes);

  // Shorter than a segment header.
  TruncateTo(SegPath(), 10);
  Status st;
  s = ScanFile(1, true, &st);
  EXPECT_OK(st);
  EXPECT_TRUE(s.header_error.has_value());
  EXPECT_TRUE(s.problems.empty());
}

// SsdTier::Scan over the scanner: the counts of the restart scan.
TEST_F(SegmentScannerTest, TierScanCountsGarbageRunsOnce) {
  OpenTier();
  for (uint64_t i = 0; i < 8; ++i) locs_.push_back(Append(TensorRecord("m", 1, 10 + i, 0, 16 * (1 + i % 3)), i));
  ASSERT_OK(tier_->SetLiveTokens(locs_[7], 0));
  tier_.reset();
  // Run 1: records 1 and 2 both have bad headers (one run, one count).
  FlipBit(SegPath(), locs_[1].offset + 40);
  FlipBit(SegPath(), locs_[2].offset + 40);
  // Record 3 right after it: a valid header, a bad payload: one more (the
  // run ended at its header).
  FlipBit(SegPath(), locs_[3].offset + locs_[3].header_bytes + 10);
  // Record 5: a bad payload after a good record: one more.
  FlipBit(SegPath(), locs_[5].offset + locs_[5].header_bytes + 10);
  // The file ends in a partial block after a valid record: one more.
  WriteAt(SegPath(), SizeOf(SegPath()), std::vector<uint8_t>(10, 1));

  OpenTier();
  std::vector<SsdLocation> seen;
  ScanStats stats;
  ASSERT_OK(tier_->Scan([&](const RecordHeader&, const SsdLocation& loc) { seen.push_back(loc); }, &stats));
  EXPECT_EQ(stats.segments, 1u);
  EXPECT_EQ(stats.bad_segment_headers, 0u);
  EXPECT_EQ(stats.corrupt_records, 4u);
  EXPECT_EQ(stats.records, 4u);  // 0, 4, 6, 7
  EXPECT_EQ(stats.dead_records, 1u);
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[0], locs_[0]);
  EXPECT_EQ(seen[1], locs_[4]);
  EXPECT_EQ(seen[2], locs_[6]);
  EXPECT_EQ(seen[3], locs_[7]);
  EXPECT_EQ(tier_->live_bytes(), locs_[0].footprint() + locs_[4].footprint() + locs_[6].footprint());
}

TEST_F(SegmentScannerTest, TierScanWithoutPayloadVerification) {
  OpenTier();
  for (uint64_t i = 0; i < 3; ++i) locs_.push_back(Append(TensorRecord("m", 1, 10 + i, 0, 32), i, true));
  tier_.reset();
  FlipBit(SegPath(), locs_[1].offset + locs_[1].header_bytes + 10);
  SsdOptions o = Options();
  o.verify_on_recovery = false;
  auto t = SsdTier::Open(Env::Default(), o, 7);
  ASSERT_OK(t);
  ScanStats stats;
  ASSERT_OK((*t)->Scan([](const RecordHeader&, const SsdLocation&) {}, &stats));
  EXPECT_EQ(stats.records, 3u);
  EXPECT_EQ(stats.corrupt_records, 0u);
}

TEST_F(SegmentScannerTest, ProblemKindNames) {
  EXPECT_STREQ(SegmentProblemKindName(SegmentProblemKind::kBadHeader), "bad_header");
  EXPECT_STREQ(SegmentProblemKindName(SegmentProblemKind::kPayloadChecksum), "payload_checksum");
  EXPECT_STREQ(SegmentProblemKindName(SegmentProblemKind::kTornRecord), "torn_record");
  EXPECT_STREQ(SegmentProblemKindName(SegmentProblemKind::kPartialBlock), "partial_block");
}

}  // namespace
}  // namespace ptstore::storage
