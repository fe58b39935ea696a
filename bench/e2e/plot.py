#!/usr/bin/python3
"""Plots and tables of the end-to-end serving simulation's results.

Usage:
    /usr/bin/python3 bench/e2e/plot.py RESULTS.json [MORE.json ...] --out docs/results/e2e

Reads the JSON files the e2e driver writes ({"command", "config", "runs": [...]}, one run per
(experiment, workload, mode, policy, nodes, context_tokens, ...) point; times in seconds) and writes
into --out:

    seqlen_ttft.png     mean TTFT vs context tokens, one line per mode      (experiment "seqlen")
    seqlen_speedup.png  PTStore's TTFT speed-up over each other mode        (experiment "seqlen")
    seqlen_prefix_*.png the same two with locality routing                 (experiment "seqlen-prefix")
    scaling.png         per-node throughput and mean TTFT vs nodes          (experiment "scaling")
    policies.png        p50 and p99 TTFT per routing policy, per workload   (experiment "policies")
    workloads.png       mean TTFT per mode per workload                     (experiment "workloads")
    table.md            one Markdown table per experiment with every metric

A plot whose experiment is absent from the input is not written. Missing keys are tolerated: a run
without the value a plot needs is left out of that plot, and shows as "-" in the table. Runs that
repeat the same point (several files, repetitions) are averaged in the plots and listed each in the
table.
"""

import argparse
import json
import math
import os
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")  # no display: files only
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

MODES = ["no-reuse", "local", "no-replication", "ptstore"]
POLICIES = ["round-robin", "least-load", "session", "prefix"]
EXPERIMENTS = ["seqlen", "seqlen-prefix", "replication", "scaling", "policies", "workloads", "multiturn", "quick"]
WORKLOADS = ["wikiqa", "squad", "sharegpt", "loogle", "react"]
PTSTORE = "ptstore"


def get(run, *path):
    """run[path[0]][path[1]]... as a float, or None when absent or not a number."""
    v = run
    for key in path:
        if not isinstance(v, dict) or key not in v:
            return None
        v = v[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
        return None
    return float(v)


def ordered(values, preferred):
    """Distinct values, the known ones in their usual order first, then the rest sorted."""
    values = set(v for v in values if v is not None)
    return [v for v in preferred if v in values] + sorted(v for v in values if v not in preferred)


def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def load_runs(paths):
    """(runs, commands) of all files; a run is a dict (never None)."""
    runs, commands = [], []
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        if not isinstance(doc, dict):
            raise SystemExit(f"{path}: expected a JSON object with 'runs'")
        if doc.get("command"):
            commands.append(str(doc["command"]))
        for run in doc.get("runs") or []:
            if isinstance(run, dict):
                runs.append(run)
    return runs, commands


def of_experiment(runs, name):
    return [r for r in runs if r.get("experiment") == name]


def label_keys(runs, candidates):
    """The keys among candidates that vary across runs: what a series label must name."""
    return [k for k in candidates if len(set(str(r.get(k)) for r in runs)) > 1]


def series_label(run, keys):
    return " / ".join(str(run.get(k, "?")) for k in keys) or str(run.get("mode", "?"))


def series(runs, x_key, y_fn, label_fn):
    """{label: [(x, mean y)]} sorted by x; points without x or y are dropped."""
    acc = defaultdict(lambda: defaultdict(list))
    for r in runs:
        x, y = get(r, x_key), y_fn(r)
        if x is not None and y is not None:
            acc[label_fn(r)][x].append(y)
    return {lab: sorted((x, mean(ys)) for x, ys in pts.items()) for lab, pts in acc.items()}


def mode_sorted(labels):
    """Series labels ordered by their mode (the first part), as MODES lists them."""
    def key(lab):
        mode = lab.split(" / ")[0]
        return (MODES.index(mode) if mode in MODES else len(MODES), lab)
    return sorted(labels, key=key)


def ms(run, metric, stat):
    v = get(run, metric, stat)
    return None if v is None else v * 1e3


def context_ticks(ax, xs):
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs)
    ax.set_xticklabels([f"{int(x) // 1024}k" if x >= 1024 and x % 1024 == 0 else f"{int(x)}" for x in xs])
    ax.minorticks_off()


