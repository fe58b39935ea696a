// StoreStats as the Python class Stats (Client.stats()): every counter a
// read-only attribute, to_dict(), and a repr of the counters that are not 0.
// _STORE_STATS_COUNTERS (the number of u64 counters in StoreStats) lets a
// test catch a counter added to ptstore/types.h without a binding here.
#include <pybind11/stl.h>

#include <string>

#include "ptstore/types.h"
#include "python/src/bindings.h"

namespace ptstore::python {

namespace {

// The counters of StoreStats, in declaration order (ptstore/types.h).
template <typename F>
void ForEachStat(const StoreStats& s, F f) {
  f("arena_bytes", s.arena_bytes, "capacity of the DRAM arena");
  f("used_bytes", s.used_bytes, "bytes allocated to tensors");
  f("owned_bytes", s.owned_bytes, "bytes of owned tensors");
  f("replica_bytes", s.replica_bytes, "bytes of replicas");
  f("pinned_bytes", s.pinned_bytes, "bytes pinned by leases");
  f("tensors", s.tensors, "tensors in the arena");
  f("prefix_nodes", s.prefix_nodes, "increments (radix nodes)");
  f("namespaces", s.namespaces, "namespaces");
  f("lookups", s.lookups, "lookups, pins and loads");
  f("hits", s.hits, "lookups/loads that matched at least one block");
  f("misses", s.misses, "lookups/loads that matched nothing");
  f("hit_tokens", s.hit_tokens, "tokens served from the store");
  f("requested_tokens", s.requested_tokens, "whole-block tokens asked for");
  f("saves", s.saves, "saves");
  f("saved_bytes", s.saved_bytes, "bytes written into the arena by saves");
  f("dedup_bytes", s.dedup_bytes, "bytes of saved prompts that were already stored");
  f("evictions", s.evictions, "tensors evicted from DRAM");
  f("evicted_bytes", s.evicted_bytes, "their bytes");
  f("active_leases", s.active_leases, "pins held now");
  f("expired_leases", s.expired_leases, "pins whose lease ran out");
  f("ssd_capacity", s.ssd_capacity, "bytes the SSD tier may take");
  f("ssd_file_bytes", s.ssd_file_bytes, "bytes its segment files take");
  f("ssd_live_bytes", s.ssd_live_bytes, "of which live records");
  f("ssd_segments", s.ssd_segments, "segment files");
  f("ssd_tensors", s.ssd_tensors, "tensors with a copy on SSD");
  f("ssd_hits", s.ssd_hits, "pins/loads that read something back from SSD");
  f("ssd_fills", s.ssd_fills, "tensors read back into DRAM");
  f("ssd_fill_bytes", s.ssd_fill_bytes, "their bytes");
  f("ssd_spills", s.ssd_spills, "owned tensors written to SSD on eviction");
  f("ssd_spill_bytes", s.ssd_spill_bytes, "their bytes before compression");
  f("ssd_stored_bytes", s.ssd_stored_bytes, "bytes the spills took on SSD");
  f("ssd_spill_failures", s.ssd_spill_failures, "spills that failed (dropped instead)");
  f("ssd_evictions", s.ssd_evictions, "SSD copies dropped to stay under capacity");
  f("ssd_read_errors", s.ssd_read_errors, "SSD reads that failed or did not match their checksum");
  f("ssd_compactions", s.ssd_compactions, "sparse segments rewritten");
  f("recovered_tensors", s.recovered_tensors, "tensors indexed again from SSD at start");
  f("recovered_bytes", s.recovered_bytes, "their bytes");
  f("recovery_corrupt", s.recovery_corrupt, "records skipped at start (bad checksums, torn)");
  f("recovery_dropped", s.recovery_dropped, "valid records not indexed at start (orphans, duplicates)");
  f("remote_tensors", s.remote_tensors, "increments other nodes own that this node's index knows");
  f("remote_hits", s.remote_hits, "pins/loads that fetched something from other nodes");
  f("remote_fetches", s.remote_fetches, "increments fetched from their owners");
  f("remote_fetch_bytes", s.remote_fetch_bytes, "their bytes");
  f("remote_fetch_failures", s.remote_fetch_failures, "fetches that failed (owner dead, gone, deadline): misses");
  f("replicas_kept", s.replicas_kept, "fetched increments kept as replicas (hot)");
  f("peer_served_bytes", s.peer_served_bytes, "bytes this node's owned data served to other nodes' loads");
  f("dram_hits", s.dram_hits, "pins/loads served from DRAM alone (no SSD read, no fetch)");
}

}  // namespace

void BindStats(py::module_& m) {
  auto stats = py::class_<StoreStats>(m, "Stats", "Counters of the node (Client.stats()); to_dict() gives them all.");
  // Each counter is a read-only attribute.
  {
    StoreStats probe;
    ForEachStat(probe, [&](const char* name, const uint64_t& field, const char* doc) {
      const size_t offset = reinterpret_cast<const char*>(&field) - reinterpret_cast<const char*>(&probe);
      stats.def_property_readonly(
          name,
          [offset](const StoreStats& s) {
            return *reinterpret_cast<const uint64_t*>(reinterpret_cast<const char*>(&s) + offset);
          },
          doc);
    });
  }
  // StoreStats is all u64 counters: a test compares this with the list above,
  // so a counter added to types.h without a binding is caught.
  m.attr("_STORE_STATS_COUNTERS") = sizeof(StoreStats) / sizeof(uint64_t);
  stats.def("to_dict", [](const StoreStats& s) {
    py::dict d;
    ForEachStat(s, [&](const char* name, const uint64_t& v, const char*) { d[name] = v; });
    return d;
  }, "All counters as {name: value}.");
  stats.def("__repr__", [](const StoreStats& s) {
    std::string out = "Stats(";
    bool first = true;
    ForEachStat(s, [&](const char* name, const uint64_t& v, const char*) {
      if (v == 0) return;  // the many zero counters of a node without SSD say nothing
      if (!first) out += ", ";
      first = false;
      out += std::string(name) + "=" + std::to_string(v);
    });
    return out + ")";
  });
}

}  // namespace ptstore::python
