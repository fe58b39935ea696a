"""PTStoreConnector for Mamba / linear-attention hybrids, inside vLLM's own code (see test_vllm_src.py).

Engines of a hybrid model whose layers are full attention and stand-in Mamba2 layers (vLLM's MambaSpec with
its conv and SSM state tensors, allocated as vLLM's model runner allocates them, in prefix caching's
mamba_cache_mode "all" or "align"). The stand-in Mamba layer reads its initial state where vLLM's kernels
read it and checks it is the model's state after the computed prefix, so a state loaded for the wrong
prefix, block or tensor fails the step; in align mode vLLM's own preprocess_mamba moves the running state
between blocks before each step.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vllm_src.testing import require_vllm_src

require_vllm_src()

from vllm_src import config as C  # noqa: E402
from vllm_src import engine as E  # noqa: E402,F401
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole  # noqa: E402
from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec, MambaSpec  # noqa: E402
from vllm_src.testing import engines, finished_ok, no_stand_ins, ns, params, prompt  # noqa: E402,F401

from ptstore.vllm.groups import STATE_TAG_BYTES, state_tag  # noqa: E402

MAMBA = ["state", "full", "state", "full"]  # Nemotron-H-like: Mamba2 layers and full attention


def stored_blocks(client, ns, tokens):
    layout = client.get_namespace(ns).layout
    bt = layout.block_tokens
    n = len(tokens) // bt * bt
    blocks = torch.empty((n // bt, layout.bytes_per_block), dtype=torch.uint8)
    assert client.load(ns, np.asarray(tokens[:n], dtype=np.uint32), blocks) == n
    return layout, blocks


def valid_state_blocks(client, ns, tokens):
    """The stored blocks of `tokens` whose state tags say valid (in every state group)."""
    layout, blocks = stored_blocks(client, ns, tokens)
    out = []
    for i in range(blocks.shape[0]):
        ok = True
        for g, group in enumerate(layout.groups):
            if group.kind != "state":
                continue
            off, sb = layout.group_offset(g), group.state_bytes
            for layer in range(group.layers):
                tag = blocks[i, off + (layer + 1) * sb - STATE_TAG_BYTES:off + (layer + 1) * sb]
                ok = ok and bytes(tag.numpy()) == state_tag(i)
        if ok:
            out.append(i)
    return out


def assert_stored_states_are_the_models(client, engine, ns, tokens):
    """Every stored block whose tag says valid holds each Mamba layer's state after the block's last token."""
    layout, blocks = stored_blocks(client, ns, tokens)
    bt = layout.block_tokens
    w = engine.worker
    checked = 0
    for i in valid_state_blocks(client, ns, tokens):
        for g, group in enumerate(engine.kcc.kv_cache_groups):
            spec = group.kv_cache_spec
            if not isinstance(spec, MambaSpec):
                continue
            off, sb = layout.group_offset(g), layout.groups[g].state_bytes
            names = sorted(group.layer_names, key=lambda n: w.mamba_layers[n].index)
            for pos, name in enumerate(names):
                want = b"".join(t.contiguous().view(torch.uint8).numpy().tobytes() for t in engine.oracle.state(
                    tokens[:(i + 1) * bt], w.mamba_layers[name].index, spec.shapes, spec.dtypes, w.tp_rank))
                got = bytes(blocks[i, off + pos * sb:off + pos * sb + len(want)].numpy())
                assert got == want, f"block {i}, layer {name}: the stored state is not the model's"
                checked += 1
    return checked


def test_a_mamba_hybrid_in_mode_all_shares_prefixes_and_loads_only_the_last_state(engines, ns, client):
    """mamba_cache_mode all (Mamba2 models): vLLM's kernels keep every whole block's state while the request
    runs there, and drop all but the last; each step's new blocks are saved with their states, and a load
    writes the attention blocks and the state of the hit's last block only."""
    kw = dict(layer_kinds=MAMBA, mamba_mode="all", max_num_batched_tokens=64)
    a, b = engines(ns, **kw), engines(ns, **kw)
    assert [type(g.kv_cache_spec).__name__ for g in a.kcc.kv_cache_groups] == ["MambaSpec", "FullAttentionSpec"]
    doc = prompt(200)
    ra = a.saved(doc + [1], max_tokens=1)
    assert params(a, ra)["saved_tokens"] == 192
    layout = client.get_namespace(ns).layout
    assert [g.kind for g in layout.groups] == ["state", "full"]
    assert valid_state_blocks(client, ns, doc) == list(range(12))
    assert assert_stored_states_are_the_models(client, a, ns, doc) == 12 * 2
    rb = b.add(doc + [2], max_tokens=3)
    b.run()
    finished_ok(b, rb)
    assert params(b, rb)["loaded_tokens"] == 192
    w = b.worker.connector.worker_side
    state, full = layout.group_bytes_per_block(0), layout.group_bytes_per_block(1)
    assert w.stats["loaded_bytes"] == 12 * full + 1 * state
    assert b.worker.checked_tokens >= 192


