"""ptstore.vllm.PTStoreConnector driven as vLLM drives it (vllm_harness.py) against a real ptstored:
full and partial hits, misses, async saves and get_finished, preemption, cache_salt isolation, shared
prefixes, the FlashAttention / FlashInfer / HND layouts and the byte mapping to the store."""

from __future__ import annotations

import inspect

import pytest

torch = pytest.importorskip("torch")

import ptstore.vllm as pv
from ptstore.vllm import ConnectorConfig, KVConnectorRole, PTStoreConnector, namespace_for
from vllm_harness import KVCacheBlocks, MiniEngine, OracleModel, Request, gate_saves, make_vllm_config, run_one, tokens

def loads_of(engine, rid):
    return [s for so in engine.scheduled_log for s in so.kv_connector_metadata.loads if s.req_id == rid]


# ------------------------------------------------------------------ the interface


def test_importable_without_vllm_with_vllms_interface():
    assert pv.HAVE_VLLM is False  # this machine has no vLLM: the stand-ins are in use
    assert issubclass(PTStoreConnector, pv.KVConnectorBase_V1)
    assert issubclass(pv.PTStoreConnectorMetadata, pv.KVConnectorMetadata)
    assert (KVConnectorRole.SCHEDULER.value, KVConnectorRole.WORKER.value) == (0, 1)
    # The methods vLLM calls, with vLLM's parameter names.
    expected = {
        "get_num_new_matched_tokens": ["request", "num_computed_tokens"],
        "update_state_after_alloc": ["request", "blocks", "num_external_tokens"],
        "build_connector_meta": ["scheduler_output"],
        "request_finished": ["request", "block_ids"],
        "update_connector_output": ["connector_output"],
        "register_kv_caches": ["kv_caches"],
        "start_load_kv": ["forward_context", "kwargs"],
        "wait_for_layer_load": ["layer_name"],
        "save_kv_layer": ["layer_name", "kv_layer", "attn_metadata", "kwargs"],
        "wait_for_save": [],
        "get_finished": ["finished_req_ids"],
        "get_block_ids_with_load_errors": [],
        "bind_connector_metadata": ["connector_metadata"],
        "clear_connector_metadata": [],
        "shutdown": [],
    }
    for name, params in expected.items():
        sig = inspect.signature(getattr(PTStoreConnector, name))
        assert list(sig.parameters)[1:] == params, name
    assert list(inspect.signature(PTStoreConnector.__init__).parameters)[1:] == \
        ["vllm_config", "role", "kv_cache_config"]
    assert PTStoreConnector.requires_piecewise_for_cudagraph({}) is True
    assert PTStoreConnector.get_required_kvcache_layout(None) is None


def test_config():
    c = ConnectorConfig.from_dict({}, model="/models/mistralai/Mistral-7B-Instruct-v0.2")
    assert c.namespace == "mistralai.Mistral-7B-Instruct-v0.2" and c.load and c.save
    assert ConnectorConfig.from_dict({}, role="kv_producer").load is False
    assert ConnectorConfig.from_dict({}, role="kv_consumer").save is False
    c = ConnectorConfig.from_dict({"load_async": "true", "save_wait_ms": 0, "layout": {"layers": 2, "kv_heads": 2,
                                                                                       "head_dim": 8}})
    assert c.load_async and c.save_wait_ms == 0 and c.layout.layers == 2
    with pytest.raises(ValueError, match="unknown kv_connector_extra_config keys.*'sokcet'"):
        ConnectorConfig.from_dict({"sokcet": "/x"})
    with pytest.raises(ValueError, match="namespace"):
        ConnectorConfig.from_dict({"namespace": "a/b"})
    with pytest.raises(ValueError, match="kv_cache_layout"):
        ConnectorConfig.from_dict({"kv_cache_layout": "paged"})


