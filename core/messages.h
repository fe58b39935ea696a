// The messages of the local protocol (client <-> ptstored over the unix
// socket). Each request type T has reply type T+1; any request may instead be
// answered by ErrorReply. Field order is the encoding order; see
// docs/wire-format.md. Decode() of every message is total: any byte string
// either decodes or yields kProtocol naming the bad field.
#pragma once

#include <array>
#include <optional>
#include <cstdint>
#include <string>
#include <vector>

#include "core/wire.h"
#include "ptstore/quota.h"
#include "ptstore/types.h"

namespace ptstore::core {

enum class MsgType : uint16_t {
  kError = 1,
  kHello = 2, kHelloReply = 3,
  kRegisterBuffer = 4, kRegisterBufferReply = 5,
  kCreateNamespace = 6, kCreateNamespaceReply = 7,
  kGetNamespace = 8, kGetNamespaceReply = 9,
  kListNamespaces = 10, kListNamespacesReply = 11,
  kSave = 12, kSaveReply = 13,
  kLookup = 14, kLookupReply = 15,
  kPin = 16, kPinReply = 17,
  kLoadCopy = 18, kLoadCopyReply = 19,
  kRelease = 20, kReleaseReply = 21,
  kRemove = 22, kRemoveReply = 23,
  kStats = 24, kStatsReply = 25,
  kListTree = 26, kListTreeReply = 27,
  kDropNamespace = 28, kDropNamespaceReply = 29,
  kUnregisterBuffer = 30, kUnregisterBufferReply = 31,
  kIncrement = 32, kIncrementReply = 33,
  // Node-to-node authentication (rdma/auth.h), the first frames on a
  // connection between two ptstored.
  kAuthHello = 34, kAuthHelloReply = 35,
  kAuthProof = 36, kAuthProofReply = 37,
  // Node-to-node requests after authentication (core/peer_messages.h).
  kPeerPing = 38, kPeerPingReply = 39,
  kShardLookup = 40, kShardLookupReply = 41,
  kShardAnnounce = 42, kShardAnnounceReply = 43,
  kPeerFetch = 44, kPeerFetchReply = 45,
  kPeerRelease = 46, kPeerReleaseReply = 47,
  kPeerRemove = 48, kPeerRemoveReply = 49,
  // Client -> local ptstored: the members of the cluster as this node sees them.
  kClusterStatus = 50, kClusterStatusReply = 51,
  // Node to node: which of these increments does the peer hold?
  kPeerHolds = 52, kPeerHoldsReply = 53,
  // Client -> local ptstored: which nodes hold these increments?
  kLocate = 54, kLocateReply = 55,
  // Client -> local ptstored: where is each run of this prompt's longest match?
  kLocatePrefix = 56, kLocatePrefixReply = 57,
  // Client -> local ptstored: set an increment's atime and mtime (touch(1)).
  kSetTimes = 58, kSetTimesReply = 59,
  // Client -> local ptstored: the changes of the index since a position (mounts poll it).
  kChanges = 60, kChangesReply = 61,
  // Node to node: in which media does the peer hold these increments, and
  // which tokens do these block hashes name there (the KV query API)?
  kPeerTiers = 62, kPeerTiersReply = 63,
  // Client -> local ptstored: set a namespace's quotas (owner or root), read them.
  kSetQuota = 64, kSetQuotaReply = 65,
  kQuotas = 66, kQuotasReply = 67,
};
// The highest type in use (fuzzers and registry tests walk 0..kLastMsgType).
inline constexpr MsgType kLastMsgType = MsgType::kQuotasReply;
const char* MsgTypeName(uint16_t type);

struct ErrorReply {
  static constexpr MsgType kType = MsgType::kError;
  Code code = Code::kInternal;
  std::string message;
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
  Status ToStatus() const { return Status(code == Code::kOk ? Code::kProtocol : code, message); }
};

struct HelloRequest {
  static constexpr MsgType kType = MsgType::kHello;
  std::string client_name;
  bool want_mapping = true;
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};
struct HelloReply {
  static constexpr MsgType kType = MsgType::kHelloReply;
  uint32_t node_id = 0;
  uint64_t arena_bytes = 0;
  bool mapped = false;       // an arena fd rides along with this reply
  uint64_t session_id = 0;
  uint64_t lease_ms = 0;     // default lease of a pin
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};

struct RegisterBufferRequest {  // a memfd rides along
  static constexpr MsgType kType = MsgType::kRegisterBuffer;
  uint64_t size = 0;
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};
struct UnregisterBufferRequest {
  static constexpr MsgType kType = MsgType::kUnregisterBuffer;
  uint32_t buffer_id = 0;
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};
struct RegisterBufferReply {
  static constexpr MsgType kType = MsgType::kRegisterBufferReply;
  uint32_t buffer_id = 0;
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};

struct CreateNamespaceRequest {
  static constexpr MsgType kType = MsgType::kCreateNamespace;
  std::string name;
  Layout layout;
  std::string salt;
  uint32_t mode = 0755;
  bool exist_ok = true;  // an existing namespace with the same layout is fine
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};
struct NamespaceReply {  // reply to Create and Get
  static constexpr MsgType kType = MsgType::kGetNamespaceReply;
  NamespaceInfo info;
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};
struct NameRequest {  // GetNamespace, DropNamespace
  static constexpr MsgType kType = MsgType::kGetNamespace;
  std::string name;
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};
struct ListNamespacesReply {
  static constexpr MsgType kType = MsgType::kListNamespacesReply;
  std::vector<NamespaceInfo> namespaces;
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};

struct SaveRequest {
  static constexpr MsgType kType = MsgType::kSave;
  std::string ns;
  std::vector<uint32_t> tokens;
  uint32_t buffer_id = 0;
  uint64_t buffer_offset = 0;  // where the KV of block `first_block` starts
  uint64_t length = 0;         // bytes present in the buffer
  uint64_t first_block = 0;    // the buffer holds blocks [first_block, ...)
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};
struct SaveReply {
  static constexpr MsgType kType = MsgType::kSaveReply;
  uint64_t matched_tokens = 0;  // already stored before this save
  uint64_t stored_tokens = 0;   // newly stored by this save
  uint64_t new_bytes = 0;
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};

struct PrefixRequest {  // Lookup, Pin, LoadCopy
  static constexpr MsgType kType = MsgType::kLookup;
  std::string ns;
  std::vector<uint32_t> tokens;
  uint32_t buffer_id = 0;       // LoadCopy: destination buffer
  uint64_t buffer_offset = 0;
  uint64_t capacity = 0;        // LoadCopy: bytes available at buffer_offset
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};
struct PrefixReply {  // Lookup, Pin, LoadCopy
  static constexpr MsgType kType = MsgType::kLookupReply;
  uint64_t matched_tokens = 0;
  uint64_t lease_id = 0;        // Pin only
  std::vector<Extent> extents;  // arena offsets filled for Pin
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};

struct ReleaseRequest {
  static constexpr MsgType kType = MsgType::kRelease;
  uint64_t lease_id = 0;
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};
struct EmptyReply {
  static constexpr MsgType kType = MsgType::kReleaseReply;
  void Encode(Encoder&) const {}
  Status Decode(Decoder& d) { return d.Finish("EmptyReply"); }
};

struct RemoveRequest {
  static constexpr MsgType kType = MsgType::kRemove;
  std::string ns;
  bool by_key = false;          // remove the subtree of the node named `key`
  ChainKey key;
  std::vector<uint32_t> tokens; // otherwise: the subtree below this prefix
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};
struct RemoveReply {
  static constexpr MsgType kType = MsgType::kRemoveReply;
  uint64_t nodes = 0;
  uint64_t bytes = 0;
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};

struct StatsReply {
  static constexpr MsgType kType = MsgType::kStatsReply;
  StoreStats stats;
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};

struct ListTreeRequest {
  static constexpr MsgType kType = MsgType::kListTree;
  std::string ns;
  ChainKey parent;          // zero: children of the root
  bool recursive = false;
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};
struct ListTreeReply {
  static constexpr MsgType kType = MsgType::kListTreeReply;
  std::vector<PrefixNodeInfo> nodes;  // parents before children
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};

// One increment by its chain key: what it is and its own token ids; with
// `pin`, also pins the prefix that ends with it and returns its extents
// (all of the prefix's with `whole_prefix`, else the increment's own).
struct IncrementRequest {
  static constexpr MsgType kType = MsgType::kIncrement;
  std::string ns;
  ChainKey key;
  bool pin = false;
  bool whole_prefix = false;
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};
struct IncrementReply {
  static constexpr MsgType kType = MsgType::kIncrementReply;
  PrefixNodeInfo node;
  std::vector<uint32_t> tokens;  // the increment's own token ids
  uint64_t lease_id = 0;         // pin only
  std::vector<Extent> extents;   // pin only, with arena offsets
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};

// Sets the times of increment `key` (0: leave that time as it is); its
// ctime becomes now. Needs the write bit, as a removal does.
struct SetTimesRequest {
  static constexpr MsgType kType = MsgType::kSetTimes;
  std::string ns;
  ChainKey key;
  uint64_t atime_ns = 0;
  uint64_t mtime_ns = 0;
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};
struct SetTimesReply {
  static constexpr MsgType kType = MsgType::kSetTimesReply;
  PrefixNodeInfo node;  // as it is afterwards
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};

// The changes of the node's index from position `since` of log `epoch` on
// (storage/cache/change_log.h), at most `max` of them; only those of namespaces
// the caller may read (and every kNamespace change).
struct ChangesRequest {
  static constexpr MsgType kType = MsgType::kChanges;
  uint64_t epoch = 0;  // 0: a first call (the reply says where the log is)
  uint64_t since = 0;
  uint32_t max = 0;    // 0: the server's limit
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};
struct ChangesReply {
  static constexpr MsgType kType = MsgType::kChangesReply;
  TreeChanges changes;
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};

// Sets the quotas `set` names (bit 0: DRAM, bit 1: SSD; at least one, no
// other bits) of namespace `ns` on this node; 0 is no limit. Only the
// namespace's owner or root may (ptstore/quota.h).
inline constexpr uint8_t kQuotaSetDram = 1;
inline constexpr uint8_t kQuotaSetSsd = 2;
struct SetQuotaRequest {
  static constexpr MsgType kType = MsgType::kSetQuota;
  std::string ns;
  uint8_t set = 0;
  uint64_t dram_quota = 0;
  uint64_t ssd_quota = 0;
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};
struct SetQuotaReply {
  static constexpr MsgType kType = MsgType::kSetQuotaReply;
  NamespaceQuota quota;  // as it is afterwards
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};
// The quotas and use of namespace `ns` (empty: of every namespace).
struct QuotasRequest {
  static constexpr MsgType kType = MsgType::kQuotas;
  std::string ns;
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};
struct QuotasReply {
  static constexpr MsgType kType = MsgType::kQuotasReply;
  std::vector<NamespaceQuota> quotas;
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};

// Authentication (rdma/auth.h, docs/architecture.md "Cluster foundations"):
// each side names itself and sends a fresh 32-byte nonce, then each proves it
// knows the cluster secret with an HMAC-SHA256 over both nonces and both ids.
inline constexpr size_t kAuthNonceBytes = 32;
inline constexpr size_t kAuthMacBytes = 32;
using AuthNonce = std::array<uint8_t, kAuthNonceBytes>;
using AuthMac = std::array<uint8_t, kAuthMacBytes>;

// The peer-protocol versions a node speaks (rdma/auth.h, docs/wire-format.md
// "Peer protocol versions"). Optional trailing fields of AuthHello and
// AuthHelloReply: absent (a node from before negotiation) means {1, 1}.
struct PeerVersionRange {
  uint16_t min = 1;
  uint16_t max = 1;
  bool operator==(const PeerVersionRange&) const = default;
};

struct AuthHello {  // initiator -> responder
  static constexpr MsgType kType = MsgType::kAuthHello;
  uint32_t node_id = 0;
  AuthNonce nonce{};
  std::optional<PeerVersionRange> versions;
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};
struct AuthHelloReply {  // responder -> initiator
  static constexpr MsgType kType = MsgType::kAuthHelloReply;
  uint32_t node_id = 0;
  AuthNonce nonce{};
  std::optional<PeerVersionRange> versions;  // sent only when the hello had one
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};
struct AuthProof {  // initiator's MAC; the responder checks it first
  static constexpr MsgType kType = MsgType::kAuthProof;
  AuthMac mac{};
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};
struct AuthProofReply {  // responder's MAC, sent only after the initiator's checked
  static constexpr MsgType kType = MsgType::kAuthProofReply;
  AuthMac mac{};
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};

// Decodes `body` as message `type` of either direction; used by the fuzzer
// and by tests to prove every decoder is total.
Status DecodeAny(uint16_t type, std::span<const uint8_t> body);

}  // namespace ptstore::core
