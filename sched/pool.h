// Elastic pool operations across the nodes of a cluster (DESIGN.md §6,
// MemServe's elastic memory pool): an instance allocates from, inserts
// into, matches in and transfers between nodes' pools, and a disaggregated
// prefill instance hands a request's KV to a decode instance through the
// store.
//
//   allocate  a buffer shared with `node`'s ptstored (its saves and loads
//             cost the server one copy)
//   insert    saves a prompt's KV on `node`: it owns what the cluster lacked
//   match     where each run of a prompt's cached prefix is (owner, holders)
//   transfer  brings a prefix's bytes into `to`'s arena and pins them there
//             (runs held elsewhere are fetched over the data path; a run
//             loaded replicate_after times stays as a replica)
//   handoff   prefill on `from` saves the KV; decode on `to` loads it into
//             its own memory (a remote load when `to` does not hold it)
//
// Thread safety: as the Clients it holds (any thread).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ptstore/client.h"
#include "sched/store_index.h"

namespace ptstore::sched {

class ElasticPool {
 public:
  using Node = StoreIndex::Node;  // a node's id and a client of its ptstored
  explicit ElasticPool(std::vector<Node> nodes);

  Result<RegisteredBuffer> Allocate(uint32_t node, uint64_t bytes);
  Result<SaveResult> Insert(uint32_t node, const std::string& ns, std::span<const uint32_t> tokens, const void* kv,
                            uint64_t bytes);
  Result<SaveResult> Insert(uint32_t node, const std::string& ns, std::span<const uint32_t> tokens,
                            const RegisteredBuffer& buf, uint64_t offset, uint64_t bytes);
  // Asked of the nodes in turn (StoreIndex over one cluster); a miss when
  // no node knows the namespace.
  Result<PrefixLocation> Match(const std::string& ns, std::span<const uint32_t> tokens);
  // The pinned prefix on `to` (its mapped arena); tokens() == 0 on a miss.
  Result<PinnedPrefix> Transfer(const std::string& ns, std::span<const uint32_t> tokens, uint32_t to);

  struct Handoff {
    SaveResult saved;        // on the prefill node
    uint64_t loaded_tokens = 0;  // into the decode instance's buffer
  };
  // Saves `kv` (the prefill's KV of `tokens`) on `from`, then loads the
  // prompt's prefix on `to` into dst (capacity bytes). A decode side that
  // gets fewer tokens than were saved (the bytes were evicted or a node
  // died in between) must recompute the rest: not an error.
  Result<Handoff> PrefillToDecode(const std::string& ns, std::span<const uint32_t> tokens, const void* kv,
                                  uint64_t bytes, uint32_t from, uint32_t to, void* dst, uint64_t capacity);

  // NotFound naming the nodes there are.
  Result<Client*> ClientOf(uint32_t node) const;

 private:
  std::vector<Node> nodes_;
  StoreIndex index_;
};

}  // namespace ptstore::sched
