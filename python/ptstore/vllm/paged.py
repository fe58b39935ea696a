"""The one mapping between vLLM's paged KV caches and PTStore's token-major bytes.

(This describes one full-attention group, a dense layout. A hybrid or MLA model's stored block is its
groups' slices one after the other, each token-major over its group's layers in the same way, an MLA
layer's part ``k`` and head ``h`` being 0 of 1: see groups.py and :class:`KVGroup`.)

PTStore stores a prefix token-major (``Layout.kv_shape(n)`` =
``(tokens, layers, 2, kv_heads, head_dim)``): the element for token *t*,
layer *l*, *k* (0: K, 1: V), head *h*, dimension *d* is at::

    (((t * layers + l) * 2 + k) * kv_heads + h) * head_dim + d

vLLM keeps one paged tensor per attention layer. The connector reads each of
them as **logical pages** ``pages_l[block, k, slot, h, d]``:

=================  ==========================================  =============================
backend            vLLM's per-layer tensor                     pages_l
=================  ==========================================  =============================
FlashAttention     ``[2, num_blocks, block_size, heads, dim]``  ``kv.permute(1, 0, 2, 3, 4)``
FlashInfer         ``[num_blocks, 2, block_size, heads, dim]``  ``kv``
=================  ==========================================  =============================

(an HND physical layout is a stride permutation of the same logical shape, so
it needs nothing else). Then, for a request whose token *t* lives in vLLM
block ``block_ids[t // block_size]`` at slot ``t % block_size``::

    ptstore[t, l, k, h, d]  ==  pages_l[block_ids[t // block_size], k, t % block_size, h, d]

where *l* is the layer's index in the model (the number in its name,
``model.layers.<l>.self_attn.attn``). Whole blocks map to whole blocks, so a
load or a save of one layer is one indexed copy of ``n`` blocks:
:meth:`TorchCopier.scatter` (PTStore -> pages) and :meth:`TorchCopier.gather`
(pages -> PTStore layout), both on a ``(blocks, block_size, 2, heads, dim)``
view of one layer of the token-major buffer.

The copier is the part a CUDA build replaces: :class:`TorchCopier` does the
copies with torch (host tensors here; for device caches it moves the
token-major rows to the device first), a GPU copier gathers the pinned
arena's token-major extents into the pages in one kernel launch per layer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .groups import GroupSpec

__all__ = ["KVGroup", "PagedLayer", "PagedKV", "TorchCopier", "backend_dims", "layer_index", "layout_dtype",
           "resolve_dims"]

_INT = re.compile(r"\d+")


def layer_index(name: str) -> Optional[int]:
    """The layer number in a vLLM attention layer's name (``model.layers.12.self_attn.attn`` -> 12)."""
    m = _INT.search(name)
    return int(m.group()) if m else None


def layout_dtype(torch_dtype: Any) -> Tuple[str, Any]:
    """(PTStore dtype name, the torch dtype the bytes are copied as) for a KV cache's torch dtype."""
    import torch

    name = str(torch_dtype).replace("torch.", "")
    if name == "bfloat16":
        return "bf16", torch.bfloat16
    if name in ("float16", "half"):
        return "fp16", torch.float16
    if name in ("float32", "float"):
        return "fp32", torch.float32
    if name in ("uint8", "int8"):
        return "fp8", torch_dtype
    if name.startswith("float8"):
        return "fp8", torch.uint8  # the bits, one byte each
    raise ValueError(f"a KV cache of dtype {torch_dtype} cannot be stored in PTStore (bf16, fp16, fp32 or fp8)")


# The dimensions of a dense K/V cache, in the order of PagedLayer.pages.
PAGE_DIMS = ("block", "kv", "slot", "head", "dim")
# The dimensions of an MLA latent cache (vLLM's MLA backends: [blocks, block_size, kv_lora_rank + rope dim]).
LATENT_DIMS = ("block", "slot", "dim")
# A Mamba / linear-attention layer's state (vLLM's MambaSpec): its state tensors' bytes per block.
STATE_DIMS = ("block", "bytes")
# Named layouts (the ``kv_cache_layout`` option): a backend's get_kv_cache_shape, dimension by dimension.
NAMED_LAYOUTS = {
    "flash_attn": ("kv", "block", "slot", "head", "dim"),  # FlashAttention, FlexAttention, ROCm
    "flashinfer": ("block", "kv", "slot", "head", "dim"),  # FlashInfer, Triton
    "cpu_attn": ("kv", "block", "head", "slot", "dim"),  # vLLM's CPU backend
}


