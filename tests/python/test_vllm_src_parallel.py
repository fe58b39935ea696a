"""PTStoreConnector with pipeline parallelism, inside vLLM's own code (see test_vllm_src.py).

An engine of pipeline-parallel degree ``pp`` has one worker per (stage, tensor-parallel rank), in vLLM's rank
order; each stage's workers hold the layers vLLM's get_pp_indices gives the stage, and vLLM's
KVOutputAggregator merges every worker's connector output, taking the sampled tokens from the last stage.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vllm_src.testing import require_vllm_src

require_vllm_src()

from vllm_src import engine as E  # noqa: E402
from vllm_src.testing import engines, finished_ok, no_stand_ins, ns, params, prompt  # noqa: E402,F401

from ptstore.vllm.keys import rank_heads, rank_namespace  # noqa: E402


def assert_each_worker_stored_its_layers_and_heads(client, engine, ns, tokens, tp, pp):
    """Worker (stage s, rank r)'s namespace holds the model's K/V of its stage's layers and its rank's heads."""
    from vllm.distributed.utils import get_pp_indices

    n = len(tokens) // engine.block_size * engine.block_size
    kv = engine.oracle.kv(tokens[:n])  # (n, layers, 2, heads, dim)
    for s in range(pp):
        lo, hi = get_pp_indices(engine.oracle.layers, s, pp)
        for r in range(tp):
            name = rank_namespace(ns, r, tp, s, pp)
            layout = client.get_namespace(name).layout
            assert layout.layers == hi - lo, (name, layout)
            out = torch.empty(layout.kv_shape(n), dtype=engine.oracle.dtype)
            assert client.load(name, np.asarray(tokens[:n], dtype=np.uint32), out) == n
            heads = rank_heads(r, tp, engine.oracle.kv_heads)
            assert torch.equal(out, kv[:, lo:hi, :, heads.start:heads.stop]), f"{name} holds other KV"


def test_each_pipeline_stage_saves_its_layers_and_heads(engines, ns, client):
    """PP 2 x TP 2: four workers, four namespaces, each with its stage's layers and its rank's heads (their hits
    pinned in all four: test_vllm_src.py's test_a_hit_the_scheduler_pinned_loads_though_it_is_removed_*)."""
    a = engines(ns, layers=4, kv_heads=4, tp=2, pp=2)
    assert [(w.pp_rank, w.tp_rank, len(w.layers)) for w in a.workers] == [(0, 0, 2), (0, 1, 2), (1, 0, 2), (1, 1, 2)]
    doc = prompt(100)
    ra = a.saved(doc + [1], max_tokens=1)
    assert params(a, ra)["saved_tokens"] == 96
    assert_each_worker_stored_its_layers_and_heads(client, a, ns, doc, tp=2, pp=2)


@pytest.mark.parametrize("saved,loaded,layers", [((1, 2), (1, 1), 4), ((1, 1), (1, 2), 5), ((2, 1), (1, 2), 4),
                                                  ((2, 2), (4, 1), 5), ((1, 3), (2, 2), 5)],
                         ids=["pp2-pp1", "pp1-pp2-uneven", "tp2-pp2", "tp2pp2-tp4", "pp3-tp2pp2"])
def test_a_prefix_saved_at_one_pipeline_degree_loads_at_another(engines, ns, saved, loaded, layers):
    """A deployment of other (TP, PP) degrees finds a prefix in the namespaces of the degrees that saved it;
    each of its workers reads its heads of its stage's layers from the workers' namespaces that hold them
    (stages split as vLLM's get_pp_indices splits them: 5 layers over 2 stages are 3 + 2)."""
    (tp_a, pp_a), (tp_b, pp_b) = saved, loaded
    a = engines(ns, layers=layers, kv_heads=4, tp=tp_a, pp=pp_a)
    b = engines(ns, layers=layers, kv_heads=4, tp=tp_b, pp=pp_b)
    doc = prompt(100)
    ra = a.saved(doc + [1], max_tokens=1)
    assert params(a, ra)["saved_tokens"] == 96
    rb = b.add(doc + [2], max_tokens=2)
    b.run()
    finished_ok(b, rb)
    assert params(b, rb)["loaded_tokens"] == 96
    for w in b.workers:  # every worker loaded its layers and heads, and its attention checked them
        assert w.connector.worker_side.stats["loaded_tokens"] == 96 and w.checked_tokens >= 96
    assert sum(len(w.layers) for w in b.workers) == layers * tp_b
