// Encode and Decode of the local protocol's messages (core/messages.h; the
// byte layout is docs/wire-format.md). The registry of types (names,
// DecodeAny) is in message_registry.cc.
#include "core/messages.h"

#include "core/wire_types.h"

namespace ptstore::core {

void ErrorReply::Encode(Encoder& e) const {
  e.PutU16(static_cast<uint16_t>(code));
  e.PutString(std::string_view(message).substr(0, 1u << 16));  // the decoder's limit
}
Status ErrorReply::Decode(Decoder& d) {
  uint16_t c;
  PTS_RETURN_IF_ERROR(d.GetU16("code", &c));
  code = CodeFromWire(c);
  PTS_RETURN_IF_ERROR(d.GetString("message", &message, 1u << 16));
  return d.Finish("ErrorReply");
}

void HelloRequest::Encode(Encoder& e) const {
  e.PutString(client_name);
  e.PutBool(want_mapping);
}
Status HelloRequest::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(d.GetString("client_name", &client_name, 256));
  PTS_RETURN_IF_ERROR(d.GetBool("want_mapping", &want_mapping));
  return d.Finish("Hello");
}

void HelloReply::Encode(Encoder& e) const {
  e.PutU32(node_id);
  e.PutU64(arena_bytes);
  e.PutBool(mapped);
  e.PutU64(session_id);
  e.PutU64(lease_ms);
}
Status HelloReply::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(d.GetU32("node_id", &node_id));
  PTS_RETURN_IF_ERROR(d.GetU64("arena_bytes", &arena_bytes));
  PTS_RETURN_IF_ERROR(d.GetBool("mapped", &mapped));
  PTS_RETURN_IF_ERROR(d.GetU64("session_id", &session_id));
  PTS_RETURN_IF_ERROR(d.GetU64("lease_ms", &lease_ms));
  return d.Finish("HelloReply");
}

void RegisterBufferRequest::Encode(Encoder& e) const { e.PutU64(size); }
Status RegisterBufferRequest::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(d.GetU64("size", &size));
  return d.Finish("RegisterBuffer");
}
void UnregisterBufferRequest::Encode(Encoder& e) const { e.PutU32(buffer_id); }
Status UnregisterBufferRequest::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(d.GetU32("buffer_id", &buffer_id));
  return d.Finish("UnregisterBuffer");
}
void RegisterBufferReply::Encode(Encoder& e) const { e.PutU32(buffer_id); }
Status RegisterBufferReply::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(d.GetU32("buffer_id", &buffer_id));
  return d.Finish("RegisterBufferReply");
}

void CreateNamespaceRequest::Encode(Encoder& e) const {
  e.PutString(name);
  PutLayout(e, layout);
  e.PutString(salt);
  e.PutU32(mode);
  e.PutBool(exist_ok);
}
Status CreateNamespaceRequest::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(d.GetString("name", &name, 4096));
  PTS_RETURN_IF_ERROR(GetLayout(d, &layout));
  PTS_RETURN_IF_ERROR(d.GetString("salt", &salt, 4096));
  PTS_RETURN_IF_ERROR(d.GetU32("mode", &mode));
  PTS_RETURN_IF_ERROR(d.GetBool("exist_ok", &exist_ok));
  return d.Finish("CreateNamespace");
}

void NamespaceReply::Encode(Encoder& e) const { PutNamespaceInfo(e, info); }
Status NamespaceReply::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(GetNamespaceInfo(d, &info));
  return d.Finish("NamespaceReply");
}

void NameRequest::Encode(Encoder& e) const { e.PutString(name); }
Status NameRequest::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(d.GetString("name", &name, 4096));
  return d.Finish("NameRequest");
}

void ListNamespacesReply::Encode(Encoder& e) const {
  e.PutU32(static_cast<uint32_t>(namespaces.size()));
  for (const auto& n : namespaces) PutNamespaceInfo(e, n);
}
Status ListNamespacesReply::Decode(Decoder& d) {
  uint32_t n;
  PTS_RETURN_IF_ERROR(GetCount(d, "namespaces", 74, &n));
  namespaces.resize(n);
  for (auto& ns : namespaces) PTS_RETURN_IF_ERROR(GetNamespaceInfo(d, &ns));
  return d.Finish("ListNamespacesReply");
}

