#!/usr/bin/python3
"""Dump the KV cache of a small random-weight transformer, for bench_compress.

Builds a Mistral-like decoder (grouped-query attention, RMSNorm, rotary
embeddings, SwiGLU MLP; defaults: 4 layers, d_model 512, 8 query heads, 2 KV
heads, head_dim 64) with weights drawn like a fresh Hugging Face model
(normal, std 0.02) under a fixed torch.manual_seed, runs random token ids
through it (one sequence, causal attention), and writes the K and V caches,
K after the rotary embedding as a serving engine stores it, as raw values in
token-major layout:

    [token][layer][k, v][kv_head][head_dim]

i.e. each token's KV is contiguous, as PTStore stores a block of tokens.
Then prints the shape and some statistics and the bench_compress command.

    /usr/bin/python3 bench/kv_dump.py --out /tmp/kv.bf16
    build/bench/bench_compress --no-synthetic --kv-file /tmp/kv.bf16 --dtype bf16

The weights are random, so the values have the scale of a real cache but not
its structure (a trained model's K cache has outlier channels, attention
sinks, and so on): treat the result as a sanity check of the synthetic data,
not as a measurement of a real model.

Needs PyTorch (Debian: apt install python3-torch, which is 1.13 on bookworm;
nothing newer is used). Exits 2 when it is missing.
"""

import argparse
import math
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="kv_dump.bf16", help="output file (default: %(default)s)")
    p.add_argument("--tokens", type=int, default=4096, help="sequence length (default: %(default)s)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--heads", type=int, default=8, help="query heads")
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--ffn", type=int, default=1792, help="SwiGLU hidden size (Mistral: 3.5 x d_model)")
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--init-std", type=float, default=0.02, help="std of the random weights")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16",
                   help="type of the values written (default: %(default)s)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    a = p.parse_args()
    if a.heads % a.kv_heads != 0:
        p.error("--heads must be a multiple of --kv-heads")
    if a.head_dim % 2 != 0:
        p.error("--head-dim must be even (rotary embeddings rotate pairs)")
    if min(a.tokens, a.layers, a.d_model, a.heads, a.kv_heads, a.head_dim, a.ffn, a.vocab) <= 0:
        p.error("sizes must be positive")
    return a


