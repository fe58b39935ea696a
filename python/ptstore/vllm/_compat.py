"""vLLM's v1 KV-connector base types, or stand-ins with the same names when vLLM is not installed.

With vLLM importable, ``KVConnectorBase_V1``, ``KVConnectorMetadata`` and
``KVConnectorRole`` are vLLM's own (``vllm.distributed.kv_transfer.
kv_connector.v1.base``), so vLLM's factory accepts ``PTStoreConnector`` as one
of its connectors. Without vLLM (tests, this project's CI) they are minimal
stand-ins that keep the names, signatures and the metadata binding of vLLM's
classes, so the connector can be driven exactly as vLLM's scheduler and worker
drive it.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from typing import Any, Optional, Tuple

__all__ = ["HAVE_VLLM", "KVConnectorBase_V1", "KVConnectorMetadata", "KVConnectorRole", "KVConnectorWorkerMetadata",
           "SupportsHMA"]

try:  # pragma: no cover - exercised only where vLLM is installed
    from vllm.distributed.kv_transfer.kv_connector.v1.base import (  # type: ignore[import-not-found]
        KVConnectorBase_V1, KVConnectorMetadata, KVConnectorRole)

    HAVE_VLLM = True
    try:
        from vllm.distributed.kv_transfer.kv_connector.v1.base import (  # type: ignore[import-not-found]
            KVConnectorWorkerMetadata)
    except ImportError:  # vLLM before the worker-to-scheduler metadata

        class KVConnectorWorkerMetadata:  # type: ignore[no-redef]
            """Stand-in for vLLM's KVConnectorWorkerMetadata (a worker's per-step report to the scheduler)."""
    try:
        from vllm.distributed.kv_transfer.kv_connector.v1.base import SupportsHMA  # type: ignore[import-not-found]
    except ImportError:  # vLLM before the hybrid memory allocator took connectors

        class SupportsHMA:  # type: ignore[no-redef]
            """Stand-in for vLLM's SupportsHMA marker (request_finished_all_groups)."""
except ImportError:
    HAVE_VLLM = False

    class KVConnectorRole(enum.Enum):  # type: ignore[no-redef]
        """Where a connector instance runs (vLLM's values)."""

        SCHEDULER = 0
        WORKER = 1

    class KVConnectorMetadata(ABC):  # type: ignore[no-redef]  # noqa: B024
        """What the scheduler-side connector sends to the worker-side connector each step."""

    class KVConnectorWorkerMetadata:  # type: ignore[no-redef]
        """What a worker-side connector reports to the scheduler-side one each step (vLLM aggregates them)."""

    class SupportsHMA:  # type: ignore[no-redef]
        """Stand-in for vLLM's SupportsHMA: the connector takes several KV cache groups."""

    class KVConnectorBase_V1(ABC):  # type: ignore[no-redef]
        """Stand-in for vLLM's ``KVConnectorBase_V1``: the same constructor, metadata binding and methods."""

        def __init__(self, vllm_config: Any, role: KVConnectorRole, kv_cache_config: Any = None) -> None:
            self._connector_metadata: Optional[KVConnectorMetadata] = None
            self._vllm_config = vllm_config
            if getattr(vllm_config, "kv_transfer_config", None) is None:
                raise ValueError("kv_transfer_config must be set for KVConnectorBase_V1")
            self._kv_transfer_config = vllm_config.kv_transfer_config
            self._kv_cache_config = kv_cache_config
            self._role = role

        @property
        def role(self) -> KVConnectorRole:
            return self._role

        # ---- worker side
        def bind_connector_metadata(self, connector_metadata: KVConnectorMetadata) -> None:
            self._connector_metadata = connector_metadata

        def clear_connector_metadata(self) -> None:
            self._connector_metadata = None

        def _get_connector_metadata(self) -> KVConnectorMetadata:
            assert self._connector_metadata is not None
            return self._connector_metadata

        def has_connector_metadata(self) -> bool:
            return self._connector_metadata is not None

        def register_kv_caches(self, kv_caches: dict) -> None:
            return

        def handle_preemptions(self, kv_connector_metadata: KVConnectorMetadata) -> None:
            return

        @abstractmethod
        def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None: ...

        @abstractmethod
        def wait_for_layer_load(self, layer_name: str) -> None: ...

        @abstractmethod
        def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any) -> None: ...

        @abstractmethod
        def wait_for_save(self) -> None: ...

        def get_finished(self, finished_req_ids: set) -> Tuple[Optional[set], Optional[set]]:
            return None, None

        def get_block_ids_with_load_errors(self) -> set:
            return set()

        def shutdown(self) -> None:
            return None

        def get_kv_connector_stats(self) -> Any:
            return None

        def build_connector_worker_meta(self) -> Any:
            return None

        # ---- scheduler side
        @abstractmethod
        def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> Tuple[Optional[int], bool]: ...

        @abstractmethod
        def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None: ...

        @abstractmethod
        def build_connector_meta(self, scheduler_output: Any) -> KVConnectorMetadata: ...

        def update_connector_output(self, connector_output: Any) -> None:
            return

        def request_finished(self, request: Any, block_ids: list) -> Tuple[bool, Optional[dict]]:
            return False, None

        def take_events(self) -> Any:
            return ()

        @classmethod
        def get_required_kvcache_layout(cls, vllm_config: Any) -> Optional[str]:
            return None
