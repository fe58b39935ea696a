"""The vLLM connector's load-or-recompute decision (kv_connector_extra_config["cost_model"]): with the shipped
profile a stored prefix loads, with absurdly slow paths it is recomputed (a miss, never an error), the advice
is rounded to whole blocks and capped at the lookup's match, a failed advice loads the whole hit, and without
the key nothing changes."""

from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")

import ptstore
from ptstore.vllm import ConnectorConfig, CostModelConfig, KVConnectorRole, PTStoreConnector
from profiles_helper import AdviceProxy, write_profiles
from vllm_harness import Request, make_vllm_config, run_one, tokens



@pytest.fixture()
def slow_profiles(tmp_path):
    return write_profiles(tmp_path, "slow.toml", gpu="slow", bw=1e-6, rtt=1e6,
                          source="test: paths at 1 KB/s with a second of latency")


def loads_of(engine, rid):
    return [s for so in engine.scheduled_log for s in so.kv_connector_metadata.loads if s.req_id == rid]


def store(engines, prompt):
    """Runs `prompt` through an engine without a cost model: its whole blocks end up in the store."""
    run_one(engines(), Request("seed", prompt))


def proxy(engine, **kw):
    side = engine.sched_conn.scheduler_side
    real = side.link.get()
    p = AdviceProxy(real, **kw)
    side.link.get = lambda: p
    return p


# ------------------------------------------------------------------ configuration


def test_config():
    assert ConnectorConfig.from_dict({}).cost_model is None
    c = ConnectorConfig.from_dict({"cost_model": {"gpu": "h100-80g", "model": "mistral-7b", "profiles": None,
                                                  "remote_path": "rma"}})
    assert c.cost_model == CostModelConfig()
    assert ConnectorConfig.from_dict({"cost_model": {}}).cost_model == CostModelConfig()
    assert ConnectorConfig.from_dict({"cost_model": True}).cost_model == CostModelConfig()
    assert ConnectorConfig.from_dict({"cost_model": None}).cost_model is None
    c = ConnectorConfig.from_dict({"cost_model": {"gpu": "a100-80g", "remote_path": "tcp", "profiles": "/p.toml"}})
    assert (c.cost_model.gpu, c.cost_model.model, c.cost_model.remote_path, c.cost_model.profiles) == \
        ("a100-80g", "mistral-7b", "tcp", "/p.toml")
    with pytest.raises(ValueError, match=r"unknown keys in kv_connector_extra_config\['cost_model'\].*'gpus'"):
        ConnectorConfig.from_dict({"cost_model": {"gpus": "h200"}})
    with pytest.raises(ValueError, match="remote_path.*'rma' or 'tcp'"):
        ConnectorConfig.from_dict({"cost_model": {"remote_path": "dram"}})
    assert ConnectorConfig.from_dict({"cost_model": {"remote_path": None}}).cost_model == CostModelConfig()
    with pytest.raises(ValueError, match="must be a dict"):
        ConnectorConfig.from_dict({"cost_model": "h100-80g"})


def test_a_wrong_profile_fails_at_start(daemon, ns, slow_profiles):
    cfg = make_vllm_config(socket=daemon.socket, namespace=ns, extra={"cost_model": {"gpu": "rtx-4090"}})
    with pytest.raises(ValueError, match=r"cost_model.*no profile for model mistral-7b on rtx-4090.*it has"):
        PTStoreConnector(cfg, KVConnectorRole.SCHEDULER)
    # The worker side does not read the profile.
    PTStoreConnector(cfg, KVConnectorRole.WORKER).shutdown()
    cfg = make_vllm_config(socket=daemon.socket, namespace=ns,
                           extra={"cost_model": {"profiles": slow_profiles, "model": "m", "gpu": "slow"}})
    c = PTStoreConnector(cfg, KVConnectorRole.SCHEDULER)
    assert c.scheduler_side.cost_model.gpu == "slow"
    c.shutdown()


# ------------------------------------------------------------------ decisions


