"""The scheduler side of PTStoreConnector: lookups, load plans, save plans, in-flight saves.

Policies (docs/vllm.md):

* **Whole blocks only, and never the last token.** A hit counts whole vLLM
  blocks, at most ``(num_tokens - 1) // block_size`` of them: vLLM must
  compute at least one token of every request.
* **Ask again later** (``None``) in two cases, both bounded in time:
  (1) an earlier save of blocks this prompt shares is still in flight and the
  store does not hold them yet (for at most ``save_wait_ms`` after the save
  was planned: waiting a step beats recomputing the prefix); (2) the store is
  unreachable, for at most ``unavailable_wait_ms`` after it became so (a
  restarting ptstored); after that lookups count as misses, and an unreachable
  store is tried again once per ``retry_interval_ms`` so the scheduler loop
  never stalls on it.
* **Load or recompute** (only with the ``cost_model`` option): after a hit
  the scheduler asks ptstored where the prefix is and the cost model which
  part of it is cheaper to load than to recompute (``Client.advise``); it
  reports, and loads, only that part (whole blocks, never more than the
  lookup matched; 0 when recomputing wins: a miss, never an error). When
  the advice fails, the whole hit loads, as without the option.
* **Saves** are planned once per request, in the step that completes the KV
  of its prompt's last whole block, unless the store held all of it at
  lookup time; with a sliding-window group (whose blocks vLLM drops as the
  window moves), in every step that completes new whole blocks.
* **Pinned hits** (``pin_hits``): a hit reported to vLLM is pinned in every
  rank namespace until the workers copied it (two steps later, or when an
  async load is received); the workers copy it from their arena mapping.
* **State groups** (Mamba / linear attention): a hit ends at a block whose
  state is stored valid (its tag, read out of the pins: so a model with a
  state group needs ``pin_hits`` and the arena mapping, else it only saves);
  saves are stepwise, and tag as valid only the blocks vLLM holds a state
  for (mode ``all``: every whole block; ``align``: a block where a step
  ended). In ``align`` mode no hit is offered while vLLM's scheduler refuses
  external tokens for Mamba models (this snapshot asserts in
  ``_mamba_block_aligned_split``: :func:`vllm_takes_external_state`).

This file holds the request state and the connector API; the lookups are in
``_lookups.py`` (``LookupPath``), the pinned hits in ``_hit_pins.py``
(``HitPins``), the save plans and saves in flight in ``_save_plans.py``
(``SavePlanner``), all three bases of ``SchedulerSide``; a request's state
(``_Req``) and the readers of vLLM's request forms in ``_requests.py``.
"""

from __future__ import annotations

import collections
import logging
from typing import Any, Dict, List, Optional, Set, Tuple

from .._errors import Error, NotFound
from ._hit_pins import HitPins, _unpin
from ._lookups import LookupPath, _AskLater
from ._meta import LoadSpec, PTStoreConnectorMetadata, SaveSpec
from ._requests import _EMITTED, _NONE, _NOT_NEEDED, _cached_requests, _prompt_len, _real, _Req
from ._save_plans import SavePlanner, _Inflight
from ._store import StoreLink, is_link_error
from .config import ConnectorConfig
from .events import EventLog
from .groups import GroupSpec, per_group
from .keys import bypass_reason, derived_from, identity_overlay, lora_name, namespace_for, rank_namespace, \
    request_tokens
from .stats import StatsRecorder

logger = logging.getLogger("ptstore.vllm")


