"""ptstore.gpu: pinned prefixes straight from the server's arena into GPU memory.

libptstore's GPU copy path (``include/ptstore/gpu.h``, docs/gpu.md) for torch
CUDA tensors (or any object with ``__cuda_array_interface__``, e.g. CuPy
arrays)::

    import ptstore, ptstore.gpu, torch
    client = ptstore.Client()
    ptstore.gpu.prepare(client)          # registers the arena with CUDA now (else the first load does)
    with client.pin("mistral-7b", tokens) as p:
        out = torch.empty(p.layout.kv_shape(p.tokens), dtype=torch.bfloat16, device="cuda")
        ptstore.gpu.load_to_device(p, out)                   # token-major, like Pin.copy_to
        ptstore.gpu.load_to_paged(p, kv_caches, block_ids)   # vLLM's paged layout, one kernel launch

Copies are issued on a CUDA stream: by default the current torch stream of the
destination's device, waited for before the call returns. With
``non_blocking=True`` the call returns once the copy is issued, and the pin
must stay pinned until the stream has finished it.

The functions raise ``ptstore.Unimplemented`` when this ptstore was built
without CUDA (CMake found no CUDA toolkit), ``ptstore.Unavailable`` when no
CUDA device is usable, ``ptstore.InvalidArgument`` for wrong shapes, devices,
strides or sizes and ``TypeError`` for a wrong dtype; :func:`available` tells
ahead.
"""

from __future__ import annotations

import math
import sys
from typing import Any, Dict, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from . import _ptstore
from ._errors import InvalidArgument, Unavailable, Unimplemented

__all__ = ["built", "available", "why_unavailable", "prepare", "arena_info", "load_to_device", "load_to_paged"]

_BUILT = hasattr(_ptstore, "gpu_load_to_device")

_TORCH_DTYPES = {
    "bf16": ("bfloat16",),
    "fp16": ("float16",),
    "fp32": ("float32",),
    "fp8": ("uint8", "int8", "float8_e4m3fn", "float8_e5m2"),
    "bytes": ("uint8", "int8"),  # a grouped layout's blocks
}
# __cuda_array_interface__ typestrs ('<f2' ...); bf16 has none: its raw bits as '<u2'/'<i2'.
_CAI_TYPES = {
    "bf16": ("<u2", "<i2", "<V2"),
    "fp16": ("<f2",),
    "fp32": ("<f4",),
    "fp8": ("|u1", "|i1", "<u1", "<i1", "|V1"),
    "bytes": ("|u1", "|i1", "<u1", "<i1", "|V1"),
}


def _elements(layout: Any) -> Tuple[str, int, str]:
    """What a token-major buffer of `layout` holds per token: (dtype key, elements, the shape it takes).

    A grouped layout (a hybrid model's groups) has no element shape: its
    buffers are its bytes, ``bytes_per_token`` uint8 per token.
    """
    if layout.is_grouped:
        return "bytes", layout.bytes_per_token, f"(tokens, {layout.bytes_per_token}) bytes (uint8)"
    return (layout.dtype, layout.elements_per_token,
            f"(tokens, {layout.layers}, 2, {layout.kv_heads}, {layout.head_dim}) or any (tokens, ...) of "
            f"{layout.elements_per_token} elements per token")


def built() -> bool:
    """True when this ptstore was built with the GPU copy path (a CUDA toolkit at build time)."""
    return _BUILT


def why_unavailable() -> Optional[str]:
    """None when GPU loads can run here, else why not (no CUDA build, no device, no driver...)."""
    if not _BUILT:
        return _NOT_BUILT
    try:
        _ptstore.gpu_device_count()
    except Unavailable as e:
        return str(e)
    return None


def available() -> bool:
    """True when this build has the GPU copy path and a CUDA device is usable."""
    return why_unavailable() is None


_NOT_BUILT = ("this ptstore was built without CUDA (CMake found no CUDA toolkit), so it has no GPU copy path: "
              "rebuild with the toolkit installed (docs/gpu.md), or load into host memory (Pin.copy_to) and copy")


def _require() -> None:
    if not _BUILT:
        raise Unimplemented(_NOT_BUILT)


