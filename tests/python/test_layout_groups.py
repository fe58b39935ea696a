"""Grouped layouts in Python: ptstore.LayoutGroup, Layout.from_groups, their text form, offsets and padding,
and a grouped namespace created, saved and loaded byte for byte through a real ptstored (and, as root with
/dev/fuse, described by path_info through a real mount)."""

from __future__ import annotations

import os
import pickle
import subprocess
import tempfile
import time

import numpy as np
import pytest

import ptstore
from conftest import mount_skip_reason, tokens

G = ptstore.LayoutGroup


def mixed(block_tokens: int = 16) -> ptstore.Layout:
    """One group of every kind (the C++ tests' MixedLayout)."""
    return ptstore.Layout.from_groups([
        G("full", 24, kv_heads=8, head_dim=128),
        G("window", 24, kv_heads=8, head_dim=128, dtype="bf16", window=1024),
        G("latent", 61, head_dim=576),
        G("state", 8, state_bytes=65536),
    ], block_tokens=block_tokens)


MIXED_TEXT = ("block_tokens=16 group=full:layers=24:kv_heads=8:head_dim=128:dtype=bf16 "
              "group=window:layers=24:kv_heads=8:head_dim=128:dtype=bf16:window=1024 "
              "group=latent:layers=61:head_dim=576:dtype=bf16 group=state:layers=8:bytes=65536")


def test_groups_of_each_kind():
    full = G("full", 24, 8, 128, "fp16")
    assert (full.kind, full.layers, full.kv_heads, full.head_dim, full.dtype, full.window, full.state_bytes) == \
        ("full", 24, 8, 128, "fp16", 0, 0)
    assert str(full) == "full:layers=24:kv_heads=8:head_dim=128:dtype=fp16"
    assert full.bytes_per_block(16) == 16 * 24 * 2 * 8 * 128 * 2
    win = G("window", 24, kv_heads=8, head_dim=128, window=1024)
    assert (win.kind, win.window, win.dtype) == ("window", 1024, "bf16")  # dtype defaults to bf16
    assert str(win) == "window:layers=24:kv_heads=8:head_dim=128:dtype=bf16:window=1024"
    latent = G("latent", 61, head_dim=576, dtype="bfloat16")
    assert (latent.kv_heads, latent.dtype) == (1, "bf16")  # one latent vector per token per layer
    assert latent.bytes_per_block(16) == 16 * 61 * 576 * 2
    assert str(latent) == "latent:layers=61:head_dim=576:dtype=bf16"
    state = G("state", 8, state_bytes=65536)
    assert (state.kv_heads, state.head_dim, state.dtype, state.state_bytes) == (0, 0, "none", 65536)
    assert state.bytes_per_block(16) == 8 * 65536  # per block, whatever its tokens
    assert repr(state) == "LayoutGroup('state', layers=8, state_bytes=65536)"
    assert repr(win) == "LayoutGroup('window', layers=24, kv_heads=8, head_dim=128, dtype='bf16', window=1024)"
    # Values: equal, hashable, picklable.
    assert G("full", 24, 8, 128, "fp16") == full and full != win and full != "full"
    assert len({full, G("full", 24, 8, 128, "fp16"), win}) == 2
    for g in (full, win, latent, state):
        assert pickle.loads(pickle.dumps(g)) == g


@pytest.mark.parametrize("args, kwargs, needle", [
    (("mamba", 8), {}, "unknown layout group kind 'mamba'"),
    (("full", 0), {"kv_heads": 8, "head_dim": 128}, "layout group (full) field layers=0"),
    (("full", 8), {"head_dim": 128}, "layout group (full) field kv_heads=0"),
    (("window", 8), {"kv_heads": 8, "head_dim": 128}, "layout group (window) field window_tokens=0"),
    (("full", 8), {"kv_heads": 8, "head_dim": 128, "window": 5}, "field window_tokens=5 must be 0"),
    (("latent", 8), {"kv_heads": 2, "head_dim": 128}, "layout group (latent) field kv_heads=2 must be 1"),
    (("state", 8), {}, "layout group (state) field state_bytes=0"),
    (("state", 8), {"state_bytes": (1 << 30) + 1}, "state_bytes=1073741825 is out of range"),
    (("state", 8), {"state_bytes": 64, "kv_heads": 8}, "layout group (state) field kv_heads=8 must be 0"),
    (("state", 8), {"state_bytes": 64, "dtype": "bf16"}, "a state group is bytes"),
    (("full", 8), {"kv_heads": 8, "head_dim": 128, "dtype": "int4"}, "unknown dtype 'int4'"),
])
def test_bad_groups_name_the_field(args, kwargs, needle):
    with pytest.raises(ptstore.InvalidArgument, match=needle.replace("(", r"\(").replace(")", r"\)")):
        G(*args, **kwargs)


