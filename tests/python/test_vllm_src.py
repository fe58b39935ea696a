"""PTStoreConnector inside vLLM's own code (the snapshot at $PTSTORE_VLLM_SRC, default ../shared/vllm-src).

Every engine here is vLLM's Scheduler/AsyncScheduler with its KVCacheManager and the connector that vLLM's
KVConnectorFactory makes, and a worker running vLLM's KVConnectorModelRunnerMixin, set_forward_context and
maybe_transfer_kv_layer around a stand-in attention layer (vllm_src/engine.py); engines share one real
ptstored. Each test runs under standins.watch(): it fails if anything stood in for (vllm_src/standins.py)
is used while it runs. Without the snapshot the module skips, naming the variable; ctest sets
PTSTORE_VLLM_REQUIRED=1 where the snapshot is present, so that it cannot skip there.
"""

from __future__ import annotations


import pytest

from vllm_src import standins
from vllm_src.testing import require_vllm_src

require_vllm_src()

from vllm_src import config as C  # noqa: E402
from vllm_src import engine as E  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole  # noqa: E402
from vllm.v1.attention.backends.registry import AttentionBackendEnum  # noqa: E402
from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec  # noqa: E402

from vllm_src.testing import engines, finished_ok, no_stand_ins, ns, params, prompt  # noqa: E402,F401
from ptstore.vllm.paged import backend_dims  # noqa: E402


def save_then_load(client, ns, a, b, saved, asked, **kw):
    """Engine a serves `saved` (and its save reaches the store, checked against the model), then engine b
    serves `asked`: b's finished request."""
    a.saved(saved, max_tokens=1, **kw)
    assert_store_holds_the_models_kv(client, a, ns, saved)
    rb = b.add(asked, max_tokens=2, **kw)
    b.run()
    finished_ok(b, rb)
    return rb


def assert_store_holds_the_models_kv(client, engine, ns, tokens):
    """The store's token-major bytes of `tokens` (whole blocks) are the stand-in model's K/V, every one."""
    import numpy as np
    import torch

    n = len(tokens) // engine.block_size * engine.block_size
    layout = client.get_namespace(ns).layout
    out = torch.empty(layout.kv_shape(n), dtype=engine.oracle.dtype)
    assert client.load(ns, np.asarray(tokens[:n], dtype=np.uint32), out) == n
    assert torch.equal(out, engine.oracle.kv(tokens[:n])), "the store holds KV other than the model's"


# ------------------------------------------------------------------------------------------------ two engines
@pytest.mark.parametrize("mode", ["sync", "load_async", "async_scheduler"])
def test_two_engines_share_a_prefix_byte_for_byte(engines, ns, client, mode):
    extra = {"load_async": mode == "load_async"}
    a = engines(ns, extra=extra, async_scheduling=mode == "async_scheduler")
    b = engines(ns, extra=extra, async_scheduling=mode == "async_scheduler")
    doc = prompt(100)
    ra = a.saved(doc + prompt(5, 2), max_tokens=3)
    assert finished_ok(a, ra) and params(a, ra)["saved_tokens"] == 96
    assert_store_holds_the_models_kv(client, a, ns, doc)
    rb = b.add(doc + prompt(9, 3), max_tokens=4)
    b.run()
    seen = b.seen[rb.request_id]
    finished_ok(b, rb)
    assert params(b, rb)["loaded_tokens"] == 96
    assert b.worker.connector.worker_side.stats["loaded_tokens"] == 96
    assert b.worker.checked_tokens >= 96  # every loaded token was compared with the model's KV
    assert ("WAITING_FOR_REMOTE_KVS" in seen) == (mode == "load_async")


def test_loaded_tokens_counts_the_tokens_loaded_past_vllms_own_cache(engines, ns):
    a, b = engines(ns), engines(ns)
    doc = prompt(100)
    a.saved(doc + [7], max_tokens=1)
    first = b.add(doc[:20], max_tokens=1)  # vLLM's prefix cache on b now holds block 0 (16 tokens)
    b.run()
    assert params(b, first)["loaded_tokens"] == 16
    rb = b.add(doc + [8], max_tokens=2)
    b.run()
    finished_ok(b, rb)
    assert params(b, rb)["loaded_tokens"] == 96 - 16


def test_cache_salt_isolates(engines, ns):
    a, b = engines(ns), engines(ns)
    doc = prompt(70)
    a.saved(doc, max_tokens=1, cache_salt="tenant-1")
    other = b.add(doc, max_tokens=1, cache_salt="tenant-2")
    plain = b.add(doc, max_tokens=1)
    same = b.add(doc, max_tokens=1, cache_salt="tenant-1")
    b.run()
    assert params(b, other).get("loaded_tokens", 0) == 0
    assert params(b, plain).get("loaded_tokens", 0) == 0
    assert params(b, same)["loaded_tokens"] == 64


