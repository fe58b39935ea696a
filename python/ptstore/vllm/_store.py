"""The connector's link to ptstored: one Client, reconnected after failures, at most every retry interval."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, List, Optional, Tuple

from .._errors import Aborted, DeadlineExceeded, Error, IOFailure, ProtocolError, Unavailable

logger = logging.getLogger("ptstore.vllm")

# Errors that say the store (or the connection to it) is gone, not that one request was wrong.
LINK_ERRORS = (Unavailable, DeadlineExceeded, ProtocolError, IOFailure, ConnectionError, TimeoutError)


class StoreLink:
    """A lazily connected ``ptstore.Client`` that knows since when the store has been unreachable.

    ``get()`` returns the client, connecting first when there is none (at most
    once per `retry_interval_ms`); None while the store is unreachable.
    ``failed(exc)`` drops the client after a call raised one of
    :data:`LINK_ERRORS`; the next ``get()`` after the retry interval connects
    again (a restarted ptstored is picked up). Thread safe.
    """

    def __init__(self, socket: Optional[str], *, rpc_timeout_ms: int, retry_interval_ms: int, client_name: str,
                 connect: Optional[Callable[..., Any]] = None) -> None:
        self.socket = socket
        self.rpc_timeout_ms = rpc_timeout_ms
        self.retry_s = retry_interval_ms / 1000.0
        self.client_name = client_name
        self._connect = connect
        self._lock = threading.Lock()
        self._client: Any = None
        self._next_try = 0.0
        self._down_since: Optional[float] = None
        self._warned = False

    def get(self) -> Any:
        with self._lock:
            if self._client is not None:
                return self._client
            now = time.monotonic()
            if now < self._next_try:
                return None
            try:
                if self._connect is not None:
                    client = self._connect()
                else:
                    from .. import Client

                    client = Client(self.socket, client_name=self.client_name, rpc_timeout_ms=self.rpc_timeout_ms)
            except (Error, OSError) as e:
                self._mark_down_locked(now, e)
                return None
            self._client = client
            if self._down_since is not None:
                logger.info("ptstore: store at %s reachable again", self.socket or "<default socket>")
            self._down_since = None
            self._warned = False
            return client

    def failed(self, exc: BaseException) -> None:
        """Drops the client after `exc` (one of LINK_ERRORS) so that the next get() reconnects."""
        with self._lock:
            client, self._client = self._client, None
            self._mark_down_locked(time.monotonic(), exc)
        if client is not None:
            try:
                client.close()
            except Exception:  # noqa: BLE001 - closing a broken client
                pass

    def ok(self) -> None:
        """A call succeeded: the store is reachable."""
        with self._lock:
            self._down_since = None

    def down_for(self) -> Optional[float]:
        """Seconds since the store became unreachable (None while it is reachable)."""
        with self._lock:
            return None if self._down_since is None else time.monotonic() - self._down_since

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
            self._next_try = float("inf")
        if client is not None:
            client.close()

    def _mark_down_locked(self, now: float, exc: BaseException) -> None:
        if self._down_since is None:
            self._down_since = now
        self._next_try = now + self.retry_s
        if not self._warned:
            logger.warning("ptstore: store at %s unreachable (%s); loads count as misses, saves are dropped until "
                           "it is back", self.socket or "<default socket>", exc)
            self._warned = True


def is_link_error(exc: BaseException) -> bool:
    return isinstance(exc, LINK_ERRORS) and not isinstance(exc, Aborted)


def arena_pieces(extents: List[Tuple[int, int]], ranges: List[Tuple[int, int]]) -> Any:
    """``(arena offset, bytes, offset in the prefix)`` rows, an (n, 3) uint64 array, that copy the byte
    `ranges` (``(offset, length)`` in the prefix, in order) of a prefix laid out in the arena as `extents`
    (``(arena offset, length)``, in prefix order). ValueError when a range lies past the extents."""
    import numpy as np

    rows: List[Tuple[int, int, int]] = []
    starts = [0]
    for _, length in extents:
        starts.append(starts[-1] + length)
    e = 0
    for off, length in ranges:
        end = off + length
        while e < len(extents) and starts[e + 1] <= off:
            e += 1
        pos = off
        while pos < end:
            if e >= len(extents):
                raise ValueError(f"bytes [{off}, {end}) lie past the pinned prefix's {starts[-1]} bytes")
            take = min(end, starts[e + 1]) - pos
            rows.append((extents[e][0] + pos - starts[e], take, pos))
            pos += take
            if pos >= starts[e + 1]:
                e += 1
    return np.asarray(rows, dtype=np.uint64).reshape(-1, 3)