def test_from_groups_offsets_padding_and_bytes():
    layout = mixed()
    assert layout.is_grouped
    assert (layout.layers, layout.kv_heads, layout.head_dim, layout.dtype, layout.dtype_size) == (0, 0, 0, "none", 0)
    assert layout.block_tokens == 16
    assert [g.kind for g in layout.groups] == ["full", "window", "latent", "state"]
    assert [layout.group_offset(i) for i in range(4)] == [0, 1572864, 3145728, 4270080]
    assert [layout.group_bytes_per_block(i) for i in range(4)] == [1572864, 1572864, 1124352, 524288]
    assert layout.bytes_per_block == 4794368
    assert layout.bytes_per_token == 4794368 // 16
    assert layout.group_offset(-1) == 4270080
    with pytest.raises(IndexError):
        layout.group_offset(4)
    # A state group of 1000 bytes between two latent groups in 3-token blocks:
    # slices at 0 (15 bytes), 64 (2000), 2112 (36); the block padded to a
    # multiple of lcm(64, 3) = 192: 2304 bytes, 768 per token.
    odd = ptstore.Layout.from_groups([G("latent", 1, head_dim=5, dtype="fp8"), G("state", 2, state_bytes=1000),
                                      G("latent", 2, head_dim=3)], block_tokens=3)
    assert [odd.group_offset(i) for i in range(3)] == [0, 64, 2112]
    assert [odd.group_bytes_per_block(i) for i in range(3)] == [15, 2000, 36]
    assert (odd.bytes_per_block, odd.bytes_per_token) == (2304, 768)
    assert odd.full_blocks(10) == 3 and odd.whole_tokens(10) == 9


def test_one_full_group_is_the_dense_layout():
    one = ptstore.Layout.from_groups([G("full", 32, kv_heads=8, head_dim=128)], block_tokens=16)
    assert one == ptstore.Layout.mistral()
    assert not one.is_grouped
    assert repr(one) == "Layout(layers=32, kv_heads=8, head_dim=128, dtype='bf16', block_tokens=16)"
    assert ptstore.Layout.parse("block_tokens=16 group=full:layers=32:kv_heads=8:head_dim=128:dtype=bf16") == one
    # A dense layout's groups: its one full group, at offset 0.
    dense = ptstore.Layout(2, 2, 16, "fp16", 4)
    assert dense.groups == [G("full", 2, kv_heads=2, head_dim=16, dtype="fp16")]
    assert (dense.group_offset(0), dense.group_bytes_per_block(0)) == (0, dense.bytes_per_block)
    assert dense.bytes_per_token == 2 * 2 * 2 * 16 * 2  # no padding in a dense layout
    # One window group, or two full groups, stay grouped.
    assert ptstore.Layout.from_groups([G("window", 2, 2, 16, window=8)]).is_grouped
    assert ptstore.Layout.from_groups([G("full", 2, 2, 16), G("full", 2, 4, 16)]).is_grouped


def test_text_form_repr_equality_hash_and_pickle():
    layout = mixed()
    assert str(layout) == MIXED_TEXT
    assert ptstore.Layout.parse(MIXED_TEXT) == layout
    assert ptstore.Layout.parse(MIXED_TEXT.replace(" ", ":")) == layout  # colons for spaces
    assert ptstore.Layout.parse(MIXED_TEXT + "\n") == layout
    assert repr(layout).startswith("Layout.from_groups([LayoutGroup('full', layers=24, kv_heads=8,")
    assert repr(layout).endswith("LayoutGroup('state', layers=8, state_bytes=65536)], block_tokens=16)")
    assert layout == mixed() and layout != mixed(32) and layout != ptstore.Layout.mistral()
    assert hash(layout) == hash(mixed())
    assert len({layout, mixed(), mixed(32), ptstore.Layout.mistral()}) == 3
    assert pickle.loads(pickle.dumps(layout)) == layout
    assert layout.replace(block_tokens=32) == mixed(32)
    with pytest.raises(ptstore.InvalidArgument, match="layout field layers=2 must be 0"):
        layout.replace(layers=2)


