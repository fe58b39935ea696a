// The KV query API for routers that do not subscribe to the event stream
// (docs/kv-events.md "Query API"): on the metrics port, a prompt's longest
// match on this node and on every member of the cluster, per node and tier,
// in the shapes of the indexers routers already call: Mooncake's conductor
// (POST /query, /query_by_hash: "instances" with longest_matched and
// gpu/cpu/disk, and its first design's "data" with matched_tokens and
// L2/L3) and NVIDIA Dynamo's standalone KV indexer ("scores",
// "frequencies", and its request field names).
//
//   POST /query          {"model" | "model_name": NAMESPACE, "token_ids": [ints],
//                         optional: "block_size", "lora_name", "lora_id",
//                         "tenant_id", "instance_id", "cache_salt"}
//   POST /query_by_hash  the same with "block_hashes" | "seq_hashes" |
//                        "block_hash" instead of token_ids: the block
//                        hashes of the KV-event stream, blocks 0, 1, ...:
//                        ints (the int form: a chain key's low 64 bits;
//                        negative ones as Dynamo's i64 carries them) or
//                        32-hex-digit strings (the whole chain key)
//   200 {"model": NAMESPACE, "block_size": B, "tenant_id": T, "local": ID,
//        "cluster": bool, "matched_tokens": what this node's index matches,
//        "instances": {"node-<id>": {"longest_matched": N, "gpu": 0, "cpu": DRAM,
//                      "disk": SSD, "dp": {"<rank>": N},
//                      "rank_matches": {"<rank>": {"gpu": 0, "cpu": DRAM, "disk": SSD}}}},
//        "scores": {"node-<id>": {"<rank>": N}},
//        "frequencies": [members holding block 0, block 1, ...],
//        "data": {"node-<id>": {"matched_tokens": N, "L2": DRAM, "L3": SSD}},
//        "unanswered": ["node-<id>", ...]}
//
// Every count is tokens from the prompt's start: N the longest run the
// member holds (DRAM, SSD or both), DRAM/SSD the longest run wholly in
// that tier. Members holding nothing are left out; a member that is dead
// or does not answer in time is left out and named in "unanswered" (never
// an error). <rank> is the stream's data_parallel_rank. "block_size",
// when given, must be the namespace's; "lora_name" null, "" or the
// namespace; "instance_id" ("node-<id>", or the id as a number) keeps that
// member only;
// "tenant_id" is echoed; "cache_salt" (string or null) and "lora_id" are
// accepted and unused (a namespace's salt is its own). A body that is not
// such JSON, an unknown field, a bad value: 400 {"error": ..., "field": ...};
// an unknown namespace 404; another method 405. Nothing is changed: no hit,
// no use time, no fetch.
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
