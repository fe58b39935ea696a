#include "storage/ssd_format/record.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <xxhash.h>

#include "tests/testing/segment_files.h"
#include "tests/testing/status_matchers.h"

namespace ptstore::storage {
namespace {

// 2 layers, 2 KV heads, head_dim 64, bf16, 16-token blocks.
using testing::SegmentTestLayout;

constexpr uint64_t kSeed = 0x5eed5eed12345678ull;

RecordHeader TensorHeader(size_t tokens = 32) {
  RecordHeader h;
  h.kind = RecordKind::kTensor;
  h.flags = 0;
  h.seq = 0x0102030405060708ull;
  h.layout = SegmentTestLayout();
  for (size_t i = 0; i < tokens; ++i) h.tokens.push_back(static_cast<uint32_t>(1000 + i * 7));
  h.payload_bytes = tokens * h.layout.BytesPerToken();
  h.stored_bytes = h.payload_bytes;
  h.payload_checksum = 0xdeadbeefcafef00dull;
  h.live_tokens = tokens;
  h.owner_node = 77;
  h.ns_name = "mistral-7b";
  h.ns_incarnation = 42;
  h.parent_key = ChainKey{0x1111222233334444ull, 0x5555666677778888ull};
  h.start_token = 48;
  h.hits = 9;
  return h;
}

RecordHeader NamespaceHeader() {
  RecordHeader h;
  h.kind = RecordKind::kNamespace;
  h.seq = 5;
  h.live_tokens = 1;
  h.owner_node = 3;
  h.ns_name = "tenant.a";
  h.ns_incarnation = 5;
  h.layout = SegmentTestLayout();
  h.salt = std::string("s\0alt", 5);
  h.uid = 1000;
  h.gid = 100;
  h.mode = 0640;
  return h;
}

// Every field.
void ExpectSameHeader(const RecordHeader& a, const RecordHeader& b) {
  testing::ExpectSameRecord(a, b);
  EXPECT_EQ(a.flags, b.flags);
  EXPECT_EQ(a.payload_bytes, b.payload_bytes);
  EXPECT_EQ(a.stored_bytes, b.stored_bytes);
  EXPECT_EQ(a.payload_checksum, b.payload_checksum);
  EXPECT_EQ(a.live_tokens, b.live_tokens);
  EXPECT_EQ(a.has_times, b.has_times);
  EXPECT_EQ(a.times, b.times);
}

uint32_t UnpaddedLength(const std::vector<uint8_t>& enc) {
  uint32_t len;
  std::memcpy(&len, enc.data() + 8, 4);
  return len;
}

// Re-seals an edited header: sets the length and recomputes the seeded
// XXH3-64 over everything before the checksum.
void Reseal(std::vector<uint8_t>* unpadded, uint64_t seed) {
  const uint32_t len = static_cast<uint32_t>(unpadded->size());
  std::memcpy(unpadded->data() + 8, &len, 4);
  const uint64_t sum = XXH3_64bits_withSeed(unpadded->data(), len - 8, seed);
  std::memcpy(unpadded->data() + len - 8, &sum, 8);
}

// ------------------------------------------------------------ segment header

SegmentHeader SampleSegmentHeader() {
  SegmentHeader h;
  h.node_id = 0xabcdef01;
  h.segment_id = 0x0123456789abcdefull;
  h.created_ns = 1700000000123456789ull;
  h.seed = kSeed;
  return h;
}

TEST(SegmentHeader, RoundTrip) {
  const SegmentHeader h = SampleSegmentHeader();
  const std::vector<uint8_t> enc = EncodeSegmentHeader(h);
  ASSERT_EQ(enc.size(), kSegmentHeaderBytes);
  uint64_t magic;
  std::memcpy(&magic, enc.data(), 8);
  EXPECT_EQ(magic, kSegmentMagic);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(enc.data()), 8), "PTSSEG01");
  for (size_t i = 48; i < enc.size(); ++i) ASSERT_EQ(enc[i], 0) << "padding byte " << i;
  Result<SegmentHeader> d = DecodeSegmentHeader(enc);
  ASSERT_OK(d);
  EXPECT_EQ(d->version, kFormatVersion);
  EXPECT_EQ(d->node_id, h.node_id);
  EXPECT_EQ(d->segment_id, h.segment_id);
  EXPECT_EQ(d->created_ns, h.created_ns);
  EXPECT_EQ(d->seed, h.seed);
  // 48 bytes are enough.
  Result<SegmentHeader> d48 = DecodeSegmentHeader(std::span<const uint8_t>(enc).first(48));
  ASSERT_OK(d48);
  EXPECT_EQ(d48->seed, h.seed);
}

