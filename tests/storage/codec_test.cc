#include "storage/ssd_format/codec.h"
#include "tests/testing/status_matchers.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

namespace ptstore::storage {
namespace {

constexpr size_t kHeader = 24;  // magic, element size, raw bytes, chunk bytes, chunks

// bf16 of a float, rounded to nearest even (what a model writes).
uint16_t ToBf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

// KV-like bytes: normally distributed values of `element_size` bytes
// (bf16 for 2, fp32 for 4, doubles for 8, a byte quantisation for 1), with
// `extra` bytes of an incomplete element at the end.
std::vector<uint8_t> KvLike(size_t bytes, uint32_t element_size, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint8_t> v(bytes);
  size_t i = 0;
  for (; i + element_size <= bytes; i += element_size) {
    const float x = normal(rng);
    switch (element_size) {
      case 1: v[i] = static_cast<uint8_t>(static_cast<int8_t>(std::clamp(x * 16.0f, -127.0f, 127.0f))); break;
      case 2: {
        const uint16_t h = ToBf16(x);
        std::memcpy(&v[i], &h, 2);
        break;
      }
      case 4: std::memcpy(&v[i], &x, 4); break;
      case 8: {
        const double d = x;
        std::memcpy(&v[i], &d, 8);
        break;
      }
    }
  }
  for (; i < bytes; ++i) v[i] = static_cast<uint8_t>(rng());
  return v;
}

std::vector<uint8_t> Random(size_t bytes, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(bytes);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

uint32_t ReadU32(const std::vector<uint8_t>& s, size_t at) {
  uint32_t v;
  std::memcpy(&v, s.data() + at, 4);
  return v;
}
void WriteU32(std::vector<uint8_t>* s, size_t at, uint32_t v) { std::memcpy(s->data() + at, &v, 4); }
uint32_t StoredSize(const std::vector<uint8_t>& s, uint32_t chunk) { return ReadU32(s, kHeader + 4 * chunk); }
// Offset of chunk `chunk`'s data in the stream.
size_t ChunkStart(const std::vector<uint8_t>& s, uint32_t chunk) {
  const uint32_t chunks = ReadU32(s, 20);
  size_t pos = kHeader + 4 * size_t{chunks};
  for (uint32_t c = 0; c < chunk; ++c) pos += StoredSize(s, c);
  return pos;
}

std::vector<uint8_t> MustCompress(std::span<const uint8_t> raw, const CodecOptions& o) {
  std::vector<uint8_t> out;
  const Status s = Compress(raw, o, &out);
  EXPECT_OK(s);
  return out;
}

// Decompresses into a buffer with guard bytes on both sides and checks that
// the guards are untouched, whatever the outcome.
Status GuardedDecompress(std::span<const uint8_t> compressed, size_t out_bytes, uint32_t threads,
                         std::vector<uint8_t>* result) {
  constexpr size_t kGuard = 64;
  std::vector<uint8_t> buf(out_bytes + 2 * kGuard, 0xa5);
  Status s = Decompress(compressed, std::span<uint8_t>(buf.data() + kGuard, out_bytes), threads);
  for (size_t i = 0; i < kGuard; ++i) {
    EXPECT_EQ(buf[i], 0xa5) << "write before the output at -" << (kGuard - i);
    EXPECT_EQ(buf[kGuard + out_bytes + i], 0xa5) << "write after the output at +" << i;
  }
  if (result) result->assign(buf.begin() + kGuard, buf.begin() + kGuard + out_bytes);
  return s;
}

// ------------------------------------------------------------ shuffling

std::vector<uint8_t> NaiveShuffle(const std::vector<uint8_t>& in, uint32_t es) {
  std::vector<uint8_t> out(in.size());
  const size_t n = in.size() / es;
  for (size_t i = 0; i < n; ++i)
    for (size_t b = 0; b < es; ++b) out[b * n + i] = in[i * es + b];
  for (size_t i = n * es; i < in.size(); ++i) out[i] = in[i];
  return out;
}

TEST(CodecShuffleTest, MatchesTheDefinitionAndUnshuffleInvertsIt) {
  // Sizes around the 64-element blocks of the vector kernels, with tails of
  // every length an element can leave.
  for (uint32_t es : {1u, 2u, 4u, 8u}) {
    for (size_t elements : {0, 1, 3, 63, 64, 65, 127, 128, 1000, 4099}) {
      for (size_t tail = 0; tail < es; ++tail) {
        const size_t bytes = elements * es + tail;
        const std::vector<uint8_t> in = Random(bytes, static_cast<uint32_t>(bytes * 31 + es));
        std::vector<uint8_t> shuffled(bytes + 1, 0xee), back(bytes + 1, 0xee);
        ByteShuffle(in, es, shuffled.data());
        EXPECT_EQ(shuffled[bytes], 0xee) << "shuffle wrote past the end";
        shuffled.resize(bytes);
        ASSERT_EQ(shuffled, NaiveShuffle(in, es)) << "es=" << es << " bytes=" << bytes;
        ByteUnshuffle(shuffled, es, back.data());
        EXPECT_EQ(back[bytes], 0xee) << "unshuffle wrote past the end";
        back.resize(bytes);
        ASSERT_EQ(back, in) << "es=" << es << " bytes=" << bytes;
      }
    }
  }
}

TEST(CodecShuffleTest, GroupsHighBytesOfBf16) {
  // 1.0 and -2.0 in bf16: 0x3f80, 0xc000 (little-endian: low byte first).
  const std::vector<uint8_t> in = {0x80, 0x3f, 0x00, 0xc0, 0x80, 0x3f};
  std::vector<uint8_t> out(in.size());
  ByteShuffle(in, 2, out.data());
  EXPECT_EQ(out, (std::vector<uint8_t>{0x80, 0x00, 0x80, 0x3f, 0xc0, 0x3f}));
}

// ----------------------------------------------------------- round trips

// element size, payload bytes, threads; chunks of 4 KiB.
class CodecRoundTripTest : public ::testing::TestWithParam<std::tuple<uint32_t, size_t, uint32_t>> {};

TEST_P(CodecRoundTripTest, KvLikeAndRandomDataComeBackExactly) {
  const auto [es, bytes, threads] = GetParam();
  CodecOptions o;
  o.element_size = es;
  o.chunk_bytes = 4096;
  o.threads = threads;
  for (bool random : {false, true}) {
    const std::vector<uint8_t> raw = random ? Random(bytes, 7) : KvLike(bytes, es, 11);
    const std::vector<uint8_t> c = MustCompress(raw, o);
    const uint32_t chunks = static_cast<uint32_t>((bytes + o.chunk_bytes - 1) / o.chunk_bytes);
    ASSERT_GE(c.size(), kHeader + 4 * chunks);
    EXPECT_EQ(ReadU32(c, 20), chunks);
    EXPECT_LE(c.size(), kHeader + 4 * chunks + bytes) << "never larger than raw + header + table";

    Result<uint64_t> size = CompressedRawSize(c);
    ASSERT_OK(size);
    EXPECT_EQ(*size, bytes);
    for (uint32_t dthreads : {1u, threads}) {
      std::vector<uint8_t> back;
      const Status s = GuardedDecompress(c, bytes, dthreads, &back);
      ASSERT_OK(s);
      ASSERT_TRUE(back == raw) << (random ? "random" : "kv-like") << " es=" << es << " bytes=" << bytes;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Sizes, CodecRoundTripTest,
    ::testing::Combine(::testing::Values(1u, 2u, 4u, 8u),
                       // empty, one byte, odd, exactly one chunk, one chunk and a byte, many chunks
                       // (the last one partial and not a whole element for 2, 4 and 8)
                       ::testing::Values(size_t{0}, size_t{1}, size_t{1001}, size_t{4096}, size_t{4097},
                                         size_t{40 * 4096 + 333}),
                       ::testing::Values(1u, 3u)),
    [](const auto& info) {
      return "es" + std::to_string(std::get<0>(info.param)) + "_bytes" + std::to_string(std::get<1>(info.param)) +
             "_threads" + std::to_string(std::get<2>(info.param));
    });

TEST(CodecTest, DefaultOptionsManyChunksMultiThreaded) {
  const std::vector<uint8_t> raw = KvLike((5u << 20) + 6, 2, 3);  // 6 chunks of 1 MiB, the last small
  for (uint32_t threads : {1u, 2u, 4u, 16u}) {
    CodecOptions o;
    o.threads = threads;
    const std::vector<uint8_t> c = MustCompress(raw, o);
    EXPECT_LT(c.size(), raw.size() * 9 / 10) << "bf16 normal data should shrink by more than 10%";
    std::vector<uint8_t> back;
    const Status s = GuardedDecompress(c, raw.size(), threads, &back);
    ASSERT_OK(s);
    ASSERT_TRUE(back == raw) << "threads=" << threads;
  }
}

TEST(CodecTest, OutputDoesNotDependOnThreads) {
  // The format is a function of the data and options only, so a payload
  // compressed by any number of threads reads back on any other.
  const std::vector<uint8_t> raw = KvLike(37 * 4096 + 10, 2, 5);
  CodecOptions o;
  o.chunk_bytes = 4096;
  const std::vector<uint8_t> one = MustCompress(raw, o);
  for (uint32_t threads : {2u, 3u, 8u, 1000u}) {
    o.threads = threads;
    EXPECT_TRUE(MustCompress(raw, o) == one) << "threads=" << threads;
  }
}

TEST(CodecTest, IncompressibleChunksAreStoredRaw) {
  const std::vector<uint8_t> raw = Random(10 * 4096 + 100, 9);
  CodecOptions o;
  o.chunk_bytes = 4096;
  o.threads = 2;
  const std::vector<uint8_t> c = MustCompress(raw, o);
  EXPECT_EQ(c.size(), kHeader + 4 * 11 + raw.size());
  for (uint32_t i = 0; i < 11; ++i) {
    EXPECT_EQ(StoredSize(c, i), i < 10 ? 4096u : 100u) << "chunk " << i;
  }
  // Stored in their original order, not shuffled.
  EXPECT_EQ(std::memcmp(c.data() + kHeader + 44, raw.data(), raw.size()), 0);
}

TEST(CodecTest, MixedRawAndCompressedChunks) {
  std::vector<uint8_t> raw = KvLike(8 * 4096, 2, 1);
  const std::vector<uint8_t> noise = Random(4096, 2);
  std::copy(noise.begin(), noise.end(), raw.begin() + 3 * 4096);  // chunk 3 is noise
  CodecOptions o;
  o.chunk_bytes = 4096;
  o.threads = 3;
  const std::vector<uint8_t> c = MustCompress(raw, o);
  EXPECT_EQ(StoredSize(c, 3), 4096u);
  EXPECT_LT(StoredSize(c, 2), 4096u);
  std::vector<uint8_t> back;
  ASSERT_OK(GuardedDecompress(c, raw.size(), 2, &back));
  EXPECT_TRUE(back == raw);
}

TEST(CodecTest, ZerosShrinkToAlmostNothing) {
  const std::vector<uint8_t> raw(4u << 20, 0);
  const std::vector<uint8_t> c = MustCompress(raw, CodecOptions{});
  EXPECT_LT(c.size(), 4096u);
  std::vector<uint8_t> back;
  ASSERT_OK(GuardedDecompress(c, raw.size(), 1, &back));
  EXPECT_TRUE(back == raw);
}

TEST(CodecTest, ShuffleHelpsBf16) {
  const std::vector<uint8_t> raw = KvLike(1u << 20, 2, 4);
  CodecOptions o;
  o.element_size = 1;
  const size_t plain = MustCompress(raw, o).size();
  o.element_size = 2;
  const size_t shuffled = MustCompress(raw, o).size();
  EXPECT_LT(shuffled, plain) << "the shuffle should help zstd on bf16";
}

TEST(CodecTest, CompressReplacesTheOutput) {
  std::vector<uint8_t> out(1000, 0x77);
  const std::vector<uint8_t> raw = KvLike(100, 2, 6);
  ASSERT_OK(Compress(raw, CodecOptions{}, &out));
  EXPECT_EQ(out, MustCompress(raw, CodecOptions{}));
}

TEST(CodecTest, InvalidOptionsAreInvalidArgument) {
  const std::vector<uint8_t> raw(100, 1);
  std::vector<uint8_t> out;
  auto compress = [&](CodecOptions o) { return Compress(raw, o, &out).code(); };
  CodecOptions o;
  o.element_size = 3;
  EXPECT_EQ(compress(o), Code::kInvalidArgument);
  o.element_size = 0;
  EXPECT_EQ(compress(o), Code::kInvalidArgument);
  o = {};
  o.chunk_bytes = 0;
  EXPECT_EQ(compress(o), Code::kInvalidArgument);
  o.chunk_bytes = 4097;  // not whole bf16 elements
  EXPECT_EQ(compress(o), Code::kInvalidArgument);
  o = {};
  o.level = 1000;
  EXPECT_EQ(compress(o), Code::kInvalidArgument);
  o = {};
  o.threads = 0;  // treated as one thread
  EXPECT_EQ(compress(o), Code::kOk);
}

TEST(CodecTest, WrongOutputSizeIsAnError) {
  const std::vector<uint8_t> raw = KvLike(10000, 2, 8);
  const std::vector<uint8_t> c = MustCompress(raw, CodecOptions{});
  for (size_t size : {size_t{0}, size_t{9999}, size_t{10001}, size_t{20000}}) {
    const Status s = GuardedDecompress(c, size, 1, nullptr);
    EXPECT_ERROR(s, Code::kInvalidArgument) << size << ": " << s.ToString();
    EXPECT_NE(s.message().find("10000"), std::string::npos) << s.message();
  }
}

TEST(CodecTest, TrailingBytesAfterTheLastChunkAreIgnored) {
  // A reader may pass a buffer padded to the 4 KiB of an O_DIRECT read.
  const std::vector<uint8_t> raw = KvLike(10000, 2, 10);
  std::vector<uint8_t> c = MustCompress(raw, CodecOptions{});
  c.resize(8192, 0);
  std::vector<uint8_t> back;
  ASSERT_OK(GuardedDecompress(c, raw.size(), 1, &back));
  EXPECT_TRUE(back == raw);
}

// ------------------------------------------------------------ corruption

// A stream of 6 chunks of 4 KiB, the middle one raw, the last partial.
struct CorruptFixture {
  std::vector<uint8_t> raw, good;
  CorruptFixture() {
    raw = KvLike(5 * 4096 + 1001, 2, 12);
    const std::vector<uint8_t> noise = Random(4096, 13);
    std::copy(noise.begin(), noise.end(), raw.begin() + 2 * 4096);
    CodecOptions o;
    o.chunk_bytes = 4096;
    good = MustCompress(raw, o);
  }
  // Decompress of `bad` into a raw-sized buffer.
  Status Try(const std::vector<uint8_t>& bad, uint32_t threads = 1) const {
    return GuardedDecompress(bad, raw.size(), threads, nullptr);
  }
};

void ExpectCorruption(const Status& s, const std::string& needle) {
  EXPECT_ERROR(s, Code::kCorruption);
  EXPECT_NE(s.message().find(needle), std::string::npos) << "message \"" << s.message() << "\" lacks \"" << needle
                                                         << "\"";
}

TEST(CodecCorruptionTest, FixtureIsSane) {
  CorruptFixture f;
  EXPECT_EQ(ReadU32(f.good, 20), 6u);
  EXPECT_EQ(StoredSize(f.good, 2), 4096u);
  EXPECT_LT(StoredSize(f.good, 0), 4096u);
  EXPECT_OK(f.Try(f.good));
}

TEST(CodecCorruptionTest, BadMagic) {
  CorruptFixture f;
  std::vector<uint8_t> bad = f.good;
  bad[0] = 'X';
  ExpectCorruption(f.Try(bad), "magic");
  EXPECT_ERROR(CompressedRawSize(bad), Code::kCorruption);
}

TEST(CodecCorruptionTest, TruncatedAtEveryLength) {
  CorruptFixture f;
  for (size_t len = 0; len < f.good.size(); ++len) {
    std::vector<uint8_t> bad(f.good.begin(), f.good.begin() + len);
    const Status s = f.Try(bad);
    ASSERT_ERROR(s, Code::kCorruption) << "length " << len << ": " << s.ToString();
    if (len >= kHeader + 24) {
      EXPECT_NE(s.message().find("truncated"), std::string::npos) << s.message();
    }
  }
  EXPECT_ERROR(CompressedRawSize(std::span<const uint8_t>()), Code::kCorruption);
}

TEST(CodecCorruptionTest, FlippedByteInAChunk) {
  CorruptFixture f;
  // The first byte of chunk 1's zstd frame: its magic number.
  std::vector<uint8_t> bad = f.good;
  bad[ChunkStart(bad, 1)] ^= 0x40;
  ExpectCorruption(f.Try(bad), "chunk 1 of 6: zstd");
  ExpectCorruption(f.Try(bad, 3), "chunk 1 of 6: zstd");
  // The frame header's content size field (after the 4-byte magic and the
  // descriptor byte): zstd checks the decoded size against it.
  bad = f.good;
  const size_t start = ChunkStart(bad, 4);
  bool detected = false;
  for (size_t i = 4; i < 12 && !detected; ++i) {
    std::vector<uint8_t> b = bad;
    b[start + i] ^= 0x01;
    detected = f.Try(b).code() == Code::kCorruption;
  }
  EXPECT_TRUE(detected) << "no flip in chunk 4's frame header was detected";
}

TEST(CodecCorruptionTest, LyingSizes) {
  CorruptFixture f;
  std::vector<uint8_t> bad = f.good;
  // One byte moved from chunk 1 to chunk 0: the sum still matches.
  WriteU32(&bad, kHeader + 0, StoredSize(f.good, 0) + 1);
  WriteU32(&bad, kHeader + 4, StoredSize(f.good, 1) - 1);
  ExpectCorruption(f.Try(bad), "chunk 0 of 6");
  // More stored bytes than the raw chunk has.
  bad = f.good;
  WriteU32(&bad, kHeader + 4, 4097);
  ExpectCorruption(f.Try(bad), "chunk 1 of 6 claims 4097 stored bytes for 4096 raw bytes");
  // The last, partial chunk (1001 raw bytes).
  bad = f.good;
  WriteU32(&bad, kHeader + 20, 1002);
  ExpectCorruption(f.Try(bad), "chunk 5 of 6 claims 1002");
  // Zero.
  bad = f.good;
  WriteU32(&bad, kHeader + 8, 0);
  ExpectCorruption(f.Try(bad), "claims 0 stored bytes");
  // Sizes that run past the input.
  bad = f.good;
  WriteU32(&bad, kHeader + 0, 4095);
  ExpectCorruption(f.Try(bad), "truncated");
}

TEST(CodecCorruptionTest, HeaderFields) {
  CorruptFixture f;
  std::vector<uint8_t> bad = f.good;
  WriteU32(&bad, 20, 7);  // chunks
  ExpectCorruption(f.Try(bad), "7 chunks, but 21481 raw bytes in 4096-byte chunks make 6");
  bad = f.good;
  WriteU32(&bad, 20, 0xffffffff);
  ExpectCorruption(f.Try(bad), "chunks");
  bad = f.good;
  WriteU32(&bad, 4, 3);  // element size
  ExpectCorruption(f.Try(bad), "element size 3");
  bad = f.good;
  WriteU32(&bad, 16, 0);  // chunk bytes
  ExpectCorruption(f.Try(bad), "chunk size 0");
  bad = f.good;
  WriteU32(&bad, 16, 4095);
  ExpectCorruption(f.Try(bad), "chunk size 4095");
  bad = f.good;
  bad[15] = 0x80;  // raw bytes: 2^63 + ...
  EXPECT_ERROR(CompressedRawSize(bad), Code::kCorruption);
  EXPECT_ERROR(f.Try(bad), Code::kCorruption);
  // Raw size and chunk count changed together, consistently: the size
  // table now runs into the chunk data, whose bytes make no valid sizes.
  bad = f.good;
  WriteU32(&bad, 8, 100 * 4096);
  WriteU32(&bad, 20, 100);
  EXPECT_ERROR(GuardedDecompress(bad, 100 * 4096, 1, nullptr), Code::kCorruption);
}

TEST(CodecCorruptionTest, EveryByteFlippedNeverCrashes) {
  // One bit flipped at every position, then random bytes at random
  // positions. Decoding must stay within the output (guards) and end in OK
  // or Corruption. The reader sizes its buffer from the (corrupt) header,
  // as one without a record header would.
  CorruptFixture f;
  const size_t table_end = kHeader + 4 * 6;
  std::mt19937 rng(2024);
  size_t corrupt = 0, decoded = 0;
  auto one = [&](const std::vector<uint8_t>& bad, uint32_t threads) -> Code {
    Result<uint64_t> size = CompressedRawSize(bad);
    if (!size.ok()) {
      EXPECT_ERROR(size, Code::kCorruption);
      ++corrupt;
      return size.status().code();
    }
    // A consistent header keeps the chunk count, so the size moves by less
    // than a chunk: the buffer stays small.
    EXPECT_LT(*size, f.raw.size() + 4096);
    const Status s = GuardedDecompress(bad, *size, threads, nullptr);
    EXPECT_TRUE(s.ok() || s.code() == Code::kCorruption) << s.ToString();
    (s.ok() ? decoded : corrupt)++;
    return s.code();
  };
  for (size_t i = 0; i < f.good.size(); ++i) {
    std::vector<uint8_t> bad = f.good;
    bad[i] ^= static_cast<uint8_t>(1u << (i % 8));
    const Code code = one(bad, 1 + i % 3);
    // The header and the size table are fully checked: a single bit flipped
    // there always shows.
    if (i < table_end) {
      EXPECT_EQ(code, Code::kCorruption) << "bit flip at byte " << i << " not detected";
    }
    if (HasFailure()) return;
  }
  for (int k = 0; k < 3000; ++k) {
    std::vector<uint8_t> bad = f.good;
    const size_t at = rng() % bad.size();
    uint8_t v;
    do v = static_cast<uint8_t>(rng()); while (v == bad[at]);
    bad[at] = v;
    one(bad, 1 + k % 2);
    if (HasFailure()) return;
  }
  // Without a content checksum in the frames, most flips inside entropy-
  // coded data decode to wrong bytes, as do all flips in a raw chunk: the
  // record checksum above the codec is what catches those.
  std::printf("%zu of %zu corruptions detected by the codec itself, %zu decoded to wrong bytes\n", corrupt,
              corrupt + decoded, decoded);
}

}  // namespace
}  // namespace ptstore::storage

// ---- in place: the stream at the end of its own output buffer ------------

namespace ptstore::storage {
namespace {

std::vector<uint8_t> InPlace(std::span<const uint8_t> compressed, uint64_t raw_bytes, uint32_t threads,
                             Status* status) {
  // The SSD tier only stores a compressed payload smaller than its raw size.
  if (compressed.size() > raw_bytes) {
    std::vector<uint8_t> buf(raw_bytes);
    *status = DecompressInPlace(buf, compressed.size(), threads);
    EXPECT_EQ(status->code(), Code::kInvalidArgument);
    return {};
  }
  std::vector<uint8_t> buf(raw_bytes, 0xee);
  std::memcpy(buf.data() + raw_bytes - compressed.size(), compressed.data(), compressed.size());
  *status = DecompressInPlace(buf, compressed.size(), threads);
  return buf;
}

TEST(CodecInPlaceTest, MatchesDecompressForEveryShapeAndThreadCount) {
  struct Case {
    size_t bytes;
    uint32_t es;
    bool random_half;  // half the chunks incompressible: stored raw
  };
  for (const Case& k : {Case{0, 2, false}, Case{1, 1, false}, Case{1001, 2, false}, Case{(1u << 16) * 7 + 3, 2, true},
                        Case{(1u << 16) * 9, 4, false}, Case{(1u << 16) * 9, 2, true}}) {
    std::vector<uint8_t> raw = KvLike(k.bytes, k.es, 7);
    if (k.random_half) {
      std::vector<uint8_t> r = Random(k.bytes, 9);
      for (size_t c = 0; c < k.bytes; c += 2 << 16) {
        std::memcpy(raw.data() + c, r.data() + c, std::min<size_t>(1 << 16, k.bytes - c));
      }
    }
    CodecOptions o;
    o.element_size = k.es;
    o.chunk_bytes = 1 << 16;
    std::vector<uint8_t> z = MustCompress(raw, o);
    for (uint32_t threads : {1u, 2u, 3u}) {
      SCOPED_TRACE(::testing::Message() << k.bytes << " bytes, element " << k.es << ", " << threads << " threads");
      Status s;
      std::vector<uint8_t> out = InPlace(z, raw.size(), threads, &s);
      if (z.size() > raw.size()) continue;  // checked by InPlace: it does not fit
      ASSERT_OK(s);
      EXPECT_EQ(out, raw);
    }
  }
}

TEST(CodecInPlaceTest, CorruptOrMisplacedStreamsAreErrors) {
  std::vector<uint8_t> raw = KvLike(1 << 20, 2, 3);
  CodecOptions o;
  o.chunk_bytes = 1 << 16;
  std::vector<uint8_t> z = MustCompress(raw, o);
  Status s;
  // A buffer of another size than the payload's.
  std::vector<uint8_t> small(z.size() + 10);
  std::memcpy(small.data() + 10, z.data(), z.size());
  EXPECT_ERROR(DecompressInPlace(small, z.size()), Code::kInvalidArgument);
  // A stream longer than its buffer.
  EXPECT_ERROR(DecompressInPlace(std::span<uint8_t>(small.data(), 5), z.size()), Code::kInvalidArgument);
  // Flipped bytes in the chunk data: an error or (zstd without frame
  // checksums) other bytes, never a crash or an overrun. The record
  // checksum catches the rest before decompression.
  for (size_t i = 40; i < z.size(); i += z.size() / 50) {
    std::vector<uint8_t> bad = z;
    bad[i] ^= 0x5a;
    for (uint32_t threads : {1u, 2u}) InPlace(bad, raw.size(), threads, &s);
  }
  // A lying chunk size in the table.
  std::vector<uint8_t> bad = z;
  const uint32_t huge = 1u << 30;
  std::memcpy(bad.data() + 24, &huge, 4);
  InPlace(bad, raw.size(), 2, &s);
  EXPECT_ERROR(s, Code::kCorruption);
}

}  // namespace
}  // namespace ptstore::storage
