// What a node knows of one other member (storage/cluster.h); private to
// the cluster's .cc files.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/membership.h"
#include "core/peer_messages.h"
#include "rdma/peer_channel.h"
#include "storage/cluster.h"

namespace ptstore::storage {

struct Cluster::Peer {
  core::Member member;
  std::unique_ptr<rdma::PeerChannel> channel;
  std::atomic<core::MemberState> state{core::MemberState::kDead};  // until its first answer
  std::atomic<bool> removed{false};  // a Reload took it out of the member list
  mutable std::mutex mu;                               // guards what follows
  core::PeerPingReply last;
  bool seen = false;
  Clock::time_point last_seen;
  uint64_t rtt_us = 0;
  int misses = 0;
  uint64_t fabric_handle = 0;
  bool fabric_ready = false;
  std::string fabric_address;
  std::deque<core::PeerRemove> pending;  // removals it has not acknowledged
  std::thread heartbeat;
  std::condition_variable hb_cv;
};

}  // namespace ptstore::storage
