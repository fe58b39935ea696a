// Shared by the message tests: sample values and the round trip every
// message must survive (frame, DecodeAny, typed decode, same bytes when
// encoded again; every strict prefix and any trailing bytes refused).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/messages.h"
#include "core/wire.h"
#include "ptstore/layout.h"
#include "ptstore/types.h"
#include "tests/testing/generators.h"
#include "tests/testing/status_matchers.h"

namespace ptstore::core::testmsg {

inline uint16_t T(MsgType t) { return static_cast<uint16_t>(t); }

// A layout with values no real one has (layouts are not validated while
// decoding).
inline Layout OddLayout() {
  Layout l;
  l.layers = 61;
  l.kv_heads = 3;
  l.head_dim = 0x01020304;
  l.dtype = DType::kFP8;
  l.block_tokens = 0xfffffffe;
  return l;
}

// A grouped layout with every kind of group.
inline Layout GroupedLayout() {
  return Layout::FromGroups({LayoutGroup::Full(24, 8, 128, DType::kBF16),
                             LayoutGroup::Window(24, 8, 128, DType::kBF16, 1024),
                             LayoutGroup::Latent(61, 576, DType::kBF16), LayoutGroup::State(8, 65536)},
                            16);
}

// Sample token ids over the whole 32-bit range (the kit's WideTokens).
using ptstore::testing::WideTokens;

inline void ExpectSameLayout(const Layout& a, const Layout& b) {
  EXPECT_EQ(a.layers, b.layers);
  EXPECT_EQ(a.kv_heads, b.kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.dtype, b.dtype);
  EXPECT_EQ(a.block_tokens, b.block_tokens);
  EXPECT_EQ(a.groups, b.groups);
}

inline void ExpectSameInfo(const NamespaceInfo& a, const NamespaceInfo& b) {
  EXPECT_EQ(a.name, b.name);
  ExpectSameLayout(a.layout, b.layout);
  EXPECT_EQ(a.salted, b.salted);
  EXPECT_EQ(a.uid, b.uid);
  EXPECT_EQ(a.gid, b.gid);
  EXPECT_EQ(a.mode, b.mode);
  EXPECT_EQ(a.bytes, b.bytes);
  EXPECT_EQ(a.prefixes, b.prefixes);
  EXPECT_EQ(a.times, b.times);
}

template <typename M>
std::vector<uint8_t> EncodeBody(const M& m) {
  Encoder e;
  m.Encode(e);
  return e.Take();
}

// Frames `m` as `type`, checks the frame, decodes it back (DecodeAny and the
// typed decoder) and returns the decoded message; re-encoding gives the same
// bytes; every strict prefix of the body and the body with trailing bytes
// are kProtocol with a message.
template <typename M>
M RoundTrip(uint16_t type, const M& m) {
  constexpr uint64_t kRequestId = 0xabcdef0123456789ULL;
  std::vector<uint8_t> body = EncodeBody(m);
  uint8_t header[kFrameHeaderBytes];
  EncodeFrameHeader(type, kRequestId, body, header);
  std::vector<uint8_t> frame(header, header + kFrameHeaderBytes);
  frame.insert(frame.end(), body.begin(), body.end());

  Result<FrameHeader> h = DecodeFrameHeader(frame);
  EXPECT_OK(h);
  if (!h.ok()) return M{};
  EXPECT_EQ(h->type, type);
  EXPECT_EQ(h->request_id, kRequestId);
  EXPECT_EQ(h->body_len, body.size());
  std::span<const uint8_t> got_body = std::span(frame).subspan(kFrameHeaderBytes, h->body_len);
  EXPECT_OK(VerifyFrameChecksum(frame.data(), got_body));

  Status any = DecodeAny(type, got_body);
  EXPECT_OK(any) << MsgTypeName(type) << ": " << any.ToString();

  M out;
  Decoder d(got_body);
  Status s = out.Decode(d);
  EXPECT_OK(s) << MsgTypeName(type) << ": " << s.ToString();
  EXPECT_EQ(EncodeBody(out), body) << MsgTypeName(type);

  for (size_t n = 0; n < body.size(); ++n) {
    std::vector<uint8_t> prefix(body.begin(), body.begin() + n);  // own buffer: ASan sees over-reads
    Status t = DecodeAny(type, prefix);
    EXPECT_ERROR(t, Code::kProtocol) << MsgTypeName(type) << " prefix " << n << " of " << body.size();
    EXPECT_FALSE(t.message().empty());
    M partial;
    Decoder pd(prefix);
    EXPECT_ERROR(partial.Decode(pd), Code::kProtocol) << MsgTypeName(type) << " prefix " << n;
  }
  for (size_t extra : {1, 3, 64}) {
    std::vector<uint8_t> longer = body;
    longer.resize(body.size() + extra, 0);
    Status t = DecodeAny(type, longer);
    EXPECT_ERROR(t, Code::kProtocol) << MsgTypeName(type) << " +" << extra;
    EXPECT_NE(t.message().find("trailing"), std::string::npos) << t.message();
  }
  return out;
}

}  // namespace ptstore::core::testmsg
