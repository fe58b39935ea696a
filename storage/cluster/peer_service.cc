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
  return PinForFetch(store_, req, session);
}

}  // namespace ptstore::storage