def test_namespaces_and_block_keys():
    from ptstore.vllm.keys import chain_keys, rank_namespace

    assert namespace_for("m") == ("m", "")
    salted, lora = namespace_for("m", cache_salt="x"), namespace_for("m", lora="x")
    assert salted != lora and salted[0].startswith("m.x") and len(salted[0]) == len("m.x") + 24
    assert namespace_for("m", cache_salt="x") == salted  # stable across processes
    assert rank_namespace("m") == "m" and rank_namespace("m", 1, 2, 0, 1) == "m.tp1of2.pp0of1"
    a = chain_keys("m", [1] * 40, 16)
    b = chain_keys("m", [1] * 16 + [2] * 24, 16)
    assert len(a) == 2 and a[0] == b[0] and a[1] != b[1]  # key i names blocks 0..i
    assert chain_keys("n", [1] * 40, 16)[0] != a[0]  # and the namespace


def test_layout_mismatch_is_an_error(daemon, ns):
    cfg = make_vllm_config(socket=daemon.socket, namespace=ns,
                           extra={"layout": {"layers": 2, "kv_heads": 4, "head_dim": 8, "dtype": "bf16"}})
    w = PTStoreConnector(cfg, KVConnectorRole.WORKER)
    with pytest.raises(ValueError, match="does not match the KV caches"):
        w.register_kv_caches(OracleModel().make_kv_caches(8, 16))
    w.shutdown()
    with pytest.raises(ValueError, match="dense 5-D layout"):
        PTStoreConnector(cfg, KVConnectorRole.WORKER).register_kv_caches({"model.layers.0.attn": torch.zeros(8, 16, 64)})


# ------------------------------------------------------------------ hits and misses


def test_miss_then_full_hit(client, ns, engines):
    prompt = tokens(100, seed=1)
    a = engines()
    out_a = run_one(a, Request("a", prompt))
    assert a.sched_conn.scheduler_side.stats["hit_tokens"] == 0
    # The engine ran until get_finished reported the save: it is in the store now.
    assert client.lookup(ns, prompt).matched_tokens == 96

    b = engines()
    out_b = run_one(b, Request("b", prompt))
    assert b.scheduled_log[0].num_scheduled_tokens == {"b": 4}  # 96 loaded, 4 computed
    (spec,) = loads_of(b, "b")
    assert (spec.start, spec.end, len(spec.block_ids[0])) == (0, 96, 6)
    assert b.worker_conn.worker_side.stats["loaded_tokens"] == 96
    assert b.worker.model.context_errors == []
    assert out_b == out_a

    # A prompt of exactly 6 blocks: the last token is always computed, so 5 blocks load.
    c = engines()
    run_one(c, Request("c", prompt[:96]))
    assert c.scheduled_log[0].num_scheduled_tokens == {"c": 16}
    assert c.worker.model.context_errors == []


def test_partial_hits_are_whole_blocks(client, ns, engines):
    p = tokens(70, seed=2)
    run_one(engines(), Request("p", p))
    assert client.lookup(ns, p).matched_tokens == 64  # the partial last block is not stored

    e = engines()
    q = e.add(Request("q", p + tokens(30, seed=3)))  # shares 70 tokens: 4 whole blocks
    r = e.add(Request("r", p[:40] + tokens(50, seed=4)))  # shares 40 tokens: 2 whole blocks
    e.run()
    assert (q.num_external_computed_tokens, r.num_external_computed_tokens) == (64, 32)
    assert e.worker.model.context_errors == []
    # Both were saved beyond what the store had.
    assert client.lookup(ns, q.prompt_token_ids).matched_tokens == 96
    assert client.lookup(ns, r.prompt_token_ids).matched_tokens == 80