TEST(SegmentHeader, BadMagic) {
  std::vector<uint8_t> enc = EncodeSegmentHeader(SampleSegmentHeader());
  enc[0] = 'X';
  Result<SegmentHeader> d = DecodeSegmentHeader(enc);
  ASSERT_FALSE(d.ok());
  EXPECT_ERROR(d, Code::kCorruption);
  EXPECT_NE(d.status().message().find("magic"), std::string::npos) << d.status().ToString();
  // A record header is not a segment header.
  RecordHeader rh = NamespaceHeader();
  Result<SegmentHeader> r = DecodeSegmentHeader(EncodeRecordHeader(rh, kSeed));
  EXPECT_ERROR(r, Code::kCorruption);
}

TEST(SegmentHeader, EveryFlippedBitInTheFirst48BytesIsCorruption) {
  const std::vector<uint8_t> enc = EncodeSegmentHeader(SampleSegmentHeader());
  for (size_t byte = 0; byte < 48; ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<uint8_t> bad = enc;
      bad[byte] ^= uint8_t(1u << bit);
      Result<SegmentHeader> d = DecodeSegmentHeader(bad);
      ASSERT_FALSE(d.ok()) << "byte " << byte << " bit " << bit;
      EXPECT_ERROR(d, Code::kCorruption) << "byte " << byte << " bit " << bit;
    }
  }
}

TEST(SegmentHeader, WrongVersion) {
  SegmentHeader h = SampleSegmentHeader();
  h.version = kFormatVersion + 1;
  Result<SegmentHeader> d = DecodeSegmentHeader(EncodeSegmentHeader(h));
  ASSERT_FALSE(d.ok());
  EXPECT_ERROR(d, Code::kCorruption);
  EXPECT_NE(d.status().message().find("version"), std::string::npos) << d.status().ToString();
  h.version = 0;
  EXPECT_ERROR(DecodeSegmentHeader(EncodeSegmentHeader(h)), Code::kCorruption);
}

TEST(SegmentHeader, ShortInput) {
  const std::vector<uint8_t> enc = EncodeSegmentHeader(SampleSegmentHeader());
  for (size_t n : {0, 1, 8, 40, 47}) {
    Result<SegmentHeader> d = DecodeSegmentHeader(std::span<const uint8_t>(enc).first(n));
    ASSERT_FALSE(d.ok()) << n;
    EXPECT_ERROR(d, Code::kCorruption) << n;
  }
  std::vector<uint8_t> zeros(kSegmentHeaderBytes, 0);
  EXPECT_ERROR(DecodeSegmentHeader(zeros), Code::kCorruption);
}

// ------------------------------------------------------------- record header

TEST(RecordHeader, TensorRoundTrip) {
  const RecordHeader h = TensorHeader();
  const std::vector<uint8_t> enc = EncodeRecordHeader(h, kSeed);
  ASSERT_EQ(enc.size(), kRecordAlignment);
  const uint32_t len = UnpaddedLength(enc);
  EXPECT_GE(len, 64u);
  EXPECT_LT(len, kRecordAlignment);
  for (size_t i = len; i < enc.size(); ++i) ASSERT_EQ(enc[i], 0) << "padding byte " << i;
  Result<uint32_t> peek = PeekRecordHeaderBytes(enc);
  ASSERT_OK(peek);
  EXPECT_EQ(*peek, len);
  Result<RecordHeader> d = DecodeRecordHeader(enc, kSeed);
  ASSERT_OK(d);
  ExpectSameHeader(*d, h);
  EXPECT_FALSE(d->dead());
  // The unpadded bytes alone decode too.
  Result<RecordHeader> u = DecodeRecordHeader(std::span<const uint8_t>(enc).first(len), kSeed);
  ASSERT_OK(u);
  ExpectSameHeader(*u, h);
  // One byte short of the length is truncated.
  EXPECT_ERROR(DecodeRecordHeader(std::span<const uint8_t>(enc).first(len - 1), kSeed), Code::kCorruption);
}

TEST(RecordHeader, TimesRoundTripAndAreTheLast24BytesBeforeTheChecksum) {
  RecordHeader h = TensorHeader();
  h.times = Times{1'700'000'000'000'000'001ull, 1'700'000'000'000'000'002ull, 1'700'000'000'000'000'003ull};
  std::vector<uint8_t> enc = EncodeRecordHeader(h, kSeed);
  Result<RecordHeader> d = DecodeRecordHeader(enc, kSeed);
  ASSERT_OK(d);
  EXPECT_TRUE(d->has_times);
  EXPECT_EQ(d->times, h.times);
  const uint32_t len = UnpaddedLength(enc);
  uint64_t mtime;
  std::memcpy(&mtime, enc.data() + len - 8 - 24, 8);
  EXPECT_EQ(mtime, h.times.mtime_ns);
  // Other times: the same size (a rewrite in place).
  RecordHeader later = h;
  later.times.atime_ns += 1'000'000'000;
  EXPECT_EQ(UnpaddedLength(EncodeRecordHeader(later, kSeed)), len);
  // Times cut short (a header of 8 of their 24 bytes, resealed): corruption naming them.
  std::vector<uint8_t> cut(enc.begin(), enc.begin() + len - 8 - 16);
  cut.resize(cut.size() + 8);
  Reseal(&cut, kSeed);
  Result<RecordHeader> c = DecodeRecordHeader(cut, kSeed);
  EXPECT_ERROR(c, Code::kCorruption);
  EXPECT_NE(c.status().message().find("times"), std::string::npos) << c.status().ToString();
}

