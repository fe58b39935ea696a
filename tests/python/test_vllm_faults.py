"""PTStoreConnector when things go wrong, driven as vLLM drives it (vllm_harness.py): a prefix removed between
lookup and load, ptstored stopped, saves still in flight ("ask again later"), async loads and their errors, and
a save planned before the scheduler learnt that its blocks failed to load."""

from __future__ import annotations

import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ptstore
import ptstore.testing
from ptstore.vllm import KVConnectorRole, PTStoreConnector, PTStoreConnectorMetadata, SaveSpec
from vllm_harness import MiniEngine, OracleModel, Request, gate_saves, make_vllm_config, run_one, tokens

def reference(engines, req):
    ref = engines(connector=False)
    return run_one(ref, Request(req.request_id, req.prompt_token_ids, max_tokens=req.max_tokens))


def stored(client, ns, toks):
    try:
        return client.lookup(ns, toks).matched_tokens
    except ptstore.NotFound:
        return 0


def assert_errors_only_in_discarded_steps(engine):
    """Every step that read wrong KV (a failed load) had its output dropped and was recomputed."""
    assert all(tok != -1 for outs in engine.outputs.values() for tok in outs)


# ------------------------------------------------------------------ load errors -> recompute


def test_prefix_removed_between_lookup_and_load(client, ns, engines):
    p1 = tokens(48, seed=1)
    p2 = p1 + tokens(48, seed=2)
    run_one(engines(), Request("a", p1 + [1]))  # increment [0, 48)
    run_one(engines(), Request("b", p2 + [1]))  # increment [48, 96)
    assert stored(client, ns, p2) == 96

    e = engines(extra={"pin_hits": False})  # the worker pins at load time (with pin_hits the hit cannot go)
    req = e.add(Request("c", p2 + tokens(5, seed=3), max_tokens=3))
    so = e.scheduler.schedule()  # looked up 96 tokens, plans to load them
    assert [(s.start, s.end) for s in so.kv_connector_metadata.loads] == [(0, 96)]
    client.remove(ns, p2)  # evicts [48, 96) before the worker loads it
    out = e.worker.execute_model(so)
    blocks = e.scheduler.req_blocks["c"]
    assert out.kv_connector_output.invalid_block_ids == set(blocks[3:6])  # blocks 0-2 loaded, 3-5 failed
    e.scheduled_log.append(so)
    e.scheduler.update_from_output(so, out)
    assert req.num_computed_tokens == 48  # vLLM recomputes from the first failed block
    e.run()
    assert e.scheduler.recomputed_from == {"c": [48]}
    assert e.worker.model.context_errors  # the failed step did read wrong KV ...
    assert_errors_only_in_discarded_steps(e)  # ... and its output was dropped
    assert e.outputs["c"] == reference(engines, req)
    assert stored(client, ns, p2) == 96  # saved again from the recomputed KV
    run_one(check := engines(), Request("d", p2 + [7]))
    assert check.worker.model.context_errors == [] and check.worker_conn.worker_side.stats["loaded_tokens"] == 96


@pytest.fixture()
def private_store(tmp_path):
    """A ptstored of the test's own, reached through a symlink so that a new one can take its place."""
    link = tmp_path / "ptstored.sock"
    daemons = []

    def start():
        d = ptstore.testing.Daemon(arena_size="64MiB").start()
        daemons.append(d)
        if link.is_symlink():
            link.unlink()
        link.symlink_to(d.socket)
        return d

    yield str(link), start
    for d in daemons:
        d.stop()


def test_store_stopped_mid_step_then_back(private_store):
    link, start = private_store
    d = start()
    # pin_hits false: the worker asks the store at load time (with pin_hits it would copy the hit out of the
    # stopped server's arena, still mapped: test_vllm_src_store.py)
    extra = {"unavailable_wait_ms": 300, "retry_interval_ms": 100, "lookup_timeout_ms": 500, "rpc_timeout_ms": 2000,
             "pin_hits": False}
    made = []

    def engine(**kw):
        e = MiniEngine(OracleModel(), socket=link, namespace="down", extra=extra, block_order_seed=len(made), **kw)
        made.append(e)
        return e

    try:
        prompt = tokens(64, seed=4)
        run_one(engine(), Request("a", prompt + [1]))
        e = engine()
        req = e.add(Request("b", prompt + tokens(8, seed=5), max_tokens=2))
        so = e.scheduler.schedule()
        assert so.kv_connector_metadata.loads[0].end == 64
        d.stop()  # the store goes away between lookup and load
        out = e.worker.execute_model(so)
        assert out.kv_connector_output.invalid_block_ids == set(e.scheduler.req_blocks["b"][:4])
        e.scheduled_log.append(so)
        e.scheduler.update_from_output(so, out)
        assert req.num_computed_tokens == 0  # everything is recomputed
        e.run()
        assert_errors_only_in_discarded_steps(e)
        assert e.outputs["b"] == run_one(MiniEngine(OracleModel(), connector=False),
                                         Request("b", req.prompt_token_ids, max_tokens=2))

        # While the store is down: "ask again later" for a short while, then misses, without stalling.
        t0 = time.monotonic()
        c = e.add(Request("c", prompt + [2]))
        e.run()
        assert "c" in e.scheduler.skipped_for_connector and c.num_external_computed_tokens == 0
        assert time.monotonic() - t0 < 5
        # A new ptstored at the same socket: the same engine picks it up again
        # (within retry_interval_ms; on a loaded machine maybe a few tries).
        start()
        with ptstore.Client(link) as check:
            deadline = time.monotonic() + 10
            attempt = 0
            while True:
                time.sleep(0.1)
                run_one(e, Request(f"d{attempt}", prompt + [3]))
                attempt += 1
                try:
                    if check.lookup("down", prompt).matched_tokens == 64:
                        break  # the engine saved through the new ptstored
                except ptstore.NotFound:
                    pass  # its namespace is not there yet
                assert time.monotonic() < deadline, "the engine did not reconnect to the new ptstored"
        loaded = e.worker_conn.worker_side.stats["loaded_tokens"]
        run_one(e, Request("f", prompt + [4]))
        assert e.worker_conn.worker_side.stats["loaded_tokens"] == loaded + 64
    finally:
        for e in made:
            e.close()


