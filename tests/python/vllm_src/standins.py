"""Import vLLM's own source on a machine that lacks its third-party dependencies.

vLLM imports, at module load, about thirty packages this machine does not have
(pydantic 2, msgspec, transformers, ...) and names of torch 2 that Debian's
torch 1.13 lacks; none of them is on the connector's path. :func:`import_vllm`
stands in for exactly those, **while importing only**:

* a missing module becomes a :class:`StandInModule`: any attribute is a
  :class:`StandIn` (callable, subscriptable, usable as a decorator or a base
  class);
* a missing torch name (``torch.float8_e4m3fn``, ``torch.library.infer_schema``)
  becomes a StandIn on the real torch module;
* a few real functions that fail at import time on this machine
  (``importlib.metadata.version`` of a stood-in package, torch 1.13's
  ``torch.library.Library`` kind check) are replaced until the import is done,
  then restored.

Every stand-in records its use once :func:`watch` is on: a test turns it on
around a scenario and fails when anything stood in for was touched, so a
scenario runs only vLLM's and PTStore's real code. ``pydantic`` is stood in
for with a working subset (its dataclass decorator makes a stdlib dataclass,
``Field`` a dataclass field, validators run as plain methods), because vLLM's
config classes are defined with it; it is used at class-definition time only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import sys
import threading
import types
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

__all__ = ["StandInUse", "import_vllm", "vllm_src", "watch", "touched", "stood_in"]

ENV = "PTSTORE_VLLM_SRC"
_HERE = os.path.dirname(os.path.abspath(__file__))
_DEFAULT = os.path.normpath(os.path.join(_HERE, "..", "..", "..", "..", "shared", "vllm-src"))

# Third-party modules vLLM imports at load time that Debian 12 lacks (or has in a version vLLM cannot use:
# pydantic 1.10). Only those not importable here are stood in for.
MISSING_MODULES: Tuple[str, ...] = (
    "pydantic", "pydantic_core", "msgspec", "transformers", "huggingface_hub", "safetensors", "tokenizers",
    "gguf", "blake3", "pybase64", "einops", "openai", "openai_harmony", "fastapi", "starlette", "uvicorn",
    "prometheus_fastapi_instrumentator", "mistral_common", "tiktoken", "xgrammar", "llguidance", "outlines_core",
    "lm_format_enforcer", "compressed_tensors", "depyf", "triton", "diskcache", "lark", "ijson", "anthropic",
    "mcp", "opentelemetry", "cv2", "sentencepiece", "watchfiles", "pythonjsonlogger", "model_hosting_container_standards",
    "setproctitle", "partial_json_parser", "numba", "flashinfer", "vllm_flash_attn", "aiohttp", "PIL",
    "uvloop",
)
# Torch 2 submodules and names torch 1.13 lacks, imported by vLLM at load time.
MISSING_TORCH_MODULES: Tuple[str, ...] = (
    "torch._inductor", "torch.distributed._functional_collectives", "torch.distributed._symmetric_memory",
    "torch._higher_order_ops", "torch.fx.experimental.proxy_tensor", "torch._dynamo", "torch._functorch",
    "torch.export", "torch.compiler", "torch._library", "torch.utils._python_dispatch", "torch.nn.attention",
    "torch.cuda.memory", "torch.func",
)
MISSING_TORCH_NAMES: Tuple[str, ...] = (
    "torch.float8_e4m3fn", "torch.float8_e5m2", "torch.float8_e4m3fnuz", "torch.float8_e5m2fnuz", "torch.uint16",
    "torch.uint32", "torch.uint64", "torch.float8_e8m0fnu", "torch.float4_e2m1fn_x2",
    "torch.library.custom_op", "torch.library.register_fake",
    "torch._subclasses.fake_tensor.unset_fake_temporarily",
    "torch.distributed.distributed_c10d._get_default_timeout",
    "torch.distributed.distributed_c10d._unregister_process_group",
    "torch.compiler", "torch.accelerator", "torch.xpu", "torch.mtia",
    "typing_extensions.TypeIs", "typing_extensions.deprecated", "torch.cuda.memory.CUDAPluggableAllocator",
    "torch.SymInt",
    "torch.Event",
    "torch.compile",
    "torch.nn.modules.module.register_module_module_registration_hook",
)

# Custom-op namespaces vLLM registers into (torch.library, stood in above) or builds in C++ (vllm._C): torch
# 1.13 makes any name an empty op namespace, so these are stood in for whether or not they seem to exist.
STOOD_IN_OP_NAMESPACES: Tuple[str, ...] = (
    "torch.ops.vllm", "torch.ops.vllm_ir", "torch.ops._C", "torch.ops._C_cache_ops", "torch.ops._C_custom_ar", "torch.ops._moe_C",
    "torch.ops._rocm_C", "torch.ops._vllm_fa2_C", "torch.ops._vllm_fa3_C", "torch.ops._flashmla_C",
)

# Real torch 1.13 names that fail as vLLM uses them at import time (Library refuses kind "FRAGMENT", Tag lacks
# torch 2's tags): stood in for during the import only.
IMPORT_TIME_REPLACED: Tuple[str, ...] = ("torch.library.Library", "torch.Tag")


class StandInUse(AssertionError):
    """Something stood in for was used while a scenario ran."""


_lock = threading.Lock()
_watching = False
_touched: List[str] = []
_stood_in: List[str] = []


def _record(name: str) -> None:
    if _watching:
        with _lock:
            _touched.append(name)


class StandIn:
    """Any name of a module that is not here: callable, a decorator, subscriptable, a base class."""

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "_name", name)

    def __repr__(self) -> str:
        return f"<stand-in {self._name}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        _record(self._name + "()")
        if len(args) == 1 and not kwargs and (callable(args[0]) or isinstance(args[0], type)):
            return args[0]  # used as a decorator
        return StandIn(self._name + "()")

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        _record(self._name + "." + attr)
        return StandIn(self._name + "." + attr)

    def __getitem__(self, key: Any) -> Any:
        _record(self._name + "[]")
        return self

    def __mro_entries__(self, bases: Tuple[Any, ...]) -> Tuple[type, ...]:
        return (_StandInBase,)

    def __or__(self, other: Any) -> Any:
        return self

    __ror__ = __or__

    def __add__(self, other: Any) -> Any:  # torch.library.infer_schema(f) + ... (a schema string)
        return other if isinstance(other, str) else self

    __radd__ = __add__

    def __iter__(self) -> Iterator[Any]:
        _record(self._name + " iterated")
        return iter(())

    def __hash__(self) -> int:
        return hash(self._name)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, StandIn) and other._name == self._name


def _infer_schema(fn: Any, *args: Any, **kwargs: Any) -> str:
    """torch 2's schema of a custom op's function, enough for vLLM's op registry: "(params) -> returns"."""
    import inspect
    import typing

    _record("torch.library.infer_schema()")
    sig = inspect.signature(fn)
    params = ", ".join(f"Tensor {n}" for n in sig.parameters)
    ret = sig.return_annotation
    n = len(typing.get_args(ret)) if typing.get_origin(ret) in (tuple, typing.Tuple) else (0 if ret in (None, type(None), inspect.Signature.empty) else 1)
    returns = "()" if n == 0 else ("Tensor" if n == 1 else "(" + ", ".join(["Tensor"] * n) + ")")
    return f"({params}) -> {returns}"