TEST(RecordHeader, TensorRoundTripCompressedPartialLiveAndDead) {
  RecordHeader h = TensorHeader(64);
  h.flags = kRecordCompressed;
  h.stored_bytes = 1234;  // compressed: any size
  h.live_tokens = 32;
  h.start_token = 0;
  h.parent_key = ChainKey{};
  Result<RecordHeader> d = DecodeRecordHeader(EncodeRecordHeader(h, kSeed), kSeed);
  ASSERT_OK(d);
  ExpectSameHeader(*d, h);
  h.live_tokens = 0;
  d = DecodeRecordHeader(EncodeRecordHeader(h, kSeed), kSeed);
  ASSERT_OK(d);
  EXPECT_TRUE(d->dead());
}

TEST(RecordHeader, NamespaceRoundTrip) {
  const RecordHeader h = NamespaceHeader();
  const std::vector<uint8_t> enc = EncodeRecordHeader(h, kSeed);
  ASSERT_EQ(enc.size(), kRecordAlignment);
  Result<RecordHeader> d = DecodeRecordHeader(enc, kSeed);
  ASSERT_OK(d);
  ExpectSameHeader(*d, h);
  EXPECT_EQ(d->salt.size(), 5u);
  EXPECT_TRUE(d->tokens.empty());
  RecordHeader dead = h;
  dead.live_tokens = 0;
  d = DecodeRecordHeader(EncodeRecordHeader(dead, kSeed), kSeed);
  ASSERT_OK(d);
  EXPECT_TRUE(d->dead());
}

TEST(RecordHeader, LargeHeaderIsPaddedToWholeBlocks) {
  // 2048 tokens (8 KiB of token ids): the header spans three blocks.
  RecordHeader h = TensorHeader(2048);
  const std::vector<uint8_t> enc = EncodeRecordHeader(h, kSeed);
  EXPECT_EQ(enc.size() % kRecordAlignment, 0u);
  EXPECT_EQ(enc.size(), 3 * kRecordAlignment);
  const uint32_t len = UnpaddedLength(enc);
  EXPECT_GT(len, 2 * kRecordAlignment);
  for (size_t i = len; i < enc.size(); ++i) ASSERT_EQ(enc[i], 0) << "padding byte " << i;
  Result<RecordHeader> d = DecodeRecordHeader(enc, kSeed);
  ASSERT_OK(d);
  ExpectSameHeader(*d, h);
  // The first block alone is truncated.
  EXPECT_ERROR(DecodeRecordHeader(std::span<const uint8_t>(enc).first(kRecordAlignment), kSeed), Code::kCorruption);
  // Headers of every size stay block multiples.
  for (size_t tokens = 16; tokens <= 4096; tokens += 16 * 37) {
    RecordHeader t = TensorHeader(tokens);
    const std::vector<uint8_t> e = EncodeRecordHeader(t, kSeed);
    EXPECT_EQ(e.size() % kRecordAlignment, 0u) << tokens;
    EXPECT_GE(e.size(), UnpaddedLength(e)) << tokens;
    EXPECT_LT(e.size() - UnpaddedLength(e), kRecordAlignment) << tokens;
  }
}

