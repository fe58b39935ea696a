"""The worker side of PTStoreConnector: loads into vLLM's paged KV caches, saves out of them.

Loads (``start_load_kv``): one background job per step. It first fetches every
request's prefix out of the store (pin, one copy of the pinned token-major
extents into a host staging buffer, release), then writes the pages layer by
layer (one indexed copy per layer and request), setting an event per layer;
``wait_for_layer_load(layer)`` waits for that layer's event only, so the
copies of later layers overlap the model's work on earlier ones. Blocks the
store could not supply (evicted, a shorter prefix, the store unreachable) are
reported by ``get_block_ids_with_load_errors`` and vLLM recomputes them.

Saves (``save_kv_layer``): for each request whose prompt's last whole block
was computed in this step, each layer is gathered out of the pages into a
token-major staging buffer right after its attention (so the pages may be
reused as soon as the step ends, preemption included); ``wait_for_save``
hands complete buffers to a background thread that writes them to the store.
``get_finished`` reports a finished request once its saves are written (only
when the scheduler side held its blocks for it: ``hold_blocks_until_saved``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set, Tuple

from .._errors import AlreadyExists, Error, NotFound
from ._meta import LoadSpec, PTStoreConnectorMetadata, PTStoreWorkerMetadata, SaveSpec
from ._store import StoreLink, is_link_error
from .config import ConnectorConfig
from .keys import rank_heads, rank_namespace
from .stats import StatsRecorder
from .paged import PagedKV, PagedLayer, TorchCopier, block_rows, resolve_dims

logger = logging.getLogger("ptstore.vllm")

# A block whose load failed is not saved by a save the scheduler planned before it learnt of the failure
# (async scheduling) for this many steps at most (older vLLM never tells the scheduler side).
_TAINT_STEPS = 4


class _Staging:
    """A token-major host buffer from the pool: ``tensor`` is a view of ``flat``."""

    __slots__ = ("flat", "tensor")

    def __init__(self, flat: Any, tensor: Any) -> None:
        self.flat, self.tensor = flat, tensor


class StagingPool:
    """Reuses token-major host buffers (fresh pages and pinned allocations are slow)."""

    def __init__(self, copier: TorchCopier, layout: Any, dtype: Any, max_cached_bytes: int = 1 << 30) -> None:
        self.copier, self.layout, self.dtype = copier, layout, dtype
        self.max_cached = max_cached_bytes
        self._free: List[Any] = []
        self._lock = threading.Lock()

    def acquire(self, tokens: int) -> _Staging:
        import torch

        need = tokens * self.layout.bytes_per_token
        flat = None
        with self._lock:
            fits = [f for f in self._free if f.numel() >= need]
            if fits:
                flat = min(fits, key=lambda f: f.numel())
                self._free.remove(flat)
        if flat is None:
            size = max(need, 1) + (-max(need, 1)) % (1 << 20)
            flat = torch.empty(size, dtype=torch.uint8, pin_memory=not self.copier._is_host)
        tensor = flat[:need].view(self.dtype).view(self.layout.kv_shape(tokens))
        return _Staging(flat, tensor)

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


@dataclass
class _SaveJob:
    spec: SaveSpec
    staging: Optional[_Staging]
    index: Any = None
    layers: Set[int] = field(default_factory=set)
    failed: bool = False


class _LoadJob:
    """The loads of one step (or one async load): fetch from the store, then scatter layer by layer."""

    def __init__(self, worker: "WorkerSide", specs: List[LoadSpec], is_async: bool) -> None:
        self.w = worker
        self.specs = specs
        self.is_async = is_async
        self.events = [threading.Event() for _ in worker.kv.layers]  # type: ignore[union-attr]
        self.done = threading.Event()
        self.failed: Set[int] = set()
        self.loaded_tokens = 0
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
        fetched: List[Tuple[LoadSpec, _Staging, int, Any]] = []
        try:
            for spec in self.specs:
                f = self._fetch(spec)
                if f is not None:
                    fetched.append(f)
            bad: Set[int] = set()
            for layer in w.kv.layers:  # type: ignore[union-attr]
                for i, (spec, staging, got, index) in enumerate(fetched):
                    if i in bad:
                        continue
                    try:
                        w.copier.scatter(layer, index, block_rows(staging.tensor, spec.start, got, layer.index,
                                                                  w.kv.kernel_block_size))
                    except Exception:  # noqa: BLE001 - a bad request must not stop the others
                        logger.exception("ptstore: load of request %s into layer %s failed", spec.req_id, layer.name)
                        bad.add(i)
                        self.failed.update(spec.block_ids)
                w.copier.synchronize()
                self.events[layer.index].set()
            for i, (spec, _, got, _) in enumerate(fetched):
                if i not in bad:
                    self.loaded_tokens += got - spec.start
                    self.loads += 1
        except Exception:  # noqa: BLE001
            logger.exception("ptstore: loads failed")
            for spec in self.specs:
                self.failed.update(spec.block_ids)
        finally:
            for _, staging, _, _ in fetched:
                w.pool.release(staging)
            for e in self.events:
                e.set()
            w._load_finished(self)
            self.done.set()

    def _read_across(self, client: Any, spec: LoadSpec, out: Any) -> int:
        """Reads this rank's KV heads of a prefix saved at another tensor-parallel degree into `out` (token-major,
        this rank's heads): from each rank namespace of that degree holding some of them, the part they hold.
        Returns the whole-block tokens every one of them supplied."""
        import torch

        w = self.w
        b, n, total = w.block, spec.source_tp, w.total_kv_heads
        mine = rank_heads(w.tp_rank, w.tp_size, total)
        got = spec.end
        for s in range(n):
            theirs = rank_heads(s, n, total)
            lo, hi = max(mine.start, theirs.start), min(mine.stop, theirs.stop)
            if lo >= hi:
                continue
            name = rank_namespace(spec.namespace, s, n, 0, 1)
            layout = client.get_namespace(name).layout
            if layout.kv_heads != len(theirs) or layout.layers != out.shape[1] or layout.head_dim != out.shape[4]:
                raise ValueError(f"namespace {name} holds {layout}, not rank {s} of {n} of this model")
            tmp = torch.empty(layout.kv_shape(spec.end), dtype=out.dtype)
            g = min(client.load(name, spec.tokens, tmp), spec.end) // b * b
            got = min(got, g)
            if got <= spec.start:
                return 0
            out[:g, :, :, lo - mine.start:hi - mine.start] = tmp[:g, :, :, lo - theirs.start:hi - theirs.start]
        return got

    def _fetch(self, spec: LoadSpec) -> Optional[Tuple[LoadSpec, _Staging, int, Any]]:
        w = self.w
        b = w.block
        start, end = spec.start, spec.end
        if (end - start) // b != len(spec.block_ids) or start % b or end % b or end <= start:
            logger.warning("ptstore: malformed load for request %s (tokens [%d, %d), %d blocks)", spec.req_id, start,
                           end, len(spec.block_ids))
            self.failed.update(spec.block_ids)
            return None
        client = w.link.get()
        if client is None:
            self.failed.update(spec.block_ids)
            return None
        ns = w.rank_ns(spec.namespace)
        staging: Optional[_Staging] = None
        try:
            if spec.source_tp and spec.source_tp != w.tp_size:
                ns = f"{spec.namespace} (tensor-parallel degree {spec.source_tp})"
                staging = w.pool.acquire(end)
                got = self._read_across(client, spec, staging.tensor)
            elif client.mapped:
                with client.pin(ns, spec.tokens) as pin:
                    got = min(pin.tokens, end) // b * b
                    if got > start:
                        staging = w.pool.acquire(got)
                        pin.copy_to(staging.tensor, got)
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
            self.failed.update(spec.block_ids)
            return None
        good = (got - start) // b
        self.failed.update(spec.block_ids[good:])
        assert staging is not None
        return spec, staging, got, w.copier.block_index(w.kv.kernel_blocks(spec.block_ids[:good]))


class WorkerSide:
    """State of one worker's connector (one per GPU)."""

    def __init__(self, cfg: ConnectorConfig, *, tp_size: int = 1, pp_size: int = 1,
                 link: Optional[StoreLink] = None, total_kv_heads: int = 0) -> None:
        self.cfg = cfg
        self.block = cfg.block_size
        self.tp_size, self.pp_size = tp_size, pp_size
        self.tp_rank = self.pp_rank = 0
        self.total_kv_heads = total_kv_heads
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
        return rank_namespace(ns, self.tp_rank, self.tp_size, self.pp_rank, self.pp_size)

    def register_kv_caches(self, kv_caches: Dict[str, Any], specs: Optional[Dict[str, Any]] = None,
                           backends: Optional[Dict[str, Any]] = None) -> None:
        """Takes vLLM's caches; `specs` are their KV cache specs (vLLM's kv_cache_config) and `backends` their
        attention backends, by layer name (see paged.resolve_dims)."""
        specs, backends = specs or {}, backends or {}
        for name, spec in specs.items():
            if name in kv_caches and int(getattr(spec, "block_size", self.block)) != self.block:
                raise ValueError(f"layer {name!r} has blocks of {spec.block_size} tokens, vLLM's block_size is "
                                 f"{self.block}")
        kv = PagedKV(kv_caches, lambda name, t: resolve_dims(name, t, spec=specs.get(name), backend=backends.get(name),
                                                             named=self.cfg.kv_cache_layout), self.block)
        layout = kv.layout()
        want = self.cfg.layout
        if want is not None and (want.layers, want.kv_heads, want.head_dim, want.dtype) != \
                (layout.layers, layout.kv_heads, layout.head_dim, layout.dtype):
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
        for s in meta.loads:
            if s.is_async:
                with self._cv:
                    self._pending_async += 1
                self._loader.submit(_LoadJob(self, [s], is_async=True).run)

    def wait_for_layer_load(self, layer_name: str) -> None:
        job, kv = self._sync_job, self.kv
        if job is None or kv is None:
            return
        layer = kv.by_name.get(layer_name)
        if layer is not None:
            job.wait_layer(layer.index)

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
            layer = PagedLayer.from_tensor(layer_name, layer.index, kv_layer, layer.dims)
        job = self._sync_job
        if job is not None:
            job.wait_layer(layer.index)  # its blocks may be loaded in this step
        for spec in meta.saves:
            if not spec.at_finish:
                self._gather(spec, layer)

    def _gather(self, spec: SaveSpec, layer: PagedLayer) -> None:
        """Copies `layer` of the save's blocks out of the pages into its token-major staging buffer."""
        kv = self.kv
        assert kv is not None
        sj = self._step_saves.get(spec.req_id)
        if sj is None:
            sj = _SaveJob(spec, None)
            try:
                sj.staging = self.pool.acquire(len(spec.tokens))
                sj.index = self.copier.block_index(kv.kernel_blocks(spec.block_ids))
            except Exception:  # noqa: BLE001 - out of host memory: drop this save
                logger.exception("ptstore: no staging buffer for the save of request %s", spec.req_id)
                sj.failed = True
            self._step_saves[spec.req_id] = sj
        if sj.failed:
            return
        try:
            self.copier.gather(layer, sj.index, block_rows(sj.staging.tensor, 0, len(spec.tokens), layer.index,
                                                           kv.kernel_block_size))
            sj.layers.add(layer.index)
        except Exception:  # noqa: BLE001
            logger.exception("ptstore: gathering layer %s of request %s failed", layer.name, spec.req_id)
            sj.failed = True

    def _gather_all(self, at_finish: bool) -> None:
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
                    if layer.index not in getattr(self._step_saves.get(spec.req_id), "layers", ()):
                        self._gather(spec, layer)

    def wait_for_save(self) -> None:
        if not self.cfg.layerwise:  # no per-layer calls (full CUDA graphs): every layer of the step's saves now
            self._gather_all(at_finish=False)
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
            r.add("loaded_bytes", job.loaded_tokens * self.layout.bytes_per_token)
            r.observe("load_seconds", time.monotonic() - job.t0)
        if job.failed:
            r.add("load_errors", len(job.failed))
        with self._cv:
            self._load_errors.update(job.failed)
            self.stats["loaded_tokens"] += job.loaded_tokens
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
        if not final and not all(complete):
            return  # layers still to come (a deferred finalize)
        self._finalized = True
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

    def _tainted(self, spec: SaveSpec) -> bool:
        with self._cv:
            if not self._taint:
                return False
            for blk in spec.block_ids:
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

    def build_worker_meta(self) -> Optional[PTStoreWorkerMetadata]:
        """The requests whose saves failed since the last call (None: none), for the scheduler side."""
        with self._cv:
            failed, self._failed_saves = self._failed_saves, set()
        return PTStoreWorkerMetadata(failed_saves=failed) if failed else None

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
            for attempt in (0, 1):
                try:
                    self._ensure_namespace(client, ns, spec.salt)
                    r = client.save(ns, spec.tokens, sj.staging.tensor)
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

    def _ensure_namespace(self, client: Any, ns: str, salt: str) -> None:
        if ns in self._ns_ready:
            return
        try:
            client.create_namespace(ns, self.layout, salt=salt, exist_ok=True)
        except AlreadyExists:
            have = client.get_namespace(ns).layout
            mine = self.layout
            if (have.layers, have.kv_heads, have.head_dim, have.dtype) != \
                    (mine.layers, mine.kv_heads, mine.head_dim, mine.dtype):
                self._ns_bad.add(ns)
                logger.error("ptstore: namespace %s holds %s, this model's KV caches are %s: not saving to it (set "
                             "kv_connector_extra_config 'namespace')", ns, have, mine)
                raise
        self._ns_ready.add(ns)

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