class _StandInBase:
    """The base of a class derived from a stand-in."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        pass

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _record(f"{type(self).__name__}() on a stand-in base")


class StandInModule(types.ModuleType):
    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        value = StandIn(f"{self.__name__}.{attr}")
        setattr(self, attr, value)
        return value


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Optional[importlib.machinery.ModuleSpec]:
        if any(fullname == n or fullname.startswith(n + ".") for n in self.names):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        factory = _SPECIAL.get(spec.name)
        m = factory(spec.name) if factory is not None else StandInModule(spec.name)
        m.__path__ = []  # type: ignore[attr-defined]
        return m

    def exec_module(self, module: types.ModuleType) -> None:
        return None


# ---------------------------------------------------------------- pydantic: the subset vLLM defines its configs with
class _FieldInfo:
    """pydantic.fields.FieldInfo: what Field() returns when it is not a dataclass default."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


def _pyd_field(default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING, init: bool = True,
               **_: Any) -> Any:
    if default is Ellipsis:
        default = dataclasses.MISSING
    return dataclasses.field(default=default, default_factory=default_factory, init=init)


def _pyd_dataclass(cls: Any = None, /, *, config: Any = None, **kwargs: Any) -> Any:
    """pydantic.dataclasses.dataclass as a stdlib dataclass (no validation: see the module's doc)."""
    def wrap(c: type) -> type:
        for name, value in list(vars(c).items()):
            ann = c.__dict__.get("__annotations__", {}).get(name)
            if ann is not None and isinstance(value, (list, dict, set)) and "ClassVar" not in str(ann):
                setattr(c, name, dataclasses.field(default_factory=lambda v=value: type(v)(v)))
        kwargs.pop("validate_on_init", None)
        return dataclasses.dataclass(c, **{k: v for k, v in kwargs.items() if k in ("eq", "frozen", "kw_only",
                                                                                      "order", "init", "repr")})
    return wrap if cls is None else wrap(cls)


