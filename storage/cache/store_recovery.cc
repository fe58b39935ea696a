// Rebuilding the index from the SSD tier after a restart (DESIGN.md §4:
// the data on SSD is the source of truth).
//
// Every valid live record is considered; the newest namespace record of a
// name defines the namespace, and tensor records are placed parents first
// (by start token), the newest first among records of the same place. A
// record is not indexed (and is marked dead) when its namespace is gone or
// was re-created, when its parent is not there (removed, or lost to
// corruption), or when its place is taken (a duplicate left by a crash
// during compaction, or by a removal whose mark did not reach the disk).
#include <algorithm>
#include <unordered_map>

#include "core/logging.h"
#include "storage/cache/store.h"

namespace ptstore::storage {

// A live record the scan found, and where it was placed: the record holding
// its parent block, and that block's index inside it (SIZE_MAX at the root).
struct Store::RecoveredRecord {
  RecordHeader h;
  SsdLocation loc;
  size_t parent = SIZE_MAX;
  uint64_t parent_block = 0;
};

// What the steps of one recovery share.
struct Store::Recovery {
  std::vector<RecoveredRecord> ns_recs, recs;
  // Records written before times existed: stored and used, as far as
  // anyone can tell, at this restart.
  uint64_t restarted = 0;
  // Chain key of every indexed block of namespace blocks_ns -> (record,
  // block inside it).
  std::unordered_map<ChainKey, std::pair<size_t, uint64_t>, ChainKeyHash> blocks;
  std::string blocks_ns;

  Times TimesOf(const RecordHeader& h) const { return h.has_times ? h.times : Times{restarted, restarted, restarted}; }
  // Tokens of the prefix that ends with block `block` of record `i`.
  std::vector<uint32_t> PathTokens(size_t i, uint64_t block) const {
    std::vector<std::pair<size_t, uint64_t>> chain;
    for (size_t at = i; at != SIZE_MAX; at = recs[at].parent) {
      chain.push_back({at, block});
      block = recs[at].parent_block;
    }
    std::vector<uint32_t> out;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      const RecoveredRecord& r = recs[it->first];
      const uint64_t n = (it->second + 1) * r.h.layout.block_tokens;
      out.insert(out.end(), r.h.tokens.begin(), r.h.tokens.begin() + n);
    }
    return out;
  }
};

// Where a tensor record goes in its namespace's tree (PlaceRecordLocked).
struct Store::RecordPlace {
  Namespace* ns = nullptr;
  std::vector<uint32_t> full;  // its prefix's tokens, its own live ones last
  std::vector<ChainKey> keys;  // of `full`
  Match m;                     // what of `full` is indexed already
};

Status Store::RecoverLocked() {
  Recovery rc;
  ScanStats scan;
  rc.restarted = WallClockNs();
  PTS_RETURN_IF_ERROR(ssd_->Scan(
      [&](const RecordHeader& h, const SsdLocation& loc) REQUIRES(mu_) {
        next_seq_ = std::max(next_seq_, h.seq + 1);
        if (h.dead()) return;
        (h.kind == RecordKind::kNamespace ? rc.ns_recs : rc.recs).push_back(RecoveredRecord{h, loc});
      },
      &scan));
  stats_.recovery_corrupt = scan.corrupt_records;
  RecoverNamespacesLocked(rc);

  // Tensors: parents before children (a parent starts earlier), newest
  // first at the same start.
  std::sort(rc.recs.begin(), rc.recs.end(), [](const RecoveredRecord& a, const RecoveredRecord& b) {
    if (a.h.ns_name != b.h.ns_name) return a.h.ns_name < b.h.ns_name;
    if (a.h.start_token != b.h.start_token) return a.h.start_token < b.h.start_token;
    return a.h.seq > b.h.seq;
  });
  for (size_t i = 0; i < rc.recs.size(); ++i) {
    const RecordHeader& h = rc.recs[i].h;
    if (h.ns_name != rc.blocks_ns) {
      rc.blocks.clear();  // keys of one namespace never lead into another
      rc.blocks_ns = h.ns_name;
    }
    RecordPlace place;
    if (PlaceRecordLocked(rc, i, &place)) IndexRecordLocked(rc, i, place);
  }
  // The capacity may be smaller than before the restart.
  MakeSsdRoomLocked(0);
  for (auto& [name, n] : namespaces_) {
    if (n->ssd_quota != 0 && n->ssd_bytes > n->ssd_quota) NamespaceSsdRoomLocked(n.get(), 0);
  }
  PTS_INFO("ssd", "recovered " << namespaces_.size() << " namespace(s) and " << stats_.recovered_tensors
                               << " tensor(s) (" << stats_.recovered_bytes << " bytes) from " << scan.segments
                               << " segment(s); skipped " << scan.corrupt_records << " corrupt record(s), "
                               << stats_.recovery_dropped << " unreachable or superseded");
  return Status::OK();
}

void Store::DropRecordLocked(const RecoveredRecord& r, const std::string& why) {
  ssd_->Forget(r.loc);
  RewriteRecordLocked(r.loc, 0);
  stats_.recovery_dropped++;
  PTS_DEBUG("ssd", "recovery: not indexing the record at " << SegmentFileName(r.loc.segment) << " offset "
                                                           << r.loc.offset << ": " << why);
}