@pytest.mark.parametrize("text, needle", [
    ("block_tokens=16 group=full:layers=24:kv_heads=8:head_dim=128:dtype=bf16 group=mamba:layers=2",
     "layout group 1: unknown layout group kind 'mamba'"),
    ("block_tokens=16 group=window:layers=24:kv_heads=8:head_dim=128:dtype=bf16", "layout group 0 (window) is "
     "missing field 'window'"),
    ("block_tokens=16 group=latent:layers=61:kv_heads=1:head_dim=576:dtype=bf16", "layout group 0 (latent) has "
     "unknown field 'kv_heads'"),
    ("block_tokens=16 group=state:layers=8:bytes=lots", "layout group 0 (state) field 'bytes' has non-numeric value"),
    ("group=state:layers=8:bytes=64", "layout is missing field 'block_tokens'"),
    ("block_tokens=16 layers=2 group=state:layers=8:bytes=64", "'layers' cannot be given with group= items"),
    ("block_tokens=16" + " group=state:layers=1:bytes=1" * 17, "layout has 17 groups, at most 16"),
])
def test_parse_errors_name_the_group_and_field(text, needle):
    with pytest.raises(ptstore.InvalidArgument) as e:
        ptstore.Layout.parse(text)
    assert needle in str(e.value)
    assert isinstance(e.value, ValueError)


def test_dense_only_shapes_refuse_a_grouped_layout():
    layout = mixed()
    for call in (lambda: layout.kv_shape(16), lambda: layout.elements_per_token):
        with pytest.raises(ValueError, match="is for dense layouts: .* has 4 groups"):
            call()
    with pytest.raises(ptstore.InvalidArgument, match="has 17 groups, at most 16"):
        ptstore.Layout.from_groups([G("state", 1, state_bytes=1)] * 17)
    with pytest.raises(ptstore.InvalidArgument, match="needs 1 to 16 groups, got none"):
        ptstore.Layout.from_groups([])
    with pytest.raises(ptstore.InvalidArgument, match="4 GiB"):
        ptstore.Layout.from_groups([G("state", 1024, state_bytes=1 << 30)] * 2)


# ---------------------------------------------------------------- a real ptstored

# Small groups for the store: per 4-token block a full group (4*2*2*2*16*2 =
# 1024 bytes at 0), a window group (1024 at 1024), a latent group (4*2*24*2 =
# 384 at 2048) and a state group (2*100 = 200 at 2432), padded to 2688 bytes:
# 672 per token.
def small_hybrid() -> ptstore.Layout:
    return ptstore.Layout.from_groups([
        G("full", 2, kv_heads=2, head_dim=16), G("window", 2, kv_heads=2, head_dim=16, window=8),
        G("latent", 2, head_dim=24, dtype="fp16"), G("state", 2, state_bytes=100)], block_tokens=4)


def grouped_kv(layout: ptstore.Layout, toks: np.ndarray) -> np.ndarray:
    """The whole blocks of `toks` as (tokens, bytes_per_token) uint8: each group's slice a function of the
    block's tokens (and every token before), the padding zero as a writer leaves it."""
    bt, bb = layout.block_tokens, layout.bytes_per_block
    blocks = len(toks) // bt
    out = np.zeros((blocks, bb), dtype=np.uint8)
    h = 0x9A1E
    for b in range(blocks):
        h = hash((h, tuple(int(t) for t in toks[b * bt:(b + 1) * bt]))) & 0xFFFFFFFF
        rng = np.random.default_rng(h)
        for g in range(len(layout.groups)):
            off, n = layout.group_offset(g), layout.group_bytes_per_block(g)
            out[b, off:off + n] = rng.integers(1, 256, size=n, dtype=np.uint8)
    return out.reshape(blocks * bt, layout.bytes_per_token)


@pytest.fixture()
def hybrid_ns(client):
    layout = small_hybrid()
    name = f"py-groups-{os.getpid()}"
    info = client.create_namespace(name, layout, mode=0o750)
    yield name, layout, info
    try:
        client.drop_namespace(name)
    except ptstore.Error:
        pass


