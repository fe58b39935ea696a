"""What the scheduler-side connector tells the worker-side connector each step (picklable)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Set, Tuple

import numpy as np

from ._compat import KVConnectorMetadata, KVConnectorWorkerMetadata

__all__ = ["LoadSpec", "SaveSpec", "PTStoreConnectorMetadata", "PTStoreWorkerMetadata"]


@dataclass
class LoadSpec:
    """Load tokens [start, len(tokens)) of a request's prefix from the store into its vLLM blocks.

    ``tokens`` are the prefix's token ids from token 0 (the store matches whole
    prefixes); ``start`` (a multiple of the block size) is where the request's
    local hit ends; ``block_ids[g][i]``, in KV cache group ``g``, receives tokens
    ``start + i * block_size ...`` (in a sliding-window group vLLM's null block 0:
    the group does not keep them, nothing is read; one flat list is one group); ``is_async``: vLLM's ``load_kv_async``
    (reported by ``get_finished``) instead of a load during this step;
    ``source_tp``/``source_pp``: the prefix was saved by a deployment of
    other tensor/pipeline-parallel degrees: each worker reads its heads of
    its layers from those degrees' rank namespaces. ``arena_id``/``extents``:
    the scheduler pinned the prefix for this load (``extents[k]``: worker
    k's namespace in vLLM's rank order, stage by stage; one per stage when
    the tensor-parallel ranks share one); a worker mapping the same arena
    copies it from there without a request of its own.
    ``state_to[g]``: a block of state group ``g`` (vLLM's running-state block
    in mamba_cache_mode ``align``) that gets the loaded last block's state
    too (0 or absent: none).
    """

    req_id: str
    namespace: str
    tokens: np.ndarray
    start: int
    block_ids: List[List[int]]
    is_async: bool = False
    source_tp: int = 0  # the tensor-parallel degree that saved it (0: this deployment's own)
    source_pp: int = 0  # and its pipeline-parallel degree (0: this deployment's own)
    # The scheduler's pins of the prefix (pin_hits): their arena (Client.arena_id) and, per worker namespace, the
    # extents (arena offset, bytes) in prefix order, covering at least tokens [0, end); 0 and empty: none
    arena_id: int = 0
    extents: List[List[Tuple[int, int]]] = field(default_factory=list)
    state_to: List[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.block_ids = by_group(self.block_ids)

    @property
    def end(self) -> int:
        return len(self.tokens)


@dataclass
class SaveSpec:
    """Save the request's prompt ``tokens`` (whole blocks) from its vLLM blocks ``block_ids`` after this step.

    ``block_ids[g]`` are group ``g``'s blocks of all of ``tokens`` (one flat list is one group); where a
    sliding-window group holds vLLM's null block (KV vLLM dropped), the worker takes that slice from the
    store's copy of ``tokens[:start]`` (saved by an earlier step of the request), and stores nothing from the
    first block it has in neither place.

    ``salt`` is the PTStore salt of ``namespace`` (made when the namespace is
    first created); ``ack`` how many load-error reports the scheduler had
    seen when it planned the save (see the worker's taint check);
    ``at_finish``: the save of a finished request's whole history (prompt and
    generated tokens), whose blocks vLLM holds for it: the worker copies every
    layer at the start of the step instead of after each layer's attention.
    """

    req_id: str
    namespace: str
    salt: str
    tokens: np.ndarray
    block_ids: List[List[int]]
    ack: int = 0
    at_finish: bool = False
    start: int = 0  # tokens an earlier save of this request stored (read back where the pages lack a slice)

    def __post_init__(self) -> None:
        self.block_ids = by_group(self.block_ids)


def by_group(block_ids: Any) -> List[List[int]]:
    """Block ids per KV cache group: a flat list of ints is the one group's."""
    seq = list(block_ids)
    if seq and not isinstance(seq[0], (list, tuple)):
        return [[int(b) for b in seq]]
    return [[int(b) for b in g] for g in seq] if seq else [[]]


@dataclass
class PTStoreConnectorMetadata(KVConnectorMetadata):
    """One step's loads and saves."""

    block_size: int = 16
    loads: List[LoadSpec] = field(default_factory=list)
    saves: List[SaveSpec] = field(default_factory=list)

    def __repr__(self) -> str:
        return (f"PTStoreConnectorMetadata(loads={[(s.req_id, s.start, s.end, s.is_async) for s in self.loads]}, "
                f"saves={[(s.req_id, len(s.tokens), s.at_finish) for s in self.saves]})")


@dataclass
class PTStoreWorkerMetadata(KVConnectorWorkerMetadata):
    """What the workers tell the scheduler side each step: the requests whose saves failed (their blocks are
    not announced as stored). vLLM aggregates it over the workers."""

    failed_saves: Set[str] = field(default_factory=set)

    def aggregate(self, other: "KVConnectorWorkerMetadata") -> "PTStoreWorkerMetadata":
        if isinstance(other, PTStoreWorkerMetadata):
            self.failed_saves |= other.failed_saves
        return self
