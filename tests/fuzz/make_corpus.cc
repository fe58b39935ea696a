// Seed corpus for wire_fuzz: one valid, non-trivial encoded frame (header and
// body) per message type.
//
//   make_corpus <dir>   writes <dir>/<type>-<name>.bin, one file per type
//
// SampleFrames() is also linked into tests/core/wire_fuzz_replay_test.cc
// (built with PTSTORE_FUZZ_NO_MAIN) as the inputs it mutates.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/messages.h"
#include "core/peer_messages.h"
#include "core/wire.h"
#include "tests/testing/generators.h"

namespace ptstore::fuzz {

using namespace ptstore::core;  // NOLINT: test tool, every name is a message

namespace {

template <typename M>
std::pair<uint16_t, std::vector<uint8_t>> Frame(MsgType type, const M& m) {
  Encoder e;
  m.Encode(e);
  std::vector<uint8_t> body = e.Take();
  std::vector<uint8_t> frame(kFrameHeaderBytes);
  EncodeFrameHeader(static_cast<uint16_t>(type), 0x0102030405060708ULL + static_cast<uint16_t>(type), body,
                    frame.data());
  frame.insert(frame.end(), body.begin(), body.end());
  return {static_cast<uint16_t>(type), std::move(frame)};
}

// 1000, 1037, 1074, ...: the ids the seed frames have always had.
std::vector<uint32_t> Tokens(size_t n) { return ptstore::testing::SequentialTokens(1000, n, 37); }

NamespaceInfo Info(const std::string& name) {
  NamespaceInfo n;
  n.name = name;
  n.layout = MistralLayout();
  n.salted = true;
  n.uid = 1000;
  n.gid = 100;
  n.mode = 0750;
  n.bytes = 3 * 131072 * 16;
  n.prefixes = 3;
  return n;
}

}  // namespace

std::vector<std::pair<uint16_t, std::vector<uint8_t>>> SampleFrames() {
  std::vector<std::pair<uint16_t, std::vector<uint8_t>>> out;

  ErrorReply err;
  err.code = Code::kNotFound;
  err.message = "namespace 'x' does not exist";
  out.push_back(Frame(MsgType::kError, err));

  HelloRequest hello;
  hello.client_name = "fuzz-client";
  hello.want_mapping = true;
  out.push_back(Frame(MsgType::kHello, hello));
  HelloReply hello_reply;
  hello_reply.node_id = 3;
  hello_reply.arena_bytes = uint64_t{1} << 34;
  hello_reply.mapped = true;
  hello_reply.session_id = 77;
  hello_reply.lease_ms = 30000;
  out.push_back(Frame(MsgType::kHelloReply, hello_reply));

  out.push_back(Frame(MsgType::kRegisterBuffer, RegisterBufferRequest{.size = 1 << 26}));
  out.push_back(Frame(MsgType::kRegisterBufferReply, RegisterBufferReply{.buffer_id = 5}));

  CreateNamespaceRequest create;
  create.name = "mistral";
  create.layout = MistralLayout();
  create.salt = "tenant-a";
  create.mode = 0700;
  create.exist_ok = false;
  out.push_back(Frame(MsgType::kCreateNamespace, create));
  NamespaceReply ns_reply;
  ns_reply.info = Info("mistral");
  out.push_back(Frame(MsgType::kCreateNamespaceReply, ns_reply));
  out.push_back(Frame(MsgType::kGetNamespace, NameRequest{.name = "mistral"}));
  out.push_back(Frame(MsgType::kGetNamespaceReply, ns_reply));
  out.push_back(Frame(MsgType::kListNamespaces, NameRequest{.name = ""}));
  ListNamespacesReply list;
  list.namespaces = {Info("a"), Info("bb")};
  out.push_back(Frame(MsgType::kListNamespacesReply, list));

  SaveRequest save;
  save.ns = "mistral";
  save.tokens = Tokens(35);
  save.buffer_id = 5;
  save.buffer_offset = 4096;
  save.length = 2 * 16 * 131072;
  save.first_block = 0;
  out.push_back(Frame(MsgType::kSave, save));
  SaveReply save_reply;
  save_reply.matched_tokens = 16;
  save_reply.stored_tokens = 16;
  save_reply.new_bytes = 16 * 131072;
  out.push_back(Frame(MsgType::kSaveReply, save_reply));

  PrefixRequest prefix;
  prefix.ns = "mistral";
  prefix.tokens = Tokens(33);
  prefix.buffer_id = 5;
  prefix.buffer_offset = 0;
  prefix.capacity = 1 << 24;
  PrefixReply prefix_reply;
  prefix_reply.matched_tokens = 32;
  prefix_reply.lease_id = 9;
  prefix_reply.extents = {Extent{TensorId::Make(NodeId{0}, 1), 0, 16 * 131072, 1 << 20},
                          Extent{TensorId::Make(NodeId{2}, 8), 16 * 131072, 16 * 131072, 1 << 22}};
  for (MsgType t : {MsgType::kLookup, MsgType::kPin, MsgType::kLoadCopy}) {
    out.push_back(Frame(t, prefix));
    out.push_back(Frame(static_cast<MsgType>(static_cast<uint16_t>(t) + 1), prefix_reply));
  }

  out.push_back(Frame(MsgType::kRelease, ReleaseRequest{.lease_id = 9}));
  out.push_back(Frame(MsgType::kReleaseReply, EmptyReply{}));

  RemoveRequest remove;
  remove.ns = "mistral";
  remove.by_key = true;
  remove.key = ChainKey{0x1111, 0x2222};
  remove.tokens = Tokens(16);
  out.push_back(Frame(MsgType::kRemove, remove));
  out.push_back(Frame(MsgType::kRemoveReply, RemoveReply{.nodes = 2, .bytes = 32 * 131072}));

  out.push_back(Frame(MsgType::kStats, NameRequest{.name = "mistral"}));
  StatsReply stats;
  stats.stats.arena_bytes = uint64_t{1} << 34;
  stats.stats.used_bytes = 1 << 30;
  stats.stats.lookups = 100;
  stats.stats.hits = 60;
  stats.stats.expired_leases = 1;
  out.push_back(Frame(MsgType::kStatsReply, stats));

  ListTreeRequest tree;
  tree.ns = "mistral";
  tree.parent = ChainKey{};
  tree.recursive = true;
  out.push_back(Frame(MsgType::kListTree, tree));
  ListTreeReply tree_reply;
  PrefixNodeInfo node;
  node.key = ChainKey{0xaaaa, 0xbbbb};
  node.start_token = 0;
  node.tokens = 16;
  node.bytes = 16 * 131072;
  node.hits = 4;
  node.tensor = TensorId::Make(NodeId{1}, 3);
  node.cache_class = CacheClass::kReplica;
  node.children = 1;
  node.pins = 2;
  tree_reply.nodes.push_back(node);
  node.parent = node.key;
  node.key = ChainKey{0xcccc, 0xdddd};
  node.start_token = 16;
  node.cache_class = CacheClass::kOwned;
  node.children = 0;
  tree_reply.nodes.push_back(node);
  out.push_back(Frame(MsgType::kListTreeReply, tree_reply));

  out.push_back(Frame(MsgType::kDropNamespace, NameRequest{.name = "mistral"}));
  out.push_back(Frame(MsgType::kDropNamespaceReply, RemoveReply{.nodes = 5, .bytes = 5 * 131072}));
  out.push_back(Frame(MsgType::kUnregisterBuffer, UnregisterBufferRequest{.buffer_id = 3}));
  out.push_back(Frame(MsgType::kUnregisterBufferReply, EmptyReply{}));
  out.push_back(Frame(MsgType::kIncrement,
                      IncrementRequest{.ns = "mistral", .key = ChainKey{0xcccc, 0xdddd}, .pin = true}));
  IncrementReply inc;
  inc.node = node;
  inc.tokens = {1, 2, 3, 4};
  inc.lease_id = 9;
  inc.extents = {Extent{TensorId{7}, 0, 4096, 8192}};
  out.push_back(Frame(MsgType::kIncrementReply, inc));
  AuthHello ah{.node_id = 3};
  for (size_t i = 0; i < ah.nonce.size(); ++i) ah.nonce[i] = static_cast<uint8_t>(i * 7 + 1);
  out.push_back(Frame(MsgType::kAuthHello, ah));
  AuthHelloReply ahr{.node_id = 5};
  for (size_t i = 0; i < ahr.nonce.size(); ++i) ahr.nonce[i] = static_cast<uint8_t>(255 - i);
  out.push_back(Frame(MsgType::kAuthHelloReply, ahr));
  AuthProof ap;
  for (size_t i = 0; i < ap.mac.size(); ++i) ap.mac[i] = static_cast<uint8_t>(i ^ 0x5a);
  out.push_back(Frame(MsgType::kAuthProof, ap));
  AuthProofReply apr;
  for (size_t i = 0; i < apr.mac.size(); ++i) apr.mac[i] = static_cast<uint8_t>(i ^ 0xa5);
  out.push_back(Frame(MsgType::kAuthProofReply, apr));

  // Node-to-node messages (core/peer_messages.h).
  out.push_back(Frame(MsgType::kPeerPing, PeerPing{.node_id = 2, .incarnation = 0x1234}));
  PeerPingReply ping_reply;
  ping_reply.node_id = 5;
  ping_reply.incarnation = 0x5678;
  ping_reply.arena_bytes = uint64_t{1} << 34;
  ping_reply.used_bytes = 1 << 30;
  ping_reply.owned_bytes = 1 << 29;
  ping_reply.replica_bytes = 1 << 28;
  ping_reply.fabric_provider = "verbs";
  ping_reply.fabric_address = std::string("\x02\x00\x1c\xe8\x0a\x00\x00\x05", 8);
  ping_reply.region_key = 0xabcdef;
  out.push_back(Frame(MsgType::kPeerPingReply, ping_reply));
  NamespaceDef def{Info("mistral"), "tenant-a"};
  out.push_back(Frame(MsgType::kShardLookup, ShardLookup{.ns = def, .tokens = Tokens(48)}));
  ShardLookupReply shard_reply;
  shard_reply.blocks = 3;
  shard_reply.ranges = {{1, 0}, {2, 4}, {3, 0}};
  out.push_back(Frame(MsgType::kShardLookupReply, shard_reply));
  ShardAnnounce announce;
  announce.ns = def;
  announce.entries = {{Tokens(32), {{2, 1}}}, {Tokens(48), {{2, 1}, {3, 2}}}};
  out.push_back(Frame(MsgType::kShardAnnounce, announce));
  out.push_back(Frame(MsgType::kShardAnnounceReply, EmptyReply{}));
  PeerFetch fetch;
  fetch.ns = def;
  fetch.tokens = Tokens(64);
  fetch.segments = {{0, 1}, {2, 4}};
  fetch.path = DataPath::kRma;
  out.push_back(Frame(MsgType::kPeerFetch, fetch));
  PeerFetchReply fetch_reply;
  fetch_reply.segments = {{1, false, {{1 << 20, 16 * 131072}}}, {0, true, {}}};
  fetch_reply.lease_id = 11;
  out.push_back(Frame(MsgType::kPeerFetchReply, fetch_reply));
  out.push_back(Frame(MsgType::kPeerRelease, PeerRelease{.fetch_id = 11}));
  out.push_back(Frame(MsgType::kPeerReleaseReply, EmptyReply{}));
  out.push_back(Frame(MsgType::kPeerRemove, PeerRemove{.ns = "mistral", .tokens = Tokens(32), .from_block = 1}));
  out.push_back(Frame(MsgType::kPeerRemoveReply, RemoveReply{.nodes = 1, .bytes = 16 * 131072}));
  out.push_back(Frame(MsgType::kClusterStatus, EmptyReply{}));
  ClusterStatusReply status;
  status.self_id = 1;
  status.enabled = true;
  status.data_path = "tcp";
  MemberInfo member;
  member.id = 0;
  member.address = "10.0.0.1:7400";
  member.state = MemberState::kAlive;
  member.incarnation = 9;
  member.rtt_us = 120;
  member.last_seen_ms = 400;
  status.members.push_back(member);
  member.id = 1;
  member.address = "10.0.0.2:7400";
  member.state = MemberState::kSelf;
  member.last_seen_ms = 0;
  status.members.push_back(member);
  out.push_back(Frame(MsgType::kClusterStatusReply, status));
  PeerHolds holds;
  holds.ns = "mistral";
  holds.entries.push_back({Tokens(32), 1});
  holds.entries.push_back({Tokens(16), 0});
  out.push_back(Frame(MsgType::kPeerHolds, holds));
  PeerHoldsReply held;
  held.held = {true, false};
  out.push_back(Frame(MsgType::kPeerHoldsReply, held));
  PeerTiers tiers;
  tiers.ns = "mistral";
  tiers.entries.push_back({Tokens(32), 1});
  tiers.hashes = {ChainKey{1, 2}, ChainKey{3, 4}};
  tiers.low64 = true;
  out.push_back(Frame(MsgType::kPeerTiers, tiers));
  PeerTiersReply tiered;
  tiered.media = {3, 0};
  tiered.tokens = Tokens(16);
  out.push_back(Frame(MsgType::kPeerTiersReply, tiered));
  LocateRequest locate;
  locate.ns = "mistral";
  locate.keys = {ChainKey{1, 2}, ChainKey{3, 4}};
  out.push_back(Frame(MsgType::kLocate, locate));
  LocateReply where;
  where.locations.push_back(IncrementLocation{ChainKey{1, 2}, 0, {0, 2}});
  where.locations.push_back(IncrementLocation{ChainKey{3, 4}, 1, {}});
  out.push_back(Frame(MsgType::kLocateReply, where));
  LocatePrefixRequest locate_prefix;
  locate_prefix.ns = "mistral";
  locate_prefix.tokens = Tokens(48);
  out.push_back(Frame(MsgType::kLocatePrefix, locate_prefix));
  LocatePrefixReply prefix_where;
  prefix_where.location.matched_tokens = 48;
  prefix_where.location.spans = {PrefixSpan{16, 0, {0, 1}}, PrefixSpan{48, 2, {2}}};
  out.push_back(Frame(MsgType::kLocatePrefixReply, prefix_where));
  SetTimesRequest set_times;
  set_times.ns = "mistral";
  set_times.key = ChainKey{5, 6};
  set_times.atime_ns = 1'700'000'000'000'000'000ull;
  out.push_back(Frame(MsgType::kSetTimes, set_times));
  SetTimesReply times_set;
  times_set.node = node;
  times_set.node.times = Times{1, 2, 3};
  out.push_back(Frame(MsgType::kSetTimesReply, times_set));
  ChangesRequest changes_since;
  changes_since.epoch = 0x0123456789abcdefULL;
  changes_since.since = 4096;
  changes_since.max = 512;
  out.push_back(Frame(MsgType::kChanges, changes_since));
  ChangesReply changed;
  changed.changes.epoch = 0x0123456789abcdefULL;
  changed.changes.next = 4099;
  changed.changes.more = true;
  changed.changes.changes = {TreeChange{ChangeKind::kAdded, "mistral", ChainKey{1, 2}, ChainKey{}},
                             TreeChange{ChangeKind::kRemoved, "mistral", ChainKey{3, 4}, ChainKey{1, 2}},
                             TreeChange{ChangeKind::kTimes, "mistral", ChainKey{1, 2}, ChainKey{}},
                             TreeChange{ChangeKind::kNamespace, "llama", ChainKey{}, ChainKey{}}};
  out.push_back(Frame(MsgType::kChangesReply, changed));
  SetQuotaRequest set_quota{"mistral", kQuotaSetDram | kQuotaSetSsd, 4ull << 30, 200ull << 30};
  out.push_back(Frame(MsgType::kSetQuota, set_quota));
  NamespaceQuota quota{"mistral", 4ull << 30, 200ull << 30, 1ull << 30, 3ull << 30, 17, 4, 1};
  out.push_back(Frame(MsgType::kSetQuotaReply, SetQuotaReply{quota}));
  out.push_back(Frame(MsgType::kQuotas, QuotasRequest{""}));
  out.push_back(Frame(MsgType::kQuotasReply, QuotasReply{{quota, NamespaceQuota{"llama", 0, 0, 0, 0, 0, 0, 0}}}));
  return out;
}

}  // namespace ptstore::fuzz

#ifndef PTSTORE_FUZZ_NO_MAIN
int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus-dir>\n", argv[0]);
    return 2;
  }
  int n = 0;
  for (const auto& [type, frame] : ptstore::fuzz::SampleFrames()) {
    std::string path = std::string(argv[1]) + "/" + std::to_string(type) + "-" +
                       ptstore::core::MsgTypeName(type) + ".bin";
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) {
      std::fprintf(stderr, "make_corpus: cannot create %s: %s\n", path.c_str(), std::strerror(errno));
      return 1;
    }
    bool ok = std::fwrite(frame.data(), 1, frame.size(), f) == frame.size();
    ok = std::fclose(f) == 0 && ok;
    if (!ok) {
      std::fprintf(stderr, "make_corpus: cannot write %s\n", path.c_str());
      return 1;
    }
    ++n;
  }
  std::printf("make_corpus: wrote %d seed frames to %s\n", n, argv[1]);
  return 0;
}
#endif
