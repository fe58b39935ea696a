// Tests of the frame header and the field codec (core/wire.h), and of the
// layout encoding (core/wire_types.h).
#include "core/wire.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <array>
#include <limits>
#include <string>
#include <vector>

#include "core/wire_types.h"
#include "ptstore/layout.h"
#include "tests/testing/status_matchers.h"

namespace ptstore::core {
namespace {

using Header = std::array<uint8_t, kFrameHeaderBytes>;

Header MakeHeader(uint16_t type, uint64_t request_id, std::span<const uint8_t> body) {
  Header h{};
  EncodeFrameHeader(type, request_id, body, h.data());
  return h;
}

template <typename T>
void Poke(Header& h, size_t offset, T value) {
  std::memcpy(h.data() + offset, &value, sizeof(T));
}

// Rewrites the checksum so that only the field under test is wrong.
void Reseal(Header& h, std::span<const uint8_t> body) {
  std::vector<uint8_t> all(h.begin(), h.begin() + 20);
  all.insert(all.end(), body.begin(), body.end());
  Poke<uint32_t>(h, 20, XXH32(all.data(), all.size(), 0));
}

void ExpectProtocol(const Status& s, const std::string& needle) {
  EXPECT_ERROR(s, Code::kProtocol);
  EXPECT_NE(s.message().find(needle), std::string::npos)
      << "message '" << s.message() << "' does not mention '" << needle << "'";
}

TEST(FrameHeaderTest, ByteLayoutIsLittleEndian) {
  std::vector<uint8_t> body = {1, 2, 3};
  Header h = MakeHeader(0x0a0b, 0x1122334455667788ULL, body);
  const uint8_t want[20] = {'P', 'T', 'S', '1',                                  // magic
                            0x01, 0x00,                                          // version 1
                            0x0b, 0x0a,                                          // type
                            0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,      // request id
                            0x03, 0x00, 0x00, 0x00};                             // body_len
  EXPECT_EQ(0, std::memcmp(h.data(), want, 20));
  // Checksum: XXH32 (seed 0) of the first 20 header bytes, then the body.
  std::vector<uint8_t> all(h.begin(), h.begin() + 20);
  all.insert(all.end(), body.begin(), body.end());
  uint32_t sum = XXH32(all.data(), all.size(), 0);
  uint32_t got;
  std::memcpy(&got, h.data() + 20, 4);
  EXPECT_EQ(got, sum);
}

TEST(FrameHeaderTest, RoundTrip) {
  for (uint16_t type : {uint16_t{0}, uint16_t{1}, uint16_t{29}, uint16_t{0xffff}}) {
    for (uint64_t rid : {uint64_t{0}, uint64_t{1}, ~uint64_t{0}, uint64_t{0x8000000000000001ULL}}) {
      std::vector<uint8_t> body(type % 7 * 13, static_cast<uint8_t>(rid));
      Header h = MakeHeader(type, rid, body);
      Result<FrameHeader> r = DecodeFrameHeader(h);
      ASSERT_OK(r);
      EXPECT_EQ(r->version, kWireVersion);
      EXPECT_EQ(r->type, type);
      EXPECT_EQ(r->request_id, rid);
      EXPECT_EQ(r->body_len, body.size());
      EXPECT_OK(VerifyFrameChecksum(h.data(), body));
    }
  }
}

TEST(FrameHeaderTest, DecodeIgnoresBytesAfterTheHeader) {
  std::vector<uint8_t> body = {9, 9};
  Header h = MakeHeader(5, 6, body);
  std::vector<uint8_t> frame(h.begin(), h.end());
  frame.insert(frame.end(), body.begin(), body.end());
  Result<FrameHeader> r = DecodeFrameHeader(frame);
  ASSERT_OK(r);
  EXPECT_EQ(r->body_len, 2u);
}

TEST(FrameHeaderTest, TruncatedHeaderRejected) {
  Header h = MakeHeader(2, 3, {});
  for (size_t n = 0; n < kFrameHeaderBytes; ++n) {
    Result<FrameHeader> r = DecodeFrameHeader(std::span(h.data(), n));
    ASSERT_FALSE(r.ok()) << n;
    ExpectProtocol(r.status(), "truncated frame header");
  }
}

TEST(FrameHeaderTest, BadMagicRejected) {
  for (uint32_t magic : {0u, 0x32535450u, 0x50545331u /* big-endian "PTS1" */, 0xffffffffu}) {
    Header h = MakeHeader(2, 3, {});
    Poke<uint32_t>(h, 0, magic);
    Reseal(h, {});
    Result<FrameHeader> r = DecodeFrameHeader(h);
    ASSERT_FALSE(r.ok());
    ExpectProtocol(r.status(), "magic");
  }
}

TEST(FrameHeaderTest, OtherVersionRejected) {
  for (uint16_t v : {uint16_t{0}, uint16_t{2}, uint16_t{0x0100}, uint16_t{0xffff}}) {
    Header h = MakeHeader(2, 3, {});
    Poke<uint16_t>(h, 4, v);
    Reseal(h, {});
    Result<FrameHeader> r = DecodeFrameHeader(h);
    ASSERT_FALSE(r.ok());
    ExpectProtocol(r.status(), "wire version " + std::to_string(v));
  }
}

TEST(FrameHeaderTest, OversizedBodyRejected) {
  Header h = MakeHeader(2, 3, {});
  Poke<uint32_t>(h, 16, kMaxBodyBytes);
  EXPECT_OK(DecodeFrameHeader(h));  // the limit itself is allowed
  for (uint32_t len : {kMaxBodyBytes + 1, 0x80000000u, 0xffffffffu}) {
    Poke<uint32_t>(h, 16, len);
    Result<FrameHeader> r = DecodeFrameHeader(h);
    ASSERT_FALSE(r.ok()) << len;
    ExpectProtocol(r.status(), "exceeds the limit");
  }
}

TEST(FrameHeaderTest, ChecksumCoversHeaderAndBody) {
  std::vector<uint8_t> body = {10, 20, 30, 40, 50};
  const Header good = MakeHeader(12, 77, body);
  ASSERT_OK(VerifyFrameChecksum(good.data(), body));

  // Any flipped bit in the first 20 header bytes, the checksum, or the body.
  for (size_t byte = 0; byte < kFrameHeaderBytes; ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      Header h = good;
      h[byte] ^= static_cast<uint8_t>(1u << bit);
      ExpectProtocol(VerifyFrameChecksum(h.data(), body), "checksum mismatch");
    }
  }
  for (size_t byte = 0; byte < body.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      auto b = body;
      b[byte] ^= static_cast<uint8_t>(1u << bit);
      ExpectProtocol(VerifyFrameChecksum(good.data(), b), "checksum mismatch");
    }
  }
  // A truncated or extended body.
  ExpectProtocol(VerifyFrameChecksum(good.data(), std::span(body).first(4)), "checksum mismatch");
  auto longer = body;
  longer.push_back(0);
  ExpectProtocol(VerifyFrameChecksum(good.data(), longer), "checksum mismatch");
}