TEST(RecordHeader, PeekRejectsGarbageAndShortInput) {
  const std::vector<uint8_t> enc = EncodeRecordHeader(TensorHeader(), kSeed);
  // Short.
  for (size_t n = 0; n < 16; ++n) {
    Result<uint32_t> p = PeekRecordHeaderBytes(std::span<const uint8_t>(enc).first(n));
    ASSERT_FALSE(p.ok()) << n;
    EXPECT_ERROR(p, Code::kCorruption) << n;
  }
  // Exactly 16 bytes are enough.
  Result<uint32_t> p16 = PeekRecordHeaderBytes(std::span<const uint8_t>(enc).first(16));
  ASSERT_OK(p16);
  EXPECT_EQ(*p16, UnpaddedLength(enc));
  // Zeros, a segment header, random bytes.
  std::vector<uint8_t> zeros(4096, 0);
  EXPECT_ERROR(PeekRecordHeaderBytes(zeros), Code::kCorruption);
  EXPECT_ERROR(PeekRecordHeaderBytes(EncodeSegmentHeader(SampleSegmentHeader())), Code::kCorruption);
  std::mt19937_64 rng(1);
  std::vector<uint8_t> junk(64);
  for (int i = 0; i < 1000; ++i) {
    for (auto& b : junk) b = static_cast<uint8_t>(rng());
    EXPECT_ERROR(PeekRecordHeaderBytes(junk), Code::kCorruption);
  }
  // Right magic, implausible lengths.
  for (uint32_t len : {0u, 1u, 16u, 63u, kMaxRecordHeaderBytes + 1, 0xffffffffu}) {
    std::vector<uint8_t> b = enc;
    std::memcpy(b.data() + 8, &len, 4);
    Result<uint32_t> p = PeekRecordHeaderBytes(b);
    ASSERT_FALSE(p.ok()) << len;
    EXPECT_ERROR(p, Code::kCorruption) << len;
  }
  // Plausible lengths pass the peek (the checksum is DecodeRecordHeader's job).
  for (uint32_t len : {64u, 4096u, kMaxRecordHeaderBytes}) {
    std::vector<uint8_t> b = enc;
    std::memcpy(b.data() + 8, &len, 4);
    Result<uint32_t> p = PeekRecordHeaderBytes(b);
    ASSERT_OK(p) << len;
    EXPECT_EQ(*p, len);
    EXPECT_ERROR(DecodeRecordHeader(b, kSeed), Code::kCorruption) << len;
  }
}

void ExpectEveryFlipIsCorruption(const RecordHeader& h) {
  const std::vector<uint8_t> enc = EncodeRecordHeader(h, kSeed);
  const uint32_t len = UnpaddedLength(enc);
  for (size_t byte = 0; byte < len; ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<uint8_t> bad = enc;
      bad[byte] ^= uint8_t(1u << bit);
      Result<RecordHeader> d = DecodeRecordHeader(bad, kSeed);
      ASSERT_FALSE(d.ok()) << "byte " << byte << " bit " << bit << " of " << len;
      ASSERT_ERROR(d, Code::kCorruption) << "byte " << byte << " bit " << bit << ": "
                                                      << d.status().ToString();
    }
  }
  // The padding is not part of the header: flipping it changes nothing.
  std::vector<uint8_t> padded = enc;
  padded[len] ^= 0x80;
  padded.back() ^= 1;
  Result<RecordHeader> d = DecodeRecordHeader(padded, kSeed);
  ASSERT_OK(d);
  ExpectSameHeader(*d, h);
}

TEST(RecordHeader, EveryFlippedBitOfATensorHeaderIsCorruption) { ExpectEveryFlipIsCorruption(TensorHeader()); }

TEST(RecordHeader, EveryFlippedBitOfANamespaceHeaderIsCorruption) { ExpectEveryFlipIsCorruption(NamespaceHeader()); }

TEST(RecordHeader, WrongSeedIsCorruption) {
  for (const RecordHeader& h : {TensorHeader(), NamespaceHeader()}) {
    const std::vector<uint8_t> enc = EncodeRecordHeader(h, kSeed);
    for (uint64_t seed : {uint64_t{0}, uint64_t{kSeed + 1}, uint64_t{kSeed ^ (uint64_t{1} << 63)}, uint64_t{~kSeed}}) {
      Result<RecordHeader> d = DecodeRecordHeader(enc, seed);
      ASSERT_FALSE(d.ok()) << seed;
      EXPECT_ERROR(d, Code::kCorruption);
      EXPECT_NE(d.status().message().find("checksum"), std::string::npos) << d.status().ToString();
    }
    EXPECT_OK(DecodeRecordHeader(enc, kSeed));
  }
}

void ExpectSemanticCorruption(const RecordHeader& h, const std::string& what) {
  Result<RecordHeader> d = DecodeRecordHeader(EncodeRecordHeader(h, kSeed), kSeed);
  ASSERT_FALSE(d.ok()) << what;
  EXPECT_ERROR(d, Code::kCorruption) << what << ": " << d.status().ToString();
}

