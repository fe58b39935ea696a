"""What the test modules that run PTStoreConnector inside vLLM's code share (test_vllm_src*.py).

``require_vllm_src()`` (at a module's top, before it imports vllm_src.config or .engine): skips the module, naming the
variable, where there is no vLLM snapshot; an error instead under PTSTORE_VLLM_REQUIRED=1 (ctest sets it where
the snapshot was present at configure time). The fixtures are imported by name into each module:
``no_stand_ins`` (autouse: a test fails if anything stood in for is used while it runs), ``ns`` (a namespace
name, its derived namespaces dropped after the test) and ``engines`` (``engines(ns, **Engine options)``: vLLM
engines on the test process's ptstored, closed after the test).
"""

from __future__ import annotations

import itertools
import os
from typing import Any, Dict, List

import pytest

from . import standins

__all__ = ["engines", "finished_ok", "no_stand_ins", "ns", "params", "prompt", "require_vllm_src"]

_ns = itertools.count()


def require_vllm_src() -> None:
    if standins.vllm_src() is None:
        if os.environ.get("PTSTORE_VLLM_REQUIRED") == "1":
            raise RuntimeError(f"PTSTORE_VLLM_REQUIRED=1 but there is no vLLM source at ${standins.ENV} "
                               f"(or ../shared/vllm-src beside the repository)")
        pytest.skip(f"no vLLM source: set ${standins.ENV} to a vLLM checkout (default ../shared/vllm-src)",
                    allow_module_level=True)


@pytest.fixture(autouse=True)
def no_stand_ins():
    with standins.watch():
        yield


@pytest.fixture()
def ns(client):
    import ptstore

    name = f"vsrc-{os.getpid()}-{next(_ns)}"
    yield name
    for info in client.list_namespaces():
        if info.name == name or info.name.startswith(name + "."):
            try:
                client.drop_namespace(info.name)
            except ptstore.Error:
                pass


@pytest.fixture()
def engines(daemon):
    from . import engine as E

    made: List[Any] = []

    def make(ns: str, **kw: Any) -> Any:
        extra: Dict[str, Any] = dict(kw.pop("extra", {}) or {})
        extra.setdefault("namespace", ns)
        e = E.Engine(daemon.socket, extra=extra, **kw)
        made.append(e)
        return e

    yield make
    for e in made:
        e.close()


def prompt(n: int, seed: int = 1) -> List[int]:
    return [1 + (seed * 7919 + i * 104729) % 31000 for i in range(n)]


def params(engine: Any, req: Any) -> Dict[str, Any]:
    """The request's kv_transfer_params["ptstore"] (loaded_tokens, saved_tokens, namespace)."""
    _, out = engine.result(req.request_id)
    return (out.kv_transfer_params or {}).get("ptstore", {})


def finished_ok(engine: Any, req: Any) -> Any:
    from . import engine as E

    r, out = engine.result(req.request_id)
    assert E.status_name(r.status) == "FINISHED_LENGTH_CAPPED", (r.status, out)
    return out