def save(fig, out, name, written):
    path = os.path.join(out, name)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    written.append(path)


def workload_groups(runs):
    """The workloads of runs in their usual order; None (last) when some run names none."""
    groups = ordered([r.get("workload") for r in runs], WORKLOADS)
    return groups + [None] if any(r.get("workload") is None for r in runs) else groups


def per_workload_axes(workloads, width=6.0, height=4.0):
    fig, axes = plt.subplots(1, len(workloads), figsize=(width * len(workloads), height), squeeze=False)
    return fig, list(axes[0])


def plot_seqlen_ttft(runs, out, written, experiment="seqlen"):
    runs = [r for r in of_experiment(runs, experiment) if get(r, "context_tokens") is not None]
    if not runs:
        return
    workloads = workload_groups(runs)
    keys = label_keys(runs, ["mode", "policy", "nodes"])
    fig, axes = per_workload_axes(workloads)
    for ax, wl in zip(axes, workloads):
        sel = [r for r in runs if r.get("workload") == wl]
        data = series(sel, "context_tokens", lambda r: ms(r, "ttft", "mean"), lambda r: series_label(r, keys))
        for lab in mode_sorted(data):
            xs, ys = zip(*data[lab])
            ax.plot(xs, ys, marker="o", label=lab)
        xs = sorted({x for pts in data.values() for x, _ in pts})
        if xs:
            context_ticks(ax, xs)
        ax.set_yscale("log")
        ax.set_xlabel("context tokens")
        ax.set_ylabel("mean TTFT (ms)")
        ax.set_title(f"TTFT vs sequence length ({wl})" if wl else "TTFT vs sequence length")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    save(fig, out, experiment.replace("-", "_") + "_ttft.png", written)


def plot_seqlen_speedup(runs, out, written, experiment="seqlen"):
    runs = [r for r in of_experiment(runs, experiment) if get(r, "context_tokens") is not None]
    if not any(r.get("mode") == PTSTORE for r in runs):
        return
    workloads = workload_groups(runs)
    fig, axes = per_workload_axes(workloads)
    for ax, wl in zip(axes, workloads):
        sel = [r for r in runs if r.get("workload") == wl]
        data = series(sel, "context_tokens", lambda r: ms(r, "ttft", "mean"), lambda r: r.get("mode"))
        base = dict(data.get(PTSTORE, []))
        for mode in mode_sorted(m for m in data if m != PTSTORE):
            pts = [(x, y / base[x]) for x, y in data[mode] if x in base and base[x] > 0]
            if pts:
                xs, ys = zip(*pts)
                ax.plot(xs, ys, marker="o", label=f"vs {mode}")
        if base:
            context_ticks(ax, sorted(base))
        ax.axhline(1.0, color="gray", linestyle="--", linewidth=1)
        ax.set_ylim(0, max([1.0] + [y for line in ax.get_lines() for y in line.get_ydata()]) * 1.3)
        ax.set_xlabel("context tokens")
        ax.set_ylabel("TTFT speed-up of PTStore (x)")
        ax.set_title(f"PTStore TTFT speed-up ({wl})" if wl else "PTStore TTFT speed-up")
        ax.grid(True, alpha=0.3)
        ax.legend()
    save(fig, out, experiment.replace("-", "_") + "_speedup.png", written)


def plot_scaling(runs, out, written):
    runs = [r for r in of_experiment(runs, "scaling") if get(r, "nodes")]
    if not runs:
        return
    keys = label_keys(runs, ["mode", "policy", "workload"])

    def label(r):
        return series_label(r, keys)

    def per_node(r):
        rps = get(r, "throughput_rps")
        return None if rps is None else rps / get(r, "nodes")

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4))
    for ax, fn, ylabel in ((a1, per_node, "throughput per node (req/s)"),
                           (a2, lambda r: ms(r, "ttft", "mean"), "mean TTFT (ms)")):
        data = series(runs, "nodes", fn, label)
        for lab in mode_sorted(data):
            xs, ys = zip(*data[lab])
            ax.plot(xs, ys, marker="o", label=lab)
        xs = sorted({x for pts in data.values() for x, _ in pts})
        ax.set_xticks(xs)
        ax.set_xlabel("nodes")
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        if data:
            ax.legend()
    a1.set_title("Per-node throughput vs nodes")
    a2.set_title("Mean TTFT vs nodes")
    save(fig, out, "scaling.png", written)


