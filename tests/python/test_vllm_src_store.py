"""PTStoreConnector and its store inside vLLM's own code (the snapshot at $PTSTORE_VLLM_SRC, as test_vllm_src.py):
ptstored restarted or unreachable while vLLM's scheduler and worker use it, blocks held for saves by vLLM's block
pool, and the cost model's load-or-recompute decision seen through vLLM's scheduler.

These scenarios ran before only in the miniature engine (vllm_harness.py: test_vllm_faults.py,
test_vllm_connector.py, test_vllm_cost_model.py); here every engine is vLLM's Scheduler with its KVCacheManager
and the connector vLLM's KVConnectorFactory makes, and a worker going through vLLM's KVConnectorModelRunnerMixin
(vllm_src/engine.py), whose stand-in attention checks every context token's K/V against the model each step (a
load of wrong bytes raises). Each test runs under standins.watch(). Without the snapshot the module skips
(PTSTORE_VLLM_REQUIRED=1 makes that an error, as for test_vllm_src.py).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import types

import pytest

from vllm_src.testing import require_vllm_src

require_vllm_src()

from vllm_src import engine as E  # noqa: E402

import ptstore  # noqa: E402
from vllm_src.testing import engines, finished_ok, no_stand_ins, ns, params, prompt  # noqa: E402,F401
import ptstore.testing  # noqa: E402


def stored(client, ns, tokens):
    try:
        return client.lookup(ns, tokens).matched_tokens
    except ptstore.NotFound:
        return 0


def worker_stats(engine):
    return engine.worker.connector.worker_side.stats


def scheduler_stats(engine):
    return engine.connector.scheduler_side.stats


def block_ids(engine, req):
    """vLLM's blocks of a request (its KVCacheManager's, the one KV cache group)."""
    (ids,) = engine.scheduler.kv_cache_manager.get_block_ids(req.request_id)
    return list(ids)


def step_parts(engine):
    """schedule() of one step, then a function that runs the rest of it (the workers' execute_model and vLLM's
    update_from_output): between the two the test may change the world (the scheduler planned, the worker has
    not loaded yet). Returns (scheduler output, finish); finish() returns the workers' ModelRunnerOutput."""
    so = engine.scheduler.schedule()
    return so, lambda: engine.finish_step(so)


# ------------------------------------------------------------------------------------------------ a private ptstored
DOWN = {"unavailable_wait_ms": 300, "retry_interval_ms": 100, "lookup_timeout_ms": 500, "rpc_timeout_ms": 2000}
STORE_NS = "store"


@pytest.fixture()
def private_store(tmp_path):
    """A ptstored of the test's own with an SSD tier, reached through a symlink so that a new one can take its
    place at the same socket. The SSD directory outlives each ptstored: a restarted one recovers what the last
    one held (on SIGTERM it writes its DRAM to SSD first). start(): a new ptstored; stop(): stops the running
    one; restart(): both. engine(**kw): an Engine on it (namespace STORE_NS, the DOWN timeouts; `extra` adds
    options), closed after the test, before the ptstoreds stop."""
    link = tmp_path / "ptstored.sock"
    ssd = tmp_path / "ssd"
    daemons, made = [], []

    def start():
        d = ptstore.testing.Daemon(arena_size="64MiB",
                                   extra_args=["--ssd-dir", str(ssd), "--ssd-capacity", "256MiB"]).start()
        daemons.append(d)
        if link.is_symlink():
            link.unlink()
        link.symlink_to(d.socket)
        return d

    def stop():
        daemons[-1].stop()

    def restart():
        stop()
        return start()

    def engine(**kw):
        extra = dict(DOWN, namespace=STORE_NS)
        extra.update(kw.pop("extra", {}) or {})
        e = E.Engine(str(link), extra=extra, **kw)
        made.append(e)
        return e

    yield types.SimpleNamespace(socket=str(link), start=start, stop=stop, restart=restart, engine=engine)
    for e in made:
        e.close()
    for d in daemons:
        d.stop()