TEST(RecordHeader, SemanticChecks) {
  {
    RecordHeader h = TensorHeader(32);
    h.tokens.resize(20);  // not whole blocks of 16
    h.live_tokens = 16;
    h.payload_bytes = h.stored_bytes = 20 * h.layout.BytesPerToken();
    ExpectSemanticCorruption(h, "tokens not whole blocks");
  }
  {
    RecordHeader h = TensorHeader(32);
    h.tokens.clear();
    h.live_tokens = 0;
    h.payload_bytes = h.stored_bytes = 0;
    ExpectSemanticCorruption(h, "no tokens");
  }
  {
    RecordHeader h = TensorHeader(32);
    h.start_token = 8;  // not at a block boundary
    ExpectSemanticCorruption(h, "start_token not a block boundary");
  }
  {
    RecordHeader h = TensorHeader(32);
    h.payload_bytes += 1;
    h.stored_bytes = h.payload_bytes;
    ExpectSemanticCorruption(h, "payload one byte too long");
  }
  {
    RecordHeader h = TensorHeader(32);
    h.payload_bytes = h.stored_bytes = 16 * h.layout.BytesPerToken();
    ExpectSemanticCorruption(h, "payload of half the tokens");
  }
  {
    RecordHeader h = TensorHeader(32);
    h.stored_bytes = h.payload_bytes - 1;  // uncompressed, yet a different size
    ExpectSemanticCorruption(h, "uncompressed stored != payload");
  }
  {
    RecordHeader h = TensorHeader(32);
    h.live_tokens = 48;
    ExpectSemanticCorruption(h, "live_tokens > tokens");
  }
  {
    RecordHeader h = TensorHeader(32);
    h.live_tokens = 17;
    ExpectSemanticCorruption(h, "live_tokens not whole blocks");
  }
  {
    RecordHeader h = TensorHeader(32);
    h.layout.layers = 0;
    h.payload_bytes = h.stored_bytes = 0;
    ExpectSemanticCorruption(h, "invalid layout");
  }
  {
    RecordHeader h = TensorHeader(32);
    h.layout.dtype = static_cast<DType>(99);
    ExpectSemanticCorruption(h, "unknown dtype");
  }
  {
    RecordHeader h = NamespaceHeader();
    h.payload_bytes = h.stored_bytes = 4096;
    ExpectSemanticCorruption(h, "namespace with a payload");
  }
  {
    RecordHeader h = NamespaceHeader();
    h.kind = static_cast<RecordKind>(7);
    ExpectSemanticCorruption(h, "unknown kind");
    h.kind = static_cast<RecordKind>(0);
    ExpectSemanticCorruption(h, "kind 0");
  }
  {
    RecordHeader h = NamespaceHeader();
    h.ns_name = std::string(1025, 'n');  // longer than a name can be
    ExpectSemanticCorruption(h, "ns_name too long");
  }
}

// The bytes of a dense tensor record and a namespace record as written
// before layouts had groups and times (the segments on disks today): they
// decode without times, and encode again to the same bytes (so a header
// rewrite keeps their size).
std::vector<uint8_t> FromHex(const std::string& hex) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

TEST(RecordHeader, DenseRecordsWrittenBeforeGroupsDecodeUnchanged) {
  const std::vector<uint8_t> tensor = FromHex(
      "50545352454330310f0100000100000009000000000000000080000000000000"
      "0080000000000000efcdab89674523012000000000000000050000000a000000"
      "6d69737472616c2d376203000000000000000200000002000000400000000110"
      "0000000900000000000000100000000000000010000000000000000200000000"
      "00000020000000b0bb0d00b1bb0d00b2bb0d00b3bb0d00b4bb0d00b5bb0d00b6"
      "bb0d00b7bb0d00b8bb0d00b9bb0d00babb0d00bbbb0d00bcbb0d00bdbb0d00be"
      "bb0d00bfbb0d00c0bb0d00c1bb0d00c2bb0d00c3bb0d00c4bb0d00c5bb0d00c6"
      "bb0d00c7bb0d00c8bb0d00c9bb0d00cabb0d00cbbb0d00ccbb0d00cdbb0d00ce"
      "bb0d00cfbb0d006b93de3b437d0628");
  ASSERT_EQ(tensor.size(), 271u);
  RecordHeader t = testing::TensorRecord("mistral-7b", 3, 9, 16, 32);
  t.payload_bytes = t.stored_bytes = 32 * t.layout.BytesPerToken();
  t.payload_checksum = 0x0123456789abcdefull;
  t.owner_node = 5;
  t.hits = 2;
  t.has_times = false;
  Result<RecordHeader> d = DecodeRecordHeader(tensor, kSeed);
  ASSERT_OK(d);
  ExpectSameHeader(*d, t);
  EXPECT_EQ(d->layout, SegmentTestLayout());
  EXPECT_FALSE(d->layout.grouped());
  EXPECT_FALSE(d->has_times);
  std::vector<uint8_t> again = EncodeRecordHeader(*d, kSeed);
  again.resize(tensor.size());
  EXPECT_EQ(again, tensor);

  const std::vector<uint8_t> ns = FromHex(
      "5054535245433031790000000200000004000000000000000000000000000000"
      "0000000000000000000000000000000001000000000000000000000008000000"
      "74656e616e742e61040000000000000002000000020000004000000001100000"
      "0000000000e803000064000000e80100009ee46f2c1d762dd1");
  ASSERT_EQ(ns.size(), 121u);
  RecordHeader n = testing::NamespaceRecord("tenant.a", 4);
  n.has_times = false;
  d = DecodeRecordHeader(ns, kSeed);
  ASSERT_OK(d);
  ExpectSameHeader(*d, n);
  EXPECT_EQ(d->layout, SegmentTestLayout());
  EXPECT_FALSE(d->has_times);
  again = EncodeRecordHeader(*d, kSeed);
  again.resize(ns.size());
  EXPECT_EQ(again, ns);
}

