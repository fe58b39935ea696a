"""The save half of the worker side (``WorkerSide`` takes it as a base): each layer of a planned save is
gathered out of vLLM's pages into a staging buffer of stored blocks (``save_kv_layer``, or all at once by
``_gather_all``); ``WorkerSide._finalize_step`` hands complete saves to the background threads, which write
them to the store (``_write``), taking the blocks the pages no longer hold from the store's copy
(``_fill_from_store``). Shared state (``_pending_saves``, ``_failed_saves``, ``_taint``) is guarded by
``WorkerSide._cv``; the staging of one save belongs to the thread that holds its ``_SaveJob``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, List, Optional, Set, Tuple

from .._errors import AlreadyExists, Error, NotFound
from ._meta import SaveSpec
from ._staging import _GroupPlan, _Staging, gather_layer, plan_group
from ._store import arena_pieces, is_link_error
from .groups import kept
from .paged import KVGroup, PagedLayer

logger = logging.getLogger("ptstore.vllm")

# A block whose load failed is not saved by a save the scheduler planned before it learnt of the failure
# (async scheduling) for this many steps at most (older vLLM never tells the scheduler side).
_TAINT_STEPS = 4


@dataclass
class _SaveJob:
    spec: SaveSpec
    staging: Optional[_Staging]
    plans: List[Optional[_GroupPlan]] = field(default_factory=list)  # per group
    lacking: List[int] = field(default_factory=list)  # stored blocks a group lacks in the pages, in order
    layers: Set[str] = field(default_factory=set)
    failed: bool = False


class SavePath:
    """The saves of ``WorkerSide`` (see the module's docstring); uses its attributes."""

    def save_kv_layer(self, layer_name: str, kv_layer: Any) -> None:
        meta, kv = self._meta, self.kv
        if meta is None or not meta.saves or kv is None or not self.cfg.layerwise:
            return
        layer = kv.by_name.get(layer_name)
        if layer is None:
            return
        registered = self._tensors.get(layer_name)
        if kv_layer is not None and registered is not None and kv_layer is not registered and \
                kv_layer.data_ptr() != registered.data_ptr():
            layer = PagedLayer.from_tensor(layer_name, layer.index, kv_layer, layer.dims, layer.group)
        job = self._sync_job
        if job is not None:
            job.wait_layer(kv.event_index(layer_name))  # its blocks may be loaded in this step
        for spec in meta.saves:
            if not spec.at_finish:
                self._gather(spec, layer)

    def _gather(self, spec: SaveSpec, layer: PagedLayer) -> None:
        """Copies `layer` of the save's blocks out of the pages into its staging buffer of stored blocks."""
        kv = self.kv
        assert kv is not None
        if not self.writer:
            return
        sj = self._step_saves.get(spec.req_id)
        if sj is None:
            sj = _SaveJob(spec, None)
            try:
                n = len(spec.tokens) // self.block
                if len(spec.block_ids) != len(kv.groups) or any(len(g) < n for g in spec.block_ids):
                    raise ValueError(f"blocks {[len(g) for g in spec.block_ids]} for {n} blocks of "
                                     f"{len(kv.groups)} groups")
                sj.staging = self.pool.acquire(len(spec.tokens))
                sj.plans = [plan_group(kv, self.copier, g, ids[:n]) for g, ids in enumerate(spec.block_ids)]
                sj.lacking = self._lacking(spec, n)
            except Exception:  # noqa: BLE001 - out of host memory, a malformed plan: drop this save
                logger.exception("ptstore: cannot stage the save of request %s", spec.req_id)
                sj.failed = True
            self._step_saves[spec.req_id] = sj
        if sj.failed:
            return
        plan = sj.plans[layer.group]
        try:
            if plan is not None:
                gather_layer(kv, self.copier, kv.groups[layer.group], layer, plan, sj.staging.blocks)
            if layer.is_state:
                self._tag_states(kv.groups[layer.group], layer, plan, sj.staging.blocks)
            sj.layers.add(layer.name)
        except Exception:  # noqa: BLE001
            logger.exception("ptstore: gathering layer %s of request %s failed", layer.name, spec.req_id)
            sj.failed = True

    @staticmethod
    def _tag_states(group: KVGroup, layer: PagedLayer, plan: Optional[_GroupPlan], blocks: Any) -> None:
        """Tags `layer`'s state in each stored block of a save: valid where the plan copied one (vLLM held a
        state for the block), zeros elsewhere (the store then never offers a hit ending there)."""
        import torch

        from .groups import STATE_TAG_BYTES, state_tag

        n = int(blocks.shape[0])
        tags = torch.zeros((n, STATE_TAG_BYTES), dtype=torch.uint8)
        valid = list(range(n)) if plan is not None and plan.pos is None else \
            (plan.pos.tolist() if plan is not None else [])
        if valid:
            tags[valid] = torch.frombuffer(bytearray(b"".join(state_tag(i) for i in valid)),
                                           dtype=torch.uint8).view(-1, STATE_TAG_BYTES)
        group.tags(blocks)[:, layer.index] = tags

    def _gather_all(self, at_finish: bool, state_only: bool = False) -> None:
        """Every layer of this step's saves with this `at_finish` not gathered yet. at_finish True, at the
        step's start: finished requests' histories, whose blocks vLLM holds and runs no layer for (before this
        step's loads can touch other blocks); False: at its end, when no per-layer call came (layerwise
        false)."""
        meta, kv = self._meta, self.kv
        if meta is None or kv is None:
            return
        for spec in meta.saves:
            if spec.at_finish == at_finish:
                for layer in kv.layers:
                    if state_only and not layer.is_state:
                        continue
                    if layer.name not in getattr(self._step_saves.get(spec.req_id), "layers", ()):
                        self._gather(spec, layer)

    def _tainted(self, spec: SaveSpec) -> bool:
        with self._cv:
            if not self._taint:
                return False
            for blk in {b for ids in spec.block_ids for b in ids}:
                t = self._taint.get(blk)
                if t is not None and t[0] > spec.ack and self._step_no - t[1] < _TAINT_STEPS:
                    return True
        return False

    def _save_failed(self, rid: str, counter: str) -> None:
        """A save of `rid` did not reach the store: counted in `stats[counter]` and vLLM's save_errors, and
        reported to the scheduler side (build_worker_meta), which then announces none of its blocks."""
        self.stats[counter] += 1
        self.recorder.add("save_errors")
        with self._cv:
            self._failed_saves.add(rid)

    def _save_done(self, rid: str) -> None:
        with self._cv:
            n = self._pending_saves.get(rid, 0) - 1
            if n > 0:
                self._pending_saves[rid] = n
            else:
                self._pending_saves.pop(rid, None)
            self._cv.notify_all()

    def _write(self, spec: SaveSpec, sj: _SaveJob) -> None:
        t0 = time.monotonic()
        try:
            ns = self.rank_ns(spec.namespace)
            if ns in self._ns_bad:
                self._save_failed(spec.req_id, "saves_dropped")
                return
            client = self.link.get()
            if client is None:
                self._save_failed(spec.req_id, "saves_dropped")
                return
            tokens, staging = spec.tokens, sj.staging
            if sj.lacking:  # slices vLLM no longer keeps: from the store's copy, else stop before them
                tokens, staging = self._fill_from_store(client, ns, spec, sj)
                if staging is None:
                    self.stats["saves_cut_to_nothing"] += 1
                    return
            for attempt in (0, 1):
                try:
                    self._ensure_namespace(client, ns, spec.salt)
                    r = client.save(ns, tokens, staging.tensor)
                    break
                except NotFound:  # the namespace was dropped meanwhile: make it again, once
                    self._ns_ready.discard(ns)
                    if attempt:
                        raise
            self.link.ok()
            self.stats["saves"] += 1
            self.stats["saved_tokens"] += int(r.stored_tokens)
            self.recorder.add("saves")
            self.recorder.add("saved_tokens", int(r.stored_tokens))
            self.recorder.add("saved_bytes", int(r.stored_tokens) * self.layout.bytes_per_token)
            self.recorder.observe("save_seconds", time.monotonic() - t0)
        except Error as e:
            self._save_failed(spec.req_id, "save_errors")
            if is_link_error(e):
                self.link.failed(e)
            else:
                self.warn_once(f"save:{type(e).__name__}", "ptstore: save to %s failed: %s", spec.namespace, e)
        except Exception:  # noqa: BLE001 - a thread must not die
            self._save_failed(spec.req_id, "save_errors")
            logger.exception("ptstore: save of request %s failed", spec.req_id)
        finally:
            self.pool.release(sj.staging)
            self._save_done(spec.req_id)

    def _fill_from_store(self, client: Any, ns: str, spec: SaveSpec, sj: _SaveJob) -> Tuple[Any, Any]:
        """(tokens, staging) to save when a group lacked blocks in the pages (vLLM's null block: a sliding
        window's KV it dropped): the blocks the store holds of the prefix are taken from it; the save stops at
        the first block that is in neither place. (None, None) when nothing is left to save."""
        b, bpb = self.block, self.layout.bytes_per_block
        held = 0
        if sj.lacking[0] > 0 or spec.start > 0:  # the store's copy of the head, over what the pages gave
            whole = len(spec.tokens)
            try:
                if client.mapped:
                    with client.pin(ns, spec.tokens) as pin:
                        held = min(pin.tokens, whole) // b * b
                        if held:
                            extents = [(e.arena_offset, e.length) for e in pin.extents]
                            client.copy_from_arena(arena_pieces(extents, [(0, held // b * bpb)]), sj.staging.flat)
                else:  # (fills the head it holds, leaves the rest as it was)
                    held = min(client.load(ns, spec.tokens, sj.staging.tensor), whole) // b * b
            except NotFound:
                held = 0
        lacking = [i for i in sj.lacking if i >= held // b]
        cut = lacking[0] * b if lacking else len(spec.tokens)
        if cut <= held:
            return None, None  # the store has all the pages can give (or nothing usable)
        if cut < len(spec.tokens):
            self.stats["saves_cut"] += 1
        n = cut // b
        tensor = sj.staging.tensor[:n if self.layout.is_grouped else cut]  # (blocks, or tokens of a dense layout)
        return spec.tokens[:cut], _Staging(sj.staging.flat, tensor, sj.staging.blocks[:n])

    def _lacking(self, spec: SaveSpec, n: int) -> List[int]:
        """The first `n` stored blocks of a save whose slice some group no longer holds in the pages, in order."""
        kinds = [g.kind for g in self.kv.groups]  # type: ignore[union-attr]
        # (a state group lacks most blocks' states by design: their tags say so, the save goes on)
        return sorted({i for kind, ids in zip(kinds, spec.block_ids) for i, blk in enumerate(ids[:n])
                       if kind != "state" and not kept(kind, blk)})

    def _ensure_namespace(self, client: Any, ns: str, salt: str) -> None:
        if ns in self._ns_ready:
            return
        try:
            client.create_namespace(ns, self.layout, salt=salt, exist_ok=True)
        except AlreadyExists:
            have = client.get_namespace(ns).layout
            mine = self.layout
            if not _same_geometry(have, mine):
                self._ns_bad.add(ns)
                logger.error("ptstore: namespace %s holds %s, this model's KV caches are %s: not saving to it (set "
                             "kv_connector_extra_config 'namespace')", ns, have, mine)
                raise
        self._ns_ready.add(ns)


def _same_geometry(want: Any, layout: Any) -> bool:
    """The ``layout`` option against the caches' layout (block_tokens not compared: the option may omit it)."""
    if want.is_grouped or layout.is_grouped:
        return bool(want == layout)
    return (want.layers, want.kv_heads, want.head_dim, want.dtype) == \
        (layout.layers, layout.kv_heads, layout.head_dim, layout.dtype)
