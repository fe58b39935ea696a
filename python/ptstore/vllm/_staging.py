"""Host staging buffers of stored blocks, and the copies of one KV cache group between them and vLLM's pages.

A load copies what the store holds into a staging buffer (``StagingPool``), then
``scatter_layer`` writes each layer's slices into the pages; a save gathers each
layer out of the pages into one (``gather_layer``). ``plan_group`` says which
stored blocks a group keeps in the pages and where (one plan per group and
request). Not thread-safe except ``StagingPool`` (its free list is locked).
"""

from __future__ import annotations

import threading
from typing import Any, List, Optional

from .groups import kept
from .paged import KVGroup, PagedKV, PagedLayer, TorchCopier

class _Staging:
    """A host buffer of whole stored blocks from the pool: ``blocks`` is its ``(n, bytes_per_block)`` uint8 view,
    ``tensor`` what the client's save/load/pin calls take (dense layouts: ``Layout.kv_shape`` of the dtype)."""

    __slots__ = ("flat", "tensor", "blocks")

    def __init__(self, flat: Any, tensor: Any, blocks: Any) -> None:
        self.flat, self.tensor, self.blocks = flat, tensor, blocks


class StagingPool:
    """Reuses host buffers of stored blocks (fresh pages and pinned allocations are slow)."""

    def __init__(self, copier: TorchCopier, layout: Any, dtype: Any, max_cached_bytes: int = 1 << 30) -> None:
        self.copier, self.layout, self.dtype = copier, layout, dtype
        self.max_cached = max_cached_bytes
        self._free: List[Any] = []
        self._lock = threading.Lock()

    def acquire(self, tokens: int) -> _Staging:
        import torch

        bt, bpb = self.layout.block_tokens, self.layout.bytes_per_block
        n = tokens // bt
        need = n * bpb
        flat = None
        with self._lock:
            fits = [f for f in self._free if f.numel() >= need]
            if fits:
                flat = min(fits, key=lambda f: f.numel())
                self._free.remove(flat)
        if flat is None:
            size = max(need, 1) + (-max(need, 1)) % (1 << 20)
            flat = torch.empty(size, dtype=torch.uint8, pin_memory=not self.copier._is_host)
        blocks = flat[:need].view(n, bpb)
        if self.layout.is_grouped:
            tensor = blocks
        else:
            tensor = flat[:need].view(self.dtype).view(self.layout.kv_shape(n * bt))
        return _Staging(flat, tensor, blocks)

    def release(self, s: Optional[_Staging]) -> None:
        if s is None:
            return
        with self._lock:
            self._free.append(s.flat)
            total = sum(f.numel() for f in self._free)
            while total > self.max_cached and self._free:
                big = max(self._free, key=lambda f: f.numel())
                self._free.remove(big)
                total -= big.numel()


class _GroupPlan:
    """The copies of one KV cache group for consecutive stored blocks: the positions vLLM keeps (``pos``: an
    index tensor, None for all of them) and, per kernel block of a vLLM block, the kernel block ids."""

    __slots__ = ("pos", "ids", "count")

    def __init__(self, pos: Any, ids: List[Any], count: int) -> None:
        self.pos, self.ids, self.count = pos, ids, count


def plan_group(kv: PagedKV, copier: TorchCopier, group: int, block_ids: List[int]) -> Optional[_GroupPlan]:
    """The plan for group `group`'s vLLM blocks `block_ids` (one per stored block); None if it keeps none."""
    import torch

    kind = kv.groups[group].kind
    keep = [i for i, b in enumerate(block_ids) if kept(kind, b)]
    if not keep:
        return None
    real = [block_ids[i] for i in keep]
    r = 1 if kind == "state" else kv.kernel_per_block  # (a state page is one per vLLM block)
    ids = [copier.block_index([b * r + j for b in real]) for j in range(r)]
    pos = None if len(keep) == len(block_ids) else torch.as_tensor(keep, dtype=torch.int64)
    return _GroupPlan(pos, ids, len(keep))


def _kernel_rows(kv: PagedKV, group: KVGroup, layer: PagedLayer, plan: _GroupPlan, blocks: Any) -> Any:
    """(kernel block ids, rows) for each kernel block of a vLLM block: `layer`'s slices of stored `blocks`."""
    rows = group.rows(blocks, layer.index, kv.block_size)
    if group.kind == "state":
        yield plan.ids[0], rows
        return
    kbs = kv.kernel_block_size
    for j, ids in enumerate(plan.ids):
        yield ids, rows[:, j * kbs:(j + 1) * kbs]


def scatter_layer(kv: PagedKV, copier: TorchCopier, group: KVGroup, layer: PagedLayer, plan: _GroupPlan,
                  blocks: Any) -> None:
    """Writes `layer`'s slices of stored `blocks` (one per position of `plan`) into its pages (a load)."""
    for ids, rj in _kernel_rows(kv, group, layer, plan, blocks):
        copier.scatter(layer, ids, rj if plan.pos is None else rj.index_select(0, plan.pos))


def gather_layer(kv: PagedKV, copier: TorchCopier, group: KVGroup, layer: PagedLayer, plan: _GroupPlan,
                 blocks: Any) -> None:
    """Copies `layer`'s pages into its slices of stored `blocks` at the positions of `plan` (a save)."""
    import torch

    for ids, rj in _kernel_rows(kv, group, layer, plan, blocks):
        if plan.pos is None:
            copier.gather(layer, ids, rj)
        else:
            tmp = torch.empty((plan.count,) + tuple(rj.shape[1:]), dtype=rj.dtype)
            copier.gather(layer, ids, tmp)
            rj.index_copy_(0, plan.pos, tmp)
