// The value types of the public API as Python classes: Layout, LayoutGroup, NamespaceInfo,
// Extent, LookupResult, SaveResult, RemoveResult, Stats, PrefixNode,
// Increment, PrefixLocation (Client.locate_prefix), and PathInfo (what a
// mount's PTSTORE_IOC_INFO says about a path). All are read-only values with a repr; Layout and LayoutGroup are
// also hashable and picklable.
#include <fcntl.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "ptstore/ioctl.h"
#include "ptstore/layout.h"
#include "ptstore/types.h"
#include "python/src/bindings.h"

namespace ptstore::python {

namespace {

// A dtype from "bf16"/"bfloat16"/"float16"/..., a numpy dtype or scalar
// type (np.float16), or a torch dtype (torch.bfloat16).
DType DTypeFrom(const py::handle& obj) {
  std::string name;
  if (py::isinstance<py::str>(obj)) {
    name = obj.cast<std::string>();
  } else if (py::hasattr(obj, "name") && py::isinstance<py::str>(obj.attr("name"))) {
    name = obj.attr("name").cast<std::string>();  // numpy.dtype
  } else if (PyType_Check(obj.ptr()) && py::hasattr(obj, "__name__")) {
    name = obj.attr("__name__").cast<std::string>();  // numpy.float16
  } else {
    name = py::str(obj).cast<std::string>();  // "torch.bfloat16"
    if (name.rfind("torch.", 0) == 0) name = name.substr(6);
  }
  return Unwrap(ParseDType(name));
}

std::string GroupRepr(const LayoutGroup& g) {
  std::ostringstream os;
  os << "LayoutGroup('" << GroupKindName(g.kind) << "', layers=" << g.layers;
  if (g.kind == GroupKind::kState) {
    os << ", state_bytes=" << g.state_bytes;
  } else {
    if (g.kind != GroupKind::kLatent) os << ", kv_heads=" << g.kv_heads;
    os << ", head_dim=" << g.head_dim << ", dtype='" << DTypeName(g.dtype) << "'";
    if (g.kind == GroupKind::kWindow) os << ", window=" << g.window_tokens;
  }
  os << ")";
  return os.str();
}

std::string LayoutRepr(const Layout& l) {
  std::ostringstream os;
  if (l.grouped()) {
    os << "Layout.from_groups([";
    for (size_t i = 0; i < l.groups.size(); ++i) os << (i ? ", " : "") << GroupRepr(l.groups[i]);
    os << "], block_tokens=" << l.block_tokens << ")";
    return os.str();
  }
  os << "Layout(layers=" << l.layers << ", kv_heads=" << l.kv_heads << ", head_dim=" << l.head_dim << ", dtype='"
     << DTypeName(l.dtype) << "', block_tokens=" << l.block_tokens << ")";
  return os.str();
}

Layout MakeLayout(uint32_t layers, uint32_t kv_heads, uint32_t head_dim, const py::handle& dtype,
                  uint32_t block_tokens) {
  Layout l;
  l.layers = layers;
  l.kv_heads = kv_heads;
  l.head_dim = head_dim;
  l.dtype = DTypeFrom(dtype);
  l.block_tokens = block_tokens;
  ThrowIfError(l.Validate());
  return l;
}

// LayoutGroup(kind, layers, ...): dtype None is bf16 for the kinds that have
// elements and none for state; a latent group's kv_heads 0 means 1.
LayoutGroup MakeGroup(const std::string& kind, uint32_t layers, uint32_t kv_heads, uint32_t head_dim,
                      const py::handle& dtype, uint32_t window, uint64_t state_bytes) {
  LayoutGroup g;
  g.kind = Unwrap(ParseGroupKind(kind));
  g.layers = layers;
  g.kv_heads = g.kind == GroupKind::kLatent && kv_heads == 0 ? 1 : kv_heads;
  g.head_dim = head_dim;
  if (g.kind == GroupKind::kState) {
    if (!dtype.is_none()) {
      ThrowIfError(InvalidArgument("a state group is bytes (state_bytes per layer per block): it takes no dtype"));
    }
    g.dtype = DType::kNone;
  } else {
    g.dtype = dtype.is_none() ? DType::kBF16 : DTypeFrom(dtype);
  }
  g.window_tokens = window;
  g.state_bytes = state_bytes;
  ThrowIfError(g.Validate());
  return g;
}

// kv_shape and elements_per_token describe one (layers, 2, kv_heads,
// head_dim) tensor per token: a grouped layout has no such shape.
void RequireDense(const Layout& l, const char* what) {
  if (!l.grouped()) return;
  ThrowIfError(InvalidArgument(std::string(what) + " is for dense layouts: {" + l.ToString() + "} has " +
                               std::to_string(l.groups.size()) +
                               " groups, each with its own shape; a grouped block is bytes_per_block bytes "
                               "(see groups, group_offset and group_bytes_per_block)"));
}

size_t GroupIndex(const Layout& l, int64_t i) {
  const int64_t n = static_cast<int64_t>(l.GroupCount());
  if (i < 0) i += n;
  if (i < 0 || i >= n) {
    throw py::index_error("group index out of range: the layout has " + std::to_string(n) + " group" +
                          (n == 1 ? "" : "s"));
  }
  return static_cast<size_t>(i);
}

py::tuple KvShape(const Layout& l, uint64_t tokens) {
  RequireDense(l, "kv_shape");
  return py::make_tuple(tokens, l.layers, 2, l.kv_heads, l.head_dim);
}

uint64_t ExtentBytes(const std::vector<Extent>& extents) {
  uint64_t b = 0;
  for (const Extent& e : extents) b += e.length;
  return b;
}

// The counters of StoreStats, in declaration order (core/messages.cc).
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

// What PTSTORE_IOC_INFO says about a directory of a mount.
struct PathInfo {
  std::string kind;  // "root", "namespace", "increment"
  std::string ns;
  std::optional<Layout> layout;
  uint32_t ns_uid = 0, ns_gid = 0, ns_mode = 0;
  std::string key, parent;  // hex; empty unless an increment
  uint64_t start_token = 0, tokens = 0, bytes = 0, hits = 0, tensor = 0;
  std::string tier;
  uint32_t children = 0;
  uint64_t arena_bytes = 0;
  uint32_t node_id = 0;
};

std::string KeyHex(const uint8_t* b) {
  static const char* digits = "0123456789abcdef";
  std::string s(32, '0');
  for (int i = 0; i < 16; ++i) {
    s[2 * i] = digits[b[i] >> 4];
    s[2 * i + 1] = digits[b[i] & 15];
  }
  return s;
}

// The layout in the .layout file of the namespace directory at or above the
// directory `path` of a mount (an increment's directory is below its
// parent's, the top ones below the namespace's).
Result<Layout> NamespaceLayoutAbove(const std::string& path) {
  int dir = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return ErrnoError("open " + path, errno);
  struct stat mount_st {};
  if (::fstat(dir, &mount_st) != 0) mount_st.st_dev = 0;
  for (;;) {
    struct stat st {};
    if (::fstat(dir, &st) != 0 || st.st_dev != mount_st.st_dev) break;  // left the mount
    const int fd = ::openat(dir, ".layout", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      std::string text;
      char buf[4096];
      ssize_t n;
      while ((n = ::read(fd, buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(n));
      const int err = errno;
      ::close(fd);
      ::close(dir);
      if (n < 0) return ErrnoError("read the .layout above " + path, err);
      return Layout::Parse(text);
    }
    const int up = ::openat(dir, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    const int err = errno;
    ::close(dir);
    if (up < 0) return ErrnoError("open the parent of a directory above " + path, err);
    dir = up;
  }
  ::close(dir);
  return NotFound("no namespace .layout file above " + path + " on its mount");
}

Result<PathInfo> QueryPath(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return NotFound("no such directory: " + path);
    if (err == EACCES) return PermissionDenied("cannot open " + path + ": " + std::strerror(err));
    if (err == ENOTDIR) return InvalidArgument(path + " is not a directory (give an increment's directory)");
    return ErrnoError("open " + path, err);
  }
  ptstore_ioc_info info{};
  info.version = PTSTORE_IOCTL_VERSION;
  const int rc = ::ioctl(fd, PTSTORE_IOC_INFO, &info);
  const int err = errno;
  ::close(fd);
  if (rc != 0) {
    if (err == ENOTTY || err == EINVAL) {
      return InvalidArgument(path + " is not a directory of a PTStore mount (PTSTORE_IOC_INFO: " +
                             std::strerror(err) + ")");
    }
    if (err == ENOENT) return NotFound("PTSTORE_IOC_INFO on " + path + ": " + std::strerror(err));
    if (err == EPROTO) return Unimplemented("the mount at " + path + " speaks another version of the ioctl ABI");
    return ErrnoError("PTSTORE_IOC_INFO on " + path, err);
  }
  PathInfo p;
  p.kind = info.kind == PTSTORE_KIND_ROOT        ? "root"
           : info.kind == PTSTORE_KIND_NAMESPACE ? "namespace"
           : info.kind == PTSTORE_KIND_INCREMENT ? "increment"
                                                 : "unknown";
  p.ns.assign(info.ns, strnlen(info.ns, sizeof(info.ns)));
  if (info.kind >= PTSTORE_KIND_NAMESPACE) {
    Layout l;
    l.layers = info.layers;
    l.kv_heads = info.kv_heads;
    l.head_dim = info.head_dim;
    l.dtype = static_cast<DType>(info.dtype);
    l.block_tokens = info.block_tokens;
    if (l.layers == 0 && info.dtype == 0) {
      // A grouped layout: the ioctl's struct has only the dense fields (and
      // bytes_per_token); its groups are in the namespace's .layout file.
      PTS_ASSIGN_OR_RETURN(l, NamespaceLayoutAbove(path));
    }
    p.layout = l;
    p.ns_uid = info.ns_uid;
    p.ns_gid = info.ns_gid;
    p.ns_mode = info.ns_mode;
  }
  if (info.kind == PTSTORE_KIND_INCREMENT) {
    p.key = KeyHex(info.key);
    p.parent = KeyHex(info.parent);
    p.start_token = info.start_token;
    p.tokens = info.tokens;
    p.bytes = info.bytes;
    p.hits = info.hits;
    p.tensor = info.tensor;
    p.tier = TierName(static_cast<uint8_t>(info.tier));
    p.children = info.children;
  }
  p.arena_bytes = info.arena_bytes;
  p.node_id = info.node_id;
  return p;
}

// mtime/atime/ctime (float seconds) and *_ns (integers) of anything with a
// `times` (ptstore::Times), as os.stat names them.
template <typename T, typename Class>
void DefTimes(Class& cls, const char* mtime_doc, const char* atime_doc, const char* ctime_doc) {
  cls.def_property_readonly("mtime_ns", [](const T& x) { return x.times.mtime_ns; }, mtime_doc)
      .def_property_readonly("atime_ns", [](const T& x) { return x.times.atime_ns; }, atime_doc)
      .def_property_readonly("ctime_ns", [](const T& x) { return x.times.ctime_ns; }, ctime_doc)
      .def_property_readonly("mtime", [](const T& x) { return x.times.mtime_ns / 1e9; }, "mtime_ns in seconds (float).")
      .def_property_readonly("atime", [](const T& x) { return x.times.atime_ns / 1e9; }, "atime_ns in seconds (float).")
      .def_property_readonly("ctime", [](const T& x) { return x.times.ctime_ns / 1e9; }, "ctime_ns in seconds (float).");
}

}  // namespace

void BindTypes(py::module_& m) {
  using namespace pybind11::literals;

  // -------------------------------------------------------- LayoutGroup
  py::class_<LayoutGroup>(m, "LayoutGroup", R"doc(
One KV cache group of a grouped Layout (Layout.from_groups):

- ``"full"``: full attention, per block ``(block_tokens, layers, 2, kv_heads,
  head_dim)`` of ``dtype``;
- ``"window"``: sliding-window attention over ``window`` tokens, the same bytes
  and order; a load needs only the blocks covering the last ``window`` tokens;
- ``"latent"``: an MLA latent cache, ``(block_tokens, layers, head_dim)`` (no
  K/V pair, ``kv_heads`` is 1);
- ``"state"``: Mamba / linear-attention state, ``(layers, state_bytes)`` per
  block, the state after the block's last token; a load needs only the
  prefix's last block (no dtype, heads or head_dim).

``dtype`` defaults to ``"bf16"`` for the kinds with elements; a state group
takes none. An immutable, hashable value. Raises InvalidArgument for a field
out of range or one its kind does not have.
)doc")
      .def(py::init([](const std::string& kind, uint32_t layers, uint32_t kv_heads, uint32_t head_dim,
                       py::handle dtype, uint32_t window, uint64_t state_bytes) {
             return MakeGroup(kind, layers, kv_heads, head_dim, dtype, window, state_bytes);
           }),
           "kind"_a, "layers"_a, "kv_heads"_a = 0, "head_dim"_a = 0, "dtype"_a = py::none(), "window"_a = 0,
           "state_bytes"_a = 0)
      .def_property_readonly(
          "kind", [](const LayoutGroup& g) { return std::string(GroupKindName(g.kind)); },
          "'full', 'window', 'latent' or 'state'.")
      .def_readonly("layers", &LayoutGroup::layers, "Layers in this group.")
      .def_readonly("kv_heads", &LayoutGroup::kv_heads, "KV heads per layer (1 for latent, 0 for state).")
      .def_readonly("head_dim", &LayoutGroup::head_dim, "Dimensions per head (the latent size; 0 for state).")
      .def_property_readonly(
          "dtype", [](const LayoutGroup& g) { return std::string(DTypeName(g.dtype)); },
          "Element type: 'bf16', 'fp16', 'fp32', 'fp8'; 'none' for state.")
      .def_readonly("window", &LayoutGroup::window_tokens, "Window tokens of a window group (0 otherwise).")
      .def_readonly("state_bytes", &LayoutGroup::state_bytes, "Bytes per layer per block of a state group (0 otherwise).")
      .def("bytes_per_block", &LayoutGroup::BytesPerBlock, "block_tokens"_a,
           "Its bytes in one block of `block_tokens` tokens (without padding).")
      .def("__str__", &LayoutGroup::ToString)
      .def("__repr__", &GroupRepr)
      .def("__eq__", [](const LayoutGroup& a, const LayoutGroup& b) { return a == b; }, py::is_operator())
      .def("__eq__", [](const LayoutGroup&, py::handle) { return false; })
      .def("__hash__", [](const LayoutGroup& g) { return std::hash<std::string>()(g.ToString()); })
      .def(py::pickle(
          [](const LayoutGroup& g) {
            return py::make_tuple(std::string(GroupKindName(g.kind)), g.layers, g.kv_heads, g.head_dim,
                                  static_cast<int>(g.dtype), g.window_tokens, g.state_bytes);
          },
          [](const py::tuple& t) {
            LayoutGroup g;
            g.kind = Unwrap(ParseGroupKind(t[0].cast<std::string>()));
            g.layers = t[1].cast<uint32_t>();
            g.kv_heads = t[2].cast<uint32_t>();
            g.head_dim = t[3].cast<uint32_t>();
            g.dtype = static_cast<DType>(t[4].cast<int>());
            g.window_tokens = t[5].cast<uint32_t>();
            g.state_bytes = t[6].cast<uint64_t>();
            ThrowIfError(g.Validate());
            return g;
          }));

  // ------------------------------------------------------------- Layout
  py::class_<Layout>(m, "Layout", R"doc(
The geometry of one model's KV cache (include/ptstore/layout.h).

A dense layout (``Layout(layers, kv_heads, head_dim, dtype, block_tokens)``):
KV bytes are token-major: each token holds ``layers * 2 (K and V) * kv_heads *
head_dim`` elements of ``dtype``, so the natural array shape of ``n`` tokens is
``(n, layers, 2, kv_heads, head_dim)`` (``kv_shape(n)``). Everything is stored
in whole blocks of ``block_tokens`` tokens; a partial last block is ignored.

A grouped layout (``Layout.from_groups([LayoutGroup(...), ...], block_tokens)``)
describes a hybrid model's KV cache groups: a block is the groups' slices in
order, each starting at a multiple of 64 bytes (``group_offset(i)``, zero
padding between), the block padded to a multiple of lcm(64, block_tokens)
bytes. Its dense fields are 0 and its dtype ``"none"``; its KV buffers are
bytes (uint8, ``bytes_per_token`` per token). One full group is the dense
layout of that group.

``dtype`` is ``"bf16"``, ``"fp16"``, ``"fp32"`` or ``"fp8"``; the constructor
also takes ``"bfloat16"``, ``"float16"``, ``"float32"``, a numpy dtype or a
torch dtype. A Layout is an immutable, hashable value; ``replace()`` makes a
changed copy. Raises InvalidArgument for a field out of range.
)doc")
      .def(py::init([](uint32_t layers, uint32_t kv_heads, uint32_t head_dim, py::handle dtype,
                       uint32_t block_tokens) { return MakeLayout(layers, kv_heads, head_dim, dtype, block_tokens); }),
           "layers"_a, "kv_heads"_a, "head_dim"_a, "dtype"_a = "bf16", "block_tokens"_a = 16)
      .def_static(
          "from_groups",
          [](std::vector<LayoutGroup> groups, uint32_t block_tokens) {
            if (groups.empty()) ThrowIfError(InvalidArgument("Layout.from_groups needs 1 to 16 groups, got none"));
            Layout l = Layout::FromGroups(std::move(groups), block_tokens);
            ThrowIfError(l.Validate());
            return l;
          },
          "groups"_a, "block_tokens"_a = 16,
          "The layout of these groups (1..16, in block order) in blocks of `block_tokens` tokens; exactly one "
          "full group gives the dense Layout of that group.")
      .def_readonly("layers", &Layout::layers, "Transformer layers (0 in a grouped layout).")
      .def_readonly("kv_heads", &Layout::kv_heads,
                    "KV heads per layer (grouped-query attention: fewer than query heads; 0 in a grouped layout).")
      .def_readonly("head_dim", &Layout::head_dim, "Dimensions per head (0 in a grouped layout).")
      .def_property_readonly(
          "dtype", [](const Layout& l) { return std::string(DTypeName(l.dtype)); },
          "Element type: 'bf16', 'fp16', 'fp32' or 'fp8'; 'none' for a grouped layout.")
      .def_readonly("block_tokens", &Layout::block_tokens, "Tokens per block (the unit of storage).")
      .def_property_readonly("is_grouped", &Layout::grouped, "True for a layout of several groups.")
      .def_property_readonly(
          "groups", [](const Layout& l) { return l.AsGroups(); },
          "Its LayoutGroups in block order (a dense layout: its one full group).")
      .def(
          "group_offset", [](const Layout& l, int64_t i) { return l.GroupOffset(GroupIndex(l, i)); }, "i"_a,
          "Where group i's slice starts within a block (bytes; 0 for a dense layout's one group).")
      .def(
          "group_bytes_per_block", [](const Layout& l, int64_t i) { return l.GroupBytesPerBlock(GroupIndex(l, i)); },
          "i"_a, "Bytes of group i in one block (without padding).")
      .def_property_readonly(
          "dtype_size", [](const Layout& l) { return DTypeSize(l.dtype); }, "Bytes per element (0 when grouped).")
      .def_property_readonly(
          "elements_per_token",
          [](const Layout& l) {
            RequireDense(l, "elements_per_token");
            return uint64_t{l.layers} * 2 * l.kv_heads * l.head_dim;
          },
          "Elements per token: layers * 2 * kv_heads * head_dim (dense layouts only: InvalidArgument otherwise).")
      .def_property_readonly("bytes_per_token", &Layout::BytesPerToken, "Bytes per token (padding included).")
      .def_property_readonly("bytes_per_block", &Layout::BytesPerBlock, "Bytes per block (padding included).")
      .def("full_blocks", &Layout::FullBlocks, "tokens"_a, "Whole blocks in `tokens` tokens.")
      .def(
          "whole_tokens", [](const Layout& l, uint64_t tokens) { return l.FullBlocks(tokens) * l.block_tokens; },
          "tokens"_a, "`tokens` rounded down to whole blocks: what a save stores and a load can fill.")
      .def("kv_shape", &KvShape, "tokens"_a,
           "Array shape of `tokens` tokens: (tokens, layers, 2, kv_heads, head_dim) (dense layouts only: "
           "InvalidArgument otherwise).")
      .def(
          "replace",
          [](const Layout& l, std::optional<uint32_t> layers, std::optional<uint32_t> kv_heads,
             std::optional<uint32_t> head_dim, py::object dtype, std::optional<uint32_t> block_tokens) {
            Layout n = l;
            if (layers) n.layers = *layers;
            if (kv_heads) n.kv_heads = *kv_heads;
            if (head_dim) n.head_dim = *head_dim;
            if (!dtype.is_none()) n.dtype = DTypeFrom(dtype);
            if (block_tokens) n.block_tokens = *block_tokens;
            ThrowIfError(n.Validate());
            return n;
          },
          py::kw_only(), "layers"_a = py::none(), "kv_heads"_a = py::none(), "head_dim"_a = py::none(),
          "dtype"_a = py::none(), "block_tokens"_a = py::none(),
          "A copy with the given fields changed (of a grouped layout, only block_tokens).")
      .def_static(
          "parse", [](const std::string& text) { return Unwrap(Layout::Parse(text)); }, "text"_a,
          "Parses the str() form: 'layers=32 kv_heads=8 head_dim=128 dtype=bf16 block_tokens=16', or a grouped "
          "'block_tokens=16 group=full:layers=24:kv_heads=8:head_dim=128:dtype=bf16 "
          "group=state:layers=8:bytes=65536' (the .layout file of a mounted namespace).")
      .def_static("mistral", &MistralLayout, "Mistral-7B-Instruct: 32 layers, 8 KV heads, head_dim 128, bf16, "
                                             "blocks of 16 (128 KiB per token).")
      .def("__str__", &Layout::ToString)
      .def("__repr__", &LayoutRepr)
      .def("__eq__", [](const Layout& a, const Layout& b) { return a == b; }, py::is_operator())
      .def("__eq__", [](const Layout&, py::handle) { return false; })
      .def("__hash__", [](const Layout& l) { return std::hash<std::string>()(l.ToString()); })
      .def(py::pickle([](const Layout& l) { return l.ToString(); },
                      [](const std::string& s) { return Unwrap(Layout::Parse(s)); }));
  m.def("mistral_layout", &MistralLayout,
        "Mistral-7B-Instruct's layout: 32 layers, 8 KV heads, head_dim 128, bf16, blocks of 16 tokens "
        "(128 KiB per token; an 8k-token prefix is 1 GiB).");

  // ------------------------------------------------------ NamespaceInfo
  py::class_<NamespaceInfo> ns_info(m, "NamespaceInfo", "A namespace: one model's cache, with its layout and owner.");
  DefTimes<NamespaceInfo>(ns_info, "Newest of its increments' mtimes, its creation and its removals (ns since the epoch).",
                          "Newest use of an increment in it.", "Newest metadata change in it.");
  ns_info
      .def_readonly("name", &NamespaceInfo::name, "Its name.")
      .def_readonly("layout", &NamespaceInfo::layout, "Its Layout.")
      .def_readonly("salted", &NamespaceInfo::salted, "Whether it has a salt (the salt never leaves the server).")
      .def_readonly("uid", &NamespaceInfo::uid, "Owner uid.")
      .def_readonly("gid", &NamespaceInfo::gid, "Owner gid.")
      .def_readonly("mode", &NamespaceInfo::mode, "Permission bits: read = look up and load; write = save and remove.")
      .def_readonly("bytes", &NamespaceInfo::bytes, "Bytes stored in it on this node.")
      .def_readonly("prefixes", &NamespaceInfo::prefixes, "Increments (radix nodes) stored in it.")
      .def("__repr__", [](const NamespaceInfo& n) {
        std::ostringstream os;
        os << "NamespaceInfo(name='" << n.name << "', layout=" << LayoutRepr(n.layout)
           << ", salted=" << (n.salted ? "True" : "False") << ", uid=" << n.uid << ", gid=" << n.gid << ", mode=0o"
           << std::oct << n.mode << std::dec << ", bytes=" << n.bytes << ", prefixes=" << n.prefixes << ")";
        return os.str();
      });

  // ------------------------------------------------------ NamespaceQuota
  py::class_<NamespaceQuota>(m, "NamespaceQuota",
                             "A namespace's DRAM and SSD quotas on this node (0: no limit) and what counts against them.")
      .def_readonly("ns", &NamespaceQuota::ns, "The namespace.")
      .def_readonly("dram_quota", &NamespaceQuota::dram_quota, "DRAM quota in bytes (0: no limit).")
      .def_readonly("ssd_quota", &NamespaceQuota::ssd_quota, "SSD quota in bytes (0: no limit).")
      .def_readonly("dram_bytes", &NamespaceQuota::dram_bytes, "Arena bytes its increments take now.")
      .def_readonly("ssd_bytes", &NamespaceQuota::ssd_bytes, "SSD tier bytes its increments' records take now.")
      .def_readonly("dram_evictions", &NamespaceQuota::dram_evictions,
                    "Its increments evicted from DRAM to keep it under its DRAM quota.")
      .def_readonly("ssd_evictions", &NamespaceQuota::ssd_evictions,
                    "Its SSD records dropped to keep it under its SSD quota.")
      .def_readonly("cut_saves", &NamespaceQuota::cut_saves,
                    "Saves that stored less than asked (or nothing) because of its DRAM quota.")
      .def("__eq__", [](const NamespaceQuota& a, const NamespaceQuota& b) { return a == b; }, py::is_operator())
      .def("__repr__", [](const NamespaceQuota& q) {
        std::ostringstream os;
        os << "NamespaceQuota(ns='" << q.ns << "', dram_quota=" << q.dram_quota << ", ssd_quota=" << q.ssd_quota
           << ", dram_bytes=" << q.dram_bytes << ", ssd_bytes=" << q.ssd_bytes << ")";
        return os.str();
      });
  m.def(
      "parse_quota",
      [](const std::string& text) { return Unwrap(ParseQuotaBytes(text)); }, "text"_a,
      "Bytes of a quota as people write it ('4GiB', '512MB', '1.5GiB', '0' or 'none': no limit); "
      "InvalidArgument naming what is wrong.");

  // ------------------------------------------------------------- Extent
  py::class_<Extent>(m, "Extent", "One slice of a prefix: `length` bytes at `offset` inside tensor `tensor`.")
      .def_property_readonly(
          "tensor", [](const Extent& e) { return e.tensor.value; }, "Tensor id (owner node in the top 24 bits).")
      .def_property_readonly(
          "owner", [](const Extent& e) { return e.tensor.owner().value; }, "Node id of the tensor's owner.")
      .def_readonly("offset", &Extent::offset, "Byte offset inside the tensor.")
      .def_readonly("length", &Extent::length, "Bytes.")
      .def_readonly("arena_offset", &Extent::arena_offset,
                    "Where the bytes sit in the server's arena (pins only; 0 in a lookup).")
      .def("__eq__", [](const Extent& a, const Extent& b) { return a == b; }, py::is_operator())
      .def("__repr__", [](const Extent& e) {
        std::ostringstream os;
        os << "Extent(tensor=0x" << std::hex << e.tensor.value << std::dec << ", offset=" << e.offset
           << ", length=" << e.length << ", arena_offset=" << e.arena_offset << ")";
        return os.str();
      });

  // ------------------------------------------------------ LookupResult
  py::class_<PrefixInfo>(m, "LookupResult", R"doc(
The longest stored prefix of a prompt: ``matched_tokens`` (whole blocks from
the start; 0 on a miss) and the ``extents`` that hold its bytes, in order.
True when something matched.
)doc")
      .def_readonly("matched_tokens", &PrefixInfo::matched_tokens, "Tokens stored (whole blocks; 0 on a miss).")
      .def_readonly("extents", &PrefixInfo::extents, "The ordered extents holding the prefix's bytes.")
      .def_property_readonly(
          "bytes", [](const PrefixInfo& p) { return ExtentBytes(p.extents); }, "Bytes of the matched prefix.")
      .def("__bool__", [](const PrefixInfo& p) { return p.matched_tokens > 0; })
      .def("__repr__", [](const PrefixInfo& p) {
        return "LookupResult(matched_tokens=" + std::to_string(p.matched_tokens) +
               ", extents=" + std::to_string(p.extents.size()) + ", bytes=" + std::to_string(ExtentBytes(p.extents)) +
               ")";
      });

  py::class_<SaveResult>(m, "SaveResult", "What a save did.")
      .def_readonly("matched_tokens", &SaveResult::matched_tokens, "Tokens that were stored already.")
      .def_readonly("stored_tokens", &SaveResult::stored_tokens, "Tokens this save added.")
      .def_readonly("new_bytes", &SaveResult::new_bytes, "Bytes this save wrote.")
      .def("__repr__", [](const SaveResult& r) {
        return "SaveResult(matched_tokens=" + std::to_string(r.matched_tokens) +
               ", stored_tokens=" + std::to_string(r.stored_tokens) + ", new_bytes=" + std::to_string(r.new_bytes) +
               ")";
      });

  py::class_<RemoveResult>(m, "RemoveResult", "What a removal took away.")
      .def_readonly("nodes", &RemoveResult::nodes, "Increments removed.")
      .def_readonly("bytes", &RemoveResult::bytes, "Their bytes.")
      .def("__repr__", [](const RemoveResult& r) {
        return "RemoveResult(nodes=" + std::to_string(r.nodes) + ", bytes=" + std::to_string(r.bytes) + ")";
      });

  // -------------------------------------------------------------- Stats
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

  // --------------------------------------------------------- PrefixNode
  py::class_<PrefixNodeInfo> node_info(m, "PrefixNode", "One increment of a namespace's radix tree (Client.list_tree()).");
  DefTimes<PrefixNodeInfo>(node_info, "When it was stored (ns since the epoch, as os.stat's st_mtime_ns).",
                           "Its last use: a lookup, pin, load or read of a prefix through it, or another node's fetch "
                           "of it.",
                           "Its last metadata change (a split, times set).");
  node_info
      .def_property_readonly(
          "key", [](const PrefixNodeInfo& n) { return n.key.ToHex(); }, "Chain key at its last block (32 hex digits).")
      .def_property_readonly(
          "parent", [](const PrefixNodeInfo& n) { return n.parent.ToHex(); },
          "Its parent's key; all zeros for a child of the root.")
      .def_readonly("start_token", &PrefixNodeInfo::start_token, "Depth of its first token in the prefix.")
      .def_readonly("tokens", &PrefixNodeInfo::tokens, "Tokens in this increment.")
      .def_readonly("bytes", &PrefixNodeInfo::bytes, "Its bytes.")
      .def_readonly("hits", &PrefixNodeInfo::hits, "Loads that used it.")
      .def_property_readonly(
          "tensor", [](const PrefixNodeInfo& n) { return n.tensor.value; }, "Id of the tensor holding its bytes.")
      .def_property_readonly(
          "cache_class", [](const PrefixNodeInfo& n) { return std::string(CacheClassName(n.cache_class)); },
          "'owned' or 'replica'.")
      .def_readonly("children", &PrefixNodeInfo::children, "Continuations below it.")
      .def_readonly("pins", &PrefixNodeInfo::pins, "Pins held on it now.")
      .def_property_readonly(
          "tier", [](const PrefixNodeInfo& n) { return std::string(TierName(n.tier)); },
          "Where its tensor is: 'dram', 'ssd', 'dram+ssd', 'remote' (another node owns it).")

      .def("__repr__", [](const PrefixNodeInfo& n) {
        return "PrefixNode(key='" + n.key.ToHex() + "', start_token=" + std::to_string(n.start_token) +
               ", tokens=" + std::to_string(n.tokens) + ", bytes=" + std::to_string(n.bytes) +
               ", children=" + std::to_string(n.children) + ", tier='" + TierName(n.tier) + "')";
      });

  py::class_<IncrementInfo>(m, "Increment", "One increment and its own token ids (Client.get_increment()).")
      .def_readonly("node", &IncrementInfo::node, "Its PrefixNode.")
      .def_property_readonly(
          "tokens",
          [](const IncrementInfo& i) { return py::array_t<uint32_t>(i.tokens.size(), i.tokens.data()); },
          "Its own token ids (uint32 array).")
      .def("__repr__", [](const IncrementInfo& i) {
        return "Increment(key='" + i.node.key.ToHex() + "', tokens=" + std::to_string(i.tokens.size()) + ")";
      });

  // ---------------------------------------------------- PrefixLocation
  py::class_<PrefixLocation>(m, "PrefixLocation", R"doc(
Where a prompt's longest match is in the cluster (Client.locate_prefix()):
``matched_tokens`` (whole blocks; 0 on a miss) and ``spans``, a list of
``(end_token, owner, nodes)`` covering [0, matched_tokens) in order. Each
span covers the tokens from the previous span's end to ``end_token``;
``owner`` is the node that owns them and ``nodes`` every node holding all
of their bytes (DRAM or SSD, owned or replica; the owner first when it
does). True when something matched.
)doc")
      .def(py::init([](uint64_t matched_tokens, const std::vector<std::tuple<uint64_t, uint32_t, std::vector<uint32_t>>>& spans) {
             PrefixLocation loc;
             loc.matched_tokens = matched_tokens;
             for (const auto& [end, owner, nodes] : spans) loc.spans.push_back(PrefixSpan{end, owner, nodes});
             return loc;
           }),
           "matched_tokens"_a = 0, "spans"_a = std::vector<std::tuple<uint64_t, uint32_t, std::vector<uint32_t>>>{},
           "A location made by hand (for plans and tests); Client.locate_prefix() gives real ones.")
      .def_readonly("matched_tokens", &PrefixLocation::matched_tokens, "Tokens matched in the cluster (0 on a miss).")
      .def_property_readonly(
          "spans",
          [](const PrefixLocation& l) {
            py::list out;
            for (const PrefixSpan& s : l.spans) out.append(py::make_tuple(s.end_token, s.owner, s.nodes));
            return out;
          },
          "[(end_token, owner, nodes)]: the runs of the match, in order.")
      .def("held_by", &PrefixLocation::HeldBy, "node"_a,
           "Tokens from the start of the prompt whose bytes `node` holds (what an instance beside it loads "
           "without asking another node).")
      .def("__bool__", [](const PrefixLocation& l) { return l.matched_tokens > 0; })
      .def("__repr__", [](const PrefixLocation& l) {
        std::ostringstream os;
        os << "PrefixLocation(matched_tokens=" << l.matched_tokens << ", spans=[";
        for (size_t i = 0; i < l.spans.size(); ++i) {
          const PrefixSpan& s = l.spans[i];
          os << (i ? ", " : "") << "(" << s.end_token << ", " << s.owner << ", [";
          for (size_t j = 0; j < s.nodes.size(); ++j) os << (j ? ", " : "") << s.nodes[j];
          os << "])";
        }
        os << "])";
        return os.str();
      });

  // ----------------------------------------------------------- PathInfo
  py::class_<PathInfo>(m, "PathInfo", "What a PTStore mount says about one of its directories (path_info()).")
      .def_readonly("kind", &PathInfo::kind, "'root', 'namespace' or 'increment'.")
      .def_readonly("namespace", &PathInfo::ns, "Namespace name ('' for the root).")
      .def_readonly("layout", &PathInfo::layout, "The namespace's Layout (None for the root).")
      .def_readonly("ns_uid", &PathInfo::ns_uid, "Namespace owner uid.")
      .def_readonly("ns_gid", &PathInfo::ns_gid, "Namespace owner gid.")
      .def_readonly("ns_mode", &PathInfo::ns_mode, "Namespace mode bits.")
      .def_readonly("key", &PathInfo::key, "Increment: chain key at its last block ('' otherwise).")
      .def_readonly("parent", &PathInfo::parent, "Increment: its parent's key.")
      .def_readonly("start_token", &PathInfo::start_token, "Increment: depth of its first token.")
      .def_readonly("tokens", &PathInfo::tokens, "Increment: its own tokens.")
      .def_property_readonly(
          "prefix_tokens", [](const PathInfo& p) { return p.start_token + p.tokens; },
          "Increment: tokens of the whole prefix ending at it (what load_path fills).")
      .def_readonly("bytes", &PathInfo::bytes, "Increment: its own bytes.")
      .def_readonly("hits", &PathInfo::hits, "Increment: loads that used it.")
      .def_readonly("tensor", &PathInfo::tensor, "Increment: id of its tensor.")
      .def_readonly("tier", &PathInfo::tier, "Increment: 'dram', 'ssd', ...")
      .def_readonly("children", &PathInfo::children, "Increment: continuations below it.")
      .def_readonly("arena_bytes", &PathInfo::arena_bytes, "The store's arena size.")
      .def_readonly("node_id", &PathInfo::node_id, "The store's node id.")
      .def("__repr__", [](const PathInfo& p) {
        return "PathInfo(kind='" + p.kind + "', namespace='" + p.ns + "', start_token=" + std::to_string(p.start_token) +
               ", tokens=" + std::to_string(p.tokens) + ", key='" + p.key + "')";
      });
  m.def(
      "path_info", [](const std::string& path) { return Unwrap(NoGil([&] { return QueryPath(path); })); }, "path"_a,
      "Asks a PTStore mount (ioctl PTSTORE_IOC_INFO) what the directory at `path` is. InvalidArgument when it "
      "is not on a PTStore mount; NotFound when it does not exist.");
}

}  // namespace ptstore::python
