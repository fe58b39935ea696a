// The messages between ptstored nodes (after the authentication of
// core/messages.h's Auth* frames), and the cluster status a client can ask
// its local node for. Same framing and rules as the local protocol: each
// request type T has reply type T+1 or ErrorReply; Decode() is total. See
// docs/wire-format.md "Node-to-node messages".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/messages.h"
#include "core/ownership.h"
#include "core/wire.h"
#include "ptstore/types.h"

namespace ptstore::core {

// Liveness and what the peer is: its incarnation changes when it restarts.
struct PeerPing {
  static constexpr MsgType kType = MsgType::kPeerPing;
  uint32_t node_id = 0;
  uint64_t incarnation = 0;
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};
struct PeerPingReply {
  static constexpr MsgType kType = MsgType::kPeerPingReply;
  uint32_t node_id = 0;
  uint64_t incarnation = 0;
  uint64_t arena_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t owned_bytes = 0;
  uint64_t replica_bytes = 0;
  std::string fabric_provider;  // empty: no RMA endpoint
  std::string fabric_address;   // fi_getname bytes
  uint64_t region_key = 0;      // key of its registered arena
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};

// Asks a root's index shard who owns the longest stored match of `tokens`.
struct ShardLookup {
  static constexpr MsgType kType = MsgType::kShardLookup;
  NamespaceDef ns;
  std::vector<uint32_t> tokens;
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};
struct ShardLookupReply {
  static constexpr MsgType kType = MsgType::kShardLookupReply;
  uint64_t blocks = 0;
  std::vector<OwnedRange> ranges;  // cover [0, blocks)
  // The shard's index goes on past the match: another prompt that shares
  // it may match more (false: nothing is known past it at all).
  bool continues = true;
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};

// Tells a shard about prefixes and their owners (after a save, and again
// when the shard changed or restarted). Replied with EmptyReply.
struct ShardAnnounce {
  static constexpr MsgType kType = MsgType::kShardAnnounce;
  struct Entry {
    std::vector<uint32_t> tokens;    // the whole prefix
    std::vector<OwnedRange> ranges;  // who owns its blocks
  };
  NamespaceDef ns;
  std::vector<Entry> entries;
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};

// One request per owner carrying every segment a load needs from it.
enum class DataPath : uint8_t { kTcp = 0, kRma = 1 };
const char* DataPathName(DataPath p);  // "tcp" / "rma"

struct PeerFetch {
  static constexpr MsgType kType = MsgType::kPeerFetch;
  struct Segment {
    uint64_t start_block = 0;
    uint64_t end_block = 0;
  };
  NamespaceDef ns;
  std::vector<uint32_t> tokens;  // the prompt up to the last segment's end
  std::vector<Segment> segments;
  DataPath path = DataPath::kTcp;
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};
struct PeerFetchReply {
  static constexpr MsgType kType = MsgType::kPeerFetchReply;
  struct Piece {  // rma: where a run of the segment's bytes is in the owner's region
    uint64_t remote_offset = 0;
    uint64_t length = 0;
  };
  struct Segment {
    uint64_t blocks = 0;        // blocks the owner sends, from start_block
    bool gone = false;          // it does not hold the segment's blocks past those (along the prompt)
    std::vector<Piece> pieces;  // rma only
  };
  std::vector<Segment> segments;
  uint64_t lease_id = 0;        // rma: release with PeerRelease when read
  uint64_t stream_bytes = 0;    // tcp: raw bytes that follow this frame
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};
// Ends an RMA fetch: the owner drops its pins. Replied with EmptyReply.
struct PeerRelease {
  static constexpr MsgType kType = MsgType::kPeerRelease;
  uint64_t fetch_id = 0;  // PeerFetchReply::lease_id
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};

// A removal: blocks [from_block, ...) of `tokens` and all below. The node
// where it happened sends it to every other member (a member it cannot
// reach gets it when it is back); applying it twice is harmless.
struct PeerRemove {
  static constexpr MsgType kType = MsgType::kPeerRemove;
  std::string ns;
  std::vector<uint32_t> tokens;
  uint64_t from_block = 0;
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};

// Which of these increments does the peer hold (in DRAM or on SSD, owned or
// replica)? Each entry: the whole prefix's tokens up to the increment's
// end, and its first block.
struct PeerHolds {
  static constexpr MsgType kType = MsgType::kPeerHolds;
  struct Entry {
    std::vector<uint32_t> tokens;
    uint64_t from_block = 0;
  };
  std::string ns;
  std::vector<Entry> entries;
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};
struct PeerHoldsReply {
  static constexpr MsgType kType = MsgType::kPeerHoldsReply;
  std::vector<bool> held;  // one per entry
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};

// Node -> node, for the KV query API (storage/server/kv_query.h): in which media
// the peer holds each entry (as PeerHolds asks: every block of `tokens` from
// `from_block` on), and which tokens `hashes` name in its index: the longest
// run of them, from the namespace's root, that it knows (block hashes as the
// KV-event stream publishes them; `low64`: only each chain key's low 64 bits
// are given, the int form).
struct PeerTiers {
  static constexpr MsgType kType = MsgType::kPeerTiers;
  std::string ns;
  std::vector<PeerHolds::Entry> entries;
  std::vector<ChainKey> hashes;
  bool low64 = false;
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};
struct PeerTiersReply {
  static constexpr MsgType kType = MsgType::kPeerTiersReply;
  // One per entry: bit 1 every block in DRAM, bit 2 every block on SSD (the
  // KvMedium bits); 0 not held whole.
  std::vector<uint8_t> media;
  std::vector<uint32_t> tokens;  // what `hashes` name here (whole blocks; may be empty)
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};

// Client -> its node: the nodes that hold each of these increments (by the
// chain keys this node's index names them with).
struct LocateRequest {
  static constexpr MsgType kType = MsgType::kLocate;
  std::string ns;
  std::vector<ChainKey> keys;
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};
struct LocateReply {
  static constexpr MsgType kType = MsgType::kLocateReply;
  std::vector<IncrementLocation> locations;  // one per key, in order
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};

// Client -> its node: the owner and holders of each run of the longest
// match of `tokens` in the cluster (the scheduler's locality probe).
struct LocatePrefixRequest {
  static constexpr MsgType kType = MsgType::kLocatePrefix;
  std::string ns;
  std::vector<uint32_t> tokens;
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};
struct LocatePrefixReply {
  static constexpr MsgType kType = MsgType::kLocatePrefixReply;
  PrefixLocation location;
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};

// ClusterStatus (a client asks its node) carries an empty body.
using ptstore::MemberState;
using MemberInfo = ptstore::ClusterMember;
const char* MemberStateName(MemberState s);  // "self", "alive", "suspect", "dead"

struct ClusterStatusReply : ClusterStatus {
  static constexpr MsgType kType = MsgType::kClusterStatusReply;
  void Encode(Encoder& e) const;
  Status Decode(Decoder& d);
};

}  // namespace ptstore::core
