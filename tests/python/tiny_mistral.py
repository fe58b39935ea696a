"""A small Mistral-like transformer in torch with a vLLM-style paged KV cache (random weights, fixed seed).

RMSNorm, rotary position embeddings, grouped-query attention (fewer KV heads
than query heads), SwiGLU MLP, tied to nothing. The KV cache of each layer is
one vLLM FlashAttention-layout tensor ``[2, num_blocks, block_size,
kv_heads, head_dim]`` in ``kv_dtype``; a step computes a chunk of tokens of
each request: it writes their K and V into the request's blocks, then
attends over every cached position before them, exactly as vLLM's attention
layer does (``wait_for_layer_load`` before, ``save_kv_layer`` after, through
the hooks). ``reference_logits`` computes the same model densely, without any
cache.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Sequence

import torch

from vllm_harness import SeqChunk


class TinyMistral:
    def __init__(self, *, vocab: int = 512, dim: int = 64, layers: int = 3, heads: int = 4, kv_heads: int = 2,
                 hidden: int = 128, rope_theta: float = 10000.0, eps: float = 1e-5, seed: int = 0,
                 kv_dtype: torch.dtype = torch.float32) -> None:
        assert heads % kv_heads == 0 and dim % heads == 0
        g = torch.Generator().manual_seed(seed)
        self.vocab, self.dim, self.n_layers, self.heads, self.kv_heads = vocab, dim, layers, heads, kv_heads
        self.head_dim = dim // heads
        self.eps = eps
        self.kv_dtype = kv_dtype

        def w(*shape: int, scale: float = 1.0) -> torch.Tensor:
            return torch.randn(*shape, generator=g) * (scale / math.sqrt(shape[-1]))

        hd = self.head_dim
        self.embed = torch.randn(vocab, dim, generator=g)
        self.layers: List[Dict[str, torch.Tensor]] = []
        for _ in range(layers):
            self.layers.append({
                "attn_norm": 1.0 + 0.1 * torch.randn(dim, generator=g),
                "wq": w(heads * hd, dim), "wk": w(kv_heads * hd, dim), "wv": w(kv_heads * hd, dim),
                "wo": w(dim, heads * hd),
                "mlp_norm": 1.0 + 0.1 * torch.randn(dim, generator=g),
                "w1": w(hidden, dim), "w3": w(hidden, dim), "w2": w(dim, hidden),
            })
        self.final_norm = 1.0 + 0.1 * torch.randn(dim, generator=g)
        self.lm_head = w(vocab, dim)
        self.inv_freq = 1.0 / (rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        self.layer_names = [f"model.layers.{i}.self_attn.attn" for i in range(layers)]

    # ------------------------------------------------------------- pieces
    def rmsnorm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * weight

    def rope(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x: (n, heads, head_dim) rotated by position (rotate-half form)."""
        freqs = positions.to(torch.float32)[:, None] * self.inv_freq[None, :]  # (n, hd/2)
        cos = torch.cat([freqs.cos(), freqs.cos()], dim=-1)[:, None, :]
        sin = torch.cat([freqs.sin(), freqs.sin()], dim=-1)[:, None, :]
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin

    def mlp(self, x: torch.Tensor, p: Dict[str, torch.Tensor]) -> torch.Tensor:
        return (torch.nn.functional.silu(x @ p["w1"].T) * (x @ p["w3"].T)) @ p["w2"].T

    def attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_positions: torch.Tensor) -> torch.Tensor:
        """q: (n, heads, hd); k, v: (ctx, kv_heads, hd) for positions 0..ctx-1; causal by position."""
        group = self.heads // self.kv_heads
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(self.head_dim)
        ctx = torch.arange(k.shape[0])
        mask = ctx[None, :] > q_positions[:, None]
        scores = scores.masked_fill(mask[None], float("-inf"))
        return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(q.shape[0], -1)

    # --------------------------------------------------------- paged cache
    def make_kv_caches(self, num_blocks: int, block_size: int) -> Dict[str, torch.Tensor]:
        return {name: torch.zeros(2, num_blocks, block_size, self.kv_heads, self.head_dim, dtype=self.kv_dtype)
                for name in self.layer_names}

    def forward(self, batch: List[SeqChunk], kv_caches: Dict[str, torch.Tensor], block_size: int, hooks: Any
                ) -> Dict[str, torch.Tensor]:
        """One engine step: each chunk's new tokens through every layer; returns their logits (n, vocab)."""
        hd = self.head_dim
        xs = {c.req_id: self.embed[torch.tensor(c.tokens[c.start:c.start + c.n])] for c in batch}
        for li, (name, p) in enumerate(zip(self.layer_names, self.layers)):
            hooks.wait_for_layer_load(name)
            cache = kv_caches[name]
            for c in batch:
                x = xs[c.req_id]
                pos = torch.arange(c.start, c.start + c.n)
                h = self.rmsnorm(x, p["attn_norm"])
                q = self.rope((h @ p["wq"].T).view(c.n, self.heads, hd), pos)
                k = self.rope((h @ p["wk"].T).view(c.n, self.kv_heads, hd), pos)
                v = (h @ p["wv"].T).view(c.n, self.kv_heads, hd)
                blocks = torch.tensor([c.block_table[i // block_size] for i in pos.tolist()])
                slots = pos % block_size
                cache[0, blocks, slots] = k.to(self.kv_dtype)  # vLLM's reshape_and_cache
                cache[1, blocks, slots] = v.to(self.kv_dtype)
                ctx = torch.arange(0, c.start + c.n)
                cb = torch.tensor([c.block_table[i // block_size] for i in ctx.tolist()])
                k_all = cache[0, cb, ctx % block_size].to(torch.float32)
                v_all = cache[1, cb, ctx % block_size].to(torch.float32)
                x = x + self.attention(q, k_all, v_all, pos) @ p["wo"].T
                xs[c.req_id] = x + self.mlp(self.rmsnorm(x, p["mlp_norm"]), p)
            hooks.save_kv_layer(name, cache)
        return {rid: self.rmsnorm(x, self.final_norm) @ self.lm_head.T for rid, x in xs.items()}

    # ----------------------------------------------------------- reference
    def reference_logits(self, tokens: Sequence[int]) -> torch.Tensor:
        """Every position's logits, computed densely from scratch (K and V rounded to kv_dtype as the cache
        stores them)."""
        hd = self.head_dim
        n = len(tokens)
        pos = torch.arange(n)
        x = self.embed[torch.tensor(list(tokens))]
        for p in self.layers:
            h = self.rmsnorm(x, p["attn_norm"])
            q = self.rope((h @ p["wq"].T).view(n, self.heads, hd), pos)
            k = self.rope((h @ p["wk"].T).view(n, self.kv_heads, hd), pos).to(self.kv_dtype).to(torch.float32)
            v = (h @ p["wv"].T).view(n, self.kv_heads, hd).to(self.kv_dtype).to(torch.float32)
            x = x + self.attention(q, k, v, pos) @ p["wo"].T
            x = x + self.mlp(self.rmsnorm(x, p["mlp_norm"]), p)
        return self.rmsnorm(x, self.final_norm) @ self.lm_head.T
