#include "sched/pool.h"

namespace ptstore::sched {

ElasticPool::ElasticPool(std::vector<Node> nodes) : nodes_(nodes), index_(std::move(nodes), /*cluster=*/true) {}

Result<Client*> ElasticPool::ClientOf(uint32_t node) const {
  std::string have;
  for (const Node& n : nodes_) {
    if (n.id == node) return n.client.get();
    have += (have.empty() ? "" : ", ") + std::to_string(n.id);
  }
  return NotFound("node " + std::to_string(node) + " is not in the pool (nodes " + have + ")");
}

Result<RegisteredBuffer> ElasticPool::Allocate(uint32_t node, uint64_t bytes) {
  PTS_ASSIGN_OR_RETURN(Client * c, ClientOf(node));
  return c->AllocateBuffer(bytes);
}

Result<SaveResult> ElasticPool::Insert(uint32_t node, const std::string& ns, std::span<const uint32_t> tokens,
                                       const void* kv, uint64_t bytes) {
  PTS_ASSIGN_OR_RETURN(Client * c, ClientOf(node));
  return c->Save(ns, tokens, kv, bytes);
}

Result<SaveResult> ElasticPool::Insert(uint32_t node, const std::string& ns, std::span<const uint32_t> tokens,
                                       const RegisteredBuffer& buf, uint64_t offset, uint64_t bytes) {
  PTS_ASSIGN_OR_RETURN(Client * c, ClientOf(node));
  return c->Save(ns, tokens, buf, offset, bytes);
}

Result<PrefixLocation> ElasticPool::Match(const std::string& ns, std::span<const uint32_t> tokens) {
  return index_.Locate(ns, tokens);
}

Result<PinnedPrefix> ElasticPool::Transfer(const std::string& ns, std::span<const uint32_t> tokens, uint32_t to) {
  PTS_ASSIGN_OR_RETURN(Client * c, ClientOf(to));
  return c->Pin(ns, tokens);
}

Result<ElasticPool::Handoff> ElasticPool::PrefillToDecode(const std::string& ns, std::span<const uint32_t> tokens,
                                                          const void* kv, uint64_t bytes, uint32_t from, uint32_t to,
                                                          void* dst, uint64_t capacity) {
  PTS_ASSIGN_OR_RETURN(Client * prefill, ClientOf(from));
  PTS_ASSIGN_OR_RETURN(Client * decode, ClientOf(to));
  Handoff h;
  PTS_ASSIGN_OR_RETURN(h.saved, prefill->Save(ns, tokens, kv, bytes));
  PTS_ASSIGN_OR_RETURN(h.loaded_tokens, decode->Load(ns, tokens, dst, capacity));
  return h;
}

}  // namespace ptstore::sched
