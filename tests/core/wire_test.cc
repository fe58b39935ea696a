// Tests of the frame header and the field codec (core/wire.h).
#include "core/wire.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <array>
#include <limits>
#include <string>
#include <vector>

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
  EXPECT_EQ(s.code(), Code::kProtocol) << s.ToString();
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
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_EQ(r->version, kWireVersion);
      EXPECT_EQ(r->type, type);
      EXPECT_EQ(r->request_id, rid);
      EXPECT_EQ(r->body_len, body.size());
      EXPECT_TRUE(VerifyFrameChecksum(h.data(), body).ok());
    }
  }
}

TEST(FrameHeaderTest, DecodeIgnoresBytesAfterTheHeader) {
  std::vector<uint8_t> body = {9, 9};
  Header h = MakeHeader(5, 6, body);
  std::vector<uint8_t> frame(h.begin(), h.end());
  frame.insert(frame.end(), body.begin(), body.end());
  Result<FrameHeader> r = DecodeFrameHeader(frame);
  ASSERT_TRUE(r.ok());
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
  EXPECT_TRUE(DecodeFrameHeader(h).ok());  // the limit itself is allowed
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
  ASSERT_TRUE(VerifyFrameChecksum(good.data(), body).ok());

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
  ASSERT_TRUE(DecodeFrameHeader(h).ok());
  EXPECT_EQ(DecodeFrameHeader(h)->body_len, 0u);
  EXPECT_TRUE(VerifyFrameChecksum(h.data(), {}).ok());
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
  ASSERT_TRUE(d.GetU8("u8", &u8).ok());
  ASSERT_TRUE(d.GetU16("u16", &u16).ok());
  ASSERT_TRUE(d.GetU32("u32", &u32).ok());
  ASSERT_TRUE(d.GetU64("u64", &u64).ok());
  ASSERT_TRUE(d.GetBool("b", &b).ok());
  ASSERT_TRUE(d.GetString("s1", &s1).ok());
  ASSERT_TRUE(d.GetString("s2", &s2).ok());
  ASSERT_TRUE(d.GetU32Array("a1", &a1).ok());
  ASSERT_TRUE(d.GetU32Array("a2", &a2).ok());
  EXPECT_TRUE(d.Finish("Test").ok());
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
  EXPECT_TRUE(d.GetU16("x", &w).ok());
  EXPECT_EQ(w, 0x0201);
}

TEST(CodecTest, EmptyInput) {
  Decoder d(std::span<const uint8_t>{});
  uint8_t v;
  ExpectProtocol(d.GetU8("first", &v), "'first' needs 1 bytes, 0 remain");
  EXPECT_TRUE(d.Finish("Empty").ok());
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
    EXPECT_TRUE(d.GetString("client_name", &s, 300).ok());
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
  ASSERT_TRUE(d.GetU8("a", &v).ok());
  ExpectProtocol(d.Finish("HelloReply"), "HelloReply has 2 trailing bytes");
}

}  // namespace
}  // namespace ptstore::core
