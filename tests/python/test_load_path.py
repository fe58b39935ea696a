"""Client.load_path and path_info through a real PTStore mount (this build's ptstore-fuse).

Needs root, /dev/fuse and $PTSTORE_FUSE (set by ctest); skipped otherwise.
The mount is always unmounted, and ptstore-fuse stopped, at the end."""

from __future__ import annotations

import os
import re
import tempfile
import time

import numpy as np
import pytest

import ptstore
from conftest import as_kv, empty, kv_bits, mount_skip_reason, mounted, raw, tokens

KEY = re.compile(r"^[0-9a-f]{32}$")


pytestmark = pytest.mark.skipif(bool(mount_skip_reason()), reason=mount_skip_reason() or "ok")


@pytest.fixture(scope="module")
def mount(daemon):
    """The session's ptstored mounted on a fresh temporary directory."""
    with mounted(daemon.socket) as mnt:
        yield mnt


def _increments(root: str):
    """{path: (start_token + tokens)} of every increment directory below `root`."""
    found = {}
    for dirpath, dirnames, _ in os.walk(root):
        for name in dirnames:
            if KEY.match(name):
                p = os.path.join(dirpath, name)
                info = ptstore.path_info(p)
                found[p] = info.prefix_tokens
    return found


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_load_path_is_byte_exact(client, make_ns, mount, backend):
    ns, layout = make_ns("bf16")
    toks = tokens(48, seed=7)
    bits = kv_bits(toks, layout)
    # Three increments: 16, then 32, then 48 tokens.
    for n in (16, 32, 48):
        client.save(ns, toks[:n], as_kv(bits[:n], layout, backend))
    incs = _increments(os.path.join(mount, ns))
    assert sorted(incs.values()) == [16, 32, 48]
    deepest = max(incs, key=incs.get)
    middle = [p for p, n in incs.items() if n == 32][0]

    info = ptstore.path_info(deepest)
    assert info.kind == "increment" and info.namespace == ns and info.layout == layout
    assert (info.start_token, info.tokens, info.prefix_tokens) == (32, 16, 48)
    assert KEY.match(info.key) and info.arena_bytes == client.stats().arena_bytes

    out = empty(layout, 50, backend)
    assert client.load_path(deepest, out) == 48
    assert np.array_equal(raw(out)[:48], bits) and (raw(out)[48:] == 0x5A).all()
    out = empty(layout, 32, backend)
    assert client.load_path(middle, out) == 32
    assert np.array_equal(raw(out), bits[:32])
    # Its lease is gone at once; the kv file it opened holds a pin until the
    # kernel's RELEASE of it, which FUSE sends asynchronously after close.
    for _ in range(100):
        if client.stats().active_leases == 0:
            break
        time.sleep(0.02)
    assert client.stats().active_leases == 0

    # The namespace and the root hold no prefix: 0 tokens.
    assert ptstore.path_info(os.path.join(mount, ns)).kind == "namespace"
    assert client.load_path(os.path.join(mount, ns), out) == 0
    assert ptstore.path_info(mount).kind == "root"


def test_load_path_errors(client, make_ns, mount):
    ns, layout = make_ns("fp16")
    toks = tokens(16, seed=8)
    client.save(ns, toks, as_kv(kv_bits(toks, layout), layout, "numpy"))
    (path,) = _increments(os.path.join(mount, ns))
    with pytest.raises(ptstore.InvalidArgument, match="holds 16 tokens, out only 8"):
        client.load_path(path, empty(layout, 8, "numpy"))
    with pytest.raises(TypeError, match="fp16"):
        client.load_path(path, np.zeros(layout.kv_shape(16), dtype=np.float32))
    with pytest.raises(ptstore.NotFound):
        client.load_path(os.path.join(mount, ns, "0" * 31 + "1"), empty(layout, 16, "numpy"))
    with pytest.raises(ptstore.InvalidArgument, match="not a directory of a PTStore mount"):
        client.load_path(tempfile.gettempdir(), empty(layout, 16, "numpy"))
    with pytest.raises(ptstore.InvalidArgument):
        client.load_path(os.path.join(path, "kv"), empty(layout, 16, "numpy"))