def backend_name(backend: Any) -> str:
    try:
        return str(backend.get_name())
    except Exception:  # noqa: BLE001 - a backend class without get_name
        return getattr(backend, "__name__", repr(backend))


def backend_dims(backend: Any, block_size: int, head_size: int, latent: bool = False) -> Tuple[str, ...]:
    """The meaning of each dimension of `backend`'s KV cache, told by vLLM's own ``get_kv_cache_shape``.

    The shape is asked twice with different block counts, block sizes and head counts; the dimension that
    follows each is that one, the unchanged 2 is K/V and the unchanged `head_size` the head dimension. With
    `latent` (an MLA layer), the backend's cache must be the 3-D latent cache ``(blocks, slot, dim)`` in some
    order. A backend whose cache is neither (state caches, packed formats) is refused with an error naming it.
    """
    name = backend_name(backend)
    try:
        a = tuple(backend.get_kv_cache_shape(11, block_size, 1 if latent else 3, head_size, cache_dtype_str="auto"))
        b = tuple(backend.get_kv_cache_shape(13, block_size * 2, 1 if latent else 5, head_size,
                                             cache_dtype_str="auto"))
    except Exception as e:  # noqa: BLE001 - the backend's own checks
        raise ValueError(f"attention backend {name}: cannot tell its KV cache layout ({e})") from e
    want = LATENT_DIMS if latent else PAGE_DIMS
    dims: List[Optional[str]] = [None] * len(a)
    if len(a) == len(want) and len(b) == len(want):
        for i, (x, y) in enumerate(zip(a, b)):
            if (x, y) == (11, 13):
                dims[i] = "block"
            elif (x, y) == (block_size, block_size * 2):
                dims[i] = "slot"
            elif (x, y) == (3, 5) and not latent:
                dims[i] = "head"
            elif (x, y) == (2, 2) and "kv" not in dims and not latent:
                dims[i] = "kv"
            elif (x, y) == (head_size, head_size) and "dim" not in dims:
                dims[i] = "dim"
    if None in dims or sorted(d for d in dims if d) != sorted(want):
        if latent:
            raise ValueError(f"attention backend {name} keeps its MLA cache as {a} (for 11 blocks of {block_size} "
                             f"tokens, latent size {head_size}): not the 3-D latent cache [blocks, block_size, dim] "
                             f"PTStoreConnector maps")
        raise ValueError(f"attention backend {name} keeps its KV cache as {a} (for 11 blocks of {block_size} "
                         f"tokens, 3 KV heads of {head_size}): not a dense K/V cache PTStoreConnector can map "
                         f"(supported: [2, blocks, block_size, heads, dim] and its permutations)")
    return tuple(d for d in dims if d)


def dims_from_sizes(shape: Sequence[int], kv_heads: int, head_size: int, block_size: int) -> Tuple[str, ...]:
    """Dimensions of a 5-D cache told apart by their sizes (KV heads, head size, a block size dividing vLLM's,
    2, the rest blocks) when no backend is known; ValueError when two could be the same."""
    if len(shape) != 5:
        raise ValueError(f"a KV cache of shape {tuple(shape)} is not a dense 5-D K/V cache")
    candidates: Dict[str, List[int]] = {"kv": [], "head": [], "dim": [], "slot": []}
    for i, n in enumerate(shape):
        if n == 2:
            candidates["kv"].append(i)
        if n == kv_heads:
            candidates["head"].append(i)
        if n == head_size:
            candidates["dim"].append(i)
        if n and block_size % n == 0 and n > 1:
            candidates["slot"].append(i)
    dims: List[Optional[str]] = [None] * 5
    for name in ("kv", "head", "dim", "slot"):
        free = [i for i in candidates[name] if dims[i] is None]
        if len(free) != 1:
            raise ValueError(f"a KV cache of shape {tuple(shape)} with {kv_heads} KV heads of {head_size} and blocks "
                             f"of {block_size}: cannot tell its {name} dimension by size; name the backend's layout "
                             f"with kv_connector_extra_config 'kv_cache_layout' ({', '.join(NAMED_LAYOUTS)})")
        dims[free[0]] = name
    dims[dims.index(None)] = "block"
    return tuple(d for d in dims if d)


