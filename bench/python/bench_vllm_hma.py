#!/usr/bin/env python3
"""Bytes a load moves for hybrid sliding-window and Mamba models, against loading every layer whole.

Two vLLM engines (vLLM's own Scheduler, KVCacheManager with its hybrid manager, connector factory and worker
code: tests/python/vllm_src/engine.py, from the vLLM source at $PTSTORE_VLLM_SRC or ../shared/vllm-src) share
one real ptstored. Engine A serves a prompt and saves it; engine B serves the same prompt and loads it. The
figure is B's worker's bytes written into the paged caches (the full-attention group's blocks and the
sliding-window group's blocks vLLM keeps; a Mamba group's state of the last block) over the bytes of every
layer's K/V (and every block's state) of the loaded tokens (what a connector that ignores the groups moves,
and what PTStore moved before SupportsHMA), in the same run.

The layer counts, windows and block size are the models'; heads and head size are cut down (both groups have
the same per-token bytes per layer in these models, so the ratio does not depend on them) to keep the
stand-in model's oracle cheap. Nemotron-H's Mamba2 state and attention K/V are both cut by 128 (heads), so
that their ratio, and the block size vLLM picks for it (the attention page must hold a state: 1,280 tokens
in mamba_cache_mode all, Platform._align_hybrid_block_size), are the model's.

    PYTHONPATH=build/python /usr/bin/python3 bench/python/bench_vllm_hma.py          # ~1 min
    PYTHONPATH=build/python /usr/bin/python3 bench/python/bench_vllm_hma.py --quick  # ctest: one small model
"""

from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "python"))

def _pattern(p: str):
    """Nemotron-H's hybrid_override_pattern: M a Mamba2 layer, * attention, - an MLP (no cache)."""
    return [{"M": "state", "*": "full"}[c] for c in p if c != "-"]


# name -> (layer kinds, sliding window in tokens, engine options): each model's config.json
MODELS = {
    # gpt-oss-120b: 36 layers, sliding (128) and full attention alternating
    "gpt-oss-120b": (["window", "full"] * 18, 128, {}),
    # Gemma 3 27B: 62 layers, five sliding-window (1024) layers to every full-attention one
    "gemma-3-27b": ((["window"] * 5 + ["full"]) * 10 + ["window"] * 2, 1024, {}),
    # Nemotron-H 8B (vLLM's NemotronHConfig defaults): 24 Mamba2 layers (128 heads of 64, state 128, 8 groups,
    # conv 4; SSM state fp32), 4 attention layers (8 KV heads of 128, bf16); everything / 128
    "nemotron-h-8b": (_pattern("M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"), 0,
                      dict(block_size=1280, dtype="bf16", mamba_mode="all", num_blocks=64)),
    # small ones for the quick run
    "tiny-hybrid": (["window", "window", "window", "full"], 64, {}),
    "tiny-mamba": (["state", "full", "state", "full"], 0, dict(mamba_mode="all")),
}


def _nemotron_states():
    import torch

    # (conv kernel - 1, (128 * 64 + 2 * 8 * 128) / 128) bf16 and (128 / 128, 64, 128) fp32
    return ((3, 80), (1, 64, 128)), (torch.bfloat16, torch.float32)


def run(daemon_socket: str, name: str, kinds, window: int, tokens: int, chunk: int, options: dict) -> dict:
    from vllm_src import engine as E

    kw = dict(layer_kinds=kinds, window=window, kv_heads=1, head_size=8, block_size=16,
              num_blocks=(tokens // 16 + 8) * 8,  # room for every group's blocks of a prefill chunk
              max_num_batched_tokens=chunk,
              extra={"namespace": f"bench-hma-{os.getpid()}-{name}-{tokens}"})
    kw.update(options)
    if name.startswith("nemotron"):
        kw["states"] = _nemotron_states()
    a = E.Engine(daemon_socket, **kw)
    b = E.Engine(daemon_socket, **kw)
    try:
        doc = [1 + (i * 104729) % 31000 for i in range(tokens + 1)]
        a.saved(doc, max_tokens=1)
        r = b.add(doc, max_tokens=1)
        b.run()
        w = b.worker.connector.worker_side
        loaded = w.stats["loaded_tokens"]
        layout = w.layout
        whole = loaded // layout.block_tokens * layout.bytes_per_block
        groups = [g.kind for g in layout.groups] if layout.is_grouped else ["full"]
        out = {"model": name, "tokens": loaded, "groups": groups, "bytes_loaded": w.stats["loaded_bytes"],
               "bytes_whole": whole, "ratio": w.stats["loaded_bytes"] / whole if whole else float("nan"),
               "checked": b.worker.checked_tokens >= loaded, "request": r.request_id}
        return out
    finally:
        a.close()
        b.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="one small model, one length (ctest)")
    args = ap.parse_args()
    from vllm_src import standins

    if standins.vllm_src() is None:
        print(f"no vLLM source: set ${standins.ENV} (default ../shared/vllm-src)", file=sys.stderr)
        return 1 if os.environ.get("PTSTORE_VLLM_REQUIRED") == "1" else 77  # (ctest: skipped, unless required)
    import ptstore.testing
    from vllm_src import engine  # noqa: F401 - vLLM's import (with its stand-ins) before the watched runs

    cases = [("tiny-hybrid", 512), ("tiny-mamba", 512)] if args.quick else [
        ("gpt-oss-120b", 2048), ("gpt-oss-120b", 8000), ("gemma-3-27b", 2048), ("gemma-3-27b", 8000),
        ("nemotron-h-8b", 2560), ("nemotron-h-8b", 8000)]  # (vLLM here: 8192 max)
    print(f"{'model':<14} {'tokens':>6} {'bytes loaded':>13} {'every layer':>13} {'ratio':>7}")
    bad = 0
    with ptstore.testing.Daemon(arena_size="1GiB") as d:
        for name, n in cases:
            kinds, window, options = MODELS[name]
            with standins.watch():
                r = run(d.socket, name, kinds, window, n, chunk=2048 if not args.quick else 128, options=options)
            print(f"{r['model']:<14} {r['tokens']:>6} {r['bytes_loaded']:>13} {r['bytes_whole']:>13} "
                  f"{r['ratio']:>7.3f}")
            bs = int(options.get("block_size", 16))
            if not r["checked"] or r["tokens"] != n // bs * bs or not r["ratio"] < 1.0:
                print(f"  wrong: {r}", file=sys.stderr)
                bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
