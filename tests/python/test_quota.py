"""Namespace quotas from Python against a real ptstored: set and read, sizes as ints or texts, bad sizes,
another user refused, and a flood kept inside its quota while another namespace keeps every prompt."""

from __future__ import annotations

import os

import numpy as np
import pytest

import ptstore
from conftest import as_kv, empty, kv_bits, raw, tokens


def test_parse_quota():
    assert ptstore.parse_quota("4GiB") == 4 << 30
    assert ptstore.parse_quota("1.5 MiB") == 3 << 19
    assert ptstore.parse_quota("10GB") == 10 ** 10
    assert ptstore.parse_quota("none") == 0
    for bad, says in [("-1G", "negative"), ("4 parsecs", "unknown unit"), ("2EiB", "too large"), ("", "empty")]:
        with pytest.raises(ptstore.InvalidArgument, match=says):
            ptstore.parse_quota(bad)


def test_set_and_read_quotas(client, make_ns):
    ns, _ = make_ns()
    q = client.set_quota(ns, dram="8MiB")
    assert isinstance(q, ptstore.NamespaceQuota)
    assert (q.ns, q.dram_quota, q.ssd_quota, q.dram_bytes) == (ns, 8 << 20, 0, 0)
    assert client.set_quota(ns, dram=1 << 20).dram_quota == 1 << 20
    assert client.quota(ns).dram_quota == 1 << 20
    assert ns in [x.ns for x in client.quotas()]
    for bad, err in [(-1, "negative"), ("4 parsecs", "unknown unit"), (1 << 61, "too large"), ("2EiB", "too large"),
                     (True, "bool"), (1.5, "float")]:
        with pytest.raises(ptstore.InvalidArgument, match=err):
            client.set_quota(ns, dram=bad)
    # The daemon of these tests has no SSD tier: an SSD quota is refused, naming why.
    with pytest.raises(ptstore.InvalidArgument, match="SSD tier"):
        client.set_quota(ns, ssd="1GiB")
    assert client.quota(ns).dram_quota == 1 << 20, "a refused change changes nothing"
    with pytest.raises(ptstore.NotFound):
        client.set_quota("no-such-namespace", dram="1GiB")
    assert client.set_quota(ns, dram=0).dram_quota == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another uid")
def test_another_user_is_refused(daemon, client, make_ns):
    ns, _ = make_ns()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgid(4301)
            os.setuid(4301)
            with ptstore.Client(daemon.socket) as c:
                try:
                    c.set_quota(ns, dram="1MiB")
                except ptstore.PermissionDenied as e:
                    code = 0 if f"'{ns}'" in str(e) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert client.quota(ns).dram_quota == 0


def test_a_flood_stays_in_its_quota_and_the_other_namespace_keeps_its_prompts(client, make_ns):
    steady, layout = make_ns()
    flood, _ = make_ns()
    prompt_bytes = 256 * layout.bytes_per_token
    client.set_quota(flood, dram=16 * prompt_bytes)
    kept = []
    for i in range(10):
        toks = tokens(256, seed=1000 + i)
        client.save(steady, toks, as_kv(kv_bits(toks, layout), layout, "numpy"))
        kept.append(toks)
    for i in range(100):
        toks = tokens(256, seed=5000 + i)
        r = client.save(flood, toks, as_kv(kv_bits(toks, layout), layout, "numpy"))
        assert r.stored_tokens == 256
    q = client.quota(flood)
    assert q.dram_bytes <= 16 * prompt_bytes
    assert q.dram_evictions == 100 - 16
    for toks in kept:
        out = empty(layout, 256, "numpy")
        assert client.load(steady, toks, out) == 256
        assert np.array_equal(raw(out), kv_bits(toks, layout))
    assert client.quota(steady).dram_evictions == 0
