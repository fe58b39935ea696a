"""The connector's configuration: vLLM's ``kv_transfer_config`` and its ``kv_connector_extra_config``.

Every key of ``kv_connector_extra_config`` is optional (docs/vllm.md lists them):

==========================  ==========================================================================
``socket``                  ptstored's unix socket (default ``$PTSTORE_SOCKET``, else
                            ``/run/ptstore/ptstored.sock``)
``namespace``               the namespace (default: the model's name, e.g. ``mistralai.Mistral-7B-v0.1``)
``layout``                  the model's KV layout as a dict (``layers``, ``kv_heads``, ``head_dim``,
                            ``dtype``) or a ``.layout`` string: checked against the KV caches vLLM
                            registers (a mismatch is an error instead of a silent miss)
``load`` / ``save``         load hits / save prompts (default from ``kv_role``: ``kv_both`` both,
                            ``kv_consumer`` loads only, ``kv_producer`` saves only)
``load_async``              load between scheduler steps (vLLM's ``load_kv_async``; default false:
                            loads run layer by layer during the step that needs them)
``hold_blocks_until_saved`` ``request_finished`` keeps a saved request's blocks until its save has
                            reached the store (``get_finished``); default true
``save_generated``          when a request finishes, save the KV of its generated tokens too (whole
                            blocks; needs ``hold_blocks_until_saved``), so that a chat's next turn or an
                            agent's next step hits its whole history; default true
``save_wait_ms``            how long a lookup answers "ask again later" while an earlier save of the
                            same prefix is still in flight (default 3000; 0: never wait)
``unavailable_wait_ms``     how long lookups answer "ask again later" after the store became
                            unreachable, before they count as misses (default 1000)
``retry_interval_ms``       how often an unreachable store is tried again (default 1000)
``lookup_timeout_ms``       deadline of the scheduler's lookups (default 1000)
``rpc_timeout_ms``          deadline of the worker's loads and saves (default 30000)
``min_load_tokens``         hits shorter than this are recomputed instead (default 0: any whole block)
``kv_cache_layout``         ``auto`` (default: the attention backend's own ``get_kv_cache_shape`` says),
                            ``flash_attn`` ([2, blocks, block_size, heads, dim]), ``flashinfer``
                            ([blocks, 2, block_size, heads, dim]) or ``cpu_attn``
                            ([2, blocks, heads, block_size, dim])
``load_failure_policy``     ``recompute`` (default) or ``fail``: what vLLM does with a request whose load
                            failed; the connector sets vLLM's ``kv_load_failure_policy`` to it (vLLM's own
                            default is ``fail``: a failed load would end the request with an error)
``layerwise``               true (default): sync loads run layer by layer during the step that needs
                            them and saves are copied after each layer's attention, which needs vLLM's
                            per-layer calls (CUDA graphs PIECEWISE). false: loads are always async
                            (between steps, ``load_async``) and saves are copied at the step's end
                            (``wait_for_save``), so vLLM may keep FULL CUDA graphs; a hit then costs a
                            scheduler step of latency, and a save's copy no longer overlaps the layers
``save_threads``            background threads that write saves to the store (default 1)
``pin_hits``                true (default): the scheduler pins each hit it reports to vLLM until the
                            worker has copied it, so nothing (eviction, a removal) can take it away
                            between lookup and load, and the worker copies it out of its own arena
                            mapping without a request to ptstored (with tensor or pipeline parallelism:
                            in every worker's namespace; needs the arena mapping, else the worker loads
                            as with false). false: the worker pins it when it loads
``cost_model``              load or recompute? A dict ``{"gpu": "h100-80g", "model": "mistral-7b",
                            "profiles": None, "remote_path": "rma"}`` (every key optional; these are the
                            defaults; ``profiles`` None: the shipped sched/profiles.toml): after a hit the
                            scheduler asks ptstored where the prefix is (``Client.advise``) and loads only
                            what the cost model says is cheaper to load than to recompute (default None:
                            load every hit)
==========================  ==========================================================================
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any, Dict, Mapping, Optional

__all__ = ["ConnectorConfig", "CostModelConfig", "default_namespace", "needs_layer_calls"]

_NS_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
# Room left in a namespace name (128 characters at most) for the isolation and rank suffixes.
MAX_BASE_NAMESPACE = 80


def default_namespace(model: Optional[str]) -> str:
    """A namespace name made from a model name or path: ``mistralai/Mistral-7B`` -> ``mistralai.Mistral-7B``."""
    name = (model or "").strip().rstrip("/")
    if os.path.isabs(name):  # a local path: its last two components
        name = "/".join(name.split("/")[-2:])
    name = _NS_CHARS.sub(".", name).strip(".")
    return (name or "vllm")[:MAX_BASE_NAMESPACE]


def needs_layer_calls(extra: Optional[Mapping[str, Any]]) -> bool:
    """Whether the connector needs vLLM's per-layer calls (wait_for_layer_load, save_kv_layer) with this
    extra config: vLLM's requires_piecewise_for_cudagraph."""
    return _flag((extra or {}).get("layerwise", True), "layerwise")


