"""The pinned hits of the scheduler side (``SchedulerSide`` takes it as a base; the ``pin_hits`` option).

A hit about to be promised to vLLM is pinned in every worker's namespace (``_pin_hit``) so that the store
keeps it until the workers copied it out of the arena mapping: the pins of a sync load are released two
steps after the load was planned (``_age_pins``, at the end of each step), those of an async load when vLLM
reports it received, those no load took at the end of the step. With a state group (Mamba), a pinned hit is
cut back to the last block whose stored state is valid (``_state_hit``, reading the tags through the pins).
Runs on the scheduler's thread.
"""

from __future__ import annotations

from typing import Any, List

import numpy as np

from .._errors import Error, NotFound
from ._requests import _Req
from ._store import arena_pieces, is_link_error
from .groups import STATE_TAG_BYTES, state_tag


class HitPins:
    """The hit pins of ``SchedulerSide`` (see the module's docstring); uses its attributes."""

    def _pin_hit(self, st: _Req, tokens: np.ndarray, hit: int) -> int:
        """Pins the `hit` tokens about to be promised to vLLM (pin_hits), in every worker's namespace (each
        tensor-parallel rank's of each pipeline stage; one per stage when the ranks share it), until they
        copied them; returns what all the pins hold (less when the store lost some since the lookup). Without
        the arena mapping, or when a pin fails, the workers pin at load time instead (and `hit` stands)."""
        client = self.link.get()
        if client is None or not client.mapped:
            return hit
        pins: List[Any] = []
        try:
            for name in self._rank_names(st.namespace):
                pins.append(client.pin(name, tokens))
        except Error as e:
            _unpin(pins)
            if is_link_error(e):
                self.link.failed(e)
            elif not isinstance(e, NotFound):
                self._warn_once(f"pin:{type(e).__name__}", "ptstore: pinning a hit in %s failed: %s", st.namespace, e)
            return hit if not isinstance(e, NotFound) else 0
        pinned = min(int(p.tokens) for p in pins) // self.block * self.block
        if pinned <= 0:
            _unpin(pins)
            return 0
        self._hit_pins[st.request.request_id] = pins
        self.stats["hits_pinned"] += 1
        return min(hit, pinned)

    def _state_hit(self, st: _Req, hit: int, computed: int) -> int:
        """The longest part of a pinned `hit` that ends at a block whose state is stored valid in every rank
        namespace and every state group (the tags after each group's first layer state); `computed` (no
        external tokens) when none past vLLM's own cache does, or without pins to read them from."""
        pins = self._hit_pins.get(st.request.request_id)
        client = self.link.get()
        b = self.block
        if not pins or client is None or not client.mapped or hit <= computed:
            self._warn_once("state-unpinned", "ptstore: a model with Mamba state loads only hits the scheduler "
                            "pinned (pin_hits, and ptstored's arena mapped into the scheduler's process): this "
                            "one is not; no hit")
            return computed
        try:
            layouts = [self._layout_of(client, name) for name in self._rank_names(st.namespace)]
            tag = np.empty(STATE_TAG_BYTES, dtype=np.uint8)
            for j in range(hit // b - 1, computed // b - 1, -1):
                want = np.frombuffer(state_tag(j), dtype=np.uint8)
                ok = True
                for pin, layout in zip(pins, layouts):
                    extents = [(e.arena_offset, e.length) for e in pin.extents]
                    for i in [i for i, g in enumerate(layout.groups) if g.kind == "state"]:
                        at = j * layout.bytes_per_block + layout.group_offset(i) + \
                            layout.groups[i].state_bytes - STATE_TAG_BYTES
                        pieces = arena_pieces(extents, [(at, STATE_TAG_BYTES)])
                        pieces[:, 2] -= np.uint64(at)
                        client.copy_from_arena(pieces, tag)
                        ok = ok and bool((tag == want).all())
                if ok:
                    if (j + 1) * b < hit:
                        self.stats["state_hits_trimmed"] += 1
                    return (j + 1) * b
        except (Error, ValueError) as e:
            if isinstance(e, Error) and is_link_error(e):
                self.link.failed(e)
            self._warn_once(f"state-tags:{type(e).__name__}", "ptstore: reading the stored states of a hit in %s "
                            "failed: %s", st.namespace, e)
        return computed

    def _layout_of(self, client: Any, name: str) -> Any:
        layout = self._layouts.get(name)
        if layout is None:
            layout = self._layouts[name] = client.get_namespace(name).layout
        return layout

    def _release(self, st: _Req) -> None:
        """Releases the pins of the hit `st` was last told of, if no load took them."""
        _unpin(self._hit_pins.pop(st.request.request_id, None))

    def _age_pins(self) -> None:
        """At the end of a scheduler step: pins of hits no load took go now; those of this step's sync loads
        are kept for two more steps (the workers copy them in this step, which vLLM's async scheduling runs
        after scheduling the next one), then released."""
        for pins in self._hit_pins.values():
            _unpin(pins)
        self._hit_pins.clear()
        self._pin_steps.append(self._step_pins)
        self._step_pins = []
        while len(self._pin_steps) > 2:
            _unpin(self._pin_steps.popleft())


def _unpin(pin: Any) -> None:
    """Releases a pin, or the pins of a (nested) list of them (None: nothing); a store that went away has
    dropped them already."""
    if pin is None:
        return
    if isinstance(pin, list):
        for p in pin:
            _unpin(p)
        return
    try:
        pin.release()
    except Error:
        pass
