"""vLLM's KV cache groups as PTStore stores them: one namespace, one layout group per vLLM group.

vLLM's hybrid KV cache manager (``SupportsHMA``) gives a model several KV cache
groups, each with its own block table and its own ``KVCacheSpec``:

================================  ============  ===================================================
vLLM spec                         layout group  what a load needs of a prefix of ``n`` blocks
================================  ============  ===================================================
``FullAttentionSpec``             ``full``      every block
``SlidingWindowSpec``             ``window``    the blocks vLLM gives real ids to: those covering the
                                                last ``sliding_window - 1`` tokens (vLLM's block
                                                table holds its null block for the others)
``MLAAttentionSpec``              ``latent``    every block; one copy serves every tensor-parallel
                                                rank (MLA caches are the same on all of them)
``MambaSpec`` (prefix caching's   ``state``     the state of its last block only (a Mamba or
``all`` or ``align`` mode)                      linear-attention layer's state after the block's
                                                last token): see "State groups" below
others                            refused at start-up, with an error naming the layer and spec
================================  ============  ===================================================

A stored block is the groups' slices one after the other (``Layout.group_offset``); each slice is
token-major, ``(block_tokens, layers, 2, kv_heads, head_dim)`` (latent: ``(block_tokens, layers,
head_dim)``). A model with one full-attention group is today's dense layout, byte for byte.

vLLM's null block (id 0) marks positions a group does not keep; the connector never reads or writes
it, and those slices of a stored block are what the writer had (a save sends only real blocks, so a
window slice is never stored for a block whose KV vLLM had already dropped: see ``save_start``).

State groups. vLLM keeps a Mamba layer's state (its conv and SSM/temporal state tensors) once per block:
the state after the block's last token, where vLLM computed one. In mode ``all`` (Mamba2 models: Nemotron-H,
Bamba, Jamba, Falcon-H1, Granite 4.0-H) its kernels write every whole block's; in mode ``align`` (gated delta
nets: Qwen3-Next, Qwen3.5) only a block where a scheduler step ended. A stored block's state slice is, per
layer, the state tensors' bytes of one vLLM page (``KVGroup.state_bytes``) followed by a 16-byte tag:
:data:`STATE_TAG` and the block's index (little-endian), or zeros where the saver had no valid state for
that block. A hit of a model with a state group ends at a block whose tag is valid in every rank's namespace
(the scheduler reads the tags out of its pins), and a load writes the state of that last block only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

__all__ = ["GroupSpec", "NULL_BLOCK", "STATE_TAG", "STATE_TAG_BYTES", "group_specs", "kept", "per_group",
           "spec_kind", "state_tag"]

# vLLM's BlockPool takes its first block as the null block: a sliding-window group's block table holds it
# where the window has moved on (full-attention and MLA groups always hold real blocks).
NULL_BLOCK = 0

# The tag after each layer's state in a stored block's state slice: these 8 bytes, then the block's index.
STATE_TAG = b"PTSstate"
STATE_TAG_BYTES = 16


def state_tag(block_index: int) -> bytes:
    """The tag of a valid state of stored block `block_index` (its position in the prefix)."""
    return STATE_TAG + int(block_index).to_bytes(8, "little")


def kept(kind: str, block_id: int) -> bool:
    """True when a group of `kind` holds the KV of its block `block_id` (not vLLM's null block of a window or
    a state group)."""
    return kind not in ("window", "state") or block_id != NULL_BLOCK


@dataclass(frozen=True)
class GroupSpec:
    """One vLLM KV cache group: its layout kind, window (tokens; 0 for full and latent) and layers."""

    index: int
    kind: str  # "full", "window", "latent", "state"
    window: int
    layer_names: Tuple[str, ...]
    spec: Any = None

    @property
    def shared_by_ranks(self) -> bool:
        """True when every tensor-parallel rank holds the same bytes (MLA's latent cache)."""
        return self.kind == "latent"

    @property
    def mode(self) -> str:
        """A state group's vLLM mamba_cache_mode ("all" or "align"); "" for the others."""
        return str(getattr(self.spec, "mamba_cache_mode", "")) if self.kind == "state" else ""


def spec_kind(name: str, spec: Any) -> Tuple[str, int]:
    """(layout kind, window tokens) of a layer's vLLM KV cache spec; ValueError naming what is refused.

    Exact types only: a subclass of these (packed or quantized MLA, attention sinks, hidden-state caches,
    sliding-window MLA) stores other bytes under the same fields, so it is refused by name."""
    kind = type(spec).__name__
    hs = int(getattr(spec, "head_size", 0) or 0)
    hs_v = int(getattr(spec, "head_size_v", None) or hs)
    if kind == "MLAAttentionSpec":
        if getattr(spec, "cache_dtype_str", None) not in (None, "auto") or int(getattr(spec, "compress_ratio", 1)) != 1:
            raise ValueError(f"layer {name!r}: MLAAttentionSpec with cache dtype {spec.cache_dtype_str!r} and "
                             f"compress ratio {getattr(spec, 'compress_ratio', 1)} (a packed MLA format) is not "
                             f"supported; plain MLA latent caches are")
        return "latent", 0
    if kind in ("FullAttentionSpec", "SlidingWindowSpec") and hs_v != hs:
        raise ValueError(f"layer {name!r}: {kind} with K head size {hs} and V head size {hs_v}: not supported "
                         f"(PTStore stores K and V of one head size)")
    if kind == "SlidingWindowSpec":
        return "window", int(spec.sliding_window)
    if kind == "FullAttentionSpec":
        # (with the hybrid manager off, vLLM gives sliding-window layers this spec and keeps every block)
        return "full", 0
    if kind == "MambaSpec":
        mode = str(getattr(spec, "mamba_cache_mode", "none"))
        if mode not in ("all", "align"):
            raise ValueError(f"layer {name!r}: MambaSpec with mamba_cache_mode {mode!r}: PTStoreConnector stores "
                             f"Mamba and linear-attention state with vLLM's prefix caching on (mode 'all' or "
                             f"'align'), where vLLM keeps a state per block")
        if int(getattr(spec, "num_speculative_blocks", 0) or 0):
            raise ValueError(f"layer {name!r}: MambaSpec with {spec.num_speculative_blocks} speculative blocks "
                             f"(speculative decoding): its block states hold draft tokens PTStoreConnector cannot "
                             f"tell from accepted ones; serve without a speculative config")
        return "state", 0
    raise ValueError(f"layer {name!r} has a {kind} KV cache: PTStoreConnector stores full-attention "
                     f"(FullAttentionSpec), sliding-window (SlidingWindowSpec), MLA (MLAAttentionSpec) and Mamba "
                     f"or linear-attention state (MambaSpec) caches; {kind} is refused (chunked local, "
                     f"cross-attention, sinks, packed or quantized variants)")


def group_specs(kv_cache_config: Any) -> Optional[List[GroupSpec]]:
    """The groups of vLLM's KVCacheConfig (None when vLLM passed none: older vLLM, one group of every layer).

    A group whose spec is vLLM's ``UniformTypeKVCacheSpecs`` (layers of one type with different sizes) is
    refused: the store keeps one geometry per group."""
    groups = getattr(kv_cache_config, "kv_cache_groups", None)
    if groups is None:
        return None
    out: List[GroupSpec] = []
    for i, g in enumerate(groups):
        spec = g.kv_cache_spec
        names = tuple(g.layer_names)
        if type(spec).__name__ == "UniformTypeKVCacheSpecs":
            kinds = {spec_kind(n, s)[0] for n, s in spec.kv_cache_specs.items()}
            raise ValueError(f"KV cache group {i} holds {kinds} layers of different sizes (UniformTypeKVCacheSpecs): "
                             f"PTStoreConnector needs one geometry per group")
        kind, window = spec_kind(names[0] if names else f"group {i}", spec)
        out.append(GroupSpec(index=i, kind=kind, window=window, layer_names=names, spec=spec))
    if not out:
        raise ValueError("the model has no KV cache (attention-free): nothing for PTStoreConnector to store")
    sizes = {int(g.spec.block_size) for g in out}
    if len(sizes) != 1:
        raise ValueError(f"the KV cache groups have blocks of {sorted(sizes)} tokens: PTStoreConnector needs one "
                         f"block size for all groups")
    return out


def per_group(block_ids: Any) -> Optional[List[List[int]]]:
    """Block ids per KV cache group from what vLLM passes: ``KVCacheBlocks``, ``tuple[list[int], ...]``, or (older
    vLLM) one ``list[int]``; None when it passed none."""
    if block_ids is None:
        return None
    if hasattr(block_ids, "get_block_ids"):  # KVCacheBlocks
        try:
            block_ids = block_ids.get_block_ids()
        except TypeError:
            block_ids = block_ids.get_block_ids(allow_none=False)
        if block_ids is None:
            return None
    seq = list(block_ids)
    if seq and isinstance(seq[0], (list, tuple)):
        return [[int(b) for b in g] for g in seq]
    return [[int(b) for b in seq]]
