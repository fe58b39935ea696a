"""One ptstore.Client used from several Python threads at once."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

import ptstore
from conftest import as_kv, empty, kv_bits, raw, tokens

THREADS = 8
ROUNDS = 12


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_threads_share_one_client(client, make_ns, backend):
    ns, layout = make_ns("bf16")
    system = tokens(16, seed=1)  # a prefix every prompt shares
    errors = []
    start = threading.Barrier(THREADS)

    def worker(t: int) -> None:
        try:
            start.wait()
            for r in range(ROUNDS):
                toks = np.concatenate([system, tokens(16 + 4 * r, seed=1000 * t + r)])
                bits = kv_bits(toks, layout)
                client.save(ns, toks, as_kv(bits, layout, backend))
                out = empty(layout, len(toks), backend)
                assert client.load(ns, toks, out) == len(toks)
                assert np.array_equal(raw(out), bits), f"thread {t} round {r}: wrong bytes"
                with client.pin(ns, toks) as p:
                    assert p.tokens == len(toks)
                    assert np.array_equal(raw(p.to_numpy()), bits)
                assert client.lookup(ns, toks).matched_tokens == len(toks)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append((t, e))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not any(th.is_alive() for th in threads), "a thread hung"
    assert not errors, errors
    s = client.stats()
    assert s.active_leases == 0
    # The shared system prompt is stored once: one root increment.
    roots = client.list_tree(ns)
    assert len(roots) == 1 and roots[0].start_token == 0


def _wait_all_stopped(pid: int, timeout: float = 10.0) -> None:
    """Waits until every thread of `pid` is stopped (state T): kill(SIGSTOP) returns before they are, and a
    thread that has not stopped yet may still serve a request."""
    deadline = time.monotonic() + timeout
    while True:
        states = []
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except OSError:
                pass  # the thread exited
        if states and all(st in "Tt" for st in states):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"ptstored's threads did not stop: {states}")
        time.sleep(0.001)


@pytest.mark.parametrize("op", ["load", "save", "lookup", "pin", "stats"])
def test_calls_release_the_gil(daemon, make_ns, op):
    """A call blocked on the server leaves the GIL to the other threads.

    The server is stopped (SIGSTOP) while a thread calls into it; the main
    thread must still run Python meanwhile, and resume the server. Were the
    GIL held during the call, the main thread could not wake up before the
    call failed at its deadline."""
    ns, layout = make_ns("bf16")
    toks = tokens(32, seed=6)
    bits = kv_bits(toks, layout)
    c = ptstore.Client(daemon.socket, rpc_timeout_ms=10000)
    c.save(ns, toks, as_kv(bits, layout, "numpy"))
    c.layout(ns)  # cached: the call below sends one request
    out = empty(layout, 32, "numpy")
    calls = {
        "load": lambda: c.load(ns, toks, out),
        "save": lambda: c.save(ns, toks, as_kv(bits, layout, "numpy")).matched_tokens,
        "lookup": lambda: c.lookup(ns, toks).matched_tokens,
        "pin": lambda: c.pin(ns, toks).tokens,
        "stats": lambda: 32 if c.stats().arena_bytes else 0,
    }
    result = []
    t = threading.Thread(target=lambda: result.append(calls[op]()))
    os.kill(daemon.pid, signal.SIGSTOP)
    try:
        _wait_all_stopped(daemon.pid)
        t.start()
        time.sleep(0.3)
        blocked_while_main_ran = t.is_alive()
    finally:
        os.kill(daemon.pid, signal.SIGCONT)
    t.join(30)
    c.close()
    assert blocked_while_main_ran, f"{op} held the GIL while waiting for the server"
    assert result == [32]
