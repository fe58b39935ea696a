// Tests of the protocol messages (core/messages.h): every message type
// round-trips through a frame with non-trivial values, and every decoder is
// total: truncations, trailing bytes, bad enums and hostile counts all give
// kProtocol without crashing or allocating more than the body describes.
#include "core/messages.h"
#include "core/wire_types.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <cstdlib>
#include <functional>
#include <new>
#include <string>
#include <vector>

#include "tests/core/hostile_bodies.h"
#include "tests/core/message_test_util.h"
#include "tests/testing/status_matchers.h"

namespace ptstore::core {
namespace {

using namespace testmsg;  // NOLINT: the shared samples and RoundTrip


// ---- samples with non-trivial values ----------------------------------------

NamespaceInfo SampleInfo(int i) {
  NamespaceInfo n;
  n.name = "mistral-7b-instruct-v0.2#" + std::to_string(i);
  n.layout = i % 3 == 2 ? GroupedLayout() : i % 2 ? MistralLayout() : OddLayout();
  n.salted = i % 2 == 0;
  n.uid = 1000 + i;
  n.gid = 0xfffffffe - i;
  n.mode = 0640;
  n.bytes = (uint64_t{1} << 40) + i;
  n.prefixes = 0x0123456789abcdefULL - i;
  n.times = Times{1'700'000'000'000'000'000ull + i, 1'700'000'000'000'000'500ull + i, 1'700'000'000'000'000'100ull};
  return n;
}


// ---- registry -------------------------------------------------------------

TEST(MsgTypeTest, RequestsAreEvenAndRepliesFollow) {
  for (uint16_t t = T(MsgType::kHello); t <= T(MsgType::kQuotas); t += 2) {
    std::string req = MsgTypeName(t);
    EXPECT_NE(req, "Unknown") << t;
    EXPECT_EQ(std::string(MsgTypeName(t + 1)), req + "Reply") << t;
  }
  EXPECT_STREQ(MsgTypeName(T(MsgType::kError)), "Error");
  for (uint16_t t : {0, 68, 69, 1000, 0xffff}) EXPECT_STREQ(MsgTypeName(t), "Unknown") << t;
}

TEST(MsgTypeTest, UnknownTypesAreProtocolErrors) {
  std::vector<uint8_t> body = {0, 0, 0, 0};
  for (uint16_t t : {0, 68, 69, 0x100, 0xffff}) {
    Status s = DecodeAny(t, body);
    EXPECT_ERROR(s, Code::kProtocol) << t;
    EXPECT_NE(s.message().find("unknown message type " + std::to_string(t)), std::string::npos);
  }
}

// ---- round trips -------------------------------------------------------------

TEST(MessagesTest, ErrorReply) {
  ErrorReply m;
  m.code = Code::kPermissionDenied;
  m.message = "namespace 'x' is mode 0700, owned by uid 12";
  ErrorReply out = RoundTrip(T(MsgType::kError), m);
  EXPECT_EQ(out.code, m.code);
  EXPECT_EQ(out.message, m.message);
  Status st = out.ToStatus();
  EXPECT_ERROR(st, Code::kPermissionDenied);
  EXPECT_EQ(st.message(), m.message);
}

TEST(MessagesTest, ErrorReplyWithEveryCode) {
  for (uint16_t c = 0; c <= static_cast<uint16_t>(Code::kUnimplemented); ++c) {
    ErrorReply m;
    m.code = static_cast<Code>(c);
    m.message = "m" + std::to_string(c);
    ErrorReply out = RoundTrip(T(MsgType::kError), m);
    EXPECT_EQ(out.code, m.code);
  }
}

TEST(MessagesTest, ErrorReplyUnknownCodeBecomesProtocol) {
  Encoder e;
  e.PutU16(500);
  e.PutString("from a newer peer");
  std::vector<uint8_t> body = e.Take();
  ErrorReply out;
  Decoder d(body);
  ASSERT_OK(out.Decode(d));
  EXPECT_EQ(out.code, Code::kProtocol);
  EXPECT_ERROR(out.ToStatus(), Code::kProtocol);
  EXPECT_EQ(out.message, "from a newer peer");
}

TEST(MessagesTest, ErrorReplyWithOkCodeIsNotSuccess) {
  ErrorReply m;
  m.code = Code::kOk;
  m.message = "confused peer";
  EXPECT_ERROR(m.ToStatus(), Code::kProtocol);
}

TEST(MessagesTest, ErrorReplyMessageLimit) {
  // The encoder cuts an over-long message to the limit, so an error reply
  // always decodes (a long message must not break the connection)...
  ErrorReply m;
  m.message = std::string((1u << 16) + 1, 'x');
  ErrorReply out = RoundTrip(T(MsgType::kError), m);
  EXPECT_EQ(out.message.size(), 1u << 16);
  // ...and the decoder still refuses a longer one from another encoder.
  Encoder e;
  e.PutU16(static_cast<uint16_t>(Code::kInternal));
  e.PutU32((1u << 16) + 1);
  std::string big((1u << 16) + 1, 'x');
  e.PutRaw(big.data(), big.size());
  Status s = DecodeAny(T(MsgType::kError), e.buffer());
  EXPECT_ERROR(s, Code::kProtocol);
  EXPECT_NE(s.message().find("'message'"), std::string::npos);
}

TEST(MessagesTest, UnregisterBuffer) {
  UnregisterBufferRequest m;
  m.buffer_id = 0xdeadbeef;
  EXPECT_EQ(RoundTrip(T(MsgType::kUnregisterBuffer), m).buffer_id, 0xdeadbeefu);
  EXPECT_OK(DecodeAny(T(MsgType::kUnregisterBufferReply), {}));
}

TEST(MessagesTest, Hello) {
  HelloRequest m;
  m.client_name = "vllm-worker-3 (pid 4242)";
  m.want_mapping = false;
  HelloRequest out = RoundTrip(T(MsgType::kHello), m);
  EXPECT_EQ(out.client_name, m.client_name);
  EXPECT_EQ(out.want_mapping, false);
  m.want_mapping = true;
  EXPECT_TRUE(RoundTrip(T(MsgType::kHello), m).want_mapping);
}

TEST(MessagesTest, HelloNameLimit) {
  HelloRequest m;
  m.client_name = std::string(256, 'c');
  EXPECT_OK(DecodeAny(T(MsgType::kHello), EncodeBody(m)));
  m.client_name.push_back('c');
  Status s = DecodeAny(T(MsgType::kHello), EncodeBody(m));
  EXPECT_ERROR(s, Code::kProtocol);
  EXPECT_NE(s.message().find("client_name"), std::string::npos);
}

TEST(MessagesTest, HelloReply) {
  HelloReply m;
  m.node_id = 0x00abcdef;
  m.arena_bytes = uint64_t{48} << 30;
  m.mapped = true;
  m.session_id = 0xfedcba9876543210ULL;
  m.lease_ms = 30000;
  HelloReply out = RoundTrip(T(MsgType::kHelloReply), m);
  EXPECT_EQ(out.node_id, m.node_id);
  EXPECT_EQ(out.arena_bytes, m.arena_bytes);
  EXPECT_EQ(out.mapped, true);
  EXPECT_EQ(out.session_id, m.session_id);
  EXPECT_EQ(out.lease_ms, m.lease_ms);
}

TEST(MessagesTest, RegisterBuffer) {
  RegisterBufferRequest m;
  m.size = (uint64_t{1} << 33) + 7;
  EXPECT_EQ(RoundTrip(T(MsgType::kRegisterBuffer), m).size, m.size);
  RegisterBufferReply r;
  r.buffer_id = 0x80000001u;
  EXPECT_EQ(RoundTrip(T(MsgType::kRegisterBufferReply), r).buffer_id, r.buffer_id);
}

TEST(MessagesTest, CreateNamespace) {
  CreateNamespaceRequest m;
  m.name = "llama-3-70b";
  m.layout = MistralLayout();
  m.layout.dtype = DType::kFP32;
  m.layout.block_tokens = 32;
  m.salt = std::string("tenant\0with\xffnul", 15);
  m.mode = 01750;
  m.exist_ok = false;
  CreateNamespaceRequest out = RoundTrip(T(MsgType::kCreateNamespace), m);
  EXPECT_EQ(out.name, m.name);
  ExpectSameLayout(out.layout, m.layout);
  EXPECT_EQ(out.salt, m.salt);
  EXPECT_EQ(out.mode, m.mode);
  EXPECT_EQ(out.exist_ok, false);
}

TEST(MessagesTest, CreateNamespaceWithAGroupedLayout) {
  CreateNamespaceRequest m;
  m.name = "gemma-3";
  m.layout = GroupedLayout();
  m.salt = "s";
  CreateNamespaceRequest out = RoundTrip(T(MsgType::kCreateNamespace), m);
  EXPECT_EQ(out.layout, m.layout);
  EXPECT_TRUE(out.layout.grouped());
  // The dense layout's body is the 17-byte layout it always was; the
  // grouped one carries a count and 26 bytes per group after it.
  CreateNamespaceRequest dense = m;
  dense.layout = MistralLayout();
  EXPECT_EQ(EncodeBody(dense).size(), 4 + 7 + 17 + 4 + 1 + 4 + 1u);
  EXPECT_EQ(EncodeBody(m).size(), EncodeBody(dense).size() + 4 + 4 * kLayoutGroupBytes);
}

TEST(MessagesTest, NamespaceListWithGroupedAndDenseLayouts) {
  ListNamespacesReply m;
  for (int i = 0; i < 6; ++i) m.namespaces.push_back(SampleInfo(i));
  ListNamespacesReply out = RoundTrip(T(MsgType::kListNamespacesReply), m);
  ASSERT_EQ(out.namespaces.size(), m.namespaces.size());
  for (size_t i = 0; i < m.namespaces.size(); ++i) ExpectSameInfo(out.namespaces[i], m.namespaces[i]);
  EXPECT_TRUE(out.namespaces[2].layout.grouped());
}

TEST(MessagesTest, LayoutIsNotValidatedWhileDecoding) {
  // The server validates layouts; the decoder only carries them.
  CreateNamespaceRequest m;
  m.name = "n";
  m.layout = OddLayout();
  m.layout.dtype = static_cast<DType>(77);
  CreateNamespaceRequest out = RoundTrip(T(MsgType::kCreateNamespace), m);
  EXPECT_EQ(static_cast<int>(out.layout.dtype), 77);
  EXPECT_FALSE(out.layout.Validate().ok());
}

TEST(MessagesTest, NamespaceReplyForCreateAndGet) {
  NamespaceReply m;
  m.info = SampleInfo(4);
  for (MsgType t : {MsgType::kCreateNamespaceReply, MsgType::kGetNamespaceReply}) {
    NamespaceReply out = RoundTrip(T(t), m);
    ExpectSameInfo(out.info, m.info);
  }
}

TEST(MessagesTest, NameRequests) {
  NameRequest m;
  m.name = "mistral-7b-instruct-v0.2";
  for (MsgType t : {MsgType::kGetNamespace, MsgType::kDropNamespace, MsgType::kListNamespaces, MsgType::kStats}) {
    EXPECT_EQ(RoundTrip(T(t), m).name, m.name) << MsgTypeName(T(t));
  }
  m.name.clear();  // ListNamespaces / Stats of everything
  EXPECT_EQ(RoundTrip(T(MsgType::kStats), m).name, "");
}

TEST(MessagesTest, ListNamespacesReply) {
  ListNamespacesReply m;
  for (int i = 0; i < 5; ++i) m.namespaces.push_back(SampleInfo(i));
  ListNamespacesReply out = RoundTrip(T(MsgType::kListNamespacesReply), m);
  ASSERT_EQ(out.namespaces.size(), 5u);
  for (int i = 0; i < 5; ++i) ExpectSameInfo(out.namespaces[i], m.namespaces[i]);
  EXPECT_TRUE(RoundTrip(T(MsgType::kListNamespacesReply), ListNamespacesReply{}).namespaces.empty());
}

TEST(MessagesTest, Save) {
  SaveRequest m;
  m.ns = "ns-1";
  m.tokens = WideTokens(0, 16 * 5 + 3);
  m.buffer_id = 17;
  m.buffer_offset = uint64_t{3} << 32;
  m.length = 131072ull * 48;
  m.first_block = 2;
  SaveRequest out = RoundTrip(T(MsgType::kSave), m);
  EXPECT_EQ(out.ns, m.ns);
  EXPECT_EQ(out.tokens, m.tokens);
  EXPECT_EQ(out.buffer_id, m.buffer_id);
  EXPECT_EQ(out.buffer_offset, m.buffer_offset);
  EXPECT_EQ(out.length, m.length);
  EXPECT_EQ(out.first_block, m.first_block);

  SaveReply r;
  r.matched_tokens = 32;
  r.stored_tokens = 48;
  r.new_bytes = 48ull * 131072;
  SaveReply ro = RoundTrip(T(MsgType::kSaveReply), r);
  EXPECT_EQ(ro.matched_tokens, r.matched_tokens);
  EXPECT_EQ(ro.stored_tokens, r.stored_tokens);
  EXPECT_EQ(ro.new_bytes, r.new_bytes);
}

TEST(MessagesTest, PrefixRequestsAndReplies) {
  PrefixRequest m;
  m.ns = "ns-2";
  m.tokens = WideTokens(0, 100);
  m.buffer_id = 3;
  m.buffer_offset = 4096;
  m.capacity = ~uint64_t{0} >> 1;
  PrefixReply r;
  r.matched_tokens = 96;
  r.lease_id = 0x1122334455667788ULL;
  for (uint64_t i = 0; i < 4; ++i) {
    r.extents.push_back(Extent{TensorId::Make(NodeId{7}, 1000 + i), i * 4096, 2097152 + i, (i + 1) << 30});
  }
  for (MsgType t : {MsgType::kLookup, MsgType::kPin, MsgType::kLoadCopy}) {
    SCOPED_TRACE(MsgTypeName(T(t)));
    PrefixRequest out = RoundTrip(T(t), m);
    EXPECT_EQ(out.ns, m.ns);
    EXPECT_EQ(out.tokens, m.tokens);
    EXPECT_EQ(out.buffer_id, m.buffer_id);
    EXPECT_EQ(out.buffer_offset, m.buffer_offset);
    EXPECT_EQ(out.capacity, m.capacity);

    PrefixReply ro = RoundTrip(static_cast<uint16_t>(T(t) + 1), r);
    EXPECT_EQ(ro.matched_tokens, r.matched_tokens);
    EXPECT_EQ(ro.lease_id, r.lease_id);
    EXPECT_EQ(ro.extents, r.extents);
    EXPECT_EQ(ro.extents[2].tensor.owner(), NodeId{7});
  }
}

TEST(MessagesTest, ReleaseAndEmptyReply) {
  ReleaseRequest m;
  m.lease_id = 0xdeadbeefcafef00dULL;
  EXPECT_EQ(RoundTrip(T(MsgType::kRelease), m).lease_id, m.lease_id);
  EXPECT_TRUE(EncodeBody(EmptyReply{}).empty());
  RoundTrip(T(MsgType::kReleaseReply), EmptyReply{});
}

TEST(MessagesTest, Remove) {
  RemoveRequest m;
  m.ns = "ns-3";
  m.by_key = true;
  m.key = ChainKey{0x0123456789abcdefULL, 0x0fedcba987654321ULL};
  m.tokens = WideTokens(0, 7);
  RemoveRequest out = RoundTrip(T(MsgType::kRemove), m);
  EXPECT_EQ(out.ns, m.ns);
  EXPECT_TRUE(out.by_key);
  EXPECT_EQ(out.key, m.key);
  EXPECT_EQ(out.tokens, m.tokens);

  RemoveReply r;
  r.nodes = 12;
  r.bytes = 12ull << 21;
  for (MsgType t : {MsgType::kRemoveReply, MsgType::kDropNamespaceReply}) {
    RemoveReply ro = RoundTrip(T(t), r);
    EXPECT_EQ(ro.nodes, r.nodes);
    EXPECT_EQ(ro.bytes, r.bytes);
  }
}

TEST(MessagesTest, StatsReplyCarriesEveryCounter) {
  StatsReply m;
  constexpr size_t kCounters = sizeof(StoreStats) / sizeof(uint64_t);
  static_assert(kCounters == 47, "a StoreStats counter was added: update ForEachStat and the docs");
  uint64_t fields[kCounters];
  for (size_t i = 0; i < kCounters; ++i) fields[i] = 0x0101010101010101ULL * (i + 1) + i;
  std::memcpy(&m.stats, fields, sizeof(fields));
  EXPECT_EQ(EncodeBody(m).size(), kCounters * 8);
  StatsReply out = RoundTrip(T(MsgType::kStatsReply), m);
  uint64_t got[kCounters];
  std::memcpy(got, &out.stats, sizeof(got));
  for (size_t i = 0; i < kCounters; ++i) EXPECT_EQ(got[i], fields[i]) << "counter " << i;
  // Declaration order is the wire order.
  std::vector<uint8_t> body = EncodeBody(m);
  uint64_t first, last;
  std::memcpy(&first, body.data(), 8);
  std::memcpy(&last, body.data() + body.size() - 8, 8);
  EXPECT_EQ(first, m.stats.arena_bytes);
  EXPECT_EQ(last, m.stats.dram_hits);
}

TEST(MessagesTest, Increment) {
  IncrementRequest m;
  m.ns = "ns-9";
  m.key = ChainKey{0xabc, 0xdef};
  m.pin = true;
  m.whole_prefix = true;
  IncrementRequest out = RoundTrip(T(MsgType::kIncrement), m);
  EXPECT_EQ(out.ns, m.ns);
  EXPECT_EQ(out.key, m.key);
  EXPECT_TRUE(out.pin);
  EXPECT_TRUE(out.whole_prefix);

  IncrementReply r;
  r.node.key = ChainKey{1, 2};
  r.node.parent = ChainKey{3, 4};
  r.node.start_token = 32;
  r.node.tokens = 16;
  r.node.bytes = 16 * 256;
  r.node.hits = 7;
  r.node.tensor = TensorId::Make(NodeId{2}, 5);
  r.node.cache_class = CacheClass::kReplica;
  r.node.children = 3;
  r.node.pins = 1;
  r.node.tier = kTierDram | kTierSsd;
  r.tokens = WideTokens(0, 16);
  r.lease_id = 44;
  r.extents = {Extent{TensorId{9}, 4096, 8192, 1 << 20}, Extent{TensorId{10}, 0, 4096, 3 << 20}};
  IncrementReply ro = RoundTrip(T(MsgType::kIncrementReply), r);
  EXPECT_EQ(ro.node.key, r.node.key);
  EXPECT_EQ(ro.node.parent, r.node.parent);
  EXPECT_EQ(ro.node.start_token, 32u);
  EXPECT_EQ(ro.node.bytes, r.node.bytes);
  EXPECT_EQ(ro.node.tensor, r.node.tensor);
  EXPECT_EQ(ro.node.cache_class, CacheClass::kReplica);
  EXPECT_EQ(ro.node.tier, r.node.tier);
  EXPECT_EQ(ro.tokens, r.tokens);
  EXPECT_EQ(ro.lease_id, 44u);
  EXPECT_EQ(ro.extents, r.extents);
}

TEST(MessagesTest, Auth) {
  // Hellos of peer protocol 2 on carry the versions the node speaks (an
  // optional trailing field: rdma/auth.h); their round trip refuses bytes
  // past it as trailing.
  AuthHello h;
  h.node_id = 0xabcdef;
  for (size_t i = 0; i < h.nonce.size(); ++i) h.nonce[i] = static_cast<uint8_t>(i + 1);
  h.versions = PeerVersionRange{1, 2};
  // Not RoundTrip: the 36-byte prefix of a hello is a whole hello of a node
  // before negotiation, so not every prefix is refused (checked below).
  auto trip = [](uint16_t type, const auto& m) {
    std::remove_cvref_t<decltype(m)> out;
    const std::vector<uint8_t> body = EncodeBody(m);
    EXPECT_OK(DecodeAny(type, body));
    Decoder d(body);
    EXPECT_OK(out.Decode(d));
    EXPECT_EQ(EncodeBody(out), body);
    for (size_t extra : {1, 3, 64}) {
      std::vector<uint8_t> longer = body;
      longer.resize(body.size() + extra, 0);
      Status t = DecodeAny(type, longer);
      EXPECT_ERROR(t, Code::kProtocol) << extra;
      EXPECT_NE(t.message().find("trailing"), std::string::npos) << t.message();
    }
    return out;
  };
  AuthHello ho = trip(T(MsgType::kAuthHello), h);
  EXPECT_EQ(ho.node_id, h.node_id);
  EXPECT_EQ(ho.nonce, h.nonce);
  EXPECT_EQ(ho.versions, h.versions);
  AuthHelloReply hr;
  hr.node_id = 7;
  for (size_t i = 0; i < hr.nonce.size(); ++i) hr.nonce[i] = static_cast<uint8_t>(200 - i);
  hr.versions = PeerVersionRange{2, 2};
  AuthHelloReply hro = trip(T(MsgType::kAuthHelloReply), hr);
  EXPECT_EQ(hro.node_id, 7u);
  EXPECT_EQ(hro.nonce, hr.nonce);
  EXPECT_EQ(hro.versions, hr.versions);
  AuthProof p;
  for (size_t i = 0; i < p.mac.size(); ++i) p.mac[i] = static_cast<uint8_t>(i * 3);
  EXPECT_EQ(RoundTrip(T(MsgType::kAuthProof), p).mac, p.mac);
  AuthProofReply pr;
  for (size_t i = 0; i < pr.mac.size(); ++i) pr.mac[i] = static_cast<uint8_t>(i * 5);
  EXPECT_EQ(RoundTrip(T(MsgType::kAuthProofReply), pr).mac, pr.mac);
  // Sizes: 40-byte hellos, 36 bytes from a node before version negotiation
  // (decoded without versions: protocol 1); anything between, or a range
  // that is empty or names version 0, is refused.
  Encoder e;
  h.Encode(e);
  EXPECT_EQ(e.buffer().size(), 40u);
  std::vector<uint8_t> b = e.Take();
  std::vector<uint8_t> old(b.begin(), b.begin() + 36);
  AuthHello v1;
  Decoder d(old);
  ASSERT_OK(v1.Decode(d));
  EXPECT_FALSE(v1.versions.has_value());
  EXPECT_ERROR(DecodeAny(T(MsgType::kAuthHello), std::span(b).first(35)), Code::kProtocol);
  for (size_t n : {37, 38, 39}) {
    EXPECT_ERROR(DecodeAny(T(MsgType::kAuthHello), std::span(b).first(n)), Code::kProtocol) << n;
  }
  b.push_back(0);
  EXPECT_ERROR(DecodeAny(T(MsgType::kAuthHello), b), Code::kProtocol);
  AuthHello empty = h;
  empty.versions = PeerVersionRange{2, 1};
  Encoder e2;
  empty.Encode(e2);
  std::vector<uint8_t> eb = e2.Take();
  EXPECT_ERROR(DecodeAny(T(MsgType::kAuthHello), eb), Code::kProtocol);
}

TEST(MessagesTest, ListTree) {
  ListTreeRequest m;
  m.ns = "ns-4";
  m.parent = ChainKey{1, 2};
  m.recursive = true;
  ListTreeRequest out = RoundTrip(T(MsgType::kListTree), m);
  EXPECT_EQ(out.ns, m.ns);
  EXPECT_EQ(out.parent, m.parent);
  EXPECT_TRUE(out.recursive);

  ListTreeReply r;
  for (uint32_t i = 0; i < 3; ++i) {
    PrefixNodeInfo n;
    n.key = ChainKey{0x1000 + i, 0x2000 + i};
    n.parent = i ? r.nodes.back().key : ChainKey{};
    n.start_token = 16 * i;
    n.tokens = 16;
    n.bytes = 16 * 131072;
    n.hits = 1000 - i;
    n.tensor = TensorId::Make(NodeId{i}, 99 + i);
    n.cache_class = i % 2 ? CacheClass::kReplica : CacheClass::kOwned;
    n.children = i == 2 ? 0 : 1;
    n.pins = 3 * i;
    n.tier = static_cast<uint8_t>(i % 3 + 1);
    n.times = Times{1'700'000'000'000'000'000ull + i, 1'800'000'000'000'000'000ull + i, 7 + i};
    r.nodes.push_back(n);
  }
  ListTreeReply ro = RoundTrip(T(MsgType::kListTreeReply), r);
  ASSERT_EQ(ro.nodes.size(), r.nodes.size());
  for (size_t i = 0; i < r.nodes.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(ro.nodes[i].key, r.nodes[i].key);
    EXPECT_EQ(ro.nodes[i].parent, r.nodes[i].parent);
    EXPECT_EQ(ro.nodes[i].start_token, r.nodes[i].start_token);
    EXPECT_EQ(ro.nodes[i].tokens, r.nodes[i].tokens);
    EXPECT_EQ(ro.nodes[i].bytes, r.nodes[i].bytes);
    EXPECT_EQ(ro.nodes[i].hits, r.nodes[i].hits);
    EXPECT_EQ(ro.nodes[i].tensor, r.nodes[i].tensor);
    EXPECT_EQ(ro.nodes[i].cache_class, r.nodes[i].cache_class);
    EXPECT_EQ(ro.nodes[i].children, r.nodes[i].children);
    EXPECT_EQ(ro.nodes[i].pins, r.nodes[i].pins);
    EXPECT_EQ(ro.nodes[i].tier, r.nodes[i].tier);
    EXPECT_EQ(ro.nodes[i].times, r.nodes[i].times);
  }
}

TEST(MessagesTest, DefaultMessagesRoundTripToo) {
  // Empty strings, empty arrays, zero counters: the minimal encodings.
  RoundTrip(T(MsgType::kError), ErrorReply{});
  RoundTrip(T(MsgType::kHello), HelloRequest{});
  RoundTrip(T(MsgType::kHelloReply), HelloReply{});
  RoundTrip(T(MsgType::kRegisterBuffer), RegisterBufferRequest{});
  RoundTrip(T(MsgType::kRegisterBufferReply), RegisterBufferReply{});
  RoundTrip(T(MsgType::kCreateNamespace), CreateNamespaceRequest{});
  RoundTrip(T(MsgType::kGetNamespaceReply), NamespaceReply{});
  RoundTrip(T(MsgType::kGetNamespace), NameRequest{});
  RoundTrip(T(MsgType::kListNamespacesReply), ListNamespacesReply{});
  RoundTrip(T(MsgType::kSave), SaveRequest{});
  RoundTrip(T(MsgType::kSaveReply), SaveReply{});
  RoundTrip(T(MsgType::kLookup), PrefixRequest{});
  RoundTrip(T(MsgType::kLookupReply), PrefixReply{});
  RoundTrip(T(MsgType::kRelease), ReleaseRequest{});
  RoundTrip(T(MsgType::kRemove), RemoveRequest{});
  RoundTrip(T(MsgType::kRemoveReply), RemoveReply{});
  RoundTrip(T(MsgType::kStatsReply), StatsReply{});
  RoundTrip(T(MsgType::kListTree), ListTreeRequest{});
  RoundTrip(T(MsgType::kListTreeReply), ListTreeReply{});
}

// ---- bad values ---------------------------------------------------------------

TEST(MessagesTest, BadBooleanNamesTheField) {
  HelloRequest m;
  m.client_name = "x";
  std::vector<uint8_t> body = EncodeBody(m);
  body.back() = 2;
  Status s = DecodeAny(T(MsgType::kHello), body);
  EXPECT_ERROR(s, Code::kProtocol);
  EXPECT_NE(s.message().find("want_mapping"), std::string::npos) << s.message();
}

TEST(MessagesTest, UnknownCacheClassRejected) {
  ListTreeReply r;
  r.nodes.resize(1);
  std::vector<uint8_t> body = EncodeBody(r);
  // count(4) key(16) parent(16) 5*u64(40) -> class at offset 76; then children, pins, tier, 3 times.
  ASSERT_EQ(body.size(), 4u + 82 + 24);
  ASSERT_EQ(body[76], 0);
  for (uint8_t cls : {2, 3, 0x80, 0xff}) {
    body[76] = cls;
    Status s = DecodeAny(T(MsgType::kListTreeReply), body);
    EXPECT_ERROR(s, Code::kProtocol);
    EXPECT_NE(s.message().find("node.class"), std::string::npos) << s.message();
  }
  body[76] = 1;
  EXPECT_OK(DecodeAny(T(MsgType::kListTreeReply), body));
}

TEST(MessagesTest, ChangesRoundTrip) {
  ChangesRequest q{0xfedcba9876543210ULL, 123456, 77};
  ChangesRequest oq = RoundTrip(T(MsgType::kChanges), q);
  EXPECT_EQ(oq.epoch, q.epoch);
  EXPECT_EQ(oq.since, q.since);
  EXPECT_EQ(oq.max, q.max);
  ChangesReply r;
  r.changes.epoch = 42;
  r.changes.next = 1'000'000'007;
  r.changes.lost = true;
  r.changes.more = true;
  for (uint8_t k = 1; k <= kLastChangeKind; ++k) {
    r.changes.changes.push_back(TreeChange{static_cast<ChangeKind>(k), "ns#" + std::to_string(k), ChainKey{k, 9},
                                           ChainKey{0, k}});
  }
  ChangesReply o = RoundTrip(T(MsgType::kChangesReply), r);
  EXPECT_EQ(o.changes.epoch, 42u);
  EXPECT_EQ(o.changes.next, r.changes.next);
  EXPECT_TRUE(o.changes.lost);
  EXPECT_TRUE(o.changes.more);
  EXPECT_EQ(o.changes.changes, r.changes.changes);
  // A kind outside the registry is a protocol error naming the field.
  for (uint8_t bad : {uint8_t{0}, uint8_t{kLastChangeKind + 1}, uint8_t{0xff}}) {
    ChangesReply one;
    one.changes.changes.push_back(TreeChange{ChangeKind::kAdded, "ns", ChainKey{1, 2}, ChainKey{}});
    Encoder e;
    one.Encode(e);
    std::vector<uint8_t> body = e.Take();
    body[8 + 8 + 1 + 1 + 4] = bad;  // epoch, next, lost, more, count, then the kind
    Status s = DecodeAny(T(MsgType::kChangesReply), body);
    EXPECT_ERROR(s, Code::kProtocol) << int{bad};
    EXPECT_NE(s.message().find("change.kind"), std::string::npos) << s.message();
  }
}

TEST(MessagesTest, QuotasRoundTrip) {
  SetQuotaRequest q{"mistral", kQuotaSetDram | kQuotaSetSsd, 4ull << 30, 1ull << 40};
  SetQuotaRequest oq = RoundTrip(T(MsgType::kSetQuota), q);
  EXPECT_EQ(oq.ns, q.ns);
  EXPECT_EQ(oq.set, q.set);
  EXPECT_EQ(oq.dram_quota, q.dram_quota);
  EXPECT_EQ(oq.ssd_quota, q.ssd_quota);
  // `set` names DRAM and/or SSD, nothing else.
  for (uint8_t bad : {uint8_t{0}, uint8_t{4}, uint8_t{7}, uint8_t{0xff}}) {
    SetQuotaRequest one{"m", kQuotaSetDram, 1, 2};
    std::vector<uint8_t> body = EncodeBody(one);
    body[4 + 1] = bad;  // after the name's length and its one byte
    Status st = DecodeAny(T(MsgType::kSetQuota), body);
    EXPECT_ERROR(st, Code::kProtocol) << int{bad};
    EXPECT_NE(st.message().find("'set'"), std::string::npos) << st.message();
  }
  NamespaceQuota a{"a", 1, 2, 3, 4, 5, 6, 7};
  SetQuotaReply r{a};
  EXPECT_EQ(RoundTrip(T(MsgType::kSetQuotaReply), r).quota, a);
  QuotasRequest g{"a"};
  EXPECT_EQ(RoundTrip(T(MsgType::kQuotas), g).ns, "a");
  QuotasReply all;
  all.quotas = {a, NamespaceQuota{"b", 0, 0, 0, 0, 0, 0, 0}};
  EXPECT_EQ(RoundTrip(T(MsgType::kQuotasReply), all).quotas, all.quotas);
  // A count larger than the body can hold is refused before allocating.
  std::vector<uint8_t> body = {0xff, 0xff, 0xff, 0x7f};
  EXPECT_ERROR(DecodeAny(T(MsgType::kQuotasReply), body), Code::kProtocol);
}

TEST(MessagesTest, SetTimesRoundTrip) {
  SetTimesRequest q{"mistral", ChainKey{7, 8}, 1'700'000'000'123'456'789ull, 0};
  SetTimesRequest oq = RoundTrip(T(MsgType::kSetTimes), q);
  EXPECT_EQ(oq.ns, q.ns);
  EXPECT_EQ(oq.key, q.key);
  EXPECT_EQ(oq.atime_ns, q.atime_ns);
  EXPECT_EQ(oq.mtime_ns, 0u);
  SetTimesReply r;
  r.node.key = ChainKey{7, 8};
  r.node.times = Times{1, 2, 3};
  SetTimesReply o = RoundTrip(T(MsgType::kSetTimesReply), r);
  EXPECT_EQ(o.node.key, r.node.key);
  EXPECT_EQ(o.node.times, r.node.times);
  // Cut short inside its times: an error naming them.
  std::vector<uint8_t> body = EncodeBody(r);
  body.resize(body.size() - 4);
  Status s = DecodeAny(T(MsgType::kSetTimesReply), body);
  EXPECT_ERROR(s, Code::kProtocol);
  EXPECT_NE(s.message().find("times.ctime"), std::string::npos) << s.message();
}

// ---- hostile counts -------------------------------------------------------------

std::vector<Hostile> HostileBodies() {
  std::vector<Hostile> out;
  std::vector<uint8_t> ns_prefix = EncodeBody(NameRequest{"ns"});  // u32 len + "ns"
  std::vector<uint8_t> u64x2(16, 1);                                // matched_tokens, lease_id
  std::vector<uint8_t> remove_prefix = ns_prefix;
  remove_prefix.push_back(0);                          // by_key
  remove_prefix.resize(remove_prefix.size() + 16, 2);  // key
  std::vector<uint8_t> create_prefix = EncodeBody(NameRequest{"n"});
  create_prefix.resize(create_prefix.size() + 17, 1);  // layout
  std::vector<uint8_t> grouped_prefix = EncodeBody(NameRequest{"n"});
  grouped_prefix.resize(grouped_prefix.size() + 13, 0);  // layers, kv_heads, head_dim, dtype: 0
  grouped_prefix.insert(grouped_prefix.end(), {16, 0, 0, 0});  // block_tokens
  std::vector<uint8_t> info_prefix = grouped_prefix;     // NamespaceInfo: name, then the layout
  for (uint32_t count : {0xffffffffu, 0x80000000u, 1u << 22, (1u << 22) + 1, 1000000u, 100u}) {
    for (size_t tail : {size_t{0}, size_t{7}, size_t{200}}) {
      // Arrays: even 100 elements need more than 200 bytes.
      out.push_back({"namespaces", T(MsgType::kListNamespacesReply), WithCount({}, count, tail)});
      out.push_back({"extents", T(MsgType::kLookupReply), WithCount(u64x2, count, tail)});
      out.push_back({"nodes", T(MsgType::kListTreeReply), WithCount({}, count, tail)});
      out.push_back({"tokens", T(MsgType::kSave), WithCount(ns_prefix, count, tail)});
      out.push_back({"tokens", T(MsgType::kLookup), WithCount(ns_prefix, count, tail)});
      out.push_back({"tokens", T(MsgType::kRemove), WithCount(remove_prefix, count, tail)});
      if (count <= tail) continue;  // a string of `count` bytes would fit
      out.push_back({"name", T(MsgType::kGetNamespace), WithCount({}, count, tail)});
      out.push_back({"client_name", T(MsgType::kHello), WithCount({}, count, tail)});
      out.push_back({"message", T(MsgType::kError), WithCount({9, 0}, count, tail)});
      out.push_back({"ns", T(MsgType::kListTree), WithCount({}, count, tail)});
      out.push_back({"salt", T(MsgType::kCreateNamespace), WithCount(create_prefix, count, tail)});
      // A grouped layout's group count (layers 0, dtype 0).
      out.push_back({"layout.groups", T(MsgType::kCreateNamespace), WithCount(grouped_prefix, count, tail)});
      out.push_back({"layout.groups", T(MsgType::kGetNamespaceReply), WithCount(info_prefix, count, tail)});
    }
  }
  return out;
}

TEST(MessagesTest, HostileCountsAreRejectedWithoutHugeAllocations) {
  ExpectHostileBodiesRejected(HostileBodies());
}

TEST(MessagesTest, LargestCountThatFitsAllocatesInProportionToTheBody) {
  // The largest count each list's bound admits, over junk elements: whether
  // the decode then succeeds (fixed-size extents) or fails part way, it never
  // allocated more than a small multiple of the body.
  struct Case {
    uint16_t type;
    size_t prefix_len;
    size_t min_elem;  // the bound in messages.cc
  };
  for (const Case& c : {Case{T(MsgType::kListNamespacesReply), 0, 74}, Case{T(MsgType::kLookupReply), 16, 32},
                        Case{T(MsgType::kListTreeReply), 0, 106}}) {
    for (uint8_t fill : {0x00, 0x01, 0xff}) {
      SCOPED_TRACE(std::string(MsgTypeName(c.type)) + " fill " + std::to_string(fill));
      const size_t elems_bytes = 100000;
      std::vector<uint8_t> body(c.prefix_len + 4 + elems_bytes, fill);
      uint32_t count = static_cast<uint32_t>(elems_bytes / c.min_elem);
      std::memcpy(body.data() + c.prefix_len, &count, 4);
      const auto [s, max_alloc] = DecodeProbed(c.type, body);
      EXPECT_TRUE(s.ok() || s.code() == Code::kProtocol) << s.ToString();
      EXPECT_LE(max_alloc, 4 * body.size()) << s.ToString();
    }
  }
}

TEST(MessagesTest, ExactCountWithAllBytesPresentDecodes) {
  // Boundary: count * min_size == remaining must be accepted.
  PrefixReply r;
  r.extents.resize(1000);
  EXPECT_OK(DecodeAny(T(MsgType::kPinReply), EncodeBody(r)));
  ListTreeReply t;
  t.nodes.resize(1000);
  EXPECT_OK(DecodeAny(T(MsgType::kListTreeReply), EncodeBody(t)));
  ListNamespacesReply n;
  n.namespaces.resize(1000);
  EXPECT_OK(DecodeAny(T(MsgType::kListNamespacesReply), EncodeBody(n)));
}

}  // namespace
}  // namespace ptstore::core
