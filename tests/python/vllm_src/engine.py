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
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import itertools
import types
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from . import standins

V = standins.import_vllm(extra=(
    "vllm.distributed.kv_transfer.kv_transfer_state",
    "vllm.model_executor.layers.attention.kv_transfer_utils",
    "vllm.model_executor.models.registry",
    "vllm.v1.worker.utils",
    "vllm.v1.structured_output",
    "vllm.utils.hashing",
    "vllm.v1.core.sched.output",
    # the attention backends (their modules compute constants at import time)
    "vllm.v1.attention.backends.flash_attn", "vllm.v1.attention.backends.flashinfer",
    "vllm.v1.attention.backends.triton_attn", "vllm.v1.attention.backends.flex_attention",
    "vllm.v1.attention.backends.cpu_attn", "vllm.v1.attention.backends.rocm_attn",
    "vllm.v1.attention.backends.rocm_aiter_fa", "vllm.v1.attention.backends.rocm_aiter_unified_attn",
    "vllm.v1.attention.backends.mla.triton_mla", "vllm.v1.attention.backends.mla.flashmla",
    # Mamba state: the model runner's align-mode copies and the state copy functions of vLLM's Mamba2 layers
    "vllm.v1.worker.mamba_utils", "vllm.model_executor.layers.mamba.mamba_utils", "vllm.v1.utils",
))

import torch  # noqa: E402

from vllm.config import (CacheConfig, DeviceConfig, KVTransferConfig, ModelConfig, SchedulerConfig,  # noqa: E402
                         VllmConfig)
from vllm.distributed.kv_events import EventPublisher, EventPublisherFactory  # noqa: E402
from vllm.distributed.kv_transfer import kv_transfer_state  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole  # noqa: E402
from vllm.forward_context import set_forward_context  # noqa: E402
from vllm.model_executor.layers.attention.kv_transfer_utils import maybe_transfer_kv_layer  # noqa: E402
from vllm.model_executor.models.registry import _ModelInfo  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import sha256  # noqa: E402
from vllm.v1.attention.backends.registry import AttentionBackendEnum  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.core.sched.async_scheduler import AsyncScheduler  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_kv_cache_config_from_groups, get_kv_cache_groups  # noqa: E402
from vllm.v1.kv_cache_interface import (FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, KVCacheTensor,  # noqa: E402
                                        MambaSpec, MLAAttentionSpec, SlidingWindowSpec)
from vllm.model_executor.layers.mamba.mamba_utils import MambaStateCopyFuncCalculator  # noqa: E402
from vllm.v1.utils import CpuGpuBuffer  # noqa: E402
from vllm.v1.worker import mamba_utils  # noqa: E402
from vllm.v1.outputs import ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request, RequestStatus  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402
from vllm.v1.worker.kv_connector_model_runner_mixin import KVConnectorModelRunnerMixin  # noqa: E402
from vllm.v1.worker.utils import select_common_block_size  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.utils import KVOutputAggregator  # noqa: E402

from ptstore.vllm.keys import rank_heads  # noqa: E402

init_none_hash(sha256)

# Attention backends of the snapshot with a dense K/V cache, and the meaning of each dimension of their
# get_kv_cache_shape (what the test's stand-in model writes through; checked against vLLM's code in
# test_vllm_src.py): kv = K or V, block = kernel block, slot = token in the block, head, dim.
BACKEND_DIMS: Dict[str, Tuple[str, ...]] = {
    "FLASH_ATTN": ("kv", "block", "slot", "head", "dim"),
    "FLASHINFER": ("block", "kv", "slot", "head", "dim"),
    "TRITON_ATTN": ("block", "kv", "slot", "head", "dim"),
    "FLEX_ATTENTION": ("kv", "block", "slot", "head", "dim"),
    "CPU_ATTN": ("kv", "block", "head", "slot", "dim"),
    "ROCM_ATTN": ("kv", "block", "slot", "head", "dim"),
    "ROCM_AITER_FA": ("kv", "block", "slot", "head", "dim"),
    "ROCM_AITER_UNIFIED_ATTN": ("kv", "block", "slot", "head", "dim"),
}
# MLA backends that load here: their latent cache [blocks, block_size, kv_lora_rank + rope dim]
MLA_BACKEND_DIMS: Dict[str, Tuple[str, ...]] = {
    "TRITON_MLA": ("block", "slot", "dim"),
    "FLASHMLA": ("block", "slot", "dim"),
}

_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def backend_class(name: str) -> Any:
    return AttentionBackendEnum[name].get_class()


# ---------------------------------------------------------------------------------------------- configuration
class HFConfig(types.SimpleNamespace):
    """The values of a model's config.json, with the two methods of transformers' PretrainedConfig vLLM calls."""

    def get_text_config(self, decoder: bool = False) -> "HFConfig":
        return self

    def to_dict(self) -> Dict[str, Any]:
        return dict(vars(self))


