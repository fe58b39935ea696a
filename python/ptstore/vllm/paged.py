"""The one mapping between vLLM's paged KV caches and PTStore's token-major bytes.

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

__all__ = ["PagedLayer", "PagedKV", "TorchCopier", "backend_dims", "layer_index", "layout_dtype", "resolve_dims"]

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


def backend_dims(backend: Any, block_size: int, head_size: int) -> Tuple[str, ...]:
    """The meaning of each dimension of `backend`'s KV cache, told by vLLM's own ``get_kv_cache_shape``.

    The shape is asked twice with different block counts, block sizes and head counts; the dimension that
    follows each is that one, the unchanged 2 is K/V and the unchanged `head_size` the head dimension. A
    backend whose cache is not a dense 5-D K/V cache (MLA's latent cache, state caches) is refused with an
    error naming it.
    """
    name = backend_name(backend)
    try:
        a = tuple(backend.get_kv_cache_shape(11, block_size, 3, head_size, cache_dtype_str="auto"))
        b = tuple(backend.get_kv_cache_shape(13, block_size * 2, 5, head_size, cache_dtype_str="auto"))
    except Exception as e:  # noqa: BLE001 - the backend's own checks
        raise ValueError(f"attention backend {name}: cannot tell its KV cache layout ({e})") from e
    dims: List[Optional[str]] = [None] * len(a)
    if len(a) == 5 and len(b) == 5:
        for i, (x, y) in enumerate(zip(a, b)):
            if (x, y) == (11, 13):
                dims[i] = "block"
            elif (x, y) == (block_size, block_size * 2):
                dims[i] = "slot"
            elif (x, y) == (3, 5):
                dims[i] = "head"
            elif (x, y) == (2, 2) and "kv" not in dims:
                dims[i] = "kv"
            elif (x, y) == (head_size, head_size) and "dim" not in dims:
                dims[i] = "dim"
    if None in dims or sorted(d for d in dims if d) != sorted(PAGE_DIMS):
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
    if named != "auto":
        if named not in NAMED_LAYOUTS:
            raise ValueError(f"unknown kv_cache_layout {named!r}: auto, {', '.join(NAMED_LAYOUTS)}")
        return NAMED_LAYOUTS[named]
    if spec is not None:
        kind = type(spec).__name__
        if "MLA" in kind or not hasattr(spec, "num_kv_heads") or not hasattr(spec, "head_size"):
            raise ValueError(f"layer {name!r} has a {kind} KV cache: PTStoreConnector stores dense K/V caches "
                             f"(FullAttentionSpec) only; MLA and state (Mamba, linear attention) caches are refused")
        if backend is not None:
            return backend_dims(backend, int(spec.block_size), int(spec.head_size))
        return dims_from_sizes(tuple(kv.shape), int(spec.num_kv_heads), int(spec.head_size), int(spec.block_size))
    if kv.dim() == 5 and kv.shape[0] == 2:
        return NAMED_LAYOUTS["flash_attn"]
    if kv.dim() == 5 and kv.shape[1] == 2:
        return NAMED_LAYOUTS["flashinfer"]
    raise ValueError(f"KV cache of layer {name!r} has shape {tuple(kv.shape)}: PTStoreConnector needs the dense 5-D "
                     f"layout of a K/V cache whose backend it can tell (MLA and other layouts are not supported); "
                     f"set kv_cache_layout")


@dataclass
class PagedLayer:
    """One attention layer's paged KV cache, seen as ``pages[kernel block, k, slot, head, dim]``.

    ``dims`` names the dimensions of vLLM's tensor (``backend_dims``); a vLLM block of ``block_size``
    tokens is ``block_size // kernel_block_size`` consecutive kernel blocks (FlashInfer with
    ``--block-size 128`` keeps 64-token kernel blocks).
    """

    name: str
    index: int
    pages: Any  # torch.Tensor view (kernel blocks, 2, kernel block size, heads, dim)
    dims: Tuple[str, ...]

    @classmethod
    def from_tensor(cls, name: str, index: int, kv: Any, dims: Tuple[str, ...]) -> "PagedLayer":
        if kv.dim() != len(dims):
            raise ValueError(f"KV cache of layer {name!r} has shape {tuple(kv.shape)}, its backend's layout has "
                             f"{len(dims)} dimensions {dims}")
        pages = kv.permute(*[dims.index(d) for d in PAGE_DIMS])
        if pages.shape[1] != 2:
            raise ValueError(f"layer {name!r}: the K/V dimension of its cache {tuple(kv.shape)} (layout {dims}) is "
                             f"{pages.shape[1]}, not 2")
        _, copy_dtype = layout_dtype(kv.dtype)
        if pages.dtype != copy_dtype:
            pages = pages.view(copy_dtype)
        return cls(name=name, index=index, pages=pages, dims=dims)

    @property
    def backend(self) -> str:
        """The named layout of this cache (flash_attn, flashinfer, cpu_attn), or "custom"."""
        return next((n for n, d in NAMED_LAYOUTS.items() if d == self.dims), "custom")

    @property
    def num_blocks(self) -> int:
        return int(self.pages.shape[0])

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


class PagedKV:
    """Every layer of a model's paged KV cache, in layer order, and the PTStore layout of one token.

    `dims_of(name, tensor)` gives each layer's dimension names; `block_size` is vLLM's block size (a
    multiple of the caches' kernel block size).
    """

    def __init__(self, kv_caches: Dict[str, Any], dims_of: Callable[[str, Any], Tuple[str, ...]],
                 block_size: int) -> None:
        if not kv_caches:
            raise ValueError("register_kv_caches got no KV caches")
        names = list(kv_caches)
        idx = [layer_index(n) for n in names]
        if all(i is not None for i in idx) and len(set(idx)) == len(idx):
            order = sorted(range(len(names)), key=lambda i: idx[i])  # type: ignore[arg-type,return-value]
        else:
            order = list(range(len(names)))  # vLLM's registration order (model order)
        self.layers: List[PagedLayer] = [
            PagedLayer.from_tensor(names[i], pos, kv_caches[names[i]], dims_of(names[i], kv_caches[names[i]]))
            for pos, i in enumerate(order)]
        self.by_name: Dict[str, PagedLayer] = {layer.name: layer for layer in self.layers}
        first = self.layers[0]
        for layer in self.layers[1:]:
            if (layer.pages.shape[1:], layer.pages.dtype, layer.pages.device) != \
                    (first.pages.shape[1:], first.pages.dtype, first.pages.device):
                raise ValueError(f"KV caches of {first.name!r} {tuple(first.pages.shape)} {first.pages.dtype} and "
                                 f"{layer.name!r} {tuple(layer.pages.shape)} {layer.pages.dtype} differ: "
                                 f"PTStoreConnector needs one uniform KV cache group")
        self.dtype_name, self.copy_dtype = layout_dtype(next(iter(kv_caches.values())).dtype)
        self.device = first.pages.device
        self.block_size = block_size
        kb = first.block_size
        if kb <= 0 or block_size % kb:
            raise ValueError(f"the KV caches have kernel blocks of {kb} tokens, which do not divide vLLM's "
                             f"block_size {block_size}")
        self.kernel_per_block = block_size // kb

    @property
    def kernel_block_size(self) -> int:
        return self.layers[0].block_size

    def kernel_blocks(self, block_ids: Sequence[int]) -> List[int]:
        """The kernel blocks of vLLM blocks `block_ids`, in token order."""
        r = self.kernel_per_block
        if r == 1:
            return list(block_ids)
        return [b * r + j for b in block_ids for j in range(r)]

    def layout(self) -> Any:
        """The PTStore Layout of these caches (block_tokens = vLLM's block size)."""
        from .. import Layout

        f = self.layers[0]
        return Layout(len(self.layers), f.kv_heads, f.head_dim, self.dtype_name, self.block_size)


class TorchCopier:
    """Block copies between the logical pages and token-major buffers, with torch.

    ``rows`` is one layer of a token-major buffer for whole blocks,
    ``buf[a:b, l]`` viewed as ``(blocks, block_size, 2, heads, dim)``;
    ``block_ids`` a 1-D int64 tensor of vLLM block ids, one per block of rows.
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

    def staging(self, tokens: int, layout: Any, dtype: Any) -> Any:
        """A token-major host buffer of `tokens` tokens (pinned when the caches are on a GPU)."""
        import torch

        return torch.empty(layout.kv_shape(tokens), dtype=dtype, pin_memory=not self._is_host)


def block_rows(buf: Any, start: int, end: int, layer: int, block_size: int) -> Any:
    """Rows [start, end) of layer `layer` of a token-major buffer, as (blocks, block_size, 2, heads, dim)."""
    return buf[start:end, layer].unflatten(0, ((end - start) // block_size, block_size))
