"""PTStoreConnector's counters in vLLM's logs and ``/metrics``.

The worker-side connector returns, each step something happened, a
:class:`PTStoreConnectorStats` from ``get_kv_connector_stats`` (what it loaded
and saved since the last call, with each load's and save's latency); the
scheduler-side one adds its lookups, hit tokens and ask-again-later answers.
vLLM sums them across workers (``aggregate``), logs the interval's ``reduce()``
as "KV Transfer metrics: ..." and hands the data to the Prometheus metrics
``build_prom_metrics`` made (:class:`PTStorePromMetrics`):

===========================================  =========  ==============================================
metric                                       type       meaning
===========================================  =========  ==============================================
``vllm:ptstore_lookups``                     counter    lookups of a prompt in the store
``vllm:ptstore_hit_tokens``                  counter    tokens the store supplied past vLLM's own cache
``vllm:ptstore_ask_later``                   counter    lookups answered "ask again later" (a save in
                                                        flight, the store briefly away)
``vllm:ptstore_loads`` / ``_load_errors``    counter    loads done / vLLM blocks that failed to load
``vllm:ptstore_loaded_tokens`` / ``_bytes``  counter    tokens and bytes loaded into the paged caches
``vllm:ptstore_saves`` / ``_save_errors``    counter    saves written / failed or dropped
``vllm:ptstore_saved_tokens`` / ``_bytes``   counter    tokens and bytes the store kept (new blocks)
``vllm:ptstore_load_seconds``                histogram  one request's load, store to pages
``vllm:ptstore_save_seconds``                histogram  one save's write to the store
===========================================  =========  ==============================================
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Dict, List

__all__ = ["PTStoreConnectorStats", "StatsRecorder", "build_prom_metrics", "COUNTERS", "LATENCIES"]

try:  # vLLM's base classes where vLLM is importable
    from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (  # type: ignore[import-not-found]
        KVConnectorPromMetrics, KVConnectorStats)
except ImportError:  # pragma: no cover - exercised where vLLM is not installed
    KVConnectorPromMetrics = object  # type: ignore[assignment,misc]

    @dataclasses.dataclass
    class KVConnectorStats:  # type: ignore[no-redef]
        data: Dict[str, Any] = dataclasses.field(default_factory=dict)

COUNTERS = ("lookups", "hit_tokens", "ask_later", "loads", "load_errors", "loaded_tokens", "loaded_bytes",
            "saves", "save_errors", "saved_tokens", "saved_bytes")
LATENCIES = ("load_seconds", "save_seconds")
_HELP = {
    "lookups": "Lookups of a prompt in PTStore.",
    "hit_tokens": "Tokens PTStore supplied past vLLM's own prefix cache.",
    "ask_later": "PTStore lookups answered 'ask again later' (a save in flight, the store briefly away).",
    "loads": "PTStore loads done.",
    "load_errors": "vLLM blocks whose load from PTStore failed (recomputed).",
    "loaded_tokens": "Tokens loaded from PTStore into the paged KV caches.",
    "loaded_bytes": "Bytes loaded from PTStore into the paged KV caches.",
    "saves": "Saves written to PTStore.",
    "save_errors": "Saves to PTStore that failed or were dropped.",
    "saved_tokens": "Tokens PTStore kept from saves (blocks it did not hold).",
    "saved_bytes": "Bytes PTStore kept from saves.",
    "load_seconds": "One request's load from PTStore into the paged KV caches.",
    "save_seconds": "One save's write to PTStore.",
}


@dataclasses.dataclass
class PTStoreConnectorStats(KVConnectorStats):  # type: ignore[misc,valid-type]
    """``data``: the counters of :data:`COUNTERS` (ints) and the latencies of :data:`LATENCIES` (lists of
    seconds) of one interval. Picklable (it travels from the workers to the engine core)."""

    def __post_init__(self) -> None:
        for k in COUNTERS:
            self.data.setdefault(k, 0)
        for k in LATENCIES:
            self.data.setdefault(k, [])

    def reset(self) -> None:
        self.data = {}
        self.__post_init__()

    def aggregate(self, other: Any) -> "PTStoreConnectorStats":
        if other is None or getattr(other, "data", None) is None:
            return self
        for k, v in other.data.items():
            if isinstance(v, list):
                self.data.setdefault(k, []).extend(v)
            elif isinstance(v, (int, float)):
                self.data[k] = self.data.get(k, 0) + v
        return self

    def reduce(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {k: self.data.get(k, 0) for k in COUNTERS}
        for k in LATENCIES:
            xs = sorted(self.data.get(k, []))
            name = k.replace("_seconds", "")
            out[f"{name}_avg_ms"] = round(1e3 * sum(xs) / len(xs), 3) if xs else 0.0
            out[f"{name}_p99_ms"] = round(1e3 * xs[min(len(xs) - 1, int(0.99 * len(xs)))], 3) if xs else 0.0
        return out

    def is_empty(self) -> bool:
        return not any(self.data.get(k, 0) for k in COUNTERS) and not any(self.data.get(k) for k in LATENCIES)


class StatsRecorder:
    """What one side of the connector counted since the last ``take()``. Thread safe (loads and saves run in
    background threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data = PTStoreConnectorStats()

    def add(self, key: str, n: float = 1) -> None:
        with self._lock:
            self._data.data[key] = self._data.data.get(key, 0) + n

    def observe(self, key: str, seconds: float) -> None:
        with self._lock:
            self._data.data[key].append(seconds)

    def take(self) -> Any:
        """The interval's stats (None when nothing happened), and a new interval."""
        with self._lock:
            data, self._data = self._data, PTStoreConnectorStats()
        return None if data.is_empty() else data


class PTStorePromMetrics(KVConnectorPromMetrics):  # type: ignore[misc,valid-type]
    """The counters and histograms above, one child per engine (vLLM's labels)."""

    def __init__(self, vllm_config: Any, metric_types: Any, labelnames: List[str],
                 per_engine_labelvalues: Dict[int, List[object]]) -> None:
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)

        def per_engine(metric: Any) -> Dict[int, Any]:
            return {i: metric.labels(*values) for i, values in per_engine_labelvalues.items()}

        self.counters = {k: per_engine(self._counter_cls(name=f"vllm:ptstore_{k}", documentation=_HELP[k],
                                                         labelnames=labelnames)) for k in COUNTERS}
        buckets = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0]
        self.histograms = {k: per_engine(self._histogram_cls(name=f"vllm:ptstore_{k}", documentation=_HELP[k],
                                                             buckets=buckets, labelnames=labelnames))
                           for k in LATENCIES}

    def observe(self, transfer_stats_data: Dict[str, Any], engine_idx: int = 0) -> None:
        for k in COUNTERS:
            v = transfer_stats_data.get(k, 0)
            if v:
                self.counters[k][engine_idx].inc(v)
        for k in LATENCIES:
            for s in transfer_stats_data.get(k, ()):
                self.histograms[k][engine_idx].observe(s)


def build_prom_metrics(vllm_config: Any, metric_types: Any, labelnames: List[str],
                       per_engine_labelvalues: Dict[int, List[object]]) -> Any:
    if KVConnectorPromMetrics is object:
        return None
    return PTStorePromMetrics(vllm_config, metric_types, labelnames, per_engine_labelvalues)
