"""ptstore: the Python client of PTStore, a cluster-wide store of LLM KV-cache prefixes.

    import ptstore, torch
    client = ptstore.Client()                      # $PTSTORE_SOCKET or /run/ptstore/ptstored.sock
    client.create_namespace("mistral-7b", ptstore.Layout.mistral())
    client.save("mistral-7b", tokens, kv)          # kv: (tokens, 32, 2, 8, 128) torch.bfloat16
    out = torch.empty(kv.shape, dtype=torch.bfloat16)
    n = client.load("mistral-7b", tokens, out)     # tokens loaded (whole blocks; 0 on a miss)
    with client.pin("mistral-7b", tokens) as p:    # extents pinned until the block ends
        p.copy_to(out)
    model = ptstore.CostModel.load(gpu="h100-80g") # load or recompute? (sched/profiles.toml)
    plan = client.advise("mistral-7b", tokens, model)  # load plan.load_tokens, recompute the rest

Errors are ptstore.Error subclasses named after libptstore's status codes
(NotFound, InvalidArgument, PermissionDenied, ...). docs/python.md has the
whole API.
"""

from ._errors import (Aborted, AlreadyExists, Code, Corruption, DeadlineExceeded, Error, IOFailure, Internal,
                      InvalidArgument, NotFound, PermissionDenied, ProtocolError, ResourceExhausted, Unavailable,
                      Unimplemented)
from ._ptstore import (CostModel, Extent, Increment, Layout, LayoutGroup, LoadPlan, LookupResult, NamespaceInfo,
                       NamespaceQuota, parse_quota, PathInfo, PrefixLocation, PrefixNode, RemoveResult, SaveResult, Stats, mistral_layout, path_info)
from ._arrays import empty_kv, numpy_dtype, torch_dtype
from ._client import Client, Pin

__version__ = "0.1.0"

__all__ = [
    "Client", "Pin", "Layout", "LayoutGroup", "mistral_layout", "NamespaceInfo", "NamespaceQuota", "parse_quota",
    "LookupResult", "Extent",
    "SaveResult", "RemoveResult", "Stats", "PrefixNode", "Increment", "PathInfo", "path_info", "PrefixLocation",
    "CostModel", "LoadPlan", "empty_kv", "numpy_dtype",
    "torch_dtype", "Code", "Error", "NotFound", "InvalidArgument", "AlreadyExists", "PermissionDenied",
    "ResourceExhausted", "Unavailable", "DeadlineExceeded", "Corruption", "ProtocolError", "IOFailure", "Aborted",
    "Internal", "Unimplemented",
]

# The classes of the extension present themselves as ptstore.X.
for _name in ("CostModel", "Extent", "Increment", "Layout", "LayoutGroup", "LoadPlan", "LookupResult", "NamespaceInfo",
              "NamespaceQuota",
              "PathInfo", "PrefixLocation", "PrefixNode", "RemoveResult", "SaveResult", "Stats"):
    globals()[_name].__module__ = __name__
del _name