def load_again(engine, tokens, deadline_s=10.0):
    """Serves `tokens` on `engine` until a request loads all its whole blocks (less the last token) from the
    store, vLLM's own prefix cache reset before each try so that the store serves them; a restarted ptstored
    is picked up within retry_interval_ms (a link that failed reconnects on its next use). Returns
    (that request, the tries it took)."""
    want = (len(tokens) - 1) // engine.block_size * engine.block_size
    deadline = time.monotonic() + deadline_s
    for tries in itertools.count(1):
        assert engine.scheduler.reset_prefix_cache()  # vLLM's own cache only (reset_connector false)
        r = engine.add(tokens, max_tokens=2)
        engine.run()
        finished_ok(engine, r)  # every try finishes, loaded or recomputed, with the model's KV
        if params(engine, r).get("loaded_tokens", 0) == want:
            return r, tries
        assert time.monotonic() < deadline, "the engine did not load from the store again"
        time.sleep(0.1)


def other_kv_at_the_front_of_the_arena(socket, ns, n):
    """Saves KV that is not the model's (every element 7) for other tokens into `ns` of a freshly started
    ptstored, before anything else is read into its arena: it takes the arena's first bytes, where the old
    arena held the prefix of the tests."""
    import torch

    with ptstore.Client(socket) as c:
        layout = c.get_namespace(ns).layout
        c.save(ns, prompt(n, 99), torch.full(layout.kv_shape(n), 7, dtype=ptstore.torch_dtype(layout)))


def reconnect(client):
    """Makes a Client that used a ptstored which has since restarted reconnect (its first call fails on the old
    connection, the next one connects to the new ptstored and maps its arena)."""
    try:
        client.list_namespaces()
    except ptstore.Unavailable:
        pass
    client.list_namespaces()


@pytest.mark.parametrize("variant", ["pin_hits_false", "pin_hits", "pin_hits_worker_reconnected"])
def test_ptstored_restarted_between_lookup_and_load_no_wrong_kv_and_the_engine_loads_again(private_store,
                                                                                          variant):
    """vLLM's scheduler planned the load of a 64-token hit; ptstored is stopped and a new one (a new arena, in
    which other KV takes the offsets the old one held the prefix at; it recovered the prefix from its SSD tier)
    starts at the same socket before the worker loads. The request finishes with the model's KV in every case
    (the stand-in attention checks every context token: a load of wrong bytes raises), and once its links have
    reconnected the same engine loads the prefix from the new ptstored.

    pin_hits_false: the worker pins at load time, on its connection to the old ptstored: the load fails
    cleanly, every block is reported (vLLM's KVConnectorOutput.invalid_block_ids), vLLM truncates the request
    to 0 computed tokens and recomputes it.
    pin_hits: the scheduler pinned the hit in the old arena and the worker's client still maps that arena
    (same arena_id: it has not talked to the new ptstored): it copies the pinned bytes out of that mapping,
    which outlives the old ptstored and still holds them (a sealed memfd nothing writes any more): loaded.
    pin_hits_worker_reconnected: the worker's client already maps the new arena (another arena_id): the old
    pin's extents are not used in it (they name other KV there); the worker pins the prefix in the new
    ptstored and loads what it recovered."""
    store = private_store
    store.start()
    pin_hits = variant != "pin_hits_false"
    extra = {} if pin_hits else {"pin_hits": False}
    a, b = store.engine(extra=extra), store.engine(extra=extra)
    doc = prompt(64, 4)
    a.saved(doc + [1], max_tokens=1)

    rb = b.add(doc + prompt(8, 5), max_tokens=2)
    so, finish = step_parts(b)
    (spec,) = so.kv_connector_metadata.loads
    assert (spec.start, spec.end) == (0, 64)
    assert so.num_scheduled_tokens == {rb.request_id: 8}  # vLLM counts the 64 tokens to load as computed
    assert scheduler_stats(b)["hits_pinned"] == (1 if pin_hits else 0)
    assert bool(spec.arena_id) == pin_hits
    blocks = block_ids(b, rb)

    store.restart()
    other_kv_at_the_front_of_the_arena(store.socket, STORE_NS, 64)
    with ptstore.Client(store.socket) as c:
        assert stored(c, STORE_NS, doc) == 64  # recovered from the SSD tier
        new_arena = c.arena_id
    wclient = b.worker.connector.worker_side.link.get()
    if variant == "pin_hits_worker_reconnected":
        reconnect(wclient)
        assert wclient.arena_id == new_arena != spec.arena_id
    elif pin_hits:
        assert wclient.arena_id == spec.arena_id != new_arena

    mro = finish()
    w = worker_stats(b)
    invalid = mro.kv_connector_output.invalid_block_ids or set()
    if variant == "pin_hits_false":
        assert invalid == set(blocks[:4])
        assert rb.num_computed_tokens == 0  # vLLM recomputes from the first failed block: all of it
    else:
        assert not invalid
        assert w["pinned_loads"] == (1 if variant == "pin_hits" else 0)
    b.run()
    finished_ok(b, rb)  # not FINISHED_ERROR
    assert b.worker.checked_tokens >= 64  # the KV it attended to (loaded or recomputed) is the model's
    if variant == "pin_hits_false":
        assert w["load_failed_blocks"] == 4 and w["loaded_tokens"] == 0
        assert params(b, rb).get("loaded_tokens", 0) == 0
    else:
        assert w["load_failed_blocks"] == 0 and w["loaded_tokens"] == 64
        assert params(b, rb)["loaded_tokens"] == 64

    r, _ = load_again(b, doc + prompt(8, 7))
    assert params(b, r)["loaded_tokens"] == 64