def grouped_bars(ax, groups, bars, value, ylabel, title):
    """Bars of value(group, bar) for each group on the x axis; None leaves a gap. The y axis is
    logarithmic when the values span more than 30x; the headroom on top keeps the legend off the bars."""
    width = 0.8 / max(1, len(bars))
    heights = []
    for i, bar in enumerate(bars):
        xs = [g + (i - (len(bars) - 1) / 2) * width for g in range(len(groups))]
        ys = [value(grp, bar) for grp in groups]
        pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
        if pts:
            ax.bar(*zip(*pts), width, label=bar)
            heights += [y for _, y in pts]
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(["-" if g is None else str(g) for g in groups])
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    positive = [h for h in heights if h > 0]
    if positive and max(positive) / min(positive) > 30:
        ax.set_yscale("log")
        ax.set_ylim(min(positive) / 2, max(positive) * 8)
    elif heights:
        ax.set_ylim(0, max(max(heights), 0) * 1.3 or 1)
    if heights:
        ax.legend(ncol=min(4, len(bars)), fontsize="small", loc="upper center")


def bar_value(runs, group_key, bar_fn, metric, stat):
    """value(group, bar) for grouped_bars: mean over the matching runs, in ms."""
    def value(group, bar):
        return mean([ms(r, metric, stat) for r in runs if r.get(group_key) == group and bar_fn(r) == bar])
    return value


def plot_policies(runs, out, written):
    runs = of_experiment(runs, "policies")
    if not runs:
        return
    workloads = workload_groups(runs)
    extra = label_keys(runs, ["mode", "nodes"])
    bar = lambda r: " / ".join([str(r.get("policy"))] + [str(r.get(k)) for k in extra])  # noqa: E731
    bars = sorted({bar(r) for r in runs},
                  key=lambda b: (POLICIES.index(b.split(" / ")[0]) if b.split(" / ")[0] in POLICIES else 99, b))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(max(10, 2.5 * len(workloads) * 2), 4))
    grouped_bars(a1, workloads, bars, bar_value(runs, "workload", bar, "ttft", "p50"), "p50 TTFT (ms)",
                 "p50 TTFT per routing policy")
    grouped_bars(a2, workloads, bars, bar_value(runs, "workload", bar, "ttft", "p99"), "p99 TTFT (ms)",
                 "p99 TTFT per routing policy")
    save(fig, out, "policies.png", written)


def plot_workloads(runs, out, written):
    runs = of_experiment(runs, "workloads")
    if not runs:
        return
    workloads = workload_groups(runs)
    modes = ordered([r.get("mode") for r in runs], MODES)
    fig, ax = plt.subplots(figsize=(max(8, 2 * len(workloads)), 4))
    grouped_bars(ax, workloads, modes, bar_value(runs, "workload", lambda r: r.get("mode"), "ttft", "mean"),
                 "mean TTFT (ms)", "Mean TTFT per mode and workload")
    save(fig, out, "workloads.png", written)


# The table: (header, function of a run giving the cell text).
def fmt_num(v, digits=1):
    return "-" if v is None else f"{v:,.{digits}f}"


def fmt_int(v):
    return "-" if v is None else f"{int(round(v)):,}"


def fmt_bytes(v):
    if v is None:
        return "-"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(v) >= scale:
            return f"{v / scale:.2f} {unit}"
    return f"{int(v)} B"


def fmt_text(v):
    return "-" if v is None else str(v).replace("|", "\\|")


