// The KV query API for routers that do not subscribe to the event stream
// (docs/kv-events.md "Query API"): on the metrics port, in the shape of
// Mooncake's conductor indexer (POST /query), which NVIDIA Dynamo's
// standalone KV indexer follows.
//
//   POST /query  {"model": NAMESPACE, "token_ids": [ints], "lora_name": ignored}
//   200 {"model": NAMESPACE, "block_size": B,
//        "data": {"node-<id>": {"matched_tokens": T, "L2": DRAM, "L3": SSD}, ...},
//        "local": <this node's id>, "cluster": true|false}
//
// matched_tokens: the tokens from the prompt's start whose bytes that node
// holds (any tier). L2 (DRAM) and L3 (SSD) split them by tier, for this
// node only (another node's tiers are not known here: its entry has
// matched_tokens alone; its own /query has them). Nodes holding nothing are
// left out. 400 with {"error": ...} for a body that is not such JSON or
// names no namespace; 404 for an unknown namespace. Nothing is changed: no
// hit, no use time, no fetch.
//
// Thread safety: Handle may be called from any thread (the Store's and the
// Cluster's own locks).
#pragma once

#include "core/http_server.h"
#include "storage/cluster.h"
#include "storage/store.h"

namespace ptstore::storage {

class KvQuery {
 public:
  // `cluster` may be null (a single node).
  KvQuery(Store* store, Cluster* cluster) : store_(store), cluster_(cluster) {}
  core::HttpResponse Handle(const core::HttpRequest& req) const;

 private:
  Store* store_;
  Cluster* cluster_;
};

}  // namespace ptstore::storage
