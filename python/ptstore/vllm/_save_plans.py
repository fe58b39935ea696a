"""The save plans of the scheduler side (``SchedulerSide`` takes it as a base), and the saves in flight.

A prompt's save is planned once, in the step that completes the KV of its last whole block, unless the store
held all of it at lookup time (``_plan_save``); with a sliding-window or state group, every step's new whole
blocks are (stepwise). At a request's end, with ``save_generated`` and ``hold_blocks_until_saved``, so are
its generated tokens' (``_plan_finish_save``). With ``save_wait_ms``, a planned save is "in flight" until the
worker reports it written or the wait expires: a lookup of a prompt sharing its blocks asks again later
(``inflight_blocks``) rather than recompute them. Runs on the scheduler's thread.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, List

import numpy as np

from ._meta import PTStoreConnectorMetadata, SaveSpec
from ._requests import _EMITTED, _NONE, _NOT_NEEDED, _Req, _prompt_len, _real
from .groups import per_group
from .keys import chain_keys, deepest_shared_block, request_tokens

logger = logging.getLogger("ptstore.vllm")


@dataclass
class _Inflight:
    keys: List[bytes]
    deadline: float


class SavePlanner:
    """The save plans of ``SchedulerSide`` (see the module's docstring); uses its attributes."""

    def _add_inflight(self, rid: str, ns: str, tokens: np.ndarray) -> None:
        self._drop_inflight(rid)
        keys = chain_keys(ns, tokens, self.block)
        self._inflight[rid] = _Inflight(keys, time.monotonic() + self.cfg.save_wait_ms / 1000.0)
        for k in keys:
            self._inflight_keys[k] = self._inflight_keys.get(k, 0) + 1

    def _drop_inflight(self, rid: str) -> None:
        e = self._inflight.pop(rid, None)
        if e is None:
            return
        for k in e.keys:
            n = self._inflight_keys.get(k, 0) - 1
            if n > 0:
                self._inflight_keys[k] = n
            else:
                self._inflight_keys.pop(k, None)

    def _expire_inflight(self) -> None:
        now = time.monotonic()
        for rid in [r for r, e in self._inflight.items() if e.deadline <= now]:
            self._drop_inflight(rid)

    def inflight_blocks(self, ns: str, tokens: np.ndarray) -> int:
        """Whole blocks at the start of `tokens` that a save still in flight (not expired) will store."""
        self._expire_inflight()
        if not self._inflight_keys:
            return 0
        return deepest_shared_block(chain_keys(ns, tokens, self.block), self._inflight_keys)

    def _save_ids(self, st: _Req, ids: List[List[int]], n: int) -> List[List[int]]:
        """The first `n` blocks of each group for a save; in a state group vLLM's null block where vLLM holds no
        valid state of the block (mode align: no step ended there), so that the worker tags it invalid."""
        out = [list(g[:n]) for g in ids]
        if self.state_mode == "align":
            for g, gs in zip(out, self.groups or ()):
                if gs.kind == "state":
                    g[:] = [blk if i in st.state_ends else 0 for i, blk in enumerate(g)]
        return out

    def _plan_save(self, meta: PTStoreConnectorMetadata, st: _Req, computed_after: int) -> None:
        b = self.block
        if self.state_mode == "align" and computed_after % b == 0 and computed_after:
            st.state_ends.add(computed_after // b - 1)  # this step's running state is that block's
        if st.save_state != _NONE or not self.cfg.save or st.bypass is not None:
            return
        whole = _prompt_len(st.request) // b * b
        if self.stepwise:
            # Every step's new whole blocks while vLLM still has them: the prompt's, and with save_generated
            # the generated tokens' too (a window drops them as decoding goes on)
            if self.cfg.save_generated and self.cfg.hold_blocks_until_saved:
                whole = int(st.request.num_tokens) // b * b
            done = min(computed_after, whole) // b * b
            if done <= max(st.saved_tokens, st.store_tokens):
                return
        else:
            if whole == 0 or st.store_tokens >= whole:
                st.save_state = _NOT_NEEDED
                return
            done = whole
            if computed_after < done:
                return
        if min(len(g) for g in st.block_ids) < done // b:
            logger.warning("ptstore: request %s has %d blocks, its prompt %d whole blocks; not saved",
                           st.request.request_id, min(len(g) for g in st.block_ids), done // b)
            st.save_state = _NOT_NEEDED
            return
        tokens = request_tokens(st.request, done, st.overlay)
        meta.saves.append(SaveSpec(req_id=st.request.request_id, namespace=st.namespace, salt=st.salt, tokens=tokens,
                                   block_ids=self._save_ids(st, st.block_ids, done // b), ack=self._invalid_reports,
                                   start=max(st.saved_tokens, st.store_tokens)))
        if done == whole and not self.stepwise:
            st.save_state = _EMITTED
        st.saves_emitted += 1
        st.saved_tokens = done
        self.stats["saves_planned"] += 1
        self._save_planned(st.request, done // b)
        if self.cfg.save_wait_ms > 0:
            self._add_inflight(st.request.request_id, st.namespace, tokens)

    def _plan_finish_save(self, st: _Req, request: Any, block_ids: Any) -> None:
        """At a request's end, the save of its generated tokens: every whole block vLLM computed (prompt and
        output; the last sampled token has no KV yet), so that a conversation's next turn or an agent's next
        step hits its whole history. Needs the blocks held until the worker copied them
        (``hold_blocks_until_saved``); off with ``save_generated`` false."""
        if not (self.cfg.save and self.cfg.save_generated and self.cfg.hold_blocks_until_saved) or \
                st.bypass is not None:
            return
        status = getattr(getattr(request, "status", None), "name", "")
        if status == "FINISHED_ERROR":
            return
        b = self.block
        whole = int(getattr(request, "num_computed_tokens", 0)) // b * b
        if whole <= max(st.saved_tokens, st.store_tokens, _prompt_len(request) // b * b):
            return  # nothing past the prompt's blocks (saved or stored already)
        ids = per_group(block_ids)
        if not _real(ids):
            ids = st.block_ids
        assert ids is not None
        if min(len(g) for g in ids) < whole // b:
            return
        tokens = request_tokens(request, whole, st.overlay)
        self._finish_saves.append(SaveSpec(req_id=request.request_id, namespace=st.namespace, salt=st.salt,
                                           tokens=tokens, block_ids=self._save_ids(st, ids, whole // b),
                                           ack=self._invalid_reports, at_finish=True,
                                           start=max(st.saved_tokens, st.store_tokens)))
        st.saves_emitted += 1
        st.saved_tokens = whole
        self.stats["saves_planned"] += 1
        self.stats["generated_saves_planned"] += 1
        self._save_planned(request, whole // b)
        if self.cfg.save_wait_ms > 0:  # a next turn arriving before the save lands asks again, not recomputes
            self._add_inflight(request.request_id, st.namespace, tokens)

    def _save_planned(self, request: Any, blocks: int) -> None:
        """The save's KV event: when the worker reports it done (held blocks), else at once."""
        if self.cfg.hold_blocks_until_saved:
            self._save_events.setdefault(request.request_id, []).append((request, blocks))
        else:
            self.events.stored(request, 0, blocks)