def test_create_save_and_load_a_grouped_namespace(client, hybrid_ns):
    name, layout, info = hybrid_ns
    assert layout.bytes_per_block == 2688 and layout.bytes_per_token == 672
    assert info.layout == layout and info.layout.is_grouped and info.mode == 0o750
    assert client.get_namespace(name).layout == layout
    assert client.layout(name) == layout
    assert {n.name: n.layout for n in client.list_namespaces()}[name] == layout
    # The same layout again is fine; another one is not.
    assert client.create_namespace(name, layout).layout == layout
    with pytest.raises(ptstore.AlreadyExists):
        client.create_namespace(name, ptstore.Layout(2, 2, 16, "bf16", 4))

    toks = tokens(64, 11)
    kv = grouped_kv(layout, toks)
    r = client.save(name, toks, kv)
    assert (r.matched_tokens, r.stored_tokens, r.new_bytes) == (0, 64, 64 * 672)
    out = np.full_like(kv, 0xEE)
    assert client.load(name, toks, out) == 64
    assert np.array_equal(out, kv)
    # A longer prompt sharing 40 tokens: its first 10 blocks come back, the
    # rest of `out` is untouched.
    other = np.concatenate([toks[:40], tokens(24, 12)])
    out2 = np.full((64, 672), 0xEE, dtype=np.uint8)
    assert client.load(name, other, out2) == 40
    assert np.array_equal(out2[:40], kv[:40])
    assert (out2[40:] == 0xEE).all()
    # A pin copies the same bytes; its blocks split into the groups' slices.
    with client.pin(name, toks) as p:
        assert p.tokens == 64 and p.bytes == 64 * 672
        got = np.empty((64, 672), dtype=np.uint8)
        assert p.copy_to(got) == 64
        assert np.array_equal(got, kv)
    blocks = got.reshape(-1, layout.bytes_per_block)
    off, n = layout.group_offset(3), layout.group_bytes_per_block(3)
    assert np.array_equal(blocks[-1, off:off + n], kv.reshape(-1, layout.bytes_per_block)[-1, off:off + n])
    assert (blocks[:, off + n:] == 0).all()  # the padding after the last group


def test_a_grouped_namespace_refuses_element_buffers(client, hybrid_ns):
    name, layout, _ = hybrid_ns
    toks = tokens(16, 3)
    with pytest.raises((TypeError, ptstore.InvalidArgument)):
        client.save(name, toks, np.zeros((16, 2, 2, 2, 16), dtype=np.uint16))  # a dense bf16 shape
    with pytest.raises(ptstore.InvalidArgument):
        client.save(name, toks, np.zeros((16, 671), dtype=np.uint8))  # not the bytes per token


def test_gpu_paged_copy_refuses_a_grouped_layout_and_device_copy_takes_its_bytes(client, hybrid_ns):
    import ptstore.gpu as pgpu

    if not pgpu.available():
        pytest.skip(f"no GPU: {pgpu.why_unavailable()}")
    torch = pytest.importorskip("torch")
    name, layout, _ = hybrid_ns
    toks = tokens(16, 5)
    kv = grouped_kv(layout, toks)
    client.save(name, toks, kv)
    with client.pin(name, toks) as p:
        with pytest.raises(ptstore.InvalidArgument, match="copies dense layouts only"):
            pgpu.load_to_paged(p, [torch.zeros((2, 4, 4, 2, 16), dtype=torch.bfloat16, device="cuda")], [0, 1, 2, 3])
        out = torch.zeros((16, layout.bytes_per_token), dtype=torch.uint8, device="cuda")
        assert pgpu.load_to_device(p, out) == 16
        assert np.array_equal(out.cpu().numpy(), kv)


# ------------------------------------------------------------- path_info on a mount

@pytest.mark.skipif(bool(mount_skip_reason()), reason=mount_skip_reason() or "ok")
def test_path_info_of_a_grouped_namespace_reads_its_groups(daemon, client, hybrid_ns):
    name, layout, _ = hybrid_ns
    toks = tokens(8, 21)
    kv = grouped_kv(layout, toks)
    client.save(name, toks, kv)
    d = tempfile.mkdtemp(prefix="ptstore-groups-py-")
    mnt = os.path.join(d, "mnt")
    os.mkdir(mnt)
    proc = subprocess.Popen([os.environ["PTSTORE_FUSE"], mnt, "-f", "-o", f"socket={daemon.socket}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not os.path.ismount(mnt):
            assert proc.poll() is None and time.monotonic() < deadline, "ptstore-fuse did not mount"
            time.sleep(0.02)
        with open(os.path.join(mnt, name, ".layout")) as f:
            assert f.read() == str(layout) + "\n"
        info = ptstore.path_info(os.path.join(mnt, name))
        assert info.kind == "namespace" and info.layout == layout
        (key,) = [e for e in os.listdir(os.path.join(mnt, name)) if not e.startswith(".")]
        inc = os.path.join(mnt, name, key)
        info = ptstore.path_info(inc)
        assert info.kind == "increment" and info.layout == layout and info.prefix_tokens == 8
        out = np.zeros_like(kv)
        assert client.load_path(inc, out) == 8
        assert np.array_equal(out, kv)
    finally:
        if os.path.ismount(mnt):
            if subprocess.run(["fusermount3", "-u", mnt], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", mnt], capture_output=True)
        proc.terminate()
        proc.wait(timeout=20)
