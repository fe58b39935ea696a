// Layout and LayoutGroup as Python classes (include/ptstore/layout.h), and
// mistral_layout(): immutable values with a repr, hashable and picklable.
// A dtype argument may be a name ("bf16", "bfloat16", ...), a numpy dtype or
// scalar type, or a torch dtype. Bad fields raise InvalidArgument (the
// Validate() message of the layout).
#include <pybind11/stl.h>

#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "ptstore/layout.h"
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

}  // namespace

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

namespace {

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

void BindLayoutGroup(py::module_& m) {
  using namespace pybind11::literals;

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
}

void BindLayoutClass(py::module_& m) {
  using namespace pybind11::literals;

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
}

}  // namespace

void BindLayout(py::module_& m) {
  BindLayoutGroup(m);
  BindLayoutClass(m);
}

}  // namespace ptstore::python