void SaveRequest::Encode(Encoder& e) const {
  e.PutString(ns);
  e.PutU32Array(tokens);
  e.PutU32(buffer_id);
  e.PutU64(buffer_offset);
  e.PutU64(length);
  e.PutU64(first_block);
}
Status SaveRequest::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(d.GetString("ns", &ns, 4096));
  PTS_RETURN_IF_ERROR(d.GetU32Array("tokens", &tokens));
  PTS_RETURN_IF_ERROR(d.GetU32("buffer_id", &buffer_id));
  PTS_RETURN_IF_ERROR(d.GetU64("buffer_offset", &buffer_offset));
  PTS_RETURN_IF_ERROR(d.GetU64("length", &length));
  PTS_RETURN_IF_ERROR(d.GetU64("first_block", &first_block));
  return d.Finish("Save");
}
void SaveReply::Encode(Encoder& e) const {
  e.PutU64(matched_tokens);
  e.PutU64(stored_tokens);
  e.PutU64(new_bytes);
}
Status SaveReply::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(d.GetU64("matched_tokens", &matched_tokens));
  PTS_RETURN_IF_ERROR(d.GetU64("stored_tokens", &stored_tokens));
  PTS_RETURN_IF_ERROR(d.GetU64("new_bytes", &new_bytes));
  return d.Finish("SaveReply");
}

void PrefixRequest::Encode(Encoder& e) const {
  e.PutString(ns);
  e.PutU32Array(tokens);
  e.PutU32(buffer_id);
  e.PutU64(buffer_offset);
  e.PutU64(capacity);
}
Status PrefixRequest::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(d.GetString("ns", &ns, 4096));
  PTS_RETURN_IF_ERROR(d.GetU32Array("tokens", &tokens));
  PTS_RETURN_IF_ERROR(d.GetU32("buffer_id", &buffer_id));
  PTS_RETURN_IF_ERROR(d.GetU64("buffer_offset", &buffer_offset));
  PTS_RETURN_IF_ERROR(d.GetU64("capacity", &capacity));
  return d.Finish("PrefixRequest");
}
namespace {
void PutExtents(Encoder& e, const std::vector<Extent>& extents) {
  e.PutU32(static_cast<uint32_t>(extents.size()));
  for (const auto& x : extents) {
    e.PutU64(x.tensor.value);
    e.PutU64(x.offset);
    e.PutU64(x.length);
    e.PutU64(x.arena_offset);
  }
}
Status GetExtents(Decoder& d, std::vector<Extent>* extents) {
  uint32_t n;
  PTS_RETURN_IF_ERROR(GetCount(d, "extents", 32, &n));
  extents->resize(n);
  for (auto& x : *extents) {
    PTS_RETURN_IF_ERROR(d.GetU64("extent.tensor", &x.tensor.value));
    PTS_RETURN_IF_ERROR(d.GetU64("extent.offset", &x.offset));
    PTS_RETURN_IF_ERROR(d.GetU64("extent.length", &x.length));
    PTS_RETURN_IF_ERROR(d.GetU64("extent.arena_offset", &x.arena_offset));
  }
  return Status::OK();
}
void PutNode(Encoder& e, const PrefixNodeInfo& n) {
  PutKey(e, n.key);
  PutKey(e, n.parent);
  e.PutU64(n.start_token);
  e.PutU64(n.tokens);
  e.PutU64(n.bytes);
  e.PutU64(n.hits);
  e.PutU64(n.tensor.value);
  e.PutU8(static_cast<uint8_t>(n.cache_class));
  e.PutU32(n.children);
  e.PutU32(n.pins);
  e.PutU8(n.tier);
  PutTimes(e, n.times);
}
Status GetNode(Decoder& d, PrefixNodeInfo* x) {
  uint8_t cls;
  PTS_RETURN_IF_ERROR(GetKey(d, "node.key", &x->key));
  PTS_RETURN_IF_ERROR(GetKey(d, "node.parent", &x->parent));
  PTS_RETURN_IF_ERROR(d.GetU64("node.start_token", &x->start_token));
  PTS_RETURN_IF_ERROR(d.GetU64("node.tokens", &x->tokens));
  PTS_RETURN_IF_ERROR(d.GetU64("node.bytes", &x->bytes));
  PTS_RETURN_IF_ERROR(d.GetU64("node.hits", &x->hits));
  PTS_RETURN_IF_ERROR(d.GetU64("node.tensor", &x->tensor.value));
  PTS_RETURN_IF_ERROR(d.GetU8("node.class", &cls));
  if (cls > 1) return ProtocolError("field 'node.class' has unknown value " + std::to_string(cls));
  x->cache_class = static_cast<CacheClass>(cls);
  PTS_RETURN_IF_ERROR(d.GetU32("node.children", &x->children));
  PTS_RETURN_IF_ERROR(d.GetU32("node.pins", &x->pins));
  PTS_RETURN_IF_ERROR(d.GetU8("node.tier", &x->tier));
  return GetTimes(d, &x->times);
}
}  // namespace

