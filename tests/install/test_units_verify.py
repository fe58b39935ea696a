"""`systemd-analyze verify` on the installed units, inside a root that has
the staging tree, the host's own systemd units and the host programs the
units run besides ours (/bin/kill): verify resolves ExecStart= and the
targets the units name in --root. Skipped, saying so,
where systemd-analyze is absent (scripts/setup installs systemd)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

ANALYZE = shutil.which("systemd-analyze") or ("/usr/bin/systemd-analyze" if os.path.exists("/usr/bin/systemd-analyze") else None)
HOST_UNITS = next((d for d in ("/usr/lib/systemd/system", "/lib/systemd/system") if os.path.isdir(d)), None)
if ANALYZE is None or HOST_UNITS is None:
    pytest.skip("systemd-analyze (Debian package systemd) is not installed: the units are not verified",
                allow_module_level=True)

UNITS = ["ptstored.service", "mnt-ptstore.mount"]


@pytest.fixture(scope="module")
def verify_root(staging):
    root = staging + "-verify"
    shutil.copytree(staging, root, symlinks=True)
    units = os.path.join(root, "usr/lib/systemd/system")
    for name in os.listdir(HOST_UNITS):
        src = os.path.join(HOST_UNITS, name)
        if not os.path.exists(os.path.join(units, name)) and (os.path.isfile(src) or os.path.isdir(src)):
            if os.path.isdir(src) and not os.path.islink(src):
                shutil.copytree(src, os.path.join(units, name), symlinks=True)
            else:
                shutil.copy2(src, os.path.join(units, name), follow_symlinks=False)
    # Programs the units run that a system has and the staging root lacks (ExecReload=/bin/kill):
    # the host's, at the same path.
    for name in UNITS:
        with open(os.path.join(units, name)) as f:
            for line in f:
                if not re.match(r"Exec[A-Za-z]*=", line):
                    continue
                prog = line.split("=", 1)[1].strip().lstrip("-@+!:").split()[0]
                inside = root + prog
                if os.path.isabs(prog) and not os.path.lexists(inside) and os.path.exists(prog) \
                        and not prog.startswith("/usr/sbin/ptstore"):
                    os.makedirs(os.path.dirname(inside), exist_ok=True)
                    shutil.copy2(prog, inside)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("name", UNITS)
def test_systemd_analyze_verify(verify_root, name):
    r = subprocess.run([ANALYZE, "verify", "--man=no", f"--root={verify_root}", name], capture_output=True, text=True,
                       timeout=120)
    out = (r.stdout + r.stderr).strip()
    assert r.returncode == 0, f"systemd-analyze verify {name} failed:\n{out}"
    # Warnings (an unknown or misspelt key, a bad value) leave the exit status 0: none may name our unit.
    ours = [line for line in out.splitlines() if name in line or "ptstore" in line]
    assert not ours, f"systemd-analyze verify {name} warns:\n{out}"


def test_verify_catches_a_broken_unit(verify_root):
    # The check above can fail: a unit whose ExecStart= names no program is refused.
    bad = os.path.join(verify_root, "usr/lib/systemd/system/ptstored-broken.service")
    with open(os.path.join(verify_root, "usr/lib/systemd/system/ptstored.service")) as f:
        text = f.read().replace("/usr/sbin/ptstored ", "/usr/sbin/ptstored-absent ")
    with open(bad, "w") as f:
        f.write(text)
    r = subprocess.run([ANALYZE, "verify", "--man=no", f"--root={verify_root}", "ptstored-broken.service"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "ptstored-absent" in r.stdout + r.stderr, r.stdout + r.stderr
    os.unlink(bad)
