"""The stand-in model's values (vllm_src/engine.py): :class:`Oracle` gives every token's K and V of every layer
(and a Mamba layer's state) as a function of the whole prefix up to it and the request's isolation key (salt,
LoRA), so a KV block loaded for the wrong prefix, head or slot differs; and the model's input for the positions
of prompt embeddings and images."""

from __future__ import annotations

import hashlib
from typing import Any, Dict, List, Sequence

import numpy as np

from .config import DTYPES  # (first: it imports vLLM's snapshot)

import torch  # noqa: E402

__all__ = ["Oracle", "embedding_input", "image_input"]


class Oracle:
    """K and V of every token and layer as a function of the prefix up to it: (2, heads, dim) per token; an MLA
    model's (`parts` 1, one head): its latent vector."""

    def __init__(self, layers: int, kv_heads: int, head_size: int, dtype: str, parts: int = 2) -> None:
        self.layers, self.kv_heads, self.head_size, self.parts = layers, kv_heads, head_size, parts
        self.dtype = DTYPES[dtype]
        self._cache: Dict[bytes, torch.Tensor] = {}
        self._states: Dict[bytes, List[torch.Tensor]] = {}

    def _prefix_keys(self, tokens: Sequence[int], isolation: str) -> List[bytes]:
        h = hashlib.blake2b(isolation.encode(), digest_size=16).digest()
        out = []
        for t in tokens:
            h = hashlib.blake2b(h + int(t).to_bytes(4, "little"), digest_size=16).digest()
            out.append(h)
        return out

    def kv(self, tokens: Sequence[int], isolation: str = "") -> torch.Tensor:
        """(tokens, layers, parts, heads, dim) of the prefix `tokens`."""
        rows = []
        for key in self._prefix_keys(tokens, isolation):
            row = self._cache.get(key)
            if row is None:
                seed = int.from_bytes(key[:8], "little")
                rng = np.random.default_rng(seed)
                row = torch.from_numpy(rng.standard_normal(
                    (self.layers, self.parts, self.kv_heads, self.head_size)).astype(np.float32)).to(self.dtype)
                self._cache[key] = row
            rows.append(row)
        if not rows:
            return torch.empty((0, self.layers, self.parts, self.kv_heads, self.head_size), dtype=self.dtype)
        return torch.stack(rows)

    def state(self, tokens: Sequence[int], layer: int, shapes: Any, dtypes: Any, rank: int = 0,
              isolation: str = "") -> List[torch.Tensor]:
        """A Mamba layer's state tensors after the prefix `tokens` (on tensor-parallel rank `rank`)."""
        keys = self._prefix_keys(tokens, isolation)
        key = (keys[-1] if keys else b"") + bytes([layer, rank])
        got = self._states.get(key)
        if got is None:
            rng = np.random.default_rng(int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little"))
            got = [torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(dt)
                   for shape, dt in zip(shapes, dtypes)]
            self._states[key] = got
        return got

    def next_token(self, tokens: Sequence[int], isolation: str = "") -> int:
        key = self._prefix_keys(tokens[-1:], isolation + repr(len(tokens)) + repr(list(tokens[-8:])))[-1]
        return 1 + int.from_bytes(key[:4], "little") % 31000


def embedding_input(row: Any) -> int:
    """The stand-in model's input for a prompt-embedding row (its KV depends on the row's bytes)."""
    data = row.contiguous().view(-1).view(torch.uint8).numpy().tobytes()
    return 1_000_000 + int.from_bytes(hashlib.sha1(data).digest()[:4], "little")


def image_input(identifier: str, i: int) -> int:
    """The stand-in model's input at position `i` of an image (its KV depends on the image)."""
    return 2_000_000 + int.from_bytes(hashlib.sha1(f"{identifier}/{i}".encode()).digest()[:4], "little")