def test_ptstored_unreachable_at_lookup_asks_again_later_then_misses_then_loads_when_back(private_store):
    """ptstored stopped: the lookup answers "ask again later" (vLLM leaves the request WAITING and schedules
    nothing of it) for unavailable_wait_ms, then counts as a miss (vLLM computes the whole prompt) without
    stalling; a new ptstored at the same socket is picked up by the same engine, which loads again."""
    store = private_store
    store.start()
    a, b = store.engine(), store.engine()
    doc = prompt(64, 8)
    a.saved(doc + [1], max_tokens=1)

    store.stop()
    rc = b.add(doc + [2], max_tokens=2)
    t0 = time.monotonic()
    skipped = 0
    while True:
        so = b.step()
        if rc.request_id in so.num_scheduled_tokens:
            break
        assert E.status_name(rc.status) == "WAITING" and rc.num_computed_tokens == 0
        skipped += 1
        assert time.monotonic() - t0 < 5, "vLLM never scheduled the request"
        time.sleep(0.01)
    waited = time.monotonic() - t0
    assert skipped >= 1 and waited >= DOWN["unavailable_wait_ms"] / 1000
    assert scheduler_stats(b)["ask_later_unavailable"] == skipped
    assert so.num_scheduled_tokens[rc.request_id] == 65  # a miss: vLLM computes the whole prompt
    assert not so.kv_connector_metadata.loads
    b.run()
    finished_ok(b, rc)
    assert params(b, rc).get("loaded_tokens", 0) == 0
    assert time.monotonic() - t0 < 5  # no stall

    store.start()
    r, _ = load_again(b, doc + [3])
    assert params(b, r)["loaded_tokens"] == 64
    assert b.worker.checked_tokens >= 64


# ------------------------------------------------------------------------------------------------ held blocks
@pytest.fixture()
def gated_saves(engines):
    """gate(engine) -> an Event: the engine's worker-side writer waits for it (at most 30 s) before it writes
    each save, so that saves stay in flight until the test sets it. Every gate opens after the test."""
    gates = []

    def gate(engine):
        ws = engine.worker.connector.worker_side
        ev = threading.Event()
        write = ws._write

        def gated(spec, job):
            ev.wait(30)
            write(spec, job)

        ws._write = gated
        gates.append(ev)
        return ev

    yield gate
    for ev in gates:
        ev.set()