def test_the_stand_in_mamba_layer_fails_a_load_that_left_its_state_out(engines, ns, client, monkeypatch):
    """The check's teeth: a load that writes the attention blocks but not the last block's state makes the
    Mamba layer read another state than the model's, and the step fails."""
    from ptstore.vllm import _worker

    kw = dict(layer_kinds=MAMBA, mamba_mode="all")
    a, b = engines(ns, **kw), engines(ns, **kw)
    doc = prompt(100)
    a.saved(doc + [1], max_tokens=1)
    real = _worker.scatter_layer
    monkeypatch.setattr(_worker, "scatter_layer",
                        lambda kv, copier, group, layer, *rest: None if layer.is_state else
                        real(kv, copier, group, layer, *rest))
    b.add(doc + [2], max_tokens=1)
    with pytest.raises(AssertionError, match="held KV other than the model's"):
        b.run()


def test_vllms_scheduler_refuses_external_tokens_for_mamba_models_in_align_mode():
    """Why align mode loads nothing with this vLLM: its Scheduler._mamba_block_aligned_split asserts that no
    token comes from a connector ("External KV connector is not verified yet"), which would stop the engine.
    The connector asks that function itself (vllm_takes_external_state)."""
    import types

    from vllm.v1.core.sched.scheduler import Scheduler

    from ptstore.vllm._scheduler import vllm_takes_external_state

    me = types.SimpleNamespace(cache_config=types.SimpleNamespace(block_size=16), use_eagle=False)
    req = types.SimpleNamespace(num_computed_tokens=0, num_prompt_tokens=64, num_tokens=64)
    with pytest.raises(AssertionError, match="not verified"):
        Scheduler._mamba_block_aligned_split(me, req, 32, 0, 32)
    assert vllm_takes_external_state() is False


def test_in_align_mode_with_this_vllm_prefixes_are_saved_and_no_hit_is_offered(engines, ns, client):
    """mamba_cache_mode align (gated delta nets): the engine runs on, its prompts are saved with the states of
    the blocks where a step ended (the block-aligned split's chunks of 64) tagged valid, the others not, and
    a second engine gets no hit from the store (it computes)."""
    kw = dict(layer_kinds=MAMBA, mamba_mode="align", max_num_batched_tokens=64)
    a, b = engines(ns, **kw), engines(ns, **kw)
    assert a.scheduler.need_mamba_block_aligned_split
    doc = prompt(200)
    ra = a.saved(doc + [1], max_tokens=1)
    assert params(a, ra)["saved_tokens"] == 192
    assert valid_state_blocks(client, ns, doc) == [3, 7, 11]
    assert assert_stored_states_are_the_models(client, a, ns, doc) == 3 * 2
    rb = b.add(doc + [2], max_tokens=3)
    b.run()
    finished_ok(b, rb)
    assert params(b, rb).get("loaded_tokens", 0) == 0
    assert b.worker.connector.worker_side.stats["loaded_tokens"] == 0


@pytest.fixture()
def lifted_assertion(monkeypatch):
    """vLLM's scheduler as upstream proposes to change it (vllm-project/vllm#41635, #42620): the block-aligned
    split counts a connector's tokens as computed, and an async load (nothing to compute yet) is not split.
    The rest is vLLM's own function."""
    from vllm.v1.core.sched.scheduler import Scheduler

    split = Scheduler._mamba_block_aligned_split

    def lifted(self, request, num_new_tokens, num_new_local_computed_tokens=0, num_external_computed_tokens=0):
        if num_external_computed_tokens and num_new_tokens == 0:
            return 0
        return split(self, request, num_new_tokens, num_new_local_computed_tokens + num_external_computed_tokens, 0)

    monkeypatch.setattr(Scheduler, "_mamba_block_aligned_split", lifted)


