"""A minimal valid cost-model profiles file for the tests (the format of sched/profiles.toml; the same
numbers as tests/sched/cost_model_test.cc's), with every path's bandwidth (GB/s) and rtt (us) chosen; and
AdviceProxy, a client whose load-or-recompute advice a test chooses."""

from __future__ import annotations

PROFILE = """
version = 1
[[profile]]
model = "m"
gpu = "{gpu}"
kv_bytes_per_token = 131072
source = "{source}"
prefill_ms = [[1000, 13.0], [2000, 26.0], [4000, 56.0], [8000, 132.0]]
decode_base_ms = 10
decode_per_kv_token_us = 0.5
[profile.paths]
"""


def profile_text(gpu="g", bw=10.0, rtt=10, source="test", **paths):
    """The profile with every path at (bw, rtt), except those given as name=(bw, rtt)."""
    text = PROFILE.format(gpu=gpu, source=source)
    for name in ("dram", "ssd", "rma", "tcp"):
        b, r = paths.get(name, (bw, rtt))
        text += f"{name} = {{ bandwidth_gbps = {b}, rtt_us = {r} }}\n"
    return text


def write_profiles(tmp_path, name="profiles.toml", **kw):
    """Writes profile_text(**kw) into tmp_path/name; returns its path."""
    p = tmp_path / name
    p.write_text(profile_text(**kw))
    return str(p)


class AdviceProxy:
    """A Client that forwards everything to the real one, except advise when `plan` or `error` is set; counts
    the advise calls and keeps the last one's keywords."""

    def __init__(self, real, plan=None, error=None):
        self._real, self.plan, self.error, self.calls, self.last_kw = real, plan, error, 0, None

    def advise(self, *args, **kw):
        self.calls += 1
        self.last_kw = kw
        if self.error is not None:
            raise self.error
        if self.plan is not None:
            return self.plan
        return self._real.advise(*args, **kw)

    def __getattr__(self, name):
        return getattr(self._real, name)