void PrefixReply::Encode(Encoder& e) const {
  e.PutU64(matched_tokens);
  e.PutU64(lease_id);
  PutExtents(e, extents);
}
Status PrefixReply::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(d.GetU64("matched_tokens", &matched_tokens));
  PTS_RETURN_IF_ERROR(d.GetU64("lease_id", &lease_id));
  PTS_RETURN_IF_ERROR(GetExtents(d, &extents));
  return d.Finish("PrefixReply");
}

void ReleaseRequest::Encode(Encoder& e) const { e.PutU64(lease_id); }
Status ReleaseRequest::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(d.GetU64("lease_id", &lease_id));
  return d.Finish("Release");
}

void RemoveRequest::Encode(Encoder& e) const {
  e.PutString(ns);
  e.PutBool(by_key);
  PutKey(e, key);
  e.PutU32Array(tokens);
}
Status RemoveRequest::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(d.GetString("ns", &ns, 4096));
  PTS_RETURN_IF_ERROR(d.GetBool("by_key", &by_key));
  PTS_RETURN_IF_ERROR(GetKey(d, "key", &key));
  PTS_RETURN_IF_ERROR(d.GetU32Array("tokens", &tokens));
  return d.Finish("Remove");
}
void RemoveReply::Encode(Encoder& e) const {
  e.PutU64(nodes);
  e.PutU64(bytes);
}
Status RemoveReply::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(d.GetU64("nodes", &nodes));
  PTS_RETURN_IF_ERROR(d.GetU64("bytes", &bytes));
  return d.Finish("RemoveReply");
}

namespace {
// The stats struct is all u64 counters, in declaration order.
template <typename F>
void ForEachStat(StoreStats& s, F f) {
  f("arena_bytes", s.arena_bytes); f("used_bytes", s.used_bytes);
  f("owned_bytes", s.owned_bytes); f("replica_bytes", s.replica_bytes);
  f("pinned_bytes", s.pinned_bytes); f("tensors", s.tensors);
  f("prefix_nodes", s.prefix_nodes); f("namespaces", s.namespaces);
  f("lookups", s.lookups); f("hits", s.hits); f("misses", s.misses);
  f("hit_tokens", s.hit_tokens); f("requested_tokens", s.requested_tokens);
  f("saves", s.saves); f("saved_bytes", s.saved_bytes); f("dedup_bytes", s.dedup_bytes);
  f("evictions", s.evictions); f("evicted_bytes", s.evicted_bytes);
  f("active_leases", s.active_leases); f("expired_leases", s.expired_leases);
  f("ssd_capacity", s.ssd_capacity); f("ssd_file_bytes", s.ssd_file_bytes);
  f("ssd_live_bytes", s.ssd_live_bytes); f("ssd_segments", s.ssd_segments);
  f("ssd_tensors", s.ssd_tensors); f("ssd_hits", s.ssd_hits);
  f("ssd_fills", s.ssd_fills); f("ssd_fill_bytes", s.ssd_fill_bytes);
  f("ssd_spills", s.ssd_spills); f("ssd_spill_bytes", s.ssd_spill_bytes);
  f("ssd_stored_bytes", s.ssd_stored_bytes); f("ssd_spill_failures", s.ssd_spill_failures);
  f("ssd_evictions", s.ssd_evictions); f("ssd_read_errors", s.ssd_read_errors);
  f("ssd_compactions", s.ssd_compactions); f("recovered_tensors", s.recovered_tensors);
  f("recovered_bytes", s.recovered_bytes); f("recovery_corrupt", s.recovery_corrupt);
  f("recovery_dropped", s.recovery_dropped);
  f("remote_tensors", s.remote_tensors); f("remote_hits", s.remote_hits);
  f("remote_fetches", s.remote_fetches); f("remote_fetch_bytes", s.remote_fetch_bytes);
  f("remote_fetch_failures", s.remote_fetch_failures); f("replicas_kept", s.replicas_kept);
  f("peer_served_bytes", s.peer_served_bytes); f("dram_hits", s.dram_hits);
}
}  // namespace

