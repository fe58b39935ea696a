"""`rm -r` on a real PTStore mount (this build's ptstore-fuse) becomes BlockRemoved events (docs/kv-events.md): a
subscriber decoding ptstored's stream into vLLM's own event classes sees exactly the blocks of the removed
subtree go, in the medium they were announced in, each once, and nothing else; `rm -r` of the namespace removes
the rest. Needs root, /dev/fuse and $PTSTORE_FUSE (set by ctest); skipped otherwise."""

from __future__ import annotations

import os
import subprocess
import time
from collections import Counter

import numpy as np
import pytest
import zmq

import ptstore
import ptstore.testing
from vllm_src import standins
from vllm_src.testing import require_vllm_src

require_vllm_src()
KV = standins.import_vllm(["vllm.distributed.kv_events"])["vllm.distributed.kv_events"]

from conftest import as_kv, kv_bits, mount_skip_reason, mounted, tokens  # noqa: E402
from kv_events_helper import NodeView, decode_batch, endpoints, wait_until  # noqa: E402

pytestmark = pytest.mark.skipif(bool(mount_skip_reason()), reason=mount_skip_reason() or "ok")

BLOCK = 4


def kv(p, layout):
    return as_kv(kv_bits(p, layout), layout, "numpy")


@pytest.fixture()
def node():
    d = ptstore.testing.Daemon(arena_size="16MiB", extra_args=["--events", "--no-prefault"])
    d.start()
    yield d
    d.stop()


@pytest.fixture()
def mount(node):
    with mounted(node.socket, prefix="ptstore-mount-kv-") as mnt:
        yield mnt


def events_since(view, seq, cls):
    """The events of class `cls` in the batches from `seq` on (by replay)."""
    return [e for s, p in view.replay_from(seq) for e in decode_batch(p, KV).events if isinstance(e, cls)]


def find_dir(root, name):
    for dirpath, dirnames, _ in os.walk(root):
        if name in dirnames:
            return os.path.join(dirpath, name)
    raise AssertionError(f"no directory {name} below {root}")


def test_rm_r_on_the_mount_is_block_removed_of_exactly_the_subtree(node, mount):
    pub, replay, _ = endpoints(node.log())
    v = NodeView(0, pub, replay, KV, zmq.Context.instance())
    time.sleep(0.3)  # ZMQ's slow joiner; the rest comes by replay
    v.sync()
    with ptstore.Client(node.socket) as c:
        layout = ptstore.Layout(layers=2, kv_heads=2, head_dim=16, dtype="bf16", block_tokens=BLOCK)
        c.create_namespace("rm", layout)
        a = tokens(8 * BLOCK, 31)
        b = np.concatenate([a[:4 * BLOCK], tokens(4 * BLOCK, 32)])  # shares a's first 4 blocks
        other = tokens(6 * BLOCK, 33)
        stored = {}
        for name, p in (("a", a), ("b", b), ("other", other)):
            start = v.next_seq
            c.save("rm", p, kv(p, layout))
            want = {"a": 8, "b": 12, "other": 18}[name]
            wait_until(lambda: v.poll(100) >= 0 and len(v.held("rm")) == want, what=f"{want} blocks after {name}")
            got = events_since(v, start, KV.BlockStored)
            stored[name] = {h for e in got for h in e.block_hashes}
        assert len(stored["a"]) == 8 and len(stored["b"]) == 4 and len(stored["other"]) == 6
        # The increment a and b share: the top-level one with two continuations.
        common = [n for n in c.list_tree("rm", recursive=True) if n.children == 2]
        assert len(common) == 1, [(n.key, n.children) for n in c.list_tree("rm", recursive=True)]
        path = find_dir(os.path.join(mount, "rm"), common[0].key)

        before = v.next_seq
        r = subprocess.run(["rm", "-r", path], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        wait_until(lambda: v.poll(100) >= 0 and len(v.held("rm")) == 6, what="the subtree's blocks gone")
        removed = events_since(v, before, KV.BlockRemoved)
        assert removed and all(e.medium == "CPU" for e in removed), removed
        counts = Counter(h for e in removed for h in e.block_hashes)
        assert set(counts) == stored["a"] | stored["b"], "exactly the blocks of the removed subtree"
        assert all(n == 1 for n in counts.values()), "each block removed once"
        assert not events_since(v, before, KV.BlockStored), "a removal stores nothing"
        assert set(v.held("rm")) == stored["other"], "the rest stays held"
        assert c.lookup("rm", other).matched_tokens == len(other) and c.lookup("rm", a).matched_tokens == 0

        # rm -r of the namespace: the rest goes too, and the namespace with it.
        before = v.next_seq
        r = subprocess.run(["rm", "-r", os.path.join(mount, "rm")], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        wait_until(lambda: v.poll(100) >= 0 and not v.held("rm"), what="the namespace's blocks gone")
        counts = Counter(h for e in events_since(v, before, KV.BlockRemoved) for h in e.block_hashes)
        assert set(counts) == stored["other"] and all(n == 1 for n in counts.values())
        assert "rm" not in [n.name for n in c.list_namespaces()]