def resolve_dims(name: str, kv: Any, *, spec: Any = None, backend: Any = None, named: str = "auto"
                 ) -> Tuple[str, ...]:
    """The dimension names of layer `name`'s cache `kv`: a named layout (the ``kv_cache_layout`` option), else
    what its attention `backend` says (:func:`backend_dims`) for the sizes of its KV cache `spec` (vLLM's
    ``kv_cache_config``), else the spec's sizes alone; with neither (vLLM before kv_cache_config), 2 in
    dimension 0 is FlashAttention's layout, in dimension 1 FlashInfer's."""
    from .groups import spec_kind

    kind = spec_kind(name, spec)[0] if spec is not None else "full"  # (raises for the specs it refuses)
    if kind == "state":  # a list of state tensors, one page per block (vLLM's _reshape_kv_cache_tensors)
        return STATE_DIMS
    latent = kind == "latent"
    if named != "auto":
        if named not in NAMED_LAYOUTS:
            raise ValueError(f"unknown kv_cache_layout {named!r}: auto, {', '.join(NAMED_LAYOUTS)}")
        if latent:
            raise ValueError(f"kv_cache_layout {named!r} names a dense K/V layout, but layer {name!r} keeps an MLA "
                             f"latent cache: leave kv_cache_layout at auto")
        return NAMED_LAYOUTS[named]
    if spec is not None:
        if backend is not None:
            return backend_dims(backend, int(spec.block_size), int(spec.head_size), latent=latent)
        if latent:
            if kv.dim() != 3 or kv.shape[-1] != int(spec.head_size):
                raise ValueError(f"layer {name!r}: MLA cache of shape {tuple(kv.shape)} is not [blocks, block_size, "
                                 f"{spec.head_size}]")
            return LATENT_DIMS
        return dims_from_sizes(tuple(kv.shape), int(spec.num_kv_heads), int(spec.head_size), int(spec.block_size))
    if kv.dim() == 5 and kv.shape[0] == 2:
        return NAMED_LAYOUTS["flash_attn"]
    if kv.dim() == 5 and kv.shape[1] == 2:
        return NAMED_LAYOUTS["flashinfer"]
    raise ValueError(f"KV cache of layer {name!r} has shape {tuple(kv.shape)}: PTStoreConnector needs the dense 5-D "
                     f"layout of a K/V cache whose backend it can tell (MLA and other layouts are not supported); "
                     f"set kv_cache_layout")


def state_pages(name: str, states: Any) -> Any:
    """A Mamba layer's state tensors (vLLM's list for a MambaSpec layer: ``(num_blocks, *shape)`` each, laid
    one after the other in each block's page) as one ``(num_blocks, bytes)`` uint8 view of their bytes."""
    import torch

    tensors = list(states) if isinstance(states, (list, tuple)) else [states]
    if not tensors:
        raise ValueError(f"layer {name!r}: no state tensors")
    raw = [t.view(torch.uint8) if t.element_size() != 1 else t for t in tensors]  # (the last dim is contiguous)
    first = raw[0]
    blocks, page = int(first.shape[0]), int(first.stride(0))
    offset = first.storage_offset()
    for t, r in zip(tensors, raw):
        if int(r.shape[0]) != blocks or int(r.stride(0)) != page or \
                (r[0].numel() and not r[0].is_contiguous()) or r.storage_offset() != offset:
            raise ValueError(f"layer {name!r}: state tensors {[tuple(x.shape) for x in tensors]} are not laid out "
                             f"one after the other in each block's page, as vLLM's model runner allocates them")
        offset += r[0].numel()
    used = offset - first.storage_offset()
    if used > page:
        raise ValueError(f"layer {name!r}: state tensors of {used} bytes in pages of {page}")
    return torch.as_strided(first, size=(blocks, used), stride=(page, 1), storage_offset=first.storage_offset())