def _flag(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("1", "true", "yes", "on"):
        return True
    if isinstance(value, str) and value.strip().lower() in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"kv_connector_extra_config[{key!r}] must be a boolean, got {value!r}")


@dataclasses.dataclass(frozen=True)
class CostModelConfig:
    """The ``cost_model`` key: which profile decides load versus recompute, and how remote runs travel."""

    gpu: str = "h100-80g"
    model: str = "mistral-7b"
    profiles: Optional[str] = None  # a profiles TOML file; None: the shipped one ($PTSTORE_PROFILES)
    remote_path: str = "rma"  # how other nodes' runs travel: "rma" or "tcp"

    @classmethod
    def from_value(cls, value: Any) -> Optional["CostModelConfig"]:
        """None / False: no cost model; True or {}: the defaults; a dict: its keys over the defaults."""
        if value is None or value is False:
            return None
        if isinstance(value, CostModelConfig):
            return value
        if value is True:
            return cls()
        if not isinstance(value, Mapping):
            raise ValueError(f"kv_connector_extra_config['cost_model'] must be a dict like "
                             f"{{'gpu': 'h100-80g', 'model': 'mistral-7b', 'profiles': None, 'remote_path': 'rma'}}, "
                             f"got {value!r}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(value) - known
        if unknown:
            raise ValueError(f"unknown keys in kv_connector_extra_config['cost_model']: {sorted(unknown)}; "
                             f"known: {sorted(known)}")
        c = cls()
        kw: Dict[str, Any] = {}
        for key in ("gpu", "model"):
            v = value.get(key)
            if v is not None:
                if not isinstance(v, str) or not v:
                    raise ValueError(f"kv_connector_extra_config['cost_model'][{key!r}] must be a non-empty string, "
                                     f"got {v!r}")
                kw[key] = v
        profiles = value.get("profiles")
        if profiles is not None:
            kw["profiles"] = os.fspath(profiles)
        remote = value.get("remote_path")
        if remote is None:  # as for the other keys: None is the default
            remote = c.remote_path
        if remote not in ("rma", "tcp"):
            raise ValueError(f"kv_connector_extra_config['cost_model']['remote_path'] must be 'rma' or 'tcp', "
                             f"got {remote!r}")
        kw["remote_path"] = remote
        return dataclasses.replace(c, **kw)

    def load(self) -> Any:
        """The ptstore.CostModel of this profile; ValueError naming the key when the file or profile is wrong."""
        from .. import CostModel, Error

        try:
            return CostModel.load(self.profiles, model=self.model, gpu=self.gpu)
        except Error as e:
            raise ValueError(f"kv_connector_extra_config['cost_model']: {e}") from e


@dataclasses.dataclass
class ConnectorConfig:
    """The parsed configuration (see the module's doc for the meaning of each field)."""

    socket: Optional[str] = None
    namespace: str = "vllm"
    layout: Any = None  # a ptstore.Layout without block_tokens checks, or None
    load: bool = True
    save: bool = True
    load_async: bool = False
    hold_blocks_until_saved: bool = True
    save_generated: bool = True
    layerwise: bool = True
    save_wait_ms: int = 3000
    unavailable_wait_ms: int = 1000
    retry_interval_ms: int = 1000
    lookup_timeout_ms: int = 1000
    rpc_timeout_ms: int = 30000
    min_load_tokens: int = 0
    kv_cache_layout: str = "auto"
    load_failure_policy: str = "recompute"
    save_threads: int = 1
    pin_hits: bool = True
    cost_model: Optional[CostModelConfig] = None
    block_size: int = 16

    @classmethod
    def from_vllm(cls, vllm_config: Any) -> "ConnectorConfig":
        """Reads ``vllm_config.kv_transfer_config`` (role, extra config) and the cache's block size."""
        ktc = vllm_config.kv_transfer_config
        extra: Mapping[str, Any] = getattr(ktc, "kv_connector_extra_config", None) or {}
        role = getattr(ktc, "kv_role", None) or "kv_both"
        model = getattr(getattr(vllm_config, "model_config", None), "model", None)
        block_size = getattr(getattr(vllm_config, "cache_config", None), "block_size", None) or 16
        return cls.from_dict(extra, role=role, model=model, block_size=int(block_size))

    @classmethod
    def from_dict(cls, extra: Mapping[str, Any], *, role: str = "kv_both", model: Optional[str] = None,
                  block_size: int = 16) -> "ConnectorConfig":
        known = {f.name for f in dataclasses.fields(cls)} - {"block_size"}
        unknown = set(extra) - known
        if unknown:
            raise ValueError(f"unknown kv_connector_extra_config keys for PTStoreConnector: {sorted(unknown)}; "
                             f"known: {sorted(known)}")
        if role not in ("kv_both", "kv_producer", "kv_consumer"):
            raise ValueError(f"kv_role must be kv_both, kv_producer or kv_consumer, got {role!r}")
        c = cls(block_size=block_size)
        c.socket = extra.get("socket") or None
        ns = extra.get("namespace")
        if ns is not None:
            if not isinstance(ns, str) or not ns or _NS_CHARS.search(ns) or len(ns) > MAX_BASE_NAMESPACE:
                raise ValueError(f"namespace must be 1..{MAX_BASE_NAMESPACE} characters of [A-Za-z0-9._-], "
                                 f"got {ns!r}")
            c.namespace = ns
        else:
            c.namespace = default_namespace(model)
        c.layout = _parse_layout(extra.get("layout"))
        c.load = _flag(extra.get("load", role in ("kv_both", "kv_consumer")), "load")
        c.save = _flag(extra.get("save", role in ("kv_both", "kv_producer")), "save")
        for key in ("load_async", "hold_blocks_until_saved", "save_generated", "layerwise", "pin_hits"):
            if key in extra:
                setattr(c, key, _flag(extra[key], key))
        if not c.layerwise:
            if "load_async" in extra and not c.load_async:
                raise ValueError("kv_connector_extra_config: layerwise false needs load_async (loads between steps)")
            c.load_async = True
        for key in ("save_wait_ms", "unavailable_wait_ms", "retry_interval_ms", "lookup_timeout_ms",
                    "rpc_timeout_ms", "min_load_tokens", "save_threads"):
            if key in extra:
                v = int(extra[key])
                if v < 0 or (key in ("save_threads", "lookup_timeout_ms", "rpc_timeout_ms") and v == 0):
                    raise ValueError(f"kv_connector_extra_config[{key!r}] out of range: {v}")
                setattr(c, key, v)
        layout_name = str(extra.get("kv_cache_layout", "auto"))
        if layout_name not in ("auto", "flash_attn", "flashinfer", "cpu_attn"):
            raise ValueError(f"kv_cache_layout must be auto, flash_attn, flashinfer or cpu_attn, got {layout_name!r}")
        c.kv_cache_layout = layout_name
        policy = str(extra.get("load_failure_policy", "recompute"))
        if policy not in ("recompute", "fail"):
            raise ValueError(f"load_failure_policy must be recompute or fail, got {policy!r}")
        c.load_failure_policy = policy
        c.cost_model = CostModelConfig.from_value(extra.get("cost_model"))
        if block_size <= 0:
            raise ValueError(f"block size must be positive, got {block_size}")
        return c


def _parse_layout(value: Any) -> Any:
    if value is None:
        return None
    from .. import Layout

    if isinstance(value, Layout):
        return value
    if isinstance(value, str):
        return Layout.parse(value)
    if isinstance(value, Mapping):
        fields: Dict[str, Any] = dict(value)
        fields.setdefault("block_tokens", 16)  # not compared: the block size is vLLM's
        return Layout(**fields)
    raise ValueError(f"layout must be a dict or a .layout string, got {type(value).__name__}")
