// What a node knows of one other member (storage/cluster/cluster.h); private to
// the cluster's .cc files.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "core/membership.h"
#include "core/mutex.h"
#include "core/peer_messages.h"
#include "storage/cluster/cluster.h"
#include "storage/cluster/peer_transport.h"

namespace ptstore::storage {

struct Cluster::Peer {
  core::Member member;
  std::unique_ptr<PeerLink> link;  // set at creation, then read-only
  std::atomic<core::MemberState> state{core::MemberState::kDead};  // until its first answer
  std::atomic<bool> removed{false};  // a Reload took it out of the member list
  mutable core::Mutex mu;
  core::PeerPingReply last GUARDED_BY(mu);
  bool seen GUARDED_BY(mu) = false;
  Clock::time_point last_seen GUARDED_BY(mu);
  uint64_t rtt_us GUARDED_BY(mu) = 0;
  int misses GUARDED_BY(mu) = 0;
  std::deque<core::PeerRemove> pending GUARDED_BY(mu);  // removals it has not acknowledged
  std::thread heartbeat;  // started and joined by the thread that creates or retires it
  core::Mutex hb_mu;      // for hb_cv's waits only (what it waits for is atomic)
  core::CondVar hb_cv;
};

}  // namespace ptstore::storage