void Store::RecoverNamespacesLocked(Recovery& rc) {
  // Namespaces: the newest live record of each name.
  std::sort(rc.ns_recs.begin(), rc.ns_recs.end(),
            [](const RecoveredRecord& a, const RecoveredRecord& b) { return a.h.seq > b.h.seq; });
  for (const RecoveredRecord& r : rc.ns_recs) {
    const RecordHeader& h = r.h;
    if (namespaces_.count(h.ns_name)) {
      DropRecordLocked(r, "an older record of namespace '" + h.ns_name + "'");
      continue;
    }
    if (Status s = ValidateNamespaceName(h.ns_name); !s.ok()) {
      DropRecordLocked(r, s.message());
      continue;
    }
    if (Status s = h.layout.Validate(); !s.ok()) {
      DropRecordLocked(r, s.message());
      continue;
    }
    auto n = std::make_unique<Namespace>();
    // The namespace's incarnation: the seq of the record that created it
    // (a record rewritten for a quota keeps it).
    n->id = h.ns_incarnation != 0 ? h.ns_incarnation : h.seq;
    n->record = r.loc;
    n->dram_quota = h.dram_quota;
    n->ssd_quota = h.ssd_quota;
    n->info.name = h.ns_name;
    n->info.layout = h.layout;
    n->info.salted = !h.salt.empty();
    n->info.uid = h.uid;
    n->info.gid = h.gid;
    n->info.mode = h.mode & 07777;
    n->info.times = rc.TimesOf(h);
    n->salt = h.salt;
    n->root_key = RootKey(h.ns_name, h.salt);
    n->tree = std::make_unique<RadixTree>(h.layout.block_tokens, h.layout.BytesPerBlock());
    WatchTreeLocked(n.get());
    namespaces_.emplace(h.ns_name, std::move(n));
  }
}

bool Store::PlaceRecordLocked(Recovery& rc, size_t i, RecordPlace* place) {
  RecoveredRecord& r = rc.recs[i];
  const RecordHeader& h = r.h;
  auto nit = namespaces_.find(h.ns_name);
  if (nit == namespaces_.end() || nit->second->id != h.ns_incarnation) {
    DropRecordLocked(r, "its namespace '" + h.ns_name + "' was dropped");
    return false;
  }
  Namespace* ns = nit->second.get();
  if (h.layout != ns->info.layout) {
    DropRecordLocked(r, "layout {" + h.layout.ToString() + "} is not the namespace's");
    return false;
  }
  const uint32_t bt = h.layout.block_tokens;
  const uint64_t start_block = h.start_token / bt;
  std::vector<uint32_t>& full = place->full;
  if (start_block > 0) {
    auto p = rc.blocks.find(h.parent_key);
    if (p == rc.blocks.end()) {
      DropRecordLocked(r, "its parent is not stored");
      return false;
    }
    r.parent = p->second.first;
    r.parent_block = p->second.second;
    full = rc.PathTokens(r.parent, r.parent_block);
    if (full.size() != h.start_token) {
      DropRecordLocked(r, "its parent ends at token " + std::to_string(full.size()) + ", not " +
                              std::to_string(h.start_token));
      return false;
    }
  } else if (h.parent_key != ChainKey{}) {
    DropRecordLocked(r, "a root increment with a parent key");
    return false;
  }
  full.insert(full.end(), h.tokens.begin(), h.tokens.begin() + h.live_tokens);
  place->keys = ChainKeys(ns->root_key, full, bt);
  if (start_block > 0 && place->keys[start_block - 1] != h.parent_key) {
    DropRecordLocked(r, "its parent key does not match its parent's tokens");
    return false;
  }
  place->m = ns->tree->Longest(full, place->keys);
  if (place->m.blocks != start_block) {
    DropRecordLocked(r, "its place in the tree is taken by a newer record");
    return false;
  }
  place->ns = ns;
  return true;
}

void Store::IndexRecordLocked(Recovery& rc, size_t i, const RecordPlace& place) {
  const RecoveredRecord& r = rc.recs[i];
  const RecordHeader& h = r.h;
  Namespace* ns = place.ns;
  const uint64_t start_block = h.start_token / h.layout.block_tokens;
  const bool remote = h.kind == RecordKind::kRemote;
  auto owned = std::make_unique<Tensor>();
  Tensor* t = owned.get();
  t->id = TensorId::Make(NodeId{remote ? h.owner_node : options_.node_id}, next_tensor_seq_++);
  t->cache_class = remote ? CacheClass::kReplica : CacheClass::kOwned;
  t->ns = ns;
  if (remote) {
    // Another node's increment: metadata again, its bytes on its owner.
    t->BecomeRemote(h.owner_node);
    t->SetStub(r.loc);
  } else {
    t->MarkRecovered(r.loc);
  }
  t->bytes = h.live_tokens * h.layout.BytesPerToken();
  t->start_token = h.start_token;
  t->tokens = h.live_tokens;
  t->hits = h.hits;
  t->cost = Gdsf::RecomputeCost(t->start_token, t->tokens);
  // Every node of the tensor gets its record's times (the newest of its
  // nodes' when written). A parent split to place it was split when it
  // was stored.
  const Times times = rc.TimesOf(h);
  t->record_times = times;
  Times split = times;
  split.ctime_ns = times.mtime_ns;
  RadixNode* node = ns->tree->Insert(place.m, place.full, place.keys, t, split);
  if (node == nullptr) {
    DropRecordLocked(r, "a chain-key collision");
    return;
  }
  node->times = times;
  tensors_.emplace(t->id.value, std::move(owned));
  t->EnterIndex();
  ns->info.prefixes = ns->tree->node_count();
  ns->info.times.Merge(times);
  for (uint64_t b = start_block; b < place.keys.size(); ++b) rc.blocks[place.keys[b]] = {i, b - start_block};
  if (remote) {
    stats_.remote_tensors++;
    return;
  }
  ChargeLocked(t);
  t->priority = gdsf_.Priority(*t);
  ssd_queue_.Add(t);
  PropagateLocked(node, t->priority);
  ns->info.bytes += t->bytes;
  stats_.recovered_tensors++;
  stats_.recovered_bytes += t->bytes;
}

}  // namespace ptstore::storage