def _decorator_factory(*args: Any, **kwargs: Any) -> Callable[[Any], Any]:
    return lambda f: f  # validators are methods vLLM calls nothing through; pydantic would run them


class _Subscriptable:
    """SkipValidation[X] is X."""

    def __class_getitem__(cls, item: Any) -> Any:
        return item


def _pydantic(name: str) -> types.ModuleType:
    m = StandInModule(name)
    if name == "pydantic":
        m.Field = _pyd_field  # type: ignore[attr-defined]
        m.ConfigDict = dict  # type: ignore[attr-defined]
        m.field_validator = _decorator_factory  # type: ignore[attr-defined]
        m.model_validator = _decorator_factory  # type: ignore[attr-defined]
        m.SkipValidation = _Subscriptable  # type: ignore[attr-defined]
        m.VERSION = "2.12.0"  # type: ignore[attr-defined]
    elif name == "pydantic.dataclasses":
        m.dataclass = _pyd_dataclass  # type: ignore[attr-defined]
    elif name == "pydantic.fields":
        m.Field = _pyd_field  # type: ignore[attr-defined]
        m.FieldInfo = _FieldInfo  # type: ignore[attr-defined]
    return m


# ---------------------------------------------------------------- msgspec: Struct as a stdlib dataclass
class _Struct:
    """msgspec.Struct: each subclass becomes a stdlib dataclass when it is defined (at import time), so that
    making and reading its instances runs no stood-in code."""

    def __init_subclass__(cls, **options: Any) -> None:
        super().__init_subclass__()
        own = cls.__dict__.get("__annotations__", {})
        for name, value in list(vars(cls).items()):
            if name in own and isinstance(value, (list, dict, set)) and "ClassVar" not in str(own[name]):
                setattr(cls, name, dataclasses.field(default_factory=lambda v=value: type(v)(v)))
        try:
            dataclasses.dataclass(cls, eq=False, repr=True)
        except TypeError:  # a field without a default after one with (msgspec allows it as keyword-only)
            dataclasses.dataclass(cls, eq=False, repr=True, kw_only=True)


def _msgspec_field(*, default: Any = dataclasses.MISSING, default_factory: Any = dataclasses.MISSING,
                   name: Any = None) -> Any:
    return dataclasses.field(default=default, default_factory=default_factory)


def _msgspec(name: str) -> types.ModuleType:
    m = StandInModule(name)
    m.Struct = _Struct  # type: ignore[attr-defined]
    m.field = _msgspec_field  # type: ignore[attr-defined]
    return m


_SPECIAL: Dict[str, Callable[[str], types.ModuleType]] = {
    "pydantic": _pydantic, "pydantic.dataclasses": _pydantic, "pydantic.fields": _pydantic,
    "msgspec": _msgspec,
}


def vllm_src() -> Optional[str]:
    """The vLLM source tree ($PTSTORE_VLLM_SRC, default ../shared/vllm-src beside the repository), or None."""
    path = os.environ.get(ENV) or _DEFAULT
    return path if os.path.isfile(os.path.join(path, "vllm", "__init__.py")) else None


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _resolve(dotted: str) -> Tuple[Any, str]:
    mod, _, attr = dotted.rpartition(".")
    try:
        return importlib.import_module(mod), attr
    except ImportError:
        parent, _, sub = mod.rpartition(".")
        return getattr(importlib.import_module(parent), sub), attr