# ------------------------------------------------------------------------------------------------ failed loads
def test_vllms_default_policy_is_fail_and_the_connector_makes_it_recompute(engines, ns):
    cfg = C.vllm_config(socket="/nonexistent", layers=2, kv_heads=2, head_size=16, block_size=16)
    assert cfg.kv_transfer_config.kv_load_failure_policy == "fail"  # vLLM's own default
    e = engines(ns)
    assert e.cfg.kv_transfer_config.kv_load_failure_policy == "recompute"
    assert e.scheduler.recompute_kv_load_failures is True


def _drop_between_lookup_and_load(engine, client, ns):
    """Steps `engine` once, dropping namespace `ns` after the scheduler planned its loads (the prefix is
    removed between lookup and load, as an eviction, `rm -r` or a restart without it would)."""
    so = engine.scheduler.schedule()
    client.drop_namespace(ns)
    return engine.finish_step(so)


def _load_a_removed_prefix(a, b, client, ns):
    """Engine a saves a prompt; engine b (pin_hits false: its worker pins at load time) asks for it, and it is
    removed between b's lookup and load."""
    doc = prompt(100)
    a.saved(doc + [5], max_tokens=2)
    rb = b.add(doc + [6], max_tokens=3)
    _drop_between_lookup_and_load(b, client, ns)
    b.run()
    return rb


@pytest.mark.parametrize("load_async", [False, True])
def test_a_load_that_fails_is_recomputed_and_the_request_succeeds(engines, ns, client, load_async):
    a = engines(ns)
    b = engines(ns, extra={"load_async": load_async, "pin_hits": False})
    rb = _load_a_removed_prefix(a, b, client, ns)
    finished_ok(b, rb)  # not FINISHED_ERROR
    w = b.worker.connector.worker_side
    assert w.stats["load_failed_blocks"] == 6 and w.stats["loaded_tokens"] == 0
    assert params(b, rb).get("loaded_tokens", 0) == 0
    assert b.worker.checked_tokens >= 96  # the recomputed KV is the model's


@pytest.mark.parametrize("load_async,tp,pp,kinds", [(False, 1, 1, None), (True, 1, 1, None), (False, 2, 1, None),
                                                     (True, 2, 1, ["full", "window", "window", "full"]),
                                                     (False, 2, 2, None)],
                         ids=["sync", "async", "tp2", "tp2-hybrid-async", "tp2-pp2"])
def test_a_hit_the_scheduler_pinned_loads_though_it_is_removed_before_the_load(engines, ns, client, load_async, tp,
                                                                               pp, kinds):
    """pin_hits (default): the scheduler pins what it promises vLLM, in every worker's namespace (each
    tensor-parallel rank's of each pipeline stage), until the workers copied it, and each worker copies its own
    out of its arena mapping without asking ptstored: a removal (an eviction, `rm -r`) between lookup and load
    takes nothing away, and no worker makes a request of its own (a hybrid model's failed load could not even
    be reported to vLLM)."""
    kw = dict(tp=tp, pp=pp, kv_heads=4, layer_kinds=kinds, window=40)
    a = engines(ns, **kw)
    b = engines(ns, extra={"load_async": load_async}, **kw)
    doc = prompt(100)
    a.saved(doc + [5], max_tokens=2)
    rb = b.add(doc + [6], max_tokens=3)
    so = b.scheduler.schedule()
    for info in client.list_namespaces():
        if info.name == ns or info.name.startswith(ns + "."):
            client.drop_namespace(info.name)
    b.finish_step(so)
    b.run()
    finished_ok(b, rb)
    assert params(b, rb)["loaded_tokens"] == 96
    for w in b.workers:
        st = w.connector.worker_side.stats
        assert st["pinned_loads"] == 1 and st["loaded_tokens"] == 96 and st["load_failed_blocks"] == 0
        assert w.checked_tokens >= 96  # what it loaded is the model's KV (its heads)
    assert not [i for i in client.list_namespaces() if i.name.startswith(ns)]  # the removals went through
    b.close()
    assert client.stats().to_dict().get("pinned_bytes", 0) == 0  # no pin left behind


def test_with_load_failure_policy_fail_vllm_fails_the_request(engines, ns, client):
    a = engines(ns)
    b = engines(ns, extra={"load_failure_policy": "fail", "pin_hits": False})
    assert b.scheduler.recompute_kv_load_failures is False
    rb = _load_a_removed_prefix(a, b, client, ns)
    assert E.status_name(rb.status) == "FINISHED_ERROR"


# ------------------------------------------------------------------------------------------------ backends
@pytest.mark.parametrize("backend", sorted(C.BACKEND_DIMS))
def test_the_connector_reads_each_backends_layout_from_vllm(backend):
    cls = C.backend_class(backend)
    assert backend_dims(cls, 16, 64) == C.BACKEND_DIMS[backend]
    assert backend_dims(cls, 128, 128) == C.BACKEND_DIMS[backend]  # block size == head size


