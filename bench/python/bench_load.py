#!/usr/bin/env python3
"""Python load of a prefix into a torch tensor vs numpy.copyto of the same bytes (docs/benchmarks.md).

Starts a private ptstored (this build's, via ptstore.testing) unless given
--socket, saves a prefix of --tokens tokens of Mistral-7B KV (128 KiB per
token: 8192 tokens = 1 GiB), then times, interleaved, per repetition:

  numpy.copyto   the same bytes from a numpy array into the same torch tensor's
                 memory (its numpy view): the baseline;
  load (torch)   client.load(ns, tokens, tensor): pin, copy from the mapped
                 arena straight into the tensor, release;
  load (numpy)   client.load into a numpy array;
  pin + copy_to  with client.pin(...) as p: p.copy_to(tensor).

Every destination is 4 KiB-aligned and pre-faulted, and checked byte for byte
after the first load. Prints medians and the ratio load (torch) / copyto
(target >= 0.8). Exits non-zero on a wrong byte or a failed call, never on
slowness. --quick: 256 tokens (32 MiB), 3 repetitions (ctest).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time


def _import_ptstore():
    import importlib.util

    if importlib.util.find_spec("ptstore") is None:  # run from a checkout: use build/python
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        sys.path.insert(0, os.path.join(os.environ.get("PTSTORE_BUILD_DIR", os.path.join(root, "build")), "python"))
    try:
        import ptstore
        import ptstore.testing
    except ImportError as e:
        sys.exit(f"bench_load.py: cannot import ptstore ({e}): build the project (scripts/setup) and set "
                 f"PYTHONPATH=<build>/python (or PTSTORE_BUILD_DIR=<build>)")
    return ptstore


def aligned_empty(np, nbytes: int, align: int = 4096):
    """A writable uint8 numpy array of `nbytes` whose data starts on an `align` boundary."""
    raw = np.empty(nbytes + align, dtype=np.uint8)
    off = (-raw.__array_interface__["data"][0]) % align
    return raw[off:off + nbytes]


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{cpu}, {os.cpu_count()} cores, {mem:.1f} GiB RAM, Linux {platform.release()}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=8192, help="prefix tokens (Mistral-7B: 128 KiB each)")
    ap.add_argument("--reps", type=int, default=7, help="repetitions per method")
    ap.add_argument("--quick", action="store_true", help="256 tokens, 3 repetitions")
    ap.add_argument("--socket", help="use this running ptstored instead of starting one")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args()
    if args.quick:
        args.tokens, args.reps = 256, 3

    ptstore = _import_ptstore()
    import numpy as np
    import torch

    layout = ptstore.Layout.mistral()
    n = layout.whole_tokens(args.tokens)
    nbytes = n * layout.bytes_per_token
    say = (lambda *a: None) if args.json else print
    say(f"bench_load.py: Python load of a {nbytes / 2**30:.2f} GiB prefix ({n} tokens, {layout}) into a torch tensor"
        f" vs numpy.copyto of the same bytes")
    say(f"machine: {machine()}; python {platform.python_version()}, numpy {np.__version__}, torch {torch.__version__}")

    daemon = None
    if args.socket:
        socket = args.socket
    else:
        arena_mib = (nbytes >> 20) + 256
        daemon = ptstore.testing.Daemon(arena_size=f"{arena_mib}MiB").start()
        socket = daemon.socket
        say(f"started ptstored (pid {daemon.pid}, arena {arena_mib} MiB) on {socket}")
    try:
        t_setup = time.perf_counter()
        client = ptstore.Client(socket, client_name="bench_load.py")
        ns = f"bench-load-py-{os.getpid()}"
        client.create_namespace(ns, layout)
        tokens = np.random.default_rng(1).integers(0, 32000, size=n, dtype=np.uint32)

        # The KV: random bf16 bits in a 4 KiB-aligned numpy array, saved in
        # growing prefixes of 1024 tokens (only the new blocks travel).
        src = aligned_empty(np, nbytes).view(np.int16).reshape(layout.kv_shape(n))
        flat = src.reshape(-1).view(np.uint64)
        rng = np.random.default_rng(2)
        step = 1 << 22
        for i in range(0, flat.size, step):
            flat[i:i + step] = rng.integers(0, 2**63, size=min(step, flat.size - i), dtype=np.uint64)
        for k in range(1024, n + 1024, 1024):
            client.save(ns, tokens[:k], src[:min(k, n)])
        assert client.lookup(ns, tokens).matched_tokens == n, "the prefix is not stored whole"

        # Destinations: a torch tensor (its numpy view for copyto) and a numpy array, pre-faulted.
        dst = torch.empty(layout.kv_shape(n), dtype=torch.bfloat16)
        dst_np = dst.view(torch.int16).numpy()
        dst_np.fill(0)
        out_np = aligned_empty(np, nbytes).view(np.uint16).reshape(layout.kv_shape(n))
        out_np.fill(0)
        src_u16 = src.view(np.uint16)

        # First load of each kind: checked byte for byte (and warms everything up).
        if client.load(ns, tokens, dst) != n or not np.array_equal(dst_np, src):
            print("bench_load.py: WRONG BYTES in the load into a torch tensor", file=sys.stderr)
            return 1
        if client.load(ns, tokens, out_np) != n or not np.array_equal(out_np, src_u16):
            print("bench_load.py: WRONG BYTES in the load into a numpy array", file=sys.stderr)
            return 1
        with client.pin(ns, tokens) as p:
            dst_np.fill(0)
            if p.copy_to(dst) != n or not np.array_equal(dst_np, src):
                print("bench_load.py: WRONG BYTES in pin + copy_to", file=sys.stderr)
                return 1
        np.copyto(dst_np, src)
        say(f"setup (KV, save, checks; not timed): {time.perf_counter() - t_setup:.1f} s; client mapped: "
            f"{client.mapped}; buffers 4 KiB-aligned: src {src.__array_interface__['data'][0] % 4096 == 0}, "
            f"tensor {dst.data_ptr() % 4096 == 0} ({dst.data_ptr() % 64 == 0 and '64 B-aligned' or 'unaligned'})")

        def pin_copy():
            with client.pin(ns, tokens) as p:
                return p.copy_to(dst)

        # The machine's best copy of the same bytes from Python: torch's copy_
        # splits a large copy over its intra-op threads (issue 18's baseline:
        # the best memcpy with as many threads as the load may use).
        threads = os.cpu_count() or 1
        src_t = torch.from_numpy(src)
        dst_i16 = dst.view(torch.int16)

        def torch_copy(k):
            def run():
                torch.set_num_threads(k)
                dst_i16.copy_(src_t)
            return run

        methods = [
            ("numpy.copyto (baseline)", lambda: np.copyto(dst_np, src)),
            ("client.load into torch tensor", lambda: client.load(ns, tokens, dst)),
            ("client.load into numpy array", lambda: client.load(ns, tokens, out_np)),
            ("client.pin + copy_to (torch)", pin_copy),
            ("torch copy_, 1 thread", torch_copy(1)),
            (f"torch copy_, {threads} threads", torch_copy(threads)),
        ]
        times = {name: [] for name, _ in methods}
        for _ in range(args.reps):
            for name, fn in methods:
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
        if not np.array_equal(dst_np, src):
            print("bench_load.py: WRONG BYTES after the timed runs", file=sys.stderr)
            return 1

        base = statistics.median(times[methods[0][0]])
        rows = []
        for name, _ in methods:
            t = times[name]
            med = statistics.median(t)
            rows.append({"method": name, "median_gbps": nbytes / med / 1e9, "min_gbps": nbytes / max(t) / 1e9,
                         "max_gbps": nbytes / min(t) / 1e9, "median_ms": med * 1e3, "vs_copyto": base / med})
        ratio = rows[1]["vs_copyto"]
        best = max(rows[0]["median_gbps"], rows[4]["median_gbps"], rows[5]["median_gbps"])
        vs_best = rows[1]["median_gbps"] / best
        stats = client.stats()
        client.drop_namespace(ns)
        client.close()
        if args.json:
            print(json.dumps({"bytes": nbytes, "tokens": n, "reps": args.reps, "rows": rows,
                              "load_torch_vs_copyto": ratio, "target": 0.8,
                              "load_torch_vs_best_copy": vs_best, "target_vs_best": 0.9}, indent=2))
            return 0
        say(f"{args.reps} repetitions per method, interleaved\n")
        say(f"{'method':<34}{'median GB/s':>12}{'min GB/s':>10}{'max GB/s':>10}{'median ms':>11}{'vs copyto':>11}")
        say("-" * 88)
        for r in rows:
            say(f"{r['method']:<34}{r['median_gbps']:>12.2f}{r['min_gbps']:>10.2f}{r['max_gbps']:>10.2f}"
                f"{r['median_ms']:>11.1f}{r['vs_copyto']:>11.2f}")
        verdict = "met" if ratio >= 0.8 else "NOT met"
        if nbytes < 256 << 20:
            verdict += " (a prefix this small sits partly in the CPU caches: the ratio says little; run without --quick)"
        say(f"\nclient.load (torch) / numpy.copyto = {ratio:.2f} (target >= 0.80): {verdict}")
        say(f"client.load (torch) / the best copy above ({best:.2f} GB/s) = {vs_best:.2f} (target >= 0.90): "
            f"{'met' if vs_best >= 0.9 else 'MISSED'}")
        say(f"server: {stats.hits} hits, {stats.active_leases} active leases, {stats.pinned_bytes} B pinned after "
            f"the run")
        return 0
    finally:
        if daemon is not None:
            daemon.stop()


if __name__ == "__main__":
    sys.exit(main())
