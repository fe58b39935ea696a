// One namespace of a node store: its listing entry, salt and root key, its
// radix tree, its record on SSD, and its quotas and what counts against them.
//
// Thread safety: none of its own. The Store owns every Namespace and guards
// it with its mu_ (storage/cache/store.h); read or change one only under it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "ptstore/keys.h"
#include "ptstore/types.h"
#include "storage/index/radix_tree.h"
#include "storage/ssd_format/record.h"

namespace ptstore::storage {

struct Namespace {
  uint64_t id = 0;                    // unique, never reused (the seq of its SSD record)
  NamespaceInfo info;                 // bytes/prefixes kept current
  std::string salt;
  ChainKey root_key;
  std::unique_ptr<RadixTree> tree;
  std::optional<SsdLocation> record;  // its namespace record on SSD
  bool quiet = false;                 // the event sink publishes nothing of it (KvEventSink::Publishes)
  // Quotas (ptstore/quota.h; 0: no limit) and what counts against them:
  // Tensor::charged_dram / charged_ssd of its tensors in the index, and the
  // arena bytes of saves copying into it now (not in the index yet).
  uint64_t dram_quota = 0;
  uint64_t ssd_quota = 0;
  uint64_t dram_bytes = 0;
  uint64_t ssd_bytes = 0;
  uint64_t dram_pending = 0;
  uint64_t dram_evictions = 0;
  uint64_t ssd_evictions = 0;
  uint64_t cut_saves = 0;
};

// A namespace named across a drop of the store's mutex: by name and
// incarnation, never by its struct, which a DropNamespace meanwhile frees
// (a fetch read one that a fill had let go: commit 4c4a135). The store
// looks it up again with Store::FindAgainLocked.
struct NamespaceKey {
  std::string name;
  uint64_t id = 0;
  static NamespaceKey Of(const Namespace& ns) { return NamespaceKey{ns.info.name, ns.id}; }
};

}  // namespace ptstore::storage
