// The value types of the client API as Python classes: NamespaceInfo,
// NamespaceQuota (and parse_quota), Extent, LookupResult, SaveResult,
// RemoveResult, PrefixNode, Increment and PrefixLocation
// (Client.locate_prefix), all read-only values with a repr. BindTypes also
// binds, in this order, Layout and LayoutGroup (layout.cc), Stats (stats.cc)
// and PathInfo (path_info.cc): a class is bound before the signatures that
// name it.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "ptstore/types.h"
#include "python/src/bindings.h"

namespace ptstore::python {

namespace {

uint64_t ExtentBytes(const std::vector<Extent>& extents) {
  uint64_t b = 0;
  for (const Extent& e : extents) b += e.length;
  return b;
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

void BindNamespaceTypes(py::module_& m) {
  using namespace pybind11::literals;

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
}

void BindPrefixResults(py::module_& m) {
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
}

void BindTreeTypes(py::module_& m) {
  using namespace pybind11::literals;

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
}

}  // namespace

void BindTypes(py::module_& m) {
  BindLayout(m);
  BindNamespaceTypes(m);
  BindPrefixResults(m);
  BindStats(m);
  BindTreeTypes(m);
  BindPathInfo(m);
}

}  // namespace ptstore::python
