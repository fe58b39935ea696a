"""KV events for vLLM's event stream: what PTStore holds for this engine, in vLLM's own event classes.

vLLM publishes ``KVEventBatch``es of ``BlockStored`` / ``BlockRemoved`` events (its
``--kv-events-config``) that KV-cache-aware routers subscribe to; its scheduler adds
whatever the connector's ``take_events`` returns. PTStoreConnector reports, with
vLLM's block hashes (the request's ``block_hashes``, as vLLM's block pool reports
them) and medium ``"CPU"`` (host memory, as vLLM's CPU offloading names it):

* ``BlockStored`` for the blocks a save wrote to the store, prompt and generated
  tokens alike, when the worker reports the save done (``finished_sending``) and
  not failed (the worker's ``PTStoreWorkerMetadata``); without
  ``hold_blocks_until_saved``, when the save is planned;
* ``BlockStored`` for the blocks a lookup found and a load was planned from (the
  store holds them), and ``BlockRemoved`` for any of them whose load then failed
  (the store no longer holds it);
* ``BlockRemoved`` for every block it announced, on ``reset_cache``.

Each block is announced once per engine (a bounded memory of what was announced).
Where vLLM is not importable, nothing is reported.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, List, Optional

__all__ = ["EventLog", "MEDIUM"]

MEDIUM = "CPU"

try:
    from vllm.distributed.kv_events import BlockRemoved, BlockStored  # type: ignore[import-not-found]
    from vllm.v1.core.kv_cache_utils import (  # type: ignore[import-not-found]
        generate_block_hash_extra_keys, maybe_convert_block_hash)

    HAVE_EVENTS = True
except ImportError:  # pragma: no cover - exercised where vLLM is not installed
    HAVE_EVENTS = False


class EventLog:
    """The scheduler side's queue of events for ``take_events``."""

    def __init__(self, block_size: int, max_announced: int = 1 << 20) -> None:
        self.block = block_size
        self.max_announced = max_announced
        self._announced: "OrderedDict[Any, None]" = OrderedDict()
        self._queue: List[Any] = []

    def stored(self, request: Any, start_block: int, end_block: int) -> None:
        """Blocks [start_block, end_block) of `request` are in the store."""
        if not HAVE_EVENTS:
            return
        hashes = list(getattr(request, "block_hashes", None) or ())[:end_block]
        b = self.block
        first = start_block
        while first < len(hashes) and maybe_convert_block_hash(hashes[first]) in self._announced:
            first += 1  # announced already (a run from the start is the common case)
        if first >= len(hashes):
            return
        new = [maybe_convert_block_hash(h) for h in hashes[first:]]
        extra: List[Optional[tuple]] = []
        mm_idx = 0
        for i in range(first, len(hashes)):
            keys, mm_idx = generate_block_hash_extra_keys(request, i * b, (i + 1) * b, mm_idx)
            extra.append(keys)
        lora = getattr(request, "lora_request", None)
        self._queue.append(BlockStored(
            block_hashes=new,
            parent_block_hash=maybe_convert_block_hash(hashes[first - 1]) if first else None,
            token_ids=list(request.all_token_ids[first * b:len(hashes) * b]),
            block_size=b,
            lora_id=getattr(lora, "adapter_id", None) if lora else None,
            medium=MEDIUM,
            lora_name=getattr(lora, "name", None) if lora else None,
            extra_keys=extra if any(k is not None for k in extra) else None,
            group_idx=0,
        ))
        for h in new:
            self._announced[h] = None
        while len(self._announced) > self.max_announced:
            self._announced.popitem(last=False)

    def removed(self, request: Any, blocks: List[int]) -> None:
        """Blocks `blocks` (indexes in the request) are not in the store (their load failed)."""
        if not HAVE_EVENTS:
            return
        hashes = list(getattr(request, "block_hashes", None) or ())
        gone = [maybe_convert_block_hash(hashes[i]) for i in blocks if i < len(hashes)]
        gone = [h for h in gone if h in self._announced]
        if gone:
            for h in gone:
                del self._announced[h]
            self._queue.append(BlockRemoved(block_hashes=gone, medium=MEDIUM, group_idx=0))

    def cleared(self) -> None:
        """Everything announced is gone from the store (reset_cache)."""
        if HAVE_EVENTS and self._announced:
            self._queue.append(BlockRemoved(block_hashes=list(self._announced), medium=MEDIUM, group_idx=0))
        self._announced.clear()

    def take(self) -> List[Any]:
        out, self._queue = self._queue, []
        return out