def prepare(client: Any, register_arena: bool = True, staging_chunk_bytes: int = 8 << 20) -> Dict[str, Any]:
    """Sets up the client's arena for the GPU now; returns how it reaches the GPU.

    The result is ``{"path", "detail", "arena_bytes", "register_seconds"}``;
    ``path`` is ``"registered-read-only"`` or ``"registered"`` (cudaHostRegister
    of the mapping: DMA and zero-copy kernel reads) or ``"staging"`` (pinned
    staging buffers, when registration is refused or ``register_arena`` is
    False), and ``detail`` says why. The first call on a client decides.
    """
    _require()
    low = getattr(client, "_c", client)
    if not isinstance(low, _ptstore.Client):
        raise TypeError(f"client must be a ptstore.Client, got {type(client).__module__}.{type(client).__qualname__}")
    return _ptstore.gpu_prepare_arena(low, register_arena, staging_chunk_bytes)


def arena_info(pin: Any) -> Dict[str, Any]:
    """How the arena of `pin`'s client reaches the GPU (see :func:`prepare`)."""
    _require()
    return _ptstore.gpu_arena_info(_low_pin(pin))


class _DeviceArray(NamedTuple):
    address: int
    shape: Tuple[int, ...]
    strides: Tuple[int, ...]  # bytes
    itemsize: int
    dtype: str
    device: Any  # torch.device, or None
    stream: Optional[int]  # the producer's stream (torch: current stream of its device)