@dataclass
class PagedLayer:
    """One attention layer's paged KV cache, seen as ``pages[kernel block, part, slot, head, dim]``.

    ``dims`` names the dimensions of vLLM's tensor (``backend_dims``); ``part`` is K and V (2) of a K/V
    cache, or the one latent vector (1) of an MLA cache, whose ``head`` dimension is 1 too. A vLLM block of
    ``block_size`` tokens is ``block_size // kernel_block_size`` consecutive kernel blocks (FlashInfer with
    ``--block-size 128`` keeps 64-token kernel blocks). ``index`` is the layer's place in its group.
    """

    name: str
    index: int
    pages: Any  # torch.Tensor view (kernel blocks, parts, kernel block size, heads, dim)
    dims: Tuple[str, ...]
    group: int = 0

    @classmethod
    def from_tensor(cls, name: str, index: int, kv: Any, dims: Tuple[str, ...], group: int = 0) -> "PagedLayer":
        if dims == STATE_DIMS:
            return cls(name=name, index=index, pages=state_pages(name, kv)[:, None, None, None, :], dims=dims,
                       group=group)
        if kv.dim() != len(dims):
            raise ValueError(f"KV cache of layer {name!r} has shape {tuple(kv.shape)}, its backend's layout has "
                             f"{len(dims)} dimensions {dims}")
        if sorted(dims) == sorted(LATENT_DIMS):
            pages = kv.permute(*[dims.index(d) for d in LATENT_DIMS])[:, None, :, None, :]
        else:
            pages = kv.permute(*[dims.index(d) for d in PAGE_DIMS])
            if pages.shape[1] != 2:
                raise ValueError(f"layer {name!r}: the K/V dimension of its cache {tuple(kv.shape)} (layout {dims}) "
                                 f"is {pages.shape[1]}, not 2")
        _, copy_dtype = layout_dtype(kv.dtype)
        if pages.dtype != copy_dtype:
            pages = pages.view(copy_dtype)
        return cls(name=name, index=index, pages=pages, dims=dims, group=group)

    @property
    def is_state(self) -> bool:
        """A Mamba / linear-attention layer's state pages: ``pages[block, 0, 0, 0, byte]``."""
        return self.dims == STATE_DIMS

    @property
    def backend(self) -> str:
        """The named layout of this cache (flash_attn, flashinfer, cpu_attn, latent, state), or "custom"."""
        if self.dims == LATENT_DIMS:
            return "latent"
        if self.dims == STATE_DIMS:
            return "state"
        return next((n for n, d in NAMED_LAYOUTS.items() if d == self.dims), "custom")

    @property
    def num_blocks(self) -> int:
        return int(self.pages.shape[0])

    @property
    def parts(self) -> int:
        """2 (K and V) or 1 (an MLA latent vector)."""
        return int(self.pages.shape[1])

    @property
    def block_size(self) -> int:
        """Tokens per kernel block."""
        return int(self.pages.shape[2])

    @property
    def kv_heads(self) -> int:
        return int(self.pages.shape[3])

    @property
    def head_dim(self) -> int:
        return int(self.pages.shape[4])


@dataclass
class KVGroup:
    """The layers of one vLLM KV cache group and where a stored block keeps them.

    ``offset`` and ``block_bytes``: the group's slice of a stored block (``Layout.group_offset``); the slice
    is token-major, ``(block_size, layers, parts, kv_heads, head_dim)``.
    """

    spec: GroupSpec
    layers: List[PagedLayer]
    dtype_name: str
    copy_dtype: Any
    offset: int = 0
    block_bytes: int = 0

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def first(self) -> PagedLayer:
        return self.layers[0]

    @property
    def state_bytes(self) -> int:
        """A state group's bytes of one layer's state per block (its slice of a stored block has a tag after
        each: groups.STATE_TAG_BYTES)."""
        return self.first.head_dim

    def layout_group(self) -> Any:
        from .._ptstore import LayoutGroup
        from .groups import STATE_TAG_BYTES

        f = self.first
        if self.kind == "state":
            return LayoutGroup("state", len(self.layers), state_bytes=self.state_bytes + STATE_TAG_BYTES)
        if self.kind == "latent":
            return LayoutGroup("latent", len(self.layers), head_dim=f.head_dim, dtype=self.dtype_name)
        return LayoutGroup(self.kind, len(self.layers), kv_heads=f.kv_heads, head_dim=f.head_dim,
                           dtype=self.dtype_name, window=self.spec.window)

    def rows(self, blocks: Any, layer: int, block_size: int) -> Any:
        """Layer `layer` (its place in the group) of the group's slices of `blocks`, a ``(n, bytes_per_block)``
        uint8 view of stored blocks, as ``(n, block_size, parts, heads, dim)``; a state group's as ``(n, 1, 1, 1,
        state bytes)``."""
        f = self.first
        if self.kind == "state":
            return self.layer_slices(blocks)[:, layer, None, None, None, :self.state_bytes]
        g = blocks[:, self.offset:self.offset + self.block_bytes].view(self.copy_dtype)
        return g.unflatten(1, (block_size, len(self.layers), f.parts, f.kv_heads, f.head_dim))[:, :, layer]

    def layer_slices(self, blocks: Any) -> Any:
        """A state group's slices of stored `blocks` as ``(n, layers, state bytes + tag)`` uint8."""
        return blocks[:, self.offset:self.offset + self.block_bytes].unflatten(1, (len(self.layers), -1))

    def tags(self, blocks: Any) -> Any:
        """A state group's tags in stored `blocks`: ``(n, layers, STATE_TAG_BYTES)`` uint8."""
        return self.layer_slices(blocks)[:, :, self.state_bytes:]