TEST(FrameHeaderTest, EmptyBody) {
  Header h = MakeHeader(21, 1, {});
  ASSERT_OK(DecodeFrameHeader(h));
  EXPECT_EQ(DecodeFrameHeader(h)->body_len, 0u);
  EXPECT_OK(VerifyFrameChecksum(h.data(), {}));
  std::vector<uint8_t> one = {0};
  EXPECT_FALSE(VerifyFrameChecksum(h.data(), one).ok());
}

TEST(CodecTest, FixedWidthFieldsAreLittleEndian) {
  Encoder e;
  e.PutU8(0xab);
  e.PutU16(0x0102);
  e.PutU32(0x03040506);
  e.PutU64(0x0708090a0b0c0d0eULL);
  e.PutBool(true);
  e.PutBool(false);
  std::vector<uint8_t> want = {0xab, 0x02, 0x01, 0x06, 0x05, 0x04, 0x03, 0x0e, 0x0d,
                               0x0c, 0x0b, 0x0a, 0x09, 0x08, 0x07, 0x01, 0x00};
  EXPECT_EQ(e.buffer(), want);
}

TEST(CodecTest, StringAndArrayAreCountPrefixed) {
  Encoder e;
  e.PutString("hey");
  std::vector<uint32_t> arr = {1, 0x01020304};
  e.PutU32Array(arr);
  std::vector<uint8_t> want = {3, 0, 0, 0, 'h', 'e', 'y', 2, 0, 0, 0, 1, 0, 0, 0, 4, 3, 2, 1};
  EXPECT_EQ(e.Take(), want);
}

