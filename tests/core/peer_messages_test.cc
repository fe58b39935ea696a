// Tests of the node-to-node messages (core/peer_messages.h): every message
// round-trips through a frame with non-trivial values (namespace
// definitions with layout and salt, owned ranges, fetch segments and RMA
// pieces, cluster members); every decoder is total: every truncation of a
// valid encoding, trailing bytes, bad enums, segments that end before they
// start and hostile counts give kProtocol without crashing or allocating
// more than the body describes; and DecodeAny knows every new type.
#include "core/peer_messages.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <new>
#include <string>
#include <vector>

#include "core/messages.h"
#include "core/wire_types.h"

#include "tests/core/hostile_bodies.h"
#include "tests/core/message_test_util.h"
#include "tests/testing/status_matchers.h"

namespace ptstore::core {
namespace {

using namespace testmsg;  // NOLINT: the shared samples and RoundTrip


// ---- samples with non-trivial values ----------------------------------------

NamespaceDef SampleDef(int i) {
  NamespaceDef d;
  d.info.name = "llama-3-70b#" + std::to_string(i);
  d.info.layout = i == 2 ? GroupedLayout() : i % 2 ? MistralLayout() : OddLayout();
  d.info.salted = true;
  d.info.uid = 1000 + i;
  d.info.gid = 0xfffffffe - i;
  d.info.mode = 0750;
  d.info.bytes = (uint64_t{1} << 41) + i;
  d.info.prefixes = 0x0123456789abcdefULL - i;
  d.salt = std::string("tenant-\0salt\xff", 13) + std::to_string(i);  // binary, with a NUL
  return d;
}

void ExpectSameDef(const NamespaceDef& a, const NamespaceDef& b) {
  ExpectSameInfo(a.info, b.info);
  EXPECT_EQ(a.salt, b.salt);
}

void ExpectSameMember(const MemberInfo& a, const MemberInfo& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.address, b.address);
  EXPECT_EQ(a.state, b.state);
  EXPECT_EQ(a.incarnation, b.incarnation);
  EXPECT_EQ(a.arena_bytes, b.arena_bytes);
  EXPECT_EQ(a.used_bytes, b.used_bytes);
  EXPECT_EQ(a.owned_bytes, b.owned_bytes);
  EXPECT_EQ(a.replica_bytes, b.replica_bytes);
  EXPECT_EQ(a.rtt_us, b.rtt_us);
  EXPECT_EQ(a.last_seen_ms, b.last_seen_ms);
}

// ---- registry -------------------------------------------------------------

TEST(PeerMsgTypeTest, NamesOfTheNewTypes) {
  struct Name {
    MsgType type;
    const char* name;
  };
  for (const Name& n : {Name{MsgType::kPeerPing, "PeerPing"}, Name{MsgType::kShardLookup, "ShardLookup"},
                        Name{MsgType::kShardAnnounce, "ShardAnnounce"}, Name{MsgType::kPeerFetch, "PeerFetch"},
                        Name{MsgType::kPeerRelease, "PeerRelease"}, Name{MsgType::kPeerRemove, "PeerRemove"},
                        Name{MsgType::kClusterStatus, "ClusterStatus"}, Name{MsgType::kPeerTiers, "PeerTiers"}}) {
    EXPECT_STREQ(MsgTypeName(T(n.type)), n.name);
    EXPECT_EQ(std::string(MsgTypeName(T(n.type) + 1)), std::string(n.name) + "Reply");
    EXPECT_EQ(T(n.type) % 2, 0) << n.name;
  }
}

TEST(PeerMsgTypeTest, EnumNames) {
  EXPECT_STREQ(DataPathName(DataPath::kTcp), "tcp");
  EXPECT_STREQ(DataPathName(DataPath::kRma), "rma");
  EXPECT_STREQ(MemberStateName(MemberState::kSelf), "self");
  EXPECT_STREQ(MemberStateName(MemberState::kAlive), "alive");
  EXPECT_STREQ(MemberStateName(MemberState::kSuspect), "suspect");
  EXPECT_STREQ(MemberStateName(MemberState::kDead), "dead");
}

TEST(PeerMsgTypeTest, DecodeAnyAcceptsEveryNewType) {
  // Replies without a body of their own.
  for (MsgType t : {MsgType::kShardAnnounceReply, MsgType::kPeerReleaseReply, MsgType::kClusterStatus}) {
    EXPECT_OK(DecodeAny(T(t), {})) << MsgTypeName(T(t));
    std::vector<uint8_t> one = {0};
    EXPECT_ERROR(DecodeAny(T(t), one), Code::kProtocol) << MsgTypeName(T(t));
  }
  // Each body type once more through DecodeAny (RoundTrip checks it with
  // real values below).
  EXPECT_OK(DecodeAny(T(MsgType::kPeerPing), EncodeBody(PeerPing{})));
  EXPECT_OK(DecodeAny(T(MsgType::kPeerPingReply), EncodeBody(PeerPingReply{})));
  EXPECT_OK(DecodeAny(T(MsgType::kShardLookup), EncodeBody(ShardLookup{})));
  EXPECT_OK(DecodeAny(T(MsgType::kShardLookupReply), EncodeBody(ShardLookupReply{})));
  EXPECT_OK(DecodeAny(T(MsgType::kShardAnnounce), EncodeBody(ShardAnnounce{})));
  EXPECT_OK(DecodeAny(T(MsgType::kPeerFetch), EncodeBody(PeerFetch{})));
  EXPECT_OK(DecodeAny(T(MsgType::kPeerFetchReply), EncodeBody(PeerFetchReply{})));
  EXPECT_OK(DecodeAny(T(MsgType::kPeerRelease), EncodeBody(PeerRelease{})));
  EXPECT_OK(DecodeAny(T(MsgType::kPeerRemove), EncodeBody(PeerRemove{})));
  EXPECT_OK(DecodeAny(T(MsgType::kPeerRemoveReply), EncodeBody(RemoveReply{})));
  EXPECT_OK(DecodeAny(T(MsgType::kClusterStatusReply), EncodeBody(ClusterStatusReply{})));
  EXPECT_OK(DecodeAny(T(MsgType::kPeerTiers), EncodeBody(PeerTiers{})));
  EXPECT_OK(DecodeAny(T(MsgType::kPeerTiersReply), EncodeBody(PeerTiersReply{})));
  // A body of one type under another is refused (no type is a prefix of all).
  EXPECT_ERROR(DecodeAny(T(MsgType::kPeerPing), EncodeBody(PeerPingReply{})), Code::kProtocol);
}

// ---- round trips -------------------------------------------------------------

TEST(PeerMessagesTest, PeerPing) {
  PeerPing m;
  m.node_id = 0xfffffff0;
  m.incarnation = 0x8000000000000001ULL;
  PeerPing o = RoundTrip(T(MsgType::kPeerPing), m);
  EXPECT_EQ(o.node_id, m.node_id);
  EXPECT_EQ(o.incarnation, m.incarnation);
}

TEST(PeerMessagesTest, PeerPingReply) {
  PeerPingReply m;
  m.node_id = 7;
  m.incarnation = 0x0102030405060708ULL;
  m.arena_bytes = uint64_t{1} << 40;
  m.used_bytes = (uint64_t{1} << 39) + 3;
  m.owned_bytes = (uint64_t{1} << 38) + 5;
  m.replica_bytes = (uint64_t{1} << 37) + 7;
  m.fabric_provider = "verbs;ofi_rxm";
  m.fabric_address = std::string("\x00\x01\x02\xff\xfe", 5) + std::string(200, 'a');
  m.region_key = 0xdeadbeefcafef00dULL;
  PeerPingReply o = RoundTrip(T(MsgType::kPeerPingReply), m);
  EXPECT_EQ(o.node_id, m.node_id);
  EXPECT_EQ(o.incarnation, m.incarnation);
  EXPECT_EQ(o.arena_bytes, m.arena_bytes);
  EXPECT_EQ(o.used_bytes, m.used_bytes);
  EXPECT_EQ(o.owned_bytes, m.owned_bytes);
  EXPECT_EQ(o.replica_bytes, m.replica_bytes);
  EXPECT_EQ(o.fabric_provider, m.fabric_provider);
  EXPECT_EQ(o.fabric_address, m.fabric_address);
  EXPECT_EQ(o.region_key, m.region_key);
}

TEST(PeerMessagesTest, ShardLookupCarriesTheNamespaceDefinition) {
  for (int i : {0, 1, 2}) {
    ShardLookup m;
    m.ns = SampleDef(i);
    m.tokens = WideTokens(i, 37);
    ShardLookup o = RoundTrip(T(MsgType::kShardLookup), m);
    ExpectSameDef(o.ns, m.ns);
    EXPECT_EQ(o.tokens, m.tokens);
  }
}

TEST(PeerMessagesTest, ShardLookupReply) {
  ShardLookupReply m;
  m.blocks = 40;
  m.ranges = {{3, 0}, {17, 0xffffffff}, {18, 2}, {40, 1}};
  for (bool continues : {true, false}) {
    m.continues = continues;
    ShardLookupReply o = RoundTrip(T(MsgType::kShardLookupReply), m);
    EXPECT_EQ(o.blocks, m.blocks);
    EXPECT_EQ(o.ranges, m.ranges);
    EXPECT_EQ(o.continues, continues);
  }
  // Cut before its last field: a clear error naming it.
  std::vector<uint8_t> body = EncodeBody(m);
  body.pop_back();
  const Status s = DecodeAny(T(MsgType::kShardLookupReply), body);
  EXPECT_ERROR(s, Code::kProtocol);
  EXPECT_NE(s.message().find("continues"), std::string::npos) << s.message();
}

TEST(PeerMessagesTest, ShardAnnounceWithSeveralEntries) {
  ShardAnnounce m;
  m.ns = SampleDef(3);
  m.entries.push_back({WideTokens(1, 64), {{4, 1}, {16, 2}}});
  m.entries.push_back({{}, {}});  // empty entry
  m.entries.push_back({WideTokens(9, 5), {{1, 0}}});
  ShardAnnounce o = RoundTrip(T(MsgType::kShardAnnounce), m);
  ExpectSameDef(o.ns, m.ns);
  ASSERT_EQ(o.entries.size(), m.entries.size());
  for (size_t i = 0; i < m.entries.size(); ++i) {
    EXPECT_EQ(o.entries[i].tokens, m.entries[i].tokens) << i;
    EXPECT_EQ(o.entries[i].ranges, m.entries[i].ranges) << i;
  }
  RoundTrip(T(MsgType::kShardAnnounceReply), EmptyReply{});
}

TEST(PeerMessagesTest, PeerFetchOnBothDataPaths) {
  for (DataPath path : {DataPath::kTcp, DataPath::kRma}) {
    SCOPED_TRACE(DataPathName(path));
    PeerFetch m;
    m.ns = SampleDef(4);
    m.tokens = WideTokens(4, 96);
    m.segments = {{0, 2}, {4, 6}, {6, 24}, {uint64_t{1} << 40, (uint64_t{1} << 40) + 1}};
    m.path = path;
    PeerFetch o = RoundTrip(T(MsgType::kPeerFetch), m);
    ExpectSameDef(o.ns, m.ns);
    EXPECT_EQ(o.tokens, m.tokens);
    ASSERT_EQ(o.segments.size(), m.segments.size());
    for (size_t i = 0; i < m.segments.size(); ++i) {
      EXPECT_EQ(o.segments[i].start_block, m.segments[i].start_block) << i;
      EXPECT_EQ(o.segments[i].end_block, m.segments[i].end_block) << i;
    }
    EXPECT_EQ(o.path, path);
  }
}

TEST(PeerMessagesTest, PeerFetchReplyWithPiecesAndStream) {
  PeerFetchReply m;
  m.segments.resize(3);
  m.segments[0].blocks = 2;
  m.segments[0].pieces = {{4096, 2048}};
  m.segments[1].blocks = 0;
  m.segments[1].gone = true;
  m.segments[2].blocks = 18;
  m.segments[2].pieces = {{1 << 20, 8192}, {uint64_t{1} << 36, 10240}};
  m.lease_id = 0x77;
  m.stream_bytes = 0;
  PeerFetchReply o = RoundTrip(T(MsgType::kPeerFetchReply), m);
  ASSERT_EQ(o.segments.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(o.segments[i].blocks, m.segments[i].blocks) << i;
    EXPECT_EQ(o.segments[i].gone, m.segments[i].gone) << i;
    ASSERT_EQ(o.segments[i].pieces.size(), m.segments[i].pieces.size()) << i;
    for (size_t j = 0; j < m.segments[i].pieces.size(); ++j) {
      EXPECT_EQ(o.segments[i].pieces[j].remote_offset, m.segments[i].pieces[j].remote_offset);
      EXPECT_EQ(o.segments[i].pieces[j].length, m.segments[i].pieces[j].length);
    }
  }
  EXPECT_EQ(o.lease_id, m.lease_id);
  // TCP: no pieces, a stream length.
  PeerFetchReply tcp;
  tcp.segments = {{4, false, {}}, {0, true, {}}};
  tcp.stream_bytes = 4 * 131072;
  PeerFetchReply ot = RoundTrip(T(MsgType::kPeerFetchReply), tcp);
  EXPECT_EQ(ot.stream_bytes, tcp.stream_bytes);
  ASSERT_EQ(ot.segments.size(), 2u);
  EXPECT_EQ(ot.segments[0].blocks, 4u);
  EXPECT_FALSE(ot.segments[0].gone);
  EXPECT_TRUE(ot.segments[1].gone);
}

TEST(PeerMessagesTest, PeerReleaseAndRemove) {
  PeerRelease r;
  r.fetch_id = 0xfedcba9876543210ULL;
  EXPECT_EQ(RoundTrip(T(MsgType::kPeerRelease), r).fetch_id, r.fetch_id);
  RoundTrip(T(MsgType::kPeerReleaseReply), EmptyReply{});

  PeerRemove m;
  m.ns = "llama-3-70b";
  m.tokens = WideTokens(5, 33);
  m.from_block = 7;
  PeerRemove o = RoundTrip(T(MsgType::kPeerRemove), m);
  EXPECT_EQ(o.ns, m.ns);
  EXPECT_EQ(o.tokens, m.tokens);
  EXPECT_EQ(o.from_block, m.from_block);
  RemoveReply rr;
  rr.nodes = 3;
  rr.bytes = 3 * 131072;
  RemoveReply orr = RoundTrip(T(MsgType::kPeerRemoveReply), rr);
  EXPECT_EQ(orr.nodes, rr.nodes);
  EXPECT_EQ(orr.bytes, rr.bytes);
}

TEST(PeerMessagesTest, PeerTiersAndReply) {
  PeerTiers m;
  m.ns = "llama-3-70b";
  m.entries.push_back({WideTokens(3, 32), 0});
  m.entries.push_back({WideTokens(4, 64), 2});
  m.hashes = {ChainKey{1, 2}, ChainKey{0xfedcba9876543210ULL, 0x0123456789abcdefULL}};
  m.low64 = true;
  PeerTiers o = RoundTrip(T(MsgType::kPeerTiers), m);
  EXPECT_EQ(o.ns, m.ns);
  ASSERT_EQ(o.entries.size(), 2u);
  EXPECT_EQ(o.entries[1].tokens, m.entries[1].tokens);
  EXPECT_EQ(o.entries[1].from_block, 2u);
  EXPECT_EQ(o.hashes, m.hashes);
  EXPECT_TRUE(o.low64);
  PeerTiersReply r;
  r.media = {3, 0, 1, 2};
  r.tokens = WideTokens(9, 16);
  PeerTiersReply orr = RoundTrip(T(MsgType::kPeerTiersReply), r);
  EXPECT_EQ(orr.media, r.media);
  EXPECT_EQ(orr.tokens, r.tokens);
  // A medium that is not a set of DRAM and SSD is refused, naming it.
  r.media = {4};
  Status s = DecodeAny(T(MsgType::kPeerTiersReply), EncodeBody(r));
  EXPECT_ERROR(s, Code::kProtocol);
  EXPECT_NE(s.message().find("media 4"), std::string::npos) << s.message();
}

MemberInfo SampleMember(uint32_t id, MemberState state, std::string address) {
  MemberInfo m;
  m.id = id;
  m.address = std::move(address);
  m.state = state;
  m.incarnation = 0x1000 + id;
  m.arena_bytes = uint64_t{1} << 36;
  m.used_bytes = (uint64_t{1} << 35) + id;
  m.owned_bytes = (uint64_t{1} << 34) + id;
  m.replica_bytes = (uint64_t{1} << 33) + id;
  m.rtt_us = 150 + id;
  m.last_seen_ms = state == MemberState::kSelf ? 0 : 1234 + id;
  return m;
}

TEST(PeerMessagesTest, ClusterStatusReplyWithEveryMemberState) {
  ClusterStatusReply m;
  m.self_id = 1;
  m.enabled = true;
  m.data_path = "rma";
  m.fabric_provider = "verbs";
  m.members = {SampleMember(0, MemberState::kAlive, "10.0.0.1:7400"),
               SampleMember(1, MemberState::kSelf, "10.0.0.2:7400"),
               SampleMember(2, MemberState::kSuspect, "node-2.cluster.local:7400"),
               SampleMember(3, MemberState::kDead, "[fd00::3]:7400")};
  ClusterStatusReply o = RoundTrip(T(MsgType::kClusterStatusReply), m);
  EXPECT_EQ(o.self_id, m.self_id);
  EXPECT_EQ(o.enabled, m.enabled);
  EXPECT_EQ(o.data_path, m.data_path);
  EXPECT_EQ(o.fabric_provider, m.fabric_provider);
  ASSERT_EQ(o.members.size(), m.members.size());
  for (size_t i = 0; i < m.members.size(); ++i) ExpectSameMember(o.members[i], m.members[i]);
  RoundTrip(T(MsgType::kClusterStatus), EmptyReply{});
}

// A member's address is whatever the cluster file says: "n1:7400" (7 bytes)
// or nothing (a member not yet resolved) must round-trip like a long one.
TEST(PeerMessagesTest, ClusterStatusReplyWithShortAddresses) {
  for (const std::string& address : {std::string(), std::string("n1:7400"), std::string("h:1")}) {
    SCOPED_TRACE("address '" + address + "'");
    ClusterStatusReply m;
    m.self_id = 0;
    m.enabled = true;
    m.data_path = "tcp";
    m.members = {SampleMember(0, MemberState::kSelf, address), SampleMember(1, MemberState::kAlive, address)};
    ClusterStatusReply o = RoundTrip(T(MsgType::kClusterStatusReply), m);
    ASSERT_EQ(o.members.size(), 2u);
    for (size_t i = 0; i < 2; ++i) ExpectSameMember(o.members[i], m.members[i]);
  }
  ClusterStatusReply one;  // a default member
  one.members.resize(1);
  EXPECT_EQ(RoundTrip(T(MsgType::kClusterStatusReply), one).members.size(), 1u);
}

TEST(PeerMessagesTest, DefaultMessagesRoundTripToo) {
  RoundTrip(T(MsgType::kPeerPing), PeerPing{});
  RoundTrip(T(MsgType::kPeerPingReply), PeerPingReply{});
  RoundTrip(T(MsgType::kShardLookup), ShardLookup{});
  RoundTrip(T(MsgType::kShardLookupReply), ShardLookupReply{});
  RoundTrip(T(MsgType::kShardAnnounce), ShardAnnounce{});
  RoundTrip(T(MsgType::kPeerFetch), PeerFetch{});
  RoundTrip(T(MsgType::kPeerFetchReply), PeerFetchReply{});
  RoundTrip(T(MsgType::kPeerRelease), PeerRelease{});
  RoundTrip(T(MsgType::kPeerRemove), PeerRemove{});
  RoundTrip(T(MsgType::kClusterStatusReply), ClusterStatusReply{});
  // (A default member: ClusterStatusReplyWithShortAddresses.)
  // Empty elements of every list.
  ShardAnnounce a;
  a.entries.resize(3);
  RoundTrip(T(MsgType::kShardAnnounce), a);
  PeerFetchReply r;
  r.segments.resize(3);
  RoundTrip(T(MsgType::kPeerFetchReply), r);
}

// ---- bad values ---------------------------------------------------------------

// The offset of PeerFetch's first segment in its encoding.
size_t FirstSegmentOffset(const PeerFetch& m) {
  Encoder e;
  PutNamespaceInfo(e, m.ns.info);
  e.PutString(m.ns.salt);
  e.PutU32Array(m.tokens);
  e.PutU32(static_cast<uint32_t>(m.segments.size()));
  return e.buffer().size();
}

TEST(PeerMessagesTest, PeerFetchRefusesASegmentThatDoesNotEndAfterItsStart) {
  PeerFetch m;
  m.ns = SampleDef(1);
  m.tokens = WideTokens(0, 8);
  m.segments = {{0, 1}, {3, 5}};
  const size_t at = FirstSegmentOffset(m);
  ASSERT_OK(DecodeAny(T(MsgType::kPeerFetch), EncodeBody(m)));
  struct Bad {
    uint64_t start, end;
    size_t which;
  };
  for (const Bad& b : {Bad{5, 5, 1}, Bad{6, 2, 1}, Bad{0, 0, 0}, Bad{UINT64_MAX, 0, 0}, Bad{1, 0, 0},
                       Bad{UINT64_MAX, UINT64_MAX, 1}}) {
    SCOPED_TRACE("segment " + std::to_string(b.which) + " [" + std::to_string(b.start) + ", " +
                 std::to_string(b.end) + ")");
    std::vector<uint8_t> body = EncodeBody(m);
    std::memcpy(body.data() + at + 16 * b.which, &b.start, 8);
    std::memcpy(body.data() + at + 16 * b.which + 8, &b.end, 8);
    Status s = DecodeAny(T(MsgType::kPeerFetch), body);
    EXPECT_ERROR(s, Code::kProtocol);
    EXPECT_NE(s.message().find("segment"), std::string::npos) << s.message();
    PeerFetch out;
    Decoder d(body);
    EXPECT_ERROR(out.Decode(d), Code::kProtocol);
  }
  // Through the encoder too.
  PeerFetch bad = m;
  bad.segments.push_back({9, 9});
  EXPECT_ERROR(DecodeAny(T(MsgType::kPeerFetch), EncodeBody(bad)), Code::kProtocol);
}

TEST(PeerMessagesTest, PeerFetchRefusesAnUnknownDataPath) {
  PeerFetch m;
  m.ns = SampleDef(0);
  m.tokens = WideTokens(0, 4);
  m.segments = {{0, 1}};
  m.path = DataPath::kRma;
  std::vector<uint8_t> body = EncodeBody(m);
  ASSERT_EQ(body.back(), 1);
  for (uint8_t p : {2, 3, 0x7f, 0xff}) {
    body.back() = p;
    Status s = DecodeAny(T(MsgType::kPeerFetch), body);
    EXPECT_ERROR(s, Code::kProtocol) << int(p);
    EXPECT_NE(s.message().find("data path"), std::string::npos) << s.message();
  }
  body.back() = 0;
  EXPECT_OK(DecodeAny(T(MsgType::kPeerFetch), body));
}

TEST(PeerMessagesTest, LocatePrefixRoundTrips) {
  LocatePrefixRequest q;
  q.ns = "mistral-7b";
  q.tokens = WideTokens(3, 48);
  LocatePrefixRequest oq = RoundTrip(T(MsgType::kLocatePrefix), q);
  EXPECT_EQ(oq.ns, q.ns);
  EXPECT_EQ(oq.tokens, q.tokens);
  LocatePrefixReply r;
  r.location.matched_tokens = 48;
  r.location.spans = {PrefixSpan{16, 0, {0, 1}}, PrefixSpan{32, 2, {}}, PrefixSpan{48, 2, {2, 0}}};
  LocatePrefixReply o = RoundTrip(T(MsgType::kLocatePrefixReply), r);
  EXPECT_EQ(o.location.matched_tokens, 48u);
  EXPECT_EQ(o.location.spans, r.location.spans);
  // HeldBy: the run from the start that a node holds.
  EXPECT_EQ(o.location.HeldBy(0), 16u);
  EXPECT_EQ(o.location.HeldBy(1), 16u);
  EXPECT_EQ(o.location.HeldBy(2), 0u);
  EXPECT_EQ(o.location.HeldBy(7), 0u);
  // TokensHeldBy: every span a node holds, wherever it is.
  EXPECT_EQ(o.location.TokensHeldBy(0), 32u);
  EXPECT_EQ(o.location.TokensHeldBy(1), 16u);
  EXPECT_EQ(o.location.TokensHeldBy(2), 16u);
  EXPECT_EQ(o.location.TokensHeldBy(7), 0u);
  RoundTrip(T(MsgType::kLocatePrefixReply), LocatePrefixReply{});
}

TEST(PeerMessagesTest, LocatePrefixReplyRefusesSpansThatDoNotTileTheMatch) {
  auto refused = [](PrefixLocation loc, const char* what) {
    LocatePrefixReply r;
    r.location = std::move(loc);
    Status s = DecodeAny(T(MsgType::kLocatePrefixReply), EncodeBody(r));
    EXPECT_ERROR(s, Code::kProtocol) << what;
    EXPECT_NE(s.message().find("LocatePrefixReply"), std::string::npos) << s.message();
  };
  refused({32, {PrefixSpan{16, 0, {}}, PrefixSpan{16, 1, {}}, PrefixSpan{32, 1, {}}}}, "a span of no tokens");
  refused({32, {PrefixSpan{48, 0, {}}}}, "a span past the match");
  refused({32, {PrefixSpan{16, 0, {}}}}, "spans short of the match");
  refused({16, {}}, "a match without spans");
}

TEST(PeerMessagesTest, ClusterStatusReplyRefusesAnUnknownMemberState) {
  ClusterStatusReply m;
  m.data_path = "tcp";
  m.members = {SampleMember(4, MemberState::kAlive, "10.1.2.3:7400")};
  std::vector<uint8_t> body = EncodeBody(m);
  // self_id(4) enabled(1) data_path(4+3) provider(4+0) count(4) id(4) address(4+13) -> state.
  const size_t at = 4 + 1 + 7 + 4 + 4 + 4 + 4 + 13;
  ASSERT_EQ(body[at], static_cast<uint8_t>(MemberState::kAlive));
  for (uint8_t st : {4, 5, 0x80, 0xff}) {
    body[at] = st;
    Status s = DecodeAny(T(MsgType::kClusterStatusReply), body);
    EXPECT_ERROR(s, Code::kProtocol) << int(st);
    EXPECT_NE(s.message().find("member state"), std::string::npos) << s.message();
  }
  body[at] = 3;
  EXPECT_OK(DecodeAny(T(MsgType::kClusterStatusReply), body));
}

TEST(PeerMessagesTest, BadBooleansAreRefused) {
  PeerFetchReply r;
  r.segments.resize(1);
  std::vector<uint8_t> body = EncodeBody(r);
  // count(4) blocks(8) -> gone.
  ASSERT_EQ(body[12], 0);
  body[12] = 2;
  Status s = DecodeAny(T(MsgType::kPeerFetchReply), body);
  EXPECT_ERROR(s, Code::kProtocol);
  EXPECT_NE(s.message().find("segment.gone"), std::string::npos) << s.message();

  ClusterStatusReply c;
  body = EncodeBody(c);
  ASSERT_EQ(body[4], 0);  // enabled
  body[4] = 7;
  s = DecodeAny(T(MsgType::kClusterStatusReply), body);
  EXPECT_ERROR(s, Code::kProtocol);
  EXPECT_NE(s.message().find("enabled"), std::string::npos) << s.message();
}

TEST(PeerMessagesTest, OverlongStringsAreRefused) {
  PeerRemove r;
  r.ns = std::string(4097, 'n');
  Status s = DecodeAny(T(MsgType::kPeerRemove), EncodeBody(r));
  EXPECT_ERROR(s, Code::kProtocol);
  EXPECT_NE(s.message().find("'ns'"), std::string::npos) << s.message();

  ShardLookup l;
  l.ns = SampleDef(0);
  l.ns.salt = std::string(4097, 's');
  s = DecodeAny(T(MsgType::kShardLookup), EncodeBody(l));
  EXPECT_ERROR(s, Code::kProtocol);
  EXPECT_NE(s.message().find("namespace.salt"), std::string::npos) << s.message();
  l.ns.salt = std::string(4096, 's');  // the limit itself is fine
  EXPECT_OK(DecodeAny(T(MsgType::kShardLookup), EncodeBody(l)));

  PeerPingReply p;
  p.fabric_provider = std::string(257, 'p');
  s = DecodeAny(T(MsgType::kPeerPingReply), EncodeBody(p));
  EXPECT_ERROR(s, Code::kProtocol);
  EXPECT_NE(s.message().find("fabric_provider"), std::string::npos) << s.message();
}

// ---- hostile counts -------------------------------------------------------------

std::vector<uint8_t> Bytes(std::initializer_list<std::vector<uint8_t>> parts) {
  std::vector<uint8_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

std::vector<uint8_t> U32(uint32_t v) {
  Encoder e;
  e.PutU32(v);
  return e.Take();
}

std::vector<Hostile> HostileBodies() {
  std::vector<Hostile> out;
  const NamespaceDef def = SampleDef(1);
  Encoder de;
  PutNamespaceInfo(de, def.info);
  const std::vector<uint8_t> info = de.Take();
  de.PutRaw(info.data(), info.size());
  de.PutString(def.salt);
  const std::vector<uint8_t> ns = de.Take();   // a whole NamespaceDef
  const std::vector<uint8_t> u64(8, 1);
  const std::vector<uint8_t> ping_prefix(4 + 5 * 8, 1);                       // node_id .. replica_bytes
  const std::vector<uint8_t> status_prefix = Bytes({U32(1), {1}, U32(0), U32(0)});  // id, enabled, "", ""
  const std::vector<uint8_t> announce_one = Bytes({ns, U32(1)});             // ns, 1 entry
  const std::vector<uint8_t> reply_one = Bytes({U32(1), u64, {0}});          // 1 segment: blocks, gone
  for (uint32_t count : {0xffffffffu, 0x80000000u, 1u << 22, (1u << 22) + 1, 1000000u, 100u}) {
    for (size_t tail : {size_t{0}, size_t{7}, size_t{200}}) {
      // Lists and arrays: even 100 elements need more than 200 bytes.
      out.push_back({"tokens", T(MsgType::kShardLookup), WithCount(ns, count, tail)});
      out.push_back({"ranges", T(MsgType::kShardLookupReply), WithCount(u64, count, tail)});
      out.push_back({"entries", T(MsgType::kShardAnnounce), WithCount(ns, count, tail)});
      // (4 more bytes: room for the one entry's two counts, or 'entries' fails first.)
      out.push_back({"entry.tokens", T(MsgType::kShardAnnounce), WithCount(announce_one, count, tail + 4)});
      out.push_back({"ranges", T(MsgType::kShardAnnounce), WithCount(Bytes({announce_one, U32(0)}), count, tail)});
      out.push_back({"tokens", T(MsgType::kPeerFetch), WithCount(ns, count, tail)});
      out.push_back({"segments", T(MsgType::kPeerFetch), WithCount(Bytes({ns, U32(0)}), count, tail)});
      out.push_back({"segments", T(MsgType::kPeerFetchReply), WithCount({}, count, tail)});
      out.push_back({"segment.pieces", T(MsgType::kPeerFetchReply), WithCount(reply_one, count, tail)});
      out.push_back({"tokens", T(MsgType::kPeerRemove), WithCount(Bytes({U32(2), {'n', 's'}}), count, tail)});
      out.push_back({"members", T(MsgType::kClusterStatusReply), WithCount(status_prefix, count, tail)});
      if (count <= tail) continue;  // a string of `count` bytes would fit
      out.push_back({"namespace.name", T(MsgType::kShardLookup), WithCount({}, count, tail)});
      out.push_back({"namespace.name", T(MsgType::kPeerFetch), WithCount({}, count, tail)});
      out.push_back({"namespace.salt", T(MsgType::kShardAnnounce), WithCount(info, count, tail)});
      out.push_back({"ns", T(MsgType::kPeerRemove), WithCount({}, count, tail)});
      out.push_back({"fabric_provider", T(MsgType::kPeerPingReply), WithCount(ping_prefix, count, tail)});
      out.push_back({"fabric_address", T(MsgType::kPeerPingReply),
                     WithCount(Bytes({ping_prefix, U32(0)}), count, tail)});
      out.push_back({"data_path", T(MsgType::kClusterStatusReply), WithCount(Bytes({U32(1), {1}}), count, tail)});
      out.push_back({"member.address", T(MsgType::kClusterStatusReply),
                     WithCount(Bytes({status_prefix, U32(1), U32(9)}), count, tail + 65)});
    }
  }
  return out;
}

TEST(PeerMessagesTest, HostileCountsAreRejectedWithoutHugeAllocations) {
  ExpectHostileBodiesRejected(HostileBodies());
}

TEST(PeerMessagesTest, LargestCountThatFitsAllocatesInProportionToTheBody) {
  // The largest count each list's bound admits, over junk elements: whether
  // the decode then succeeds or fails part way, it never allocated more than
  // a small multiple of the body.
  struct Case {
    const char* what;
    uint16_t type;
    std::vector<uint8_t> prefix;
    size_t min_elem;
    size_t elem_size;  // sizeof the decoded element
  };
  const std::vector<Case> cases = {
      {"ranges", T(MsgType::kShardLookupReply), std::vector<uint8_t>(8, 0), 12, sizeof(OwnedRange)},
      // a default NamespaceDef (+ no tokens, dropped below)
      {"entries", T(MsgType::kShardAnnounce), EncodeBody(ShardLookup{}), 8, sizeof(ShardAnnounce::Entry)},
      {"segments", T(MsgType::kPeerFetchReply), {}, 13, sizeof(PeerFetchReply::Segment)},
      {"members", T(MsgType::kClusterStatusReply), Bytes({U32(1), {1}, U32(0), U32(0)}), 65, sizeof(MemberInfo)},
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> prefix = c.prefix;
    if (c.type == T(MsgType::kShardAnnounce)) prefix.resize(prefix.size() - 4);  // drop the tokens count
    for (uint8_t fill : {0x00, 0x01, 0xff}) {
      SCOPED_TRACE(std::string(c.what) + " fill " + std::to_string(fill));
      const size_t elems_bytes = 100000;
      std::vector<uint8_t> body(prefix.size() + 4 + elems_bytes, fill);
      std::copy(prefix.begin(), prefix.end(), body.begin());
      uint32_t count = static_cast<uint32_t>(elems_bytes / c.min_elem);
      std::memcpy(body.data() + prefix.size(), &count, 4);
      const auto [s, max_alloc] = DecodeProbed(c.type, body);
      EXPECT_TRUE(s.ok() || s.code() == Code::kProtocol) << s.ToString();
      // In proportion: the decoded elements (a ShardAnnounce entry of 8
      // wire bytes is two vectors, 48 bytes) or 4x the body.
      const size_t factor = std::max<size_t>(4, c.elem_size / c.min_elem + 1);
      EXPECT_LE(max_alloc, factor * body.size()) << s.ToString();
    }
  }
}

TEST(PeerMessagesTest, ExactCountWithAllBytesPresentDecodes) {
  // Boundary: lists whose elements are all minimal, filling the body exactly.
  ShardLookupReply r;
  r.ranges.resize(1000);
  EXPECT_OK(DecodeAny(T(MsgType::kShardLookupReply), EncodeBody(r)));
  ShardAnnounce a;
  a.entries.resize(1000);
  EXPECT_OK(DecodeAny(T(MsgType::kShardAnnounce), EncodeBody(a)));
  PeerFetchReply f;
  f.segments.resize(1000);
  EXPECT_OK(DecodeAny(T(MsgType::kPeerFetchReply), EncodeBody(f)));
  PeerFetch pf;
  for (uint64_t i = 0; i < 1000; ++i) pf.segments.push_back({i, i + 1});
  EXPECT_OK(DecodeAny(T(MsgType::kPeerFetch), EncodeBody(pf)));
  ClusterStatusReply c;
  c.members.resize(1000);  // minimal members: empty addresses
  EXPECT_OK(DecodeAny(T(MsgType::kClusterStatusReply), EncodeBody(c)));
}

}  // namespace
}  // namespace ptstore::core
