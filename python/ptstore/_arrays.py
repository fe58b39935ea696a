"""KV buffers and token ids: what save, load and pins accept, checked against a layout.

A KV buffer is a numpy array or a torch tensor in host memory, C-contiguous,
whose first dimension is tokens and whose other dimensions hold the layout's
elements per token: ``(tokens, layers, 2, kv_heads, head_dim)`` is the natural
shape (``Layout.kv_shape``), any ``(tokens, ...)`` with the same number of
elements per token is accepted. Its dtype must be the layout's:

=========  ======================================  ===============================
layout     torch                                   numpy
=========  ======================================  ===============================
``bf16``   ``torch.bfloat16``                      ``uint16``/``int16`` (the raw bits;
                                                   numpy has no bfloat16) or
                                                   ``ml_dtypes.bfloat16``
``fp16``   ``torch.float16``                       ``float16``
``fp32``   ``torch.float32``                       ``float32``
``fp8``    ``torch.uint8``/``int8``/``float8_e4m3fn``  ``uint8``/``int8``
=========  ======================================  ===============================

A namespace whose layout is grouped (``Layout.is_grouped``: several KV cache
groups, ``Layout.group_offset``) stores blocks of its groups' slices: its KV
buffers are their bytes, a C-contiguous ``uint8`` array or tensor of a whole
number of tokens (``tokens * bytes_per_token`` bytes, e.g. shaped
``(blocks, bytes_per_block)`` or ``(tokens, bytes_per_token)``).

The checks raise ``TypeError`` for a wrong type or dtype and
``ptstore.InvalidArgument`` (a ``ValueError``) for a wrong shape, size,
device, contiguity or a read-only destination, naming what was expected.
Only the buffer's address and size go to the C++ side; the caller's frame
keeps the object alive during the call.
"""

from __future__ import annotations

import math
import sys
from typing import Any, NamedTuple, Tuple

import numpy as np

from ._errors import InvalidArgument

_NUMPY_DTYPES = {
    "bf16": ("uint16", "int16", "bfloat16"),
    "fp16": ("float16",),
    "fp32": ("float32",),
    "fp8": ("uint8", "int8", "float8_e4m3fn"),
}
_TORCH_DTYPES = {
    "bf16": ("bfloat16",),
    "fp16": ("float16",),
    "fp32": ("float32",),
    "fp8": ("uint8", "int8", "float8_e4m3fn"),
}
_MAX_TOKEN = 0xFFFFFFFF


class KvBuffer(NamedTuple):
    """A checked KV buffer: its address, its size in bytes, the tokens it holds."""

    address: int
    nbytes: int
    tokens: int


def is_torch_tensor(x: Any) -> bool:
    """True for a torch.Tensor (without importing torch when the caller has not)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def numpy_dtype(layout: Any) -> np.dtype:
    """The numpy dtype that holds `layout`'s elements (uint16 for bf16: the raw bits)."""
    return np.dtype(_NUMPY_DTYPES[layout.dtype][0])


def torch_dtype(layout: Any) -> Any:
    """The torch dtype of `layout`'s elements (torch.bfloat16, torch.float16, torch.float32, torch.uint8)."""
    import torch

    return getattr(torch, _TORCH_DTYPES[layout.dtype][0])


def expected_shape(layout: Any) -> str:
    return (f"(tokens, {layout.layers}, 2, {layout.kv_heads}, {layout.head_dim}) "
            f"or any (tokens, ...) of {layout.elements_per_token} elements per token")


def kv_buffer(x: Any, layout: Any, *, what: str, writable: bool) -> KvBuffer:
    """Checks that `x` is a KV buffer of `layout` (see the module's doc) and returns where it is."""
    if layout.is_grouped:
        return _grouped_buffer(x, layout, what=what, writable=writable)
    if is_torch_tensor(x):
        if x.device.type != "cpu":
            raise InvalidArgument(f"{what} is a tensor on {x.device}: ptstore reads and writes host memory, "
                                  f"pass a CPU tensor")
        dt = str(x.dtype).replace("torch.", "")
        allowed = _TORCH_DTYPES[layout.dtype]
        if dt not in allowed:
            raise TypeError(f"{what} has dtype torch.{dt}, but the namespace's layout ({layout}) holds "
                            f"{layout.dtype}: expected torch.{' or torch.'.join(allowed)}")
        if not x.is_contiguous():
            raise InvalidArgument(f"{what} is not contiguous (shape {tuple(x.shape)}, strides {tuple(x.stride())}): "
                                  f"pass {what}.contiguous()")
        shape: Tuple[int, ...] = tuple(int(d) for d in x.shape)
        address = int(x.data_ptr())
        nbytes = int(x.numel()) * int(x.element_size())
    elif isinstance(x, np.ndarray):
        dt = x.dtype.name
        allowed = _NUMPY_DTYPES[layout.dtype]
        if dt not in allowed:
            hint = " (the raw bits of bf16: numpy has no bfloat16)" if layout.dtype == "bf16" else ""
            raise TypeError(f"{what} has dtype numpy.{dt}, but the namespace's layout ({layout}) holds "
                            f"{layout.dtype}: expected numpy.{' or numpy.'.join(allowed)}{hint}")
        if not x.dtype.isnative:
            raise TypeError(f"{what} has non-native byte order ({x.dtype.str}): expected native (little-endian)")
        if not x.flags.c_contiguous:
            raise InvalidArgument(f"{what} is not C-contiguous (shape {x.shape}, strides {x.strides}): "
                                  f"pass numpy.ascontiguousarray({what})")
        if writable and not x.flags.writeable:
            raise InvalidArgument(f"{what} is read-only: loads need a writable array")
        shape = tuple(x.shape)
        address = int(x.__array_interface__["data"][0])
        nbytes = int(x.nbytes)
    else:
        raise TypeError(f"{what} must be a numpy.ndarray or a torch.Tensor, got {type(x).__module__}."
                        f"{type(x).__qualname__}")
    if len(shape) < 2 or math.prod(shape[1:]) != layout.elements_per_token:
        raise InvalidArgument(f"{what} has shape {shape}, but the namespace's layout ({layout}) needs "
                              f"{expected_shape(layout)}")
    return KvBuffer(address, nbytes, shape[0])