TEST(CodecTest, RoundTripAllFieldKinds) {
  std::string bin("a\0b\xff", 4);
  std::vector<uint32_t> arr = {0, 1, 0xffffffffu, 42};
  Encoder e;
  e.PutU8(0xff);
  e.PutU16(0xfffe);
  e.PutU32(0xdeadbeef);
  e.PutU64(~uint64_t{0} - 1);
  e.PutBool(true);
  e.PutString(bin);
  e.PutString("");
  e.PutU32Array(arr);
  e.PutU32Array({});
  std::vector<uint8_t> buf = e.Take();

  Decoder d(buf);
  uint8_t u8;
  uint16_t u16;
  uint32_t u32;
  uint64_t u64;
  bool b;
  std::string s1, s2 = "not empty";
  std::vector<uint32_t> a1, a2 = {9};
  ASSERT_OK(d.GetU8("u8", &u8));
  ASSERT_OK(d.GetU16("u16", &u16));
  ASSERT_OK(d.GetU32("u32", &u32));
  ASSERT_OK(d.GetU64("u64", &u64));
  ASSERT_OK(d.GetBool("b", &b));
  ASSERT_OK(d.GetString("s1", &s1));
  ASSERT_OK(d.GetString("s2", &s2));
  ASSERT_OK(d.GetU32Array("a1", &a1));
  ASSERT_OK(d.GetU32Array("a2", &a2));
  EXPECT_OK(d.Finish("Test"));
  EXPECT_EQ(d.remaining(), 0u);
  EXPECT_EQ(u8, 0xff);
  EXPECT_EQ(u16, 0xfffe);
  EXPECT_EQ(u32, 0xdeadbeefu);
  EXPECT_EQ(u64, ~uint64_t{0} - 1);
  EXPECT_TRUE(b);
  EXPECT_EQ(s1, bin);
  EXPECT_EQ(s2, "");
  EXPECT_EQ(a1, arr);
  EXPECT_TRUE(a2.empty());
}

TEST(CodecTest, TruncatedFixedFieldNamesTheField) {
  std::vector<uint8_t> buf = {1, 2, 3};
  Decoder d(buf);
  uint32_t v;
  Status s = d.GetU32("node_id", &v);
  ExpectProtocol(s, "'node_id' needs 4 bytes, 3 remain");
  EXPECT_EQ(d.remaining(), 3u);  // a failed read consumes nothing
  uint16_t w;
  EXPECT_OK(d.GetU16("x", &w));
  EXPECT_EQ(w, 0x0201);
}

TEST(CodecTest, EmptyInput) {
  Decoder d(std::span<const uint8_t>{});
  uint8_t v;
  ExpectProtocol(d.GetU8("first", &v), "'first' needs 1 bytes, 0 remain");
  EXPECT_OK(d.Finish("Empty"));
}

TEST(CodecTest, BoolRejectsValuesOtherThanZeroAndOne) {
  for (int raw = 2; raw < 256; ++raw) {
    std::vector<uint8_t> buf = {static_cast<uint8_t>(raw)};
    Decoder d(buf);
    bool b;
    ExpectProtocol(d.GetBool("mapped", &b), "'mapped' is not a boolean");
  }
}

TEST(CodecTest, StringLimits) {
  Encoder e;
  e.PutString(std::string(300, 'x'));
  std::vector<uint8_t> buf = e.Take();
  {
    Decoder d(buf);
    std::string s;
    ExpectProtocol(d.GetString("client_name", &s, 256), "'client_name' length 300 exceeds 256");
  }
  {
    Decoder d(buf);
    std::string s;
    EXPECT_OK(d.GetString("client_name", &s, 300));
    EXPECT_EQ(s.size(), 300u);
  }
  {
    Decoder d{std::span(buf).first(buf.size() - 1)};
    std::string s;
    ExpectProtocol(d.GetString("name", &s), "'name' needs 300 bytes, 299 remain");
  }
}

TEST(CodecTest, HostileStringLengthDoesNotAllocate) {
  // Length 0xFFFFFFFF followed by four bytes: rejected by the max_len check
  // and by the remaining-bytes check, whichever bound is larger.
  std::vector<uint8_t> buf = {0xff, 0xff, 0xff, 0xff, 'a', 'b', 'c', 'd'};
  Decoder d(buf);
  std::string s;
  ExpectProtocol(d.GetString("name", &s, std::numeric_limits<uint32_t>::max()), "'name' needs 4294967295 bytes");
  EXPECT_TRUE(s.empty());
  Decoder d2(buf);
  ExpectProtocol(d2.GetString("name", &s), "exceeds");
}

