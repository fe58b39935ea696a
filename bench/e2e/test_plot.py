"""Tests of bench/e2e/plot.py: run it on generated results, check the files it writes.

Run: /usr/bin/python3 -m pytest bench/e2e/test_plot.py
"""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("matplotlib")

PLOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plot.py")
PNGS = ["seqlen_ttft.png", "seqlen_speedup.png", "scaling.png", "policies.png", "workloads.png"]
MODES = ["no-reuse", "local", "no-replication", "ptstore"]
POLICIES = ["round-robin", "least-load", "session", "prefix"]


def make_run(experiment, workload="wikiqa", mode="ptstore", policy="prefix", nodes=4, context=4096, ttft=0.5):
    """One run as the driver writes it; ttft in seconds, the other metrics derived from it."""
    return {
        "experiment": experiment, "workload": workload, "mode": mode, "policy": policy,
        "nodes": nodes, "context_tokens": context, "rate": 2.0, "requests": 200, "gpu": "h100-80g",
        "ttft": {"mean": ttft, "p50": ttft * 0.8, "p99": ttft * 3},
        "jct": {"mean": ttft + 2, "p50": ttft + 1.8, "p99": ttft + 5},
        "tpot": {"mean": 0.02, "p50": 0.019, "p99": 0.04},
        "throughput_rps": 1.9 * nodes, "duration_s": 105.0,
        "token_hit_rate": 0.0 if mode == "no-reuse" else 0.8,
        "hits": {"dram": 120, "ssd": 10, "remote": 30, "miss": 40},
        "bytes": {"loaded_local": 3 << 30, "loaded_remote": 1 << 29, "saved": 5 << 30, "model_loaded": 0},
        "recomputed_tokens": 12345, "loaded_tokens": 67890,
    }


def sample_runs():
    slow = {"no-reuse": 8.0, "local": 4.0, "no-replication": 2.0, "ptstore": 1.0}
    runs = []
    for ctx in (1024, 2048, 4096, 8192):
        runs += [make_run("seqlen", mode=m, context=ctx, ttft=slow[m] * ctx / 8192) for m in MODES]
    for nodes in (1, 2, 4, 8):
        runs += [make_run("scaling", mode=m, nodes=nodes, ttft=slow[m] * (1 + nodes / 8)) for m in MODES]
    for wl in ("wikiqa", "sharegpt"):
        runs += [make_run("policies", workload=wl, policy=p, ttft=0.3 + i * 0.1) for i, p in enumerate(POLICIES)]
    for wl in ("wikiqa", "squad", "sharegpt", "loogle", "react"):
        runs += [make_run("workloads", workload=wl, mode=m, ttft=slow[m] / 4) for m in MODES]
    runs.append(make_run("quick"))
    return runs


def run_plot(tmp_path, docs):
    inputs = []
    for i, doc in enumerate(docs):
        path = tmp_path / f"results{i}.json"
        path.write_text(json.dumps(doc))
        inputs.append(str(path))
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, PLOT, *inputs, "--out", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return out


def table_sections(text):
    """{experiment: [data rows]} of table.md."""
    sections, current = {}, None
    for line in text.splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
            sections[current] = []
        elif current and line.startswith("| ") and not line.startswith("| workload |"):
            sections[current].append(line)
    return sections


def test_writes_every_plot_and_the_table(tmp_path):
    runs = sample_runs()
    # Two input files: their runs are concatenated.
    out = run_plot(tmp_path, [{"command": "e2e --experiment all", "config": {"gpu": "h100-80g"}, "runs": runs[:30]},
                              {"command": "e2e --again", "config": {}, "runs": runs[30:]}])
    for png in PNGS:
        path = out / png
        assert path.exists(), png
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
    text = (out / "table.md").read_text()
    sections = table_sections(text)
    assert list(sections) == ["seqlen", "scaling", "policies", "workloads", "quick"]
    for exp in sections:
        assert len(sections[exp]) == sum(r["experiment"] == exp for r in runs), exp
    assert "`e2e --experiment all`" in text and "`e2e --again`" in text
    # Units: ttft 0.5 s -> 500.0 ms; bytes in GiB; header columns present.
    quick = sections["quick"][0]
    assert "| 500.0 |" in quick and "3.00 GiB" in quick and "| 0.800 |" in quick
    header = next(line for line in text.splitlines() if line.startswith("| workload |"))
    for col in ("ttft mean (ms)", "jct p99 (ms)", "tpot p50 (ms)", "token hit rate", "hits remote",
                "loaded remote", "model loaded"):
        assert col in header, col


def test_absent_experiments_are_skipped(tmp_path):
    out = run_plot(tmp_path, [{"runs": [r for r in sample_runs() if r["experiment"] in ("workloads", "quick")]}])
    assert (out / "workloads.png").exists()
    for png in ("seqlen_ttft.png", "seqlen_speedup.png", "scaling.png", "policies.png"):
        assert not (out / png).exists(), png
    assert list(table_sections((out / "table.md").read_text())) == ["workloads", "quick"]


def test_missing_keys_are_tolerated(tmp_path):
    runs = [
        {"experiment": "seqlen", "mode": "ptstore", "context_tokens": 1024, "ttft": {"mean": 0.1}},
        {"experiment": "seqlen", "mode": "local", "context_tokens": 1024, "ttft": {"mean": 0.3}},
        {"experiment": "seqlen", "mode": "local"},                      # no x, no y
        {"experiment": "scaling", "mode": "ptstore", "nodes": 2},       # no metrics at all
        {"experiment": "policies", "policy": "session", "ttft": {"p50": None, "p99": "n/a"}},
        {"experiment": "workloads"},
        {"mode": "ptstore"},                                            # no experiment
        "not a run",
    ]
    out = run_plot(tmp_path, [{"runs": runs}, {"command": None}])
    assert (out / "seqlen_ttft.png").exists()
    assert (out / "seqlen_speedup.png").exists()
    text = (out / "table.md").read_text()
    sections = table_sections(text)
    assert len(sections["seqlen"]) == 3
    assert "| - |" in sections["scaling"][0]


def test_empty_input_writes_a_table(tmp_path):
    out = run_plot(tmp_path, [{"command": "e2e", "runs": []}])
    assert "No runs in the input." in (out / "table.md").read_text()
    assert not any((out / png).exists() for png in PNGS)