void StatsReply::Encode(Encoder& e) const {
  StoreStats copy = stats;
  ForEachStat(copy, [&](const char*, uint64_t& v) { e.PutU64(v); });
}
Status StatsReply::Decode(Decoder& d) {
  Status st;
  ForEachStat(stats, [&](const char* name, uint64_t& v) {
    if (st.ok()) st = d.GetU64(name, &v);
  });
  PTS_RETURN_IF_ERROR(st);
  return d.Finish("StatsReply");
}

void ListTreeRequest::Encode(Encoder& e) const {
  e.PutString(ns);
  PutKey(e, parent);
  e.PutBool(recursive);
}
Status ListTreeRequest::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(d.GetString("ns", &ns, 4096));
  PTS_RETURN_IF_ERROR(GetKey(d, "parent", &parent));
  PTS_RETURN_IF_ERROR(d.GetBool("recursive", &recursive));
  return d.Finish("ListTree");
}
void ListTreeReply::Encode(Encoder& e) const {
  e.PutU32(static_cast<uint32_t>(nodes.size()));
  for (const auto& n : nodes) PutNode(e, n);
}
Status ListTreeReply::Decode(Decoder& d) {
  uint32_t n;
  PTS_RETURN_IF_ERROR(GetCount(d, "nodes", 106, &n));
  nodes.resize(n);
  for (auto& x : nodes) PTS_RETURN_IF_ERROR(GetNode(d, &x));
  return d.Finish("ListTreeReply");
}

void IncrementRequest::Encode(Encoder& e) const {
  e.PutString(ns);
  PutKey(e, key);
  e.PutBool(pin);
  e.PutBool(whole_prefix);
}
Status IncrementRequest::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(d.GetString("ns", &ns, 4096));
  PTS_RETURN_IF_ERROR(GetKey(d, "key", &key));
  PTS_RETURN_IF_ERROR(d.GetBool("pin", &pin));
  PTS_RETURN_IF_ERROR(d.GetBool("whole_prefix", &whole_prefix));
  return d.Finish("Increment");
}
void IncrementReply::Encode(Encoder& e) const {
  PutNode(e, node);
  e.PutU32Array(tokens);
  e.PutU64(lease_id);
  PutExtents(e, extents);
}
Status IncrementReply::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(GetNode(d, &node));
  PTS_RETURN_IF_ERROR(d.GetU32Array("tokens", &tokens));
  PTS_RETURN_IF_ERROR(d.GetU64("lease_id", &lease_id));
  PTS_RETURN_IF_ERROR(GetExtents(d, &extents));
  return d.Finish("IncrementReply");
}

void SetTimesRequest::Encode(Encoder& e) const {
  e.PutString(ns);
  PutKey(e, key);
  e.PutU64(atime_ns);
  e.PutU64(mtime_ns);
}
Status SetTimesRequest::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(d.GetString("ns", &ns, 4096));
  PTS_RETURN_IF_ERROR(GetKey(d, "key", &key));
  PTS_RETURN_IF_ERROR(d.GetU64("atime", &atime_ns));
  PTS_RETURN_IF_ERROR(d.GetU64("mtime", &mtime_ns));
  return d.Finish("SetTimes");
}
void SetTimesReply::Encode(Encoder& e) const { PutNode(e, node); }
Status SetTimesReply::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(GetNode(d, &node));
  return d.Finish("SetTimesReply");
}