@pytest.mark.parametrize("hold", [True, False], ids=["hold", "no_hold"])
def test_a_finished_requests_blocks_stay_held_until_vllm_steps_after_its_save(engines, ns, client, gated_saves,
                                                                             hold):
    """hold_blocks_until_saved (default): vLLM's block pool keeps a finished request's blocks while its save is in
    flight; vLLM steps once more after the request finished (telling the worker), then has nothing to schedule
    (its EngineCore idles), and the blocks stay held though the save reached the store meanwhile, until the next
    step, that of the next request, delivers the worker's report (finished_sending) and frees them. Without
    the option vLLM frees them when the request finishes, the save still in flight."""
    e = engines(ns, extra={"hold_blocks_until_saved": hold})
    pool = e.scheduler.kv_cache_manager.block_pool
    free = pool.get_num_free_blocks()
    gate = gated_saves(e)
    doc = prompt(50, 9)
    r = e.add(doc, max_tokens=1)
    e.step()  # vLLM computes the prompt and samples its one token: the request is finished
    finished_ok(e, r)
    assert params(e, r)["saved_tokens"] == 48
    if not hold:
        assert pool.get_num_free_blocks() == free and r.request_id not in e.scheduler.requests
        assert stored(client, ns, doc) == 0  # the save is still in flight
        gate.set()
        assert e.worker.connector.worker_side.flush(10)
        assert stored(client, ns, doc) == 48
        return
    held = block_ids(e, r)
    assert len(held) == 4 and pool.get_num_free_blocks() == free - 4
    assert e.scheduler.has_requests()  # the finished request's id goes to the worker with the next step
    e.step()
    assert pool.get_num_free_blocks() == free - 4 and r.request_id in e.scheduler.requests  # save in flight
    assert not e.scheduler.has_requests()  # vLLM's EngineCore.step schedules nothing now: the engine is idle
    gate.set()
    assert e.worker.connector.worker_side.flush(10)
    assert stored(client, ns, doc) == 48  # written, and the worker would report it ...
    time.sleep(0.05)
    assert pool.get_num_free_blocks() == free - 4 and block_ids(e, r) == held  # ... but vLLM has not stepped
    nxt = e.add(prompt(20, 10), max_tokens=1)  # the next request: its step delivers the report
    e.step()
    assert r.request_id not in e.scheduler.requests
    assert pool.get_num_free_blocks() == free - len(block_ids(e, nxt))
    e.flush()
    assert pool.get_num_free_blocks() == free


# ------------------------------------------------------------------------------------------------ cost model
@pytest.fixture()
def slow_profiles(tmp_path):
    from profiles_helper import write_profiles

    return write_profiles(tmp_path, "slow.toml", gpu="slow", bw=1e-6, rtt=1e6,
                          source="test: paths at 1 KB/s with a second of latency")


def proxy(engine, **kw):
    from profiles_helper import AdviceProxy

    side = engine.connector.scheduler_side
    p = AdviceProxy(side.link.get(), **kw)
    side.link.get = lambda: p
    return p


def first_step(engine, req):
    """schedule() of the step that schedules `req`: (vLLM's SchedulerOutput, the request's PrefillStats as vLLM's
    scheduler set them, vLLM's connector prefix-cache stats (queries, hits) of the step, finish)."""
    so, finish = step_parts(engine)
    assert req.request_id in so.num_scheduled_tokens
    ps = req.prefill_stats
    cs = engine.scheduler.connector_prefix_cache_stats
    return so, ps, (cs.queries, cs.hits), finish


def test_cost_model_with_the_shipped_profile_vllm_loads_the_stored_prefix(engines, ns):
    a = engines(ns)
    b = engines(ns, extra={"cost_model": {"gpu": "h100-80g", "model": "mistral-7b", "profiles": None,
                                          "remote_path": "rma"}})
    doc = prompt(100, 11)
    a.saved(doc, max_tokens=1)
    rb = b.add(doc, max_tokens=2)
    so, ps, (queries, hits), finish = first_step(b, rb)
    assert so.num_scheduled_tokens == {rb.request_id: 4}  # 96 loaded, 4 computed
    assert ps.num_external_cached_tokens == 96 and (queries, hits) == (100, 96)
    (spec,) = so.kv_connector_metadata.loads
    assert (spec.start, spec.end) == (0, 96)
    finish()
    b.run()
    finished_ok(b, rb)
    side = scheduler_stats(b)
    assert side["advised"] == 1 and side["advised_recompute"] == 0 and side["advised_skipped_tokens"] == 0
    assert params(b, rb)["loaded_tokens"] == 96 and worker_stats(b)["loaded_tokens"] == 96
    assert b.worker.checked_tokens >= 96


def test_cost_model_advising_recompute_is_a_miss_in_vllm_not_an_error(engines, ns, slow_profiles):
    """A profile whose paths run at 1 KB/s: the cost model says recompute; get_num_new_matched_tokens answers 0
    (not None, not an error): vLLM schedules the whole prompt at once, loads nothing, and the request finishes
    normally; the prompt is not saved again (the store holds it)."""
    a = engines(ns)
    b = engines(ns, extra={"cost_model": {"profiles": slow_profiles, "model": "m", "gpu": "slow"}})
    doc = prompt(100, 12)
    a.saved(doc, max_tokens=1)
    rb = b.add(doc, max_tokens=2)
    so, ps, (queries, hits), finish = first_step(b, rb)
    assert so.num_scheduled_tokens == {rb.request_id: 100}  # all of it computed, in the first step
    assert ps.num_external_cached_tokens == 0 and (queries, hits) == (100, 0)
    assert not so.kv_connector_metadata.loads
    finish()
    b.run()
    finished_ok(b, rb)  # not FINISHED_ERROR
    side = scheduler_stats(b)
    assert side["advised"] == 1 and side["advised_recompute"] == 1 and side["advised_skipped_tokens"] == 96
    assert side["hit_tokens"] == 0 and side["saves_planned"] == 0
    w = worker_stats(b)
    assert w["loaded_tokens"] == 0 and w["load_failed_blocks"] == 0
    assert params(b, rb).get("loaded_tokens", 0) == 0
    assert b.worker.checked_tokens >= 100


