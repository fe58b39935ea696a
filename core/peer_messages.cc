#include "core/peer_messages.h"

#include "core/wire_types.h"

namespace ptstore::core {

namespace {

void PutNamespaceDef(Encoder& e, const NamespaceDef& n) {
  PutNamespaceInfo(e, n.info);
  e.PutString(n.salt);
}
Status GetNamespaceDef(Decoder& d, NamespaceDef* n) {
  PTS_RETURN_IF_ERROR(GetNamespaceInfo(d, &n->info));
  return d.GetString("namespace.salt", &n->salt, 4096);
}

void PutRanges(Encoder& e, const std::vector<OwnedRange>& ranges) {
  e.PutU32(static_cast<uint32_t>(ranges.size()));
  for (const OwnedRange& r : ranges) {
    e.PutU64(r.end_block);
    e.PutU32(r.owner);
  }
}
Status GetRanges(Decoder& d, std::vector<OwnedRange>* ranges) {
  uint32_t n;
  PTS_RETURN_IF_ERROR(GetCount(d, "ranges", 12, &n));
  ranges->resize(n);
  for (OwnedRange& r : *ranges) {
    PTS_RETURN_IF_ERROR(d.GetU64("range.end_block", &r.end_block));
    PTS_RETURN_IF_ERROR(d.GetU32("range.owner", &r.owner));
  }
  return Status::OK();
}

}  // namespace

const char* DataPathName(DataPath p) { return p == DataPath::kRma ? "rma" : "tcp"; }

const char* MemberStateName(MemberState s) {
  switch (s) {
    case MemberState::kSelf: return "self";
    case MemberState::kAlive: return "alive";
    case MemberState::kSuspect: return "suspect";
    case MemberState::kDead: return "dead";
  }
  return "unknown";
}

void PeerPing::Encode(Encoder& e) const {
  e.PutU32(node_id);
  e.PutU64(incarnation);
}
Status PeerPing::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(d.GetU32("node_id", &node_id));
  PTS_RETURN_IF_ERROR(d.GetU64("incarnation", &incarnation));
  return d.Finish("PeerPing");
}

void PeerPingReply::Encode(Encoder& e) const {
  e.PutU32(node_id);
  e.PutU64(incarnation);
  e.PutU64(arena_bytes);
  e.PutU64(used_bytes);
  e.PutU64(owned_bytes);
  e.PutU64(replica_bytes);
  e.PutString(fabric_provider);
  e.PutString(fabric_address);
  e.PutU64(region_key);
}
Status PeerPingReply::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(d.GetU32("node_id", &node_id));
  PTS_RETURN_IF_ERROR(d.GetU64("incarnation", &incarnation));
  PTS_RETURN_IF_ERROR(d.GetU64("arena_bytes", &arena_bytes));
  PTS_RETURN_IF_ERROR(d.GetU64("used_bytes", &used_bytes));
  PTS_RETURN_IF_ERROR(d.GetU64("owned_bytes", &owned_bytes));
  PTS_RETURN_IF_ERROR(d.GetU64("replica_bytes", &replica_bytes));
  PTS_RETURN_IF_ERROR(d.GetString("fabric_provider", &fabric_provider, 256));
  PTS_RETURN_IF_ERROR(d.GetString("fabric_address", &fabric_address, 4096));
  PTS_RETURN_IF_ERROR(d.GetU64("region_key", &region_key));
  return d.Finish("PeerPingReply");
}

void ShardLookup::Encode(Encoder& e) const {
  PutNamespaceDef(e, ns);
  e.PutU32Array(tokens);
}
Status ShardLookup::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(GetNamespaceDef(d, &ns));
  PTS_RETURN_IF_ERROR(d.GetU32Array("tokens", &tokens));
  return d.Finish("ShardLookup");
}

void ShardLookupReply::Encode(Encoder& e) const {
  e.PutU64(blocks);
  PutRanges(e, ranges);
  e.PutBool(continues);
}
Status ShardLookupReply::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(d.GetU64("blocks", &blocks));
  PTS_RETURN_IF_ERROR(GetRanges(d, &ranges));
  PTS_RETURN_IF_ERROR(d.GetBool("continues", &continues));
  return d.Finish("ShardLookupReply");
}

