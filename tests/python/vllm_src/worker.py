"""One GPU worker of a test engine (vllm_src/engine.py): each layer's paged KV cache allocated as vLLM's GPU
model runner allocates it (``_reshape_kv_cache_tensors``), the worker-side connector, and the stand-in model
run through vLLM's worker code (``set_forward_context``, ``KVConnectorModelRunnerMixin``, the layers wrapped in
``maybe_transfer_kv_layer``)."""

from __future__ import annotations

import contextlib
import copy
import types
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from .config import BACKEND_DIMS, MLA_BACKEND_DIMS, backend_class, layer_names  # (first: vLLM's snapshot)

import torch  # noqa: E402

from vllm.distributed.kv_transfer import kv_transfer_state  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole  # noqa: E402
from vllm.forward_context import set_forward_context  # noqa: E402
from vllm.model_executor.layers.mamba.mamba_utils import MambaStateCopyFuncCalculator  # noqa: E402
from vllm.v1.kv_cache_interface import MambaSpec  # noqa: E402
from vllm.v1.outputs import ModelRunnerOutput  # noqa: E402
from vllm.v1.utils import CpuGpuBuffer  # noqa: E402
from vllm.v1.worker import mamba_utils  # noqa: E402
from vllm.v1.worker.kv_connector_model_runner_mixin import KVConnectorModelRunnerMixin  # noqa: E402
from vllm.v1.worker.utils import select_common_block_size  # noqa: E402

from ptstore.vllm.keys import rank_heads  # noqa: E402

from .layers import (Pages, StandInAttention, StandInAttnMetadata, StandInMamba, Step, WorkerReq,  # noqa: E402
                     attention_forward)
from .oracle import Oracle, embedding_input, image_input  # noqa: E402

__all__ = ["Worker"]


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
        self.reqs: Dict[str, WorkerReq] = {}
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
            self.reqs[new.req_id] = WorkerReq(new.req_id, tokens, [list(g) for g in new.block_ids],
                                               int(new.num_computed_tokens), iso, len(tokens))
        c = so.scheduled_cached_reqs
        for i, rid in enumerate(c.req_ids):
            r = self.reqs.get(rid)
            ids = c.new_block_ids[i]
            if rid in c.resumed_req_ids:
                prompt_len = self.reqs[rid].num_prompt if rid in self.reqs else 0
                groups = [list(g) for g in ids] if ids else [[] for _ in self.kcc.kv_cache_groups]
                r = self.reqs[rid] = WorkerReq(rid, list(c.all_token_ids[rid]), groups,
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
            step = Step(self, scheduled)
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