class PagedKV:
    """Every layer of a model's paged KV caches, by KV cache group, and the PTStore layout of one block.

    `dims_of(name, tensor)` gives each layer's dimension names; `block_size` is vLLM's block size (a
    multiple of the caches' kernel block size); `groups` vLLM's KV cache groups (``groups.group_specs``;
    None: one full-attention group of every layer, as vLLM before kv_cache_config).
    """

    def __init__(self, kv_caches: Dict[str, Any], dims_of: Callable[[str, Any], Tuple[str, ...]],
                 block_size: int, groups: Optional[Sequence[GroupSpec]] = None) -> None:
        if not kv_caches:
            raise ValueError("register_kv_caches got no KV caches")
        if groups is None:
            groups = [GroupSpec(index=0, kind="full", window=0, layer_names=tuple(kv_caches))]
        missing = [n for g in groups for n in g.layer_names if n not in kv_caches]
        if missing:
            raise ValueError(f"vLLM's KV cache groups name layers {missing} that register_kv_caches did not get")
        self.groups: List[KVGroup] = []
        self.layers: List[PagedLayer] = []  # every layer, group by group (a load's per-layer events)
        for gs in groups:
            names = list(gs.layer_names)
            idx = [layer_index(n) for n in names]
            if all(i is not None for i in idx) and len(set(idx)) == len(idx):
                order = sorted(range(len(names)), key=lambda i: idx[i])  # type: ignore[arg-type,return-value]
            else:
                order = list(range(len(names)))  # vLLM's order (model order)
            layers = [PagedLayer.from_tensor(names[i], pos, kv_caches[names[i]], dims_of(names[i], kv_caches[names[i]]),
                                             group=gs.index) for pos, i in enumerate(order)]
            first = layers[0]
            for layer in layers[1:]:
                if (layer.pages.shape[1:], layer.pages.dtype, layer.pages.device) != \
                        (first.pages.shape[1:], first.pages.dtype, first.pages.device):
                    raise ValueError(f"KV caches of {first.name!r} {tuple(first.pages.shape)} {first.pages.dtype} and "
                                     f"{layer.name!r} {tuple(layer.pages.shape)} {layer.pages.dtype} differ: "
                                     f"PTStoreConnector needs one geometry per KV cache group")
            if gs.kind == "state" and not all(layer.is_state for layer in layers):
                raise ValueError(f"layer {first.name!r}: a state group of caches that are not state pages")
            if gs.kind != "state" and (gs.kind == "latent") != (first.parts == 1):
                raise ValueError(f"layer {first.name!r}: a {gs.kind} group with a cache of {first.parts} part(s) "
                                 f"({first.dims})")
            if gs.kind == "state":
                import torch

                dtype_name, copy_dtype = "none", torch.uint8
            else:
                dtype_name, copy_dtype = layout_dtype(kv_caches[first.name].dtype)
            self.groups.append(KVGroup(spec=gs, layers=layers, dtype_name=dtype_name, copy_dtype=copy_dtype))
            self.layers.extend(layers)
        self.by_name: Dict[str, PagedLayer] = {layer.name: layer for layer in self.layers}
        self._event_index: Dict[str, int] = {layer.name: pos for pos, layer in enumerate(self.layers)}
        attn = [layer for layer in self.layers if not layer.is_state]
        first = attn[0] if attn else self.layers[0]
        self.device = first.pages.device
        self.block_size = block_size
        kbs = {layer.block_size for layer in attn} or {block_size}  # (a state page is one per vLLM block)
        kb = first.block_size if attn else block_size
        if len(kbs) != 1 or kb <= 0 or block_size % kb:
            raise ValueError(f"the KV caches have kernel blocks of {sorted(kbs)} tokens: PTStoreConnector needs one "
                             f"kernel block size dividing vLLM's block_size {block_size}")
        self.kernel_per_block = block_size // kb
        self._layout = self._make_layout()
        for i, g in enumerate(self.groups):  # (a dense layout is its one group)
            g.offset = self._layout.group_offset(i)
            g.block_bytes = self._layout.group_bytes_per_block(i)

    @property
    def grouped(self) -> bool:
        """False for one full-attention group: today's dense layout, byte for byte."""
        return not (len(self.groups) == 1 and self.groups[0].kind == "full")

    @property
    def kernel_block_size(self) -> int:
        return self.block_size // self.kernel_per_block

    @property
    def dtype_name(self) -> str:
        return self._attn_group.dtype_name

    @property
    def copy_dtype(self) -> Any:
        return self._attn_group.copy_dtype

    @property
    def _attn_group(self) -> KVGroup:
        return next((g for g in self.groups if g.kind != "state"), self.groups[0])

    @property
    def state_groups(self) -> List[KVGroup]:
        return [g for g in self.groups if g.kind == "state"]

    def event_index(self, name: str) -> int:
        """The layer's position in :attr:`layers` (the per-layer load events)."""
        return self._event_index[name]

    def layout(self) -> Any:
        """The PTStore Layout of these caches (block_tokens = vLLM's block size)."""
        return self._layout

    def needed_ranges(self, first_block: int, block_ids: Sequence[Sequence[int]]) -> List[Tuple[int, int]]:
        """The byte ranges ``(offset, length)`` of a stored prefix a load of its blocks ``first_block, ...``
        into vLLM blocks ``block_ids[g]`` (per group) must read: each group's slice of each block the group
        keeps (a sliding window's: only the window's), merged where they touch. Dense: one range."""
        from .groups import kept

        bpb = self._layout.bytes_per_block
        n = len(block_ids[0]) if block_ids else 0
        if not self.grouped:
            return [(first_block * bpb, n * bpb)] if n else []
        pieces = sorted(((first_block + i) * bpb + g.offset, g.block_bytes)
                        for g, ids in zip(self.groups, block_ids) for i, b in enumerate(ids) if kept(g.kind, b))
        out: List[Tuple[int, int]] = []
        for off, length in pieces:
            if out and out[-1][0] + out[-1][1] == off:
                out[-1] = (out[-1][0], out[-1][1] + length)
            else:
                out.append((off, length))
        return out

    def _make_layout(self) -> Any:
        from .. import Layout

        if not self.grouped:
            f = self.groups[0].first
            return Layout(len(self.groups[0].layers), f.kv_heads, f.head_dim, self.dtype_name, self.block_size)
        return Layout.from_groups([g.layout_group() for g in self.groups], block_tokens=self.block_size)


