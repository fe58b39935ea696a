// Membership changes at run time (storage/cluster/cluster.h, Reload): the cluster
// file read again and its difference with the running member list applied.
//
// What makes a change safe for what is already stored:
//  * tensors are immutable and named by their owner, so a member that left
//    can only make loads of its data miss (FindPeer no longer finds it;
//    Fetch skips it), never return other bytes;
//  * a root's shard is recomputed from the live members at every call
//    (ShardFor), so roots move as soon as the list is swapped; the owners
//    announce what they own to the shards as they are now (ReannounceAll,
//    once a joiner answers its first ping, and right after a leave);
//  * a shard's negative answers are about the old shards: dropped;
//  * replicas kept here of a departed member's increments may be the only
//    copies left: they become this node's own (as when a member restarts);
//  * a save that matches blocks a departed member owned stores them again
//    (CheckRemoteMatch treats them as lost).
#include <algorithm>
#include <set>
#include <string>

#include "core/logging.h"
#include "storage/cluster/cluster.h"
#include "storage/cluster/cluster_peer.h"

namespace ptstore::storage {

namespace {

std::string IdList(const std::vector<uint32_t>& ids) {
  if (ids.empty()) return "none";
  std::string s;
  for (uint32_t id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

}  // namespace

std::shared_ptr<Cluster::Peer> Cluster::NewPeer(const core::Member& m) {
  auto p = std::make_shared<Peer>();
  p->member = m;
  p->link = transport_->Connect(m);
  Peer* raw = p.get();
  raw->heartbeat = std::thread([this, raw] { HeartbeatLoop(raw); });
  return p;
}

void Cluster::RetirePeer(const std::shared_ptr<Peer>& p) {
  p->removed.store(true);
  {
    core::MutexLock lk(p->hb_mu);
    p->hb_cv.NotifyAll();
  }
  if (p->heartbeat.joinable()) p->heartbeat.join();
  p->link->Reset();
  core::MutexLock lk(peers_mu_);
  retired_.push_back(p);
}

void Cluster::SweepRetired() {
  PeerList done;
  {
    core::MutexLock lk(peers_mu_);
    for (auto it = retired_.begin(); it != retired_.end();) {
      // Nobody else holds it: no fetch can be using its link (rma: its
      // fabric address, which leaves the Fabric with the link).
      if (it->use_count() == 1) {
        done.push_back(std::move(*it));
        it = retired_.erase(it);
      } else {
        ++it;
      }
    }
  }
  done.clear();  // outside peers_mu_
}

Result<std::string> Cluster::Reload() {
  const std::string& file = options_.cluster_file;
  Result<core::Membership> next = core::Membership::Load(file);
  if (!next.ok()) {
    counters_.reloads_refused++;
    return Status(next.status().code(),
                  "cluster file " + file + " refused, membership unchanged: " + next.status().message());
  }
  return ApplyMembership(std::move(*next), "cluster file " + file);
}

Result<std::string> Cluster::ApplyMembership(core::Membership next, const std::string& origin) {
  core::MutexLock reload(reload_mu_);
  if (stopping_.load()) return Aborted("the cluster is stopping");
  auto refuse = [this, &origin](const Status& why) {
    counters_.reloads_refused++;
    return Status(why.code(), origin + " refused, membership unchanged: " + why.message());
  };
  Result<core::Member> me = next.Self(self_.node_id);
  if (!me.ok()) return refuse(me.status());
  if (me->host != self_.host || (self_.port != 0 && me->port != self_.port)) {
    return refuse(InvalidArgument("it moves this node (" + std::to_string(self_.node_id) + ") from " +
                                  self_.Address() + " to " + me->Address() +
                                  "; restart ptstored to listen at a new address"));
  }
  if (!next.secret_file().empty() && options_.secret_file.empty() &&
      next.secret_file() != membership_.secret_file()) {
    PTS_WARN("cluster", origin << ": secret_file changed to " << next.secret_file()
                                        << "; the secret is read only at start (restart to change it)");
  }

  // The difference, by node id.
  const std::shared_ptr<const PeerList> old = Peers();
  std::vector<uint32_t> joined, left, moved;
  auto list = std::make_shared<PeerList>();
  PeerList retire;
  std::set<uint32_t> wanted;
  for (const core::Member& m : next.members()) {
    if (m.node_id == self_.node_id) continue;
    wanted.insert(m.node_id);
    auto it = std::find_if(old->begin(), old->end(), [&](const auto& p) { return p->member.node_id == m.node_id; });
    if (it == old->end()) {
      joined.push_back(m.node_id);
      list->push_back(NewPeer(m));
    } else if ((*it)->member.host != m.host || (*it)->member.port != m.port) {
      moved.push_back(m.node_id);
      std::shared_ptr<Peer> fresh = NewPeer(m);
      {
        // Removals it has not acknowledged still go to it, at its new address.
        // `fresh` is nobody else's yet: only the old one's lock matters.
        core::MutexLock lk((*it)->mu);
        core::MutexLock lk2(fresh->mu);
        fresh->pending = std::move((*it)->pending);
      }
      list->push_back(std::move(fresh));
      retire.push_back(*it);
    } else {
      list->push_back(*it);
    }
  }
  for (const auto& p : *old) {
    if (!wanted.count(p->member.node_id)) {
      left.push_back(p->member.node_id);
      retire.push_back(p);
    }
  }
  std::sort(list->begin(), list->end(), [](const auto& a, const auto& b) { return a->member.node_id < b->member.node_id; });
  {
    core::MutexLock lk(peers_mu_);
    peers_ = list;
    for (uint32_t id : joined) departed_.erase(std::remove(departed_.begin(), departed_.end(), id), departed_.end());
    for (uint32_t id : left) {
      if (std::find(departed_.begin(), departed_.end(), id) == departed_.end()) departed_.push_back(id);
    }
  }
  membership_ = std::move(next);
  member_count_.store(membership_.size());
  counters_.reloads++;
  // From here on the old members are not asked: retire them (each waits for
  // its heartbeat's ping in flight, at most rpc_timeout_ms).
  for (const auto& p : retire) RetirePeer(p);
  for (uint32_t id : left) {
    const uint64_t adopted = store_->AdoptReplicasOf(id);
    if (adopted > 0) {
      PTS_INFO("cluster", "node " << id << " left: " << adopted
                                  << " replica(s) of its increments kept here are this node's now");
    }
  }
  {
    core::MutexLock lk(negative_mu_);
    negative_.clear();  // answers of the old shards
  }
  {
    core::MutexLock lk(wake_mu_);
    reannounce_ = true;  // roots moved
    wake_.NotifyAll();
  }
  const std::string summary =
      "joined " + IdList(joined) + "; left " + IdList(left) + "; moved " + IdList(moved);
  PTS_INFO("cluster", origin << " reloaded: " << membership_.size() << " members; " << summary);
  return summary;
}

}  // namespace ptstore::storage
