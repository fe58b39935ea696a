"""The fetch half of a load (``_LoadJob`` takes it as a base): what the loads of one step need, copied out of
the store into host staging buffers of stored blocks before ``_LoadJob.run`` writes the pages.

``_fetch`` takes one ``LoadSpec`` by the cheapest way the worker has: the scheduler's pin (``pin_hits``: a copy
out of the mapped arena, no request to ptstored), a pin of its own, the server's copy (clients not trusted with
the arena), or, for a prefix saved at other tensor/pipeline-parallel degrees, each of their namespaces' part
(``_read_across``). Only the blocks each KV cache group keeps in the pages are copied. Blocks that did not
come are recorded in ``failed`` (``_fail``), for vLLM to recompute. Runs on the load job's thread; the job's
counters belong to it until it is done.
"""

from __future__ import annotations

import logging
from typing import Any, List, Optional, Tuple

from .._errors import Error, NotFound
from ._meta import LoadSpec
from ._staging import _GroupPlan, _Staging, plan_group
from ._store import arena_pieces, is_link_error
from .groups import kept
from .keys import rank_heads, rank_namespace

logger = logging.getLogger("ptstore.vllm")


class LoadFetch:
    """The fetches of ``_LoadJob`` (see the module's docstring); uses its attributes (``w``, the worker, and the
    job's counters ``failed``, ``failed_reqs``, ``copied_bytes``, ``pinned_loads``)."""

    def _read_across(self, client: Any, spec: LoadSpec, out: Any) -> int:
        """Reads this worker's KV heads of its layers of a prefix saved at other tensor/pipeline-parallel degrees
        into `out` (token-major, this worker's layers and heads): from each worker namespace of those degrees
        that holds some of them, the part it holds. Returns the whole-block tokens every one of them supplied."""
        import torch

        w = self.w
        b, total = w.block, w.total_kv_heads
        n_tp, n_pp = spec.source_tp or w.tp_size, spec.source_pp or w.pp_size
        mine = rank_heads(w.tp_rank, w.tp_size, total)
        layers = w.layer_indices()  # the model's index of each of this worker's layers
        got = spec.end
        covered = torch.zeros((len(layers), len(mine)), dtype=torch.bool)
        for p in range(n_pp):
            first, stop = stage_layers(w.total_layers, p, n_pp)
            take = [(i, g - first) for i, g in enumerate(layers) if first <= g < stop]  # (mine, theirs)
            if not take:
                continue
            dst = torch.as_tensor([i for i, _ in take])
            src = torch.as_tensor([j for _, j in take])
            for r in range(n_tp):
                theirs = rank_heads(r, n_tp, total)
                lo, hi = max(mine.start, theirs.start), min(mine.stop, theirs.stop)
                if lo >= hi:
                    continue
                name = rank_namespace(spec.namespace, r, n_tp, p, n_pp)
                layout = client.get_namespace(name).layout
                if layout.kv_heads != len(theirs) or layout.layers != stop - first or \
                        layout.head_dim != out.shape[4]:
                    raise ValueError(f"namespace {name} holds {layout}, not rank {r} of {n_tp} of stage {p} of "
                                     f"{n_pp} (layers [{first}, {stop})) of this model")
                tmp = torch.empty(layout.kv_shape(spec.end), dtype=out.dtype)
                g = min(client.load(name, spec.tokens, tmp), spec.end) // b * b
                got = min(got, g)
                if got <= spec.start:
                    return 0
                out[:g, dst, :, lo - mine.start:hi - mine.start] = \
                    tmp[:g, src][:, :, :, lo - theirs.start:hi - theirs.start]
                covered[dst, lo - mine.start:hi - mine.start] = True
        if not bool(covered.all()):
            raise ValueError(f"the namespaces of degrees TP {n_tp} PP {n_pp} do not hold every layer and head of "
                             f"this worker")
        return got

    def _fetch(self, spec: LoadSpec) -> Optional[Tuple[LoadSpec, _Staging, int, List[Optional[_GroupPlan]]]]:
        w = self.w
        kv = w.kv
        assert kv is not None
        b = w.block
        start, end = spec.start, spec.end
        n = (end - start) // b
        if start % b or end % b or end <= start or len(spec.block_ids) != len(kv.groups) or \
                any(len(g) != n for g in spec.block_ids):
            logger.warning("ptstore: malformed load for request %s (tokens [%d, %d), blocks %s for %d groups)",
                           spec.req_id, start, end, [len(g) for g in spec.block_ids], len(kv.groups))
            self._fail(spec, 0)
            return None
        client = w.link.get()
        if client is None:
            self._fail(spec, 0)
            return None
        ns = w.rank_ns(spec.namespace)
        staging: Optional[_Staging] = None
        try:
            if (spec.source_tp or spec.source_pp) and \
                    (spec.source_tp or w.tp_size, spec.source_pp or w.pp_size) != (w.tp_size, w.pp_size):
                ns = f"{spec.namespace} (TP {spec.source_tp or w.tp_size}, PP {spec.source_pp or w.pp_size})"
                staging = w.pool.acquire(end)
                got = self._read_across(client, spec, staging.tensor)
            elif client.mapped and spec.arena_id and spec.arena_id == client.arena_id and \
                    len(spec.extents) == w.workers_namespaces:
                # the scheduler pinned it for this load (pin_hits): no request to ptstored, nothing to miss
                got = end
                staging = w.pool.acquire(got)
                extents = spec.extents[w.namespace_rank]
                self.copied_bytes += self._copy_needed(client, spec, extents, staging, got)
                self.pinned_loads += 1
            elif client.mapped:
                with client.pin(ns, spec.tokens) as pin:
                    got = min(pin.tokens, end) // b * b
                    if got > start:
                        staging = w.pool.acquire(got)
                        extents = [(e.arena_offset, e.length) for e in pin.extents]
                        self.copied_bytes += self._copy_needed(client, spec, extents, staging, got)
            else:  # the server copies for clients it does not trust with its arena
                staging = w.pool.acquire(end)
                got = min(client.load(ns, spec.tokens, staging.tensor), end) // b * b
            w.link.ok()
        except Error as e:
            if is_link_error(e):
                w.link.failed(e)
            elif not isinstance(e, NotFound):
                w.warn_once(f"load:{type(e).__name__}", "ptstore: load from %s failed: %s", ns, e)
            got = 0
        except (TypeError, ValueError) as e:  # a namespace whose layout is not this model's
            w.warn_once(f"load-layout:{ns}", "ptstore: cannot load from %s: %s", ns, e)
            got = 0
        if got <= start:
            w.pool.release(staging)
            self._fail(spec, 0)
            return None
        good = (got - start) // b
        assert staging is not None
        if kv.state_groups and not self._state_valid(spec, staging, start // b + good - 1):
            good = 0  # (the scheduler checked the tags of what it pinned: never seen)
        if good == 0:
            w.pool.release(staging)
            self._fail(spec, 0)
            return None
        self._fail(spec, good)
        plans = [plan_group(kv, w.copier, g, ids[:good]) for g, ids in enumerate(spec.block_ids)]
        return spec, staging, got, plans

    def _state_valid(self, spec: LoadSpec, staging: _Staging, last: int) -> bool:
        """True when every state group holds a valid state (its tag) for stored block `last`, the load's last."""
        import torch

        from .groups import state_tag

        kv = self.w.kv
        assert kv is not None
        want = torch.frombuffer(bytearray(state_tag(last)), dtype=torch.uint8)
        for g in kv.state_groups:
            tags = g.tags(staging.blocks[last:last + 1])[0]
            if not bool((tags == want).all()):
                logger.error("ptstore: request %s: the stored state of block %d (group %d) is not valid; not "
                             "loading it", spec.req_id, last, g.spec.index)
                return False
        return True

    def _copy_needed(self, client: Any, spec: LoadSpec, extents: List[Tuple[int, int]], staging: _Staging,
                     got: int) -> int:
        """Copies from the arena what the load of tokens [spec.start, got) writes into the pages (each group's
        kept blocks only) to the same place in `staging`; returns the bytes copied."""
        kv = self.w.kv
        assert kv is not None
        b = self.w.block
        n = (got - spec.start) // b
        ranges = kv.needed_ranges(spec.start // b, [ids[:n] for ids in spec.block_ids])
        pieces = arena_pieces(extents, ranges)
        client.copy_from_arena(pieces, staging.flat)
        return int(pieces[:, 1].sum()) if len(pieces) else 0

    def _fail(self, spec: LoadSpec, good: int) -> None:
        """The blocks of `spec` past its first `good` did not load."""
        kinds = [g.kind for g in self.w.kv.groups]  # type: ignore[union-attr]
        lost = {blk for kind, ids in zip(kinds, spec.block_ids) for blk in ids[good:] if kept(kind, blk)}
        if lost:
            self.failed.update(lost)
            self.failed_reqs.add(spec.req_id)


def stage_layers(total_layers: int, stage: int, stages: int) -> Tuple[int, int]:
    """[first, stop) of the model's layers pipeline stage `stage` of `stages` holds, as vLLM splits them
    (``get_pp_indices``, with its VLLM_PP_LAYER_PARTITION); ValueError without vLLM or the layer count."""
    if stages <= 1:
        return 0, total_layers
    if total_layers <= 0:
        raise ValueError("the model's layer count is unknown: cannot tell the layers of another PP degree")
    try:
        from vllm.distributed.utils import get_pp_indices
    except ImportError as e:
        raise ValueError(f"vLLM's get_pp_indices is not importable ({e}): cannot tell the layers of a stage") from e
    first, stop = get_pp_indices(total_layers, stage, stages)
    return int(first), int(stop)