def _is_torch(x: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _device_array(x: Any, layout_dtype: str, what: str) -> _DeviceArray:
    """Where a CUDA tensor (torch, or __cuda_array_interface__) is, checked against the layout's dtype."""
    if _is_torch(x):
        import torch

        if x.device.type != "cuda":
            raise InvalidArgument(f"{what} is a tensor on {x.device}: ptstore.gpu writes GPU memory, pass a CUDA "
                                  f"tensor (or use Pin.copy_to for host memory)")
        dt = str(x.dtype).replace("torch.", "")
        allowed = _TORCH_DTYPES[layout_dtype]
        if dt not in allowed:
            raise TypeError(f"{what} has dtype torch.{dt}, but the namespace's layout holds {layout_dtype}: "
                            f"expected torch.{' or torch.'.join(allowed)}")
        item = int(x.element_size())
        return _DeviceArray(int(x.data_ptr()), tuple(int(d) for d in x.shape),
                            tuple(int(s) * item for s in x.stride()), item, dt, x.device,
                            int(torch.cuda.current_stream(x.device).cuda_stream))
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is None:
        raise TypeError(f"{what} must be a torch CUDA tensor or an object with __cuda_array_interface__, got "
                        f"{type(x).__module__}.{type(x).__qualname__}")
    typestr = cai["typestr"]
    allowed = _CAI_TYPES[layout_dtype]
    if typestr not in allowed:
        raise TypeError(f"{what} has typestr {typestr!r}, but the namespace's layout holds {layout_dtype}: "
                        f"expected {' or '.join(map(repr, allowed))}")
    address, read_only = cai["data"]
    if read_only:
        raise InvalidArgument(f"{what} is read-only")
    shape = tuple(int(d) for d in cai["shape"])
    item = np.dtype(typestr.replace("V", "u")).itemsize
    strides = cai.get("strides")
    if strides is None:  # C-contiguous
        acc, st = item, []
        for d in reversed(shape):
            st.append(acc)
            acc *= d
        strides = tuple(reversed(st))
    stream = cai.get("stream")
    return _DeviceArray(int(address), shape, tuple(int(s) for s in strides), item, typestr, None,
                        None if stream is None else int(stream))


def _stream_handle(stream: Any, default: Optional[int]) -> int:
    if stream is None:
        return default or 0
    if isinstance(stream, int):
        return stream
    for attr in ("cuda_stream", "ptr", "handle"):  # torch.cuda.Stream, cupy.cuda.Stream, cuda.core
        if hasattr(stream, attr):
            return int(getattr(stream, attr))
    raise TypeError(f"stream must be None, an int (cudaStream_t) or a CUDA stream object, got {type(stream)!r}")


def _low_pin(pin: Any) -> Any:
    return getattr(pin, "_p", pin)


def _pin_layout(pin: Any) -> Any:
    layout = getattr(pin, "layout", None)
    if layout is None:
        raise TypeError("pin must be a ptstore.Pin (Client.pin / Client.pin_increment)")
    return layout


def _finish(stream: int, non_blocking: bool) -> None:
    if not non_blocking:
        _ptstore.gpu_stream_synchronize(stream)


def load_to_device(pin: Any, out: Any, tokens: Optional[int] = None, stream: Any = None,
                   non_blocking: bool = False) -> int:
    """Copies the pinned prefix (or its first `tokens` tokens) into the CUDA tensor `out`; returns the tokens.

    `out` is token-major like :meth:`Pin.copy_to`'s: C-contiguous, of the
    layout's dtype, shaped ``(tokens, ...)`` with ``layout.elements_per_token``
    elements per token (``layout.kv_shape(n)``), with room for the tokens; for
    a grouped layout uint8, ``(tokens, ...)`` of ``layout.bytes_per_token``.
    One cudaMemcpyAsync per run of adjacent extents, on `stream` (default: the
    current torch stream of ``out``'s device).
    """
    _require()
    layout = _pin_layout(pin)
    n = pin.tokens if tokens is None else int(tokens)
    if n < 0 or n > pin.tokens:
        raise InvalidArgument(f"cannot load {n} tokens out of a pin of {pin.tokens}")
    key, per_token, shape_text = _elements(layout)
    a = _device_array(out, key, "out")
    if len(a.shape) < 2 or math.prod(a.shape[1:]) != per_token:
        raise InvalidArgument(f"out has shape {a.shape}, but the namespace's layout ({layout}) needs {shape_text}")
    acc = a.itemsize
    for d, s in zip(reversed(a.shape), reversed(a.strides)):
        if d > 1 and s != acc:
            raise InvalidArgument(f"out is not contiguous (shape {a.shape}, byte strides {a.strides}): pass "
                                  f"out.contiguous()")
        acc *= d
    if a.shape[0] < n:
        shape = (n, per_token) if layout.is_grouped else layout.kv_shape(n)
        raise InvalidArgument(f"out holds {a.shape[0]} tokens, the load {n}: give an out of at least {n} tokens "
                              f"(shape {shape})")
    h = _stream_handle(stream, a.stream)
    _ptstore.gpu_load_to_device(_low_pin(pin), a.address, n * layout.bytes_per_token, h)
    _finish(h, non_blocking)
    return n


# Which dimension of a 5-D per-layer KV tensor is K/V and which the block:
# (kv_dim, block_dim); slot, head and head_dim are dimensions 2, 3 and 4.
_LAYOUTS = {"flash_attn": (0, 1), "flashinfer": (1, 0), "pages": (1, 0)}


def load_to_paged(pin: Any, kv_caches: Sequence[Any], block_ids: Any, *, start_token: int = 0,
                  tokens: Optional[int] = None, first_layer: int = 0, kv_cache_layout: str = "auto",
                  mode: str = "auto", stream: Any = None, non_blocking: bool = False,
                  staging_bytes: int = 256 << 20) -> int:
    """Writes prefix tokens ``[start_token, start_token + tokens)`` into vLLM's paged KV caches; returns the tokens.

    `kv_caches` are the per-layer CUDA tensors of layers ``first_layer, ...``
    of the model, in layer order, all alike: FlashAttention's
    ``[2, num_blocks, block_size, kv_heads, head_dim]`` (``kv_cache_layout``
    "flash_attn"), FlashInfer's ``[num_blocks, 2, block_size, kv_heads,
    head_dim]`` ("flashinfer"), or the connector's logical ``pages`` view of
    the same shape ("pages"); "auto" tells the first two apart by which
    dimension is 2. Any strides are accepted as long as ``head_dim`` is
    contiguous (so HND variants work). Token ``start_token + i`` goes to block
    ``block_ids[i // block_size]``, slot ``i % block_size``; slots past the last
    token of a partial last block are left alone.

    Dense layouts only: a grouped layout (a hybrid model's groups) is
    InvalidArgument.

    ``mode``: "direct" (the kernel reads the registered arena over the bus,
    one launch for every layer), "staged" (copy to a device buffer of at most
    `staging_bytes`, then the kernel), or "auto" (direct when the arena is
    registered).
    """
    _require()
    layout = _pin_layout(pin)
    if layout.is_grouped:
        raise InvalidArgument(f"load_to_paged copies dense layouts only: {layout} has {len(layout.groups)} groups, "
                              f"each with its own shape (copy its blocks with load_to_device into uint8 and split "
                              f"them by layout.group_offset)")
    if isinstance(kv_caches, dict):
        raise TypeError("kv_caches must be a sequence of per-layer tensors in layer order (e.g. "
                        "[kv for kv in PagedKV.layers]), not a dict")
    caches = list(kv_caches)
    if not caches:
        raise InvalidArgument("kv_caches is empty")
    arrays = [_device_array(c, layout.dtype, f"kv_caches[{i}]") for i, c in enumerate(caches)]
    first = arrays[0]
    if len(first.shape) != 5:
        raise InvalidArgument(f"kv_caches[0] has shape {first.shape}: expected 5 dimensions, "
                              f"[2, num_blocks, block_size, kv_heads, head_dim] or [num_blocks, 2, ...]")
    for i, a in enumerate(arrays[1:], 1):
        if (a.shape, a.strides, a.dtype, a.device) != (first.shape, first.strides, first.dtype, first.device):
            raise InvalidArgument(f"kv_caches[{i}] ({a.shape}, strides {a.strides}, {a.dtype}) differs from "
                                  f"kv_caches[0] ({first.shape}, strides {first.strides}, {first.dtype})")
    name = kv_cache_layout
    if name == "auto":
        if first.shape[0] == 2:
            name = "flash_attn"
        elif first.shape[1] == 2:
            name = "flashinfer"
        else:
            raise InvalidArgument(f"kv_caches[0] has shape {first.shape}: neither dimension 0 nor 1 is 2 (K and V)")
    if name not in _LAYOUTS:
        raise InvalidArgument(f"kv_cache_layout must be 'auto', 'flash_attn', 'flashinfer' or 'pages', got {name!r}")
    kv_dim, block_dim = _LAYOUTS[name]
    if first.shape[kv_dim] != 2:
        raise InvalidArgument(f"kv_caches[0] has shape {first.shape}: dimension {kv_dim} must be 2 for {name}")
    if (first.shape[3], first.shape[4]) != (layout.kv_heads, layout.head_dim):
        raise InvalidArgument(f"kv_caches[0] has shape {first.shape}, but the namespace's layout ({layout}) has "
                              f"{layout.kv_heads} KV heads of {layout.head_dim}")
    if first.strides[4] != first.itemsize:
        raise InvalidArgument(f"kv_caches[0]'s last dimension (head_dim) is not contiguous (byte strides "
                              f"{first.strides})")
    if first_layer < 0 or first_layer + len(caches) > layout.layers:
        raise InvalidArgument(f"{len(caches)} layers from layer {first_layer} do not fit the layout's "
                              f"{layout.layers} layers")
    if start_token < 0 or start_token > pin.tokens:
        raise InvalidArgument(f"start_token {start_token} is outside the pin's {pin.tokens} tokens")
    n = pin.tokens - start_token if tokens is None else int(tokens)
    if n < 0 or start_token + n > pin.tokens:
        raise InvalidArgument(f"{n} tokens from token {start_token} run past the pin's {pin.tokens} tokens")
    if _is_torch(block_ids):
        block_ids = block_ids.detach().cpu().numpy()
    ids = np.asarray(block_ids)
    if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
        raise InvalidArgument(f"block_ids must be a 1-D sequence of integers, got shape {ids.shape} of {ids.dtype}")
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= 2**31):
        raise InvalidArgument(f"block_ids must be in [0, 2**31), got values in [{int(ids.min())}, {int(ids.max())}]")
    ids = np.ascontiguousarray(ids, dtype=np.int32)
    h = _stream_handle(stream, first.stream)
    _ptstore.gpu_load_to_paged(
        _low_pin(pin), layout, [a.address for a in arrays], first_layer, first.shape[block_dim], first.shape[2],
        first.strides[kv_dim], first.strides[block_dim], first.strides[2], first.strides[3], ids, h, start_token, n,
        mode, staging_bytes)
    _finish(h, non_blocking)
    return n
