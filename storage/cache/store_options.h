// How a node store is set up (Store::Open): its arena, leases, SSD tier and
// cluster behaviour. A plain value, copied into the store at Open.
#pragma once

#include <cstdint>

#include "storage/ssd_format/env.h"
#include "storage/ssd/ssd_tier.h"

namespace ptstore::storage {

struct StoreOptions {
  uint64_t arena_bytes = 1ull << 30;
  double replica_share = 0.25;        // replicas may hold at most this share of the arena
  uint32_t node_id = 0;
  bool prefault = true;               // touch every arena page once at start
  bool try_huge_pages = true;
  uint64_t alignment = 4096;          // every tensor starts on this boundary
  uint64_t default_lease_ms = 30000;  // a pin not released by then is dropped
  uint64_t max_leases = 1u << 20;
  SsdOptions ssd;                     // ssd.dir empty: DRAM only
  // Cluster: a fetched remote increment is kept as a replica once it has
  // been loaded this many times (counting this load); before that it is
  // transient (freed when the load's pin goes). 0 never keeps replicas.
  uint32_t replicate_after = 2;
  // How often the times of increments on SSD are written to their records
  // (SyncTimes, by the cleaner thread): a crash loses at most this much of
  // them. 0: only when SyncTimes or PersistAll is called.
  uint64_t times_sync_ms = 60000;
  // Record evictions of owned increments that leave no copy on this node
  // (TakeLostIncrements), for the cluster to propagate.
  bool track_lost = false;
  Env* env = nullptr;                 // nullptr: Env::Default()
};

}  // namespace ptstore::storage