@pytest.mark.parametrize("backend", sorted(C.BACKEND_DIMS))
@pytest.mark.parametrize("kv_heads", [2, 16])  # 16: as many KV heads as tokens per block
def test_every_dense_backend_saves_and_loads_the_models_bytes(engines, ns, client, backend, kv_heads):
    a = engines(ns, backend=backend, kv_heads=kv_heads)
    b = engines(ns, backend=backend, kv_heads=kv_heads)
    doc = prompt(80)
    rb = save_then_load(client, ns, a, b, doc, doc + [4])
    assert params(b, rb)["loaded_tokens"] == 80


def test_a_prefix_saved_under_one_backend_loads_under_another(engines, ns):
    a = engines(ns, backend="FLASH_ATTN", kv_heads=16)
    b = engines(ns, backend="CPU_ATTN", kv_heads=16)
    c = engines(ns, backend="FLASHINFER", kv_heads=16)
    doc = prompt(64)
    a.saved(doc + [1], max_tokens=1)
    for e in (b, c):
        r = e.add(doc + [2], max_tokens=1)
        e.run()
        assert params(e, r)["loaded_tokens"] == 64


def test_vllm_blocks_of_128_tokens_over_flashinfers_64_token_kernel_blocks(engines, ns, client):
    a = engines(ns, backend="FLASHINFER", block_size=128, num_blocks=16)
    assert a.worker.kernel_block_size == 64  # vLLM's select_common_block_size
    b = engines(ns, backend="FLASHINFER", block_size=128, num_blocks=16)
    doc = prompt(300)
    rb = save_then_load(client, ns, a, b, doc, doc + [9])
    assert params(b, rb)["loaded_tokens"] == 256


def test_every_backend_of_the_snapshot_maps_or_is_refused_by_name():
    """Each AttentionBackendEnum member: a dense layout the connector maps exactly as the test's table says, or
    a refusal naming the backend (MLA, state and other caches)."""
    mapped, refused, unloadable = [], [], []
    for member in AttentionBackendEnum:
        try:
            cls = member.get_class()
        except Exception:  # noqa: BLE001 - needs compiled parts this machine lacks
            unloadable.append(member.name)
            continue
        try:
            dims = backend_dims(cls, 16, 64)
        except ValueError as e:
            assert member.name in str(e) or cls.get_name() in str(e)
            refused.append(member.name)
            continue
        if member.name in C.BACKEND_DIMS:
            assert dims == C.BACKEND_DIMS[member.name], member.name
        mapped.append(member.name)
    assert set(C.BACKEND_DIMS) <= set(mapped)
    assert any("MLA" in n for n in refused), refused


# ------------------------------------------------------------------------------------------------ vLLM's hooks
def test_every_public_method_is_a_vllm_hook():
    """The connector offers vLLM only methods vLLM's base classes define (no hook vLLM never calls)."""
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1, SupportsHMA

    from ptstore.vllm import PTStoreConnector

    known = set(dir(KVConnectorBase_V1)) | set(dir(SupportsHMA))
    own = {n for n in vars(PTStoreConnector) if not n.startswith("_")}
    assert own - known <= {"config", "scheduler_side", "worker_side"}, own - known


def test_reset_prefix_cache_with_the_connector_removes_the_models_prefixes(engines, ns):
    a, b = engines(ns), engines(ns)
    doc = prompt(70)
    a.add(doc, max_tokens=1)
    a.saved(doc, max_tokens=1, cache_salt="s")
    assert a.scheduler.reset_prefix_cache(reset_connector=True)
    assert a.connector.scheduler_side.stats["resets"] == 1
    r1 = b.add(doc, max_tokens=1)
    r2 = b.add(doc, max_tokens=1, cache_salt="s")
    b.run()
    assert params(b, r1).get("loaded_tokens", 0) == 0 and params(b, r2).get("loaded_tokens", 0) == 0


def test_nothing_stood_in_for_is_on_the_connectors_path():
    assert "pydantic" in standins.stood_in() or "msgspec" in standins.stood_in()
    assert standins.touched() == []


