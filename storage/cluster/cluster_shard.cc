// The metadata shards (storage/cluster/cluster.h Refresh, Announce): each
// prompt's root block names a shard node (ShardFor) that indexes who owns
// its increments. Refresh asks the shard about a prompt this node matches
// only in part and files the answer as remote ranges (remembering a "nothing
// more" answer for negative_ttl_ms); Announce tells the shard of an increment
// this node now owns; ReannounceAll re-tells it everything this node owns
// after an announce failed or the membership changed (from the maintenance
// thread).
#include <algorithm>
#include <map>

#include <xxhash.h>

#include "core/logging.h"
#include "storage/cluster/cluster.h"
#include "storage/cluster/cluster_peer.h"

namespace ptstore::storage {

namespace {
constexpr size_t kAnnounceBatch = 256;
}  // namespace

void Cluster::Refresh(const std::string& ns, std::span<const uint32_t> tokens) {
  Result<NamespaceDef> def = store_->GetNamespaceDef(ns);
  if (!def.ok()) return;
  const uint32_t bt = def->info.layout.block_tokens;
  const uint64_t whole = tokens.size() / bt;
  if (whole == 0) return;
  const uint32_t shard = ShardFor(*def, tokens);
  if (shard == self_.node_id) {
    counters_.local_shard++;
    return;
  }
  Result<Ownership> local = store_->Resolve(ns, tokens);
  if (!local.ok()) return;
  if (local->blocks == whole) {
    counters_.metadata_hits++;
    return;
  }
  std::shared_ptr<Peer> p = FindPeer(shard);
  if (p == nullptr) return;
  // The shard said lately that it holds nothing past this node's match:
  // trust that for a moment (a stale answer costs a miss). Two kinds of
  // entries: "nothing at all past this prefix" (the shard knew no
  // continuation of it: every prompt that continues it, e.g. a new
  // document's many new questions, asks once per TTL), and "nothing past it
  // for this prompt" (the shard knew other continuations: another prompt
  // that shares the prefix, e.g. another document under a common system
  // prompt, is another question).
  const uint64_t seed = XXH3_64bits(ns.data(), ns.size());
  const uint64_t prefix_key = XXH3_64bits_withSeed(tokens.data(), local->blocks * bt * sizeof(uint32_t), seed);
  const uint64_t prompt_key = XXH3_64bits_withSeed(tokens.data(), whole * bt * sizeof(uint32_t), seed ^ 1);
  const auto now = Clock::now();
  // Only past a prefix this node knows (never for a root it knows nothing
  // of: that answer is about one first block only).
  const bool cacheable = options_.negative_ttl_ms > 0 && local->blocks > 0;
  if (cacheable) {
    core::MutexLock lk(negative_mu_);
    for (uint64_t key : {prefix_key, prompt_key}) {
      auto it = negative_.find(key);
      if (it != negative_.end() && now - it->second < std::chrono::milliseconds(options_.negative_ttl_ms)) {
        counters_.metadata_hits++;
        return;
      }
    }
  }
  counters_.shard_lookups++;
  const auto t0 = Clock::now();
  Result<core::ShardLookupReply> rep = p->link->Call<core::ShardLookup, core::ShardLookupReply>(
      core::ShardLookup{*def, std::vector<uint32_t>(tokens.begin(), tokens.begin() + whole * bt)},
      options_.rpc_timeout_ms);
  counters_.lookup_latency.Observe(Clock::now() - t0);
  if (!rep.ok()) {
    counters_.shard_lookup_failures++;
    MarkFailed(p.get(), rep.status());
    return;
  }
  if (rep->blocks > local->blocks) {
    Result<uint64_t> r = store_->InsertRemote(ns, tokens, rep->ranges);
    if (!r.ok()) PTS_DEBUG("cluster", "filing the shard's answer: " << r.status().ToString());
  } else if (cacheable) {
    // The shard matched no more than this node: it knows no continuation of
    // this node's match when it matched less, or when its index stops there.
    const bool nothing_past_prefix = rep->blocks < local->blocks || !rep->continues;
    core::MutexLock lk(negative_mu_);
    if (negative_.size() > 100000) negative_.clear();  // bounded; they expire fast anyway
    negative_[nothing_past_prefix ? prefix_key : prompt_key] = now;
  }
}

void Cluster::Announce(const std::string& ns, std::span<const uint32_t> tokens) {
  Result<NamespaceDef> def = store_->GetNamespaceDef(ns);
  if (!def.ok()) return;
  const uint32_t shard = ShardFor(*def, tokens);
  if (shard == self_.node_id) return;  // this node's index is the shard's
  Result<Ownership> own = store_->Resolve(ns, tokens);
  if (!own.ok() || own->blocks == 0) return;
  std::shared_ptr<Peer> p = FindPeer(shard);
  if (p == nullptr) return;
  core::ShardAnnounce msg;
  msg.ns = *def;
  msg.entries.push_back({std::vector<uint32_t>(tokens.begin(), tokens.begin() + own->blocks * def->info.layout.block_tokens),
                         own->ranges});
  counters_.announces++;
  Result<core::EmptyReply> r = p->link->Call<core::ShardAnnounce, core::EmptyReply>(msg, options_.rpc_timeout_ms);
  if (!r.ok()) {
    MarkFailed(p.get(), r.status());
    core::MutexLock lk(wake_mu_);
    reannounce_ = true;  // the shard learns it later
  }
}

void Cluster::ReannounceAll() {
  // Everything this node owns, to the shard of its root as of now.
  std::map<std::pair<uint32_t, std::string>, core::ShardAnnounce> batches;
  std::map<std::string, NamespaceDef> defs;
  uint64_t entries = 0;
  for (HeldIncrement& h : store_->ListOwned()) {
    auto d = defs.find(h.ns);
    if (d == defs.end()) {
      Result<NamespaceDef> def = store_->GetNamespaceDef(h.ns);
      if (!def.ok()) continue;
      d = defs.emplace(h.ns, *def).first;
    }
    const uint32_t shard = ShardFor(d->second, h.tokens);
    if (shard == self_.node_id) continue;
    Result<Ownership> own = store_->Resolve(h.ns, h.tokens);
    if (!own.ok() || own->blocks == 0) continue;
    core::ShardAnnounce& b = batches[{shard, h.ns}];
    b.ns = d->second;
    h.tokens.resize(own->blocks * d->second.info.layout.block_tokens);
    b.entries.push_back({std::move(h.tokens), own->ranges});
    entries++;
  }
  bool failed = false;
  for (auto& [key, b] : batches) {
    std::shared_ptr<Peer> p = FindPeer(key.first);
    if (p == nullptr || !IsAlive(p.get())) continue;
    for (size_t i = 0; i < b.entries.size(); i += kAnnounceBatch) {
      core::ShardAnnounce part;
      part.ns = b.ns;
      const size_t end = std::min(b.entries.size(), i + kAnnounceBatch);
      part.entries.assign(std::make_move_iterator(b.entries.begin() + i), std::make_move_iterator(b.entries.begin() + end));
      counters_.announces++;
      Result<core::EmptyReply> r =
          p->link->Call<core::ShardAnnounce, core::EmptyReply>(part, options_.rpc_timeout_ms * 4);
      if (!r.ok()) {
        MarkFailed(p.get(), r.status());
        failed = true;
        break;
      }
    }
  }
  if (entries) PTS_DEBUG("cluster", "announced " << entries << " owned increment(s) to their shards");
  if (failed) {
    core::MutexLock lk(wake_mu_);
    reannounce_ = true;
  }
}

}  // namespace ptstore::storage