void ShardAnnounce::Encode(Encoder& e) const {
  PutNamespaceDef(e, ns);
  e.PutU32(static_cast<uint32_t>(entries.size()));
  for (const Entry& x : entries) {
    e.PutU32Array(x.tokens);
    PutRanges(e, x.ranges);
  }
}
Status ShardAnnounce::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(GetNamespaceDef(d, &ns));
  uint32_t n;
  PTS_RETURN_IF_ERROR(GetCount(d, "entries", 8, &n));
  entries.resize(n);
  for (Entry& x : entries) {
    PTS_RETURN_IF_ERROR(d.GetU32Array("entry.tokens", &x.tokens));
    PTS_RETURN_IF_ERROR(GetRanges(d, &x.ranges));
  }
  return d.Finish("ShardAnnounce");
}

void PeerFetch::Encode(Encoder& e) const {
  PutNamespaceDef(e, ns);
  e.PutU32Array(tokens);
  e.PutU32(static_cast<uint32_t>(segments.size()));
  for (const Segment& s : segments) {
    e.PutU64(s.start_block);
    e.PutU64(s.end_block);
  }
  e.PutU8(static_cast<uint8_t>(path));
}
Status PeerFetch::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(GetNamespaceDef(d, &ns));
  PTS_RETURN_IF_ERROR(d.GetU32Array("tokens", &tokens));
  uint32_t n;
  PTS_RETURN_IF_ERROR(GetCount(d, "segments", 16, &n));
  segments.resize(n);
  for (Segment& s : segments) {
    PTS_RETURN_IF_ERROR(d.GetU64("segment.start_block", &s.start_block));
    PTS_RETURN_IF_ERROR(d.GetU64("segment.end_block", &s.end_block));
    if (s.end_block <= s.start_block) return ProtocolError("PeerFetch: a segment ends before it starts");
  }
  uint8_t p;
  PTS_RETURN_IF_ERROR(d.GetU8("path", &p));
  if (p > 1) return ProtocolError("PeerFetch: unknown data path " + std::to_string(p));
  path = static_cast<DataPath>(p);
  return d.Finish("PeerFetch");
}

void PeerFetchReply::Encode(Encoder& e) const {
  e.PutU32(static_cast<uint32_t>(segments.size()));
  for (const Segment& s : segments) {
    e.PutU64(s.blocks);
    e.PutBool(s.gone);
    e.PutU32(static_cast<uint32_t>(s.pieces.size()));
    for (const Piece& p : s.pieces) {
      e.PutU64(p.remote_offset);
      e.PutU64(p.length);
    }
  }
  e.PutU64(lease_id);
  e.PutU64(stream_bytes);
}
Status PeerFetchReply::Decode(Decoder& d) {
  uint32_t n;
  PTS_RETURN_IF_ERROR(GetCount(d, "segments", 13, &n));
  segments.resize(n);
  for (Segment& s : segments) {
    PTS_RETURN_IF_ERROR(d.GetU64("segment.blocks", &s.blocks));
    PTS_RETURN_IF_ERROR(d.GetBool("segment.gone", &s.gone));
    uint32_t np;
    PTS_RETURN_IF_ERROR(GetCount(d, "segment.pieces", 16, &np));
    s.pieces.resize(np);
    for (Piece& p : s.pieces) {
      PTS_RETURN_IF_ERROR(d.GetU64("piece.remote_offset", &p.remote_offset));
      PTS_RETURN_IF_ERROR(d.GetU64("piece.length", &p.length));
    }
  }
  PTS_RETURN_IF_ERROR(d.GetU64("lease_id", &lease_id));
  PTS_RETURN_IF_ERROR(d.GetU64("stream_bytes", &stream_bytes));
  return d.Finish("PeerFetchReply");
}

void PeerRelease::Encode(Encoder& e) const { e.PutU64(fetch_id); }
Status PeerRelease::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(d.GetU64("fetch_id", &fetch_id));
  return d.Finish("PeerRelease");
}

void PeerRemove::Encode(Encoder& e) const {
  e.PutString(ns);
  e.PutU32Array(tokens);
  e.PutU64(from_block);
}
Status PeerRemove::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(d.GetString("ns", &ns, 4096));
  PTS_RETURN_IF_ERROR(d.GetU32Array("tokens", &tokens));
  PTS_RETURN_IF_ERROR(d.GetU64("from_block", &from_block));
  return d.Finish("PeerRemove");
}

void PeerHolds::Encode(Encoder& e) const {
  e.PutString(ns);
  e.PutU32(static_cast<uint32_t>(entries.size()));
  for (const Entry& x : entries) {
    e.PutU32Array(x.tokens);
    e.PutU64(x.from_block);
  }
}
Status PeerHolds::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(d.GetString("ns", &ns, 4096));
  uint32_t n;
  PTS_RETURN_IF_ERROR(GetCount(d, "entries", 12, &n));
  entries.resize(n);
  for (Entry& x : entries) {
    PTS_RETURN_IF_ERROR(d.GetU32Array("entry.tokens", &x.tokens));
    PTS_RETURN_IF_ERROR(d.GetU64("entry.from_block", &x.from_block));
  }
  return d.Finish("PeerHolds");
}

