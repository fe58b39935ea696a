"""vLLM engines built from vLLM's own classes, with PTStoreConnector, for the tests in test_vllm_src.py.

An :class:`Engine` is what vLLM's EngineCore runs, minus the model: vLLM's
``Scheduler`` (or ``AsyncScheduler``) with its ``KVCacheManager`` (prefix
caching on) and the scheduler-side connector that ``KVConnectorFactory`` makes
from the ``--kv-transfer-config``; and a :class:`Worker` that runs a stand-in
model through vLLM's worker code: ``set_forward_context``,
``KVConnectorModelRunnerMixin._get_kv_connector_output`` (bind, start_load_kv,
wait_for_save, get_finished, get_block_ids_with_load_errors, stats) and a
stand-in attention layer wrapped in vLLM's ``maybe_transfer_kv_layer``
(wait_for_layer_load before it, save_kv_layer after it). The worker allocates
each layer's paged KV cache as vLLM's GPU model runner does
(``_reshape_kv_cache_tensors``): the backend's ``get_kv_cache_shape`` at the
kernel block size vLLM's ``select_common_block_size`` picks, laid out in the
backend's ``get_kv_cache_stride_order``.

The stand-in model (:class:`Oracle`) gives every token's K and V of every layer
as a function of the whole prefix up to it (and the request's isolation key:
salt, LoRA), so a KV block loaded for the wrong prefix, head or slot differs.
Its attention writes the step's new tokens into the pages through the slot
mapping and then checks every context token's K and V in the pages against the
oracle: every byte a load wrote is checked in the step that reads it.

Requests are vLLM's ``Request`` with vLLM's block hasher; outputs go back
through ``Scheduler.update_from_output`` as ``ModelRunnerOutput`` with the
connector's ``KVConnectorOutput``.

Hybrid and MLA models (``layer_kinds``): each layer's KV cache spec is the one vLLM's attention layer gives
(FullAttentionSpec, SlidingWindowSpec, MLAAttentionSpec), grouped and sized by vLLM's own
get_kv_cache_groups / get_kv_cache_config_from_groups with its hybrid manager on (as on CUDA or CPU
platforms: the connector is SupportsHMA) or off (``hma=False``); the caches of a group share vLLM's tensors
as its runner allocates them, a sliding-window layer attends (and is checked) over its window only, and an
MLA layer's cache is the backend's 3-D latent cache. A "state" layer is a stand-in Mamba2 layer (vLLM's
MambaSpec, conv and SSM state tensors in each block's page as its runner allocates them, the attention
caches then laid out block-first): it runs without a per-layer connector call, as vLLM's Mamba layers
do, reads its initial state where vLLM's kernels read it (mamba_cache_mode all: the block of the last
computed token; align: the running-state block, after vLLM's own preprocess_mamba) and checks it against
the model's state after the computed prefix. With ``model`` (a TinyModel, tiny_model.py) the
worker runs a small transformer over the pages instead of the stand-in model and keeps its logits.

Only the model's configuration is given as data: ``ModelConfig`` is built as
vLLM builds it after reading a config.json (transformers, which reads that file,
is not here), with the derived fields vLLM computes from it, and vLLM's own
``get_model_arch_config`` over those values.

The harness is five modules: ``config`` (vLLM's configuration of the model, the connector and the KV cache
layout; it imports vLLM's snapshot), ``oracle`` (the stand-in model's values), ``layers`` (its pages, layers
and a step's attention and Mamba checks), ``worker`` (:class:`Worker`) and this one (:class:`Engine`).
"""

from __future__ import annotations

import copy
import itertools
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from .config import (RecordingPublisher, grouped_kv_cache_config, kv_cache_config,  # (first: vLLM's snapshot)
                     stage_kv_cache_config, vllm_config)

import torch  # noqa: E402

from vllm.distributed.kv_transfer.kv_connector.utils import KVOutputAggregator  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import sha256  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.core.sched.async_scheduler import AsyncScheduler  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.request import Request  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

from .oracle import Oracle  # noqa: E402
from .worker import Worker  # noqa: E402

init_none_hash(sha256)

_ids = itertools.count(1)


