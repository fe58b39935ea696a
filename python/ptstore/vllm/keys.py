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
* requests whose KV depends on more than their token ids and those two
  (multimodal inputs, prompt embeddings) bypass the store
  (:func:`bypass_reason`).

:func:`chain_keys` is the connector's own in-process hash of whole blocks
(BLAKE2b-128, chained like PTStore's keys): the scheduler uses it only to tell
whether a prompt shares blocks with a save still in flight.
"""

from __future__ import annotations

import hashlib
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

__all__ = ["namespace_for", "rank_namespace", "bypass_reason", "request_tokens", "chain_keys", "lora_name"]


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


def bypass_reason(request: Any) -> Optional[str]:
    """Why a request must not use the store (its KV depends on more than token ids), or None."""
    if getattr(request, "prompt_embeds", None) is not None:
        return "prompt embeddings"
    for attr in ("mm_features", "mm_hashes", "mm_positions", "mm_inputs"):
        if getattr(request, attr, None):
            return "multimodal inputs"
    if getattr(request, "prompt_token_ids", None) is None:
        return "no prompt token ids"
    return None


def request_tokens(request: Any, limit: Optional[int] = None) -> np.ndarray:
    """The request's token ids (prompt and output so far) as uint32, at most `limit` of them."""
    ids: Any = getattr(request, "all_token_ids", None)
    if ids is None:
        ids = request.prompt_token_ids
    if limit is not None:
        ids = ids[:limit]
    return np.asarray(list(ids) if not isinstance(ids, (list, np.ndarray)) else ids, dtype=np.uint32)


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