// A hybrid model's layout: every kind of group, in 16-token blocks.
Layout GroupedTestLayout() {
  return Layout::FromGroups({LayoutGroup::Full(2, 2, 64, DType::kBF16), LayoutGroup::Window(2, 2, 64, DType::kBF16, 32),
                             LayoutGroup::Latent(3, 40, DType::kFP16), LayoutGroup::State(2, 1000)},
                            16);
}

TEST(RecordHeader, GroupedTensorAndNamespaceRoundTrip) {
  RecordHeader h = TensorHeader(32);
  h.layout = GroupedTestLayout();
  ASSERT_OK(h.layout.Validate());
  h.payload_bytes = h.stored_bytes = 32 * h.layout.BytesPerToken();
  const std::vector<uint8_t> enc = EncodeRecordHeader(h, kSeed);
  // The grouped layout takes a count and 26 bytes per group more than the
  // dense one: 4 + 4 * 26 = 108.
  EXPECT_EQ(UnpaddedLength(enc), UnpaddedLength(EncodeRecordHeader(TensorHeader(32), kSeed)) + 108);
  Result<RecordHeader> d = DecodeRecordHeader(enc, kSeed);
  ASSERT_OK(d);
  ExpectSameHeader(*d, h);
  EXPECT_EQ(d->layout, GroupedTestLayout());
  EXPECT_TRUE(d->layout.grouped());

  RecordHeader n = NamespaceHeader();
  n.layout = GroupedTestLayout();
  d = DecodeRecordHeader(EncodeRecordHeader(n, kSeed), kSeed);
  ASSERT_OK(d);
  ExpectSameHeader(*d, n);

  // A remote record (no payload) of a grouped layout.
  RecordHeader r = TensorHeader(16);
  r.kind = RecordKind::kRemote;
  r.layout = GroupedTestLayout();
  r.payload_bytes = r.stored_bytes = 0;
  d = DecodeRecordHeader(EncodeRecordHeader(r, kSeed), kSeed);
  ASSERT_OK(d);
  ExpectSameHeader(*d, r);
  ExpectEveryFlipIsCorruption(h);
}

TEST(RecordHeader, GroupedSemanticChecks) {
  {
    // The payload is tokens * bytes_per_token of the grouped layout
    // (padding included): the dense size of the same tokens is wrong.
    RecordHeader h = TensorHeader(32);
    h.layout = GroupedTestLayout();
    ExpectSemanticCorruption(h, "payload sized for another layout");
    h.payload_bytes = h.stored_bytes = 32 * h.layout.BytesPerToken() - 64;
    ExpectSemanticCorruption(h, "payload without its padding");
  }
  {
    RecordHeader h = TensorHeader(32);
    h.layout = GroupedTestLayout();
    h.layout.groups[3].state_bytes = 0;
    h.payload_bytes = h.stored_bytes = 32 * h.layout.BytesPerToken();
    ExpectSemanticCorruption(h, "invalid group");
  }
  {
    RecordHeader h = TensorHeader(32);
    h.layout = GroupedTestLayout();
    h.layout.groups.resize(17, LayoutGroup::State(1, 1));
    h.payload_bytes = h.stored_bytes = 32 * h.layout.BytesPerToken();
    ExpectSemanticCorruption(h, "17 groups");
  }
}

TEST(RecordHeader, TrailingOrMissingBytesAreCorruption) {
  const std::vector<uint8_t> enc = EncodeRecordHeader(NamespaceHeader(), kSeed);
  const uint32_t len = UnpaddedLength(enc);
  // A resealed header with four extra bytes before the checksum.
  std::vector<uint8_t> longer(enc.begin(), enc.begin() + len);
  longer.insert(longer.end() - 8, {1, 2, 3, 4});
  Reseal(&longer, kSeed);
  EXPECT_ERROR(DecodeRecordHeader(longer, kSeed), Code::kCorruption);
  // And one with four bytes (the mode) missing.
  std::vector<uint8_t> shorter(enc.begin(), enc.begin() + len);
  shorter.erase(shorter.end() - 12, shorter.end() - 8);
  Reseal(&shorter, kSeed);
  EXPECT_ERROR(DecodeRecordHeader(shorter, kSeed), Code::kCorruption);
  // Resealing the unchanged bytes gives back a valid header (the helper is right).
  std::vector<uint8_t> same(enc.begin(), enc.begin() + len);
  Reseal(&same, kSeed);
  EXPECT_OK(DecodeRecordHeader(same, kSeed));
}