class SchedulerSide(LookupPath, HitPins, SavePlanner):
    """State of the scheduler-side connector (one per vLLM engine core). Its lookups: ``_lookups.LookupPath``;
    its hit pins: ``_hit_pins.HitPins``; its save plans and saves in flight: ``_save_plans.SavePlanner``."""

    def __init__(self, cfg: ConnectorConfig, *, tp_size: int = 1, pp_size: int = 1, link: Optional[StoreLink] = None,
                 total_kv_heads: int = 0, groups: Optional[List[GroupSpec]] = None) -> None:
        self.cfg = cfg
        self.block = cfg.block_size
        self.groups = groups
        if groups and all(g.shared_by_ranks for g in groups):
            tp_size = 1  # one namespace for every tensor-parallel rank (MLA: they hold the same KV)
        self.tp_size, self.pp_size = tp_size, pp_size
        # With a sliding-window group vLLM drops the KV of blocks that leave the window: each step's new whole
        # blocks of a prompt are saved in that step (the worker reads the older ones back from the store).
        # So does a Mamba group: it keeps a block's state only while the request runs there.
        self.state_groups = [g for g in groups or () if g.kind == "state"]
        self.state_mode = self.state_groups[0].mode if self.state_groups else ""
        self.stepwise = any(g.kind in ("window", "state") for g in groups or ())
        self.state_loads = bool(self.state_groups) and (self.state_mode != "align" or vllm_takes_external_state())
        if self.state_mode == "align" and cfg.load_async:
            logger.info("ptstore: load_async is off for a Mamba model in mamba_cache_mode 'align' (vLLM's block-"
                        "aligned split stops scheduling a request whose async load leaves nothing to compute)")
        if self.state_groups and not self.state_loads:
            logger.warning("ptstore: this vLLM's scheduler refuses KV from a connector for Mamba models in "
                           "mamba_cache_mode 'align' (Scheduler._mamba_block_aligned_split asserts); PTStore saves "
                           "their prefixes and offers no hit until a vLLM takes them")
        self._layouts: Dict[str, Any] = {}  # namespace -> its Layout (the state groups' tag offsets)
        # pin_hits: the scheduler pins the hit in every worker's namespace (_rank_names)
        self.pinning = cfg.pin_hits
        self._hit_pins: Dict[str, Any] = {}  # req_id -> the pins of the hit it was told of, until a load takes them
        self._step_pins: List[Any] = []  # pins of this step's sync loads
        self._pin_steps: Any = collections.deque()  # those of the last steps: released two steps later
        self._async_pins: Dict[str, Any] = {}  # req_id -> the pin of its async load, until it is received
        self.total_kv_heads = total_kv_heads  # the model's KV heads (0: unknown; no cross-degree loads)
        self._listing: Tuple[float, List[str]] = (0.0, [])  # (valid until, the store's namespace names)
        self.link = link or StoreLink(cfg.socket, rpc_timeout_ms=cfg.lookup_timeout_ms,
                                      retry_interval_ms=cfg.retry_interval_ms, client_name="vllm-scheduler")
        self.reqs: Dict[str, _Req] = {}
        self._loads: List[LoadSpec] = []
        self._finish_saves: List[SaveSpec] = []  # finished requests' generated tokens, for the next step
        self._inflight: Dict[str, _Inflight] = {}
        self._inflight_keys: Dict[bytes, int] = {}
        self._invalid_reports = 0
        self._warned: Set[str] = set()
        self.stats = {"lookups": 0, "hit_tokens": 0, "ask_later_inflight": 0, "ask_later_unavailable": 0,
                      "loads_planned": 0, "saves_planned": 0, "advised": 0, "advised_recompute": 0,
                      "advised_skipped_tokens": 0, "advice_failures": 0, "resets": 0, "generated_saves_planned": 0,
                      "hits_pinned": 0, "state_hits_trimmed": 0}
        self.recorder = StatsRecorder()  # for vLLM's logs and /metrics
        self.events = EventLog(cfg.block_size)  # for vLLM's KV events (take_events)
        self._save_events: Dict[str, List[Tuple[Any, int]]] = {}  # req_id -> (request, whole blocks) per save
        # The cost model deciding load versus recompute (the cost_model option); None: every hit loads.
        self.cost_model: Any = cfg.cost_model.load() if cfg.cost_model is not None else None

    # --------------------------------------------------------------- state
    def _state(self, request: Any) -> _Req:
        rid = request.request_id
        st = self.reqs.get(rid)
        if st is None or st.request is not request:
            reason = bypass_reason(request)
            ns, salt = namespace_for(self.cfg.namespace, getattr(request, "cache_salt", None), lora_name(request))
            old = st
            st = _Req(request=request, namespace=ns, salt=salt, bypass=reason,
                      overlay=identity_overlay(request) if reason is None else None)
            if old is not None:  # same id, new object (a re-added request): keep what was emitted
                st.saves_emitted, st.save_state = old.saves_emitted, old.save_state
            self.reqs[rid] = st
        return st

    def _lookup_ns(self, ns: str) -> str:
        return rank_namespace(ns, 0, self.tp_size, 0, self.pp_size)

    def _rank_names(self, ns: str) -> List[str]:
        """Every worker's namespace of `ns`, in vLLM's rank order (pipeline stage, then tensor-parallel rank)."""
        return [rank_namespace(ns, r, self.tp_size, p, self.pp_size)
                for p in range(self.pp_size) for r in range(self.tp_size)]

    def _warn_once(self, key: str, msg: str, *args: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(msg, *args)

    # ------------------------------------------------------------ the API
    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> Tuple[Optional[int], bool]:
        st = self._state(request)
        st.local_tokens, st.ext_tokens, st.load_async = num_computed_tokens, 0, False
        self._release(st)  # a new lookup: an earlier promise is void
        if st.bypass is not None or not (self.cfg.load or self.cfg.save):
            return 0, False
        b = self.block
        num_tokens = int(request.num_tokens)
        limit = (num_tokens - 1) // b * b  # whole blocks, and never the last token
        prompt_whole = _prompt_len(request) // b * b
        span = max(limit, prompt_whole)  # the prompt's whole blocks too: a save is skipped when all are stored
        if span <= 0:
            return 0, False
        tokens = request_tokens(request, span, st.overlay)
        self.stats["lookups"] += 1
        self.recorder.add("lookups")
        try:
            stored, st.source = self._lookup(st.namespace, tokens)
            stored = stored // b * b
        except _AskLater:
            return None, False
        st.store_tokens = min(stored, prompt_whole)
        if not self.cfg.load:  # looked up only to skip saving what the store holds
            return 0, False
        hit = min(stored, limit)
        if self.cfg.save_wait_ms > 0 and self._inflight:
            pending = self.inflight_blocks(st.namespace, tokens[:limit]) * b
            if pending > max(hit, num_computed_tokens):
                self.stats["ask_later_inflight"] += 1
                self.recorder.add("ask_later")
                return None, False
        if self.cost_model is not None and hit > num_computed_tokens and st.source == (0, 0):
            hit = self._advise(st.namespace, request_tokens(request, num_tokens, st.overlay), hit,
                               num_computed_tokens)
        if self.state_groups and not self.state_loads:
            hit = 0  # (this vLLM cannot take it: see __init__)
        if self.pinning and hit > num_computed_tokens and st.source == (0, 0):
            hit = self._pin_hit(st, tokens[:hit], hit)
        if self.state_groups and hit > num_computed_tokens:
            hit = self._state_hit(st, hit, num_computed_tokens)
        ext = hit - num_computed_tokens if hit > num_computed_tokens else 0
        if ext and ext < self.cfg.min_load_tokens:
            ext = 0
        if not ext:
            self._release(st)
        st.ext_tokens = ext
        # (align mode: vLLM's scheduler splits an async load's zero new tokens to zero and stops scheduling the
        # request, as its _mamba_block_aligned_split returns them: those loads run in the step that computes)
        st.load_async = bool(ext) and self.cfg.load_async and self.state_mode != "align"
        self.stats["hit_tokens"] += ext
        if ext:
            self.recorder.add("hit_tokens", ext)
        return ext, st.load_async

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        st = self._state(request)
        ids = per_group(blocks)
        if _real(ids):
            st.block_ids = ids  # type: ignore[assignment]
        if num_external_tokens <= 0 or st.bypass is not None or not self.cfg.load:
            return
        b = self.block
        start = st.local_tokens
        end = start + int(num_external_tokens)
        if start % b or end % b or end > min(len(g) for g in st.block_ids) * b:
            # Never happens with vLLM's allocator; the spec still goes out so that the worker reports its blocks
            # as failed and vLLM recomputes them (silently skipping it would leave them unwritten).
            logger.warning("ptstore: request %s: cannot load tokens [%d, %d) into %d blocks of %d", request.request_id,
                           start, end, len(st.block_ids), b)
        spec = LoadSpec(req_id=request.request_id, namespace=st.namespace,
                        tokens=request_tokens(request, end, st.overlay), start=start,
                        block_ids=[g[start // b:end // b] for g in st.block_ids],
                        is_async=st.load_async, source_tp=st.source[0], source_pp=st.source[1])
        if self.state_mode == "align" and not st.load_async:
            # vLLM copied the state of block end/b - 1 into its running-state block (the request's last) before
            # this step's forward, i.e. before the load: that block gets the loaded state too
            spec.state_to = [g[-1] if gs.kind == "state" and len(g) > end // b else 0
                             for g, gs in zip(st.block_ids, self.groups or ())]
        pin = self._hit_pins.pop(request.request_id, None)
        if pin is not None:  # the workers copy what these pins hold, and they are released once they have
            client = self.link.get()
            arena = client.arena_id if client is not None else 0
            if arena and min(p.tokens for p in pin) >= end:
                spec.arena_id = arena
                spec.extents = [[(e.arena_offset, e.length) for e in p.extents] for p in pin]
                if spec.is_async:
                    _unpin(self._async_pins.pop(request.request_id, None))
                    self._async_pins[request.request_id] = pin
                else:
                    self._step_pins.append(pin)
            else:
                _unpin(pin)
        self._loads.append(spec)
        st.load_start, st.load_end, st.load_blocks = start, end, self._loads[-1].block_ids[0]
        st.loaded_tokens += end - start
        self.events.stored(request, 0, end // b)  # the store holds them (what vLLM held locally too)
        self.stats["loads_planned"] += 1

    def build_connector_meta(self, scheduler_output: Any) -> PTStoreConnectorMetadata:
        meta = PTStoreConnectorMetadata(block_size=self.block, loads=self._loads, saves=self._finish_saves)
        self._loads, self._finish_saves = [], []
        self._age_pins()
        scheduled = getattr(scheduler_output, "num_scheduled_tokens", None) or {}
        for new in getattr(scheduler_output, "scheduled_new_reqs", None) or ():
            st = self.reqs.get(new.req_id)
            if st is None:
                continue
            ids = per_group(getattr(new, "block_ids", None))
            if ids is not None:
                st.block_ids = ids
            self._plan_save(meta, st, int(new.num_computed_tokens) + int(scheduled.get(new.req_id, 0)))
        for rid, new_ids, resumed, computed in _cached_requests(getattr(scheduler_output, "scheduled_cached_reqs",
                                                                        None)):
            st = self.reqs.get(rid)
            if st is None:
                continue
            ids = per_group(new_ids)
            if resumed:
                if ids is not None:
                    st.block_ids = ids
                st.state_ends.clear()  # (its blocks are new)
            elif _real(ids):
                assert ids is not None
                for have, more in zip(st.block_ids, ids):
                    have.extend(more)
            self._plan_save(meta, st, int(computed) + int(scheduled.get(rid, 0)))
        return meta

    def update_connector_output(self, output: Any) -> None:
        for rid in getattr(output, "finished_recving", None) or ():
            _unpin(self._async_pins.pop(rid, None))
        wmeta = getattr(output, "kv_connector_worker_meta", None)
        failed_saves = getattr(wmeta, "failed_saves", None) or set()
        for rid in failed_saves:
            self._save_events.pop(rid, None)
        for rid in getattr(output, "finished_sending", None) or ():
            self._drop_inflight(rid)
            for request, blocks in self._save_events.pop(rid, ()):
                self.events.stored(request, 0, blocks)
        invalid = getattr(output, "invalid_block_ids", None)
        if invalid:
            self._invalid_reports += 1
            invalid = set(invalid)
            b = self.block
            for st in self.reqs.values():
                failed = [i for i, blk in enumerate(st.load_blocks) if blk in invalid]
                if failed:
                    # The store no longer holds what the lookup saw: count only what loaded, so that the prompt
                    # is saved again once vLLM has recomputed the rest.
                    st.store_tokens = min(st.store_tokens, st.load_start + failed[0] * b)
                    st.loaded_tokens -= (len(st.load_blocks) - failed[0]) * b
                    first = st.load_start // b + failed[0]
                    self.events.removed(st.request, list(range(first, st.load_start // b + len(st.load_blocks))))
                    st.load_blocks = st.load_blocks[:failed[0]]
                    if st.save_state == _NOT_NEEDED:
                        st.save_state = _NONE
                if st.save_state == _EMITTED and invalid.intersection(st.block_ids[0][:st.saved_tokens // b]):
                    # The worker dropped that save (it read blocks that failed to load); plan it again once
                    # vLLM has recomputed them.
                    st.save_state = _NONE
                    self._drop_inflight(st.request.request_id)

    def request_finished(self, request: Any, block_ids: Any) -> Tuple[bool, Optional[Dict[str, Any]]]:
        st = self.reqs.pop(request.request_id, None)
        _unpin(self._async_pins.pop(request.request_id, None))
        if st is None:
            return False, None
        self._release(st)
        # Held blocks are freed when get_finished reports the save done; otherwise at once (the worker
        # copied the blocks out during the step) and the in-flight entry expires by itself.
        self._plan_finish_save(st, request, block_ids)
        hold = self.cfg.hold_blocks_until_saved and st.saves_emitted > 0
        params = None
        if st.loaded_tokens or st.saves_emitted:
            params = {"ptstore": {"namespace": st.namespace, "loaded_tokens": st.loaded_tokens,
                                  "saved_tokens": st.saved_tokens if st.saves_emitted else 0}}
        return hold, params

    def reset_cache(self) -> bool:
        """Drops the model's namespaces: its own and those derived from it (salts/LoRA ``.x<digest>``, parallel
        ranks ``.tp<r>of<n>.pp<r>of<n>``). True when every one went; False (with a warning) when the store is
        unreachable or refused."""
        client = self.link.get()
        if client is None:
            logger.warning("ptstore: reset_cache: the store is unreachable; nothing was removed")
            return False
        try:
            names = [n.name for n in client.list_namespaces() if derived_from(self.cfg.namespace, n.name)]
            for name in names:
                try:
                    client.drop_namespace(name)
                except NotFound:
                    pass
        except Error as e:
            if is_link_error(e):
                self.link.failed(e)
            logger.warning("ptstore: reset_cache failed: %s", e)
            return False
        self._inflight.clear()
        self._inflight_keys.clear()
        self._save_events.clear()
        self.events.cleared()
        for st in self.reqs.values():
            st.store_tokens = 0
        self.stats["resets"] += 1
        logger.info("ptstore: reset_cache removed namespaces %s", names)
        return True

    def close(self) -> None:
        for pins in [*self._hit_pins.values(), *self._pin_steps, self._step_pins, *self._async_pins.values()]:
            _unpin(pins)
        self._pin_steps.clear()
        self._hit_pins, self._step_pins, self._async_pins = {}, [], {}
        self.link.close()


def vllm_takes_external_state() -> bool:
    """True when vLLM's scheduler takes tokens from a connector for a Mamba model in mamba_cache_mode align.

    vLLM's ``Scheduler._mamba_block_aligned_split`` (main of 2026-05, the snapshot the tests run) asserts
    ``num_external_computed_tokens == 0`` ("External KV connector is not verified yet"): a hit would stop the
    engine. Asked of vLLM's own function with a request of 4 blocks, 2 of them from the connector."""
    import types

    try:
        from vllm.v1.core.sched.scheduler import Scheduler
    except Exception:  # noqa: BLE001 - no vLLM scheduler here (the connector's own tests): nothing refuses
        return True
    split = getattr(Scheduler, "_mamba_block_aligned_split", None)
    if split is None:
        return True
    me = types.SimpleNamespace(cache_config=types.SimpleNamespace(block_size=16), use_eagle=False,
                               connector=types.SimpleNamespace(supports_mamba_external_kv=True))
    req = types.SimpleNamespace(num_computed_tokens=0, num_prompt_tokens=64, num_tokens=64, request_id="probe")
    try:
        split(me, req, 32, 0, 32)
    except AssertionError:
        return False
    except Exception as e:  # noqa: BLE001 - a vLLM whose split reads more: do not risk the engine
        logger.warning("ptstore: cannot tell whether vLLM's scheduler takes external KV for Mamba models (%s); "
                       "offering none", e)
        return False
    return True
