"""A small transformer whose attention layers are full, sliding-window or MLA-style, over vLLM's paged caches.

The logits-equality proof of test_vllm_src.py runs it in place of the stand-in model: the worker's
attention layer (wrapped in vLLM's ``maybe_transfer_kv_layer``) computes a whole transformer layer for the
step's tokens of each request, writing their K/V (or latent vector) into the request's blocks and reading
every position it attends to back out of the pages: a full layer all positions before, a sliding-window
layer the last ``window`` (its own included, as vLLM's sliding window), an MLA layer the latent vectors it
up-projects to K and V. ``reference_logits`` computes the same model densely, without any cache. Random
weights with a fixed seed; RMSNorm, RoPE, grouped-query attention, SwiGLU.

MLA-style layers keep, per token, ``c = W_dkv h`` (``latent`` dims) and a rotated key part ``k_r`` (``rope``
dims, shared by the heads), the cache entry being ``[c ; k_r]`` as DeepSeek's (kv_lora_rank + qk_rope_head_dim);
head *i* attends with ``K_i = [W_uk_i c ; k_r]`` and ``V_i = W_uv_i c``.
"""

from __future__ import annotations

import math
from typing import Dict, List, Sequence

import torch


class TinyModel:
    def __init__(self, kinds: Sequence[str], *, window: int = 0, vocab: int = 512, dim: int = 64, heads: int = 4,
                 kv_heads: int = 2, hidden: int = 128, latent: int = 24, rope: int = 8, seed: int = 0,
                 kv_dtype: torch.dtype = torch.float32) -> None:
        assert heads % kv_heads == 0 and dim % heads == 0
        self.kinds = list(kinds)
        self.window = window
        self.vocab, self.dim, self.heads, self.kv_heads = vocab, dim, heads, kv_heads
        self.head_dim = dim // heads
        self.latent, self.rope_dim = latent, rope
        self.kv_dtype = kv_dtype
        self.eps = 1e-5
        g = torch.Generator().manual_seed(seed)

        def w(*shape: int) -> torch.Tensor:
            return torch.randn(*shape, generator=g) / math.sqrt(shape[-1])

        hd = self.head_dim
        self.embed = torch.randn(vocab, dim, generator=g)
        self.layers: List[Dict[str, torch.Tensor]] = []
        for kind in self.kinds:
            p = {"attn_norm": 1.0 + 0.1 * torch.randn(dim, generator=g), "wo": w(dim, heads * hd),
                 "mlp_norm": 1.0 + 0.1 * torch.randn(dim, generator=g),
                 "w1": w(hidden, dim), "w3": w(hidden, dim), "w2": w(dim, hidden)}
            if kind == "latent":
                p.update(wq=w(heads * hd, dim), wqr=w(heads * rope, dim), wdkv=w(latent, dim), wkr=w(rope, dim),
                         wuk=w(heads * hd, latent), wuv=w(heads * hd, latent))
            else:
                p.update(wq=w(heads * hd, dim), wk=w(kv_heads * hd, dim), wv=w(kv_heads * hd, dim))
            self.layers.append(p)
        self.final_norm = 1.0 + 0.1 * torch.randn(dim, generator=g)
        self.lm_head = w(vocab, dim)
        self._inv = {d: 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d)) for d in (hd, rope)}

    @property
    def cache_head_size(self) -> int:
        """The head size of the layers' KV cache specs: head_dim, or latent + rope for MLA layers."""
        return self.latent + self.rope_dim if "latent" in self.kinds else self.head_dim

    # ------------------------------------------------------------- pieces
    def rmsnorm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * weight

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x: (n, heads, d) rotated by position (rotate-half form)."""
        freqs = positions.to(torch.float32)[:, None] * self._inv[x.shape[-1]][None, :]
        cos = torch.cat([freqs.cos(), freqs.cos()], dim=-1)[:, None, :]
        sin = torch.cat([freqs.sin(), freqs.sin()], dim=-1)[:, None, :]
        half = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin

    def mlp(self, x: torch.Tensor, p: Dict[str, torch.Tensor]) -> torch.Tensor:
        return (torch.nn.functional.silu(x @ p["w1"].T) * (x @ p["w3"].T)) @ p["w2"].T

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_pos: torch.Tensor,
                k_pos: torch.Tensor, window: int) -> torch.Tensor:
        """q: (n, heads, d); k, v: (ctx, heads or kv_heads, d) at positions k_pos; causal, within `window`."""
        if k.shape[1] != q.shape[1]:
            k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
            v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(q.shape[-1])
        mask = k_pos[None, :] > q_pos[:, None]
        if window:
            mask |= k_pos[None, :] <= q_pos[:, None] - window
        scores = scores.masked_fill(mask[None], float("-inf"))
        return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(q.shape[0], -1)

    def new_entries(self, li: int, h: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """What layer `li` caches for tokens with normed inputs `h` at `pos`: (n, parts, heads, dim), as the
        cache stores it (kv_dtype)."""
        p, n, hd = self.layers[li], h.shape[0], self.head_dim
        if self.kinds[li] == "latent":
            c = h @ p["wdkv"].T
            kr = self.rotate((h @ p["wkr"].T).view(n, 1, self.rope_dim), pos).view(n, self.rope_dim)
            return torch.cat([c, kr], dim=-1).view(n, 1, 1, -1).to(self.kv_dtype)
        k = self.rotate((h @ p["wk"].T).view(n, self.kv_heads, hd), pos)
        v = (h @ p["wv"].T).view(n, self.kv_heads, hd)
        return torch.stack([k, v], dim=1).to(self.kv_dtype)

    def layer(self, li: int, x: torch.Tensor, pos: torch.Tensor, h: torch.Tensor, ctx: torch.Tensor,
              ctx_pos: torch.Tensor) -> torch.Tensor:
        """Layer `li` for hidden states `x` (normed `h`) at `pos`, attending to cached entries `ctx` at
        `ctx_pos` (what new_entries gave, incl. the new tokens')."""
        p, n, hd = self.layers[li], x.shape[0], self.head_dim
        e = ctx.to(torch.float32)
        if self.kinds[li] == "latent":
            c, kr = e[:, 0, 0, :self.latent], e[:, 0, 0, self.latent:]
            q = torch.cat([(h @ p["wq"].T).view(n, self.heads, hd),
                           self.rotate((h @ p["wqr"].T).view(n, self.heads, self.rope_dim), pos)], dim=-1)
            k = torch.cat([(c @ p["wuk"].T).view(-1, self.heads, hd),
                           kr[:, None, :].expand(-1, self.heads, self.rope_dim)], dim=-1)
            v = (c @ p["wuv"].T).view(-1, self.heads, hd)
            window = 0
        else:
            q = self.rotate((h @ p["wq"].T).view(n, self.heads, hd), pos)
            k, v = e[:, 0], e[:, 1]
            window = self.window if self.kinds[li] == "window" else 0
        x = x + self._attend(q, k, v, pos, ctx_pos, window) @ p["wo"].T
        return x + self.mlp(self.rmsnorm(x, p["mlp_norm"]), p)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.rmsnorm(x, self.final_norm) @ self.lm_head.T

    # ----------------------------------------------------------- reference
    def reference_logits(self, tokens: Sequence[int]) -> torch.Tensor:
        """Every position's logits, computed densely from scratch (cache entries rounded to kv_dtype)."""
        pos = torch.arange(len(tokens))
        x = self.embed[torch.tensor(list(tokens))]
        for li, p in enumerate(self.layers):
            h = self.rmsnorm(x, p["attn_norm"])
            x = self.layer(li, x, pos, h, self.new_entries(li, h, pos), pos)
        return self.logits(x)