def model_config(*, layers: int, kv_heads: int, head_size: int, dtype: str = "fp16", max_model_len: int = 8192,
                 name: str = "ptstore-test/tiny-llama") -> Any:
    """vLLM's ModelConfig of a small Llama, as vLLM builds it once it has read the model's config.json."""
    mc = ModelConfig.__new__(ModelConfig)
    for f in dataclasses.fields(ModelConfig):
        if f.default is not dataclasses.MISSING:
            setattr(mc, f.name, f.default)
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            setattr(mc, f.name, f.default_factory())  # type: ignore[misc]
    heads = kv_heads * 2
    mc.hf_config = HFConfig(  # config.json of the model
        model_type="llama", architectures=["LlamaForCausalLM"], is_encoder_decoder=False,
        hidden_size=heads * head_size, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=kv_heads, head_dim=head_size, vocab_size=32000, max_position_embeddings=max_model_len,
        torch_dtype={"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}[dtype], quantization_config=None)
    mc.hf_text_config = mc.hf_config
    # What ModelConfig.__post_init__ derives from it:
    mc.model = mc.served_model_name = mc.tokenizer = name
    mc.dtype = _DTYPES[dtype]
    mc.max_model_len = mc.original_max_model_len = max_model_len
    mc.skip_tokenizer_init = True
    mc.multimodal_config = None
    mc.encoder_config = None
    mc.attention_chunk_size = None
    mc.hf_image_processor_config = {}
    mc.pooler_config = None
    mc.runner_type, mc.convert_type = "generate", "none"
    mc._architecture = "LlamaForCausalLM"
    mc._model_info = _ModelInfo(
        architecture="LlamaForCausalLM", is_text_generation_model=True, is_pooling_model=False, attn_type="decoder",
        default_seq_pooling_type="LAST", default_tok_pooling_type="ALL", score_type="bi-encoder",
        supports_multimodal=False, supports_multimodal_raw_input_only=False, requires_raw_input_tokens=False,
        supports_multimodal_encoder_tp_data=False, supports_pp=True, has_inner_state=False, is_attention_free=False,
        is_hybrid=False, has_noops=False, supports_mamba_prefix_caching=False, supports_transcription=False,
        supports_transcription_only=False)
    mc.model_arch_config = mc.get_model_arch_config()
    return mc


def vllm_config(*, socket: str, layers: int, kv_heads: int, head_size: int, block_size: int, dtype: str = "fp16",
                extra: Optional[Dict[str, Any]] = None, kv_role: str = "kv_both",
                kv_load_failure_policy: Optional[str] = None, async_scheduling: bool = False,
                max_num_batched_tokens: int = 512, max_num_seqs: int = 16, backend: str = "FLASH_ATTN",
                kv_events: bool = False, tp: int = 1, hma: Optional[bool] = None, mamba_mode: str = "",
                pp: int = 1) -> Any:
    """vLLM's VllmConfig with ``--kv-transfer-config`` naming PTStoreConnector as docs/vllm.md shows it.

    `hma`: None, vLLM decides whether its hybrid KV cache manager runs (on a platform that supports it, as
    CUDA and CPU do, and only for a connector that subclasses SupportsHMA); False:
    ``--disable-hybrid-kv-cache-manager``. `mamba_mode`: a model with Mamba layers, vLLM's mamba_cache_mode
    ("all" or "align", as MambaModelConfig sets it with prefix caching on) and mamba_block_size (the block
    size)."""
    ktc: Dict[str, Any] = dict(kv_connector="PTStoreConnector", kv_connector_module_path="ptstore.vllm",
                               kv_role=kv_role, kv_connector_extra_config={"socket": socket, **(extra or {})})
    if kv_load_failure_policy is not None:
        ktc["kv_load_failure_policy"] = kv_load_failure_policy
    from vllm.platforms import current_platform

    # The stand-ins' platform is vLLM's UnspecifiedPlatform, whose support_hybrid_kv_cache() is False; CUDA's
    # and CPU's are True: vLLM's own decision then runs as it does there.
    saved = current_platform.support_hybrid_kv_cache
    current_platform.support_hybrid_kv_cache = lambda: True  # type: ignore[method-assign]
    try:
        cfg = _vllm_config(ktc, layers=layers, kv_heads=kv_heads, head_size=head_size, block_size=block_size,
                           dtype=dtype, async_scheduling=async_scheduling,
                           max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs, backend=backend,
                           kv_events=kv_events, tp=tp, hma=hma, pp=pp)
        if mamba_mode:
            cfg.cache_config.mamba_cache_mode = mamba_mode
            cfg.cache_config.mamba_block_size = block_size
        return cfg
    finally:
        current_platform.support_hybrid_kv_cache = saved  # type: ignore[method-assign]


def _vllm_config(ktc: Dict[str, Any], *, layers: int, kv_heads: int, head_size: int, block_size: int, dtype: str,
                 async_scheduling: bool, max_num_batched_tokens: int, max_num_seqs: int, backend: str,
                 kv_events: bool, tp: int, hma: Optional[bool], pp: int = 1) -> Any:
    from vllm.config import AttentionConfig, KVEventsConfig, ParallelConfig

    # vLLM checks that the model supports pipeline parallelism by inspecting its class in a subprocess (its
    # registry), which cannot import vLLM here; Llama does (SupportsPP): the degree is set once it has checked.
    cfg = VllmConfig(
        parallel_config=ParallelConfig(tensor_parallel_size=tp),
        kv_events_config=KVEventsConfig(enable_kv_cache_events=True, publisher=RECORDER) if kv_events else None,
        model_config=model_config(layers=layers, kv_heads=kv_heads, head_size=head_size, dtype=dtype),
        scheduler_config=SchedulerConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                                         max_model_len=8192, enable_chunked_prefill=True, is_encoder_decoder=False,
                                         async_scheduling=async_scheduling,
                                         disable_hybrid_kv_cache_manager=None if hma is None else not hma),
        cache_config=CacheConfig(block_size=block_size, gpu_memory_utilization=0.9, cache_dtype="auto",
                                 enable_prefix_caching=True),
        kv_transfer_config=KVTransferConfig(**ktc),
        device_config=DeviceConfig("cpu"),
        attention_config=AttentionConfig(backend=AttentionBackendEnum[backend]),
    )
    if pp > 1:
        cfg.parallel_config.pipeline_parallel_size = pp
        cfg.parallel_config.world_size = pp * tp
    return cfg


def layer_names(layers: int) -> List[str]:
    return [f"model.layers.{i}.self_attn.attn" for i in range(layers)]


def kv_cache_config(*, layers: int, kv_heads: int, head_size: int, block_size: int, dtype: str,
                    num_blocks: int) -> Any:
    spec = FullAttentionSpec(block_size=block_size, num_kv_heads=kv_heads, head_size=head_size, dtype=_DTYPES[dtype])
    names = layer_names(layers)
    return KVCacheConfig(num_blocks=num_blocks,
                         kv_cache_tensors=[KVCacheTensor(size=spec.page_size_bytes * num_blocks, shared_by=[n])
                                           for n in names],
                         kv_cache_groups=[KVCacheGroupSpec(names, spec)])


def state_shapes(kv_heads: int) -> Tuple[Tuple[Tuple[int, ...], ...], Tuple[Any, ...]]:
    """(shapes, dtypes) of a stand-in Mamba2 layer's state on one tensor-parallel rank, as vLLM's
    MambaStateShapeCalculator.mamba2_state_shape gives them: the conv state (conv kernel - 1, conv dim) and the
    SSM state (heads, head dim, state size), both split over the ranks like the KV heads."""
    return ((3, 12 * kv_heads), (kv_heads, 8, 8)), (torch.float16, torch.float32)


def layer_spec(kind: str, *, block_size: int, kv_heads: int, head_size: int, dtype: str, window: int,
               mamba_mode: str = "all", page: int = 0, states: Any = None) -> Any:
    """The KV cache spec vLLM's attention layer of `kind` gives (Attention.get_kv_cache_spec); "state": a Mamba2
    layer's (MambaMixer2.get_kv_cache_spec) with its page padded to `page`, the attention layers' page, as
    vLLM's HybridAttentionMambaModelConfig pads it; `states`: its (shapes, dtypes), default state_shapes."""
    if kind == "state":
        shapes, dtypes = states or state_shapes(kv_heads)
        return MambaSpec(block_size=block_size, shapes=shapes, dtypes=dtypes, page_size_padded=page or None,
                         mamba_cache_mode=mamba_mode)
    if kind == "full":
        return FullAttentionSpec(block_size=block_size, num_kv_heads=kv_heads, head_size=head_size,
                                 dtype=_DTYPES[dtype])
    if kind == "window":
        return SlidingWindowSpec(block_size=block_size, num_kv_heads=kv_heads, head_size=head_size,
                                 dtype=_DTYPES[dtype], sliding_window=window)
    if kind == "latent":  # MLA: one latent vector (kv_lora_rank + rope dims) per token, num_kv_heads 1
        return MLAAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=head_size, dtype=_DTYPES[dtype])
    raise ValueError(kind)


