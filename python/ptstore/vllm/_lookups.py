"""The lookups of the scheduler side (``SchedulerSide`` takes it as a base): how many tokens of a prompt the
store holds, in this deployment's namespaces or, for a dense model, in those of other tensor/pipeline-parallel
degrees of the same model (``_lookup``); and, with the ``cost_model`` option, how many of them are cheaper to
load than to recompute (``_advise``). A store that is briefly away raises ``_AskLater`` (vLLM asks again next
step) for at most ``unavailable_wait_ms``; after that its lookups are misses. Runs on the scheduler's thread.
"""

from __future__ import annotations

import logging
import time
from typing import List, Tuple

import numpy as np

from .._errors import Error, NotFound
from ._store import is_link_error
from .keys import degree_splits, rank_degrees, rank_namespace

logger = logging.getLogger("ptstore.vllm")


class _AskLater(Exception):
    pass


class LookupPath:
    """The lookups of ``SchedulerSide`` (see the module's docstring); uses its attributes."""

    def _lookup(self, ns: str, tokens: np.ndarray) -> Tuple[int, Tuple[int, int]]:
        """(tokens of `tokens` the store holds, the (tensor, pipeline)-parallel degrees that hold them: (0, 0)
        for this deployment's own); (0, (0, 0)) on a miss. Raises _AskLater while the store is briefly away.

        This deployment's own first (its first worker's namespace stands for all: they save alike); then, for a
        dense model, the namespaces of other degrees of the same model found in the store, where every one of
        their workers' namespaces must hold the prefix (each of this deployment's workers reads its heads of
        its layers from those that hold some)."""
        own = self._lookup_in(self._lookup_ns(ns), tokens)
        best, source = own, (0, 0)
        if self.total_kv_heads and own < len(tokens):
            for n_tp, n_pp in self._other_degrees(ns):
                hit = len(tokens)
                for p in range(n_pp):
                    for r in range(n_tp):
                        hit = min(hit, self._lookup_in(rank_namespace(ns, r, n_tp, p, n_pp), tokens))
                        if hit <= best:
                            break
                    if hit <= best:
                        break
                if hit > best:
                    best, source = hit, (n_tp, n_pp)
        return best, source

    def _other_degrees(self, ns: str) -> List[Tuple[int, int]]:
        """(tensor, pipeline)-parallel degrees other than this deployment's that have namespaces of `ns` in the
        store and whose tensor-parallel degree splits this model's KV heads."""
        found = {d for d in (rank_degrees(ns, name) for name in self._namespace_names()) if d}
        return sorted(d for d in found
                      if d != (self.tp_size, self.pp_size) and degree_splits(d[0], self.total_kv_heads))

    def _namespace_names(self) -> List[str]:
        """The store's namespace names, listed at most once per 5 s (for every namespace of this engine)."""
        now = time.monotonic()
        if self._listing[0] < now:
            names: List[str] = []
            client = self.link.get()
            if client is not None:
                try:
                    names = [info.name for info in client.list_namespaces()]
                except Error as e:
                    if is_link_error(e):
                        self.link.failed(e)
            self._listing = (now + 5.0, names)
        return self._listing[1]

    def _lookup_in(self, name: str, tokens: np.ndarray) -> int:
        client = self.link.get()
        if client is None:
            return self._unreachable()
        try:
            r = client.lookup(name, tokens)
        except NotFound:
            self.link.ok()
            return 0
        except Error as e:
            if is_link_error(e):
                self.link.failed(e)
                return self._unreachable()
            self._warn_once(f"lookup:{type(e).__name__}", "ptstore: lookup in %s failed: %s", name, e)
            return 0
        self.link.ok()
        return int(r.matched_tokens)

    def _advise(self, ns: str, tokens: np.ndarray, hit: int, computed: int) -> int:
        """Of the `hit` tokens the lookup matched, those the cost model says vLLM should have after the load
        (whole blocks; `computed` or less: load nothing, recompute past vLLM's own cache).

        `tokens` are all of the request's tokens (the prompt the plan prefills); vLLM holds the first
        `computed` of them already, so the plan weighs loading [computed, hit) against computing them. A
        failed advice loads the whole hit (with a warning), as without a cost model.
        """
        assert self.cost_model is not None and self.cfg.cost_model is not None
        client = self.link.get()
        if client is None:
            return hit
        try:
            plan = client.advise(self._lookup_ns(ns), tokens, self.cost_model, self.cfg.cost_model.remote_path,
                                 gpu_tokens=computed)
        except Error as e:
            self.stats["advice_failures"] += 1
            if is_link_error(e):
                self.link.failed(e)
            self._warn_once(f"advise:{type(e).__name__}", "ptstore: load-or-recompute advice in %s failed (%s); "
                            "loading the whole hit", ns, e)
            return hit
        self.stats["advised"] += 1
        load = min(int(plan.load_tokens) // self.block * self.block, hit)
        if load <= computed:
            self.stats["advised_recompute"] += 1
        self.stats["advised_skipped_tokens"] += hit - max(load, computed)
        logger.debug("ptstore: %s: hit %d tokens (%d on the GPU), cost model loads to %d (load %.3f ms + compute "
                     "%.3f ms)", ns, hit, computed, load, plan.load_s * 1e3, plan.compute_s * 1e3)
        return load

    def _unreachable(self) -> int:
        down = self.link.down_for()
        if down is not None and down * 1000.0 < self.cfg.unavailable_wait_ms:
            self.stats["ask_later_unavailable"] += 1
            self.recorder.add("ask_later")
            raise _AskLater()
        return 0