def test_local_hit_loads_only_the_rest(client, ns, engines):
    """num_computed_tokens > 0 (vLLM's own prefix cache hit): only the blocks after it are loaded."""
    prompt = tokens(90, seed=5)
    run_one(engines(), Request("a", prompt))  # stores 80 tokens
    e = engines()
    sched, worker = e.sched_conn, e.worker_conn
    req = Request("b", prompt)
    assert sched.get_num_new_matched_tokens(req, 32) == (48, False)
    blocks = [7, 3, 9, 11, 2, 5]
    sched.update_state_after_alloc(req, KVCacheBlocks(blocks), 48)
    meta = sched.build_connector_meta(type("SO", (), {"scheduled_new_reqs": [], "scheduled_cached_reqs": None,
                                                      "num_scheduled_tokens": {}})())
    (spec,) = meta.loads
    assert (spec.start, spec.end, spec.block_ids) == (32, 80, [[9, 11, 2]])  # the request's blocks 2..4
    worker.bind_connector_metadata(meta)
    worker.start_load_kv(None)
    for name in e.worker.model.layer_names:
        worker.wait_for_layer_load(name)
    worker.wait_for_save()
    assert worker.get_block_ids_with_load_errors() == set()
    worker.clear_connector_metadata()
    model = e.worker.model
    for layer, name in enumerate(model.layer_names):
        pages = e.worker.kv_caches[name].permute(1, 0, 2, 3, 4)
        want = model.expected_kv(prompt, layer, range(32, 80))
        got = torch.cat([pages[b].permute(1, 0, 2, 3) for b in [9, 11, 2]])
        assert torch.equal(got, want)
        assert not pages[7].any() and not pages[3].any() and not pages[5].any()  # local and later blocks untouched


# ------------------------------------------------------------------ saves


def test_async_saves_hold_blocks_until_written(client, ns, engines):
    e = engines()
    gate = gate_saves(e, timeout_s=10)
    prompt = tokens(50, seed=6)
    e.add(Request("a", prompt))
    e.step()  # computes the prompt, gathers its KV, hands the save to the writer
    assert e.outputs["a"] and e.scheduler.held == {"a"}  # finished, its blocks held for the save
    for _ in range(3):
        e.step()  # get_finished does not report it while the save is in flight
    assert e.scheduler.held == {"a"} and client.lookup(ns, prompt).matched_tokens == 0
    gate.set()
    e.run()
    assert e.scheduler.held == set() and len(e.scheduler.free_blocks) == 64
    assert client.lookup(ns, prompt).matched_tokens == 48  # visible once get_finished reported it


def test_saves_without_holding_blocks(client, ns, engines):
    e = engines(extra={"hold_blocks_until_saved": False})
    prompt = tokens(40, seed=7)
    run_one(e, Request("a", prompt))
    assert e.scheduler.held == set()
    assert e.worker_conn.worker_side.flush(10)
    assert client.lookup(ns, prompt).matched_tokens == 32


def test_producer_and_consumer_roles(client, ns, engines):
    prompt = tokens(40, seed=8)
    consumer = engines(role="kv_consumer")
    run_one(consumer, Request("a", prompt))
    assert client.lookup(ns, prompt).matched_tokens == 0  # consumers do not save
    run_one(engines(role="kv_producer"), Request("b", prompt))
    assert client.lookup(ns, prompt).matched_tokens == 32
    p2 = engines(role="kv_producer")
    run_one(p2, Request("c", prompt))  # producers do not load
    assert p2.worker_conn.worker_side.stats["loaded_tokens"] == 0
    c2 = engines(role="kv_consumer")
    run_one(c2, Request("d", prompt))
    assert c2.worker_conn.worker_side.stats["loaded_tokens"] == 32


# ------------------------------------------------------------------ preemption


def test_preempted_request_reloads_into_new_blocks(client, ns, engines):
    x = tokens(64, seed=9)
    run_one(engines(), Request("x", x + [1]))  # stores 64 tokens

    e = engines()
    req = e.add(Request("p", x + tokens(10, seed=10), max_tokens=6))
    e.step()  # loads 64, computes 10, samples one token
    first_blocks = list(e.scheduler.req_blocks["p"])
    e.scheduler.preempt("p")  # its blocks go to the back of the free list
    e.run()
    l1, l2 = loads_of(e, "p")
    assert (l1.start, l1.end, l2.start, l2.end) == (0, 64, 0, 64)
    assert set(l2.block_ids[0]).isdisjoint(first_blocks)  # loaded again, into other blocks
    assert req.num_preemptions == 1
    assert e.worker.model.context_errors == []

    ref = engines(connector=False)
    run_one(ref, Request("p", x + tokens(10, seed=10), max_tokens=6))
    assert e.outputs["p"] == ref.outputs["p"]


# ------------------------------------------------------------------ isolation and sharing