def grouped_kv_cache_config(cfg: Any, kinds: Sequence[str], *, kv_heads: int, head_size: int, block_size: int,
                            dtype: str, window: int, num_blocks: int, mamba_mode: str = "all",
                            states: Any = None) -> Any:
    """The KVCacheConfig vLLM makes for a model whose layers have these kinds: vLLM's own get_kv_cache_groups
    (hybrid models: one group per kind and equal group sizes, when its hybrid manager runs; else every layer
    unified to full attention) and get_kv_cache_config_from_groups, with `num_blocks` as
    ``--num-gpu-blocks-override``."""
    page = FullAttentionSpec(block_size=block_size, num_kv_heads=kv_heads, head_size=head_size,
                             dtype=_DTYPES[dtype]).page_size_bytes
    specs = {name: layer_spec(k, block_size=block_size, kv_heads=kv_heads, head_size=head_size, dtype=dtype,
                              window=window, mamba_mode=mamba_mode, page=page, states=states)
             for name, k in zip(layer_names(len(kinds)), kinds)}
    groups = get_kv_cache_groups(cfg, specs)
    cfg.cache_config.num_gpu_blocks_override = num_blocks
    page = max(g.kv_cache_spec.page_size_bytes for g in groups)
    per = max(len(g.layer_names) for g in groups)
    return get_kv_cache_config_from_groups(cfg, groups, available_memory=page * num_blocks * per * len(groups))


def stage_kv_cache_config(kcc: Any, stage: int, pp: int) -> Any:
    """The KVCacheConfig of pipeline stage `stage` of `pp`: the layers vLLM's get_pp_indices gives it (each
    stage's workers allocate and register only theirs)."""
    if pp <= 1:
        return kcc
    from vllm.distributed.utils import get_pp_indices

    names = [n for g in kcc.kv_cache_groups for n in g.layer_names]
    lo, hi = get_pp_indices(len(names), stage, pp)
    mine = set(layer_names(len(names))[lo:hi])
    return KVCacheConfig(num_blocks=kcc.num_blocks,
                         kv_cache_tensors=[KVCacheTensor(size=t.size, shared_by=[n for n in t.shared_by if n in mine])
                                           for t in kcc.kv_cache_tensors if set(t.shared_by) & mine],
                         kv_cache_groups=[KVCacheGroupSpec([n for n in g.layer_names if n in mine], g.kv_cache_spec)
                                          for g in kcc.kv_cache_groups])


