// The KV query API for routers that do not subscribe to the event stream
// (docs/kv-events.md "Query API", with the upstream references): on the
// metrics port, a prompt's longest match on this node and on every member
// of the cluster, per node and tier, in the wire formats of the indexers
// routers already call: Mooncake's conductor (msgpack bodies and answers,
// "instances") and NVIDIA Dynamo's standalone KV indexer (JSON, "scores",
// "frequencies", "instances", and the older "tree_sizes").
//
//   POST /query          {"model" | "model_name": NAMESPACE, "token_ids": [ints] (msgpack: or a bin of LE int32),
//                         optional: "block_size", "lora_name", "lora_id", "tenant_id",
//                         "routing_group", "instance_id", "cache_salt"}
//   POST /query_by_hash  the same with "block_hashes" | "seq_hashes" | "block_hash"
//                        instead of token_ids: the block hashes of the
//                        KV-event stream, blocks 0, 1, ...: ints (the int
//                        form: a chain key's low 64 bits; negative ones as
//                        Dynamo's i64 carries them) or 32-hex-digit strings
//                        (the whole chain key); "cache_salt" must be null
//   200 {"model", "block_size", "tenant_id", "routing_group", "local": ID, "cluster": bool,
//        "matched_tokens": what this node's index matches,
//        "instances": {"<id>": {"longest_matched": DISK, "gpu": 0, "cpu": CPU, "disk": DISK,
//                      "dp": {"<rank>": 0}, "rank_matches": {"<rank>": {"gpu": 0, "cpu": CPU, "disk": DISK}}}},
//        "scores": {"<id>": {"<rank>": DISK}}, "tree_sizes": {"<id>": {"<rank>": DISK / block_size}},
//        "frequencies": [members holding block 0, block 1, ...],
//        "data": {"<id>": {"matched_tokens": DISK, "L2": CPU, "L3": DISK}},
//        "unanswered": ["<id>", ...]}
//
// <id> is the member's node id in decimal, <rank> the stream's
// data_parallel_rank. Counts are tokens from the prompt's start and
// cumulative as upstream's (gpu <= cpu <= disk): CPU the run the member
// holds in DRAM, DISK that run and then on through the run it holds on
// SSD after it (Cluster::QueryTiers). "instances" lists every member that
// answered, hits or not; the Dynamo maps and "data" only members with a
// hit; a member dead or without an answer in time is named in "unanswered"
// (never an error). A msgpack request gets a msgpack answer, JSON a JSON
// one. "block_size", when given, must be the namespace's; "lora_name"
// null, "" or the namespace; "instance_id" ("7", 7 or "node-7") keeps that
// member only; "tenant_id" and "routing_group" are echoed; "cache_salt"
// (on /query) and "lora_id" are accepted and unused (a namespace's salt is
// its own). A bad body: 400 {"error", "reason", "field"}; an unknown
// namespace 404 in JSON, 200 {"instances": {}} in msgpack (as Mooncake;
// so too an instance_id naming no node id);
// another method 405. Nothing is changed: no hit, no use time, no fetch.
//
// Thread safety: Handle may be called from any thread (the Store's and the
// Cluster's own locks). It runs on the metrics server's one thread; a
// cluster query waits at most one RPC deadline (ClusterOptions).
#pragma once

#include "core/http_server.h"
#include "storage/cluster/cluster.h"
#include "storage/cache/store.h"

namespace ptstore::storage {

class KvQuery {
 public:
  // `cluster` may be null (a single node). `dp_rank`: the stream's
  // data_parallel_rank (KvCodecOptions).
  KvQuery(Store* store, Cluster* cluster, int dp_rank = 0) : store_(store), cluster_(cluster), dp_rank_(dp_rank) {}
  core::HttpResponse Handle(const core::HttpRequest& req) const;

 private:
  Store* store_;
  Cluster* cluster_;
  int dp_rank_;
};

}  // namespace ptstore::storage
