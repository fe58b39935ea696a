// The owner side of every peer message (storage/cluster/cluster.h, the PeerService
// of storage/cluster/peer_transport.h): who may be served, shard lookups
// and announcements, pings, holds, tiers, removals, and the one
// implementation of a fetch's owner side that every transport carries.
#include <algorithm>

#include "core/logging.h"
#include "storage/cluster/cluster.h"
#include "storage/cluster/cluster_peer.h"

namespace ptstore::storage {

namespace {
// An owner keeps the pins of an RMA fetch until the reader releases them,
// its connection closes, or this long.
constexpr uint64_t kFetchLeaseMs = 60000;
constexpr int kRefusalLogMs = 10000;

template <typename M>
std::vector<uint8_t> Encoded(const M& m) {
  core::Encoder e;
  m.Encode(e);
  return e.buffer();
}

}  // namespace

bool Cluster::Admit(uint32_t peer, const std::string& remote, bool first) {
  if (FindPeer(peer) != nullptr) return true;
  if (!first) {
    // A Reload took it out of the cluster since it connected.
    PTS_WARN("cluster", "closing the connection of node " << peer << " from " << remote
                                                          << ": no longer in the cluster file");
    return false;
  }
  // A node not (yet) in this node's file retries every heartbeat: warned
  // of once per kRefusalLogMs per node id, the rest at debug level.
  bool warn = false;
  {
    core::MutexLock lk(refused_mu_);
    auto [it, fresh] = refused_.try_emplace(peer, Clock::now());
    if (fresh || Clock::now() - it->second > std::chrono::milliseconds(kRefusalLogMs)) {
      it->second = Clock::now();
      warn = true;
    }
  }
  if (warn) {
    PTS_WARN("cluster", "refusing node " << peer << " from " << remote << ": not in the cluster file"
                                         << " (a SIGHUP after adding it there admits it)");
  } else {
    PTS_DEBUG("cluster", "refusing node " << peer << " from " << remote << ": not in the cluster file");
  }
  return false;
}

void Cluster::EndSession(uint64_t session) { store_->ReleaseSession(session); }

void Cluster::Release(const std::vector<uint64_t>& leases, uint64_t session) {
  for (uint64_t l : leases) store_->Release(l, session).IgnoreError();
}

Status Cluster::EnsureNamespace(const NamespaceDef& def) {
  // Creates it, or checks that ours has the same layout and salt (a node
  // whose namespace differs cannot share its data: an error, not a miss).
  Result<NamespaceInfo> r = store_->CreateNamespace(def.info.name, def.info.layout, def.salt, def.info.uid,
                                                    def.info.gid, def.info.mode, /*exist_ok=*/true);
  if (!r.ok()) return r.status().WithContext("namespace from another node");
  return Status::OK();
}

Result<std::vector<uint8_t>> Cluster::Handle(const local::Frame& f, uint64_t session) {
  (void)session;  // no message served here pins
  using core::MsgType;
  switch (static_cast<MsgType>(f.type)) {
    case MsgType::kPeerPing: {
      core::PeerPing req;
      PTS_RETURN_IF_ERROR(local::DecodeBody(f, &req));
      const StoreStats s = store_->Stats();
      core::PeerPingReply rep;
      rep.node_id = self_.node_id;
      rep.incarnation = incarnation_;
      rep.arena_bytes = s.arena_bytes;
      rep.used_bytes = s.used_bytes;
      rep.owned_bytes = s.owned_bytes;
      rep.replica_bytes = s.replica_bytes;
      transport_->DescribeSelf(&rep);
      return Encoded(rep);
    }
    case MsgType::kShardLookup: {
      core::ShardLookup req;
      PTS_RETURN_IF_ERROR(local::DecodeBody(f, &req));
      PTS_RETURN_IF_ERROR(EnsureNamespace(req.ns));
      PTS_ASSIGN_OR_RETURN(Ownership o, store_->Resolve(req.ns.info.name, req.tokens));
      return Encoded(core::ShardLookupReply{o.blocks, std::move(o.ranges), o.continues});
    }
    case MsgType::kShardAnnounce: {
      core::ShardAnnounce req;
      PTS_RETURN_IF_ERROR(local::DecodeBody(f, &req));
      PTS_RETURN_IF_ERROR(EnsureNamespace(req.ns));
      for (const auto& e : req.entries) {
        Result<uint64_t> r = store_->InsertRemote(req.ns.info.name, e.tokens, e.ranges);
        if (!r.ok()) PTS_DEBUG("cluster", "announce: " << r.status().ToString());
      }
      return Encoded(core::EmptyReply{});
    }
    case MsgType::kPeerHolds: {
      core::PeerHolds req;
      PTS_RETURN_IF_ERROR(local::DecodeBody(f, &req));
      core::PeerHoldsReply rep;
      for (const auto& e : req.entries) {
        Result<bool> h = store_->Holds(req.ns, e.tokens, e.from_block);
        rep.held.push_back(h.ok() && *h);  // an unknown namespace holds nothing
      }
      return Encoded(rep);
    }
    case MsgType::kPeerTiers: {
      core::PeerTiers req;
      PTS_RETURN_IF_ERROR(local::DecodeBody(f, &req));
      core::PeerTiersReply rep;
      for (const auto& e : req.entries) {
        Result<uint8_t> m = store_->HeldMedia(req.ns, e.tokens, e.from_block);
        rep.media.push_back(m.ok() ? *m : 0);  // an unknown namespace holds nothing
      }
      if (!req.hashes.empty()) {
        Result<std::vector<uint32_t>> t = store_->TokensOfHashes(req.ns, req.hashes, req.low64);
        if (t.ok()) rep.tokens = std::move(*t);
      }
      return Encoded(rep);
    }
    case MsgType::kPeerRemove: {
      core::PeerRemove req;
      PTS_RETURN_IF_ERROR(local::DecodeBody(f, &req));
      Result<RemoveResult> r = store_->RemoveFrom(req.ns, req.tokens, req.from_block);
      if (!r.ok() && r.status().code() != Code::kNotFound) return r.status();
      counters_.removals_applied++;
      const RemoveResult done = r.ok() ? *r : RemoveResult{};
      return Encoded(core::RemoveReply{done.nodes, done.bytes});
    }
    default:
      return ProtocolError(std::string("unexpected message type ") + std::to_string(f.type) + " (" +
                           core::MsgTypeName(f.type) + ") from another node");
  }
}

Result<ServedFetch> Cluster::PinFetch(const core::PeerFetch& req, uint64_t session) {
  PTS_RETURN_IF_ERROR(EnsureNamespace(req.ns));
  const std::string& ns = req.ns.info.name;
  const uint32_t bt = req.ns.info.layout.block_tokens;
  const uint64_t prompt_blocks = req.tokens.size() / bt;
  ServedFetch served(store_, session);
  served.reply.segments.resize(req.segments.size());
  served.extents.resize(req.segments.size());
  for (size_t i = 0; i < req.segments.size(); ++i) {
    const auto& seg = req.segments[i];
    auto& out = served.reply.segments[i];
    const uint64_t end = std::min(seg.end_block, prompt_blocks);
    if (end <= seg.start_block) {
      out.gone = true;
      continue;
    }
    auto prompt = std::span<const uint32_t>(req.tokens).first(end * bt);
    // On an error `served` releases what was pinned so far.
    PTS_ASSIGN_OR_RETURN(PrefixResult pin, store_->PinHeld(ns, prompt, seg.start_block, session, kFetchLeaseMs));
    const uint64_t got_end = pin.matched_tokens / bt;
    if (pin.lease_id) served.AddLease(pin.lease_id);
    if (got_end < end) {
      // Short: the blocks past what was pinned are gone when this node does
      // not hold them along `prompt` (its index stops, or names another
      // owner there), not when the pin was only cut (DRAM full of pins).
      // The requester's run of this node's blocks may go on along a branch
      // this node lost without the requester hearing of it (e.g. killed
      // before the branch reached SSD): it then keeps the head sent here and
      // drops the tail, where a reply of no use to it would fail every load
      // through the head.
      Result<bool> held = store_->Holds(ns, prompt, std::max(got_end, seg.start_block));
      out.gone = !held.ok() || !*held;
    }
    if (got_end <= seg.start_block) continue;  // nothing to send
    out.blocks = got_end - seg.start_block;
    served.extents[i] = std::move(pin.extents);
  }
  return served;
}

}  // namespace ptstore::storage