void ChangesRequest::Encode(Encoder& e) const {
  e.PutU64(epoch);
  e.PutU64(since);
  e.PutU32(max);
}
Status ChangesRequest::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(d.GetU64("epoch", &epoch));
  PTS_RETURN_IF_ERROR(d.GetU64("since", &since));
  PTS_RETURN_IF_ERROR(d.GetU32("max", &max));
  return d.Finish("Changes");
}
void ChangesReply::Encode(Encoder& e) const {
  e.PutU64(changes.epoch);
  e.PutU64(changes.next);
  e.PutBool(changes.lost);
  e.PutBool(changes.more);
  e.PutU32(static_cast<uint32_t>(changes.changes.size()));
  for (const TreeChange& c : changes.changes) {
    e.PutU8(static_cast<uint8_t>(c.kind));
    e.PutString(c.ns);
    PutKey(e, c.key);
    PutKey(e, c.parent);
  }
}
Status ChangesReply::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(d.GetU64("epoch", &changes.epoch));
  PTS_RETURN_IF_ERROR(d.GetU64("next", &changes.next));
  PTS_RETURN_IF_ERROR(d.GetBool("lost", &changes.lost));
  PTS_RETURN_IF_ERROR(d.GetBool("more", &changes.more));
  uint32_t n;
  PTS_RETURN_IF_ERROR(GetCount(d, "changes", 37, &n));  // the smallest change: kind, empty ns, two keys
  changes.changes.resize(n);
  for (TreeChange& c : changes.changes) {
    uint8_t kind;
    PTS_RETURN_IF_ERROR(d.GetU8("change.kind", &kind));
    if (kind == 0 || kind > kLastChangeKind) {
      return ProtocolError("field 'change.kind' has unknown value " + std::to_string(kind));
    }
    c.kind = static_cast<ChangeKind>(kind);
    PTS_RETURN_IF_ERROR(d.GetString("change.ns", &c.ns, 4096));
    PTS_RETURN_IF_ERROR(GetKey(d, "change.key", &c.key));
    PTS_RETURN_IF_ERROR(GetKey(d, "change.parent", &c.parent));
  }
  return d.Finish("ChangesReply");
}

namespace {
void PutQuota(Encoder& e, const NamespaceQuota& q) {
  e.PutString(q.ns);
  e.PutU64(q.dram_quota);
  e.PutU64(q.ssd_quota);
  e.PutU64(q.dram_bytes);
  e.PutU64(q.ssd_bytes);
  e.PutU64(q.dram_evictions);
  e.PutU64(q.ssd_evictions);
  e.PutU64(q.cut_saves);
}
Status GetQuota(Decoder& d, NamespaceQuota* q) {
  PTS_RETURN_IF_ERROR(d.GetString("quota.ns", &q->ns, 4096));
  PTS_RETURN_IF_ERROR(d.GetU64("quota.dram_quota", &q->dram_quota));
  PTS_RETURN_IF_ERROR(d.GetU64("quota.ssd_quota", &q->ssd_quota));
  PTS_RETURN_IF_ERROR(d.GetU64("quota.dram_bytes", &q->dram_bytes));
  PTS_RETURN_IF_ERROR(d.GetU64("quota.ssd_bytes", &q->ssd_bytes));
  PTS_RETURN_IF_ERROR(d.GetU64("quota.dram_evictions", &q->dram_evictions));
  PTS_RETURN_IF_ERROR(d.GetU64("quota.ssd_evictions", &q->ssd_evictions));
  return d.GetU64("quota.cut_saves", &q->cut_saves);
}
constexpr size_t kMinQuotaBytes = 4 + 7 * 8;  // empty name, seven u64
}  // namespace

