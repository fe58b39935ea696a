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
from typing import Any, Dict, List, Optional, Sequence, Tuple

__all__ = ["PagedLayer", "PagedKV", "TorchCopier", "layer_index", "layout_dtype"]

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


@dataclass
class PagedLayer:
    """One attention layer's paged KV cache, seen as ``pages[block, k, slot, head, dim]``."""

    name: str
    index: int
    pages: Any  # torch.Tensor view (num_blocks, 2, block_size, heads, dim)
    backend: str  # "flash_attn" or "flashinfer"

    @classmethod
    def from_tensor(cls, name: str, index: int, kv: Any, kv_cache_layout: str = "auto") -> "PagedLayer":
        if kv.dim() != 5:
            raise ValueError(f"KV cache of layer {name!r} has shape {tuple(kv.shape)}: PTStoreConnector needs the "
                             f"dense 5-D layout [2, num_blocks, block_size, kv_heads, head_dim] (FlashAttention) "
                             f"or [num_blocks, 2, block_size, kv_heads, head_dim] (FlashInfer); MLA and other "
                             f"layouts are not supported")
        backend = kv_cache_layout
        if backend == "auto":
            if kv.shape[0] == 2:
                backend = "flash_attn"  # also when shape[1] == 2 too: vLLM's default backend
            elif kv.shape[1] == 2:
                backend = "flashinfer"
            else:
                raise ValueError(f"KV cache of layer {name!r} has shape {tuple(kv.shape)}: neither dimension 0 "
                                 f"nor 1 is 2 (K and V); set kv_cache_layout")
        if backend == "flash_attn":
            if kv.shape[0] != 2:
                raise ValueError(f"layer {name!r}: a flash_attn KV cache starts with 2, got {tuple(kv.shape)}")
            pages = kv.permute(1, 0, 2, 3, 4)
        elif backend == "flashinfer":
            if kv.shape[1] != 2:
                raise ValueError(f"layer {name!r}: a flashinfer KV cache has 2 in dimension 1, got "
                                 f"{tuple(kv.shape)}")
            pages = kv
        else:
            raise ValueError(f"unknown kv_cache_layout {backend!r}")
        _, copy_dtype = layout_dtype(kv.dtype)
        if pages.dtype != copy_dtype:
            pages = pages.view(copy_dtype)
        return cls(name=name, index=index, pages=pages, backend=backend)

    @property
    def num_blocks(self) -> int:
        return int(self.pages.shape[0])

    @property
    def block_size(self) -> int:
        return int(self.pages.shape[2])

    @property
    def kv_heads(self) -> int:
        return int(self.pages.shape[3])

    @property
    def head_dim(self) -> int:
        return int(self.pages.shape[4])


class PagedKV:
    """Every layer of a model's paged KV cache, in layer order, and the PTStore layout of one token."""

    def __init__(self, kv_caches: Dict[str, Any], kv_cache_layout: str = "auto") -> None:
        if not kv_caches:
            raise ValueError("register_kv_caches got no KV caches")
        names = list(kv_caches)
        idx = [layer_index(n) for n in names]
        if all(i is not None for i in idx) and len(set(idx)) == len(idx):
            order = sorted(range(len(names)), key=lambda i: idx[i])  # type: ignore[arg-type,return-value]
        else:
            order = list(range(len(names)))  # vLLM's registration order (model order)
        self.layers: List[PagedLayer] = [
            PagedLayer.from_tensor(names[i], pos, kv_caches[names[i]], kv_cache_layout) for pos, i in enumerate(order)]
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

    @property
    def block_size(self) -> int:
        return self.layers[0].block_size

    def layout(self) -> Any:
        """The PTStore Layout of these caches (block_tokens = vLLM's block size)."""
        from .. import Layout

        f = self.layers[0]
        return Layout(len(self.layers), f.kv_heads, f.head_dim, self.dtype_name, f.block_size)


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