@pytest.mark.parametrize("mode", ["sync", "load_async"])
def test_in_align_mode_a_vllm_that_takes_them_loads_hits_ending_at_a_stored_state(engines, ns, client, mode,
                                                                                  lifted_assertion):
    """With vLLM's split taking a connector's tokens: a hit ends at the last stored block whose state is valid
    (the scheduler reads the tags out of its pins), the load writes that block's state and vLLM's running-state
    block's (which preprocess_mamba filled from the first before the load), and the Mamba layers go on from
    the model's state. load_async is turned off (vLLM's split leaves an async load's request unscheduled)."""
    kw = dict(layer_kinds=MAMBA, mamba_mode="align", max_num_batched_tokens=64,
              extra={"load_async": mode == "load_async"})
    a, b = engines(ns, **kw), engines(ns, **kw)
    doc = prompt(200)
    a.saved(doc + [1], max_tokens=1)
    assert valid_state_blocks(client, ns, doc) == [3, 7, 11]
    rb = b.add(doc + [2], max_tokens=3)  # the whole stored prefix: 192 tokens, block 11's state
    b.run()
    finished_ok(b, rb)
    assert params(b, rb)["loaded_tokens"] == 192
    assert "WAITING_FOR_REMOTE_KVS" not in b.seen[rb.request_id]
    rc = b.add(doc[:150] + [3, 4], max_tokens=2)  # the store matches 144 tokens: the last valid state is block 7
    b.run()
    finished_ok(b, rc)
    assert params(b, rc)["loaded_tokens"] == 128
    assert b.scheduler.connector.scheduler_side.stats["state_hits_trimmed"] == 1
    assert b.worker.checked_tokens >= 192


def test_a_mamba_hybrid_at_tensor_parallel_2_keeps_each_ranks_state_in_its_namespace(engines, ns, client):
    """Each rank's Mamba state (its share of the heads) goes to its rank namespace; a hit needs the state in
    every rank's, and each rank loads its own. A prefix saved at another degree is not offered (a state is not
    regrouped across degrees)."""
    kw = dict(layer_kinds=MAMBA, mamba_mode="all")
    a, b = engines(ns, tp=2, **kw), engines(ns, tp=2, **kw)
    doc = prompt(100)
    a.saved(doc + [1], max_tokens=1)
    names = sorted(i.name for i in client.list_namespaces() if i.name.startswith(ns + "."))
    assert len(names) == 2
    for w, name in zip(a.workers, names):
        assert valid_state_blocks(client, name, doc) == list(range(6))
    rb = b.add(doc + [2], max_tokens=2)
    b.run()
    finished_ok(b, rb)
    assert params(b, rb)["loaded_tokens"] == 96
    for w in b.workers:
        assert w.connector.worker_side.stats["loaded_tokens"] == 96 and w.checked_tokens >= 96
    c = engines(ns, tp=1, **kw)
    rc = c.add(doc + [3], max_tokens=1)
    c.run()
    assert params(c, rc).get("loaded_tokens", 0) == 0


def test_mamba_specs_it_cannot_store_are_refused_at_start_by_name(daemon):
    """Speculative decoding's extra state blocks (draft tokens' states) and prefix caching off (mode none: one
    state per request, no block states) are refused when the connector starts, naming the layer."""
    from vllm.v1.kv_cache_interface import MambaSpec

    cfg = C.vllm_config(socket=daemon.socket, layers=2, kv_heads=2, head_size=16, block_size=16)
    shapes, dtypes = C.state_shapes(2)
    for spec, what in [(MambaSpec(block_size=16, shapes=shapes, dtypes=dtypes, mamba_cache_mode="all",
                                  num_speculative_blocks=2), "speculative"),
                       (MambaSpec(block_size=16, shapes=shapes, dtypes=dtypes, mamba_cache_mode="none"), "'none'")]:
        kcc = KVCacheConfig(num_blocks=8, kv_cache_tensors=[],
                            kv_cache_groups=[KVCacheGroupSpec(["model.layers.0.mixer"], spec)])
        with pytest.raises(ValueError, match=what):
            KVConnectorFactory.create_connector(config=cfg, role=KVConnectorRole.SCHEDULER, kv_cache_config=kcc)


@pytest.mark.parametrize("mamba_mode", ["all", "align"])
def test_a_chats_next_turn_hits_its_history_with_the_state_after_it(engines, ns, client, mamba_mode,
                                                                      lifted_assertion):
    """Generated tokens (save_generated): the blocks decoding completes are saved in the step that completes
    them, with the state vLLM holds there, so the next turn of a conversation loads its whole history and
    its Mamba layers start from the state after it."""
    kw = dict(layer_kinds=MAMBA, mamba_mode=mamba_mode, max_num_batched_tokens=64)
    a, b = engines(ns, **kw), engines(ns, **kw)
    ra = a.saved(prompt(70), max_tokens=40)
    history = list(ra.all_token_ids)  # 110 tokens: 6 whole blocks computed (the last sampled token has no KV)
    assert params(a, ra)["saved_tokens"] == 96
    assert 5 in valid_state_blocks(client, ns, history)  # block 5 completed by a decode step
    assert_stored_states_are_the_models(client, a, ns, history)
    rb = b.add(history + [7, 8], max_tokens=2)
    b.run()
    finished_ok(b, rb)
    assert params(b, rb)["loaded_tokens"] == 96