TEST(CodecTest, ArrayLimits) {
  std::vector<uint32_t> arr(10, 7);
  Encoder e;
  e.PutU32Array(arr);
  std::vector<uint8_t> buf = e.Take();
  {
    Decoder d(buf);
    std::vector<uint32_t> v;
    ExpectProtocol(d.GetU32Array("tokens", &v, 9), "'tokens' count 10 exceeds 9");
  }
  {
    Decoder d{std::span(buf).first(buf.size() - 1)};
    std::vector<uint32_t> v;
    ExpectProtocol(d.GetU32Array("tokens", &v), "'tokens' needs 40 bytes, 39 remain");
  }
}

TEST(CodecTest, HostileArrayCountDoesNotAllocate) {
  for (uint32_t count : {0xffffffffu, 0x40000000u, 1u << 22, 3u}) {
    std::vector<uint8_t> buf(4 + 8, 0);
    std::memcpy(buf.data(), &count, 4);
    Decoder d(buf);
    std::vector<uint32_t> v;
    Status s = d.GetU32Array("tokens", &v, std::numeric_limits<uint32_t>::max());
    ExpectProtocol(s, "truncated message: field 'tokens'");
    EXPECT_EQ(v.capacity(), 0u);  // rejected before any allocation
  }
}

TEST(CodecTest, FinishRejectsTrailingBytes) {
  std::vector<uint8_t> buf = {1, 2, 3};
  Decoder d(buf);
  uint8_t v;
  ASSERT_OK(d.GetU8("a", &v));
  ExpectProtocol(d.Finish("HelloReply"), "HelloReply has 2 trailing bytes");
}

// ------------------------------------------------------------------ layouts

std::vector<uint8_t> EncodeLayout(const Layout& l) {
  Encoder e;
  PutLayout(e, l);
  return e.Take();
}

Result<Layout> DecodeLayout(std::span<const uint8_t> bytes) {
  Decoder d(bytes);
  Layout l;
  PTS_RETURN_IF_ERROR(GetLayout(d, &l));
  PTS_RETURN_IF_ERROR(d.Finish("layout"));
  return l;
}

Layout MixedLayout() {
  return Layout::FromGroups({LayoutGroup::Full(24, 8, 128, DType::kBF16),
                             LayoutGroup::Window(24, 8, 128, DType::kBF16, 1024),
                             LayoutGroup::Latent(61, 576, DType::kBF16), LayoutGroup::State(8, 65536)},
                            16);
}

TEST(LayoutCodecTest, DenseEncodingIsTheSeventeenBytesItAlwaysWas) {
  const std::vector<uint8_t> enc = EncodeLayout(MistralLayout());
  const std::vector<uint8_t> want = {0x20, 0, 0, 0, 0x08, 0, 0, 0, 0x80, 0, 0, 0, 0x01, 0x10, 0, 0, 0};
  EXPECT_EQ(enc, want);
  Result<Layout> d = DecodeLayout(want);
  ASSERT_OK(d);
  EXPECT_EQ(*d, MistralLayout());
  EXPECT_FALSE(d->grouped());
  // Invalid dense layouts are still carried as they are: layers 0 alone, or
  // dtype 0 alone, is a dense layout of 17 bytes (only both together mean
  // a group list follows).
  for (auto [layers, dtype] : {std::pair<uint32_t, uint8_t>{0, 1}, {32, 0}}) {
    std::vector<uint8_t> b = want;
    std::memcpy(b.data(), &layers, 4);
    b[12] = dtype;
    Result<Layout> o = DecodeLayout(b);
    ASSERT_OK(o);
    EXPECT_FALSE(o->grouped());
    EXPECT_EQ(o->layers, layers);
    EXPECT_EQ(static_cast<int>(o->dtype), dtype);
    EXPECT_EQ(EncodeLayout(*o), b);
    EXPECT_FALSE(o->Validate().ok());
  }
}