TEST(RecordHeader, HeaderChecksumIsSeededXxh3) {
  const std::vector<uint8_t> enc = EncodeRecordHeader(TensorHeader(), kSeed);
  const uint32_t len = UnpaddedLength(enc);
  uint64_t sum;
  std::memcpy(&sum, enc.data() + len - 8, 8);
  EXPECT_EQ(sum, XXH3_64bits_withSeed(enc.data(), len - 8, kSeed));
  const std::vector<uint8_t> seg = EncodeSegmentHeader(SampleSegmentHeader());
  std::memcpy(&sum, seg.data() + 40, 8);
  EXPECT_EQ(sum, XXH3_64bits(seg.data(), 40)) << "the segment header checksum is unseeded";
}

TEST(PayloadChecksum, ChunkedAndStreamedAgree) {
  std::mt19937_64 rng(3);
  for (uint64_t n : {uint64_t{0}, uint64_t{1}, uint64_t{4095}, kChecksumChunk - 1, kChecksumChunk, kChecksumChunk + 1,
                     3 * kChecksumChunk + 12345}) {
    std::vector<uint8_t> data(n);
    for (auto& b : data) b = static_cast<uint8_t>(rng());
    const uint64_t whole = PayloadChecksum(data, kSeed);
    // By definition: the seeded hash of the chunks' seeded hashes.
    std::vector<uint64_t> sums;
    for (uint64_t off = 0; off < n; off += kChecksumChunk) {
      const uint64_t len = std::min(kChecksumChunk, n - off);
      sums.push_back(ChunkChecksum(std::span<const uint8_t>(data).subspan(off, len), kSeed));
      EXPECT_EQ(sums.back(), XXH3_64bits_withSeed(data.data() + off, len, kSeed));
    }
    EXPECT_EQ(whole, CombineChunkChecksums(sums, kSeed)) << n;
    // Streamed in pieces of any size.
    for (int trial = 0; trial < 3; ++trial) {
      PayloadHasher hasher(kSeed);
      for (uint64_t off = 0; off < n;) {
        const uint64_t piece = std::min<uint64_t>(n - off, trial == 0 ? 4096 : 1 + rng() % (3 * kChecksumChunk / 2));
        hasher.Update(std::span<const uint8_t>(data).subspan(off, piece));
        off += piece;
      }
      EXPECT_EQ(hasher.Digest(), whole) << n << " trial " << trial;
    }
    // Seeded, and every byte counts.
    EXPECT_NE(PayloadChecksum(data, kSeed + 1), whole) << n;
    if (n > 0) {
      data[rng() % n] ^= 0x10;
      EXPECT_NE(PayloadChecksum(data, kSeed), whole) << n;
    }
  }
}

TEST(RecordHeader, FootprintAndPayloadChecksum) {
  EXPECT_EQ(RecordFootprint(4096, 0), 4096u);
  EXPECT_EQ(RecordFootprint(4096, 1), 8192u);
  EXPECT_EQ(RecordFootprint(4096, 4096), 8192u);
  EXPECT_EQ(RecordFootprint(8192, 4097), 16384u);
  std::vector<uint8_t> data(1000, 7);
  EXPECT_EQ(PayloadChecksum(data, 1), PayloadChecksum(data, 1));
  EXPECT_NE(PayloadChecksum(data, 1), PayloadChecksum(data, 2));
  std::vector<uint8_t> other = data;
  other[999] ^= 1;
  EXPECT_NE(PayloadChecksum(data, 1), PayloadChecksum(other, 1));
  EXPECT_EQ(AlignUp(0, 4096), 0u);
  EXPECT_EQ(AlignUp(1, 4096), 4096u);
  EXPECT_EQ(AlignUp(4096, 4096), 4096u);
}

// ------------------------------------------------------------ file names