void PeerHoldsReply::Encode(Encoder& e) const {
  e.PutU32(static_cast<uint32_t>(held.size()));
  for (bool b : held) e.PutBool(b);
}
Status PeerHoldsReply::Decode(Decoder& d) {
  uint32_t n;
  PTS_RETURN_IF_ERROR(GetCount(d, "held", 1, &n));
  held.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    bool b;
    PTS_RETURN_IF_ERROR(d.GetBool("held", &b));
    held[i] = b;
  }
  return d.Finish("PeerHoldsReply");
}

void PeerTiers::Encode(Encoder& e) const {
  e.PutString(ns);
  e.PutU32(static_cast<uint32_t>(entries.size()));
  for (const PeerHolds::Entry& x : entries) {
    e.PutU32Array(x.tokens);
    e.PutU64(x.from_block);
  }
  e.PutU32(static_cast<uint32_t>(hashes.size()));
  for (const ChainKey& k : hashes) PutKey(e, k);
  e.PutBool(low64);
}
Status PeerTiers::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(d.GetString("ns", &ns, 4096));
  uint32_t n;
  PTS_RETURN_IF_ERROR(GetCount(d, "entries", 12, &n));
  entries.resize(n);
  for (PeerHolds::Entry& x : entries) {
    PTS_RETURN_IF_ERROR(d.GetU32Array("entry.tokens", &x.tokens));
    PTS_RETURN_IF_ERROR(d.GetU64("entry.from_block", &x.from_block));
  }
  PTS_RETURN_IF_ERROR(GetCount(d, "hashes", 16, &n));
  hashes.resize(n);
  for (ChainKey& k : hashes) PTS_RETURN_IF_ERROR(GetKey(d, "hash", &k));
  PTS_RETURN_IF_ERROR(d.GetBool("low64", &low64));
  return d.Finish("PeerTiers");
}

void PeerTiersReply::Encode(Encoder& e) const {
  e.PutU32(static_cast<uint32_t>(media.size()));
  for (uint8_t m : media) e.PutU8(m);
  e.PutU32Array(tokens);
}
Status PeerTiersReply::Decode(Decoder& d) {
  uint32_t n;
  PTS_RETURN_IF_ERROR(GetCount(d, "media", 1, &n));
  media.resize(n);
  for (uint8_t& m : media) {
    PTS_RETURN_IF_ERROR(d.GetU8("media", &m));
    if (m > 3) return Status(Code::kProtocol, "PeerTiersReply: media " + std::to_string(m) + " is not a set of DRAM (1) and SSD (2)");
  }
  PTS_RETURN_IF_ERROR(d.GetU32Array("tokens", &tokens));
  return d.Finish("PeerTiersReply");
}

void LocateRequest::Encode(Encoder& e) const {
  e.PutString(ns);
  e.PutU32(static_cast<uint32_t>(keys.size()));
  for (const ChainKey& k : keys) PutKey(e, k);
}
Status LocateRequest::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(d.GetString("ns", &ns, 4096));
  uint32_t n;
  PTS_RETURN_IF_ERROR(GetCount(d, "keys", 16, &n));
  keys.resize(n);
  for (ChainKey& k : keys) PTS_RETURN_IF_ERROR(GetKey(d, "key", &k));
  return d.Finish("Locate");
}

void LocateReply::Encode(Encoder& e) const {
  e.PutU32(static_cast<uint32_t>(locations.size()));
  for (const IncrementLocation& l : locations) {
    PutKey(e, l.key);
    e.PutU32(l.owner);
    e.PutU32Array(l.nodes);
  }
}
Status LocateReply::Decode(Decoder& d) {
  uint32_t n;
  PTS_RETURN_IF_ERROR(GetCount(d, "locations", 24, &n));
  locations.resize(n);
  for (IncrementLocation& l : locations) {
    PTS_RETURN_IF_ERROR(GetKey(d, "location.key", &l.key));
    PTS_RETURN_IF_ERROR(d.GetU32("location.owner", &l.owner));
    PTS_RETURN_IF_ERROR(d.GetU32Array("location.nodes", &l.nodes, 1u << 24));
  }
  return d.Finish("LocateReply");
}