COLUMNS = (
    [("workload", lambda r: fmt_text(r.get("workload"))),
     ("mode", lambda r: fmt_text(r.get("mode"))),
     ("policy", lambda r: fmt_text(r.get("policy"))),
     ("nodes", lambda r: fmt_int(get(r, "nodes"))),
     ("context", lambda r: fmt_int(get(r, "context_tokens"))),
     ("rate", lambda r: fmt_num(get(r, "rate"), 2)),
     ("requests", lambda r: fmt_int(get(r, "requests"))),
     ("gpu", lambda r: fmt_text(r.get("gpu"))),
     ("remote path", lambda r: fmt_text(r.get("remote_path"))),
     ("replicate after", lambda r: fmt_int(get(r, "replicate_after"))),
     ("save generated", lambda r: fmt_text({True: "yes", False: "no"}.get(r.get("save_generated"))))]
    + [(f"{m} {s} (ms)", (lambda m, s: lambda r: fmt_num(ms(r, m, s)))(m, s))
       for m in ("ttft", "ttft_warm", "jct", "tpot") for s in ("mean", "p50", "p99")]
    + [("req/s", lambda r: fmt_num(get(r, "throughput_rps"), 2)),
       ("duration (s)", lambda r: fmt_num(get(r, "duration_s"), 1)),
       ("token hit rate", lambda r: fmt_num(get(r, "token_hit_rate"), 3))]
    + [(f"hits {t}", (lambda t: lambda r: fmt_int(get(r, "hits", t)))(t)) for t in ("dram", "ssd", "remote", "miss")]
    + [(f"{b.replace('_', ' ')}", (lambda b: lambda r: fmt_bytes(get(r, "bytes", b)))(b))
       for b in ("loaded_local", "loaded_remote", "saved", "model_loaded")]
    + [("recomputed tokens", lambda r: fmt_int(get(r, "recomputed_tokens"))),
       ("loaded tokens", lambda r: fmt_int(get(r, "loaded_tokens")))]
)


def run_sort_key(r):
    def rank(v, known):
        return (known.index(v) if v in known else len(known), str(v))
    return (rank(r.get("workload"), WORKLOADS), get(r, "nodes") or 0, get(r, "context_tokens") or 0,
            rank(r.get("policy"), POLICIES), str(r.get("remote_path")), rank(r.get("mode"), MODES),
            -(get(r, "replicate_after") or 0), bool(r.get("save_generated")))


def write_table(runs, commands, out, written):
    lines = ["# End-to-end results", ""]
    if commands:
        lines += ["Command lines:", ""] + [f"- `{c}`" for c in commands] + [""]
    lines += ["Times in milliseconds; bytes in binary units. `-`: not reported by the run.", ""]
    for exp in ordered([r.get("experiment") for r in runs], EXPERIMENTS):
        sel = sorted(of_experiment(runs, exp), key=run_sort_key)
        lines += [f"## {exp}", "",
                  "| " + " | ".join(h for h, _ in COLUMNS) + " |",
                  "|" + "---|" * len(COLUMNS)]
        lines += ["| " + " | ".join(fn(r) for _, fn in COLUMNS) + " |" for r in sel]
        lines.append("")
    if not runs:
        lines.append("No runs in the input.")
    path = os.path.join(out, "table.md")
    with open(path, "w") as f:
        f.write("\n".join(lines).rstrip("\n") + "\n")
    written.append(path)


def main(argv=None):
    parser = argparse.ArgumentParser(description="Plot the e2e serving simulation's JSON results.")
    parser.add_argument("results", nargs="+", help="JSON files written by the e2e driver")
    parser.add_argument("--out", default="docs/results/e2e", help="directory for the PNGs and table.md")
    args = parser.parse_args(argv)
    runs, commands = load_runs(args.results)
    os.makedirs(args.out, exist_ok=True)
    written = []
    for plot in (plot_seqlen_ttft, plot_seqlen_speedup):
        for experiment in ("seqlen", "seqlen-prefix"):
            plot(runs, args.out, written, experiment)
    for plot in (plot_scaling, plot_policies, plot_workloads):
        plot(runs, args.out, written)
    write_table(runs, commands, args.out, written)
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