def test_shipped_profile_loads_the_stored_prefix(client, ns, engines):
    prompt = tokens(100, seed=11)
    store(engines, prompt)
    assert client.lookup(ns, prompt).matched_tokens == 96
    plain = engines()
    out_plain = run_one(plain, Request("plain", prompt))

    e = engines(extra={"cost_model": {"gpu": "h100-80g", "model": "mistral-7b", "profiles": None,
                                      "remote_path": "rma"}})
    out = run_one(e, Request("b", prompt))
    side = e.sched_conn.scheduler_side
    assert side.stats["advised"] == 1 and side.stats["advised_recompute"] == 0
    assert side.stats["advised_skipped_tokens"] == 0 and side.stats["hit_tokens"] == 96
    assert e.scheduled_log[0].num_scheduled_tokens == {"b": 4}  # 96 loaded, 4 computed
    (spec,) = loads_of(e, "b")
    assert (spec.start, spec.end) == (0, 96)
    assert e.worker_conn.worker_side.stats["loaded_tokens"] == 96
    assert e.worker.model.context_errors == [] and out == out_plain


def test_slow_paths_recompute_the_stored_prefix(client, ns, engines, slow_profiles):
    prompt = tokens(100, seed=12)
    store(engines, prompt)
    assert client.lookup(ns, prompt).matched_tokens == 96
    out_plain = run_one(engines(), Request("plain", prompt))

    e = engines(extra={"cost_model": {"profiles": slow_profiles, "model": "m", "gpu": "slow"}})
    sched = e.sched_conn
    assert sched.get_num_new_matched_tokens(Request("probe", prompt), 0) == (0, False)  # a miss, not an error
    out = run_one(e, Request("b", prompt))
    side = sched.scheduler_side
    assert side.stats["advised_recompute"] == 2 and side.stats["hit_tokens"] == 0
    assert side.stats["advised_skipped_tokens"] == 2 * 96
    assert e.scheduled_log[0].num_scheduled_tokens == {"b": 100}  # all of it computed
    assert loads_of(e, "b") == [] and e.worker_conn.worker_side.stats["loaded_tokens"] == 0
    assert side.stats["saves_planned"] == 0  # the store holds the prompt already: no save
    assert e.worker.model.context_errors == [] and out == out_plain


def test_advice_is_whole_blocks_and_at_most_the_match(client, ns, engines):
    prompt = tokens(100, seed=13)
    store(engines, prompt)
    e = engines(extra={"cost_model": {}})
    sched = e.sched_conn
    p = proxy(e, plan=ptstore.LoadPlan(load_tokens=50, load_s=0.001, compute_s=0.002))
    assert sched.get_num_new_matched_tokens(Request("a", prompt), 0) == (48, False)  # 50 -> 3 blocks of 16
    assert sched.get_num_new_matched_tokens(Request("b", prompt), 32) == (16, False)  # local hit counts
    assert p.last_kw == {"gpu_tokens": 32}  # the plan knows what vLLM holds already
    assert sched.get_num_new_matched_tokens(Request("c", prompt), 48) == (0, False)
    p.plan = ptstore.LoadPlan(load_tokens=4096)
    assert sched.get_num_new_matched_tokens(Request("d", prompt), 0) == (96, False)  # never more than matched
    # No advice when there is nothing to load: a miss, or vLLM's own cache covering the hit.
    calls = p.calls
    assert sched.get_num_new_matched_tokens(Request("e", tokens(100, seed=14)), 0) == (0, False)
    assert sched.get_num_new_matched_tokens(Request("f", prompt), 96) == (0, False)
    assert p.calls == calls


def test_failed_advice_loads_the_whole_hit(client, ns, engines, caplog):
    prompt = tokens(100, seed=15)
    store(engines, prompt)
    e = engines(extra={"cost_model": {"gpu": "a100-80g"}})
    p = proxy(e, error=ptstore.Internal("advice exploded"))
    with caplog.at_level(logging.WARNING, logger="ptstore.vllm"):
        out = run_one(e, Request("b", prompt))
    assert p.calls == 1
    side = e.sched_conn.scheduler_side
    assert side.stats["advice_failures"] == 1 and side.stats["hit_tokens"] == 96
    assert e.worker_conn.worker_side.stats["loaded_tokens"] == 96 and e.worker.model.context_errors == []
    assert any("advice" in r.getMessage() and "advice exploded" in r.getMessage() for r in caplog.records)
    assert out


def test_without_the_key_nothing_changes(client, ns, engines):
    prompt = tokens(100, seed=16)
    store(engines, prompt)
    e = engines()
    assert e.sched_conn.scheduler_side.cost_model is None
    p = proxy(e, plan=ptstore.LoadPlan(load_tokens=0))  # would recompute, were it asked
    run_one(e, Request("b", prompt))
    assert p.calls == 0
    assert e.worker_conn.worker_side.stats["loaded_tokens"] == 96
    assert e.sched_conn.scheduler_side.stats["advised"] == 0
