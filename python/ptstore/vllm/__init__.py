"""ptstore.vllm: a vLLM v1 KV connector backed by PTStore (docs/vllm.md).

    vllm serve MODEL --kv-transfer-config '{"kv_connector": "PTStoreConnector",
        "kv_connector_module_path": "ptstore.vllm", "kv_role": "kv_both",
        "kv_connector_extra_config": {"socket": "/run/ptstore/ptstored.sock"}}'

Importable without vLLM: the base classes are then stand-ins with vLLM's
names and signatures (``HAVE_VLLM`` says which).
"""

from ._compat import HAVE_VLLM, KVConnectorBase_V1, KVConnectorMetadata, KVConnectorRole
from ._meta import LoadSpec, PTStoreConnectorMetadata, SaveSpec
from .config import ConnectorConfig, CostModelConfig
from .connector import PTStoreConnector
from .keys import chain_keys, namespace_for
from .paged import PagedKV, PagedLayer, TorchCopier

__all__ = [
    "PTStoreConnector", "PTStoreConnectorMetadata", "LoadSpec", "SaveSpec", "ConnectorConfig", "CostModelConfig",
    "HAVE_VLLM", "KVConnectorBase_V1", "KVConnectorMetadata", "KVConnectorRole", "PagedKV", "PagedLayer",
    "TorchCopier", "namespace_for", "chain_keys",
]
