#include "storage/ssd/ssd_tier.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "storage/ssd/env.h"
#include "storage/ssd/fault_env.h"
#include "storage/record.h"
#include "tests/testing/segment_files.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/status_matchers.h"

namespace ptstore::storage {
namespace {

using testing::ExpectSameRecord;
using testing::TempDir;

constexpr uint64_t kMiB = 1ull << 20;

// ------------------------------------------------------------------ helpers

Layout MakeLayout(uint32_t layers, uint32_t kv_heads, uint32_t head_dim) {
  Layout l;
  l.layers = layers;
  l.kv_heads = kv_heads;
  l.head_dim = head_dim;
  l.dtype = DType::kBF16;
  l.block_tokens = 16;
  return l;
}

// 256 bytes a token: one block is exactly 4 KiB.
const Layout kBlockLayout = MakeLayout(1, 1, 64);
// 160 bytes a token: a block is 2560 bytes, not a multiple of 4 KiB.
const Layout kOddLayout = MakeLayout(1, 1, 40);
// 16 KiB a token: a block is 256 KiB.
const Layout kBigLayout = MakeLayout(4, 8, 128);

std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t x = rng();
    std::memcpy(&v[i], &x, 8);
  }
  for (; i < n; ++i) v[i] = static_cast<uint8_t>(rng());
  return v;
}

// bf16 values of a normal distribution: what a KV cache holds, and what
// the byte-shuffle + zstd codec shrinks.
std::vector<uint8_t> Bf16Like(size_t n, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i + 2 <= n; i += 2) {
    const uint32_t u = std::bit_cast<uint32_t>(normal(rng));
    const uint16_t h = static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
    std::memcpy(&v[i], &h, 2);
  }
  if (n % 2) v[n - 1] = 0x3f;
  return v;
}

enum class Fill { kRandom, kBf16 };

struct Rec {
  RecordHeader h;
  std::vector<uint8_t> payload;
  SsdLocation loc;
};

Rec Tensor(const Layout& layout, uint64_t tokens, uint64_t seq, Fill fill = Fill::kRandom) {
  Rec r;
  r.h.kind = RecordKind::kTensor;
  r.h.seq = seq;
  r.h.owner_node = 7;
  r.h.ns_name = "ns-" + std::to_string(seq % 3);
  r.h.ns_incarnation = 1 + seq % 3;
  r.h.layout = layout;
  r.h.parent_key = ChainKey{seq, ~seq};
  r.h.start_token = 16 * (seq % 5);
  r.h.hits = seq * 3;
  for (uint64_t i = 0; i < tokens; ++i) r.h.tokens.push_back(static_cast<uint32_t>(seq * 100000 + i));
  r.h.live_tokens = tokens;
  const size_t bytes = tokens * layout.BytesPerToken();
  r.payload = fill == Fill::kRandom ? RandomBytes(bytes, seq * 7919 + 1) : Bf16Like(bytes, seq * 7919 + 1);
  return r;
}

Rec Namespace(uint64_t seq) {
  Rec r;
  r.h.kind = RecordKind::kNamespace;
  r.h.seq = seq;
  r.h.live_tokens = 1;
  r.h.owner_node = 7;
  r.h.ns_name = "ns-" + std::to_string(seq);
  r.h.ns_incarnation = seq;
  r.h.layout = kBlockLayout;
  r.h.salt = "salt-" + std::to_string(seq);
  r.h.uid = 1000;
  r.h.gid = 1001;
  r.h.mode = 0750;
  return r;
}

SsdOptions Options(const std::string& dir, bool compress = false, bool direct = true) {
  SsdOptions o;
  o.dir = dir + "/ssd";
  o.capacity = 64 * kMiB;
  o.segment_bytes = 1 * kMiB;
  o.compress = compress;
  o.direct_io = direct;
  o.sync = SsdOptions::Sync::kNone;
  return o;
}

std::string SegmentPath(const SsdOptions& o, uint64_t segment) { return o.dir + "/" + SegmentFileName(segment); }

struct ScanResult {
  Status status;
  ScanStats stats;
  std::map<uint64_t, std::pair<RecordHeader, SsdLocation>> by_seq;
  int duplicates = 0;
};

ScanResult ScanAll(SsdTier* tier) {
  ScanResult r;
  r.status = tier->Scan(
      [&](const RecordHeader& h, const SsdLocation& loc) {
        if (!r.by_seq.emplace(h.seq, std::make_pair(h, loc)).second) r.duplicates++;
      },
      &r.stats);
  return r;
}

