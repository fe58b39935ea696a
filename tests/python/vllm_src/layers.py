"""The stand-in model's layers (vllm_src/engine.py): one layer's paged KV cache in a backend's logical shape
(:class:`Pages`), an attention layer and a Mamba2 layer as vLLM's appear to the model runner and the
connector, and one step of the worker (:class:`Step`): its attention writes the step's new tokens into the
pages through the slot mapping and checks every context token's K and V in the pages against the oracle (or
runs the worker's TinyModel over them); its Mamba layer checks the initial state it reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set, Tuple

from . import config  # noqa: F401  (first: it imports vLLM's snapshot)

import torch  # noqa: E402

from vllm.model_executor.layers.attention.kv_transfer_utils import maybe_transfer_kv_layer  # noqa: E402

__all__ = ["Pages", "StandInAttnMetadata", "StandInAttention", "StandInMamba", "attention_forward", "WorkerReq",
           "Step"]


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
def attention_forward(step: "Step", layer_name: str) -> None:
    """Writes the step's new K/V into the pages, then checks every context token's K/V against the oracle."""
    step.attend(layer_name)


@dataclass
class WorkerReq:
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
class Step:
    worker: "Worker"
    scheduled: List[Tuple[WorkerReq, int, int]]  # (request, first new position, tokens this step)
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
