"""Which namespace a vLLM request's KV belongs to, and the connector's own block keys.

Block hashing and vLLM
----------------------
vLLM names a full block of ``block_size`` tokens by a hash chained over the
blocks before it (its parent hash) and the block's tokens, plus "extra keys":
the LoRA adapter's name, multimodal item hashes, prompt-embedding hashes and,
for the first block only, the request's ``cache_salt``. PTStore names a prefix
the same way: chain keys over whole blocks of the namespace's ``block_tokens``
(``key_i = XXH3_128(key_{i-1} || tokens of block i)``, rooted in the namespace
and its salt), and it compares the token ids of every match, so a hash
collision can only cost a miss.

The connector makes the two agree:

* the namespace's ``block_tokens`` is vLLM's ``block_size`` (the worker creates
  it so), so vLLM's block *i* is PTStore's block *i*, and only whole vLLM
  blocks are ever looked up, loaded or saved (a hit in a namespace with
  another block size is rounded down to whole vLLM blocks);
* the extra keys that change what the KV of the same token ids is become
  part of the **namespace** (:func:`namespace_for`): requests with a
  ``cache_salt`` or a LoRA adapter use the namespace
  ``<base>.x<24 hex digits>``, created with that digest as its PTStore salt, so
  different salts (or adapters) never share a key or a byte, and a salted
  request never sees unsalted KV. The digest is SHA-256 over
  length-prefixed, tagged fields, so a LoRA name can never pose as a salt;
* multimodal inputs and prompt embeddings change the KV of the positions they
  fill, whatever the placeholder token ids there: the connector stores and
  looks up such a prompt with **identity tokens** at those positions
  (:func:`identity_overlay`): ``0x80000000 | v`` (vocabularies stay below
  2^31), where the 31-bit values of an image (audio, video item) are drawn
  from its vLLM identifier (the content hash vLLM's block hasher uses) and
  those of a prompt embedding from a hash of its row. Two prompts with the same
  placeholder tokens and different images never share a block; the same image
  at the same place does. A multimodal item without an identifier or position
  bypasses the store (:func:`bypass_reason`).

:func:`chain_keys` is the connector's own in-process hash of whole blocks
(BLAKE2b-128, chained like PTStore's keys): the scheduler uses it only to tell
whether a prompt shares blocks with a save still in flight.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

__all__ = ["namespace_for", "rank_namespace", "bypass_reason", "request_tokens", "chain_keys", "lora_name",
           "identity_overlay", "IDENTITY_BIT", "rank_heads", "degree_splits", "rank_degrees", "derived_from"]

IDENTITY_BIT = 0x80000000
Overlay = List[Tuple[np.ndarray, np.ndarray]]  # (positions, identity token ids)


def _field(h: "hashlib._Hash", tag: bytes, value: bytes) -> None:
    h.update(tag + b"\0" + len(value).to_bytes(8, "little") + value)


def lora_name(request: Any) -> Optional[str]:
    """The request's LoRA adapter name (what vLLM puts in its block hashes), or None."""
    lora = getattr(request, "lora_request", None)
    if not lora:
        return None
    name = getattr(lora, "lora_name", None) or getattr(lora, "name", None)
    return str(name) if name else f"lora-id-{getattr(lora, 'lora_int_id', '?')}"


def namespace_for(base: str, cache_salt: Optional[str] = None, lora: Optional[str] = None) -> Tuple[str, str]:
    """(namespace, PTStore salt) for a request: `base` and no salt for a plain request; otherwise a
    namespace of its own, ``<base>.x<digest[:24]>``, salted with the full digest."""
    if not cache_salt and not lora:
        return base, ""
    h = hashlib.sha256()
    _field(h, b"ptstore-vllm-isolation-v1", base.encode())
    if lora:
        _field(h, b"lora", lora.encode())
    if cache_salt:
        _field(h, b"cache_salt", str(cache_salt).encode())
    digest = h.hexdigest()
    return f"{base}.x{digest[:24]}", digest


def rank_namespace(ns: str, tp_rank: int = 0, tp_size: int = 1, pp_rank: int = 0, pp_size: int = 1) -> str:
    """The namespace one worker of a tensor/pipeline-parallel group stores its shard of the KV in.

    Each worker holds only its heads (TP) and its layers (PP), so each stores
    them in a namespace of its own; a single GPU uses `ns` itself.
    """
    if tp_size <= 1 and pp_size <= 1:
        return ns
    return f"{ns}.tp{tp_rank}of{tp_size}.pp{pp_rank}of{pp_size}"


_ISOLATION_SUFFIX = r"\.x[0-9a-f]{24}"  # namespace_for's
_RANK_SUFFIX = r"\.tp(\d+)of(\d+)\.pp(\d+)of(\d+)"  # rank_namespace's


def rank_degrees(ns: str, name: str) -> Optional[Tuple[int, int]]:
    """(tensor-parallel size, pipeline-parallel size) of the deployment whose ranks store in namespace `name`
    when `name` is `ns` ((1, 1)) or one of its rank namespaces (:func:`rank_namespace`); else None."""
    m = re.fullmatch(re.escape(ns) + f"(?:{_RANK_SUFFIX})?", name)
    if m is None:
        return None
    return (int(m.group(2)), int(m.group(4))) if m.group(1) is not None else (1, 1)


def derived_from(base: str, name: str) -> bool:
    """Whether namespace `name` holds KV of the model whose namespace is `base`: `base` itself, its isolated
    namespaces (:func:`namespace_for`: salts, LoRA) and the rank namespaces of each (:func:`rank_namespace`)."""
    return re.fullmatch(re.escape(base) + f"(?:{_ISOLATION_SUFFIX})?(?:{_RANK_SUFFIX})?", name) is not None