def test_cost_model_advice_loads_whole_blocks_at_most_the_match_past_vllms_own_cache(engines, ns):
    """vLLM loads what the advice says, rounded down to whole blocks, never more than the lookup matched, and
    the advice weighs only what lies past vLLM's own prefix cache (gpu_tokens); a request vLLM's cache covers
    asks no advice."""
    a = engines(ns)
    b = engines(ns, extra={"cost_model": {}})
    doc = prompt(100, 13)
    a.saved(doc, max_tokens=1)
    p = proxy(b, plan=ptstore.LoadPlan(load_tokens=4096))
    r1 = b.add(doc[:40], max_tokens=1)
    so, ps, _, finish = first_step(b, r1)
    assert p.last_kw == {"gpu_tokens": 0}
    assert ps.num_external_cached_tokens == 32 and so.num_scheduled_tokens == {r1.request_id: 8}  # the match
    finish()
    b.run()
    assert params(b, r1)["loaded_tokens"] == 32

    p.plan = ptstore.LoadPlan(load_tokens=50, load_s=0.001, compute_s=0.002)
    r2 = b.add(doc, max_tokens=2)
    so, ps, _, finish = first_step(b, r2)
    assert p.last_kw == {"gpu_tokens": 32}  # vLLM's own cache holds r1's two blocks
    assert (ps.num_local_cached_tokens, ps.num_external_cached_tokens) == (32, 16)  # 50 -> 48, less vLLM's 32
    assert so.num_scheduled_tokens == {r2.request_id: 52}
    (spec,) = so.kv_connector_metadata.loads
    assert (spec.start, spec.end) == (32, 48)
    finish()
    b.run()
    finished_ok(b, r2)
    assert params(b, r2)["loaded_tokens"] == 16
    assert b.worker.checked_tokens >= 100

    calls = p.calls
    r3 = b.add(doc + [5], max_tokens=1)
    so, ps, _, finish = first_step(b, r3)
    assert ps.num_local_cached_tokens == 96 and ps.num_external_cached_tokens == 0
    finish()
    b.run()
    assert p.calls == calls  # nothing past vLLM's own cache to load: no advice asked


def test_cost_model_failed_advice_loads_the_whole_hit(engines, ns, caplog):
    a = engines(ns)
    b = engines(ns, extra={"cost_model": {"gpu": "a100-80g"}})
    doc = prompt(100, 15)
    a.saved(doc, max_tokens=1)
    p = proxy(b, error=ptstore.Internal("advice exploded"))
    rb = b.add(doc, max_tokens=2)
    with caplog.at_level(logging.WARNING, logger="ptstore.vllm"):
        so, ps, _, finish = first_step(b, rb)
        finish()
        b.run()
    assert p.calls == 1 and scheduler_stats(b)["advice_failures"] == 1
    assert ps.num_external_cached_tokens == 96 and so.num_scheduled_tokens == {rb.request_id: 4}
    finished_ok(b, rb)
    assert params(b, rb)["loaded_tokens"] == 96 and b.worker.checked_tokens >= 96
    assert any("advice" in r.getMessage() and "advice exploded" in r.getMessage() for r in caplog.records)


def test_without_the_cost_model_option_no_advice_is_asked(engines, ns):
    a, b = engines(ns), engines(ns)
    assert b.connector.scheduler_side.cost_model is None
    doc = prompt(100, 16)
    a.saved(doc, max_tokens=1)
    p = proxy(b, plan=ptstore.LoadPlan(load_tokens=0))  # would recompute, were it asked
    rb = b.add(doc, max_tokens=2)
    b.run()
    finished_ok(b, rb)
    assert p.calls == 0 and params(b, rb)["loaded_tokens"] == 96
    assert scheduler_stats(b)["advised"] == 0