# ------------------------------------------------------------------ ask again later


def test_ask_again_later_while_a_save_of_the_prefix_is_in_flight(client, ns, engines):
    e = engines(extra={"save_wait_ms": 10000})
    gate = gate_saves(e)
    s = tokens(64, seed=6)
    e.add(Request("a", s + tokens(5, seed=7), max_tokens=4))
    e.step()  # "a" computed its prompt; its save is in flight (held by the gate)
    b = e.add(Request("b", s + tokens(20, seed=8)))
    e.step()
    e.step()
    assert e.scheduler.skipped_for_connector == ["b", "b"] and b.status == "WAITING"
    gate.set()
    e.run()
    assert b.num_external_computed_tokens == 64  # waited, then loaded instead of recomputing
    assert e.worker.model.context_errors == []


def test_ask_again_later_gives_up_after_save_wait_ms(client, ns, engines):
    e = engines(extra={"save_wait_ms": 200})
    gate = gate_saves(e)
    s = tokens(64, seed=9)
    e.add(Request("a", s + [1], max_tokens=50))
    e.step()
    b = e.add(Request("b", s + [2]))
    t0 = time.monotonic()
    while b.status == "WAITING":
        e.step()
        time.sleep(0.01)
        assert time.monotonic() - t0 < 5
    assert time.monotonic() - t0 >= 0.2 and b.num_external_computed_tokens == 0  # computed it
    gate.set()
    e.run()


# ------------------------------------------------------------------ async loads


def test_async_loads(client, ns, engines):
    prompt = tokens(70, seed=10)
    run_one(engines(), Request("a", prompt))
    e = engines(extra={"load_async": True})
    req = e.add(Request("b", prompt + tokens(9, seed=11), max_tokens=2))
    e.step()
    assert e.scheduled_log[0].num_scheduled_tokens == {}  # nothing computed while it loads
    e.run()
    (spec,) = [s for so in e.scheduled_log for s in so.kv_connector_metadata.loads]
    assert spec.is_async and (spec.start, spec.end) == (0, 64)
    assert req.num_cached_tokens == 64  # scheduled with the loaded tokens computed
    assert e.worker.model.context_errors == []
    assert e.outputs["b"] == reference(engines, req)


def test_async_load_error_is_recomputed(client, ns, engines):
    prompt = tokens(70, seed=12)
    run_one(engines(), Request("a", prompt))
    e = engines(extra={"load_async": True, "pin_hits": False})
    req = e.add(Request("b", prompt + tokens(9, seed=13), max_tokens=2))
    so = e.scheduler.schedule()
    assert so.kv_connector_metadata.loads[0].is_async
    client.remove(ns, prompt)  # gone before the worker loads it
    e.scheduled_log.append(so)
    e.scheduler.update_from_output(so, e.worker.execute_model(so))
    e.run()
    assert req.num_external_computed_tokens <= 0
    assert_errors_only_in_discarded_steps(e)
    assert e.worker.model.context_errors == []  # nothing ran on the failed blocks
    assert e.outputs["b"] == reference(engines, req)


# ------------------------------------------------------------------ saves must never store failed loads


def test_a_save_planned_before_the_load_error_was_known_is_dropped(daemon, client, ns):
    """With vLLM's async scheduling a step's save can be planned before the scheduler saw the previous step's
    load errors; the worker must not store blocks that failed to load."""
    model = OracleModel()
    cfg = make_vllm_config(socket=daemon.socket, namespace=ns)
    w = PTStoreConnector(cfg, KVConnectorRole.WORKER)
    caches = model.make_kv_caches(16, 16)
    w.register_kv_caches(caches)
    prompt = np.asarray(tokens(32, seed=14), dtype=np.uint32)
    from ptstore.vllm import LoadSpec
    # Step 1: a load from an empty store: both blocks fail.
    w.bind_connector_metadata(PTStoreConnectorMetadata(loads=[LoadSpec("r", ns, prompt, 0, [3, 4])]))
    w.start_load_kv(None)
    w.wait_for_save()
    assert w.get_block_ids_with_load_errors() == {3, 4}
    w.clear_connector_metadata()

    def save_step(ack):
        w.bind_connector_metadata(PTStoreConnectorMetadata(saves=[SaveSpec("r", ns, "", prompt, [3, 4], ack=ack)]))
        w.start_load_kv(None)
        for name in model.layer_names:
            w.save_kv_layer(name, caches[name], None)
        w.wait_for_save()
        w.get_finished(set())
        w.clear_connector_metadata()
        assert w.worker_side.flush(10)

    save_step(ack=0)  # planned before the scheduler saw that report: dropped
    assert w.worker_side.stats["saves_dropped_tainted"] == 1
    assert stored(client, ns, prompt) == 0
    save_step(ack=1)  # planned after it (vLLM recomputed the blocks): saved
    assert stored(client, ns, prompt) == 32
    w.shutdown()
