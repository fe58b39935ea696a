// Removals across the cluster (storage/cluster/cluster.h CheckRemoteMatch,
// PropagateRemoval): when the owner of an increment a save here matched no
// longer holds it (or left the cluster), this node removes the run from it on
// and tells every member, in parallel; a member that cannot take a removal
// now gets it queued (at most kMaxPendingRemovals) and delivered by the
// maintenance thread once it is back (DeliverPending).
#include <map>
#include <optional>
#include <thread>

#include "core/logging.h"
#include "storage/cluster/cluster.h"
#include "storage/cluster/cluster_peer.h"

namespace ptstore::storage {

namespace {
constexpr size_t kMaxPendingRemovals = 100000;
}  // namespace

void Cluster::CheckRemoteMatch(const std::string& ns, std::span<const uint32_t> tokens) {
  Result<NamespaceDef> def = store_->GetNamespaceDef(ns);
  if (!def.ok()) return;
  const uint32_t bt = def->info.layout.block_tokens;
  Result<Ownership> own = store_->Resolve(ns, tokens, /*per_increment=*/true);
  if (!own.ok() || own->blocks == 0) return;
  // The increments of the match that other nodes own and this node does
  // not hold, asked of their owners (one PeerHolds per owner).
  struct Asked {
    uint64_t from, to;
  };
  std::map<uint32_t, std::pair<core::PeerHolds, std::vector<Asked>>> by_owner;
  uint64_t start = 0;
  for (size_t i = 0; i < own->ranges.size(); ++i) {
    const OwnedRange& r = own->ranges[i];
    if (r.owner != self_.node_id && !own->held[i]) {
      auto& [q, asked] = by_owner[r.owner];
      q.ns = ns;
      q.entries.push_back({std::vector<uint32_t>(tokens.begin(), tokens.begin() + r.end_block * bt), start});
      asked.push_back(Asked{start, r.end_block});
    }
    start = r.end_block;
  }
  // The first increment its live owner no longer holds: everything from it on is gone.
  std::optional<Asked> lost;
  uint32_t lost_owner = 0;
  bool lost_departed = false;  // its owner left the cluster (Reload)
  for (auto& [owner, entry] : by_owner) {
    auto& [q, asked] = entry;
    std::shared_ptr<Peer> p = FindPeer(owner);
    if (p == nullptr && Departed(owner)) {
      // A Reload removed its owner from the cluster: nothing it owned can be
      // loaded any more, so the save stores those blocks itself.
      for (const Asked& a : asked) {
        if (!lost || a.from < lost->from) {
          lost = a;
          lost_owner = owner;
          lost_departed = true;
        }
      }
      continue;
    }
    // A node that is down may come back with its data; one this node's file
    // does not know yet (it joined, and this node has not reloaded) too.
    if (p == nullptr || !IsAlive(p.get())) continue;
    Result<core::PeerHoldsReply> r = p->link->Call<core::PeerHolds, core::PeerHoldsReply>(q, options_.rpc_timeout_ms);
    if (!r.ok()) {
      MarkFailed(p.get(), r.status());
      continue;
    }
    if (r->held.size() != asked.size()) continue;
    for (size_t e = 0; e < asked.size(); ++e) {
      if (!r->held[e] && (!lost || asked[e].from < lost->from)) {
        lost = asked[e];
        lost_owner = owner;
        lost_departed = false;
      }
    }
  }
  if (!lost) return;
  PTS_INFO("cluster", "node " << lost_owner << (lost_departed ? " left the cluster and so" : "")
                              << " no longer holds blocks [" << lost->from << ", " << lost->to
                              << ") of a prefix in '" << ns
                              << "' that a save here matched: removing them on every node; the save stores them");
  RemovalPoint pt{ns, std::vector<uint32_t>(tokens.begin(), tokens.begin() + lost->to * bt), lost->from};
  Result<RemoveResult> removed = store_->RemoveFrom(ns, pt.tokens, pt.from_block);
  if (!removed.ok()) PTS_DEBUG("cluster", "removing a stale run: " << removed.status().ToString());
  PropagateRemoval(pt);
}

void Cluster::PropagateRemoval(const RemovalPoint& pt) {
  core::PeerRemove msg{pt.ns, pt.tokens, pt.from_block};
  counters_.removals_sent++;
  SendRemoval(msg, self_.node_id);
}

void Cluster::SendRemoval(const core::PeerRemove& msg, uint32_t skip_id) {
  // Every member (the shard, the owners, the replicas, the metadata caches)
  // in parallel; one that cannot take it now gets it when it is back.
  std::vector<std::thread> sends;
  const std::shared_ptr<const PeerList> peers = Peers();
  for (const auto& up : *peers) {
    Peer* p = up.get();
    if (p->member.node_id == skip_id) continue;
    auto queue = [p, &msg] {
      core::MutexLock lk(p->mu);
      if (p->pending.size() < kMaxPendingRemovals) p->pending.push_back(msg);
    };
    if (!IsAlive(p)) {
      queue();
      continue;
    }
    sends.emplace_back([this, p, &msg, queue] {
      Result<core::RemoveReply> r = p->link->Call<core::PeerRemove, core::RemoveReply>(msg, options_.rpc_timeout_ms);
      if (!r.ok()) {
        queue();
        MarkFailed(p, r.status());
      }
    });
  }
  for (std::thread& t : sends) t.join();
}

void Cluster::DeliverPending(Peer* p) {
  for (;;) {
    core::PeerRemove msg;
    {
      core::MutexLock lk(p->mu);
      if (p->pending.empty()) return;
      msg = p->pending.front();
    }
    Result<core::RemoveReply> r = p->link->Call<core::PeerRemove, core::RemoveReply>(msg, options_.rpc_timeout_ms);
    if (!r.ok()) {
      MarkFailed(p, r.status());
      return;
    }
    core::MutexLock lk(p->mu);
    if (!p->pending.empty()) p->pending.pop_front();
  }
}

}  // namespace ptstore::storage