TEST(LayoutCodecTest, GroupedRoundTripAndBytes) {
  const Layout l = MixedLayout();
  const std::vector<uint8_t> enc = EncodeLayout(l);
  ASSERT_EQ(enc.size(), 17u + 4 + 4 * kLayoutGroupBytes);
  // The dense fields: layers, kv_heads, head_dim and dtype 0, then block_tokens.
  for (size_t i = 0; i < 13; ++i) EXPECT_EQ(enc[i], 0) << i;
  uint32_t u32;
  std::memcpy(&u32, enc.data() + 13, 4);
  EXPECT_EQ(u32, 16u);
  std::memcpy(&u32, enc.data() + 17, 4);
  EXPECT_EQ(u32, 4u);  // the group count
  // The window group (the second): kind 2, 24 layers, 8 heads, 128, bf16,
  // window 1024, state 0.
  const uint8_t* g = enc.data() + 21 + kLayoutGroupBytes;
  const std::vector<uint8_t> window(g, g + kLayoutGroupBytes);
  const std::vector<uint8_t> want = {2, 24, 0, 0, 0, 8, 0, 0, 0, 128, 0, 0, 0, 1, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(window, want);
  Result<Layout> d = DecodeLayout(enc);
  ASSERT_OK(d);
  EXPECT_EQ(*d, l);
  EXPECT_OK(d->Validate());
  // An invalid grouped layout is carried as it is, for the server to refuse.
  Layout bad = l;
  bad.groups[3].state_bytes = 0;
  bad.groups[1].kind = static_cast<GroupKind>(77);
  Result<Layout> db = DecodeLayout(EncodeLayout(bad));
  ASSERT_OK(db);
  EXPECT_EQ(*db, bad);
  EXPECT_FALSE(db->Validate().ok());
}

TEST(LayoutCodecTest, OneFullGroupInTheGroupedFormDecodesAsTheDenseLayout) {
  Encoder e;
  for (int i = 0; i < 13; ++i) e.PutU8(0);
  e.PutU32(16);
  e.PutU32(1);
  e.PutU8(static_cast<uint8_t>(GroupKind::kFull));
  e.PutU32(32);
  e.PutU32(8);
  e.PutU32(128);
  e.PutU8(static_cast<uint8_t>(DType::kBF16));
  e.PutU32(0);
  e.PutU64(0);
  Result<Layout> d = DecodeLayout(e.buffer());
  ASSERT_OK(d);
  EXPECT_EQ(*d, MistralLayout());
  EXPECT_FALSE(d->grouped());
  EXPECT_EQ(EncodeLayout(*d).size(), 17u);
}

TEST(LayoutCodecTest, TruncatedGroupedEncodingNamesTheField) {
  const std::vector<uint8_t> enc = EncodeLayout(MixedLayout());
  // The count is checked against the bytes left before any group is read,
  // so a cut anywhere in the groups names the count.
  const std::pair<size_t, const char*> cuts[] = {
      {0, "truncated message: field 'layout.layers'"},
      {13, "truncated message: field 'layout.block_tokens'"},
      {17, "truncated message: field 'layout.groups'"},
      {21, "field 'layout.groups' count 4 does not fit in the 0 remaining bytes"},
      {22, "field 'layout.groups' count 4 does not fit in the 1 remaining bytes"},
      {enc.size() - 1, "field 'layout.groups' count 4 does not fit in the 103 remaining bytes"},
  };
  for (auto [cut, field] : cuts) {
    SCOPED_TRACE(cut);
    Result<Layout> d = DecodeLayout(std::span(enc).first(cut));
    ASSERT_FALSE(d.ok());
    ExpectProtocol(d.status(), field);
  }
  // Every strict prefix fails, with a protocol error naming a layout field.
  for (size_t cut = 0; cut < enc.size(); ++cut) {
    Result<Layout> d = DecodeLayout(std::span(enc).first(cut));
    ASSERT_FALSE(d.ok()) << cut;
    ExpectProtocol(d.status(), "layout.");
  }
}

TEST(LayoutCodecTest, HostileGroupCountIsRefusedBeforeAllocating) {
  for (uint32_t count : {0xffffffffu, 0x80000000u, 1000000u, 5u, 0u}) {
    SCOPED_TRACE(count);
    std::vector<uint8_t> enc = EncodeLayout(MixedLayout());  // four groups follow the count
    std::memcpy(enc.data() + 17, &count, 4);
    Result<Layout> d = DecodeLayout(enc);
    ASSERT_FALSE(d.ok());
    ExpectProtocol(d.status(), "layout.groups");
    if (count > 4) ExpectProtocol(d.status(), "does not fit in the 104 remaining bytes");
  }
  // Fewer groups than follow: the rest are trailing bytes.
  std::vector<uint8_t> enc = EncodeLayout(MixedLayout());
  const uint32_t three = 3;
  std::memcpy(enc.data() + 17, &three, 4);
  ExpectProtocol(DecodeLayout(enc).status(), "layout has 26 trailing bytes");
}

}  // namespace
}  // namespace ptstore::core