def rank_heads(rank: int, tp_size: int, total_kv_heads: int) -> range:
    """The KV heads tensor-parallel rank `rank` of `tp_size` holds, as vLLM splits them: a contiguous share when
    the heads divide among the ranks, one head replicated over ``tp_size // total`` ranks when there are fewer
    heads than ranks."""
    if tp_size <= 1:
        return range(total_kv_heads)
    if tp_size <= total_kv_heads:
        per = total_kv_heads // tp_size
        return range(rank * per, (rank + 1) * per)
    head = rank // (tp_size // total_kv_heads)
    return range(head, head + 1)


def degree_splits(tp_size: int, total_kv_heads: int) -> bool:
    """Whether vLLM can split `total_kv_heads` over `tp_size` ranks (its own condition)."""
    if tp_size <= 1:
        return True
    return total_kv_heads % tp_size == 0 if tp_size <= total_kv_heads else tp_size % total_kv_heads == 0


def bypass_reason(request: Any) -> Optional[str]:
    """Why a request must not use the store (nothing tells what its KV depends on), or None."""
    for f in getattr(request, "mm_features", None) or ():
        if not _mm_identity(f) or getattr(f, "mm_position", None) is None:
            return "a multimodal input without an identifier or position"
    for attr in ("mm_hashes", "mm_positions", "mm_inputs"):  # vLLM before mm_features
        if getattr(request, attr, None):
            return "multimodal inputs of an older vLLM"
    if getattr(request, "prompt_token_ids", None) is None and getattr(request, "prompt_embeds", None) is None:
        return "no prompt token ids"
    return None


def _mm_identity(feature: Any) -> Optional[str]:
    ident = getattr(feature, "identifier", None) or getattr(feature, "mm_hash", None)
    return str(ident) if ident else None


def _draw(seed_bytes: bytes, n: int) -> np.ndarray:
    seed = int.from_bytes(hashlib.blake2b(seed_bytes, digest_size=16).digest(), "little")
    return (np.random.default_rng(seed).integers(0, 1 << 31, size=n, dtype=np.uint32) | IDENTITY_BIT).astype(
        np.uint32)


def identity_overlay(request: Any) -> Overlay:
    """The identity tokens of a request's multimodal items and prompt embeddings: (positions, token ids)
    pairs that replace its placeholder token ids in what the store matches (see the module's doc)."""
    out: Overlay = []
    for f in getattr(request, "mm_features", None) or ():
        ident, pos = _mm_identity(f), getattr(f, "mm_position", None)
        if not ident or pos is None:
            continue
        offset, length = int(pos.offset), int(pos.length)
        out.append((np.arange(offset, offset + length, dtype=np.int64),
                    _draw(b"ptstore-mm-v1\0" + ident.encode(), length)))
    embeds = getattr(request, "prompt_embeds", None)
    if embeds is not None:
        mask = getattr(request, "prompt_is_token_ids", None)
        positions = [p for p in range(int(embeds.shape[0])) if mask is None or not mask[p]]
        import torch

        rows = embeds.detach().to("cpu").contiguous()
        flat = rows.view(-1).view(torch.uint8).numpy().reshape(rows.shape[0], -1)
        values = np.empty(len(positions), dtype=np.uint32)
        for i, p in enumerate(positions):
            d = hashlib.blake2b(b"ptstore-embed-v1\0" + flat[p].tobytes(), digest_size=4).digest()
            values[i] = int.from_bytes(d, "little") | IDENTITY_BIT
        out.append((np.asarray(positions, dtype=np.int64), values))
    return out


def request_tokens(request: Any, limit: Optional[int] = None, overlay: Optional[Overlay] = None) -> np.ndarray:
    """The token ids the store matches for a request (prompt and output so far, as uint32; identity tokens
    where `overlay` puts them), at most `limit` of them."""
    ids: Any = getattr(request, "all_token_ids", None)
    if ids is None:
        ids = request.prompt_token_ids
    if limit is not None:
        ids = ids[:limit]
    arr = np.asarray(list(ids) if not isinstance(ids, (list, np.ndarray)) else ids, dtype=np.uint32)
    if overlay:
        arr = arr.copy()
        for positions, values in overlay:
            keep = positions < len(arr)
            arr[positions[keep]] = values[keep]
    return arr


def chain_keys(namespace: str, tokens: np.ndarray, block: int, blocks: Optional[int] = None) -> List[bytes]:
    """Keys of the first `blocks` whole blocks of `tokens` (all whole blocks by default): key i names
    blocks 0..i of the prompt in `namespace` (BLAKE2b-128, each key chained on the one before)."""
    n = len(tokens) // block if blocks is None else min(blocks, len(tokens) // block)
    data = np.ascontiguousarray(tokens[: n * block], dtype="<u4").tobytes()
    step = block * 4
    key = hashlib.blake2b(namespace.encode(), digest_size=16).digest()
    out: List[bytes] = []
    for i in range(n):
        key = hashlib.blake2b(key + data[i * step:(i + 1) * step], digest_size=16).digest()
        out.append(key)
    return out


def deepest_shared_block(keys: Sequence[bytes], known: Any) -> int:
    """Blocks (from the start) of a prompt whose chain keys `keys` end in a key of `known`: the longest
    prefix it shares with them (0 when none)."""
    for i in range(len(keys) - 1, -1, -1):
        if keys[i] in known:
            return i + 1
    return 0