@contextlib.contextmanager
def _import_time_patches(stood_in_modules: Sequence[str]) -> Iterator[None]:
    """Real functions that fail on this machine while vLLM is imported, replaced until the import is done."""
    import torch.library

    real_version = importlib.metadata.version
    fake_versions = {"transformers": "4.57.0", "pydantic": "2.12.0", "tokenizers": "0.22.0",
                     "huggingface-hub": "0.36.0", "triton": "3.5.0", "flashinfer-python": "0.5.0"}
    tops = {n.split(".")[0] for n in stood_in_modules}

    def version(name: str) -> str:
        if name in fake_versions and name.replace("-", "_") in tops | {"huggingface_hub", "flashinfer"}:
            return fake_versions[name]
        return real_version(name)

    import torch

    real_finfo = torch.finfo

    def finfo(t: Any = None) -> Any:  # vLLM computes fp8 limits at import; float8 dtypes are stand-ins here
        if isinstance(t, StandIn):
            return types.SimpleNamespace(min=-448.0, max=448.0, eps=0.125, tiny=2.0 ** -6, bits=8)
        return real_finfo() if t is None else real_finfo(t)

    saved = [(owner, attr, getattr(owner, attr)) for owner, attr in map(_resolve, IMPORT_TIME_REPLACED)]
    saved.append((torch, "finfo", real_finfo))
    torch.finfo = finfo  # type: ignore[assignment,misc]
    importlib.metadata.version = version  # type: ignore[assignment]
    for (owner, attr, _), dotted in zip(saved, IMPORT_TIME_REPLACED):
        setattr(owner, attr, StandIn(dotted))
    try:
        yield
    finally:
        importlib.metadata.version = real_version  # type: ignore[assignment]
        for owner, attr, value in saved:
            setattr(owner, attr, value)


_imported: Optional[Dict[str, types.ModuleType]] = None
# The vLLM modules the tests drive (the connector's path through the scheduler and the worker).
VLLM_MODULES: Tuple[str, ...] = (
    "vllm.config",
    "vllm.distributed.kv_transfer.kv_connector.factory",
    "vllm.distributed.kv_transfer.kv_connector.v1.base",
    "vllm.distributed.kv_transfer.kv_connector.v1.metrics",
    "vllm.v1.core.sched.scheduler",
    "vllm.v1.core.sched.async_scheduler",
    "vllm.v1.core.kv_cache_manager",
    "vllm.v1.core.kv_cache_utils",
    "vllm.v1.kv_cache_interface",
    "vllm.v1.request",
    "vllm.v1.outputs",
    "vllm.sampling_params",
    "vllm.forward_context",
    "vllm.v1.worker.worker_base",
    "vllm.v1.worker.kv_connector_model_runner_mixin",
    "vllm.v1.attention.backends.registry",
)


def import_vllm(extra: Sequence[str] = ()) -> Dict[str, types.ModuleType]:
    """Imports vLLM's modules from the snapshot (raises RuntimeError when it is absent): {name: module}."""
    global _imported
    src = vllm_src()
    if src is None:
        raise RuntimeError(f"no vLLM source: set ${ENV} to a vLLM checkout (default {_DEFAULT})")
    if _imported is None:
        import torch  # noqa: F401 - the real one, before any stand-in

        if src not in sys.path:
            sys.path.insert(0, src)
        missing = [n for n in MISSING_MODULES if not _importable(n)]
        missing += [n for n in MISSING_TORCH_MODULES if not _importable(n)]
        _stood_in.extend(missing)
        sys.meta_path.insert(0, _Finder(missing))
        for dotted in MISSING_TORCH_NAMES:
            owner, attr = _resolve(dotted)
            if not hasattr(owner, attr):
                setattr(owner, attr, StandIn(dotted))
                _stood_in.append(dotted)
        if not hasattr(torch.library, "infer_schema"):  # torch 2: the schema string of a custom op's function
            torch.library.infer_schema = _infer_schema  # type: ignore[attr-defined]
            _stood_in.append("torch.library.infer_schema")
        for dotted in STOOD_IN_OP_NAMESPACES:
            owner, attr = _resolve(dotted)
            setattr(owner, attr, StandIn(dotted))
            _stood_in.append(dotted)
        _imported = {}
    todo = [n for n in (*VLLM_MODULES, *extra) if n not in _imported]
    if todo:
        with _import_time_patches(_stood_in):
            for name in todo:
                _imported[name] = importlib.import_module(name)
    return _imported


def stood_in() -> List[str]:
    """What import_vllm stood in for (modules and torch names)."""
    return list(_stood_in)


def touched() -> List[str]:
    with _lock:
        return list(_touched)


@contextlib.contextmanager
def watch() -> Iterator[None]:
    """Records every use of a stand-in inside the block; raises StandInUse at its end if there was one."""
    global _watching
    with _lock:
        _touched.clear()
    _watching = True
    try:
        yield
    finally:
        _watching = False
    used = touched()
    if used:
        raise StandInUse(f"stood-in names were used while the scenario ran: {sorted(set(used))[:20]}")