# ------------------------------------------------------------------------------------------------ stats
def test_connector_stats_reach_vllms_log_line_and_prometheus_metrics(engines, ns, client):
    """The engine core's SchedulerStats carry the connector's counters; vLLM's KVConnectorLogging logs them and
    its KVConnectorProm (build_prom_metrics) counts them in Prometheus metrics."""
    import prometheus_client
    from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorLogging, KVConnectorProm

    a, b = engines(ns), engines(ns)
    doc = prompt(100)
    a.saved(doc + [1], max_tokens=2)
    rb = b.add(doc + [2], max_tokens=2)
    b.run()
    rf = b.add(prompt(100, 9), max_tokens=1)  # a miss
    b.run()
    assert params(b, rb)["loaded_tokens"] == 96 and params(b, rf).get("loaded_tokens", 0) == 0

    def total(engine):
        log = KVConnectorLogging(engine.cfg.kv_transfer_config)
        for data in engine.connector_stats:
            log.observe(data)
        lines = []
        log.log(lambda fmt, *args: lines.append(fmt % args))
        return log, lines

    _, lines_a = total(a)
    _, lines_b = total(b)
    assert len(lines_a) == 1 and "saves=1" in lines_a[0] and "saved_tokens=96" in lines_a[0], lines_a
    per_token = client.get_namespace(ns).layout.bytes_per_token
    assert "loaded_tokens=96" in lines_b[0] and f"loaded_bytes={96 * per_token}" in lines_b[0], lines_b
    assert "lookups=2" in lines_b[0] and "hit_tokens=96" in lines_b[0] and "load_errors=0" in lines_b[0]

    prom = KVConnectorProm(b.cfg, labelnames=["model_name", "engine"], per_engine_labelvalues={0: ["tiny", "0"]})
    for data in b.connector_stats:
        prom.observe(data, 0)
    value = prometheus_client.REGISTRY.get_sample_value
    labels = {"model_name": "tiny", "engine": "0"}
    assert value("vllm:ptstore_loaded_tokens_total", labels) == 96
    assert value("vllm:ptstore_lookups_total", labels) == 2
    assert value("vllm:ptstore_load_seconds_count", labels) == 1


# ------------------------------------------------------------------------------------------------ generated tokens
@pytest.mark.parametrize("save_generated", [True, False])
def test_a_conversations_next_turn_hits_its_whole_history(engines, ns, client, save_generated):
    """Turn 1 on engine a generates an answer; turn 2 (the history and a new question) on engine b loads
    the prompt and, with save_generated (the default), the generated answer too."""
    extra = {"save_generated": save_generated}
    a, b = engines(ns, extra=extra), engines(ns, extra=extra)
    turn1 = prompt(40)
    r1 = a.saved(turn1, max_tokens=50)
    finished_ok(a, r1)
    history = list(r1.all_token_ids)  # 40 prompt + 50 generated tokens
    assert len(history) == 90
    computed = 89  # the last generated token has no KV yet
    saved = computed // 16 * 16 if save_generated else 32
    assert params(a, r1)["saved_tokens"] == saved
    if save_generated:
        assert_store_holds_the_models_kv(client, a, ns, history[:saved])
    r2 = b.add(history + prompt(12, 5), max_tokens=2)
    b.run()
    finished_ok(b, r2)
    assert params(b, r2)["loaded_tokens"] == saved


# ------------------------------------------------------------------------------------------------ KV events
def test_vllms_kv_event_stream_shows_the_blocks_ptstore_holds(engines, ns, client):
    """With vLLM's KV events on, its published batches carry, besides its own GPU blocks, BlockStored events of
    medium CPU for what the connector saved and loaded (vLLM's block hashes and token ids), BlockRemoved for
    blocks whose load failed, and BlockRemoved for everything on reset_cache."""
    from vllm.distributed.kv_events import BlockRemoved, BlockStored
    from vllm.v1.core.kv_cache_utils import maybe_convert_block_hash

    a = engines(ns, kv_events=True)
    b = engines(ns, kv_events=True, extra={"pin_hits": False})  # (so that a removal fails its load below)
    doc = prompt(100)
    ra = a.saved(doc + [1], max_tokens=40)

    def stored(engine, medium):
        return [e for e in engine.publisher.events() if isinstance(e, BlockStored) and e.medium == medium]

    def hashes(req, n):
        return [maybe_convert_block_hash(h) for h in req.block_hashes[:n]]

    cpu = stored(a, "CPU")
    saved = params(a, ra)["saved_tokens"] // 16
    assert saved == 8  # prompt (96) and generated tokens (to 128 computed of 141)
    assert [h for e in cpu for h in e.block_hashes] == hashes(ra, saved)
    assert [t for e in cpu for t in e.token_ids] == list(ra.all_token_ids[:saved * 16])
    assert cpu[0].parent_block_hash is None and all(e.block_size == 16 for e in cpu)
    assert stored(a, "GPU"), "vLLM's own events are published too"

    rb = b.add(doc + [2], max_tokens=1)
    b.run()
    assert [h for e in stored(b, "CPU") for h in e.block_hashes] == hashes(rb, 6)

    other = prompt(100, 6)
    a.saved(other + [3], max_tokens=1)
    rd = b.add(other + [5], max_tokens=1)  # its load fails: the prefix is removed between lookup and load
    _drop_between_lookup_and_load(b, client, ns)
    b.run()
    finished_ok(b, rd)
    removed = [h for e in b.publisher.events() if isinstance(e, BlockRemoved) and e.medium == "CPU"
               for h in e.block_hashes]
    assert set(hashes(rd, 6)) == set(removed)

    assert a.scheduler.reset_prefix_cache(reset_connector=True)
    a.step()  # vLLM publishes the connector's events with the next step's
    gone = [h for e in a.publisher.events() if isinstance(e, BlockRemoved) and e.medium == "CPU"
            for h in e.block_hashes]
    assert set(hashes(ra, saved)) <= set(gone)