class Engine:
    """One vLLM engine with PTStoreConnector (see the module's doc)."""

    def __init__(self, socket: str, *, backend: str = "FLASH_ATTN", layers: int = 2, kv_heads: int = 2,
                 head_size: int = 16, block_size: int = 16, num_blocks: int = 128, dtype: str = "fp16",
                 extra: Optional[Dict[str, Any]] = None, async_scheduling: bool = False,
                 kv_load_failure_policy: Optional[str] = None, kv_role: str = "kv_both",
                 max_num_batched_tokens: int = 512, oracle: Optional[Oracle] = None, kv_events: bool = False,
                 encoder_budget: int = 0, graph_replay: bool = False, tp: int = 1, pp: int = 1,
                 layer_kinds: Optional[Sequence[str]] = None, window: int = 0, hma: Optional[bool] = None,
                 mla_backend: str = "TRITON_MLA", model: Any = None, mamba_mode: str = "all",
                 states: Any = None) -> None:
        """`layer_kinds`: each layer's attention, "full", "window" (a sliding window of `window` tokens) or
        "latent" (MLA: a latent vector of `head_size`), for hybrid and MLA models; None: every layer full, one
        KV cache group as before vLLM's hybrid manager. `hma`: see vllm_config. `model`: a TinyModel
        (tiny_model.py) the worker runs instead of the stand-in model (its kinds, window and cache geometry).
        A "state" layer is a Mamba2 layer (MambaSpec) in vLLM's `mamba_mode` ("all" or "align"), its state
        tensors' (shapes, dtypes) `states` (default: state_shapes of the rank's KV heads)."""
        if model is not None:
            assert tp == 1 and not async_scheduling, "the TinyModel runs on one worker, synchronously scheduled"
            layer_kinds, window = model.kinds, model.window
            kv_heads, head_size = model.kv_heads, model.cache_head_size
            dtype = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}[model.kv_dtype]
        if layer_kinds is not None:
            layers = len(layer_kinds)
        has_state = layer_kinds is not None and "state" in layer_kinds
        self.cfg = vllm_config(socket=socket, layers=layers, kv_heads=kv_heads, head_size=head_size,
                               block_size=block_size, dtype=dtype, extra=extra, kv_role=kv_role,
                               kv_load_failure_policy=kv_load_failure_policy, async_scheduling=async_scheduling,
                               max_num_batched_tokens=max_num_batched_tokens, backend=backend, kv_events=kv_events,
                               tp=tp, hma=hma, mamba_mode=mamba_mode if has_state else "", pp=pp)
        latent = layer_kinds is not None and "latent" in layer_kinds
        if latent and set(layer_kinds or ()) != {"latent"}:
            raise ValueError("an MLA model's layers are all latent")
        # kv_heads: the model's; each tensor-parallel rank's spec has its share (as vLLM's get_num_kv_heads)
        if layer_kinds is None:
            self.kcc = kv_cache_config(layers=layers, kv_heads=max(1, kv_heads // tp), head_size=head_size,
                                       block_size=block_size, dtype=dtype, num_blocks=num_blocks)
        else:
            self.kcc = grouped_kv_cache_config(self.cfg, layer_kinds, kv_heads=max(1, kv_heads // tp),
                                               head_size=head_size, block_size=block_size, dtype=dtype,
                                               window=window, num_blocks=num_blocks, mamba_mode=mamba_mode,
                                               states=states)
        self.cfg.cache_config.num_gpu_blocks = self.kcc.num_blocks
        self.block_size = block_size
        self.oracle = oracle or (Oracle(layers, 1, head_size, dtype, parts=1) if latent
                                 else Oracle(layers, kv_heads, head_size, dtype))
        cls = AsyncScheduler if async_scheduling else Scheduler
        self.scheduler = cls(vllm_config=self.cfg, kv_cache_config=self.kcc, log_stats=True,
                             structured_output_manager=StructuredOutputManager(self.cfg), block_size=block_size)
        from vllm.config import set_current_vllm_config

        with set_current_vllm_config(self.cfg):  # as vLLM's worker while it loads the model and its KV caches
            # (pipeline stage, tensor-parallel rank) in vLLM's rank order; each stage's workers get its layers
            self.workers = [Worker(self.cfg, stage_kv_cache_config(self.kcc, s, pp), self.oracle, backend, tp_rank=q,
                                   pp_rank=s, graph_replay=graph_replay, mla_backend=mla_backend, model=model)
                            for s in range(pp) for q in range(tp)]
            self.worker = self.workers[0]
        self.publisher = RecordingPublisher.last if kv_events else None
        self.aggregator = KVOutputAggregator(expected_finished_count=tp * pp)
        self.output_rank = (pp - 1) * tp  # vLLM's executor takes the sampled tokens from the last stage
        if encoder_budget:
            # The encoder budget and cache vLLM's Scheduler takes from MultiModalBudget, which reads them from a
            # multimodal model's processor (not here): the same two fields, set as its __init__ sets them.
            from vllm.v1.core.encoder_cache_manager import EncoderCacheManager

            self.scheduler.max_num_encoder_input_tokens = encoder_budget
            self.scheduler.encoder_cache_manager = EncoderCacheManager(cache_size=encoder_budget)
        self.hasher = get_request_block_hasher(block_size, sha256)
        self.finished: Dict[str, Any] = {}  # req_id -> EngineCoreOutput of its end
        self.requests: Dict[str, Any] = {}
        self.seen: Dict[str, Set[str]] = {}  # req_id -> every status it had after a step
        self.connector_stats: List[Dict[str, Any]] = []  # SchedulerStats.kv_connector_stats of each step

    @property
    def connector(self) -> Any:
        return self.scheduler.connector

    def add(self, tokens: Optional[Sequence[int]], *, max_tokens: int = 1, cache_salt: Optional[str] = None,
            req_id: Optional[str] = None, prompt_embeds: Any = None,
            images: Sequence[Tuple[str, int, int]] = ()) -> Any:
        """A request; `images`: (vLLM identifier, offset, length) of multimodal items over placeholder tokens."""
        from vllm.multimodal.inputs import MultiModalFeatureSpec, PlaceholderRange

        mm = [MultiModalFeatureSpec(data=None, modality="image", identifier=ident,
                                    mm_position=PlaceholderRange(offset=off, length=n)) for ident, off, n in images]
        rid = req_id or f"req-{next(_ids)}"
        sp = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
        req = Request(request_id=rid, prompt_token_ids=None if tokens is None else [int(t) for t in tokens],
                      sampling_params=sp, pooling_params=None, cache_salt=cache_salt, block_hasher=self.hasher,
                      prompt_embeds=prompt_embeds, mm_features=mm or None)
        for ident, off, n in images:  # the stand-in model's input at an image's positions is the image
            for w in self.workers:
                w.image_inputs.setdefault(rid, []).append((ident, off, n))
        for w in self.workers:
            w.engine_isolation[rid] = cache_salt or ""
        self.requests[rid] = req
        self.scheduler.add_request(req)
        return req

    def saved(self, tokens: Optional[Sequence[int]], **kw: Any) -> Any:
        """Serves one request (add's arguments) to its end and waits until its saves reached the store."""
        req = self.add(tokens, **kw)
        self.run()
        self.flush()
        return req

    def step(self) -> Any:
        so = self.scheduler.schedule()
        self.finish_step(so)
        return so

    def finish_step(self, so: Any) -> Any:
        """The rest of a step after vLLM's schedule() gave `so` (a test may act in between: the scheduler has
        planned, the workers have not loaded yet): the workers' execute_model and vLLM's update_from_output.
        Returns the workers' ModelRunnerOutput."""
        mro = self.execute(so)
        outputs = self.scheduler.update_from_output(so, mro)
        for rid, req in self.requests.items():
            self.seen.setdefault(rid, set()).add(status_name(req.status))
        for eco in outputs.values():
            stats = getattr(eco, "scheduler_stats", None)
            if stats is not None and stats.kv_connector_stats:
                self.connector_stats.append(stats.kv_connector_stats)
            for o in eco.outputs:
                if o.finish_reason is not None:
                    self.finished[o.request_id] = o
        return mro

    def execute(self, so: Any) -> Any:
        """Every worker runs the step; vLLM's KVOutputAggregator merges their outputs (a request's save is done
        when every rank reported it)."""
        outs = [w.execute_model(so) for w in self.workers]
        if len(outs) == 1:
            return outs[0]
        # Each worker's output reaches vLLM's executor as its own object (over IPC); the aggregator writes the
        # merged result into rank 0's, which may be vLLM's shared EMPTY_MODEL_RUNNER_OUTPUT here: copy them.
        return self.aggregator.aggregate([copy.copy(o) for o in outs], output_rank=self.output_rank)

    def run(self, max_steps: int = 2000) -> None:
        """Steps as vLLM's EngineCore does until the scheduler holds no request: finished ones stay until their
        held blocks are freed (the connector's finished_sending) and async loads have been received."""
        import time

        for _ in range(max_steps):
            if not self.scheduler.has_requests() and not self.scheduler.requests:
                return
            so = self.step()
            if so.total_num_scheduled_tokens == 0:
                time.sleep(0.002)  # waiting on the connector's background saves or loads
        raise AssertionError(f"requests still unfinished after {max_steps} steps: "
                             f"{[(r, E_status(q)) for r, q in self.scheduler.requests.items()]}")

    def flush(self) -> None:
        """Waits until the worker's saves reached the store, then steps until vLLM freed their blocks."""
        for w in self.workers:
            assert w.connector.worker_side.flush(30.0), "saves did not finish in 30 s"
        self.run()

    def result(self, rid: str) -> Tuple[Any, Any]:
        """(vLLM's Request, its final CompletionOutput) of a finished request."""
        return self.requests[rid], self.finished[rid]

    def close(self) -> None:
        for w in self.workers:
            w.connector.shutdown()
            for name in [*w.layers, *w.mamba_layers]:
                w.cfg.compilation_config.static_forward_context.pop(name, None)
        self.scheduler.connector.shutdown()


def E_status(req: Any) -> str:
    return status_name(req.status)


def status_name(status: Any) -> str:
    return status.name if hasattr(status, "name") else str(status)


__all__ = ["Engine", "E_status", "status_name"]