# vLLM's KV events of an engine, published through vLLM's EventPublisherFactory (a publisher plugin that keeps the
# batches instead of sending them over ZMQ: vLLM's ZMQ publisher encodes with msgspec, which is not here).
RECORDER = "ptstore-test-recorder"


class RecordingPublisher(EventPublisher):
    last: Optional["RecordingPublisher"] = None

    def __init__(self, data_parallel_rank: int = 0, **config: Any) -> None:
        super().__init__(data_parallel_rank)
        self.batches: List[Any] = []
        RecordingPublisher.last = self

    def publish(self, events: Any) -> None:
        self.batches.append(events)

    def shutdown(self) -> None:
        return None

    def events(self) -> List[Any]:
        return [e for b in self.batches for e in b.events]


EventPublisherFactory.register_publisher(RECORDER, RecordingPublisher)


# ---------------------------------------------------------------------------------------------- the stand-in model
class Oracle:
    """K and V of every token and layer as a function of the prefix up to it: (2, heads, dim) per token; an MLA
    model's (`parts` 1, one head): its latent vector."""

    def __init__(self, layers: int, kv_heads: int, head_size: int, dtype: str, parts: int = 2) -> None:
        self.layers, self.kv_heads, self.head_size, self.parts = layers, kv_heads, head_size, parts
        self.dtype = _DTYPES[dtype]
        self._cache: Dict[bytes, torch.Tensor] = {}
        self._states: Dict[bytes, List[torch.Tensor]] = {}

    def _prefix_keys(self, tokens: Sequence[int], isolation: str) -> List[bytes]:
        h = hashlib.blake2b(isolation.encode(), digest_size=16).digest()
        out = []
        for t in tokens:
            h = hashlib.blake2b(h + int(t).to_bytes(4, "little"), digest_size=16).digest()
            out.append(h)
        return out

    def kv(self, tokens: Sequence[int], isolation: str = "") -> torch.Tensor:
        """(tokens, layers, parts, heads, dim) of the prefix `tokens`."""
        rows = []
        for key in self._prefix_keys(tokens, isolation):
            row = self._cache.get(key)
            if row is None:
                seed = int.from_bytes(key[:8], "little")
                rng = np.random.default_rng(seed)
                row = torch.from_numpy(rng.standard_normal(
                    (self.layers, self.parts, self.kv_heads, self.head_size)).astype(np.float32)).to(self.dtype)
                self._cache[key] = row
            rows.append(row)
        if not rows:
            return torch.empty((0, self.layers, self.parts, self.kv_heads, self.head_size), dtype=self.dtype)
        return torch.stack(rows)

    def state(self, tokens: Sequence[int], layer: int, shapes: Any, dtypes: Any, rank: int = 0,
              isolation: str = "") -> List[torch.Tensor]:
        """A Mamba layer's state tensors after the prefix `tokens` (on tensor-parallel rank `rank`)."""
        keys = self._prefix_keys(tokens, isolation)
        key = (keys[-1] if keys else b"") + bytes([layer, rank])
        got = self._states.get(key)
        if got is None:
            rng = np.random.default_rng(int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little"))
            got = [torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(dt)
                   for shape, dt in zip(shapes, dtypes)]
            self._states[key] = got
        return got

    def next_token(self, tokens: Sequence[int], isolation: str = "") -> int:
        key = self._prefix_keys(tokens[-1:], isolation + repr(len(tokens)) + repr(list(tokens[-8:])))[-1]
        return 1 + int.from_bytes(key[:4], "little") % 31000


def embedding_input(row: Any) -> int:
    """The stand-in model's input for a prompt-embedding row (its KV depends on the row's bytes)."""
    data = row.contiguous().view(-1).view(torch.uint8).numpy().tobytes()
    return 1_000_000 + int.from_bytes(hashlib.sha1(data).digest()[:4], "little")


def image_input(identifier: str, i: int) -> int:
    """The stand-in model's input at position `i` of an image (its KV depends on the image)."""
    return 2_000_000 + int.from_bytes(hashlib.sha1(f"{identifier}/{i}".encode()).digest()[:4], "little")


class Pages:
    """One layer's paged KV cache in a backend's logical shape, read and written by (kernel block, slot)."""

    def __init__(self, kv: torch.Tensor, dims: Tuple[str, ...]) -> None:
        self.kv = kv
        if "kv" not in dims:  # an MLA latent cache (block, slot, dim)
            self.view = kv.permute(*[dims.index(d) for d in ("block", "slot", "dim")])[:, :, None, None, :]
        else:
            order = [dims.index(d) for d in ("block", "slot", "kv", "head", "dim")]
            self.view = kv.permute(*order)  # (block, slot, 2, head, dim), a view of the cache

    def write(self, blocks: torch.Tensor, slots: torch.Tensor, values: torch.Tensor) -> None:
        self.view[blocks, slots] = values

    def read(self, blocks: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        return self.view[blocks, slots]


@dataclass
class StandInAttnMetadata:
    """The attention metadata of one step (maybe_transfer_kv_layer passes it to save_kv_layer)."""

    num_actual_tokens: int
    slot_mapping: torch.Tensor


class StandInAttention(torch.nn.Module):
    """An attention layer as vLLM's Attention appears to the connector: in static_forward_context under its
    layer name, with ``kv_cache`` bound, and its forward wrapped in maybe_transfer_kv_layer."""

    def __init__(self, name: str, index: int, backend: Any, group: int = 0, window: int = 0) -> None:
        super().__init__()
        self.layer_name, self.index = name, index
        self.group, self.window = group, window  # its KV cache group; a sliding window's tokens (0: all)
        self.attn_backend = backend
        self.kv_cache: Any = None
        self.pages: Optional[Pages] = None

    def get_attn_backend(self) -> Any:
        return self.attn_backend


class StandInMamba(torch.nn.Module):
    """A Mamba2 layer as vLLM's MambaMixer2 appears to the model runner and the connector: in
    static_forward_context under its layer name with ``kv_cache`` bound to its state tensors (vLLM runs it
    without maybe_transfer_kv_layer: no per-layer connector call)."""

    def __init__(self, name: str, index: int, group: int, spec: Any) -> None:
        super().__init__()
        self.layer_name, self.index, self.group, self.spec = name, index, group, spec
        self.kv_cache: Any = None


@maybe_transfer_kv_layer
def attention_forward(step: "_Step", layer_name: str) -> None:
    """Writes the step's new K/V into the pages, then checks every context token's K/V against the oracle."""
    step.attend(layer_name)


@dataclass
class _WorkerReq:
    req_id: str
    tokens: List[int]
    block_ids: List[List[int]]  # per KV cache group
    num_computed: int
    isolation: str
    num_prompt: int = 0

    @property
    def num_computed_tokens(self) -> int:  # (vLLM's CachedRequestState, which preprocess_mamba reads)
        return self.num_computed


@dataclass
class _Step:
    worker: "Worker"
    scheduled: List[Tuple[_WorkerReq, int, int]]  # (request, first new position, tokens this step)
    mismatches: Dict[str, Set[int]] = field(default_factory=dict)  # req_id -> vLLM blocks whose KV was wrong
    hidden: Dict[str, torch.Tensor] = field(default_factory=dict)  # req_id -> the step's hidden states (model)

    def attend(self, layer_name: str) -> None:
        w = self.worker
        layer = w.layers[layer_name]
        pages = layer.pages
        if w.model is not None:
            return self._model_layer(layer)
        assert pages is not None
        heads = w.heads if w.oracle.parts == 2 else [0]
        for req, start, n in self.scheduled:
            end = start + n
            ids = req.block_ids[layer.group]
            kv = w.oracle.kv(req.tokens[:end], req.isolation)[:, layer.index][:, :, heads]  # (end, parts, heads, dim)
            # what the layer attends to: every token before, or a sliding window's last window - 1 of them
            lo = max(0, start - layer.window + 1) if layer.window else 0
            blocks, slots = w.kernel_slots(ids, lo, end)
            pages.write(blocks[start - lo:], slots[start - lo:], kv[start:end])
            if start > lo:
                got = pages.read(blocks[:start - lo], slots[:start - lo])
                bad = (got != kv[lo:start]).flatten(1).any(dim=1).nonzero().flatten().tolist()
                if bad:
                    vb = w.block_size
                    self.mismatches.setdefault(req.req_id, set()).update(ids[(lo + p) // vb] for p in bad)

    def mamba(self, layer_name: str) -> None:
        """A stand-in Mamba layer: reads each request's initial state where vLLM's kernels read it (mode all:
        the block of its last computed token; align: the running-state block vLLM's preprocess_mamba filled),
        checks it is the model's state after the computed prefix, and writes its states where vLLM's kernels
        write them (all: every whole block's and the last; align: the running-state block)."""
        w = self.worker
        layer = w.mamba_layers[layer_name]
        spec = layer.spec
        bs, mode = w.block_size, spec.mamba_cache_mode
        states = layer.kv_cache
        for req, start, n in self.scheduled:
            end = start + n
            ids = req.block_ids[layer.group]

            def model(t: int) -> List[torch.Tensor]:
                return w.oracle.state(req.tokens[:t], layer.index, spec.shapes, spec.dtypes, w.tp_rank,
                                      req.isolation)

            running = -(-end // bs) - 1
            read_at = (-(-start // bs) - 1) if mode == "all" else running
            if start > 0:
                blk = ids[read_at]
                assert blk != 0, f"{req.req_id}: the state block {read_at} is vLLM's null block: {ids}"
                want = model(start)
                if any(not torch.equal(t[blk], v) for t, v in zip(states, want)):
                    self.mismatches.setdefault(req.req_id, set()).add(blk)
            writes = [running] if mode == "align" else \
                sorted({p // bs - 1 for p in range(start + 1, end + 1) if p % bs == 0} | {running})
            for i in writes:
                t_end = min(end, (i + 1) * bs)
                assert ids[i] != 0, f"{req.req_id}: state block {i} is vLLM's null block: {ids}"
                for t, v in zip(states, model(t_end)):
                    t[ids[i]] = v

    def _model_layer(self, layer: "StandInAttention") -> None:
        """A whole layer of the worker's TinyModel for each request: its new tokens' cache entries go into the
        pages, and what it attends to is read back out of them (loaded or computed)."""
        w = self.worker
        model, pages = w.model, layer.pages
        assert model is not None and pages is not None
        for req, start, n in self.scheduled:
            end = start + n
            x = self.hidden[req.req_id]
            pos = torch.arange(start, end)
            h = model.rmsnorm(x, model.layers[layer.index]["attn_norm"])
            ids = req.block_ids[layer.group]
            lo = max(0, start - layer.window + 1) if layer.window else 0
            blocks, slots = w.kernel_slots(ids, lo, end)
            pages.write(blocks[start - lo:], slots[start - lo:], model.new_entries(layer.index, h, pos))
            ctx = pages.read(blocks, slots)
            self.hidden[req.req_id] = model.layer(layer.index, x, pos, h, ctx, torch.arange(lo, end))


class Worker:
    """One GPU worker of an engine: its paged KV caches, the worker-side connector, the stand-in model."""

    def __init__(self, cfg: Any, kcc: Any, oracle: Oracle, backend_name: str, tp_rank: int = 0, pp_rank: int = 0,
                 graph_replay: bool = False, mla_backend: str = "TRITON_MLA", model: Any = None) -> None:
        tp = cfg.parallel_config.tensor_parallel_size
        if tp * cfg.parallel_config.pipeline_parallel_size > 1:
            # a process of its own in vLLM: its own copy of the config and its static forward context
            cfg = copy.copy(cfg)
            cfg.compilation_config = copy.copy(cfg.compilation_config)
            cfg.compilation_config.static_forward_context = {}
        self.cfg, self.kcc, self.oracle = cfg, kcc, oracle
        self.tp_rank, self.pp_rank = tp_rank, pp_rank
        self.heads = list(rank_heads(tp_rank, tp, oracle.kv_heads))
        self.backend_name = backend_name
        self.backend = backend_class(backend_name)
        self.mla_backend_name = mla_backend
        groups = kcc.kv_cache_groups
        self.block_size = groups[0].kv_cache_spec.block_size
        backends = {self._backend_name_of(g.kv_cache_spec) for g in groups}
        self.kernel_block_size = select_common_block_size(self.block_size, [backend_class(b) for b in backends])
        self.connector = KVConnectorFactory.create_connector(config=cfg, role=KVConnectorRole.WORKER,
                                                             kv_cache_config=kcc)
        self.layers: Dict[str, StandInAttention] = {}
        self.mamba_layers: Dict[str, StandInMamba] = {}
        fwd = cfg.compilation_config.static_forward_context
        index = {name: i for i, name in enumerate(layer_names(oracle.layers))}
        group_of = {name: (gi, g.kv_cache_spec) for gi, g in enumerate(groups) for name in g.layer_names}
        kv_caches = self._allocate(kcc, group_of)
        self.order = sorted(kv_caches, key=index.__getitem__)  # the model's layer order (its forward runs them so)
        for name in self.order:
            kv = kv_caches[name]
            gi, spec = group_of[name]
            if isinstance(spec, MambaSpec):
                m = StandInMamba(name, index[name], gi, spec)
                m.kv_cache = kv
                self.mamba_layers[name] = fwd[name] = m
                continue
            backend = backend_class(self._backend_name_of(spec))
            window = int(getattr(spec, "sliding_window", 0) or 0) if type(spec).__name__ == "SlidingWindowSpec" else 0
            if type(spec).__name__ == "FullAttentionSpec" and getattr(spec, "sliding_window", None):
                window = int(spec.sliding_window)  # (hybrid manager off: vLLM keeps every block, attends a window)
            layer = StandInAttention(name, index[name], backend, group=gi, window=window)
            layer.kv_cache = kv
            layer.pages = Pages(kv, {**BACKEND_DIMS, **MLA_BACKEND_DIMS}[self._backend_name_of(spec)])
            self.layers[name] = layer
            fwd[name] = layer
        self.kv_caches = kv_caches
        # vLLM's model runner in mamba_cache_mode align: the running state's block of each request, the copies
        self.mamba_state_idx: Dict[str, int] = {}
        self.mamba_copy_bufs = None
        if any(isinstance(g.kv_cache_spec, MambaSpec) for g in groups):
            self.mamba_copy_bufs = mamba_utils.MambaCopyBuffers.create(
                64, kcc, MambaStateCopyFuncCalculator.mamba2_state_copy_func(),
                lambda n, dtype: CpuGpuBuffer(n, dtype=dtype, device=torch.device("cpu"), pin_memory=False))
        with self.active(), self._parallel_ranks():
            self.connector.register_kv_caches(kv_caches)
        self.reqs: Dict[str, _WorkerReq] = {}
        self.steps = 0
        self.checked_tokens = 0  # context tokens whose K/V the attention compared with the model's
        self.graph_replay = graph_replay  # run the layers as a captured FULL CUDA graph: no per-layer calls
        self.engine_isolation: Dict[str, str] = {}  # req_id -> its cache salt (the model's input differs)
        self.image_inputs: Dict[str, List[Tuple[str, int, int]]] = {}  # req_id -> (identifier, offset, length)
        # A TinyModel (tiny_model.py) computing real logits over the pages instead of the stand-in model's checks
        self.model = model
        self.logits: Dict[str, Dict[int, torch.Tensor]] = {}  # req_id -> position -> its logits (model)

    def suffix_logits(self, rid: str, start: int) -> torch.Tensor:
        """The logits the model computed for positions start, start + 1, ... of a request (model only)."""
        rows = self.logits[rid]
        return torch.stack([rows[p] for p in range(start, max(rows) + 1)])

    def _backend_name_of(self, spec: Any) -> str:
        return self.mla_backend_name if type(spec).__name__ == "MLAAttentionSpec" else self.backend_name

    def _allocate(self, kcc: Any, group_of: Dict[str, Tuple[int, Any]]) -> Dict[str, Any]:
        """As GPUModelRunner._reshape_kv_cache_tensors: one raw buffer per KVCacheTensor (shared by one layer of
        each group in a hybrid model), viewed by each layer that shares it as its backend's shape at the kernel
        block size, laid out in the backend's stride order, seen in its logical order; a Mamba layer's as its
        state tensors, one after the other in each block's page; with both, the attention caches laid out
        block-first (_update_hybrid_attention_mamba_layout). Filled with 0xff bytes (NaN in fp16 and fp32: an
        unwritten page is never equal)."""
        out: Dict[str, Any] = {}
        for t in kcc.kv_cache_tensors:
            raw = torch.full((t.size,), 255, dtype=torch.uint8)
            for name in t.shared_by:
                spec = group_of[name][1]
                num_blocks = t.size // spec.page_size_bytes
                if isinstance(spec, MambaSpec):
                    states, offset = [], 0
                    for shape, dtype in zip(spec.shapes, spec.dtypes):
                        esize = torch.empty((), dtype=dtype).element_size()
                        target = (num_blocks, *shape)
                        stride = torch.empty(target).stride()
                        states.append(torch.as_strided(raw.view(dtype), size=target,
                                                       stride=(spec.page_size_bytes // esize, *stride[1:]),
                                                       storage_offset=offset // esize))
                        offset += stride[0] * esize
                    out[name] = states
                    continue
                backend = backend_class(self._backend_name_of(spec))
                per = spec.block_size // self.kernel_block_size
                shape = backend.get_kv_cache_shape(num_blocks * per, self.kernel_block_size, spec.num_kv_heads,
                                                   spec.head_size, cache_dtype_str="auto")
                try:
                    order = tuple(backend.get_kv_cache_stride_order())
                    assert len(order) == len(shape)
                except (AttributeError, NotImplementedError, AssertionError):
                    order = tuple(range(len(shape)))
                n = 1
                for d in shape:
                    n *= d
                physical = raw.view(spec.dtype)[:n].view(tuple(shape[i] for i in order))
                out[name] = physical.permute(*[order.index(i) for i in range(len(order))])
        if any(isinstance(s, MambaSpec) for _, s in group_of.values()):
            for name, (_, spec) in group_of.items():
                if isinstance(spec, MambaSpec):
                    continue
                backend = backend_class(self._backend_name_of(spec))
                if backend.get_kv_cache_block_dim(self.kernel_block_size, spec.num_kv_heads, spec.head_size,
                                                  cache_dtype_str="auto") == 1:  # (2, blocks, ...) -> block-first
                    kv = out[name]
                    hidden = kv.shape[2:].numel()
                    kv.as_strided_(size=kv.shape, stride=(hidden, 2 * hidden, *kv.stride()[2:]))
        return out

    def kernel_slots(self, block_ids: Sequence[int], start: int, end: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """(kernel block, slot) of positions [start, end) of a request with vLLM blocks `block_ids`."""
        pos = torch.arange(start, end)
        vb, kb = self.block_size, self.kernel_block_size
        vblocks = torch.as_tensor(list(block_ids), dtype=torch.int64)[pos // vb]
        assert not (vblocks == 0).any(), f"positions [{start}, {end}) include vLLM's null block: {list(block_ids)}"
        return vblocks * (vb // kb) + (pos % vb) // kb, pos % kb

    @contextlib.contextmanager
    def _parallel_ranks(self) -> Any:
        """This worker's ranks as vLLM's parallel_state gives them to the process of that rank (its process
        groups need one process per rank; here every rank's worker runs in the test's process)."""
        from vllm.distributed import parallel_state as ps

        saved = ps.get_tensor_model_parallel_rank, ps.get_pp_group
        ps.get_tensor_model_parallel_rank = lambda: self.tp_rank
        ps.get_pp_group = lambda: types.SimpleNamespace(rank_in_group=self.pp_rank)
        try:
            yield
        finally:
            ps.get_tensor_model_parallel_rank, ps.get_pp_group = saved

    def active(self) -> Any:
        """This worker's connector as the process's KV transfer group (vLLM has one per worker process)."""
        worker = self

        class _Active:
            def __enter__(self) -> None:
                self.saved = kv_transfer_state._KV_CONNECTOR_AGENT
                kv_transfer_state._KV_CONNECTOR_AGENT = worker.connector

            def __exit__(self, *exc: Any) -> None:
                kv_transfer_state._KV_CONNECTOR_AGENT = self.saved

        return _Active()

    # ------------------------------------------------------------------ a step
    def _update_states(self, so: Any) -> None:
        """vLLM's GPUModelRunner._update_states: the batch's requests, their tokens and block tables."""
        for rid in so.finished_req_ids:
            self.reqs.pop(rid, None)
        for new in so.scheduled_new_reqs:
            iso = self.engine_isolation.get(new.req_id, "")
            if new.prompt_token_ids is not None:
                tokens = list(new.prompt_token_ids)
            else:  # prompt embeddings: the stand-in model's input at each position is its row
                tokens = [embedding_input(row) for row in new.prompt_embeds]
            for ident, off, n in self.image_inputs.get(new.req_id, ()):
                for i in range(off, off + n):
                    tokens[i] = image_input(ident, i - off)
            self.reqs[new.req_id] = _WorkerReq(new.req_id, tokens, [list(g) for g in new.block_ids],
                                               int(new.num_computed_tokens), iso, len(tokens))
        c = so.scheduled_cached_reqs
        for i, rid in enumerate(c.req_ids):
            r = self.reqs.get(rid)
            ids = c.new_block_ids[i]
            if rid in c.resumed_req_ids:
                prompt_len = self.reqs[rid].num_prompt if rid in self.reqs else 0
                groups = [list(g) for g in ids] if ids else [[] for _ in self.kcc.kv_cache_groups]
                r = self.reqs[rid] = _WorkerReq(rid, list(c.all_token_ids[rid]), groups,
                                                int(c.num_computed_tokens[i]), self.engine_isolation.get(rid, ""),
                                                prompt_len)
                continue
            assert r is not None, rid
            if ids is not None:
                for have, more in zip(r.block_ids, ids):
                    have.extend(more)
            r.num_computed = int(c.num_computed_tokens[i])
            # vLLM discarded outputs (a failed load's step): drop the tokens it did not keep, as its runner does
            del r.tokens[r.num_prompt + int(c.num_output_tokens[i]):]


    def execute_model(self, so: Any) -> Any:
        self.steps += 1
        self._update_states(so)
        with self.active():
            if so.total_num_scheduled_tokens == 0:
                return KVConnectorModelRunnerMixin.kv_connector_no_forward(so, self.cfg)
            if self.mamba_copy_bufs is not None and self.cfg.cache_config.mamba_cache_mode == "align":
                self._preprocess_mamba(so)
            scheduled = []
            for rid, n in so.num_scheduled_tokens.items():
                r = self.reqs[rid]
                while len(r.tokens) < r.num_computed + n:  # (async scheduling: outputs not seen yet)
                    r.tokens.append(self.oracle.next_token(r.tokens, r.isolation))
                scheduled.append((r, r.num_computed, n))
            step = _Step(self, scheduled)
            if self.model is not None:
                step.hidden = {r.req_id: self.model.embed[torch.tensor(r.tokens[s:s + n])] for r, s, n in scheduled}
            slots = [torch.cat([self._slot_mapping(r.block_ids[g], s, n) for r, s, n in scheduled])
                     for g in range(len(self.kcc.kv_cache_groups))]  # per KV cache group, as vLLM's runner
            attn_metadata = {name: StandInAttnMetadata(int(slots[a.group].numel()), slots[a.group])
                             for name, a in self.layers.items()}
            with set_forward_context(attn_metadata, self.cfg,
                                     slot_mapping={n: slots[a.group] for n, a in self.layers.items()}):
                with KVConnectorModelRunnerMixin._get_kv_connector_output(so) as kvo:
                    for name in self.order:
                        if name in self.mamba_layers:  # (vLLM's Mamba layers: no per-layer connector call)
                            step.mamba(name)
                        elif self.graph_replay:  # a captured FULL CUDA graph: no Python around the layers
                            step.attend(name)
                        else:
                            attention_forward(step, name)
        invalid = set(kvo.invalid_block_ids or ())
        for rid, blocks in step.mismatches.items():
            wrong = blocks - invalid
            if wrong:
                raise AssertionError(f"request {rid}: the pages of vLLM blocks {sorted(wrong)} held KV other than "
                                     f"the model's (a load wrote wrong bytes), backend {self.backend_name}")
        self.checked_tokens += sum(s for _, s, _ in scheduled)
        req_ids, sampled = [], []
        for r, start, n in scheduled:
            req_ids.append(r.req_id)
            end = start + n
            if self.model is not None:
                logits = self.model.logits(step.hidden[r.req_id])
                rows = self.logits.setdefault(r.req_id, {})
                for i in range(n):
                    rows[start + i] = logits[i]
            if end >= len(r.tokens):  # the last token of the request so far was computed: sample one
                t = (self.oracle.next_token(r.tokens, r.isolation) if self.model is None
                     else int(rows[end - 1].argmax()))
                r.tokens.append(t)
                sampled.append([t])
            else:
                sampled.append([])
            r.num_computed = end
        return ModelRunnerOutput(req_ids=req_ids, req_id_to_index={r: i for i, r in enumerate(req_ids)},
                                 sampled_token_ids=sampled, logprobs=None, prompt_logprobs_dict={},
                                 pooler_output=[], kv_connector_output=kvo)


    def _preprocess_mamba(self, so: Any) -> None:
        """vLLM's preprocess_mamba (align mode, before the forward): each request's previous running state into
        this step's running-state block. Its copy kernel (Triton's batch_memcpy, not here) is done on the host
        with the addresses vLLM's code computed."""
        import ctypes

        def host_memcpy(src: Any, dst: Any, sizes: Any) -> None:
            for a, b, n in zip(src.tolist(), dst.tolist(), sizes.tolist()):
                ctypes.memmove(int(b), int(a), int(n))

        batch = types.SimpleNamespace(req_ids=list(so.num_scheduled_tokens),
                                      num_accepted_tokens_cpu=np.ones(len(so.num_scheduled_tokens), dtype=np.int32))
        saved = mamba_utils.batch_memcpy
        mamba_utils.batch_memcpy = host_memcpy
        try:
            mamba_utils.preprocess_mamba(so, self.kcc, self.cfg.cache_config, self.mamba_state_idx, batch, self.reqs,
                                         self.cfg.compilation_config.static_forward_context,
                                         MambaStateCopyFuncCalculator.mamba2_state_copy_func(), self.mamba_copy_bufs)
        finally:
            mamba_utils.batch_memcpy = saved

    def _slot_mapping(self, block_ids: List[int], start: int, n: int) -> torch.Tensor:
        pos = torch.arange(start, start + n)
        ids = torch.as_tensor(block_ids, dtype=torch.int64)
        return ids[pos // self.block_size] * self.block_size + pos % self.block_size


# ---------------------------------------------------------------------------------------------- the engine
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


__all__ = ["Engine", "Oracle", "BACKEND_DIMS", "backend_class", "RequestStatus", "standins"]