std::unique_ptr<SsdTier> OpenTier(Env* env, const SsdOptions& o, ScanResult* scan = nullptr) {
  Result<std::unique_ptr<SsdTier>> t = SsdTier::Open(env, o, 7);
  EXPECT_OK(t);
  if (!t.ok()) return nullptr;
  // Scan comes first, even on an empty directory.
  ScanResult r = ScanAll(t->get());
  EXPECT_OK(r.status);
  EXPECT_EQ(r.duplicates, 0);
  if (scan) *scan = std::move(r);
  return std::move(t).value();
}

std::set<uint64_t> KeysOf(const std::map<uint64_t, Rec>& m) {
  std::set<uint64_t> s;
  for (const auto& entry : m) s.insert(entry.first);
  return s;
}

std::set<uint64_t> Seqs(const ScanResult& r) {
  std::set<uint64_t> s;
  for (const auto& [seq, v] : r.by_seq) s.insert(seq);
  return s;
}

// A 4 KiB-aligned buffer; `skew` bytes past alignment when asked.
class Buffer {
 public:
  Buffer(size_t n, size_t skew) : raw_(static_cast<uint8_t*>(std::aligned_alloc(4096, AlignUp(n + skew + 1, 4096)))) {
    std::memset(raw_, 0xa5, AlignUp(n + skew + 1, 4096));
    span_ = {raw_ + skew, n};
  }
  ~Buffer() { std::free(raw_); }
  std::span<uint8_t> span() { return span_; }

 private:
  uint8_t* raw_;
  std::span<uint8_t> span_;
};

::testing::AssertionResult PayloadIs(SsdTier* tier, const SsdLocation& loc, const std::vector<uint8_t>& want,
                                     size_t skew = 0) {
  Buffer out(loc.payload_bytes, skew);
  Status s = tier->ReadPayload(loc, out.span());
  if (!s.ok()) return ::testing::AssertionFailure() << "ReadPayload: " << s.ToString();
  if (out.span().size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << out.span().size() << " != " << want.size();
  }
  for (size_t i = 0; i < want.size(); ++i) {
    if (out.span()[i] != want[i]) return ::testing::AssertionFailure() << "payload differs at byte " << i;
  }
  return ::testing::AssertionSuccess();
}

void AppendOk(SsdTier* tier, Rec* r) {
  Result<SsdLocation> loc = tier->Append(r->h, r->payload);
  ASSERT_OK(loc) << "seq " << r->h.seq << ": " << loc.status().ToString();
  r->loc = *loc;
}

// Appends make(seq) for seq = first..last and keeps each record, with its
// location, in (*recs)[seq].
void AppendSeqs(SsdTier* tier, uint64_t first, uint64_t last, std::map<uint64_t, Rec>* recs,
                const std::function<Rec(uint64_t seq)>& make) {
  for (uint64_t seq = first; seq <= last; ++seq) {
    Rec r = make(seq);
    ASSERT_NO_FATAL_FAILURE(AppendOk(tier, &r));
    (*recs)[seq] = std::move(r);
  }
}

void FlipBitInFile(const std::string& path, uint64_t offset, int bit) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
  uint8_t b = 0;
  ASSERT_EQ(::pread(fd, &b, 1, static_cast<off_t>(offset)), 1);
  b ^= static_cast<uint8_t>(1u << bit);
  ASSERT_EQ(::pwrite(fd, &b, 1, static_cast<off_t>(offset)), 1);
  ::close(fd);
}

uint64_t FileSize(const std::string& path) {
  std::error_code ec;
  const uint64_t n = std::filesystem::file_size(path, ec);
  EXPECT_FALSE(ec) << path << ": " << ec.message();
  return n;
}

// Every reported record is one that was written, with its payload intact.
void ExpectReportedRecordsValid(SsdTier* tier, const ScanResult& scan, const std::map<uint64_t, Rec>& written) {
  for (const auto& [seq, v] : scan.by_seq) {
    auto it = written.find(seq);
    ASSERT_NE(it, written.end()) << "scan reported seq " << seq << ", which was never written";
    ExpectSameRecord(v.first, it->second.h);
    EXPECT_TRUE(PayloadIs(tier, v.second, it->second.payload)) << "seq " << seq;
  }
}

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
