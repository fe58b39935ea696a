"""ptstored's KV-event stream (docs/kv-events.md) read as a router reads it: decoded into the event classes of
vLLM's own vllm/distributed/kv_events.py (the snapshot at $PTSTORE_VLLM_SRC, default ../shared/vllm-src), field by
field; holdings rebuilt from the stream alone agree with the node's index; spills, fills, removals and dropped
namespaces are events; replay answers gaps, a malformed replay request gets an error and changes nothing; a
stalled subscriber does not stop saves and recovers by replay; a restart is a new incarnation that begins with
AllBlocksCleared and announces what the SSD tier kept."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import urllib.error
import urllib.request

import msgpack
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
from kv_events_helper import END_SEQ, NodeView, decode_batch, endpoints, wait_until  # noqa: E402

BLOCK = 4
MASK = (1 << 64) - 1


def hkey(key_hex: str) -> int:
    """The int block hash of a chain key (docs/kv-events.md "Block hashes")."""
    return int(key_hex, 16) & MASK


@pytest.fixture()
def node(tmp_path):
    """A ptstored with KV events, an SSD tier and a small arena (saves spill), and its metrics port."""
    ssd = tmp_path / "ssd"
    ssd.mkdir()
    d = ptstore.testing.Daemon(arena_size="4MiB", extra_args=[
        "--events", "--ssd-dir", str(ssd), "--ssd-capacity", "256MiB", "--metrics-port", "auto", "--no-prefault"])
    d.start()
    yield d
    d.stop()


def metrics(d) -> dict:
    import re
    port = re.findall(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", d.log())[-1]
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("ptstore_kv_event") and " " in line:
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def make_ns(c, name, salt=""):
    layout = ptstore.Layout(layers=2, kv_heads=2, head_dim=16, dtype="bf16", block_tokens=BLOCK)
    c.create_namespace(name, layout, salt=salt)
    return layout


def index_blocks(c, ns):
    """(last-block hashes of every increment, total blocks) of the node's index."""
    nodes = c.list_tree(ns, recursive=True)
    return {hkey(n.key) for n in nodes}, sum(n.tokens // BLOCK for n in nodes)


def subscribe(d, node_id=0):
    pub, replay, _ = endpoints(d.log())
    v = NodeView(node_id, pub, replay, KV, zmq.Context.instance())
    time.sleep(0.3)  # ZMQ's slow joiner: what is published before the SUB is connected comes by replay
    v.sync()
    return v


def raw_batches(view, start=0):
    return [(s, msgpack.unpackb(p, raw=False)) for s, p in view.replay_from(start)]


def test_stream_decodes_into_vllm_classes(node):
    v = subscribe(node)
    inc = endpoints(node.log())[2]
    first = raw_batches(v)[0]
    assert first[0] == inc << 32, "the stream starts at counter 0 of its incarnation"
    assert first[1][1] == [["AllBlocksCleared"]], "and with AllBlocksCleared"
    with ptstore.Client(node.socket) as c:
        layout = make_ns(c, "fmt")
        a = tokens(8 * BLOCK, 1)
        c.save("fmt", a, kv(a, layout))
        b = np.concatenate([a[:4 * BLOCK], tokens(4 * BLOCK, 2)])
        c.save("fmt", b, kv(b, layout))
        keys = {n.start_token: n for n in c.list_tree("fmt", recursive=True)}
        t0 = time.time()
        wait_until(lambda: v.poll(100) >= 0 and len(v.held("fmt")) == 12, what="12 blocks")
    # The raw encoding: msgspec's array_like, tag=True, omit_defaults=True (trailing defaults only).
    got = [b for s, b in raw_batches(v) if b[1] and b[1][0][0] == "BlockStored"]
    # Two saves, at least two BlockStored events: in one batch or two (the publisher batches what is
    # queued, so a busy machine can put both saves' events in one).
    assert sum(1 for b in got for e in b[1] if e[0] == "BlockStored") >= 2, got
    batch = got[0]
    assert len(batch) == 3 and isinstance(batch[0], float) and batch[2] == 0, batch  # [ts, events, dp rank]
    assert abs(batch[0] - t0) < 60
    ev = batch[1][0]
    # vLLM's BlockStored fields in declaration order (msgspec's array order), read from the snapshot itself.
    from kv_events_helper import struct_fields
    names = [n for n, _ in struct_fields(KV.BlockStored)]
    defaults = dict(struct_fields(KV.BlockStored))
    assert names[-4:] == ["extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window"], names
    assert all(defaults[n] is None for n in names[-4:]), "trailing fields default to None (omit_defaults drops them)"
    at = {n: 1 + i for i, n in enumerate(names)}  # position in the tagged array
    assert ev[0] == "BlockStored"
    assert len(ev) == at["kv_cache_spec_kind"] + 1, \
        "tag + fields up to kv_cache_spec_kind: the sliding window (None for a full-attention layout) is left out"
    assert ev[at["extra_keys"]] is None and isinstance(ev[at["group_idx"]], int)
    assert ev[at["kv_cache_spec_kind"]] == "full_attention"
    assert isinstance(ev[at["block_size"]], int) and isinstance(ev[at["token_ids"]], list)
    # Field by field, in vLLM's classes.
    stored = [e for s, p in v.replay_from(0) for e in decode_batch(p, KV).events if isinstance(e, KV.BlockStored)]
    full, tail = stored[0], stored[1]
    assert isinstance(full, KV.BlockStored) and isinstance(full, KV.KVCacheEvent)
    assert full.block_size == BLOCK and full.lora_id is None and full.medium == "CPU"
    assert full.lora_name == "fmt" and full.extra_keys is None
    assert full.parent_block_hash is None, "a prompt's first block has no parent"
    assert full.token_ids == [int(x) for x in a]
    assert len(full.block_hashes) == 8 and len(set(full.block_hashes)) == 8
    assert full.kv_cache_spec_kind == "full_attention" and full.kv_cache_spec_sliding_window is None
    # b shares 4 blocks: the split's upper half ends at block 3, whose key is the tail's parent.
    upper = keys[0]
    assert full.block_hashes[3] == hkey(upper.key)
    assert full.block_hashes[7] == hkey(keys[4 * BLOCK].key) or full.block_hashes[7] in {hkey(n.key) for n in keys.values()}
    assert tail.parent_block_hash == full.block_hashes[3]
    assert tail.token_ids == [int(x) for x in b[4 * BLOCK:]] and len(tail.block_hashes) == 4
    assert tail.group_idx == full.group_idx
    # A removal and a dropped namespace are BlockRemoved events, in vLLM's class.
    with ptstore.Client(node.socket) as c:
        c.remove("fmt", b)
        wait_until(lambda: v.poll(100) >= 0 and len(v.held("fmt")) == 8, what="the removal")
        c.drop_namespace("fmt")
        wait_until(lambda: v.poll(100) >= 0 and len(v.held("fmt")) == 0, what="the drop")
    removed = [e for s, p in v.replay_from(0) for e in decode_batch(p, KV).events if isinstance(e, KV.BlockRemoved)]
    assert removed and all(e.medium in ("CPU", "STORAGE") for e in removed)
    assert set(removed[0].block_hashes) == set(tail.block_hashes)
    assert removed[0].group_idx == full.group_idx


def spec_kinds():
    """vLLM's KVCacheSpecKind values, from the snapshot's own vllm/v1/kv_cache_interface.py (read as text: the
    module needs torch and more to import)."""
    import ast
    src = os.path.join(str(standins.vllm_src()), "vllm", "v1", "kv_cache_interface.py")
    tree = ast.parse(open(src).read())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "KVCacheSpecKind":
            return {t.targets[0].id: t.value.value for t in node.body if isinstance(t, ast.Assign)}
    raise AssertionError("no KVCacheSpecKind in " + src)


@pytest.mark.parametrize("groups, kind, window", [
    ([("window", 1024)], "SLIDING_WINDOW", 1024),
    ([("window", 64), ("window", 64)], "SLIDING_WINDOW", 64),
    ([("latent", 0)], "MLA_ATTENTION", None),
    ([("full", 0), ("window", 128)], "UNKNOWN", None),
    ([("window", 64), ("window", 128)], "SLIDING_WINDOW", None),
    ([("full", 0), ("state", 0)], "UNKNOWN", None),
])
def test_cache_spec_fields_follow_the_layout(node, groups, kind, window):
    """kv_cache_spec_kind / kv_cache_spec_sliding_window of a namespace's BlockStored, as vLLM's
    get_kv_cache_spec_kind / get_kv_cache_spec_sliding_window give them for a group of these specs."""
    G = ptstore.LayoutGroup
    made = []
    for k, w in groups:
        if k == "window":
            made.append(G("window", 2, kv_heads=2, head_dim=16, dtype="bf16", window=w))
        elif k == "latent":
            made.append(G("latent", 2, head_dim=32))
        elif k == "state":
            made.append(G("state", 2, state_bytes=256))
        else:
            made.append(G("full", 2, kv_heads=2, head_dim=16))
    layout = ptstore.Layout.from_groups(made, block_tokens=BLOCK)
    v = subscribe(node)
    with ptstore.Client(node.socket) as c:
        c.create_namespace("spec", layout)
        p = tokens(4 * BLOCK, 7)
        c.save("spec", p, np.zeros((len(p), layout.bytes_per_token), dtype=np.uint8))  # (tokens, bytes per token)
        wait_until(lambda: v.poll(100) >= 0 and len(v.held("spec")) == 4, what="4 blocks")
    raw = [e for s, b in raw_batches(v) for e in b[1] if e[0] == "BlockStored"]
    assert len(raw) == 1
    # omit_defaults: the sliding window (last) is written only when it is not None.
    assert len(raw[0]) == 12 if window is not None else 11, raw[0]
    stored = [e for s, p in v.replay_from(0) for e in decode_batch(p, KV).events if isinstance(e, KV.BlockStored)]
    assert stored[0].kv_cache_spec_kind == spec_kinds()[kind]
    assert stored[0].kv_cache_spec_sliding_window == window


MEDIA = {"dram": {"CPU"}, "ssd": {"STORAGE"}, "dram+ssd": {"CPU", "STORAGE"}}


def index_media(c, ns):
    """From the node's own listing: {last-block hash: media} of every increment and the count of blocks per
    media set (its tier: dram, ssd or both)."""
    from collections import Counter
    ends, count = {}, Counter()
    for n in c.list_tree(ns, recursive=True):
        media = frozenset(MEDIA[n.tier])
        ends[hkey(n.key)] = set(media)
        count[media] += n.tokens // BLOCK
    return ends, count


def agrees(v, c, ns):
    from collections import Counter
    v.poll(50)
    ends, count = index_media(c, ns)
    held = v.held(ns)
    return Counter(frozenset(m) for m in held.values()) == count and all(held.get(h) == m for h, m in ends.items())


def test_holdings_follow_spills_fills_and_removals(node):
    v = subscribe(node)
    with ptstore.Client(node.socket) as c:
        layout = make_ns(c, "tiers")
        prompts = [tokens(256 * BLOCK, 100 + i) for i in range(32)]  # 256 KiB each: the 4 MiB arena spills
        for p in prompts:
            c.save("tiers", p, kv(p, layout))
        wait_until(lambda: agrees(v, c, "tiers"), what="holdings after the saves")
        media = list(v.held("tiers").values())
        assert any(m == {"STORAGE"} for m in media), "spills are STORAGE events, freed DRAM copies CPU removals"
        assert any("CPU" in m for m in media)
        # Loads fill the first prompts back from SSD: CPU again.
        out = as_kv(np.zeros((len(prompts[0]), layout.bytes_per_token), dtype=np.uint8), layout, "numpy")
        for p in prompts[:3]:
            assert c.load("tiers", p, out) == len(p)
        wait_until(lambda: agrees(v, c, "tiers"), what="holdings after the fills")
        for p in prompts[::3]:
            c.remove("tiers", p)
        wait_until(lambda: agrees(v, c, "tiers"), what="holdings after the removals")
    assert metrics(node)["ptstore_kv_events_dropped_total"] == 0


def test_replay_answers_and_a_malformed_request_changes_nothing(node):
    v = subscribe(node)
    with ptstore.Client(node.socket) as c:
        layout = make_ns(c, "rp")
        for i in range(5):
            p = tokens(8 * BLOCK, 200 + i)
            c.save("rp", p, kv(p, layout))
    wait_until(lambda: v.poll(100) >= 0 and len(v.held("rp")) == 40, what="40 blocks")
    before = v.replay_from(0)
    seqs = [s for s, _ in before]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert len(seqs) >= 2 and v.replay_from(seqs[1]) == before[1:], "a replay from a seq sends the batches from it on"
    assert v.replay_from(seqs[-1] + 1) == [], "and nothing past the last one"
    bad = zmq.Context.instance().socket(zmq.DEALER)
    bad.setsockopt(zmq.LINGER, 0)
    bad.connect(v.replay_ep)
    try:
        for request in ([b"", b"\x00\x01"], [b"", b"12345678", b"x"], [b"not empty", b"\x00" * 8], [b""]):
            bad.send_multipart(request)
            assert bad.poll(10000), request
            frames = bad.recv_multipart()
            assert len(frames) == 3 and frames[0] == b"", frames
            assert int.from_bytes(frames[1], "big", signed=True) == END_SEQ
            assert frames[2].startswith(b"error: "), frames[2]
    finally:
        bad.close(0)
    assert v.replay_from(0) == before, "nothing changed"
    m = metrics(node)
    assert m["ptstore_kv_event_replay_errors_total"] == 4
    assert m["ptstore_kv_events_dropped_total"] == 0


def test_a_stalled_subscriber_does_not_stop_saves_and_recovers_by_replay(tmp_path):
    # A PUB high-water mark of 16 messages: a subscriber that reads nothing loses messages, never the saves.
    # One event per batch: the high-water mark counts messages, and on a busy machine the publisher fills
    # its batches (up to batch_events, 256 by default), so 16 messages held every event of the saves below
    # and the stalled subscriber lost nothing (seen under load: no gap after 21302 more saves).
    cfg = tmp_path / "events.toml"
    cfg.write_text("[events]\nenabled = true\nhwm = 16\nbatch_events = 1\n")
    d = ptstore.testing.Daemon(arena_size="96MiB", extra_args=["--config", str(cfg), "--metrics-port", "auto",
                                                               "--no-prefault"]).start()
    try:
        pub, replay, _ = endpoints(d.log())
        ctx = zmq.Context.instance()
        stalled = ctx.socket(zmq.SUB)
        stalled.setsockopt(zmq.RCVHWM, 1)
        stalled.setsockopt(zmq.RCVBUF, 4096)
        stalled.setsockopt(zmq.SUBSCRIBE, b"")
        stalled.connect(pub)
        v = subscribe(d)
        with ptstore.Client(d.socket) as c:
            layout = ptstore.Layout(layers=1, kv_heads=1, head_dim=8, dtype="fp16", block_tokens=BLOCK)
            c.create_namespace("slow", layout)  # 32 bytes per token: many events, little KV
            for i in range(1500):
                p = tokens(256 * BLOCK, 300 + i)
                c.save("slow", p, kv(p, layout))  # never waits for the subscriber that reads nothing
                if i % 50 == 0:
                    v.poll(0)  # the live one reads as it goes
            # At a high-water mark of 16 the live one can lose messages too on a busy machine: it catches up
            # by replay (a gap closes at the next message; sync closes a lost tail), as any subscriber does.
            wait_until(lambda: v.sync() is None and agrees(v, c, "slow"), what="the live subscriber")
            # The stalled one now reads what reached it: gaps, which replays close.
            late = NodeView(0, pub, replay, KV, ctx)
            late.sub.close(0)
            late.sub = stalled
            wait_until(lambda: late.poll(200) >= 0 and late.batches > 0, what="the stalled subscriber's messages")
            while late.poll(200):
                pass
            # It lost the tail at the high-water mark: the next message it gets shows the gap. The drain
            # above can stop while its socket still holds a backlog (the publisher's pipe to it full): the
            # next saves' messages are then dropped too, so save until a message shows the gap.
            deadline = time.monotonic() + 30
            i = 0
            while late.gaps == 0 and time.monotonic() < deadline:
                p = tokens(4 * BLOCK, 9000 + i)
                c.save("slow", p, kv(p, layout))
                i += 1
                late.poll(200)
            assert late.gaps >= 1, f"the stalled subscriber saw no gap after {i} more saves"
            late.sync()
            wait_until(lambda: v.sync() is None and agrees(v, c, "slow"), what="the live subscriber, again")
            assert late.held("slow") == v.held("slow") and agrees(late, c, "slow")
        assert metrics(d)["ptstore_kv_events_dropped_total"] == 0
    finally:
        d.stop()


def test_restart_is_a_new_incarnation_that_announces_what_ssd_kept(tmp_path):
    ssd = tmp_path / "ssd"
    ssd.mkdir()
    args = ["--events", "--ssd-dir", str(ssd), "--ssd-capacity", "64MiB", "--no-prefault"]
    d = ptstore.testing.Daemon(arena_size="16MiB", extra_args=args).start()
    try:
        v = subscribe(d)
        with ptstore.Client(d.socket) as c:
            layout = make_ns(c, "rs")
            for i in range(4):
                p = tokens(8 * BLOCK, 400 + i)
                c.save("rs", p, kv(p, layout))
        wait_until(lambda: v.poll(100) >= 0 and len(v.held("rs")) == 32, what="32 blocks")
        inc0 = v.incarnation
        d.stop()  # persists to SSD at shutdown
        d = ptstore.testing.Daemon(arena_size="16MiB", extra_args=args).start()
        pub, replay, inc1 = endpoints(d.log())
        assert inc1 > inc0
        v.close()
        v.connect(pub, replay)
        v.sync()
        assert v.restarts == 1 and v.incarnation == inc1
        first = v.replay_from(0)[0]
        assert first[0] == inc1 << 32 and decode_batch(first[1], KV).events[0].__class__ is KV.AllBlocksCleared
        held = v.held("rs")
        assert len(held) == 32 and all("STORAGE" in m for m in held.values())
    finally:
        d.stop()


def test_excluded_namespaces_publish_nothing_and_stay_out_after_a_restart(tmp_path):
    """[events] exclude and --events-exclude: a namespace that matches makes no event (saves, removals, a drop,
    the announcement after a restart); the others are exact as ever."""
    ssd = tmp_path / "ssd"
    ssd.mkdir()
    cfg = tmp_path / "events.toml"
    cfg.write_text('[events]\nenabled = true\nexclude = ["scratch-*"]\n')
    args = ["--config", str(cfg), "--events-exclude", "private", "--ssd-dir", str(ssd), "--ssd-capacity", "64MiB",
            "--no-prefault"]
    d = ptstore.testing.Daemon(arena_size="16MiB", extra_args=args).start()
    try:
        assert "namespaces matching 'scratch-*' publish nothing" in d.log()
        v = subscribe(d)
        with ptstore.Client(d.socket) as c:
            names = ["kept", "scratch-a", "scratch-b", "private", "private2"]
            layouts = {n: make_ns(c, n) for n in names}
            for i, n in enumerate(names):
                for j in range(3):
                    p = tokens(8 * BLOCK, 600 + 10 * i + j)
                    c.save(n, p, kv(p, layouts[n]))
            c.remove("scratch-a", tokens(8 * BLOCK, 610))
            c.drop_namespace("scratch-b")
            wait_until(lambda: agrees(v, c, "kept") and agrees(v, c, "private2"), what="kept and private2")
            assert len(v.held("kept")) == 24 and len(v.held("private2")) == 24
            published = {e.lora_name for _, b in v.replay_from(0) for e in decode_batch(b, KV).events
                         if isinstance(e, KV.BlockStored)}
            assert published == {"kept", "private2"}, published
        d.stop()  # persists to SSD at shutdown
        d = ptstore.testing.Daemon(arena_size="16MiB", extra_args=args).start()
        pub, replay, _ = endpoints(d.log())
        v.close()
        v.connect(pub, replay)
        v.sync()
        with ptstore.Client(d.socket) as c:
            assert len(c.list_tree("scratch-a", recursive=True)) == 2, "the quiet namespace is still held"
            wait_until(lambda: agrees(v, c, "kept"), what="kept after the restart")
        assert {ns for ns, _ in v.blocks} == {"kept", "private2"}, "the announcement skips excluded namespaces"
    finally:
        d.stop()


def post_raw(d, path, body: bytes, content_type=None):
    import re
    port = re.findall(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", d.log())[-1]
    headers = {"Content-Type": content_type} if content_type else {}
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers.get("Content-Type"), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), e.read()


def post(d, path, body: bytes):
    st, _, raw = post_raw(d, path, body)
    return st, raw.decode()


def post_msgpack(d, path, body: dict):
    """As Mooncake's conductor clients ask: a msgpack body, a msgpack answer."""
    import msgpack
    st, ctype, raw = post_raw(d, path, msgpack.packb(body), "application/msgpack")
    assert ctype == "application/msgpack", (st, ctype, raw)
    return st, msgpack.unpackb(raw, raw=False, strict_map_key=False)


def check_upstream_shape(j, rank="0"):
    """The answer's maps, field by field, as the upstream structs declare them.
    instances.<id>: Mooncake's PackCacheHitResult (kvcache-ai/Mooncake
    dev/conductor@19ffa6e4 mooncake-conductor/src/kvevent/event_manager.cpp
    L666-697; CacheHitResult in include/conductor/prefixindex/prefix_indexer.h
    L48-63) {longest_matched, dp, rank_matches, gpu, cpu, disk}, ints,
    cumulative gpu <= cpu <= disk, longest_matched = disk; Dynamo's
    MooncakeOverlapSummary (ai-dynamo/dynamo lib/kv-router/src/services/
    overlap.rs@5ea3d18e) is the same less rank_matches. scores / tree_sizes:
    Dynamo's ScoreResponse (lib/kv-router/src/services/indexer/server.rs
    @47022ee4; tree_sizes from standalone_indexer/server.rs@bc258351):
    {"<worker id>": {"<dp rank>": int}}, decimal keys; frequencies: [int]."""
    assert all(k.isdigit() for k in j["instances"]), j  # the bare decimal node id, as Dynamo keys workers
    for key, m in j["instances"].items():
        assert set(m) == {"longest_matched", "gpu", "cpu", "disk", "dp", "rank_matches"}, m
        assert all(type(m[k]) is int for k in ("longest_matched", "gpu", "cpu", "disk")), m
        assert m["gpu"] == 0 and m["gpu"] <= m["cpu"] <= m["disk"] == m["longest_matched"], m
        assert m["dp"] == {rank: 0}, m  # dp is GPU tokens per rank upstream
        assert m["rank_matches"] == {rank: {"gpu": 0, "cpu": m["cpu"], "disk": m["disk"]}}, m
        if m["disk"]:
            assert j["scores"][key] == {rank: m["disk"]} and j["tree_sizes"][key] == {rank: m["disk"] // BLOCK}, j
        else:
            assert key not in j["scores"] and key not in j["tree_sizes"], j
    assert set(j["scores"]) <= set(j["instances"]) and set(j["tree_sizes"]) == set(j["scores"]), j
    assert type(j["frequencies"]) is list and all(type(f) is int for f in j["frequencies"]), j


def test_query_api_answers_longest_match_by_tier(node):
    import json
    with ptstore.Client(node.socket) as c:
        layout = make_ns(c, "q")
        doc = tokens(64 * BLOCK, 500)
        c.save("q", doc, kv(doc, layout))
        before = {n.key: (n.hits, n.atime_ns) for n in c.list_tree("q", recursive=True)}
        prompt = [int(x) for x in doc] + [int(x) for x in tokens(8 * BLOCK + 3, 501)]
        st, body = post(node, "/query", json.dumps({"model": "q", "token_ids": prompt, "lora_name": None}).encode())
        assert st == 200, body
        j = json.loads(body)
        assert j["model"] == "q" and j["block_size"] == BLOCK and j["local"] == 0 and j["cluster"] is False
        # All in DRAM: cpu and disk (cumulative, as upstream) both the whole match; keys are the bare node id.
        assert j["data"] == {"0": {"matched_tokens": 256, "L2": 256, "L3": 256}}
        assert j["instances"] == {"0": {"longest_matched": 256, "gpu": 0, "cpu": 256, "disk": 256, "dp": {"0": 0},
                                        "rank_matches": {"0": {"gpu": 0, "cpu": 256, "disk": 256}}}}, j
        assert j["scores"] == {"0": {"0": 256}} and j["tree_sizes"] == {"0": {"0": 256 // BLOCK}}, j
        assert j["frequencies"] == [1] * (256 // BLOCK) and j["unanswered"] == [], j
        check_upstream_shape(j)
        st, body = post(node, "/query", json.dumps({"model": "q", "token_ids": [1, 2, 3, 4, 5]}).encode())
        assert st == 200 and json.loads(body)["data"] == {}, body
        miss = json.loads(body)
        assert miss["instances"] == {"0": {"longest_matched": 0, "gpu": 0, "cpu": 0, "disk": 0, "dp": {"0": 0},
                                           "rank_matches": {"0": {"gpu": 0, "cpu": 0, "disk": 0}}}}, miss
        assert miss["scores"] == {} and miss["frequencies"] == [], miss
        check_upstream_shape(miss)

        # Mooncake's conductor client: msgpack, token_ids as an int array or a bin of LE int32
        # (event_manager.cpp L378-383, L400-601); the answer is msgpack and the same.
        import struct
        for ids in (prompt, struct.pack(f"<{len(prompt)}i", *prompt)):
            st, m = post_msgpack(node, "/query", {"model": "q", "token_ids": ids, "block_size": BLOCK,
                                                  "tenant_id": "default", "lora_name": "", "cache_salt": None})
            assert st == 200 and m == j, m
            check_upstream_shape(m)
        st, m = post_msgpack(node, "/query", {"model": "nope", "token_ids": prompt, "block_size": BLOCK})
        assert (st, m) == (200, {"instances": {}}), "Mooncake: an unknown context has no instances"
        st, m = post_msgpack(node, "/query", {"model": "q", "token_ids": prompt, "lora_id": 3.5})
        assert st == 400 and m["reason"] == "invalid_type" and m["field"] == "lora_id" and m["error"], m
        # Dynamo's current request: model_name, routing_group, tenant_id (server.rs@47022ee4 QueryRequest).
        st, body = post(node, "/query", json.dumps({"model_name": "q", "token_ids": prompt, "routing_group": "g",
                                                    "tenant_id": "t", "instance_id": "0"}).encode())
        d = json.loads(body)
        assert st == 200 and d["routing_group"] == "g" and d["tenant_id"] == "t", body
        assert d["instances"] == j["instances"] and d["scores"] == j["scores"], body
        for bad, code in ((b"not json", 400), (b"[]", 400), (b'{"token_ids": [1]}', 400),
                          (b'{"model": "q", "token_ids": [-1]}', 400), (b'{"model": "q", "token_ids": "1 2"}', 400),
                          (b'{"model": "q", "block_hashes": [1], "cache_salt": "s"}', 400),
                          (b'{"model": "nope", "token_ids": [1, 2, 3, 4]}', 404)):
            st, body = post(node, "/query_by_hash" if b"block_hashes" in bad else "/query", bad)
            assert st == code and "error" in json.loads(body), (bad, st, body)
            assert json.loads(body)["reason"], (bad, body)  # Mooncake's 400 body: error, reason, field
        after = {n.key: (n.hits, n.atime_ns) for n in c.list_tree("q", recursive=True)}
        assert after == before, "a query changes nothing"


@pytest.mark.parametrize("config, message", [
    ("[events]\nport = 70000\n", "events.port must be in [0, 65535]"),
    ("[events]\nport = 5000\nreplay_port = 5000\n", "must differ"),
    ("[events]\nblock_hash = \"sha\"\n", "is not \"int\" or \"bytes\""),
    ("[events]\nqueue = 5\n", "unknown key 'queue' in [events]"),
    ("[events]\nqueue_events = 0\n", "events.queue_events must be in"),
    ("[events]\nexclude = \"scratch-*\"\n", "events.exclude must be an array"),
    ("[events]\nbuffer_bytes = \"4KiB\"\n", "events.buffer_bytes must be in [1MiB, 16GiB]"),
    ("[events]\nexclude = [\"a\", 3]\n", "events.exclude must hold non-empty strings"),
])
def test_bad_events_config_is_refused_with_a_clear_message(tmp_path, config, message):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(config)
    d = ptstore.testing.Daemon(extra_args=["--config", str(cfg)])
    with pytest.raises(RuntimeError) as e:
        d.start(timeout=20)
    d.stop()
    assert message in str(e.value), str(e.value)