def main():
    args = parse_args()
    try:
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    except ImportError as e:
        print(f"kv_dump.py: PyTorch is not installed for {sys.executable} ({e}).\n"
              "Install it with:  sudo apt install python3-torch\n"
              "(or run this script with a Python that has torch).", file=sys.stderr)
        return 2

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    class RMSNorm(nn.Module):
        def __init__(self, dim, eps=1e-5):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

    def rotate_half(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            d, h, hk, hd = args.d_model, args.heads, args.kv_heads, args.head_dim
            self.h, self.hk, self.hd = h, hk, hd
            self.wq = nn.Linear(d, h * hd, bias=False)
            self.wk = nn.Linear(d, hk * hd, bias=False)
            self.wv = nn.Linear(d, hk * hd, bias=False)
            self.wo = nn.Linear(h * hd, d, bias=False)

        def forward(self, x, cos, sin):
            b, t, _ = x.shape
            q = self.wq(x).view(b, t, self.h, self.hd).transpose(1, 2)   # [b, h, t, hd]
            k = self.wk(x).view(b, t, self.hk, self.hd).transpose(1, 2)  # [b, hk, t, hd]
            v = self.wv(x).view(b, t, self.hk, self.hd).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            # Grouped-query attention: each KV head serves h / hk query heads.
            rep = self.h // self.hk
            kr = k.repeat_interleave(rep, dim=1)
            vr = v.repeat_interleave(rep, dim=1)
            # Causal attention by blocks of queries, so that the score matrix
            # of a long sequence never exists whole (torch 1.13 has no fused
            # scaled_dot_product_attention).
            out = torch.empty_like(q)
            scale = 1.0 / math.sqrt(self.hd)
            block = 512
            for s in range(0, t, block):
                e = min(t, s + block)
                scores = torch.matmul(q[:, :, s:e], kr[:, :, :e].transpose(-2, -1)) * scale
                rows = torch.arange(s, e).unsqueeze(1)
                cols = torch.arange(0, e).unsqueeze(0)
                scores = scores.masked_fill(cols > rows, float("-inf"))
                out[:, :, s:e] = torch.matmul(torch.softmax(scores, dim=-1), vr[:, :, :e])
            out = out.transpose(1, 2).reshape(b, t, self.h * self.hd)
            return self.wo(out), k, v

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = nn.Linear(args.d_model, args.ffn, bias=False)  # gate
            self.w3 = nn.Linear(args.d_model, args.ffn, bias=False)  # up
            self.w2 = nn.Linear(args.ffn, args.d_model, bias=False)  # down

        def forward(self, x):
            return self.w2(F.silu(self.w1(x)) * self.w3(x))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn_norm = RMSNorm(args.d_model)
            self.attn = Attention()
            self.mlp_norm = RMSNorm(args.d_model)
            self.mlp = MLP()

        def forward(self, x, cos, sin):
            a, k, v = self.attn(self.attn_norm(x), cos, sin)
            x = x + a
            x = x + self.mlp(self.mlp_norm(x))
            return x, k, v

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(args.vocab, args.d_model)
            self.blocks = nn.ModuleList([Block() for _ in range(args.layers)])
            # Hugging Face's initialisation of Llama/Mistral: N(0, 0.02) for
            # every matrix, ones for the norms.
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, mean=0.0, std=args.init_std)

        def forward(self, ids):
            t = ids.shape[1]
            hd = args.head_dim
            inv_freq = 1.0 / (args.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
            freqs = torch.outer(torch.arange(t, dtype=torch.float32), inv_freq)  # [t, hd/2]
            emb = torch.cat((freqs, freqs), dim=-1)                               # [t, hd]
            cos, sin = emb.cos(), emb.sin()
            x = self.embed(ids)
            caches = []
            for blk in self.blocks:
                x, k, v = blk(x, cos, sin)
                caches.append((k[0], v[0]))  # batch 0: [hk, t, hd]
            return caches

    t0 = time.time()
    model = Model().eval()
    ids = torch.randint(0, args.vocab, (1, args.tokens))
    with torch.no_grad():
        caches = model(ids)
    # [layer][k/v][kv_head][token][head_dim] -> [token][layer][k/v][kv_head][head_dim]
    kv = torch.stack([torch.stack([k, v]) for k, v in caches]).permute(3, 0, 1, 2, 4).contiguous()
    out_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    kv_out = kv.to(out_dtype).contiguous()
    # numpy has no bfloat16: write 16-bit values through an int16 view (the
    # same bytes).
    raw = kv_out.view(torch.int16) if args.dtype != "fp32" else kv_out
    raw.numpy().tofile(args.out)
    elapsed = time.time() - t0

    elem = kv_out.element_size()
    per_token = args.layers * 2 * args.kv_heads * args.head_dim * elem
    total = per_token * args.tokens
    print(f"kv_dump.py: wrote {args.out}: {total} bytes ({total / 2**20:.1f} MiB) in {elapsed:.1f} s")
    print(f"  shape [token, layer, k/v, kv_head, head_dim] = {list(kv_out.shape)}, {args.dtype}, "
          f"{per_token} bytes per token, little-endian")
    print(f"  model: {args.layers} layers, d_model {args.d_model}, {args.heads} query heads, "
          f"{args.kv_heads} KV heads, head_dim {args.head_dim}, SwiGLU {args.ffn}, vocab {args.vocab}, "
          f"rope theta {args.rope_theta:g}, weights N(0, {args.init_std:g}), seed {args.seed}")
    print("  per layer (K after RoPE; channel = kv_head x head_dim):")
    kvf = kv_out.float()
    for layer in range(args.layers):
        for which, name in ((0, "K"), (1, "V")):
            x = kvf[:, layer, which].reshape(args.tokens, -1)  # [token, channel]
            ch = x.std(dim=0)
            med = ch.median().item()
            outliers = int((ch > 3 * med).sum().item()) if med > 0 else 0
            print(f"    layer {layer} {name}: std {x.std().item():.4f}, max |x| {x.abs().max().item():.3f}, "
                  f"channel std {ch.min().item():.4f}..{ch.max().item():.4f} (median {med:.4f}), "
                  f"{outliers} channels above 3x median")
    print(f"  measure it with: bench_compress --no-synthetic --kv-file {args.out} --dtype {args.dtype}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
