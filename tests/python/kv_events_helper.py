"""A KV-event subscriber for the tests (docs/kv-events.md): decodes ptstored's stream into the event classes
of vLLM's own ``vllm/distributed/kv_events.py`` (the snapshot at $PTSTORE_VLLM_SRC) and rebuilds what each node
holds from the stream alone, with replay over the ROUTER socket for gaps and incarnations for restarts."""

from __future__ import annotations

import dataclasses
import re
import time
from typing import Any, Dict, List, Optional, Set, Tuple

import msgpack
import zmq

END_SEQ = -1
_ENDPOINTS = re.compile(r"kv events on (tcp://\S+) replay (tcp://\S+) incarnation (\d+)")


def endpoints(log: str) -> Tuple[str, str, int]:
    """(PUB endpoint, replay endpoint, incarnation) from a ptstored's log (the last start in it)."""
    found = _ENDPOINTS.findall(log)
    if not found:
        raise AssertionError(f"no 'kv events on' line in the log:\n{log}")
    pub, replay, inc = found[-1]
    return pub, replay, int(inc)


def struct_fields(cls: type) -> List[Any]:
    """The fields of a vLLM event class in declaration order (msgspec's array order)."""
    if hasattr(cls, "__struct_fields__"):  # real msgspec
        names = cls.__struct_fields__
        defaults = cls.__struct_defaults__
        out = []
        for i, n in enumerate(names):
            d = len(names) - len(defaults)
            out.append((n, defaults[i - d] if i >= d else dataclasses.MISSING))
        return out
    return [(f.name, f.default) for f in dataclasses.fields(cls)]  # the stand-in: a stdlib dataclass


def decode_event(raw: List[Any], kv: Any) -> Any:
    """One array-like, tagged event ([tag, field...], trailing defaults omitted) into its vLLM class."""
    classes = {"BlockStored": kv.BlockStored, "BlockRemoved": kv.BlockRemoved,
               "AllBlocksCleared": kv.AllBlocksCleared}
    assert isinstance(raw, list) and raw, raw
    tag, values = raw[0], raw[1:]
    assert tag in classes, f"unknown tag {tag!r}"
    cls = classes[tag]
    fields = struct_fields(cls)
    assert len(values) <= len(fields), (tag, values)
    kwargs = {}
    for i, (name, default) in enumerate(fields):
        if i < len(values):
            kwargs[name] = values[i]
        else:
            assert default is not dataclasses.MISSING, f"{tag}: required field {name} missing"
    return cls(**kwargs)


def decode_batch(payload: bytes, kv: Any) -> Any:
    """A payload into vLLM's KVEventBatch: with msgspec's own decoder where msgspec is real, else msgpack."""
    try:
        import msgspec  # noqa: F401
        real = hasattr(msgspec, "msgpack") and hasattr(msgspec.msgpack, "Decoder") and \
            not type(msgspec).__name__.startswith("StandIn")
    except ImportError:
        real = False
    if real:
        return msgspec.msgpack.Decoder(type=kv.KVEventBatch).decode(payload)
    raw = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    assert isinstance(raw, list) and 2 <= len(raw) <= 3, raw
    fields = [n for n, _ in struct_fields(kv.KVEventBatch)]
    assert fields == ["ts", "events", "data_parallel_rank"], fields
    batch = kv.KVEventBatch(ts=raw[0], events=[decode_event(e, kv) for e in raw[1]],
                            **({"data_parallel_rank": raw[2]} if len(raw) == 3 else {}))
    return batch


