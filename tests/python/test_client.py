"""ptstore.Client against a real ptstored: round trips with numpy and torch, partial hits, pins, errors."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

import ptstore
from ptstore import _ptstore
from conftest import BACKENDS, BLOCK, DTYPES, as_kv, empty, kv_bits, raw, tokens


# ---------------------------------------------------------------- round trips

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trip(client, make_ns, dtype, backend):
    ns, layout = make_ns(dtype)
    toks = tokens(64, seed=1)
    bits = kv_bits(toks, layout)
    kv = as_kv(bits, layout, backend)
    r = client.save(ns, toks, kv)
    assert (r.matched_tokens, r.stored_tokens, r.new_bytes) == (0, 64, 64 * layout.bytes_per_token)

    out = empty(layout, 64, backend)
    assert client.load(ns, toks, out) == 64
    assert np.array_equal(raw(out), bits)

    # Saving it again stores nothing; the same prompt as a list and as a torch tensor load the same.
    again = client.save(ns, list(map(int, toks)), kv)
    assert (again.matched_tokens, again.stored_tokens, again.new_bytes) == (64, 0, 0)
    out2 = empty(layout, 64, backend)
    assert client.load(ns, toks.astype(np.int64), out2) == 64
    assert np.array_equal(raw(out2), bits)


def test_round_trip_mistral_shape_with_torch_tensors(client, make_ns):
    torch = pytest.importorskip("torch")
    ns, layout = make_ns("bf16", layers=4, kv_heads=8, head_dim=128, block_tokens=16)
    toks = torch.arange(100, 164, dtype=torch.int64)  # token ids as a torch tensor too
    kv = torch.randn(layout.kv_shape(64)).to(torch.bfloat16)
    client.save(ns, toks, kv)
    out = torch.zeros_like(kv)
    assert client.load(ns, toks, out) == 64
    assert torch.equal(out, kv)
    # Any (tokens, ...) shape with the layout's elements per token works.
    flat = torch.zeros(64, layout.elements_per_token, dtype=torch.bfloat16)
    assert client.load(ns, toks, flat) == 64
    assert torch.equal(flat.view(kv.shape), kv)


def test_numpy_save_torch_load_same_bytes(client, make_ns):
    pytest.importorskip("torch")
    ns, layout = make_ns("bf16")
    toks = tokens(32, seed=2)
    bits = kv_bits(toks, layout)
    client.save(ns, toks, as_kv(bits, layout, "numpy"))  # bf16 as its uint16 bits
    out = empty(layout, 32, "torch")
    assert client.load(ns, toks, out) == 32
    assert np.array_equal(raw(out), bits)


def test_empty_kv_helpers(client, make_ns):
    ns, layout = make_ns("fp16")
    a = ptstore.empty_kv(layout, 8)
    assert a.shape == (8, 2, 2, 2, 16) and a.dtype == np.float16
    toks = tokens(8, seed=3)
    a[...] = 1.5
    client.save(ns, toks, a)
    with client.pin(ns, toks) as p:
        assert np.array_equal(p.to_numpy(), a)
        torch = pytest.importorskip("torch")
        t = p.to_torch()
        assert t.dtype == torch.float16 and torch.equal(t, torch.from_numpy(a))


# ------------------------------------------------------------- partial hits

@pytest.mark.parametrize("backend", BACKENDS)
def test_partial_hit_loads_only_the_stored_prefix(client, make_ns, backend):
    ns, layout = make_ns("bf16")
    stored = tokens(40, seed=10)
    client.save(ns, stored, as_kv(kv_bits(stored, layout), layout, backend))

    # A longer prompt sharing the first 24 tokens (6 blocks), then different.
    longer = np.concatenate([stored[:24], tokens(30, seed=11)])
    bits = kv_bits(longer, layout)
    assert client.lookup(ns, longer).matched_tokens == 24
    out = empty(layout, len(longer), backend)
    assert client.load(ns, longer, out) == 24
    got = raw(out)
    assert np.array_equal(got[:24], bits[:24])
    assert (got[24:] == 0x5A).all(), "a load must not touch the tokens past the loaded prefix"

    # The whole stored prompt plus more: 40 tokens load.
    more = np.concatenate([stored, tokens(9, seed=12)])
    out = empty(layout, len(more), backend)
    assert client.load(ns, more, out) == 40


def test_partial_last_block_is_ignored(client, make_ns):
    ns, layout = make_ns("fp32")
    toks = tokens(10, seed=20)  # 2 whole blocks of 4 + 2 tokens
    bits = kv_bits(toks, layout)
    r = client.save(ns, toks, as_kv(bits, layout, "numpy"))  # kv of all 10 tokens is accepted
    assert r.stored_tokens == 8
    r = client.save(ns, toks, as_kv(bits[:8], layout, "numpy"))  # ... and of the 8 whole-block ones
    assert r.stored_tokens == 0 and r.matched_tokens == 8
    assert client.lookup(ns, toks).matched_tokens == 8
    out = empty(layout, 10, "numpy")
    assert client.load(ns, toks, out) == 8
    assert np.array_equal(raw(out)[:8], bits[:8]) and (raw(out)[8:] == 0x5A).all()
    # Fewer tokens than a block: nothing to save, nothing to load.
    assert client.save(ns, toks[:3], as_kv(bits[:3], layout, "numpy")).stored_tokens == 0
    assert client.load(ns, toks[:3], empty(layout, 3, "numpy")) == 0


def test_miss_is_not_an_error(client, make_ns):
    ns, layout = make_ns()
    toks = tokens(16, seed=30)
    out = empty(layout, 16, "numpy")
    assert client.load(ns, toks, out) == 0
    assert (raw(out) == 0x5A).all()
    res = client.lookup(ns, toks)
    assert res.matched_tokens == 0 and not res and res.extents == []
    with client.pin(ns, toks) as p:
        assert p.tokens == 0 and not p.pinned
        assert p.to_numpy().shape == (0, 2, 2, 2, 16)


def test_lookup_extents_and_tree(client, make_ns):
    ns, layout = make_ns()
    a = tokens(16, seed=40)
    b = np.concatenate([a[:8], tokens(8, seed=41)])  # branches after 2 blocks
    client.save(ns, a, as_kv(kv_bits(a, layout), layout, "numpy"))
    client.save(ns, b, as_kv(kv_bits(b, layout), layout, "numpy"))
    res = client.lookup(ns, b)
    assert res.matched_tokens == 16 and res
    assert res.bytes == 16 * layout.bytes_per_token == sum(e.length for e in res.extents)
    assert len(res.extents) == 2  # the shared 2 blocks, then b's own increment

    top = client.list_tree(ns)
    assert len(top) == 1 and top[0].tokens == 8 and top[0].children == 2 and len(top[0].key) == 32
    below = client.list_tree(ns, top[0].key)
    assert sorted(n.start_token for n in below) == [8, 8]
    assert len(client.list_tree(ns, recursive=True)) == 3
    inc = client.get_increment(ns, below[0].key)
    assert inc.node.key == below[0].key and len(inc.tokens) == 8 and inc.tokens.dtype == np.uint32

    info = client.get_namespace(ns)
    assert info.name == ns and info.layout == layout and info.prefixes == 3
    assert ns in [n.name for n in client.list_namespaces()]

    removed = client.remove(ns, b)
    assert removed.nodes == 1 and removed.bytes == 8 * layout.bytes_per_token
    assert client.lookup(ns, b).matched_tokens == 8
    assert client.remove_key(ns, top[0].key).nodes == 2
    assert client.lookup(ns, a).matched_tokens == 0


def test_salted_namespaces_do_not_share(client, make_ns):
    name = "py-salted"
    layout = ptstore.Layout(2, 2, 16, "bf16", 4)
    info = client.create_namespace(name, layout, salt=b"tenant-a")
    try:
        assert info.salted
        assert client.create_namespace(name, layout, salt=b"tenant-a").name == name  # exist_ok
        with pytest.raises(ptstore.AlreadyExists):
            client.create_namespace(name, layout.replace(head_dim=32), salt=b"tenant-a")
        with pytest.raises(ptstore.AlreadyExists):
            client.create_namespace(name, layout, salt=b"tenant-a", exist_ok=False)
    finally:
        client.drop_namespace(name)


# --------------------------------------------------------------------- pins

def test_pin_context_manager_releases(client, make_ns, daemon):
    ns, layout = make_ns()
    toks = tokens(32, seed=50)
    bits = kv_bits(toks, layout)
    client.save(ns, toks, as_kv(bits, layout, "numpy"))
    before = client.stats()
    assert before.active_leases == 0 and before.pinned_bytes == 0

    with client.pin(ns, toks) as p:
        assert p.pinned and p.tokens == 32 and p.bytes == 32 * layout.bytes_per_token
        assert p.layout == layout and p.namespace == ns
        assert all(e.length > 0 for e in p.extents)
        held = client.stats()
        assert held.active_leases == 1 and held.pinned_bytes >= p.bytes
        assert np.array_equal(raw(p.to_numpy()), bits)
        out = empty(layout, 40, "numpy")
        assert p.copy_to(out) == 32
        assert np.array_equal(raw(out)[:32], bits) and (raw(out)[32:] == 0x5A).all()
        out = empty(layout, 8, "numpy")
        assert p.copy_to(out, tokens=8) == 8
        assert np.array_equal(raw(out), bits[:8])
        with pytest.raises(ptstore.InvalidArgument, match="out holds 8 tokens"):
            p.copy_to(out)
        # A second pin of the same prefix while the first is held.
        with client.pin(ns, toks) as q:
            assert q.tokens == 32 and client.stats().active_leases == 2
        assert client.stats().active_leases == 1
    assert not p.pinned
    after = client.stats()
    assert after.active_leases == 0 and after.pinned_bytes == 0
    with pytest.raises(ptstore.InvalidArgument, match="no longer pinned"):
        p.copy_to(empty(layout, 32, "numpy"))
    p.release()  # a second release does nothing

    # release() before the end of the block, and a pin dropped without release.
    with client.pin(ns, toks) as p:
        p.release()
        assert client.stats().active_leases == 0
    p = client.pin(ns, toks)
    assert client.stats().active_leases == 1
    del p
    assert client.stats().active_leases == 0


def test_copy_from_arena_reads_another_clients_pin(client, make_ns, daemon):
    """A pin's extents are offsets in the arena every client of the ptstored maps (the same arena_id): another
    client copies any byte ranges of them without a request of its own (the vLLM connector's pin_hits)."""
    ns, layout = make_ns()
    toks = tokens(32, seed=51)
    bits = kv_bits(toks, layout)
    client.save(ns, toks, as_kv(bits, layout, "numpy"))
    flat = bits.reshape(-1).view(np.uint8)
    with ptstore.Client(daemon.socket) as other, client.pin(ns, toks) as p:
        assert other.arena_id == client.arena_id != 0
        ext = [(e.arena_offset, e.length) for e in p.extents]
        out = np.zeros(p.bytes, dtype=np.uint8)
        pieces, pos = [], 0
        for off, length in ext:
            pieces.append((off, length, pos))
            pos += length
        assert other.copy_from_arena(pieces, out) == p.bytes
        assert np.array_equal(out, flat)
        # Two ranges of the first extent, to other places; the rest of `out` is left as it was.
        off, length = ext[0]
        out2 = np.full(64, 0x5A, dtype=np.uint8)
        assert other.copy_from_arena([(off + 3, 5, 0), (off + 40, 2, 60)], out2) == 7
        assert np.array_equal(out2[:5], flat[3:8]) and np.array_equal(out2[60:62], flat[40:42])
        assert (out2[5:60] == 0x5A).all() and (out2[62:] == 0x5A).all()
        with pytest.raises(ptstore.InvalidArgument, match="piece 1 .* outside the arena"):
            other.copy_from_arena([(off, 1, 0), (1 << 50, 1, 0)], out2)
        with pytest.raises(ptstore.InvalidArgument, match="piece 0 .* outside the destination"):
            other.copy_from_arena([(off, 8, 60)], out2)
        assert (out2[5:60] == 0x5A).all()  # nothing was copied
        with pytest.raises(ptstore.InvalidArgument, match=r"\(n, 3\)"):
            other.copy_from_arena(np.zeros((2, 2), dtype=np.uint64), out2)
    with ptstore.Client(daemon.socket, want_mapping=False) as c:
        assert c.arena_id == 0
        with pytest.raises(ptstore.PermissionDenied, match="mapping"):
            c.copy_from_arena([(0, 1, 0)], np.zeros(1, dtype=np.uint8))


def test_grouped_layouts_take_the_blocks_bytes(client):
    """A grouped namespace's KV buffers are its blocks' bytes (uint8, a whole number of tokens)."""
    layout = ptstore.Layout.from_groups([ptstore.LayoutGroup("full", 2, kv_heads=2, head_dim=16, dtype="bf16"),
                                         ptstore.LayoutGroup("window", 1, kv_heads=1, head_dim=8, dtype="fp16",
                                                             window=8)], block_tokens=BLOCK)
    ns = f"py-{os.getpid()}-grouped"
    client.create_namespace(ns, layout)
    try:
        toks = tokens(24, seed=52)
        rng = np.random.default_rng(52)
        kv = rng.integers(0, 256, size=(24 // BLOCK, layout.bytes_per_block), dtype=np.uint8)
        assert client.save(ns, toks, kv).stored_tokens == 24
        out = np.zeros((24, layout.bytes_per_token), dtype=np.uint8)  # any shape of a whole number of tokens
        assert client.load(ns, toks, out) == 24
        assert np.array_equal(out.reshape(-1), kv.reshape(-1))
        with client.pin(ns, toks) as p:
            got = p.to_numpy()
            assert got.dtype == np.uint8 and np.array_equal(got.reshape(-1), kv.reshape(-1))
        with pytest.raises(TypeError, match="grouped"):
            client.load(ns, toks, np.zeros((24, layout.bytes_per_token // 2), dtype=np.uint16))
        with pytest.raises(ptstore.InvalidArgument, match="whole number of tokens"):
            client.load(ns, toks, np.zeros(layout.bytes_per_token * 3 + 1, dtype=np.uint8))
    finally:
        client.drop_namespace(ns)


def test_pin_increment(client, make_ns):
    ns, layout = make_ns()
    a = tokens(16, seed=60)
    b = np.concatenate([a[:8], tokens(8, seed=61)])
    client.save(ns, a, as_kv(kv_bits(a, layout), layout, "numpy"))
    client.save(ns, b, as_kv(kv_bits(b, layout), layout, "numpy"))
    leaf = [n for n in client.list_tree(ns, recursive=True) if n.start_token == 8][0]
    with client.pin_increment(ns, leaf.key) as p:
        assert p.tokens == 8 and p.bytes == 8 * layout.bytes_per_token
    with client.pin_increment(ns, leaf.key, whole_prefix=True) as p:
        assert p.tokens == 16


def test_times_of_increments_and_set_times(client, make_ns):
    import time
    ns, layout = make_ns()
    a = tokens(16, seed=62)
    before = time.time_ns()
    client.save(ns, a, as_kv(kv_bits(a, layout), layout, "numpy"))
    (node,) = client.list_tree(ns)
    assert before <= node.mtime_ns <= time.time_ns()
    assert node.atime_ns == node.mtime_ns == node.ctime_ns
    assert node.mtime == pytest.approx(node.mtime_ns / 1e9)
    info = client.get_namespace(ns)
    assert info.mtime_ns >= node.mtime_ns and info.atime_ns >= node.atime_ns
    # A load is a use; listing is not.
    client.list_tree(ns, recursive=True)
    assert client.list_tree(ns)[0].atime_ns == node.atime_ns
    time.sleep(0.002)
    assert client.load(ns, a, empty(layout, 16, "numpy")) == 16
    used = client.list_tree(ns)[0]
    assert used.atime_ns > node.atime_ns and used.mtime_ns == node.mtime_ns
    # touch -a -d @1700000000
    set_ = client.set_times(ns, node.key, atime_ns=1_700_000_000 * 10**9)
    assert set_.atime_ns == 1_700_000_000 * 10**9 and set_.mtime_ns == node.mtime_ns
    assert set_.ctime_ns >= used.ctime_ns
    with pytest.raises(ptstore.NotFound):
        client.set_times(ns, "0" * 32, atime_ns=1)


# ------------------------------------------------------------------- errors

def test_unknown_namespace_is_not_found(client):
    toks = tokens(8, seed=70)
    layout = ptstore.Layout(2, 2, 16, "bf16", 4)
    out = empty(layout, 8, "numpy")
    for call in (lambda: client.get_namespace("no-such-ns"),
                 lambda: client.lookup("no-such-ns", toks),
                 lambda: client.load("no-such-ns", toks, out),
                 lambda: client.save("no-such-ns", toks, out),
                 lambda: client.pin("no-such-ns", toks),
                 lambda: client.drop_namespace("no-such-ns")):
        with pytest.raises(ptstore.NotFound, match="no-such-ns") as e:
            call()
        assert isinstance(e.value, ptstore.Error) and isinstance(e.value, LookupError)
        assert e.value.code == ptstore.Code.NOT_FOUND and "no-such-ns" in e.value.message


@pytest.mark.parametrize("backend", BACKENDS)
def test_wrong_dtype_is_a_type_error(client, make_ns, backend):
    ns, layout = make_ns("bf16")
    toks = tokens(8, seed=80)
    if backend == "numpy":
        wrong = np.zeros(layout.kv_shape(8), dtype=np.float32)
        expect = r"numpy.float32.*bf16.*expected numpy.uint16"
    else:
        torch = pytest.importorskip("torch")
        wrong = torch.zeros(layout.kv_shape(8), dtype=torch.float16)
        expect = r"torch.float16.*bf16.*expected torch.bfloat16"
    with pytest.raises(TypeError, match=expect):
        client.save(ns, toks, wrong)
    with pytest.raises(TypeError, match=expect):
        client.load(ns, toks, wrong)


@pytest.mark.parametrize("backend", BACKENDS)
def test_wrong_shape_or_size_is_a_value_error(client, make_ns, backend):
    ns, layout = make_ns("fp16")
    toks = tokens(16, seed=90)
    kv = as_kv(kv_bits(toks, layout), layout, backend)
    client.save(ns, toks, kv)

    # A tensor of another layout (head_dim 32): the message names the expected shape.
    other = ptstore.Layout(2, 2, 32, "fp16", 4)
    with pytest.raises(ValueError, match=r"shape \(16, 2, 2, 2, 32\).*needs \(tokens, 2, 2, 2, 16\)"):
        client.load(ns, toks, empty(other, 16, backend))
    with pytest.raises(ptstore.InvalidArgument, match="needs"):
        client.save(ns, toks, empty(other, 16, backend))
    # 1-D buffers are ambiguous: rejected.
    flat = kv.reshape(-1)
    with pytest.raises(ptstore.InvalidArgument, match="needs"):
        client.save(ns, toks, flat)
    # kv of a token count that is neither len(tokens) nor its whole blocks.
    with pytest.raises(ptstore.InvalidArgument, match="kv holds 12 tokens.*16 tokens given"):
        client.save(ns, toks, kv[:12])
    # out too small for the prompt's whole blocks.
    with pytest.raises(ptstore.InvalidArgument, match=r"out holds 8 tokens.*at least 16.*tokens\[:8\]"):
        client.load(ns, toks, empty(layout, 8, backend))
    assert client.load(ns, toks[:8], empty(layout, 8, backend)) == 8  # ... as the message suggests


def test_bad_buffers(client, make_ns):
    ns, layout = make_ns("fp32")
    toks = tokens(8, seed=100)
    kv = as_kv(kv_bits(toks, layout), layout, "numpy")
    client.save(ns, toks, kv)
    ro = kv.copy()
    ro.setflags(write=False)
    client.save(ns, toks, ro)  # read-only is fine to save from
    with pytest.raises(ptstore.InvalidArgument, match="read-only"):
        client.load(ns, toks, ro)
    strided = np.zeros((16,) + kv.shape[1:], dtype=np.float32)[::2]
    with pytest.raises(ptstore.InvalidArgument, match="not C-contiguous"):
        client.load(ns, toks, strided)
    with pytest.raises(TypeError, match="numpy.ndarray or a torch.Tensor"):
        client.save(ns, toks, kv.tolist())
    with pytest.raises(TypeError, match="byte order"):
        client.load(ns, toks, np.zeros(kv.shape, dtype=">f4"))
    torch = pytest.importorskip("torch")
    t = torch.zeros((8, 2, 2, 16, 2), dtype=torch.float32).transpose(3, 4)
    with pytest.raises(ptstore.InvalidArgument, match=r"not contiguous.*contiguous\(\)"):
        client.load(ns, toks, t)
    if hasattr(torch, "device") and torch.cuda.is_available():  # pragma: no cover - CPU machines
        with pytest.raises(ptstore.InvalidArgument, match="CPU tensor"):
            client.load(ns, toks, torch.zeros(kv.shape, device="cuda"))


def test_bad_tokens(client, make_ns):
    ns, layout = make_ns()
    out = empty(layout, 8, "numpy")
    with pytest.raises(TypeError, match="integer token ids"):
        client.load(ns, [0.5] * 8, out)
    with pytest.raises(ptstore.InvalidArgument, match=r"\[0, 2\*\*32\)"):
        client.load(ns, [-1] * 8, out)
    with pytest.raises(ptstore.InvalidArgument, match=r"\[0, 2\*\*32\)"):
        client.lookup(ns, [2 ** 32] * 8)
    with pytest.raises(ptstore.InvalidArgument, match="1-D"):
        client.lookup(ns, np.zeros((2, 4), dtype=np.uint32))
    assert client.lookup(ns, []).matched_tokens == 0


def test_bad_layouts_and_names(client):
    with pytest.raises(ptstore.InvalidArgument, match="layers=0"):
        ptstore.Layout(0, 8, 128)
    with pytest.raises(ptstore.InvalidArgument, match="unknown dtype 'int4'"):
        ptstore.Layout(32, 8, 128, "int4")
    with pytest.raises(ptstore.InvalidArgument, match="character outside"):
        client.create_namespace("bad name!", ptstore.Layout.mistral())
    with pytest.raises(ptstore.InvalidArgument, match="unknown field"):
        ptstore.Layout.parse("layers=1 kv_heads=1 head_dim=1 dtype=bf16 block_tokens=1 colour=red")


def test_unavailable_server():
    with pytest.raises(ptstore.Unavailable) as e:
        ptstore.Client("/nonexistent/ptstored.sock")
    assert isinstance(e.value, ConnectionError)


def test_closed_client(daemon):
    c = ptstore.Client(daemon.socket)
    c.close()
    assert c.closed and repr(c) == "Client(closed)"
    with pytest.raises(ptstore.Unavailable, match="closed"):
        c.stats()


def test_every_status_code_has_its_exception():
    names = _ptstore.code_names()
    assert names[0] == "ok" and len(names) >= 14
    for value, name in names.items():
        if value == 0:
            continue
        code = ptstore.Code(value)
        assert code.name.lower() == name, (code, name)
        with pytest.raises(ptstore.Error) as e:
            _ptstore._raise_status(value, f"message {value}")
        assert type(e.value).code == code and e.value.code == code
        assert e.value.message == f"message {value}" and str(e.value) == f"message {value}"
        assert type(e.value) is not ptstore.Error, f"code {name} has no class of its own"
    assert issubclass(ptstore.InvalidArgument, ValueError)
    assert issubclass(ptstore.PermissionDenied, PermissionError)
    assert issubclass(ptstore.DeadlineExceeded, TimeoutError)
    # A code this version does not know still raises an Error with its number.
    with pytest.raises(ptstore.Error) as e:
        _ptstore._raise_status(999, "future")
    assert e.value.code == 999 and type(e.value) is ptstore.Error



def test_the_status_registry_is_one_table():
    """Every row of include/ptstore/status_codes.h, as the module exports it,
    agrees with the Python exceptions, with errno, and with the code table of
    docs/wire-format.md."""
    import errno
    import pathlib
    import re

    rows = _ptstore.code_table()
    assert [r["value"] for r in rows] == list(range(len(rows))) and len(rows) >= 14
    assert {r["value"]: r["name"] for r in rows} == _ptstore.code_names()
    for r in rows:
        assert ptstore.Code(r["value"]).name.lower() == r["name"], r
        if r["value"] == 0:
            assert r["errno"] == 0 and r["http"] == 200
            continue
        cls = getattr(ptstore, r["python"])
        assert issubclass(cls, ptstore.Error) and cls.code == r["value"], r
        assert getattr(errno, r["errno_name"]) == r["errno"], r
        assert 400 <= r["http"] < 600, r
    doc = pathlib.Path(__file__).resolve().parents[2] / "docs" / "wire-format.md"
    table = {}
    for line in doc.read_text().splitlines():
        m = re.match(r"\|\s*(\d+)\s*\|\s*`(\w+)`\s*\|[^|]*\|\s*`?(\w+)`?\s*\|", line)
        if m:
            table[int(m.group(1))] = (m.group(2), m.group(3))
    want = {r["value"]: (r["name"], r["errno_name"] if r["value"] else "0") for r in rows}
    assert table == want, "docs/wire-format.md's code table differs from include/ptstore/status_codes.h"


# ------------------------------------------------------------------- values

def test_layout_value():
    m = ptstore.Layout.mistral()
    assert m == ptstore.mistral_layout()
    assert (m.layers, m.kv_heads, m.head_dim, m.dtype, m.block_tokens) == (32, 8, 128, "bf16", 16)
    assert m.bytes_per_token == 128 * 1024 and m.bytes_per_block == 16 * 128 * 1024
    assert m.elements_per_token == 32 * 2 * 8 * 128 and m.dtype_size == 2
    assert m.kv_shape(8192) == (8192, 32, 2, 8, 128)
    assert m.full_blocks(100) == 6 and m.whole_tokens(100) == 96
    assert str(m) == "layers=32 kv_heads=8 head_dim=128 dtype=bf16 block_tokens=16"
    assert ptstore.Layout.parse(str(m)) == m
    assert pickle.loads(pickle.dumps(m)) == m
    assert m.replace(dtype="float16").dtype == "fp16" and m.replace(block_tokens=32).block_tokens == 32
    assert len({m, ptstore.mistral_layout(), m.replace(layers=2)}) == 2
    assert m != "layers=32" and repr(m).startswith("Layout(layers=32")
    assert ptstore.Layout(1, 1, 8, np.float32).dtype == "fp32"
    assert ptstore.Layout(1, 1, 8, np.dtype("float16")).dtype == "fp16"
    torch = pytest.importorskip("torch")
    assert ptstore.Layout(1, 1, 8, torch.bfloat16).dtype == "bf16"
    assert ptstore.torch_dtype(m) == torch.bfloat16 and ptstore.numpy_dtype(m) == np.uint16


def test_stats_and_repr(client, make_ns):
    ns, layout = make_ns()
    toks = tokens(8, seed=110)
    client.save(ns, toks, as_kv(kv_bits(toks, layout), layout, "numpy"))
    s = client.stats()
    d = s.to_dict()
    assert d["arena_bytes"] == 256 << 20 == s.arena_bytes
    assert d["saves"] >= 1 and d["namespaces"] >= 1 and "ssd_capacity" in d
    assert all(isinstance(v, int) for v in d.values())
    # Every counter of the C++ StoreStats has its attribute (python/src/stats.cc lists them).
    assert len(d) == _ptstore._STORE_STATS_COUNTERS, "a StoreStats counter is missing from python/src/stats.cc"
    assert "arena_bytes=" in repr(s)
    assert client.mapped and client.node_id == 0 and "mapped=True" in repr(client)
    assert type(s).__module__ == "ptstore" and type(s).__name__ == "Stats"


def test_client_without_the_mapping(daemon, make_ns):
    """A client that does not map the arena loads by copy (same bytes) and cannot pin."""
    ns, layout = make_ns("fp16")
    toks = tokens(24, seed=120)
    bits = kv_bits(toks, layout)
    with ptstore.Client(daemon.socket, want_mapping=False) as c:
        assert not c.mapped
        c.save(ns, toks, as_kv(bits, layout, "numpy"))
        out = empty(layout, 24, "torch")
        assert c.load(ns, toks, out) == 24
        assert np.array_equal(raw(out), bits)
        with pytest.raises(ptstore.PermissionDenied, match="mapping") as e:
            c.pin(ns, toks)
        assert isinstance(e.value, PermissionError)
