"""ptstore.CostModel (the scheduler's cost model, sched/cost_model.h), Client.locate_prefix and Client.advise
(sched::LoadAdvisor) against a real ptstored: the shipped profiles, plans over fast and absurdly slow paths,
clear errors, and load-versus-recompute advice for a stored prefix."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import ptstore
from conftest import as_kv, kv_bits, tokens
from profiles_helper import profile_text, write_profiles

GPUS = ["a100-80g", "h100-80g", "h200"]

# ------------------------------------------------------------------ CostModel


@pytest.mark.parametrize("gpu", GPUS)
def test_loads_the_shipped_profiles(gpu):
    m = ptstore.CostModel.load(gpu=gpu)
    assert type(m).__module__ == "ptstore" and m.gpu == gpu and m.model == "mistral-7b"
    prof = m.profile
    assert (prof["model"], prof["gpu"], prof["kv_bytes_per_token"]) == ("mistral-7b", gpu, 131072)
    assert prof["a"] >= 0 and prof["b"] >= 0 and prof["c"] >= 0 and prof["source"]
    assert set(prof["paths"]) == {"dram", "ssd", "rma", "tcp"}
    assert m.kv_bytes_per_token == 131072
    # Prefill grows with the prompt and shrinks with what is cached.
    times = [m.prefill_seconds(n) for n in (128, 512, 2048, 8192, 16384)]
    assert times == sorted(times) and times[0] > 0
    assert m.prefill_seconds(4096, cached=2048) < m.prefill_seconds(4096)
    assert m.prefill_seconds(4096, cached=4096) == 0
    # The fit goes near its points (within 15%: a quadratic through 8 hybrid points).
    for n, s in prof["prefill_points"]:
        if n >= 512:
            assert m.prefill_seconds(n) == pytest.approx(s, rel=0.15), n
    # Remote loads take both hops; the GPU-side hop alone is the dram path.
    gib = 1 << 30
    assert m.load_seconds(gib, "rma") > m.load_seconds(gib, "dram") > 0
    assert m.hop_seconds(gib, "rma") < m.load_seconds(gib, "rma")
    assert m.load_seconds(0, "tcp") == 0
    assert m.decode_step_seconds(100000) > m.decode_step_seconds(0) > 0
    # From DRAM a long prefix always pays.
    assert m.break_even_tokens(8192, "dram") <= 8192


def test_default_path_is_the_shipped_file():
    path = ptstore.CostModel.default_profiles_path()
    assert path.endswith("profiles.toml")
    assert ptstore.CostModel.load(path, gpu="h200").profile == ptstore.CostModel.load(gpu="h200").profile


def test_plan_loads_a_dram_prefix():
    m = ptstore.CostModel.load(gpu="h100-80g")
    plan = m.plan(4096, [(4000, "dram")])
    assert type(plan).__module__ == "ptstore"
    assert plan.load_tokens == 4000 and not plan.recompute
    assert plan.load_s == pytest.approx(m.load_seconds(4000 * 131072, "dram"))
    assert plan.compute_s == pytest.approx(m.prefill_seconds(4096, 4000))
    assert plan.total_s == pytest.approx(plan.load_s + plan.compute_s)
    assert plan.total_s < m.prefill_seconds(4096)
    # Nothing cached: recompute everything.
    none = m.plan(4096)
    assert none.load_tokens == 0 and none.recompute and none.load_s == 0
    assert none.compute_s == pytest.approx(m.prefill_seconds(4096))
    # Two runs: the DRAM run and the remote one both load.
    two = m.plan(8192, [(2048, "dram"), (6144, "rma")])
    assert two.load_tokens == 6144
    assert "LoadPlan(load_tokens=6144" in repr(two)


def test_plan_recomputes_over_an_absurdly_slow_path(tmp_path):
    # 1 KB/s and a second per transfer: recomputing any prefix is cheaper.
    slow = ptstore.CostModel.load(write_profiles(tmp_path, bw=1e-6, rtt=1e6), model="m", gpu="g")
    plan = slow.plan(4096, [(4000, "dram")])
    assert plan.load_tokens == 0 and plan.recompute
    assert plan.compute_s == pytest.approx(slow.prefill_seconds(4096))
    assert slow.break_even_tokens(4096, "dram") == 4097  # never
    # The same profile with fast paths loads.
    fast = ptstore.CostModel.load(write_profiles(tmp_path, "fast.toml", bw=10.0, rtt=10), model="m", gpu="g")
    assert fast.plan(4096, [(4000, "dram")]).load_tokens == 4000
    # A fast DRAM run then a slow run: only the DRAM run loads.
    mixed = write_profiles(tmp_path, "mixed.toml", bw=1000.0, rtt=1, tcp=(1e-6, 1e6))
    mm = ptstore.CostModel.load(mixed, model="m", gpu="g")
    assert mm.plan(4096, [(2048, "dram"), (4000, "tcp")]).load_tokens == 2048
    assert mm.plan(4096, [(2048, "dram"), (4000, "rma")]).load_tokens == 4000


def test_errors_are_clear(tmp_path):
    with pytest.raises(ptstore.NotFound, match=r"no profile for model mistral-7b on rtx-4090 .*"
                                               r"it has mistral-7b/a100-80g, mistral-7b/h100-80g, mistral-7b/h200"):
        ptstore.CostModel.load(gpu="rtx-4090")
    with pytest.raises(ptstore.NotFound, match="no profile for model llama"):
        ptstore.CostModel.load(model="llama")
    with pytest.raises(ptstore.NotFound, match="cannot read the profiles file"):
        ptstore.CostModel.load(str(tmp_path / "missing.toml"))
    bad = tmp_path / "bad.toml"
    bad.write_text(profile_text().replace("kv_bytes_per_token = 131072\n", ""))
    with pytest.raises(ptstore.InvalidArgument, match="kv_bytes_per_token"):
        ptstore.CostModel.load(str(bad), model="m", gpu="g")
    m = ptstore.CostModel.load(gpu="h100-80g")
    with pytest.raises(ptstore.InvalidArgument, match="unknown load path 'nvme'.*'dram', 'ssd', 'rma' or 'tcp'"):
        m.load_seconds(1, "nvme")
    with pytest.raises(ptstore.InvalidArgument, match="unknown load path"):
        m.plan(100, [(50, "disk")])
    with pytest.raises(ptstore.InvalidArgument, match="growing end_token"):
        m.plan(100, [(64, "dram"), (32, "rma")])
    assert isinstance(ptstore.NotFound("x"), LookupError)  # the builtin base still catches it


def test_plan_for_a_location():
    m = ptstore.CostModel.load(gpu="h100-80g")
    loc = ptstore.PrefixLocation(4096, [(2048, 1, [1, 2]), (4096, 2, [2])])
    assert loc and loc.held_by(1) == 2048 and loc.held_by(2) == 4096 and loc.held_by(3) == 0
    assert loc.spans == [(2048, 1, [1, 2]), (4096, 2, [2])]
    assert m.plan_for(loc, 1, 8192) == m.plan(8192, [(2048, "dram"), (4096, "rma")])
    assert m.plan_for(loc, 2, 8192) == m.plan(8192, [(4096, "dram")])
    assert not ptstore.PrefixLocation()


# ------------------------------------------------------------------ locate_prefix and advise


def save_prompt(client, ns, layout, n, seed):
    toks = tokens(n, seed)
    client.save(ns, toks, as_kv(kv_bits(toks, layout)[: layout.whole_tokens(n)], layout, "numpy"))
    return toks


def test_locate_prefix_after_a_save(client, make_ns):
    ns, layout = make_ns()
    toks = save_prompt(client, ns, layout, 42, seed=1)  # 10 whole blocks of 4: 40 tokens stored
    loc = client.locate_prefix(ns, toks)
    assert type(loc).__module__ == "ptstore"
    assert loc.matched_tokens == 40 and loc
    me = client.node_id
    assert loc.spans and loc.spans[-1][0] == 40
    assert all(owner == me and me in nodes for _, owner, nodes in loc.spans)
    assert loc.held_by(me) == 40
    assert "matched_tokens=40" in repr(loc)
    # A longer prompt with the same start matches the stored part; another prompt misses.
    longer = np.concatenate([toks, tokens(20, seed=2)])
    assert client.locate_prefix(ns, longer).matched_tokens == 40
    miss = client.locate_prefix(ns, tokens(40, seed=3))
    assert miss.matched_tokens == 0 and miss.spans == [] and not miss
    # Lists work as token sequences too; no namespace is NotFound.
    assert client.locate_prefix(ns, [int(t) for t in toks[:20]]).matched_tokens == 20
    with pytest.raises(ptstore.NotFound):
        client.locate_prefix("no-such-namespace", toks)


def test_advise_loads_a_local_prefix(client, make_ns):
    ns, layout = make_ns()
    toks = save_prompt(client, ns, layout, 400, seed=4)
    model = ptstore.CostModel.load(gpu="h100-80g")
    prompt = np.concatenate([toks, tokens(100, seed=5)])
    matched = client.lookup(ns, prompt).matched_tokens
    assert matched == 400
    plan = client.advise(ns, prompt, model)
    assert plan.load_tokens == matched
    assert plan == model.plan(len(prompt), [(400, "dram")])  # all of it held by this node: the dram path
    assert client.advise(ns, prompt, model, remote_path="tcp") == plan
    # A miss, or no such namespace, plans a full recompute.
    miss = client.advise(ns, tokens(500, seed=6), model)
    assert miss.load_tokens == 0 and miss.compute_s == pytest.approx(model.prefill_seconds(500))
    assert client.advise("no-such-namespace", prompt, model).recompute
    # Tokens already on the GPU are neither loaded nor charged: the plan
    # weighs the rest of the stored prefix against computing it.
    part = client.advise(ns, prompt, model, gpu_tokens=256)
    assert part == model.plan(len(prompt), [(400, "dram")], gpu_tokens=256)
    assert part.load_tokens == 400 and part.load_s < plan.load_s
    covered = client.advise(ns, prompt, model, gpu_tokens=400)
    assert covered.load_tokens == 400 and covered.load_s == 0
    with pytest.raises(ValueError, match="gpu_tokens"):
        client.advise(ns, prompt, model, gpu_tokens=-1)


def test_advise_recomputes_over_a_slow_profile(client, make_ns, tmp_path):
    ns, layout = make_ns()
    toks = save_prompt(client, ns, layout, 400, seed=7)
    slow = ptstore.CostModel.load(write_profiles(tmp_path, bw=1e-6, rtt=1e6), model="m", gpu="g")
    plan = client.advise(ns, toks, slow)
    assert plan.load_tokens == 0 and plan.recompute


def test_advise_errors(client, make_ns):
    ns, layout = make_ns()
    model = ptstore.CostModel.load()
    with pytest.raises(ptstore.InvalidArgument, match="remote_path must be 'rma' or 'tcp'"):
        client.advise(ns, tokens(8, seed=8), model, remote_path="dram")
    with pytest.raises(TypeError):
        client.advise(ns, tokens(8, seed=8), "h100-80g")
    other = ptstore.Client(client.socket)
    other.close()
    with pytest.raises(ptstore.Unavailable, match="closed"):
        other.advise(ns, tokens(8, seed=8), model)


def test_advise_releases_the_gil(client, make_ns):
    """Threads advising at once all finish (each call releases the GIL during its request)."""
    ns, layout = make_ns()
    toks = save_prompt(client, ns, layout, 64, seed=9)
    model = ptstore.CostModel.load()
    results, errors = [], []

    def run():
        try:
            for _ in range(50):
                results.append(client.advise(ns, toks, model).load_tokens)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and len(results) == 200 and set(results) == {64}