class NodeView:
    """What one node holds, rebuilt from its stream: {(namespace, block hash): set of media}."""

    def __init__(self, node: int, pub: str, replay: str, kv: Any, ctx: zmq.Context) -> None:
        self.node, self.kv, self.ctx = node, kv, ctx
        self.blocks: Dict[Tuple[str, Any], Set[str]] = {}
        self.groups: Dict[int, str] = {}   # group_idx -> namespace (learnt from BlockStored.lora_name)
        self.next_seq: Optional[int] = None
        self.incarnation: Optional[int] = None
        self.replays = 0
        self.gaps = 0
        self.restarts = 0
        self.batches = 0
        self.connect(pub, replay)

    def connect(self, pub: str, replay: str) -> None:
        self.pub_ep, self.replay_ep = pub, replay
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, f"kv@{self.node}@".encode())
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.connect(pub)

    def close(self) -> None:
        self.sub.close(0)

    def replay_from(self, start: int) -> List[Tuple[int, bytes]]:
        d = self.ctx.socket(zmq.DEALER)
        d.setsockopt(zmq.LINGER, 0)
        d.connect(self.replay_ep)
        try:
            d.send_multipart([b"", start.to_bytes(8, "big")])
            out = []
            while True:
                assert d.poll(10000), "no replay answer"
                frames = d.recv_multipart()
                assert len(frames) == 3 and frames[0] == b"", frames
                seq = int.from_bytes(frames[1], "big", signed=True)
                if seq == END_SEQ:
                    assert frames[2] == b"", frames[2]
                    return out
                out.append((seq, frames[2]))
        finally:
            d.close(0)

    def _apply(self, seq: int, payload: bytes, topic_ns: Optional[str]) -> None:
        batch = decode_batch(payload, self.kv)
        self.batches += 1
        self.next_seq = seq + 1
        self.incarnation = seq >> 32
        for e in batch.events:
            if isinstance(e, self.kv.AllBlocksCleared):
                self.blocks.clear()
                continue
            ns = topic_ns if topic_ns is not None else self.groups.get(e.group_idx)
            if isinstance(e, self.kv.BlockStored):
                ns = e.lora_name
                self.groups[e.group_idx] = ns
                for h in e.block_hashes:
                    self.blocks.setdefault((ns, h), set()).add(e.medium)
            else:
                assert ns is not None, "a removal of an unknown namespace"
                for h in e.block_hashes:
                    media = self.blocks.get((ns, h), set())
                    assert e.medium in media, f"node {self.node}: removal of {h} in {e.medium} not held ({media})"
                    media.discard(e.medium)
                    if not media:
                        del self.blocks[(ns, h)]

    def _catch_up(self, upto: int) -> None:
        """Replays [next_seq, upto) (or the new incarnation from its start)."""
        start = self.next_seq if self.next_seq is not None and (self.next_seq >> 32) == (upto >> 32) \
            else (upto >> 32) << 32
        self.replays += 1
        for seq, payload in self.replay_from(start):
            if seq >= upto:
                break
            if self.next_seq is None or seq >= self.next_seq or (seq >> 32) != (self.next_seq >> 32):
                self._apply(seq, payload, None)

    def poll(self, timeout_ms: int = 0) -> int:
        """Applies what has arrived; returns the batches applied."""
        n = 0
        while self.sub.poll(timeout_ms):
            timeout_ms = 0
            topic, seq_b, payload = self.sub.recv_multipart()
            seq = int.from_bytes(seq_b, "big")
            ns = topic.decode().split("@", 2)[2]
            if self.next_seq is None:
                self._catch_up(seq)  # what came before this subscriber connected
            elif seq != self.next_seq:
                if (seq >> 32) != (self.next_seq >> 32):
                    self.restarts += 1
                elif seq < self.next_seq:
                    continue  # already applied (from a replay)
                else:
                    self.gaps += 1
                self._catch_up(seq)
            self._apply(seq, payload, ns or None)
            n += 1
        return n

    def sync(self) -> None:
        """Catches up with everything published so far (a replay from next_seq to the end of the buffer)."""
        self.poll(0)
        start = self.next_seq if self.next_seq is not None else 0
        got = self.replay_from(start)
        if got and self.next_seq is not None and (got[0][0] >> 32) != (self.next_seq >> 32):
            self.restarts += 1
        for seq, payload in got:
            if self.next_seq is None or seq >= self.next_seq or (seq >> 32) != (self.next_seq >> 32):
                self._apply(seq, payload, None)
        self.replays += 1

    def held(self, ns: str) -> Dict[Any, Set[str]]:
        return {h: m for (n, h), m in self.blocks.items() if n == ns}


def wait_until(cond, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")