def test_cache_salt_isolation(client, ns, engines):
    prompt = tokens(40, seed=11)
    run_one(engines(), Request("a", prompt, cache_salt="tenant-1"))
    salted, salt = namespace_for(ns, "tenant-1")
    assert salted != ns and len(salt) == 64
    assert client.get_namespace(salted).salted
    assert client.lookup(salted, prompt).matched_tokens == 32

    def ext(req):
        e = engines()
        run_one(e, req)
        assert e.worker.model.context_errors == []
        return req.num_external_computed_tokens

    assert ext(Request("b", prompt, cache_salt="tenant-2")) == 0
    assert ext(Request("c", prompt)) == 0  # unsalted requests never see salted KV
    assert ext(Request("d", prompt, cache_salt="tenant-1")) == 32
    assert ext(Request("e", prompt, lora_name="tenant-1")) == 0  # a LoRA name is not a salt
    assert ext(Request("f", prompt, lora_name="tenant-1")) == 32
    assert ext(Request("g", prompt)) == 32  # "c" saved the unsalted one


def test_multimodal_requests_bypass_the_store(client, ns, engines):
    e = engines()
    req = Request("m", tokens(40, seed=12), multimodal=True)
    assert e.sched_conn.get_num_new_matched_tokens(req, 0) == (0, False)
    run_one(e, req)
    assert e.sched_conn.scheduler_side.stats["saves_planned"] == 0


def test_two_requests_sharing_a_prefix(client, ns, engines):
    s = tokens(64, seed=13)
    run_one(engines(), Request("s", s + tokens(8, seed=14)))
    e = engines()
    x = e.add(Request("x", s + tokens(30, seed=15)))
    y = e.add(Request("y", s + tokens(40, seed=16)))
    e.run()
    lx, ly = loads_of(e, "x")[0], loads_of(e, "y")[0]
    assert x.num_external_computed_tokens == y.num_external_computed_tokens == 64
    assert set(lx.block_ids[0]).isdisjoint(ly.block_ids[0])
    assert e.worker.model.context_errors == []
    tree = client.list_tree(ns, recursive=True)
    assert sorted((n.start_token, n.tokens) for n in tree) == [(0, 64), (64, 16), (64, 32)]  # the prefix once


# ------------------------------------------------------------------ layouts and the byte mapping


@pytest.mark.parametrize("kv_layout,hnd", [("flashinfer", False), ("flash_attn", True)])
def test_other_layouts_share_the_store(client, ns, engines, kv_layout, hnd):
    prompt = tokens(70, seed=17)
    run_one(engines(OracleModel()), Request("a", prompt))  # FlashAttention NHD
    e = engines(OracleModel(kv_layout=kv_layout, hnd=hnd))
    run_one(e, Request("b", prompt + [5]))
    assert e.worker_conn.worker_side.kv.layers[0].backend == kv_layout
    assert e.worker.model.context_errors == []
    assert e.worker_conn.worker_side.stats["loaded_tokens"] == 64
    # and the other way: saved from this layout, loaded by FlashAttention
    p2 = tokens(40, seed=18)
    run_one(e, Request("c", p2))
    f = engines(OracleModel())
    run_one(f, Request("d", p2 + [1]))
    assert f.worker_conn.worker_side.stats["loaded_tokens"] == 32 and f.worker.model.context_errors == []


def test_store_bytes_follow_the_documented_mapping(client, ns, engines):
    """ptstore[t, l, k, h, d] == pages_l[block_ids[t // B], k, t % B, h, d] (ptstore/vllm/paged.py)."""
    model = OracleModel(layers=3, kv_heads=2, head_dim=8)
    prompt = tokens(48, seed=19)
    run_one(engines(model), Request("a", prompt))
    layout = client.layout(ns)
    assert (layout.layers, layout.kv_heads, layout.head_dim, layout.dtype, layout.block_tokens) == (3, 2, 8, "bf16",
                                                                                                    16)
    out = torch.empty(layout.kv_shape(48), dtype=torch.bfloat16)
    assert client.load(ns, prompt, out) == 48
    for layer in range(3):
        assert torch.equal(out[:, layer], model.expected_kv(prompt, layer, range(48)))