# ------------------------------------------------------------------------------------------------ multimodal
def test_prompts_with_the_same_placeholders_and_other_images_never_share_kv(engines, ns):
    """vLLM schedules the image's encoder input (budget set as MultiModalBudget would); the store matches the
    image's identity, not its placeholder tokens."""
    a = engines(ns, encoder_budget=2048)
    b = engines(ns, encoder_budget=2048)
    text = prompt(40, 3)
    p = text[:20] + [31999] * 48 + text[20:]  # an image of 48 placeholder tokens at 20..67
    ra = a.saved(p, max_tokens=1, images=[("img-cat", 20, 48)])
    assert params(a, ra)["saved_tokens"] == 80
    other = b.add(p, max_tokens=1, images=[("img-dog", 20, 48)])
    b.run()
    assert params(b, other).get("loaded_tokens", 0) == 16  # block 0 holds text only; block 1 has the image
    same = b.add(p, max_tokens=1, images=[("img-cat", 20, 48)])
    b.run()
    finished_ok(b, same)
    assert params(b, same)["loaded_tokens"] == 64  # vLLM's own cache held block 0 (text) from `other`
    moved = b.add(text[:24] + [31999] * 48 + text[24:], max_tokens=1, images=[("img-cat", 24, 48)])
    b.run()
    finished_ok(b, moved)
    # The same image elsewhere is other KV: past block 0 (text, in vLLM's own cache) nothing loads.
    assert params(b, moved).get("loaded_tokens", 0) == 0


def test_prompt_embeddings_are_cached_by_their_values(engines, ns):
    import torch

    a, b = engines(ns), engines(ns)
    gen = torch.Generator().manual_seed(5)
    e1 = torch.randn(81, 64, generator=gen, dtype=torch.float16)
    e2 = torch.randn(81, 64, generator=gen, dtype=torch.float16)
    ra = a.saved(None, max_tokens=1, prompt_embeds=e1)
    assert params(a, ra)["saved_tokens"] == 80
    other = b.add(None, max_tokens=1, prompt_embeds=e2)
    half = b.add(None, max_tokens=1, prompt_embeds=torch.cat([e1[:48], e2[48:]]))
    same = b.add(None, max_tokens=1, prompt_embeds=e1.clone())
    b.run()
    assert params(b, other).get("loaded_tokens", 0) == 0
    assert params(b, half).get("loaded_tokens", 0) == 48
    finished_ok(b, same)
    assert params(b, same)["loaded_tokens"] == 80 - 48  # vLLM's own cache held e1's first 3 blocks (`half`)


# ------------------------------------------------------------------------------------------------ CUDA graphs
def test_with_layerwise_false_vllm_may_keep_full_cuda_graphs_and_kv_still_moves(engines, ns, client):
    """vLLM asks requires_piecewise_for_cudagraph (VllmConfig, through KVConnectorFactory) whether to fall back
    to PIECEWISE graphs; with layerwise false the connector says no, and works with no per-layer call at all
    (the worker runs the layers as a captured graph would: maybe_transfer_kv_layer never runs)."""
    a = engines(ns, extra={"layerwise": False}, graph_replay=True)
    b = engines(ns, extra={"layerwise": False}, graph_replay=True)
    cls = KVConnectorFactory.get_connector_class(a.cfg.kv_transfer_config)
    assert cls.requires_piecewise_for_cudagraph(a.cfg.kv_transfer_config.kv_connector_extra_config) is False
    assert cls.requires_piecewise_for_cudagraph({}) is True  # the default: per-layer calls
    doc = prompt(100)
    ra = a.saved(doc + [1], max_tokens=20)
    assert params(a, ra)["saved_tokens"] == 112
    assert_store_holds_the_models_kv(client, a, ns, list(ra.all_token_ids)[:112])
    rb = b.add(doc + [2], max_tokens=2)
    b.run()
    finished_ok(b, rb)
    assert params(b, rb)["loaded_tokens"] == 96
    assert "WAITING_FOR_REMOTE_KVS" in b.seen[rb.request_id]  # loads between steps


