"""PTStoreConnector: vLLM's v1 KV connector backed by PTStore.

Enable it with (docs/vllm.md)::

    vllm serve MODEL --kv-transfer-config '{"kv_connector": "PTStoreConnector",
        "kv_connector_module_path": "ptstore.vllm", "kv_role": "kv_both",
        "kv_connector_extra_config": {"socket": "/run/ptstore/ptstored.sock"}}'

vLLM makes one instance with ``KVConnectorRole.SCHEDULER`` in its engine core
(lookups, load and save plans) and one with ``KVConnectorRole.WORKER`` per GPU
worker (the copies); each delegates to ``_scheduler.SchedulerSide`` or
``_worker.WorkerSide``. The layout mapping is in ``paged.py``, the namespace
and block-key rules in ``keys.py``, the options in ``config.py``.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any, Dict, List, Optional, Set, Tuple

from ._compat import HAVE_VLLM, KVConnectorBase_V1, KVConnectorMetadata, SupportsHMA
from ._meta import PTStoreConnectorMetadata
from ._scheduler import SchedulerSide
from ._worker import WorkerSide
from .config import ConnectorConfig, needs_layer_calls
from .groups import group_specs
from .stats import PTStoreConnectorStats, build_prom_metrics

__all__ = ["PTStoreConnector"]

logger = logging.getLogger("ptstore.vllm")


def _parallel_sizes(vllm_config: Any) -> Tuple[int, int]:
    pc = getattr(vllm_config, "parallel_config", None)
    return int(getattr(pc, "tensor_parallel_size", 1) or 1), int(getattr(pc, "pipeline_parallel_size", 1) or 1)


def _role_is(role: Any, name: str) -> bool:
    return getattr(role, "name", str(role)).upper().endswith(name)


def _apply_failure_policy(vllm_config: Any, policy: str) -> None:
    """Makes vLLM's ``kv_load_failure_policy`` the connector's ``load_failure_policy`` (default "recompute").

    vLLM reads it right after it made the scheduler-side connector; its default since 2026-02 is "fail",
    which ends a request whose load failed with FINISHED_ERROR. PTStore is a cache: a prefix evicted or
    removed between lookup and load, or a ptstored restart, must cost a recompute, never a request.
    """
    ktc = getattr(vllm_config, "kv_transfer_config", None)
    have = getattr(ktc, "kv_load_failure_policy", None)
    if ktc is None or have is None or have == policy:
        return
    ktc.kv_load_failure_policy = policy
    logger.info("ptstore: kv_load_failure_policy set to %r (was %r): %s", policy, have,
                "a failed load is recomputed, the request goes on" if policy == "recompute" else
                "kv_connector_extra_config load_failure_policy 'fail': a failed load fails its request")


def _total_layers(vllm_config: Any) -> int:
    """The model's layers over all pipeline stages (0 when vLLM's config does not tell)."""
    try:
        return int(vllm_config.model_config.get_total_num_hidden_layers())
    except Exception:  # noqa: BLE001 - an older or partial config
        return 0


def _total_kv_heads(vllm_config: Any) -> int:
    """The model's KV heads over all tensor-parallel ranks (0 when vLLM's config does not tell)."""
    try:
        return int(vllm_config.model_config.get_total_num_kv_heads())
    except Exception:  # noqa: BLE001 - an older or partial config
        return 0


def _attention_backends(vllm_config: Any, kv_caches: Dict[str, Any]) -> Dict[str, Any]:
    """The attention backend class of each layer, from vLLM's static forward context (its Attention layers)."""
    ctx = getattr(getattr(vllm_config, "compilation_config", None), "static_forward_context", None) or {}
    out: Dict[str, Any] = {}
    for name in kv_caches:
        layer = ctx.get(name)
        get = getattr(layer, "get_attn_backend", None)
        backend = get() if callable(get) else getattr(layer, "attn_backend", None)
        if backend is not None:
            out[name] = backend
    return out


