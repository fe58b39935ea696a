"""A miniature vLLM v1 engine that drives ptstore.vllm.PTStoreConnector the way vLLM does.

vLLM cannot be installed here, so this reproduces the parts of vLLM that talk
to a KV connector, with vLLM's names (vllm/v1/core/sched/scheduler.py,
vllm/v1/worker/kv_connector_model_runner_mixin.py, vllm/v1/request.py):

* ``MiniScheduler.schedule()``: running requests first (preempting the last
  one when blocks run out), then waiting ones: ``get_num_new_matched_tokens``
  (None: skip the request this step), block allocation for the local +
  external + new tokens, ``update_state_after_alloc`` with all of the
  request's blocks, async loads parked in WAITING_FOR_REMOTE_KVS, then
  ``build_connector_meta`` on a SchedulerOutput whose NewRequestData /
  CachedRequestData carry the pre-step ``num_computed_tokens``.
* ``MiniScheduler.update_from_output()``: invalid blocks first (sync loads:
  truncate ``num_computed_tokens`` at the first invalid block and drop the
  step's output; async loads: mark for retry), then outputs, then
  ``update_connector_output`` and finished sending/recving (delayed frees).
  Finished requests go through ``request_finished``; held blocks are freed
  when ``finished_sending`` names them.
* ``MiniWorker.execute_model()``: ``bind_connector_metadata``,
  ``start_load_kv``, the model's layers with ``wait_for_layer_load`` before
  and ``save_kv_layer`` after each attention, ``wait_for_save``,
  ``get_finished``, ``get_block_ids_with_load_errors``,
  ``clear_connector_metadata``; the no-forward variant when nothing is
  scheduled.

Models (``OracleModel`` here, ``tiny_mistral.TinyMistral``) write the KV of
the step's new tokens into the paged caches and attend over the cached
context, like vLLM's attention layers.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np
import torch

from ptstore.vllm import KVConnectorRole, PTStoreConnector

WAITING, RUNNING, PREEMPTED, WAITING_FOR_REMOTE_KVS, FINISHED = (
    "WAITING", "RUNNING", "PREEMPTED", "WAITING_FOR_REMOTE_KVS", "FINISHED")


# ------------------------------------------------------------------ vLLM's data types (the fields connectors use)
class Request:
    """vllm.v1.request.Request, the fields a connector reads."""

    def __init__(self, request_id: str, prompt_token_ids: Sequence[int], max_tokens: int = 1,
                 cache_salt: Optional[str] = None, lora_name: Optional[str] = None, multimodal: bool = False) -> None:
        self.request_id = request_id
        self.prompt_token_ids = [int(t) for t in prompt_token_ids]
        self._all_token_ids = list(self.prompt_token_ids)
        self._output_token_ids: List[int] = []
        self.max_tokens = max_tokens
        self.cache_salt = cache_salt
        self.lora_request = SimpleNamespace(lora_name=lora_name, lora_int_id=1) if lora_name else None
        self.mm_features = [SimpleNamespace(identifier="img0")] if multimodal else []
        self.prompt_embeds = None
        self.kv_transfer_params = None
        self.status = WAITING
        self.num_computed_tokens = 0
        self.num_cached_tokens = -1
        self.num_external_computed_tokens = 0
        self.num_preemptions = 0
        self.kv_transfer_params_out: Optional[dict] = None

    @property
    def all_token_ids(self) -> List[int]:
        return self._all_token_ids

    @property
    def num_tokens(self) -> int:
        return len(self._all_token_ids)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def output_token_ids(self) -> List[int]:
        return self._output_token_ids

    def append_output_token_ids(self, token: int) -> None:
        self._output_token_ids.append(token)
        self._all_token_ids.append(token)


class KVCacheBlocks:
    def __init__(self, block_ids: Sequence[int]) -> None:
        self._ids = list(block_ids)

    def get_block_ids(self, allow_none: bool = False) -> Tuple[List[int], ...]:
        return (list(self._ids),)


@dataclass
class NewRequestData:
    req_id: str
    prompt_token_ids: List[int]
    block_ids: Tuple[List[int], ...]
    num_computed_tokens: int
    mm_features: list = field(default_factory=list)


@dataclass
class CachedRequestData:
    req_ids: List[str] = field(default_factory=list)
    resumed_req_ids: Set[str] = field(default_factory=set)
    new_token_ids: List[List[int]] = field(default_factory=list)
    new_block_ids: List[Optional[Tuple[List[int], ...]]] = field(default_factory=list)
    num_computed_tokens: List[int] = field(default_factory=list)


@dataclass
class SchedulerOutput:
    scheduled_new_reqs: List[NewRequestData]
    scheduled_cached_reqs: CachedRequestData
    num_scheduled_tokens: Dict[str, int]
    total_num_scheduled_tokens: int
    finished_req_ids: Set[str]
    preempted_req_ids: Set[str] = field(default_factory=set)
    kv_connector_metadata: Any = None


@dataclass
class KVConnectorOutput:
    finished_sending: Optional[Set[str]] = None
    finished_recving: Optional[Set[str]] = None
    invalid_block_ids: Set[int] = field(default_factory=set)


@dataclass
class ModelRunnerOutput:
    sampled: Dict[str, int]
    logits: Dict[str, torch.Tensor]
    kv_connector_output: KVConnectorOutput


def make_vllm_config(*, socket: str, namespace: str, block_size: int = 16, role: str = "kv_both",
                     extra: Optional[dict] = None, model: str = "tiny-test") -> SimpleNamespace:
    cfg = {"socket": socket, "namespace": namespace}
    cfg.update(extra or {})
    return SimpleNamespace(
        kv_transfer_config=SimpleNamespace(kv_connector="PTStoreConnector", kv_connector_module_path="ptstore.vllm",
                                           kv_role=role, kv_connector_extra_config=cfg),
        cache_config=SimpleNamespace(block_size=block_size),
        model_config=SimpleNamespace(model=model),
        parallel_config=SimpleNamespace(tensor_parallel_size=1, pipeline_parallel_size=1))


# ------------------------------------------------------------------ the scheduler
class MiniScheduler:
    def __init__(self, connector: Optional[PTStoreConnector], num_blocks: int, block_size: int,
                 max_num_batched_tokens: int = 8192, block_order_seed: Optional[int] = None) -> None:
        self.connector = connector
        self.block_size = block_size
        ids = list(range(num_blocks))
        if block_order_seed is not None:
            np.random.default_rng(block_order_seed).shuffle(ids)
        self.free_blocks = deque(ids)
        self.max_num_batched_tokens = max_num_batched_tokens
        self.requests: Dict[str, Request] = {}
        self.req_blocks: Dict[str, List[int]] = {}
        self.waiting: deque = deque()
        self.running: List[Request] = []
        self.finished_req_ids: Set[str] = set()
        self.finished_recving: Set[str] = set()
        self.failed_recving: Set[str] = set()
        self.prev_scheduled: Set[str] = set()
        self.held: Set[str] = set()  # finished requests whose blocks the connector holds
        self.skipped_for_connector: List[str] = []  # ids get_num_new_matched_tokens answered None for
        self.recomputed_from: Dict[str, List[int]] = {}  # req id -> num_computed_tokens after a load error

    # -- blocks
    def _blocks_for(self, rid: str, tokens: int) -> bool:
        have = self.req_blocks.setdefault(rid, [])
        need = -(-tokens // self.block_size) - len(have)
        if need > len(self.free_blocks):
            return False
        for _ in range(max(need, 0)):
            have.append(self.free_blocks.popleft())
        return True

    def _free(self, rid: str) -> None:
        for b in self.req_blocks.pop(rid, []):
            self.free_blocks.append(b)

    def add_request(self, req: Request) -> None:
        self.requests[req.request_id] = req
        self.waiting.append(req)

    def preempt(self, rid: str) -> None:
        """vLLM's _preempt_request: free the blocks, back to the head of the waiting queue."""
        req = self.requests[rid]
        assert req.status == RUNNING
        self.running.remove(req)
        self._free(rid)
        req.status = PREEMPTED
        req.num_computed_tokens = 0
        req.num_preemptions += 1
        self.waiting.appendleft(req)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.held or self.finished_req_ids)

    # -- one step
    def schedule(self) -> SchedulerOutput:
        budget = self.max_num_batched_tokens
        num_scheduled: Dict[str, int] = {}
        new_reqs: List[Request] = []
        resumed: List[Request] = []
        running_sched: List[Request] = []
        preempted: Set[str] = set()
        new_blocks_of: Dict[str, List[int]] = {}

        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            n = min(req.num_tokens - req.num_computed_tokens, budget)
            if n <= 0:
                i += 1
                continue
            before = len(self.req_blocks.get(req.request_id, []))
            while not self._blocks_for(req.request_id, req.num_computed_tokens + n):
                victim = self.running[-1]
                self.preempt(victim.request_id)
                preempted.add(victim.request_id)
                if victim is req:
                    break
            if req.status != RUNNING:
                break
            new_blocks_of[req.request_id] = self.req_blocks[req.request_id][before:]
            running_sched.append(req)
            num_scheduled[req.request_id] = n
            budget -= n
            i += 1

        skipped: List[Request] = []
        while self.waiting and budget > 0 and not preempted:
            req = self.waiting[0]
            rid = req.request_id
            if req.status == WAITING_FOR_REMOTE_KVS:
                if not self._update_waiting_for_remote_kv(req):
                    skipped.append(self.waiting.popleft())
                    continue
                req.status = PREEMPTED if req.num_preemptions else WAITING
            ext, load_async = 0, False
            if req.num_computed_tokens == 0:
                local = 0  # no local prefix caching in this engine
                if self.connector is not None:
                    ext, load_async = self.connector.get_num_new_matched_tokens(req, local)
                    if ext is None:
                        self.skipped_for_connector.append(rid)
                        skipped.append(self.waiting.popleft())
                        continue
                    req.num_external_computed_tokens = ext
                computed = local + ext
            else:
                computed = req.num_computed_tokens
            n = 0 if load_async else min(req.num_tokens - computed, budget)
            assert load_async or n > 0
            if not self._blocks_for(rid, computed + n):
                break
            if self.connector is not None:
                self.connector.update_state_after_alloc(req, KVCacheBlocks(self.req_blocks[rid]), ext)
            self.waiting.popleft()
            if load_async:
                req.status = WAITING_FOR_REMOTE_KVS
                skipped.append(req)
                continue
            self.running.append(req)
            (new_reqs if req.status == WAITING else resumed).append(req)
            num_scheduled[rid] = n
            budget -= n
            req.status = RUNNING
            req.num_computed_tokens = computed
            if req.num_cached_tokens < 0:
                req.num_cached_tokens = computed
        for req in reversed(skipped):
            self.waiting.appendleft(req)

        cached = CachedRequestData()
        for req in running_sched + resumed:
            rid = req.request_id
            cached.req_ids.append(rid)
            if req in resumed:
                cached.resumed_req_ids.add(rid)
                cached.new_block_ids.append((list(self.req_blocks[rid]),))
            else:
                cached.new_block_ids.append((list(new_blocks_of[rid]),))
            cached.new_token_ids.append([])
            cached.num_computed_tokens.append(req.num_computed_tokens)
        so = SchedulerOutput(
            scheduled_new_reqs=[NewRequestData(r.request_id, list(r.prompt_token_ids),
                                               (list(self.req_blocks[r.request_id]),), r.num_computed_tokens)
                                for r in new_reqs],
            scheduled_cached_reqs=cached, num_scheduled_tokens=num_scheduled,
            total_num_scheduled_tokens=sum(num_scheduled.values()), finished_req_ids=self.finished_req_ids,
            preempted_req_ids=preempted)
        if self.connector is not None:
            so.kv_connector_metadata = self.connector.build_connector_meta(so)
        for rid, n in num_scheduled.items():
            self.requests[rid].num_computed_tokens += n
        self.finished_req_ids = set()
        self.prev_scheduled = set(num_scheduled)
        return so

    def _update_waiting_for_remote_kv(self, req: Request) -> bool:
        rid = req.request_id
        if rid not in self.finished_recving:
            return False
        if rid in self.failed_recving:
            if not req.num_computed_tokens:
                self._free(rid)
            self.failed_recving.discard(rid)
        else:
            computed = min(len(self.req_blocks[rid]) * self.block_size, req.num_tokens)
            if computed == req.num_tokens:
                computed -= 1
            req.num_computed_tokens = computed
        self.finished_recving.discard(rid)
        return True

    def _invalid(self, reqs: Sequence[Request], invalid: Set[int], is_async: bool) -> Set[str]:
        affected: Set[str] = set()
        for req in reqs:
            rid = req.request_id
            blocks = self.req_blocks.get(rid, [])
            if is_async:
                computed = req.num_computed_tokens if rid in self.failed_recving else len(blocks) * self.block_size
            else:
                computed = req.num_cached_tokens
            for idx, b in enumerate(blocks[:-(-computed // self.block_size)]):
                if b in invalid:
                    req.num_computed_tokens = idx * self.block_size
                    req.num_external_computed_tokens -= computed - req.num_computed_tokens
                    self.recomputed_from.setdefault(rid, []).append(req.num_computed_tokens)
                    affected.add(rid)
                    break
        return affected

    def update_from_output(self, so: SchedulerOutput, out: ModelRunnerOutput) -> Dict[str, int]:
        kv = out.kv_connector_output
        failed: Set[str] = set()
        if kv.invalid_block_ids:
            waiting_async = [r for r in self.waiting if r.status == WAITING_FOR_REMOTE_KVS]
            self.failed_recving |= self._invalid(waiting_async, kv.invalid_block_ids, True)
            failed = self._invalid(self.running, kv.invalid_block_ids, False)
        emitted: Dict[str, int] = {}
        for rid in so.num_scheduled_tokens:
            req = self.requests.get(rid)
            if req is None or rid in failed or req.status != RUNNING:
                continue
            if req.num_computed_tokens >= req.num_tokens and rid in out.sampled:
                req.append_output_token_ids(out.sampled[rid])
                emitted[rid] = out.sampled[rid]
                if len(req.output_token_ids) >= req.max_tokens:
                    self._finish(req)
        if self.connector is not None:
            self.connector.update_connector_output(kv)
        for rid in kv.finished_recving or ():
            req = self.requests[rid]
            if req.status == WAITING_FOR_REMOTE_KVS:
                self.finished_recving.add(rid)
            else:
                self._free(rid)
        for rid in kv.finished_sending or ():
            assert rid in self.held, f"finished_sending names {rid}, whose blocks were not held"
            self.held.discard(rid)
            self._free(rid)
            del self.requests[rid]
        return emitted

    def _finish(self, req: Request) -> None:
        self.running.remove(req)
        req.status = FINISHED
        hold, params = (False, None)
        if self.connector is not None:
            hold, params = self.connector.request_finished(req, self.req_blocks.get(req.request_id, []))
        req.kv_transfer_params_out = params
        self.finished_req_ids.add(req.request_id)
        if hold:
            self.held.add(req.request_id)
        else:
            self._free(req.request_id)
            del self.requests[req.request_id]


# ------------------------------------------------------------------ the worker
@dataclass
class SeqChunk:
    """One request's work in a step: compute tokens [start, start + n) of `tokens`."""

    req_id: str
    tokens: List[int]
    start: int
    n: int
    block_table: List[int]


class MiniWorker:
    def __init__(self, connector: Optional[PTStoreConnector], model: Any, num_blocks: int, block_size: int,
                 requests: Dict[str, Request]) -> None:
        self.connector = connector
        self.model = model
        self.block_size = block_size
        self.kv_caches: Dict[str, torch.Tensor] = model.make_kv_caches(num_blocks, block_size)
        self.requests = requests  # the worker's own copy of token ids in vLLM; shared here
        self.block_tables: Dict[str, List[int]] = {}
        if connector is not None:
            connector.register_kv_caches(self.kv_caches)

    # hooks the model calls around each attention layer (vLLM's attention layer does the same)
    def wait_for_layer_load(self, layer_name: str) -> None:
        if self.connector is not None:
            self.connector.wait_for_layer_load(layer_name)

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor) -> None:
        if self.connector is not None:
            self.connector.save_kv_layer(layer_name, kv_layer, attn_metadata=None)

    def execute_model(self, so: SchedulerOutput) -> ModelRunnerOutput:
        for new in so.scheduled_new_reqs:
            self.block_tables[new.req_id] = list(new.block_ids[0])
        c = so.scheduled_cached_reqs
        for i, rid in enumerate(c.req_ids):
            ids = c.new_block_ids[i][0] if c.new_block_ids[i] is not None else []
            if rid in c.resumed_req_ids:
                self.block_tables[rid] = list(ids)
            else:
                self.block_tables[rid].extend(ids)
        conn = self.connector
        if conn is not None:
            conn.bind_connector_metadata(so.kv_connector_metadata)
            conn.start_load_kv(SimpleNamespace(attn_metadata=None, no_compile_layers={}))
        logits: Dict[str, torch.Tensor] = {}
        if so.total_num_scheduled_tokens:
            batch = [SeqChunk(rid, self.requests[rid].all_token_ids, self.requests[rid].num_computed_tokens - n, n,
                              self.block_tables[rid]) for rid, n in so.num_scheduled_tokens.items()]
            logits = self.model.forward(batch, self.kv_caches, self.block_size, self)
        out = KVConnectorOutput()
        if conn is not None:
            conn.wait_for_save()
            out.finished_sending, out.finished_recving = conn.get_finished(so.finished_req_ids)
            out.invalid_block_ids = conn.get_block_ids_with_load_errors()
            conn.clear_connector_metadata()
        sampled = {rid: int(v[-1].argmax()) if v.dim() == 2 else int(v) for rid, v in logits.items()}
        return ModelRunnerOutput(sampled=sampled, logits=logits, kv_connector_output=out)


# ------------------------------------------------------------------ the engine
class MiniEngine:
    """One scheduler + one worker, each with its PTStoreConnector (or none: ``connector=False``)."""

    def __init__(self, model: Any, *, socket: str = "", namespace: str = "ns", num_blocks: int = 64,
                 block_size: int = 16, extra: Optional[dict] = None, role: str = "kv_both",
                 max_num_batched_tokens: int = 8192, block_order_seed: Optional[int] = None,
                 connector: bool = True) -> None:
        self.block_size = block_size
        self.vllm_config = make_vllm_config(socket=socket, namespace=namespace, block_size=block_size, role=role,
                                            extra=extra)
        self.sched_conn = PTStoreConnector(self.vllm_config, KVConnectorRole.SCHEDULER) if connector else None
        self.worker_conn = PTStoreConnector(self.vllm_config, KVConnectorRole.WORKER) if connector else None
        self.scheduler = MiniScheduler(self.sched_conn, num_blocks, block_size, max_num_batched_tokens,
                                       block_order_seed)
        self.worker = MiniWorker(self.worker_conn, model, num_blocks, block_size, self.scheduler.requests)
        self.steps = 0
        self.outputs: Dict[str, List[int]] = {}
        self.logits: Dict[str, List[Tuple[int, torch.Tensor]]] = {}  # req -> [(first position, logits rows)]
        self.scheduled_log: List[SchedulerOutput] = []

    def add(self, req: Request) -> Request:
        self.scheduler.add_request(req)
        return req

    def step(self) -> Dict[str, int]:
        so = self.scheduler.schedule()
        self.scheduled_log.append(so)
        out = self.worker.execute_model(so)
        for rid, n in so.num_scheduled_tokens.items():
            if rid in out.logits:
                start = self.scheduler.requests[rid].num_computed_tokens - n
                self.logits.setdefault(rid, []).append((start, out.logits[rid]))
        emitted = self.scheduler.update_from_output(so, out)
        for rid, tok in emitted.items():
            self.outputs.setdefault(rid, []).append(tok)
        self.steps += 1
        return emitted

    def run(self, max_steps: int = 2000) -> None:
        """Steps until every request finished and no blocks are held (idle steps wait a little, as the
        engine waits for saves or loads in flight)."""
        for _ in range(max_steps):
            if not self.scheduler.has_work():
                return
            if not self.step() and not self.scheduled_log[-1].total_num_scheduled_tokens:
                time.sleep(0.002)
        raise AssertionError(f"engine did not finish in {max_steps} steps: waiting="
                             f"{[r.request_id for r in self.scheduler.waiting]} running="
                             f"{[r.request_id for r in self.scheduler.running]} held={self.scheduler.held}")

    def suffix_logits(self, rid: str, start: int) -> torch.Tensor:
        """The logits the engine computed for positions start.. of request rid (its last computation of each)."""
        rows: Dict[int, torch.Tensor] = {}
        for first, block in self.logits[rid]:
            for i in range(block.shape[0]):
                rows[first + i] = block[i]
        return torch.stack([rows[p] for p in sorted(rows) if p >= start])

    def close(self) -> None:
        for c in (self.worker_conn, self.sched_conn):
            if c is not None:
                c.shutdown()


# ------------------------------------------------------------------ a model that checks every KV it reads
def prefix_hashes(tokens: Sequence[int]) -> np.ndarray:
    """h[p] names tokens[0..p] (a rolling hash): the KV of position p depends on the whole prefix, as in a
    transformer, so KV from another prompt or position never matches."""
    h = np.empty(len(tokens), dtype=np.uint64)
    acc = 0x9E3779B97F4A7C15
    for i, t in enumerate(tokens):
        acc = (acc * 0x100000001B3 + int(t) + 1) & 0xFFFFFFFFFFFFFFFF
        h[i] = acc
    return h


class OracleModel:
    """A stand-in model: the KV of position p in layer l is a function of (tokens[0..p], l), exactly
    representable in bf16; every step it checks all the context KV it reads against that function.

    ``context_errors`` lists (req id, layer, positions) of wrong KV read; the sampled token of a step that read
    wrong KV is -1, so an output that a load error made wrong can be told apart.
    """

    def __init__(self, layers: int = 2, kv_heads: int = 2, head_dim: int = 8, dtype: torch.dtype = torch.bfloat16,
                 kv_layout: str = "flash_attn", hnd: bool = False) -> None:
        self.layers, self.kv_heads, self.head_dim, self.dtype = layers, kv_heads, head_dim, dtype
        self.layer_names = [f"model.layers.{i}.self_attn.attn" for i in range(layers)]
        self.kv_layout, self.hnd = kv_layout, hnd
        self.context_errors: List[Tuple[str, int, List[int]]] = []

    def make_kv_caches(self, num_blocks: int, block_size: int) -> Dict[str, torch.Tensor]:
        caches = {}
        for name in self.layer_names:
            if self.kv_layout == "flash_attn":
                if self.hnd:  # physical [2, blocks, heads, slot, dim], logical [2, blocks, slot, heads, dim]
                    t = torch.zeros(2, num_blocks, self.kv_heads, block_size, self.head_dim, dtype=self.dtype)
                    t = t.permute(0, 1, 3, 2, 4)
                else:
                    t = torch.zeros(2, num_blocks, block_size, self.kv_heads, self.head_dim, dtype=self.dtype)
            else:
                t = torch.zeros(num_blocks, 2, block_size, self.kv_heads, self.head_dim, dtype=self.dtype)
            caches[name] = t
        return caches

    def expected_kv(self, tokens: Sequence[int], layer: int, positions: Sequence[int]) -> torch.Tensor:
        """(len(positions), 2, heads, dim) KV values for those positions of `tokens` in `layer`."""
        h = prefix_hashes(tokens)[list(positions)]
        n = self.kv_heads * self.head_dim * 2
        lane = np.arange(n, dtype=np.uint64) * np.uint64(0xBF58476D1CE4E5B9) + np.uint64((layer * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF)
        x = h[:, None] ^ lane[None, :]
        x ^= x >> np.uint64(29)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(32)
        v = ((x & np.uint64(0xFF)).astype(np.float32) - 128.0) / 64.0  # exact in bf16
        return torch.from_numpy(v.reshape(len(positions), 2, self.kv_heads, self.head_dim)).to(self.dtype)

    def _kv_view(self, kv: torch.Tensor) -> torch.Tensor:
        return kv.permute(1, 0, 2, 3, 4) if self.kv_layout == "flash_attn" else kv  # (blocks, 2, slot, h, d)

    def forward(self, batch: List[SeqChunk], kv_caches: Dict[str, torch.Tensor], block_size: int, hooks: Any
                ) -> Dict[str, torch.Tensor]:
        ok = {c.req_id: True for c in batch}
        for layer, name in enumerate(self.layer_names):
            hooks.wait_for_layer_load(name)
            pages = self._kv_view(kv_caches[name])
            for c in batch:
                pos = list(range(c.start, c.start + c.n))
                new = self.expected_kv(c.tokens, layer, pos)
                for j, p in enumerate(pos):
                    pages[c.block_table[p // block_size], :, p % block_size] = new[j]
                ctx = list(range(0, c.start + c.n))
                got = torch.stack([pages[c.block_table[p // block_size], :, p % block_size] for p in ctx])
                want = self.expected_kv(c.tokens, layer, ctx)
                bad = [p for p in ctx if not torch.equal(got[p], want[p])]
                if bad:
                    ok[c.req_id] = False
                    self.context_errors.append((c.req_id, layer, bad))
            hooks.save_kv_layer(name, kv_caches[name])
        out = {}
        for c in batch:
            last = c.start + c.n
            tok = int(prefix_hashes(c.tokens[:last])[-1] % 1000) + 1 if ok[c.req_id] else -1
            out[c.req_id] = torch.tensor(tok)
        return out


def gate_saves(engine: "MiniEngine", timeout_s: float = 30) -> threading.Event:
    """Makes the engine's worker-side writer wait for the returned event (at most `timeout_s`) before it
    writes each save: saves stay in flight until the test sets it."""
    ws = engine.worker_conn.worker_side
    gate = threading.Event()
    write = ws._write

    def gated(spec, job):
        gate.wait(timeout_s)
        write(spec, job)

    ws._write = gated
    return gate


def run_one(engine: "MiniEngine", req: Request):
    """Adds `req` to `engine`, runs the engine until it is done, returns the request's output."""
    engine.add(req)
    engine.run()
    return engine.outputs[req.request_id]


def tokens(n: int, seed: int, vocab: int = 30000) -> List[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(1, vocab, size=n)]


def digest(x: torch.Tensor) -> str:
    return hashlib.sha256(x.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()[:16]
