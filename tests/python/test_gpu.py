"""ptstore.gpu: the GPU copy path from Python.

Everywhere: the module says clearly why it cannot run (no CUDA build, no
device), and checks its arguments. With a CUDA device and torch built with
CUDA: token-major loads byte for byte, and loads into vLLM's paged layouts
against torch's own indexed copy, for bf16/fp16/fp32, direct and staged.
Without a device those tests skip; with PTSTORE_GPU_REQUIRED=1
(scripts/gpu-check) they fail instead.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import ptstore
import ptstore.gpu as pgpu
from ptstore import _ptstore
from conftest import DTYPES, as_kv, kv_bits, tokens

REQUIRED = os.environ.get("PTSTORE_GPU_REQUIRED", "0") not in ("", "0")


def _cuda_torch():
    """torch, when it and a CUDA device can be used here; else skips (fails when a GPU is required)."""
    why = pgpu.why_unavailable()
    if why is None:
        try:
            import torch
        except ImportError:
            why = "torch is not installed"
        else:
            if not torch.cuda.is_available():
                why = f"torch {torch.__version__} has no usable CUDA"
            else:
                return torch
    if REQUIRED:
        pytest.fail(f"PTSTORE_GPU_REQUIRED is set, but: {why}")
    pytest.skip(why)


class FakeCudaArray:
    """An object with __cuda_array_interface__ (at an address nothing owns: only for argument checks that fail
    before any copy, or for no-device errors)."""

    def __init__(self, shape, typestr="<u2", address=0x7F0000000000):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (address, False),
                                         "version": 3, "strides": None}


def _pin(client, make_ns, dtype="bf16", n=32, **fields):
    ns, layout = make_ns(dtype, **fields)
    toks = tokens(n, seed=3)
    bits = kv_bits(toks, layout)
    client.save(ns, toks, as_kv(bits, layout, "numpy"))
    return client.pin(ns, toks), layout, bits


# ------------------------------------------------------------- everywhere

def test_built_matches_the_extension():
    assert pgpu.built() == hasattr(_ptstore, "gpu_load_to_device")
    if not pgpu.built():
        assert "without CUDA" in pgpu.why_unavailable()


def test_without_a_cuda_build_every_call_says_so(client, make_ns, monkeypatch):
    monkeypatch.setattr(pgpu, "_BUILT", False)
    assert not pgpu.available()
    assert "built without CUDA" in pgpu.why_unavailable()
    p, layout, _ = _pin(client, make_ns)
    with p:
        for call in (lambda: pgpu.prepare(client), lambda: pgpu.arena_info(p),
                     lambda: pgpu.load_to_device(p, FakeCudaArray(layout.kv_shape(p.tokens))),
                     lambda: pgpu.load_to_paged(p, [], [])):
            with pytest.raises(ptstore.Unimplemented, match="built without CUDA"):
                call()


def test_no_device_is_a_clear_unavailable(client, make_ns):
    if not pgpu.built() or pgpu.available():
        pytest.skip("needs a CUDA build on a machine without a usable device")
    assert "no usable CUDA device" in pgpu.why_unavailable()
    p, layout, _ = _pin(client, make_ns)
    with p:
        with pytest.raises(ptstore.Unavailable, match="no usable CUDA device"):
            pgpu.load_to_device(p, FakeCudaArray(layout.kv_shape(p.tokens)))
        with pytest.raises(ptstore.Unavailable, match="no usable CUDA device"):
            pgpu.prepare(client)


def test_argument_checks(client, make_ns):
    if not pgpu.built():
        pytest.skip("this ptstore has no GPU path")
    p, layout, _ = _pin(client, make_ns, "bf16")
    with p:
        with pytest.raises(TypeError, match="typestr '<f4'.*bf16"):
            pgpu.load_to_device(p, FakeCudaArray(layout.kv_shape(p.tokens), "<f4"))
        with pytest.raises(ptstore.InvalidArgument, match="out holds 4 tokens, the load 32"):
            pgpu.load_to_device(p, FakeCudaArray(layout.kv_shape(4)))
        with pytest.raises(ptstore.InvalidArgument, match="out has shape"):
            pgpu.load_to_device(p, FakeCudaArray((p.tokens, 3)))
        with pytest.raises(ptstore.InvalidArgument, match="cannot load 33 tokens"):
            pgpu.load_to_device(p, FakeCudaArray(layout.kv_shape(p.tokens)), tokens=33)
        with pytest.raises(TypeError, match="torch CUDA tensor or an object with __cuda_array_interface__"):
            pgpu.load_to_device(p, np.zeros(layout.kv_shape(p.tokens), np.uint16))
        torch = pytest.importorskip("torch")
        with pytest.raises(ptstore.InvalidArgument, match="tensor on cpu"):
            pgpu.load_to_device(p, torch.empty(layout.kv_shape(p.tokens), dtype=torch.bfloat16))
        cache = FakeCudaArray((2, 16, layout.block_tokens, layout.kv_heads, layout.head_dim))
        with pytest.raises(ptstore.InvalidArgument, match="kv_caches is empty"):
            pgpu.load_to_paged(p, [], [0])
        with pytest.raises(ptstore.InvalidArgument, match="do not fit the layout's 2 layers"):
            pgpu.load_to_paged(p, [cache] * 3, list(range(8)))
        with pytest.raises(ptstore.InvalidArgument, match="KV heads"):
            pgpu.load_to_paged(p, [FakeCudaArray((2, 16, 4, 3, 16))] * 2, list(range(8)))
        with pytest.raises(ptstore.InvalidArgument, match="neither dimension 0 nor 1 is 2"):
            pgpu.load_to_paged(p, [FakeCudaArray((3, 16, 4, 2, 16))] * 2, list(range(8)))
        with pytest.raises(ptstore.InvalidArgument, match="block_ids must be in"):
            pgpu.load_to_paged(p, [cache] * 2, [-1] * 8)
        with pytest.raises(TypeError, match="not a dict"):
            pgpu.load_to_paged(p, {"a": cache}, [0])


# ------------------------------------------------------------ with a GPU

@pytest.mark.parametrize("dtype", DTYPES)
def test_load_to_device_is_byte_exact(client, make_ns, dtype):
    torch = _cuda_torch()
    info = pgpu.prepare(client)
    assert info["path"] in ("registered-read-only", "registered", "staging"), info
    p, layout, bits = _pin(client, make_ns, dtype, n=64)
    with p:
        out = torch.full(layout.kv_shape(p.tokens), 7, dtype=ptstore.torch_dtype(layout), device="cuda")
        assert pgpu.load_to_device(p, out) == 64
        got = out.cpu().contiguous().view(torch.uint8).numpy().reshape(64, -1)
        assert np.array_equal(got, bits)
        # The first 5 tokens only, on a stream of our own, non-blocking.
        out2 = torch.zeros_like(out)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())  # the zeros first
        assert pgpu.load_to_device(p, out2, tokens=5, stream=s, non_blocking=True) == 5
        s.synchronize()
        got2 = out2.cpu().contiguous().view(torch.uint8).numpy().reshape(64, -1)
        assert np.array_equal(got2[:5], bits[:5]) and not got2[5:].any()
        assert pgpu.arena_info(p)["path"] == info["path"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["direct", "staged", "auto"])
@pytest.mark.parametrize("backend", ["flash_attn", "flashinfer"])
def test_load_to_paged_matches_torch(client, make_ns, dtype, mode, backend):
    torch = _cuda_torch()
    n, bs, num_blocks = 35, 4, 24  # tokens 4..38 of 40: a partial last block (35 = 8 * 4 + 3)
    p, layout, bits = _pin(client, make_ns, dtype, n=40, layers=3)
    with p:
        tdt = ptstore.torch_dtype(layout)
        shape = ((2, num_blocks, bs, layout.kv_heads, layout.head_dim) if backend == "flash_attn"
                 else (num_blocks, 2, bs, layout.kv_heads, layout.head_dim))
        caches = [torch.full(shape, 3, dtype=tdt, device="cuda") for _ in range(layout.layers)]
        want = [c.clone() for c in caches]
        start = 4
        ids = torch.randperm(num_blocks)[: (n + bs - 1) // bs]
        assert pgpu.load_to_paged(p, caches, ids, start_token=start, tokens=n, mode=mode) == n
        # The reference: torch's own copies of the token-major rows into the pages.
        kv = p.to_torch()  # (tokens, layers, 2, heads, dim) on the CPU
        for t in range(n):
            blk, slot = int(ids[t // bs]), t % bs
            for layer in range(layout.layers):
                for k in range(2):
                    idx = (k, blk, slot) if backend == "flash_attn" else (blk, k, slot)
                    want[layer][idx] = kv[start + t, layer, k].to("cuda")
        for layer in range(layout.layers):
            assert torch.equal(caches[layer].view(torch.uint8), want[layer].view(torch.uint8)), layer


def test_load_to_paged_layer_subset_and_hnd_strides(client, make_ns):
    torch = _cuda_torch()
    p, layout, _ = _pin(client, make_ns, "fp16", n=32, layers=4)
    with p:
        bs, num_blocks = 4, 16
        # HND: [2, num_blocks, heads, block_size, dim] seen as [2, num_blocks, block_size, heads, dim].
        store = [torch.zeros((2, num_blocks, layout.kv_heads, bs, layout.head_dim), dtype=torch.float16,
                             device="cuda") for _ in range(2)]
        views = [s.permute(0, 1, 3, 2, 4) for s in store]
        ids = list(range(num_blocks - 1, num_blocks - 9, -1))
        assert pgpu.load_to_paged(p, views, ids, first_layer=1, kv_cache_layout="flash_attn") == 32
        kv = p.to_torch()
        for i, layer in enumerate((1, 2)):
            for t in range(32):
                for k in range(2):
                    assert torch.equal(views[i][k, ids[t // bs], t % bs].cpu(), kv[t, layer, k])


def test_gpu_errors_from_cpp(client, make_ns):
    torch = _cuda_torch()
    p, layout, _ = _pin(client, make_ns, "bf16", n=32)
    with p:
        caches = [torch.zeros((2, 4, 4, layout.kv_heads, layout.head_dim), dtype=torch.bfloat16, device="cuda")
                  for _ in range(layout.layers)]
        with pytest.raises(ptstore.InvalidArgument, match="need 8 block ids, got 4"):
            pgpu.load_to_paged(p, caches, [0, 1, 2, 3])
        with pytest.raises(ptstore.InvalidArgument, match="outside the cache's 4 blocks"):
            pgpu.load_to_paged(p, caches, list(range(8)))
        with pytest.raises(ptstore.InvalidArgument, match="mode must be"):
            pgpu.load_to_paged(p, caches, [0, 1, 2, 3], tokens=16, mode="fast")
        # A host address that looks like a CUDA array: C++ finds it is not device memory.
        host = np.zeros(layout.kv_shape(p.tokens), np.uint16)
        fake = FakeCudaArray(host.shape, "<u2", host.ctypes.data)
        with pytest.raises(ptstore.InvalidArgument, match="not device memory"):
            pgpu.load_to_device(p, fake)
    out = torch.empty(layout.kv_shape(32), dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ptstore.InvalidArgument, match="no longer pinned"):
        pgpu.load_to_device(p, out)