class PTStoreConnector(KVConnectorBase_V1, SupportsHMA):
    """A vLLM v1 KV connector that loads prompt prefixes from PTStore and saves prompts to it.

    Args (as vLLM's KVConnectorFactory passes them):
        vllm_config: vLLM's config; ``kv_transfer_config.kv_connector_extra_config``
            holds this connector's options (:mod:`ptstore.vllm.config`),
            ``cache_config.block_size`` the block size.
        role: ``KVConnectorRole.SCHEDULER`` or ``KVConnectorRole.WORKER``.
        kv_cache_config: vLLM's KVCacheConfig (newer vLLM): its KV cache groups
            (full attention, sliding window, MLA; groups.py) are the namespace
            layout's groups.
    """

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
        params = inspect.signature(KVConnectorBase_V1.__init__).parameters
        if "kv_cache_config" in params:
            super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        else:  # vLLM before kv_cache_config was passed to connectors
            super().__init__(vllm_config=vllm_config, role=role)
        self.config = ConnectorConfig.from_vllm(vllm_config)
        groups = group_specs(kv_cache_config)  # (refuses the KV cache specs it cannot store, naming them)
        tp, pp = _parallel_sizes(vllm_config)
        # Cross-degree loads split dense K/V heads; grouped layouts load at their own degree (MLA: every degree)
        heads = _total_kv_heads(vllm_config) if groups is None or len(groups) == 1 and groups[0].kind == "full" else 0
        self._kv_cache_config = kv_cache_config
        self._scheduler: Optional[SchedulerSide] = None
        self._worker: Optional[WorkerSide] = None
        if _role_is(role, "SCHEDULER"):
            _apply_failure_policy(vllm_config, self.config.load_failure_policy)
            self._scheduler = SchedulerSide(self.config, tp_size=tp, pp_size=pp, total_kv_heads=heads, groups=groups)
        else:
            self._worker = WorkerSide(self.config, tp_size=tp, pp_size=pp, total_kv_heads=heads,
                                      total_layers=_total_layers(vllm_config), groups=groups)
        logger.info("ptstore: PTStoreConnector (%s) namespace %s, load=%s save=%s load_async=%s%s",
                    getattr(role, "name", role), self.config.namespace, self.config.load, self.config.save,
                    self.config.load_async, "" if HAVE_VLLM else " (vLLM not installed: stand-in base classes)")

    # ------------------------------------------------------------ helpers
    @property
    def scheduler_side(self) -> SchedulerSide:
        if self._scheduler is None:
            raise RuntimeError("a scheduler-side method was called on the worker-side PTStoreConnector")
        return self._scheduler

    @property
    def worker_side(self) -> WorkerSide:
        if self._worker is None:
            raise RuntimeError("a worker-side method was called on the scheduler-side PTStoreConnector")
        return self._worker

    @classmethod
    def get_required_kvcache_layout(cls, vllm_config: Any) -> Optional[str]:
        return None  # NHD and HND both work (the copies follow the tensors' strides)

    @classmethod
    def requires_piecewise_for_cudagraph(cls, extra_config: Dict[str, Any]) -> bool:
        """True unless ``layerwise`` is false: wait_for_layer_load / save_kv_layer must run between the layers,
        which captured CUDA graphs skip; with it false every copy happens outside the forward pass."""
        return needs_layer_calls(extra_config)

    # ======================================================== worker side
    def register_kv_caches(self, kv_caches: Dict[str, Any]) -> None:
        """Takes vLLM's per-layer paged KV caches ({layer name: tensor})."""
        w = self.worker_side
        if w.tp_size > 1 or w.pp_size > 1:
            try:  # pragma: no cover - needs vLLM's process groups
                from vllm.distributed.parallel_state import get_pp_group, get_tensor_model_parallel_rank

                w.set_ranks(get_tensor_model_parallel_rank(), get_pp_group().rank_in_group)
            except Exception as e:  # noqa: BLE001
                raise RuntimeError(f"PTStoreConnector: cannot tell this worker's parallel ranks: {e}") from e
        specs: Dict[str, Any] = {}
        for group in getattr(self._kv_cache_config, "kv_cache_groups", None) or ():
            for name in group.layer_names:
                specs[name] = group.kv_cache_spec
        w.register_kv_caches(kv_caches, specs=specs, backends=_attention_backends(self._vllm_config, kv_caches))

    def bind_connector_metadata(self, connector_metadata: KVConnectorMetadata) -> None:
        super().bind_connector_metadata(connector_metadata)
        if self._worker is not None and isinstance(connector_metadata, PTStoreConnectorMetadata):
            self._worker.bind(connector_metadata)

    def clear_connector_metadata(self) -> None:
        if self._worker is not None:
            self._worker.clear()
        super().clear_connector_metadata()

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        """Starts this step's loads (layer by layer in the background; async loads on their own)."""
        self.worker_side.start_load_kv()

    def wait_for_layer_load(self, layer_name: str) -> None:
        """Returns once this step's loads have written layer `layer_name`."""
        self.worker_side.wait_for_layer_load(layer_name)

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any) -> None:
        """Copies this layer's KV of the prompts completed in this step into their token-major save buffers."""
        self.worker_side.save_kv_layer(layer_name, kv_layer)

    def wait_for_save(self) -> None:
        """Ends the step's gathers (the pages may be reused) and hands the saves to the background writer."""
        self.worker_side.wait_for_save()

    def get_finished(self, finished_req_ids: Set[str]) -> Tuple[Optional[Set[str]], Optional[Set[str]]]:
        """(finished requests whose saves are written, requests whose async loads are done)."""
        return self.worker_side.get_finished(finished_req_ids)

    def get_block_ids_with_load_errors(self) -> Set[int]:
        """Blocks whose load failed since the last call: vLLM recomputes them."""
        return self.worker_side.get_block_ids_with_load_errors()

    def build_connector_worker_meta(self) -> Any:
        """This step's report to the scheduler side (requests whose saves failed), or None."""
        return self.worker_side.build_worker_meta()

    def take_events(self) -> Any:
        """vLLM KV events for what the store holds for this engine (events.py): vLLM publishes them with its own
        KV events when ``--kv-events-config`` enables them."""
        return self.scheduler_side.events.take()

    def get_kv_connector_stats(self) -> Any:
        """This side's counters since the last call (stats.PTStoreConnectorStats), or None when nothing
        happened: vLLM logs them and feeds its /metrics (build_prom_metrics)."""
        side = self._worker if self._worker is not None else self._scheduler
        return side.recorder.take() if side is not None else None

    @classmethod
    def build_kv_connector_stats(cls, data: Optional[Dict[str, Any]] = None) -> Any:
        return PTStoreConnectorStats(data=dict(data) if data is not None else {})

    @classmethod
    def build_prom_metrics(cls, vllm_config: Any, metric_types: Any, labelnames: Any,
                           per_engine_labelvalues: Any) -> Any:
        return build_prom_metrics(vllm_config, metric_types, labelnames, per_engine_labelvalues)

    def shutdown(self) -> None:
        if self._worker is not None:
            self._worker.shutdown()
        if self._scheduler is not None:
            self._scheduler.close()

    # ===================================================== scheduler side
    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> Tuple[Optional[int], bool]:
        """Tokens beyond `num_computed_tokens` the store can supply (whole blocks; None: ask again later) and
        whether they load asynchronously."""
        return self.scheduler_side.get_num_new_matched_tokens(request, num_computed_tokens)

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        """Plans the load of the `num_external_tokens` promised tokens into the blocks vLLM allocated."""
        self.scheduler_side.update_state_after_alloc(request, blocks, num_external_tokens)

    def build_connector_meta(self, scheduler_output: Any) -> KVConnectorMetadata:
        """This step's loads and saves, for the workers."""
        return self.scheduler_side.build_connector_meta(scheduler_output)

    def update_connector_output(self, connector_output: Any) -> None:
        self.scheduler_side.update_connector_output(connector_output)

    def request_finished(self, request: Any, block_ids: Any) -> Tuple[bool, Optional[Dict[str, Any]]]:
        """(hold the blocks until get_finished reports the request's save written, kv_transfer_params)."""
        return self.scheduler_side.request_finished(request, block_ids)

    def request_finished_all_groups(self, request: Any,
                                    block_ids: Tuple[List[int], ...]) -> Tuple[bool, Optional[Dict[str, Any]]]:
        """SupportsHMA: request_finished with the blocks of every KV cache group."""
        return self.scheduler_side.request_finished(request, block_ids)

    def reset_cache(self) -> Optional[bool]:
        """vLLM's ``reset_prefix_cache(reset_connector=True)`` (after a weight update, say): removes every
        prefix of this model from the store, in its namespace and the ones derived from it (salts, LoRA,
        parallel ranks), so that no later request loads KV of the old weights. True when all were removed."""
        return self.scheduler_side.reset_cache()
