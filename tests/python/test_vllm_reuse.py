"""The proof that reusing KV through PTStore is correct: a small Mistral-like transformer (tiny_mistral.py:
RMSNorm, RoPE, grouped-query attention with 4 query and 2 KV heads, SwiGLU, 3 layers, random weights with a
fixed seed) served by the vLLM-like engine of vllm_harness.py with PTStoreConnector.

Engine A runs a prompt's prefix and saves its KV through the connector into ptstored. Engine B (a fresh paged
cache, other block ids) gets the whole prompt, loads the prefix's KV from PTStore and computes only the suffix.
B's logits must equal those of recomputing everything, and be bit-identical to an engine without PTStore that
computed the prefix and then the suffix in the same two chunks."""

from __future__ import annotations


import pytest

torch = pytest.importorskip("torch")

from tiny_mistral import TinyMistral
from vllm_harness import MiniEngine, Request, tokens

# The engines' block orders (conftest.py's engines fixture).
BLOCK_ORDER_SEED_BASE = 100


def cached_prefix(engine, rid, n_tokens, block_size=16):
    """The KV of a request's first n_tokens, gathered out of the engine's paged caches: (layers, 2, n, h, d)."""
    blocks = engine.worker.block_tables[rid]
    per_layer = []
    for name in engine.worker.model.layer_names:
        kv = engine.worker.kv_caches[name]
        rows = [kv[:, blocks[t // block_size], t % block_size] for t in range(n_tokens)]
        per_layer.append(torch.stack(rows, dim=1))
    return torch.stack(per_layer)


def reuse(engines, model, prompt, prefix_len):
    """(B's logits for positions >= the loaded prefix, the loaded length, A's prefix KV, B's loaded KV)."""
    a = engines(model, max_num_batched_tokens=4096)
    a.add(Request("a", prompt[:prefix_len], max_tokens=1))
    a.step()  # the prefix in one chunk; its KV is saved through the connector
    saved = prefix_len // 16 * 16
    a_kv = cached_prefix(a, "a", saved)
    a.run()

    b = engines(model)
    b.add(Request("b", prompt, max_tokens=1))
    b.run()
    loaded = b.scheduled_log[0].kv_connector_metadata.loads[0].end
    assert loaded == saved and b.worker_conn.worker_side.stats["loaded_tokens"] == saved
    b_kv = cached_prefix(b, "b", saved)
    return b.suffix_logits("b", loaded), loaded, a_kv, b_kv


@pytest.mark.parametrize("prefix_len", [80, 90])  # block aligned, and not (then 80 tokens are reused)
def test_logits_after_loading_the_prefix_equal_recomputing(engines, prefix_len):
    model = TinyMistral(seed=1, kv_dtype=torch.float32)
    prompt = tokens(131, seed=prefix_len, vocab=model.vocab)
    got, loaded, a_kv, b_kv = reuse(engines, model, prompt, prefix_len)
    assert torch.equal(a_kv, b_kv)  # the loaded KV is bit for bit what A computed

    full = model.reference_logits(prompt)  # everything recomputed, densely, no cache at all
    assert got.shape == (len(prompt) - loaded, model.vocab)
    torch.testing.assert_close(got, full[loaded:], rtol=1e-5, atol=1e-5)

    if prefix_len != loaded:
        return  # A computed its 80 reused tokens in a chunk of 90: the same KV up to float rounding only
    # An engine without PTStore computing the same two chunks gets the very same bits.
    c = engines(model, connector=False, max_num_batched_tokens=loaded)
    c.add(Request("c", prompt, max_tokens=1))
    c.run()
    assert torch.equal(c.suffix_logits("c", loaded), got)


def test_bf16_kv_round_trip_is_exact(engines, client, ns):
    model = TinyMistral(seed=2, kv_dtype=torch.bfloat16)
    prompt = tokens(100, seed=3, vocab=model.vocab)
    got, loaded, a_kv, b_kv = reuse(engines, model, prompt, 64)
    assert client.layout(ns).dtype == "bf16"
    assert a_kv.dtype == torch.bfloat16 and torch.equal(a_kv, b_kv)
    c = engines(model, connector=False, max_num_batched_tokens=loaded)
    c.add(Request("c", prompt, max_tokens=1))
    c.run()
    assert torch.equal(c.suffix_logits("c", loaded), got)  # bf16 storage loses nothing
    # Against a dense recompute only the bf16 rounding of K and V (computed in other chunk shapes) differs.
    full = model.reference_logits(prompt)
    torch.testing.assert_close(got, full[loaded:], rtol=0, atol=1e-3)


def test_wrong_kv_would_be_caught(engines):
    """The comparison has teeth: KV saved by another model (same tokens, so the store hits) gives other logits."""
    prompt = tokens(100, seed=4, vocab=512)
    other = TinyMistral(seed=99)
    a = engines(other)
    a.add(Request("a", prompt[:64], max_tokens=1))
    a.run()
    model = TinyMistral(seed=1)
    b = engines(model)
    b.add(Request("b", prompt, max_tokens=1))
    b.run()
    assert b.worker_conn.worker_side.stats["loaded_tokens"] == 64
    diff = (b.suffix_logits("b", 64) - model.reference_logits(prompt)[64:]).abs().max()
    assert diff > 0.1


def test_paged_model_matches_its_dense_reference():
    """The harness's model itself: paged, chunked computation == dense computation."""
    model = TinyMistral(seed=5)
    prompt = tokens(77, seed=6, vocab=model.vocab)
    e = MiniEngine(model, connector=False, max_num_batched_tokens=20)  # 4 chunks
    e.add(Request("x", prompt, max_tokens=1))
    e.run()
    torch.testing.assert_close(e.suffix_logits("x", 0), model.reference_logits(prompt), rtol=1e-5, atol=1e-5)
