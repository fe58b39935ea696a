"""Every node's holdings rebuilt from its KV-event stream alone agree exactly with what `ptstore-ls -w` reports
(docs/kv-events.md), after a random workload on a real 3-node cluster: saves, loads that keep replicas, SSD
spills and fills (small arenas), removals, a dropped namespace, a node killed (SIGKILL) and restarted on its SSD
tier (a new incarnation), and a subscriber that drops out and catches up by replay. Events are decoded into the
classes of vLLM's own vllm/distributed/kv_events.py (the snapshot at $PTSTORE_VLLM_SRC)."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
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

from conftest import as_kv, kv_bits, tokens  # noqa: E402


def kv(p, layout):
    return as_kv(kv_bits(p, layout), layout, "numpy")
from kv_events_helper import NodeView, endpoints  # noqa: E402

BLOCK = 4
NODES = 3
MEDIA = {"dram": {"CPU"}, "ssd": {"STORAGE"}, "dram+ssd": {"CPU", "STORAGE"}}
SEED = int(os.environ.get("PTSTORE_KV_EVENTS_SEED", "16"))
OPS = int(os.environ.get("PTSTORE_KV_EVENTS_OPS", "240"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self, root) -> None:
        self.root = root
        secret = root / "secret"
        secret.write_bytes(b"s" * 48)
        os.chmod(secret, 0o600)
        self.file = root / "cluster.toml"
        with open(self.file, "w") as f:
            f.write(f'secret_file = "{secret}"\n')
            for i in range(NODES):
                f.write(f'[[node]]\nid = {i}\naddress = "127.0.0.1:{free_port()}"\n')
        (root / "node.toml").write_text("[cluster]\nheartbeat_ms = 100\nrpc_timeout_ms = 2000\n")
        self.daemons = [None] * NODES

    def start(self, i: int):
        ssd = self.root / f"ssd{i}"
        ssd.mkdir(exist_ok=True)
        d = ptstore.testing.Daemon(arena_size="4MiB", extra_args=[
            "--node-id", str(i), "--cluster", str(self.file), "--config", str(self.root / "node.toml"),
            "--replicate-after", "1", "--ssd-dir", str(ssd), "--ssd-capacity", "128MiB", "--events",
            "--no-prefault"])
        self.daemons[i] = d.start()
        return d

    def kill(self, i: int) -> None:
        d = self.daemons[i]
        os.kill(d.pid, signal.SIGKILL)
        d._proc.wait()
        d.stop()

    def stop(self) -> None:
        for d in self.daemons:
            if d is not None:
                d.stop()


def listing(d, ns):
    """{key: (tokens, tier, holders)} of `ptstore-ls -R -w --json` on node `d`."""
    ls = os.environ.get("PTSTORE_LS") or "ptstore-ls"
    out = subprocess.run([ls, "-s", d.socket, "-R", "-w", "--json", ns], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        if "does not exist" in out.stderr:
            return {}
        raise AssertionError(out.stderr)
    j = json.loads(out.stdout)
    loc = j.get("locations", {})
    found = {}

    def walk(items):
        for it in items:
            found[it["key"]] = (it["tokens"], it["tier"], loc.get(it["key"], {}).get("nodes", []),
                                loc.get(it["key"], {}).get("owner"))
            walk(it.get("subtree", []))

    walk(j["increments"])
    return found


def expected(d, i, ns):
    """What node i holds of `ns` by ptstore-ls -w: {block hash of each increment's last block: media} and
    the count of blocks per media set."""
    ends, count = {}, Counter()
    for key, (toks, tier, holders, _) in listing(d, ns).items():
        if i not in holders:
            continue
        media = frozenset(MEDIA[tier])
        ends[int(key, 16) & ((1 << 64) - 1)] = set(media)
        count[media] += toks // BLOCK
    return ends, count


def agree(c, views, namespaces):
    problems = []
    for i, v in enumerate(views):
        v.poll(50)
        v.sync()
        for ns in namespaces:
            ends, count = expected(c.daemons[i], i, ns)
            held = v.held(ns)
            got = Counter(frozenset(m) for m in held.values())
            if got != count:
                problems.append(f"node {i} {ns}: blocks by media from events {dict(got)} != ptstore-ls {dict(count)}")
            for h, media in ends.items():
                if held.get(h) != media:
                    problems.append(f"node {i} {ns}: block {h:x} events {held.get(h)} != ptstore-ls {media}")
                    break
    return problems


def test_holdings_from_events_agree_with_ptstore_ls(tmp_path):
    rng = random.Random(SEED)
    c = Cluster(tmp_path)
    ctx = zmq.Context.instance()
    try:
        for i in range(NODES):
            c.start(i)
        views = []
        for i in range(NODES):
            pub, replay, _ = endpoints(c.daemons[i].log())
            views.append(NodeView(i, pub, replay, KV, ctx))
        time.sleep(0.3)
        for v in views:
            v.sync()
        layout = ptstore.Layout(layers=8, kv_heads=2, head_dim=16, dtype="bf16", block_tokens=BLOCK)  # 1 KiB per token
        names = ["ca", "cb"]
        for i in range(NODES):
            with ptstore.Client(c.daemons[i].socket, rpc_timeout_ms=20000) as cl:
                for n in names:
                    cl.create_namespace(n, layout)
        # Prompt families: a shared prefix and branches, so that saves split increments and loads cross nodes.
        stems = [tokens(rng.choice([64, 128, 256]) * BLOCK, 1000 + s) for s in range(6)]
        prompts = [np.concatenate([stems[rng.randrange(6)], tokens(rng.choice([16, 32, 96]) * BLOCK, 2000 + p)])
                   for p in range(40)]
        clients = [ptstore.Client(c.daemons[i].socket, rpc_timeout_ms=20000) for i in range(NODES)]
        dropped_out = False
        killed = False
        done = Counter()
        for op in range(OPS):
            i = rng.randrange(NODES)
            ns = names[rng.randrange(2)] if op < OPS * 3 // 4 else "ca"
            p = prompts[rng.randrange(len(prompts))]
            r = rng.random()
            try:
                if r < 0.5:
                    clients[i].save(ns, p, kv(p, layout))
                elif r < 0.85:
                    out = as_kv(np.zeros((len(p), layout.bytes_per_token), dtype=np.uint8), layout, "numpy")
                    clients[i].load(ns, p, out)
                else:
                    clients[i].remove(ns, p)
                done[r < 0.5 and "save" or r < 0.85 and "load" or "remove"] += 1
            except ptstore.Error as e:  # NotFound for a removal of what is not stored, a peer restarting
                done["error " + type(e).__name__] += 1
            if op % 10 == 0:
                for v in views:
                    if not (dropped_out and v.node == 1):
                        v.poll(0)
            if op == OPS // 4:  # node 1's subscriber drops out
                views[1].close()
                dropped_out = True
            if op == OPS // 2:  # and comes back: what it missed comes by replay
                views[1].connect(views[1].pub_ep, views[1].replay_ep)
                time.sleep(0.2)
                views[1].sync()
                dropped_out = False
            if op == OPS * 5 // 8 and not killed:  # node 2 killed and restarted on its SSD tier
                clients[2].close()
                c.kill(2)
                c.start(2)
                pub, replay, _ = endpoints(c.daemons[2].log())
                views[2].close()
                views[2].connect(pub, replay)
                time.sleep(0.3)
                views[2].sync()
                clients[2] = ptstore.Client(c.daemons[2].socket, rpc_timeout_ms=20000)
                for n in names:
                    try:
                        clients[2].create_namespace(n, layout)
                    except ptstore.Error:
                        pass  # recovered from SSD
                killed = True
            if op == OPS * 3 // 4:  # namespace cb dropped on every node
                for cl in clients:
                    try:
                        cl.drop_namespace("cb")
                    except ptstore.Error:
                        pass
        for cl in clients:
            cl.close()
        print("operations:", dict(done), "held blocks:", [len(v.held("ca")) for v in views])
        assert done["save"] > OPS // 4 and done["load"] > OPS // 5, done
        assert views[1].replays >= 2 and views[2].restarts >= 1
        deadline = time.monotonic() + 30
        problems = agree(c, views, names)
        while problems and time.monotonic() < deadline:
            time.sleep(0.5)
            problems = agree(c, views, names)
        assert not problems, "\n".join(problems)
        total = sum(len(v.held("ca")) for v in views)
        assert total > 0, "the workload left something stored"
        assert any("STORAGE" in m for v in views for m in v.held("ca").values()), "spills happened"
        replicas = sum(1 for i in range(NODES) for (_, _, holders, owner) in listing(c.daemons[i], "ca").values()
                       if i in holders and owner != i)
        assert replicas > 0, "loads kept replicas"
    finally:
        c.stop()