def shape_of(layout: Any, tokens: int) -> Tuple[int, ...]:
    """The natural shape of a KV buffer of `tokens` tokens: ``Layout.kv_shape``, or (tokens, bytes per token)
    bytes for a grouped layout."""
    return (tokens, layout.bytes_per_token) if layout.is_grouped else tuple(layout.kv_shape(tokens))


def _grouped_buffer(x: Any, layout: Any, *, what: str, writable: bool) -> KvBuffer:
    """The bytes of a grouped layout's blocks: uint8, C-contiguous, a whole number of tokens."""
    dt = str(x.dtype).replace("torch.", "") if is_torch_tensor(x) else getattr(getattr(x, "dtype", None), "name", "")
    if dt != "uint8":
        raise TypeError(f"{what} has dtype {dt or type(x).__name__}, but the namespace's layout is grouped "
                        f"({layout}): its KV buffers are the blocks' bytes, uint8")
    address, nbytes = raw_buffer(x, what=what, writable=writable)
    bpt = layout.bytes_per_token
    if nbytes % bpt:
        raise InvalidArgument(f"{what} holds {nbytes} bytes, not a whole number of tokens of {bpt} bytes "
                              f"(blocks of {layout.bytes_per_block} bytes, layout {layout})")
    return KvBuffer(address, nbytes, nbytes // bpt)


def as_tokens(tokens: Any) -> np.ndarray:
    """Token ids as a C-contiguous 1-D uint32 array (no copy when they are one already).

    Accepts any sequence of ints, a numpy array or a torch tensor of an integer
    dtype. Raises TypeError for non-integers and InvalidArgument for ids
    outside [0, 2**32) or a shape that is not 1-D.
    """
    if isinstance(tokens, np.ndarray) and tokens.dtype == np.uint32 and tokens.ndim == 1 \
            and tokens.flags.c_contiguous:
        return tokens
    if is_torch_tensor(tokens):
        tokens = tokens.detach().cpu().numpy()
    arr = np.asarray(tokens)
    if arr.ndim != 1:
        raise InvalidArgument(f"tokens must be a 1-D sequence of token ids, got shape {arr.shape}")
    if arr.size == 0:
        return np.empty(0, dtype=np.uint32)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"tokens must be integer token ids (uint32), got dtype {arr.dtype}")
    if arr.dtype != np.uint32:
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi > _MAX_TOKEN:
            raise InvalidArgument(f"token ids must be in [0, 2**32), got values in [{lo}, {hi}]")
        arr = arr.astype(np.uint32)
    return np.ascontiguousarray(arr)


def empty_kv(layout: Any, tokens: int, backend: str = "numpy") -> Any:
    """An uninitialised KV buffer of `tokens` tokens of `layout`, shaped ``layout.kv_shape(tokens)``.

    `backend` is ``"numpy"`` (bf16 as uint16 bits) or ``"torch"``.
    """
    if layout.is_grouped:  # the blocks' bytes
        shape = (tokens, layout.bytes_per_token)
        if backend == "numpy":
            return np.empty(shape, dtype=np.uint8)
        if backend == "torch":
            import torch

            return torch.empty(shape, dtype=torch.uint8)
        raise InvalidArgument(f"backend must be 'numpy' or 'torch', got {backend!r}")
    shape = layout.kv_shape(tokens)
    if backend == "numpy":
        return np.empty(shape, dtype=numpy_dtype(layout))
    if backend == "torch":
        import torch

        return torch.empty(shape, dtype=torch_dtype(layout))
    raise InvalidArgument(f"backend must be 'numpy' or 'torch', got {backend!r}")


def raw_buffer(x: Any, *, what: str, writable: bool) -> Tuple[int, int]:
    """(address, bytes) of a C-contiguous host buffer of any dtype: a numpy array or a CPU torch tensor."""
    if is_torch_tensor(x):
        if x.device.type != "cpu":
            raise InvalidArgument(f"{what} is a tensor on {x.device}: pass a CPU tensor")
        if not x.is_contiguous():
            raise InvalidArgument(f"{what} is not contiguous (shape {tuple(x.shape)}): pass {what}.contiguous()")
        return int(x.data_ptr()), int(x.numel()) * int(x.element_size())
    if isinstance(x, np.ndarray):
        if not x.flags.c_contiguous:
            raise InvalidArgument(f"{what} is not C-contiguous: pass numpy.ascontiguousarray({what})")
        if writable and not x.flags.writeable:
            raise InvalidArgument(f"{what} is read-only")
        return int(x.__array_interface__["data"][0]), int(x.nbytes)
    raise TypeError(f"{what} must be a numpy.ndarray or a torch.Tensor, got {type(x).__module__}."
                    f"{type(x).__qualname__}")