class TorchCopier:
    """Block copies between the logical pages and token-major buffers, with torch.

    ``rows`` is one layer's slices of stored blocks (``KVGroup.rows``), as
    ``(kernel blocks, kernel block size, parts, heads, dim)``; ``block_ids`` a
    1-D int64 tensor of kernel block ids, one per kernel block of rows.
    """

    def __init__(self, device: Any) -> None:
        self.device = device
        self._is_host = getattr(device, "type", "cpu") == "cpu"

    def block_index(self, block_ids: Sequence[int]) -> Any:
        import torch

        t = torch.as_tensor(list(block_ids), dtype=torch.int64)
        return t if self._is_host else t.to(self.device, non_blocking=True)

    def scatter(self, layer: PagedLayer, block_ids: Any, rows: Any) -> None:
        """pages[block_ids[i], k, s] = rows[i, s, k] (a load)."""
        src = rows.permute(0, 2, 1, 3, 4)  # (blocks, 2, block_size, heads, dim)
        if not self._is_host:
            src = src.to(self.device, non_blocking=True)
        layer.pages.index_copy_(0, block_ids, src)

    def gather(self, layer: PagedLayer, block_ids: Any, rows: Any) -> None:
        """rows[i, s, k] = pages[block_ids[i], k, s] (a save)."""
        rows.permute(0, 2, 1, 3, 4).copy_(layer.pages.index_select(0, block_ids))

    def synchronize(self) -> None:
        """Waits for copies issued on a device (nothing to do on the host)."""
        if not self._is_host:
            import torch

            torch.cuda.synchronize(self.device)

