"""The worker side of PTStoreConnector: loads into vLLM's paged KV caches, saves out of them.

Loads (``start_load_kv``): one background job per step. It first copies what
every request's load needs out of the arena into a host staging buffer of
stored blocks (the tokens past vLLM's own cache, each KV cache group's kept
blocks only; from the scheduler's pin when it took one, ``pin_hits``, else
under a pin of its own; by the server's copy without the arena mapping), then
writes the pages layer by layer (one indexed copy per layer and request),
setting an event per layer; ``wait_for_layer_load(layer)`` waits for that
layer's event only, so the copies of later layers overlap the model's work on
earlier ones. Blocks the store could not supply (evicted, a shorter prefix,
the store unreachable) are reported by ``get_block_ids_with_load_errors`` and
vLLM recomputes them (one KV cache group; with more, vLLM cannot: logged).

Saves (``save_kv_layer``): for each save the scheduler planned in this step
(a prompt's last whole block computed; with a sliding-window group every
step's new whole blocks), each layer is gathered out of the pages into a
staging buffer of stored blocks right after its attention (so the pages may
be reused as soon as the step ends, preemption included); ``wait_for_save``
hands complete buffers to a background thread that writes them to the store
(taking slices the pages no longer hold from the store's copy).
``get_finished`` reports a finished request once its saves are written (only
when the scheduler side held its blocks for it: ``hold_blocks_until_saved``).

This file holds the loads' page writes and the step bookkeeping; what a load
copies out of the store is in ``_fetch.py`` (``LoadFetch``, the load job's
base), the saves are in ``_saves.py`` (``SavePath``, WorkerSide's base), the
staging buffers and the per-group copies between them and the pages in
``_staging.py``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Optional, Set, Tuple

from .._errors import Error
from ._fetch import LoadFetch
from ._meta import LoadSpec, PTStoreConnectorMetadata, PTStoreWorkerMetadata
from ._saves import _TAINT_STEPS, SavePath, _SaveJob, _same_geometry
# scatter_layer is called through this module's name (tests patch ptstore.vllm._worker.scatter_layer).
from ._staging import StagingPool, _GroupPlan, _Staging, scatter_layer
from ._store import StoreLink, is_link_error
from .config import ConnectorConfig
from .groups import GroupSpec
from .keys import rank_namespace
from .paged import PagedKV, TorchCopier, resolve_dims
from .stats import StatsRecorder

logger = logging.getLogger("ptstore.vllm")


class _LoadJob(LoadFetch):
    """The loads of one step (or one async load): fetch from the store (``_fetch.LoadFetch``), then scatter
    layer by layer."""

    def __init__(self, worker: "WorkerSide", specs: List[LoadSpec], is_async: bool) -> None:
        self.w = worker
        self.specs = specs
        self.is_async = is_async
        self.events = [threading.Event() for _ in worker.kv.layers]  # type: ignore[union-attr]
        self.done = threading.Event()
        self.failed: Set[int] = set()
        self.failed_reqs: Set[str] = set()
        self.loaded_tokens = 0
        self.loaded_bytes = 0  # bytes written into the pages: only the blocks each group keeps
        self.copied_bytes = 0  # bytes copied out of the store's arena (mapped clients)
        self.pinned_loads = 0  # loads copied under the scheduler's pin
        self.loads = 0
        self.t0 = time.monotonic()

    def start(self) -> None:
        threading.Thread(target=self.run, name="ptstore-load", daemon=True).start()

    def wait_layer(self, index: int) -> None:
        self.events[index].wait()

    def join(self) -> None:
        self.done.wait()

    def run(self) -> None:
        w = self.w
        kv = w.kv
        assert kv is not None
        b = w.block
        fetched: List[Tuple[LoadSpec, _Staging, int, List[Optional[_GroupPlan]]]] = []
        try:
            for spec in self.specs:
                f = self._fetch(spec)
                if f is not None:
                    fetched.append(f)
            bad: Set[int] = set()
            # State layers first: vLLM runs Mamba layers without a per-layer call (start_load_kv waits for them)
            for layer in sorted(kv.layers, key=lambda x: not x.is_state):
                group = kv.groups[layer.group]
                for i, (spec, staging, got, plans) in enumerate(fetched):
                    plan = plans[layer.group]
                    if i in bad or plan is None:
                        continue
                    try:
                        scatter_layer(kv, w.copier, group, layer, plan, staging.blocks[spec.start // b:got // b])
                        to = spec.state_to[layer.group] if layer.group < len(spec.state_to) else 0
                        if layer.is_state and to:
                            last = [blk for blk in spec.block_ids[layer.group][:(got - spec.start) // b] if blk][-1]
                            layer.pages[to].copy_(layer.pages[last])
                    except Exception:  # noqa: BLE001 - a bad request must not stop the others
                        logger.exception("ptstore: load of request %s into layer %s failed", spec.req_id, layer.name)
                        bad.add(i)
                        self._fail(spec, 0)
                w.copier.synchronize()
                self.events[kv.event_index(layer.name)].set()
            for i, (spec, _, got, plans) in enumerate(fetched):
                if i not in bad:
                    self.loaded_tokens += got - spec.start
                    self.loaded_bytes += sum(p.count * kv.groups[g].block_bytes for g, p in enumerate(plans) if p)
                    self.loads += 1
        except Exception:  # noqa: BLE001
            logger.exception("ptstore: loads failed")
            for spec in self.specs:
                self._fail(spec, 0)
        finally:
            for _, staging, _, _ in fetched:
                w.pool.release(staging)
            for e in self.events:
                e.set()
            w._load_finished(self)
            self.done.set()


class WorkerSide(SavePath):
    """State of one worker's connector (one per GPU). Its saves: ``_saves.SavePath``."""

    def __init__(self, cfg: ConnectorConfig, *, tp_size: int = 1, pp_size: int = 1,
                 link: Optional[StoreLink] = None, total_kv_heads: int = 0, total_layers: int = 0,
                 groups: Optional[List[GroupSpec]] = None) -> None:
        self.cfg = cfg
        self.block = cfg.block_size
        self.tp_size, self.pp_size = tp_size, pp_size
        self.tp_rank = self.pp_rank = 0
        self.groups = groups  # vLLM's KV cache groups (None: one group of every layer)
        # MLA latent caches are the same on every tensor-parallel rank: one namespace, written by rank 0
        self.tp_shared = bool(groups) and all(g.shared_by_ranks for g in groups)  # type: ignore[union-attr]
        self.total_kv_heads = total_kv_heads
        self.total_layers = total_layers  # the model's (all stages'); 0: unknown, no loads across PP degrees
        self.link = link or StoreLink(cfg.socket, rpc_timeout_ms=cfg.rpc_timeout_ms,
                                      retry_interval_ms=cfg.retry_interval_ms, client_name="vllm-worker")
        self.kv: Optional[PagedKV] = None
        self.layout: Any = None
        self.copier: Any = None
        self.pool: Any = None
        self._tensors: Dict[str, Any] = {}
        self._cv = threading.Condition()
        self._meta: Optional[PTStoreConnectorMetadata] = None
        self._sync_job: Optional[_LoadJob] = None
        self._step_saves: Dict[str, _SaveJob] = {}
        self._finalized = True
        self._step_no = 0
        # Guarded by _cv:
        self._save_seen: Set[str] = set()
        self._pending_saves: Dict[str, int] = defaultdict(int)
        self._finished: Set[str] = set()
        self._recving_done: Set[str] = set()
        self._load_errors: Set[int] = set()
        self._failed_saves: Set[str] = set()  # requests whose saves failed since the last worker metadata
        self._pending_async = 0
        self._reports = 0
        self._taint: Dict[int, Tuple[int, int]] = {}  # block -> (report number, step)
        self._ns_ready: Set[str] = set()
        self._ns_bad: Set[str] = set()
        self._warned: Set[str] = set()
        self._saver = ThreadPoolExecutor(max(1, cfg.save_threads), thread_name_prefix="ptstore-save")
        self._loader = ThreadPoolExecutor(2, thread_name_prefix="ptstore-load-async")
        self.stats: Dict[str, int] = defaultdict(int)
        self.recorder = StatsRecorder()  # for vLLM's logs and /metrics (get_kv_connector_stats)

    # ------------------------------------------------------------- setup
    def set_ranks(self, tp_rank: int, pp_rank: int) -> None:
        self.tp_rank, self.pp_rank = tp_rank, pp_rank

    def rank_ns(self, ns: str) -> str:
        if self.tp_shared:
            return rank_namespace(ns, 0, 1, self.pp_rank, self.pp_size)
        return rank_namespace(ns, self.tp_rank, self.tp_size, self.pp_rank, self.pp_size)

    @property
    def workers_namespaces(self) -> int:
        """How many worker namespaces the deployment has (the scheduler's pins: one per namespace)."""
        return (1 if self.tp_shared else self.tp_size) * self.pp_size

    @property
    def namespace_rank(self) -> int:
        """This worker's namespace's place among them (vLLM's rank order: stage, then tensor-parallel rank)."""
        return self.pp_rank * (1 if self.tp_shared else self.tp_size) + (0 if self.tp_shared else self.tp_rank)

    def layer_indices(self) -> List[int]:
        """The model's index of each of this worker's layers (a dense layout's order)."""
        from .paged import layer_index

        assert self.kv is not None
        out = [layer_index(layer.name) for layer in self.kv.groups[0].layers]
        if any(i is None for i in out):
            raise ValueError("layer names without a layer number: cannot tell the model's layers of this stage")
        return out  # type: ignore[return-value]

    @property
    def writer(self) -> bool:
        """False on the tensor-parallel ranks that do not save (all but rank 0 when the ranks share the KV)."""
        return not self.tp_shared or self.tp_rank == 0

    def register_kv_caches(self, kv_caches: Dict[str, Any], specs: Optional[Dict[str, Any]] = None,
                           backends: Optional[Dict[str, Any]] = None) -> None:
        """Takes vLLM's caches; `specs` are their KV cache specs (vLLM's kv_cache_config) and `backends` their
        attention backends, by layer name (see paged.resolve_dims)."""
        specs, backends = specs or {}, backends or {}
        for name, spec in specs.items():
            if name in kv_caches and int(getattr(spec, "block_size", self.block)) != self.block:
                raise ValueError(f"layer {name!r} has blocks of {spec.block_size} tokens, vLLM's block_size is "
                                 f"{self.block}")
        groups = self.groups
        if groups is not None:  # the layers of the groups (vLLM may register more: e.g. a drafter's)
            kv_caches = {n: kv_caches[n] for g in groups for n in g.layer_names if n in kv_caches}
        kv = PagedKV(kv_caches, lambda name, t: resolve_dims(name, t, spec=specs.get(name), backend=backends.get(name),
                                                             named=self.cfg.kv_cache_layout), self.block, groups)
        layout = kv.layout()
        want = self.cfg.layout
        if want is not None and not _same_geometry(want, layout):
            raise ValueError(f"kv_connector_extra_config layout {want} does not match the KV caches vLLM registered "
                             f"({layout}; per worker: KV heads of this tensor-parallel rank, layers of this "
                             f"pipeline stage)")
        self.kv, self.layout = kv, layout
        self._tensors = dict(kv_caches)
        self.copier = TorchCopier(kv.device)
        self.pool = StagingPool(self.copier, layout, kv.copy_dtype)
        client = self.link.get()
        if client is not None:  # the base namespace, so that it shows (and its layout is checked) from the start
            try:
                self._ensure_namespace(client, self.rank_ns(self.cfg.namespace), "")
            except Error as e:
                if is_link_error(e):
                    self.link.failed(e)
        logger.info("ptstore: %d KV cache layers registered, %s, namespace %s", len(kv.layers), layout,
                    self.rank_ns(self.cfg.namespace))

    def warn_once(self, key: str, msg: str, *args: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(msg, *args)

    # ------------------------------------------------------------- steps
    def bind(self, meta: PTStoreConnectorMetadata) -> None:
        self._finalize_step(final=True)  # a step whose end we did not see
        self._step_no += 1
        self._meta = meta
        self._step_saves = {}
        self._finalized = False
        with self._cv:
            for s in meta.saves:
                self._pending_saves[s.req_id] += 1
                if self.cfg.hold_blocks_until_saved:
                    self._save_seen.add(s.req_id)
            acks = [s.ack for s in meta.saves]
            if acks or self._taint:
                ack = max(acks, default=0)
                self._taint = {blk: t for blk, t in self._taint.items()
                               if t[0] > ack and self._step_no - t[1] < _TAINT_STEPS}

    def start_load_kv(self) -> None:
        self._gather_all(at_finish=True)
        meta = self._meta
        if meta is None or not meta.loads:
            return
        if self.kv is None:
            with self._cv:
                for s in meta.loads:
                    self._load_errors.update(s.block_ids)
                    if s.is_async:
                        self._recving_done.add(s.req_id)
            self.warn_once("no-caches", "ptstore: loads before register_kv_caches; vLLM recomputes them")
            return
        sync = [s for s in meta.loads if not s.is_async]
        if sync:
            self._sync_job = _LoadJob(self, sync, is_async=False)
            self._sync_job.start()
            for layer in self.kv.layers:  # vLLM calls no wait_for_layer_load before a Mamba layer
                if layer.is_state:
                    self._sync_job.wait_layer(self.kv.event_index(layer.name))
        for s in meta.loads:
            if s.is_async:
                with self._cv:
                    self._pending_async += 1
                self._loader.submit(_LoadJob(self, [s], is_async=True).run)

    def wait_for_layer_load(self, layer_name: str) -> None:
        job, kv = self._sync_job, self.kv
        if job is None or kv is None:
            return
        if layer_name in kv.by_name:
            job.wait_layer(kv.event_index(layer_name))

    def wait_for_save(self) -> None:
        # No per-layer calls (layerwise false: full CUDA graphs): every layer of the step's saves now; else the
        # state layers (vLLM calls no save_kv_layer after a Mamba layer; their states are final now)
        self._gather_all(at_finish=False, state_only=self.cfg.layerwise)
        self._finalize_step(final=True)

    def clear(self) -> None:
        self._finalize_step(final=True)
        self._meta = None

    def _finish_sync_load(self) -> None:
        job = self._sync_job
        if job is None:
            return
        job.join()
        self._sync_job = None

    def _load_finished(self, job: _LoadJob) -> None:
        r = self.recorder
        if job.loads:
            r.add("loads", job.loads)
            r.add("loaded_tokens", job.loaded_tokens)
            r.add("loaded_bytes", job.loaded_bytes)
            r.observe("load_seconds", time.monotonic() - job.t0)
        if job.failed:
            r.add("load_errors", len(job.failed))
        unreportable = len(self.kv.groups) > 1 if self.kv is not None else False
        if job.failed and unreportable:
            # vLLM's scheduler (this version) recomputes failed blocks of one KV cache group only: its
            # _update_requests_with_invalid_blocks unpacks a single group, and fails on more. Reporting them
            # would stop the engine; the requests go on over what did load.
            self.stats["load_errors_unreported"] += len(job.failed)
            logger.error("ptstore: loads of requests %s failed in part (%d blocks) with the hybrid KV cache "
                         "manager, which cannot recompute them in this vLLM: their KV is incomplete. Serve hybrid "
                         "models with --disable-hybrid-kv-cache-manager for recompute on failure",
                         sorted(job.failed_reqs), len(job.failed))
        with self._cv:
            if not unreportable:
                self._load_errors.update(job.failed)
            self.stats["loaded_tokens"] += job.loaded_tokens
            self.stats["loaded_bytes"] += job.loaded_bytes
            self.stats["copied_bytes"] += job.copied_bytes
            self.stats["pinned_loads"] += job.pinned_loads
            self.stats["load_failed_blocks"] += len(job.failed)
            if job.is_async:
                for s in job.specs:
                    self._recving_done.add(s.req_id)
                self._pending_async -= 1
                self._cv.notify_all()
            else:
                for blk in job.failed:
                    self._taint[blk] = (self._reports + 1, self._step_no)

    def _finalize_step(self, final: bool) -> None:
        self._finish_sync_load()
        meta = self._meta
        if meta is None or self._finalized:
            return
        nlayers = len(self.kv.layers) if self.kv is not None else -1
        jobs = [(s, self._step_saves.get(s.req_id)) for s in meta.saves]
        complete = [sj is not None and not sj.failed and len(sj.layers) == nlayers for _, sj in jobs]
        if not self.writer:
            complete = [True] * len(jobs)
        if not final and not all(complete):
            return  # layers still to come (a deferred finalize)
        self._finalized = True
        if not self.writer:  # another rank saves these (the ranks share their KV)
            for spec, _ in jobs:
                self._save_done(spec.req_id)
            return
        for (spec, sj), ok in zip(jobs, complete):
            if ok and self._tainted(spec):
                ok = False
                self.stats["saves_dropped_tainted"] += 1
            if ok:
                self._saver.submit(self._write, spec, sj)
            else:
                if sj is not None:
                    self.pool.release(sj.staging)
                self._save_failed(spec.req_id, "saves_dropped")
                self._save_done(spec.req_id)

    def build_worker_meta(self) -> Optional[PTStoreWorkerMetadata]:
        """The requests whose saves failed since the last call (None: none), for the scheduler side."""
        with self._cv:
            failed, self._failed_saves = self._failed_saves, set()
        return PTStoreWorkerMetadata(failed_saves=failed) if failed else None

    # --------------------------------------------------------- reporting
    def get_finished(self, finished_req_ids: Any) -> Tuple[Optional[Set[str]], Optional[Set[str]]]:
        self._finalize_step(final=False)
        with self._cv:
            sending: Set[str] = set()
            if self.cfg.hold_blocks_until_saved:
                self._finished.update(finished_req_ids or ())
                for rid in list(self._finished):
                    if rid not in self._save_seen:
                        self._finished.discard(rid)  # request_finished did not hold its blocks
                    elif self._pending_saves.get(rid, 0) == 0:
                        sending.add(rid)
                        self._finished.discard(rid)
                        self._save_seen.discard(rid)
            recving, self._recving_done = self._recving_done, set()
        return (sending or None), (recving or None)

    def get_block_ids_with_load_errors(self) -> Set[int]:
        self._finish_sync_load()
        with self._cv:
            errors, self._load_errors = self._load_errors, set()
            if errors:
                self._reports += 1
        return errors

    def flush(self, timeout: Optional[float] = None) -> bool:
        """Waits until every save handed to the background and every async load is done; False on timeout."""
        self._finalize_step(final=False)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            while self._pending_async or (self._finalized_pending()):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cv.wait(left)
        return True

    def _finalized_pending(self) -> bool:
        # Saves of the current step that are not finalized yet cannot finish here; count only the others.
        pending = dict(self._pending_saves)
        if not self._finalized and self._meta is not None:
            for s in self._meta.saves:
                pending[s.req_id] = pending.get(s.req_id, 0) - 1
        return any(v > 0 for v in pending.values())

    def shutdown(self, timeout: float = 30.0) -> None:
        self._finalize_step(final=True)
        self.flush(timeout)
        self._saver.shutdown(wait=False)
        self._loader.shutdown(wait=False)
        self.link.close()
