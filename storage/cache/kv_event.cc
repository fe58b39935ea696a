// The event values the Store fills in (storage/cache/kv_event.h): names,
// the cache-spec fields and the namespace's group, as vLLM's events carry
// them. The wire encoding is the events layer's (storage/events/).
#include "storage/cache/kv_event.h"

#include <xxhash.h>

namespace ptstore::storage {

const char* KvMediumName(KvMedium m) { return m == KvMedium::kCpu ? "CPU" : "STORAGE"; }

KvCacheSpec KvCacheSpecOf(const Layout& layout) {
  // vllm/v1/kv_cache_interface.py KVCacheSpecKind values.
  auto kind_of = [](GroupKind k) -> const char* {
    switch (k) {
      case GroupKind::kFull: return "full_attention";
      case GroupKind::kWindow: return "sliding_window";
      case GroupKind::kLatent: return "mla_attention";
      case GroupKind::kState: return "mamba";
    }
    return "unknown";
  };
  if (!layout.grouped()) return {kind_of(GroupKind::kFull), 0};
  KvCacheSpec s{kind_of(layout.groups[0].kind), 0};
  bool one_window = true;
  const auto window_of = [](const LayoutGroup& g) { return g.kind == GroupKind::kWindow ? g.window_tokens : 0u; };
  for (const LayoutGroup& g : layout.groups) {
    if (g.kind != layout.groups[0].kind) s.kind = "unknown";
    if (window_of(g) != window_of(layout.groups[0])) one_window = false;
  }
  s.sliding_window = one_window ? window_of(layout.groups[0]) : 0;
  return s;
}

uint32_t KvNamespaceGroup(const std::string& ns) {
  return static_cast<uint32_t>(XXH3_64bits(ns.data(), ns.size()) & 0x7fffffffu);
}

}  // namespace ptstore::storage