void LocatePrefixRequest::Encode(Encoder& e) const {
  e.PutString(ns);
  e.PutU32Array(tokens);
}
Status LocatePrefixRequest::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(d.GetString("ns", &ns, 4096));
  PTS_RETURN_IF_ERROR(d.GetU32Array("tokens", &tokens));
  return d.Finish("LocatePrefix");
}

void LocatePrefixReply::Encode(Encoder& e) const {
  e.PutU64(location.matched_tokens);
  e.PutU32(static_cast<uint32_t>(location.spans.size()));
  for (const PrefixSpan& s : location.spans) {
    e.PutU64(s.end_token);
    e.PutU32(s.owner);
    e.PutU32Array(s.nodes);
  }
}
Status LocatePrefixReply::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(d.GetU64("matched_tokens", &location.matched_tokens));
  uint32_t n;
  PTS_RETURN_IF_ERROR(GetCount(d, "spans", 16, &n));  // end, owner, node count
  location.spans.resize(n);
  uint64_t end = 0;
  for (PrefixSpan& s : location.spans) {
    PTS_RETURN_IF_ERROR(d.GetU64("span.end_token", &s.end_token));
    PTS_RETURN_IF_ERROR(d.GetU32("span.owner", &s.owner));
    PTS_RETURN_IF_ERROR(d.GetU32Array("span.nodes", &s.nodes, 1u << 24));
    if (s.end_token <= end || s.end_token > location.matched_tokens) {
      return ProtocolError("LocatePrefixReply: span ends at token " + std::to_string(s.end_token) + " after " +
                           std::to_string(end) + " (of " + std::to_string(location.matched_tokens) +
                           " matched): spans must grow within the match");
    }
    end = s.end_token;
  }
  if (end != location.matched_tokens) {
    return ProtocolError("LocatePrefixReply: spans end at token " + std::to_string(end) + ", the match at " +
                         std::to_string(location.matched_tokens));
  }
  return d.Finish("LocatePrefixReply");
}

void ClusterStatusReply::Encode(Encoder& e) const {
  e.PutU32(self_id);
  e.PutBool(enabled);
  e.PutString(data_path);
  e.PutString(fabric_provider);
  e.PutU32(static_cast<uint32_t>(members.size()));
  for (const MemberInfo& m : members) {
    e.PutU32(m.id);
    e.PutString(m.address);
    e.PutU8(static_cast<uint8_t>(m.state));
    e.PutU64(m.incarnation);
    e.PutU64(m.arena_bytes);
    e.PutU64(m.used_bytes);
    e.PutU64(m.owned_bytes);
    e.PutU64(m.replica_bytes);
    e.PutU64(m.rtt_us);
    e.PutU64(m.last_seen_ms);
  }
}
Status ClusterStatusReply::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(d.GetU32("self_id", &self_id));
  PTS_RETURN_IF_ERROR(d.GetBool("enabled", &enabled));
  PTS_RETURN_IF_ERROR(d.GetString("data_path", &data_path, 64));
  PTS_RETURN_IF_ERROR(d.GetString("fabric_provider", &fabric_provider, 256));
  uint32_t n;
  PTS_RETURN_IF_ERROR(GetCount(d, "members", 65, &n));  // id, address length, state, 7 u64
  members.resize(n);
  for (MemberInfo& m : members) {
    PTS_RETURN_IF_ERROR(d.GetU32("member.id", &m.id));
    PTS_RETURN_IF_ERROR(d.GetString("member.address", &m.address, 1024));
    uint8_t st;
    PTS_RETURN_IF_ERROR(d.GetU8("member.state", &st));
    if (st > 3) return ProtocolError("ClusterStatusReply: unknown member state " + std::to_string(st));
    m.state = static_cast<MemberState>(st);
    PTS_RETURN_IF_ERROR(d.GetU64("member.incarnation", &m.incarnation));
    PTS_RETURN_IF_ERROR(d.GetU64("member.arena_bytes", &m.arena_bytes));
    PTS_RETURN_IF_ERROR(d.GetU64("member.used_bytes", &m.used_bytes));
    PTS_RETURN_IF_ERROR(d.GetU64("member.owned_bytes", &m.owned_bytes));
    PTS_RETURN_IF_ERROR(d.GetU64("member.replica_bytes", &m.replica_bytes));
    PTS_RETURN_IF_ERROR(d.GetU64("member.rtt_us", &m.rtt_us));
    PTS_RETURN_IF_ERROR(d.GetU64("member.last_seen_ms", &m.last_seen_ms));
  }
  return d.Finish("ClusterStatusReply");
}

}  // namespace ptstore::core