void SetQuotaRequest::Encode(Encoder& e) const {
  e.PutString(ns);
  e.PutU8(set);
  e.PutU64(dram_quota);
  e.PutU64(ssd_quota);
}
Status SetQuotaRequest::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(d.GetString("ns", &ns, 4096));
  PTS_RETURN_IF_ERROR(d.GetU8("set", &set));
  if (set == 0 || (set & ~(kQuotaSetDram | kQuotaSetSsd)) != 0) {
    return ProtocolError("field 'set' has value " + std::to_string(set) +
                         ": bit 0 (DRAM) and/or bit 1 (SSD), nothing else");
  }
  PTS_RETURN_IF_ERROR(d.GetU64("dram_quota", &dram_quota));
  PTS_RETURN_IF_ERROR(d.GetU64("ssd_quota", &ssd_quota));
  return d.Finish("SetQuota");
}
void SetQuotaReply::Encode(Encoder& e) const { PutQuota(e, quota); }
Status SetQuotaReply::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(GetQuota(d, &quota));
  return d.Finish("SetQuotaReply");
}
void QuotasRequest::Encode(Encoder& e) const { e.PutString(ns); }
Status QuotasRequest::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(d.GetString("ns", &ns, 4096));
  return d.Finish("Quotas");
}
void QuotasReply::Encode(Encoder& e) const {
  e.PutU32(static_cast<uint32_t>(quotas.size()));
  for (const NamespaceQuota& q : quotas) PutQuota(e, q);
}
Status QuotasReply::Decode(Decoder& d) {
  uint32_t n;
  PTS_RETURN_IF_ERROR(GetCount(d, "quotas", kMinQuotaBytes, &n));
  quotas.resize(n);
  for (NamespaceQuota& q : quotas) PTS_RETURN_IF_ERROR(GetQuota(d, &q));
  return d.Finish("QuotasReply");
}

void AuthHello::Encode(Encoder& e) const {
  e.PutU32(node_id);
  e.PutRaw(nonce.data(), nonce.size());
  if (versions) {
    e.PutU16(versions->min);
    e.PutU16(versions->max);
  }
}
Status AuthHello::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(d.GetU32("node_id", &node_id));
  PTS_RETURN_IF_ERROR(d.GetRaw("nonce", nonce.data(), nonce.size()));
  versions.reset();
  if (d.remaining() > 0) {
    PeerVersionRange r;
    PTS_RETURN_IF_ERROR(d.GetU16("versions.min", &r.min));
    PTS_RETURN_IF_ERROR(d.GetU16("versions.max", &r.max));
    if (r.min == 0 || r.min > r.max) {
      return ProtocolError("AuthHello: peer-protocol version range [" + std::to_string(r.min) + ", " +
                              std::to_string(r.max) + "] is empty or names version 0");
    }
    versions = r;
  }
  return d.Finish("AuthHello");
}
void AuthHelloReply::Encode(Encoder& e) const {
  e.PutU32(node_id);
  e.PutRaw(nonce.data(), nonce.size());
  if (versions) {
    e.PutU16(versions->min);
    e.PutU16(versions->max);
  }
}
Status AuthHelloReply::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(d.GetU32("node_id", &node_id));
  PTS_RETURN_IF_ERROR(d.GetRaw("nonce", nonce.data(), nonce.size()));
  versions.reset();
  if (d.remaining() > 0) {
    PeerVersionRange r;
    PTS_RETURN_IF_ERROR(d.GetU16("versions.min", &r.min));
    PTS_RETURN_IF_ERROR(d.GetU16("versions.max", &r.max));
    if (r.min == 0 || r.min > r.max) {
      return ProtocolError("AuthHelloReply: peer-protocol version range [" + std::to_string(r.min) + ", " +
                              std::to_string(r.max) + "] is empty or names version 0");
    }
    versions = r;
  }
  return d.Finish("AuthHelloReply");
}
void AuthProof::Encode(Encoder& e) const { e.PutRaw(mac.data(), mac.size()); }
Status AuthProof::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(d.GetRaw("mac", mac.data(), mac.size()));
  return d.Finish("AuthProof");
}
void AuthProofReply::Encode(Encoder& e) const { e.PutRaw(mac.data(), mac.size()); }
Status AuthProofReply::Decode(Decoder& d) {
  PTS_RETURN_IF_ERROR(d.GetRaw("mac", mac.data(), mac.size()));
  return d.Finish("AuthProofReply");
}

}  // namespace ptstore::core
