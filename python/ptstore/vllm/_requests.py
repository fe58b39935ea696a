"""What the scheduler side knows of one vLLM request (``_Req``), and how it reads vLLM's request forms.

A request's ``save_state`` says whether its prompt's save is still to plan (``_NONE``), planned
(``_EMITTED``) or not needed (``_NOT_NEEDED``: the store held it, or vLLM has too few blocks); stepwise
saves (a sliding-window or state group) keep it ``_NONE`` and count ``saved_tokens`` instead. Plain data:
only the scheduler's thread touches it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, List, Optional, Set, Tuple

_NONE, _EMITTED, _NOT_NEEDED = 0, 1, 2


@dataclass
class _Req:
    request: Any
    namespace: str
    salt: str
    bypass: Optional[str]
    overlay: Any = None  # identity tokens of its multimodal items / prompt embeddings (keys.identity_overlay)
    store_tokens: int = 0  # whole-block tokens of the prompt the store held at the last lookup
    local_tokens: int = 0  # num_computed_tokens (vLLM's local hit) at the last lookup
    ext_tokens: int = 0
    load_async: bool = False
    loaded_tokens: int = 0  # tokens this request got from the store (every load, less what failed)
    block_ids: List[List[int]] = field(default_factory=lambda: [[]])  # per KV cache group
    load_start: int = 0  # the last load: tokens [load_start, load_end) into load_blocks
    load_end: int = 0
    # the (tensor, pipeline)-parallel degrees the last lookup found the prefix at ((0, 0): this deployment's own)
    source: Tuple[int, int] = (0, 0)
    load_blocks: List[int] = field(default_factory=list)  # the first group's blocks of the last load
    save_state: int = _NONE
    saves_emitted: int = 0
    saved_tokens: int = 0
    state_ends: Set[int] = field(default_factory=set)  # (align) blocks where a step of it ended: their state


def _real(ids: Any) -> bool:
    """True when vLLM passed blocks (MultiConnector passes none to a connector it did not choose)."""
    return ids is not None and any(len(g) for g in ids)


def _prompt_len(request: Any) -> int:
    n = getattr(request, "num_prompt_tokens", None)
    return int(n) if n is not None else len(request.prompt_token_ids)


def _cached_requests(cached: Any) -> Iterable[Tuple[str, Any, bool, int]]:
    """(req_id, new_block_ids, resumed, num_computed_tokens) of vLLM's CachedRequestData, in either of its
    forms: one object with parallel lists (vLLM >= 0.10), or a list of per-request objects (older)."""
    if cached is None:
        return
    if isinstance(cached, (list, tuple)):
        for c in cached:
            yield (c.req_id, getattr(c, "new_block_ids", None), bool(getattr(c, "resumed_from_preemption", False)),
                   c.num_computed_tokens)
        return
    ids = list(getattr(cached, "req_ids", ()) or ())
    new_block_ids = getattr(cached, "new_block_ids", None) or [None] * len(ids)
    computed = getattr(cached, "num_computed_tokens", None) or [0] * len(ids)
    resumed_set = getattr(cached, "resumed_req_ids", None)
    resumed_list = getattr(cached, "resumed_from_preemption", None)
    for i, rid in enumerate(ids):
        if resumed_set is not None:
            resumed = rid in resumed_set
        elif resumed_list is not None:
            resumed = bool(resumed_list[i])
        else:
            resumed = False
        yield rid, new_block_ids[i], resumed, computed[i]
