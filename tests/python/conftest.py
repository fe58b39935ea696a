"""Fixtures of the Python module's tests: a real ptstored per test process
(this build's: $PTSTORE_PTSTORED, set by ctest), clients of it, namespaces,
and deterministic KV for numpy and torch."""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import tempfile
import time

import numpy as np
import pytest

import ptstore
import ptstore.testing

# KV-like geometry of the tests: 2 layers, 2 KV heads, head_dim 16, blocks of 4 tokens.
LAYERS, KV_HEADS, HEAD_DIM, BLOCK = 2, 2, 16, 4
DTYPES = ["bf16", "fp16", "fp32"]
BACKENDS = ["numpy", "torch"]


def mount_skip_reason() -> str:
    """Why a test cannot mount the store here ('' when it can: root, /dev/fuse and $PTSTORE_FUSE)."""
    if os.geteuid() != 0:
        return "mounting needs root"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "no /dev/fuse"
    fuse = os.environ.get("PTSTORE_FUSE", "")
    if not fuse or not os.access(fuse, os.X_OK):
        return "no ptstore-fuse ($PTSTORE_FUSE)"
    return ""


def _unmount(path: str) -> None:
    if os.path.ismount(path):
        if subprocess.run(["fusermount3", "-u", path], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", path], capture_output=True)


@contextlib.contextmanager
def mounted(socket: str, prefix: str = "ptstore-mount-py-"):
    """A ptstored (its `socket`) mounted by this build's ptstore-fuse on a fresh temporary directory;
    always unmounted, ptstore-fuse stopped and the directory removed at the end."""
    d = tempfile.mkdtemp(prefix=prefix)
    mnt = os.path.join(d, "mnt")
    os.mkdir(mnt)
    log = open(os.path.join(d, "ptstore-fuse.log"), "wb")
    proc = subprocess.Popen([os.environ["PTSTORE_FUSE"], mnt, "-f", "-o", f"socket={socket},allow_other"],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not os.path.ismount(mnt):
            if proc.poll() is not None or time.monotonic() > deadline:
                with open(log.name, errors="replace") as f:
                    pytest.fail(f"ptstore-fuse did not mount: {f.read()}")
            time.sleep(0.02)
        yield mnt
    finally:
        _unmount(mnt)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            _unmount(mnt)
        log.close()
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def daemon():
    with ptstore.testing.Daemon(arena_size="256MiB") as d:
        yield d


@pytest.fixture()
def client(daemon):
    with ptstore.Client(daemon.socket, rpc_timeout_ms=20000) as c:
        yield c


_ns_counter = itertools.count()


@pytest.fixture()
def make_ns(client):
    """make_ns(dtype="bf16", **layout fields) -> (name, layout): a fresh namespace, dropped after the test."""
    made = []

    def make(dtype: str = "bf16", **fields):
        kw = dict(layers=LAYERS, kv_heads=KV_HEADS, head_dim=HEAD_DIM, dtype=dtype, block_tokens=BLOCK)
        kw.update(fields)
        layout = ptstore.Layout(**kw)
        name = f"py-{os.getpid()}-{next(_ns_counter)}"
        client.create_namespace(name, layout)
        made.append(name)
        return name, layout

    yield make
    for name in made:
        try:
            client.drop_namespace(name)
        except ptstore.Error:
            pass


def tokens(n: int, seed: int) -> np.ndarray:
    """`n` token ids in [0, 32000), a function of `seed`."""
    return np.random.default_rng(seed).integers(0, 32000, size=n, dtype=np.uint32)


def kv_bits(toks, layout) -> np.ndarray:
    """KV bytes of a prompt, (tokens, bytes_per_token) uint8: token i's bytes are a function of its id and its
    position only, so two prompts with a common prefix have the same bytes there, and a byte from a wrong
    offset or prompt never matches."""
    toks = np.asarray(toks, dtype=np.uint64)
    words = layout.bytes_per_token // 8
    pos = np.arange(len(toks), dtype=np.uint64)
    h = (toks << np.uint64(32)) ^ (pos * np.uint64(0x9E3779B97F4A7C15)) ^ np.uint64(0x5BD1E995)
    x = h[:, None] + np.arange(words, dtype=np.uint64)[None, :] * np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(31)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(29)
    return np.ascontiguousarray(x).view(np.uint8).reshape(len(toks), layout.bytes_per_token)


_INT_VIEW = {"bf16": np.int16, "fp16": np.int16, "fp32": np.int32}


def as_kv(bits: np.ndarray, layout, backend: str):
    """The bytes `bits` as a KV array of `layout` in `backend` (numpy: bf16 as uint16), shaped kv_shape."""
    shape = layout.kv_shape(bits.shape[0])
    if backend == "numpy":
        return bits.view(ptstore.numpy_dtype(layout)).reshape(shape)
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(bits.view(_INT_VIEW[layout.dtype]).reshape(shape))
    return t.view(ptstore.torch_dtype(layout))


def empty(layout, n: int, backend: str, fill: int = 0x5A):
    """A KV buffer of `n` tokens (a fresh torch tensor for torch) filled with the byte `fill`: a sentinel for
    bytes a load must not touch."""
    if backend == "numpy":
        return as_kv(np.full((n, layout.bytes_per_token), fill, dtype=np.uint8), layout, backend)
    torch = pytest.importorskip("torch")
    t = torch.empty(layout.kv_shape(n), dtype=ptstore.torch_dtype(layout))
    if layout.dtype_size == 4:
        t.view(torch.int32).fill_(fill * 0x01010101)
    else:
        t.view(torch.int16).fill_(fill * 0x0101)
    return t


def raw(x) -> np.ndarray:
    """The bytes of a KV array or tensor, (tokens, bytes_per_token) uint8."""
    if not isinstance(x, np.ndarray):  # torch
        import torch

        x = x.view(torch.int32 if x.element_size() == 4 else torch.int16).numpy()
    return x.reshape(x.shape[0], -1).view(np.uint8)


# ---- the vLLM connector's tests (test_vllm_*.py) ---------------------------

_vllm_counter = itertools.count()


@pytest.fixture()
def ns(client, request):
    """A fresh namespace name for a connector test; it and the namespaces the
    connector derives from it (salts, LoRA, ranks: "<ns>.<...>") are dropped after."""
    name = f"{request.module.__name__.replace('_', '-')}-{os.getpid()}-{next(_vllm_counter)}"
    yield name
    for info in client.list_namespaces():
        if info.name == name or info.name.startswith(name + "."):
            client.drop_namespace(info.name)


@pytest.fixture()
def engines(daemon, ns, request):
    """engines(model=None, **MiniEngine options) -> a MiniEngine (vllm_harness.py) on this test's ptstored and
    namespace, closed after the test. Block orders are seeded from the test module's
    BLOCK_ORDER_SEED_BASE (default 0) plus the engine's number."""
    from vllm_harness import MiniEngine, OracleModel  # imports torch: only the connector's tests

    seed_base = getattr(request.module, "BLOCK_ORDER_SEED_BASE", 0)
    made = []

    def make(model=None, **kw):
        kw.setdefault("socket", daemon.socket)
        kw.setdefault("namespace", ns)
        kw.setdefault("block_order_seed", seed_base + len(made))
        e = MiniEngine(model or OracleModel(), **kw)
        made.append(e)
        return e

    yield make
    for e in made:
        e.close()
