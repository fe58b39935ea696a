"""The vLLM configuration of a test engine (vllm_src/engine.py): the model as vLLM builds it from a config.json,
the ``--kv-transfer-config`` naming PTStoreConnector, the KV cache layouts vLLM's own code makes for it, the
attention backends the stand-in model writes through, and the publisher that keeps vLLM's KV events.

This module imports vLLM's snapshot (standins.import_vllm, with the modules the harness needs): the harness's
other modules import it before anything of vLLM's.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any, Dict, List, Optional, Sequence, Tuple

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
from vllm.model_executor.models.registry import _ModelInfo  # noqa: E402
from vllm.v1.attention.backends.registry import AttentionBackendEnum  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_kv_cache_config_from_groups, get_kv_cache_groups  # noqa: E402
from vllm.v1.kv_cache_interface import (FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, KVCacheTensor,  # noqa: E402
                                        MambaSpec, MLAAttentionSpec, SlidingWindowSpec)

__all__ = ["BACKEND_DIMS", "MLA_BACKEND_DIMS", "DTYPES", "backend_class", "model_config", "vllm_config",
           "layer_names", "kv_cache_config", "state_shapes", "layer_spec", "grouped_kv_cache_config",
           "stage_kv_cache_config", "RECORDER", "RecordingPublisher"]

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

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


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
    mc.dtype = DTYPES[dtype]
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
    spec = FullAttentionSpec(block_size=block_size, num_kv_heads=kv_heads, head_size=head_size, dtype=DTYPES[dtype])
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
                                 dtype=DTYPES[dtype])
    if kind == "window":
        return SlidingWindowSpec(block_size=block_size, num_kv_heads=kv_heads, head_size=head_size,
                                 dtype=DTYPES[dtype], sliding_window=window)
    if kind == "latent":  # MLA: one latent vector (kv_lora_rank + rope dims) per token, num_kv_heads 1
        return MLAAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=head_size, dtype=DTYPES[dtype])
    raise ValueError(kind)


def grouped_kv_cache_config(cfg: Any, kinds: Sequence[str], *, kv_heads: int, head_size: int, block_size: int,
                            dtype: str, window: int, num_blocks: int, mamba_mode: str = "all",
                            states: Any = None) -> Any:
    """The KVCacheConfig vLLM makes for a model whose layers have these kinds: vLLM's own get_kv_cache_groups
    (hybrid models: one group per kind and equal group sizes, when its hybrid manager runs; else every layer
    unified to full attention) and get_kv_cache_config_from_groups, with `num_blocks` as
    ``--num-gpu-blocks-override``."""
    page = FullAttentionSpec(block_size=block_size, num_kv_heads=kv_heads, head_size=head_size,
                             dtype=DTYPES[dtype]).page_size_bytes
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