# ------------------------------------------------------------------------------------------------ TP degrees
@pytest.mark.parametrize("saved_tp,loaded_tp", [(2, 1), (2, 4), (1, 2), (4, 8)])
def test_a_prefix_saved_at_one_tensor_parallel_degree_loads_at_another(engines, ns, saved_tp, loaded_tp):
    """Each rank stores its KV heads (4 in all) in its rank namespace; a deployment of another degree finds
    them and each of its ranks reads its heads from the ranks that hold them (8 ranks: each head on two)."""
    a = engines(ns, kv_heads=4, tp=saved_tp)
    b = engines(ns, kv_heads=4, tp=loaded_tp)
    assert len(b.workers) == loaded_tp and [len(w.heads) for w in b.workers] == [max(1, 4 // loaded_tp)] * loaded_tp
    doc = prompt(100)
    ra = a.saved(doc + [1], max_tokens=1)
    assert params(a, ra)["saved_tokens"] == 96
    rb = b.add(doc + [2], max_tokens=2)
    b.run()
    finished_ok(b, rb)
    assert params(b, rb)["loaded_tokens"] == 96
    for w in b.workers:  # every rank loaded, and its attention checked its heads against the model's
        assert w.connector.worker_side.stats["loaded_tokens"] == 96 and w.checked_tokens >= 96


# ------------------------------------------------------------------------------------------------ preemption
def test_requests_preempted_for_blocks_reload_their_prefix_and_finish(engines, ns):
    """A small KV cache: vLLM preempts running requests to make room; resumed, they look up and load again into
    other blocks, and every step's KV is still the model's."""
    a = engines(ns)
    b = engines(ns, num_blocks=24)
    docs = [prompt(96, s) for s in (11, 12, 13)]
    for d in docs:
        a.add(d + [1], max_tokens=1)
    a.run()
    a.flush()
    reqs = [b.add(d + [2], max_tokens=120) for d in docs]
    b.run()
    assert sum(r.num_preemptions for r in reqs) > 0, "the cache was large enough: no preemption happened"
    for r in reqs:
        finished_ok(b, r)
        assert params(b, r)["loaded_tokens"] >= 96  # loaded at least once (again after a preemption)
    assert b.worker.connector.worker_side.stats["loaded_tokens"] > 3 * 96  # reloads after preemption


# ------------------------------------------------------------------------------------------------ hybrid and MLA
HYBRID = ["full", "window", "window", "full"]  # vLLM's hybrid manager: a full-attention and a sliding-window group


def assert_store_holds_every_groups_kv(client, engine, ns, tokens):
    """Every group's slice of every stored block of `tokens` is the stand-in model's K/V (a sliding window's
    too, also for blocks vLLM dropped from the window long before the request ended)."""
    import numpy as np
    import torch

    layout = client.get_namespace(ns).layout
    bt = layout.block_tokens
    n = len(tokens) // bt * bt
    blocks = torch.empty((n // bt, layout.bytes_per_block), dtype=torch.uint8)
    assert client.load(ns, np.asarray(tokens[:n], dtype=np.uint32), blocks) == n
    kv = engine.oracle.kv(tokens[:n])  # (n, layers, parts, heads, dim)
    index = {name: i for i, name in enumerate(C.layer_names(engine.oracle.layers))}
    for g, group in enumerate(engine.kcc.kv_cache_groups):
        layers = sorted(index[name] for name in group.layer_names)
        off, size = layout.group_offset(g), layout.group_bytes_per_block(g)
        got = blocks[:, off:off + size].contiguous().view(kv.dtype).view(n // bt, bt, len(layers), *kv.shape[2:])
        want = kv[:, layers].reshape(n // bt, bt, len(layers), *kv.shape[2:])
        bad = [i for i in range(n // bt) if not torch.equal(got[i], want[i])]
        assert not bad, f"group {g} ({layout.groups[g].kind}): stored blocks {bad} are not the model's KV"


def test_vllm_keeps_its_hybrid_kv_cache_manager_for_ptstore():
    """PTStoreConnector subclasses SupportsHMA: vLLM's config keeps the hybrid manager on for it (it turns it
    off for connectors that do not), and its scheduler calls request_finished_all_groups."""
    from vllm.distributed.kv_transfer.kv_connector.v1.base import supports_hma

    from ptstore.vllm import PTStoreConnector

    assert supports_hma(PTStoreConnector)
    cfg = C.vllm_config(socket="/nonexistent", layers=4, kv_heads=2, head_size=16, block_size=16)
    assert cfg.scheduler_config.disable_hybrid_kv_cache_manager is False


@pytest.mark.parametrize("mode", ["sync", "load_async"])
def test_a_sliding_window_hybrid_shares_prefixes_and_loads_only_the_window(engines, ns, client, mode):
    """Full-attention and sliding-window groups in one namespace. Prefill in steps of 64 tokens makes vLLM drop
    sliding-window blocks between steps: each step saves its new blocks, so the store holds every group's KV of
    every block; a load writes the full group's blocks and only the window's blocks of the sliding group."""
    kw = dict(layer_kinds=HYBRID, window=40, max_num_batched_tokens=64, extra={"load_async": mode == "load_async"})
    a, b = engines(ns, **kw), engines(ns, **kw)
    assert [type(g.kv_cache_spec).__name__ for g in a.kcc.kv_cache_groups] == ["FullAttentionSpec",
                                                                                 "SlidingWindowSpec"]
    doc = prompt(200)
    ra = a.saved(doc + [1], max_tokens=1)
    assert params(a, ra)["saved_tokens"] == 192
    layout = client.get_namespace(ns).layout
    assert [g.kind for g in layout.groups] == ["full", "window"] and layout.groups[1].window == 40
    assert a.scheduler.connector.scheduler_side.stats["saves_planned"] == 3  # steps ending at 64, 128, 192
    assert_store_holds_every_groups_kv(client, a, ns, doc)
    rb = b.add(doc + [2], max_tokens=3)
    b.run()
    finished_ok(b, rb)
    assert params(b, rb)["loaded_tokens"] == 192
    w = b.worker.connector.worker_side
    # vLLM keeps the sliding group's blocks of tokens [192 - 39, 192): blocks 9..11 of 12
    full, win = layout.group_bytes_per_block(0), layout.group_bytes_per_block(1)
    assert w.stats["loaded_bytes"] == 12 * full + 3 * win < 12 * layout.bytes_per_block
    assert b.worker.checked_tokens >= 192  # each layer compared what it attends to with the model's KV


def test_a_hybrid_request_finishing_after_the_window_moved_saves_its_history_from_the_store(engines, ns, client):
    """save_generated at a request's end: vLLM holds only the window's blocks of the sliding group by then;
    the worker takes the older blocks' slices from the store (saved step by step) and the next turn hits the
    whole history."""
    kw = dict(layer_kinds=HYBRID, window=24, max_num_batched_tokens=64)
    a, b = engines(ns, **kw), engines(ns, **kw)
    doc = prompt(100)
    ra = a.saved(doc, max_tokens=40)
    history = list(ra.all_token_ids)
    assert params(a, ra)["saved_tokens"] == (len(history) - 1) // 16 * 16 == 128
    assert_store_holds_every_groups_kv(client, a, ns, history)
    rb = b.add(history + [5], max_tokens=1)
    b.run()
    assert params(b, rb)["loaded_tokens"] == 128


def test_with_the_hybrid_manager_off_a_sliding_window_model_is_one_dense_group(engines, ns, client):
    """--disable-hybrid-kv-cache-manager: vLLM makes every layer full attention (a window recorded on the spec,
    every block kept): a dense namespace, and failed loads recompute as for any dense model."""
    a = engines(ns, layer_kinds=HYBRID, window=40, hma=False)
    b = engines(ns, layer_kinds=HYBRID, window=40, hma=False)
    assert len(a.kcc.kv_cache_groups) == 1
    doc = prompt(100)
    rb = save_then_load(client, ns, a, b, doc, doc + [3])
    assert not client.get_namespace(ns).layout.is_grouped
    assert params(b, rb)["loaded_tokens"] == 96


def test_vllms_scheduler_cannot_recompute_failed_loads_of_several_groups(engines, ns):
    """Why a hybrid model's failed load is logged, not reported: vLLM's _update_requests_with_invalid_blocks
    unpacks one KV cache group and raises for more (the snapshot's TODO), which would stop the engine."""
    a = engines(ns, layer_kinds=HYBRID, window=40)
    r = a.add(prompt(40), max_tokens=5)
    a.step()
    with pytest.raises(ValueError):
        a.scheduler._update_requests_with_invalid_blocks([r], {1}, {})


@pytest.mark.parametrize("saved_tp,loaded_tp", [(2, 2), (2, 1), (1, 4)])
def test_an_mla_model_keeps_one_copy_for_every_tensor_parallel_rank(engines, ns, client, saved_tp, loaded_tp):
    """MLA latent caches (vLLM's MLAAttentionSpec, TRITON_MLA's 3-D [blocks, slot, latent] cache) are the same on
    every rank: one namespace, written by rank 0, read by every rank of any degree."""
    kw = dict(layer_kinds=["latent"] * 3, head_size=72)
    a = engines(ns, tp=saved_tp, **kw)
    b = engines(ns, tp=loaded_tp, **kw)
    doc = prompt(100)
    ra = a.saved(doc + [1], max_tokens=1)
    assert params(a, ra)["saved_tokens"] == 96
    assert sorted(i.name for i in client.list_namespaces() if i.name.startswith(ns)) == [ns]
    layout = client.get_namespace(ns).layout
    assert [(g.kind, g.layers, g.head_dim) for g in layout.groups] == [("latent", 3, 72)]
    assert_store_holds_every_groups_kv(client, a, ns, doc)
    assert [w.connector.worker_side.stats["saves"] for w in a.workers] == [1] + [0] * (saved_tp - 1)
    rb = b.add(doc + [2], max_tokens=2)
    b.run()
    finished_ok(b, rb)
    assert params(b, rb)["loaded_tokens"] == 96
    for w in b.workers:
        assert w.connector.worker_side.stats["loaded_tokens"] == 96 and w.checked_tokens >= 96


def test_kv_cache_specs_it_cannot_store_are_refused_at_start_by_name(daemon):
    import torch
    from vllm.v1.kv_cache_interface import ChunkedLocalAttentionSpec, MambaSpec

    cfg = C.vllm_config(socket=daemon.socket, layers=2, kv_heads=2, head_size=16, block_size=16)
    for spec, name in [(MambaSpec(block_size=16, shapes=((4, 8),), dtypes=(torch.float16,)), "MambaSpec"),
                       (ChunkedLocalAttentionSpec(block_size=16, num_kv_heads=2, head_size=16, dtype=torch.float16,
                                                  attention_chunk_size=64), "ChunkedLocalAttentionSpec")]:
        kcc = KVCacheConfig(num_blocks=8, kv_cache_tensors=[],
                            kv_cache_groups=[KVCacheGroupSpec(["model.layers.0.self_attn.attn"], spec)])
        with pytest.raises(ValueError, match=name):
            KVConnectorFactory.create_connector(config=cfg, role=KVConnectorRole.SCHEDULER, kv_cache_config=kcc)


# ------------------------------------------------------------------------------------------------ logits proof
def _reused_logits(engines, ns, model, doc, prefix, chunk):
    """Engine A (steps of `chunk` tokens) serves doc[:prefix] and saves it; engine B serves all of doc, loads the
    prefix's whole blocks and computes the rest: (B's logits from the loaded position on, loaded tokens)."""
    a = engines(ns, model=model, max_num_batched_tokens=chunk)
    a.saved(doc[:prefix], max_tokens=1)
    b = engines(ns, model=model)
    rb = b.add(doc, max_tokens=1)
    b.run()
    loaded = params(b, rb)["loaded_tokens"]
    return b.worker.suffix_logits(rb.request_id, loaded), loaded


@pytest.mark.parametrize("kinds", [["full"] * 3, ["window", "full", "window", "window"], ["latent"] * 3],
                         ids=["dense", "sliding-window", "mla"])
def test_logits_after_loading_the_prefix_equal_recomputing(engines, ns, kinds):
    """The reuse proof inside vLLM's code: a small transformer (tiny_model.py) whose full, sliding-window (16
    tokens, less than the prefix) or MLA-style layers attend over vLLM's pages. B's logits over the loaded
    prefix equal recomputing everything densely; a prefix saved in steps of 32 tokens (vLLM drops sliding
    blocks between them) still loads every block the window needs."""
    from vllm_src.tiny_model import TinyModel

    model = TinyModel(kinds, window=16, seed=1)
    doc = [int(t) % model.vocab for t in prompt(131, seed=7)]
    got, loaded = _reused_logits(engines, ns, model, doc, prefix=90, chunk=32)
    assert loaded == 80
    torch = pytest.importorskip("torch")
    full = model.reference_logits(doc)
    assert got.shape == (len(doc) - loaded, model.vocab)
    torch.testing.assert_close(got, full[loaded:], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kinds", [["full"] * 3, ["window", "full", "window", "window"], ["latent"] * 3],
                         ids=["dense", "sliding-window", "mla"])
def test_the_logits_proof_has_teeth(engines, ns, kinds):
    """KV another model saved (same tokens, so the store hits) gives other logits."""
    from vllm_src.tiny_model import TinyModel

    model, other = TinyModel(kinds, window=16, seed=1), TinyModel(kinds, window=16, seed=99)
    doc = [int(t) % model.vocab for t in prompt(100, seed=8)]
    engines(ns, model=other).saved(doc[:64], max_tokens=1)
    b = engines(ns, model=model)
    rb = b.add(doc, max_tokens=1)
    b.run()
    assert params(b, rb)["loaded_tokens"] == 64
    diff = (b.worker.suffix_logits(rb.request_id, 64) - model.reference_logits(doc)[64:]).abs().max()
    assert diff > 0.1


@pytest.mark.parametrize("backend", ["TRITON_MLA", "FLASHMLA"])
def test_mla_backends_keep_the_latent_cache_the_connector_maps(backend):
    """vLLM's MLA backends (those that load here) keep [blocks, block_size, latent]: mapped as a latent cache,
    and refused as a dense K/V cache (a layer whose spec is not MLA)."""
    cls = C.backend_class(backend)
    assert backend_dims(cls, 16, 576, latent=True) == ("block", "slot", "dim")
    assert backend_dims(cls, 64, 16, latent=True) == ("block", "slot", "dim")  # block size > head size
    with pytest.raises(ValueError, match="not a dense K/V cache"):
        backend_dims(cls, 16, 576)