TEST(SegmentFileName, RoundTrip) {
  EXPECT_EQ(SegmentFileName(42), "seg-000000000000002a.pts");
  EXPECT_EQ(SegmentFileName(0), "seg-0000000000000000.pts");
  EXPECT_EQ(SegmentFileName(std::numeric_limits<uint64_t>::max()), "seg-ffffffffffffffff.pts");
  std::mt19937_64 rng(7);
  for (int i = 0; i < 1000; ++i) {
    const uint64_t id = rng() >> (rng() % 64);
    const std::string name = SegmentFileName(id);
    ASSERT_EQ(name.size(), 24u);
    std::optional<uint64_t> back = ParseSegmentFileName(name);
    ASSERT_TRUE(back.has_value()) << name;
    EXPECT_EQ(*back, id);
  }
  // File names sort like ids.
  EXPECT_LT(SegmentFileName(9), SegmentFileName(10));
  EXPECT_LT(SegmentFileName(0xff), SegmentFileName(0x100));
}

TEST(SegmentFileName, Rejects) {
  for (const std::string& bad : {
           std::string(""),
           std::string("seg-2a.pts"),
           std::string("seg-000000000000002A.pts"),  // uppercase
           std::string("seg-000000000000002g.pts"),
           std::string("seg-00000000000002a.pts"),    // 15 digits
           std::string("seg-0000000000000002a.pts"),  // 17 digits
           std::string("seg-000000000000002a.ptsx"),
           std::string("seg-000000000000002a.tmp"),
           std::string("Seg-000000000000002a.pts"),
           std::string("sag-000000000000002a.pts"),
           std::string("seg_000000000000002a.pts"),
           std::string("seg-000000000000002a_pts"),
           std::string("seg-00000000 000002a.pts"),
           std::string("seg--00000000000002a.pts"),
           std::string("seg-+00000000000002a.pts"),
           std::string("seg-000000000000002a.pts\0", 25),
           std::string("xseg-00000000000002a.pts"),
           std::string("seg-000000000000002a.pt"),
       }) {
    EXPECT_FALSE(ParseSegmentFileName(bad).has_value()) << bad;
  }
}

// ------------------------------------------------------------------ fuzz

TEST(RecordHeaderFuzz, RandomBytesNeverCrashTheDecoder) {
  std::mt19937_64 rng(20240521);
  const std::vector<uint8_t> tensor = EncodeRecordHeader(TensorHeader(), kSeed);
  const std::vector<uint8_t> ns = EncodeRecordHeader(NamespaceHeader(), kSeed);
  int decoded_ok = 0;
  for (int i = 0; i < 30000; ++i) {
    std::vector<uint8_t> b;
    const int mode = static_cast<int>(rng() % 4);
    if (mode == 0) {
      // Pure noise of any size.
      b.resize(rng() % 600);
      for (auto& x : b) x = static_cast<uint8_t>(rng());
    } else if (mode == 1) {
      // Noise with a record magic and a length within the buffer, resealed
      // with the right seed: exercises the field decoder itself.
      b.resize(64 + rng() % 500);
      for (auto& x : b) x = static_cast<uint8_t>(rng());
      std::memcpy(b.data(), &kRecordMagic, 8);
      Reseal(&b, kSeed);
    } else {
      // A real header with a few random byte edits, resealed (or not).
      const std::vector<uint8_t>& src = mode == 2 ? tensor : ns;
      b.assign(src.begin(), src.begin() + UnpaddedLength(src));
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits; ++e) {
        const size_t at = 12 + rng() % (b.size() - 20);
        b[at] = static_cast<uint8_t>(rng());
      }
      if (rng() % 8 == 0) b.resize(rng() % b.size() + 1);
      else if (rng() % 4 != 0) Reseal(&b, kSeed);
    }
    Result<RecordHeader> d = DecodeRecordHeader(b, kSeed);
    if (d.ok()) {
      ++decoded_ok;
      // Whatever decodes must be internally consistent and re-encode to
      // the same bytes.
      const std::vector<uint8_t> again = EncodeRecordHeader(*d, kSeed);
      const uint32_t len = UnpaddedLength(again);
      ASSERT_LE(len, b.size());
      ASSERT_EQ(std::vector<uint8_t>(again.begin(), again.begin() + len),
                std::vector<uint8_t>(b.begin(), b.begin() + len));
      if (d->kind == RecordKind::kTensor) {
        ASSERT_EQ(d->payload_bytes, d->tokens.size() * d->layout.BytesPerToken());
        ASSERT_LE(d->live_tokens, d->tokens.size());
      }
    } else {
      ASSERT_ERROR(d, Code::kCorruption);
    }
    Result<uint32_t> p = PeekRecordHeaderBytes(b);
    if (!p.ok()) {
      ASSERT_ERROR(p, Code::kCorruption);
    }
    Result<SegmentHeader> s = DecodeSegmentHeader(b);
    if (!s.ok()) {
      ASSERT_ERROR(s, Code::kCorruption);
    }
  }
  // Some resealed edits (e.g. of hits or seq) must still decode.
  EXPECT_GT(decoded_ok, 0);
}

}  // namespace
}  // namespace ptstore::storage
