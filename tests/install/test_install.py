"""`cmake --install` into a staging root (DESTDIR): every file where a Debian
system expects it, the units naming the installed paths, and the installed
programs working from there: ptstored --version, a real ptstored started
with the installed example config, the installed ptstore-stat talking to it,
and the installed Python module imported by Debian's /usr/bin/python3 from
the staging root (not the build tree) saving and loading through it."""

from __future__ import annotations

import os
import re
import signal
import socket
import stat
import subprocess
import tempfile
import time

import pytest

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PY_DIR = "usr/lib/python3/dist-packages"

SBIN = ["ptstored", "ptstore-fuse", "mount.ptstore", "mount.fuse.ptstore", "ptstore-fsck"]
BIN = ["ptstore-ls", "ptstore-stat", "ptstore-quota", "ptstore-put", "ptstore-get", "ptstore-sched"]
FILES = [
    "usr/lib/systemd/system/ptstored.service",
    "usr/lib/systemd/system/mnt-ptstore.mount",
    "usr/lib/sysusers.d/ptstore.conf",
    "etc/ptstore/ptstored.toml",
    "usr/share/ptstore/profiles.toml",
    "usr/include/ptstore/client.h",
    "usr/include/ptstore/status.h",
    "usr/include/ptstore/quota.h",
]


def expected_programs():
    bins = list(BIN)
    if os.environ.get("PTSTORE_INSTALL_BENCH") == "1":
        bins.append("ptstore-demo")
    return [f"usr/sbin/{p}" for p in SBIN] + [f"usr/bin/{p}" for p in bins]


def unit(staging, name):
    with open(os.path.join(staging, "usr/lib/systemd/system", name)) as f:
        return f.read()


def unit_value(text, key):
    values = [line.split("=", 1)[1] for line in text.splitlines() if line.startswith(key + "=")]
    assert values, f"no {key}= in the unit"
    return values[0]


def test_every_program_and_file_is_installed(staging):
    missing = [p for p in expected_programs() + FILES if not os.path.lexists(os.path.join(staging, p))]
    assert not missing, f"not installed under {staging}: {missing}"
    for p in expected_programs():
        path = os.path.join(staging, p)
        assert os.access(path, os.X_OK), f"{p} is not executable"
    # mount(8) runs /sbin/mount.fuse.ptstore for fstab's fuse.ptstore: a link to the helper beside it.
    link = os.path.join(staging, "usr/sbin/mount.fuse.ptstore")
    assert os.path.islink(link) and os.readlink(link) == "mount.ptstore", "mount.fuse.ptstore is not a link to mount.ptstore"
    # Nothing outside the prefix but /etc (no /usr/local from the configure-time prefix).
    assert sorted(os.listdir(staging)) == ["etc", "usr"], os.listdir(staging)
    assert not os.path.exists(os.path.join(staging, "usr/local")), "something went to /usr/local"


def test_every_man_page_is_installed(staging):
    pages = sorted(p for p in os.listdir(os.path.join(SRC, "man")) if re.fullmatch(r".+\.[1-8]", p))
    assert pages, "no man pages in man/"
    missing = [p for p in pages if not os.path.exists(os.path.join(staging, "usr/share/man", "man" + p[-1], p))]
    assert not missing, f"man pages not installed: {missing}"


def test_units_name_the_installed_paths(staging):
    svc = unit(staging, "ptstored.service")
    exec_start = unit_value(svc, "ExecStart").split()
    assert exec_start[0] == "/usr/sbin/ptstored", exec_start
    assert os.access(staging + exec_start[0], os.X_OK)
    config = exec_start[exec_start.index("--config") + 1]
    assert config == "/etc/ptstore/ptstored.toml"
    assert os.path.exists(staging + config)
    assert unit_value(svc, "Type") == "notify"
    assert unit_value(svc, "RuntimeDirectory") == "ptstore"
    assert unit_value(svc, "StateDirectory") == "ptstore"
    mount = unit(staging, "mnt-ptstore.mount")
    assert unit_value(mount, "Type") == "fuse.ptstore"
    assert unit_value(mount, "What") == "/run/ptstore/ptstored.sock"
    assert unit_value(mount, "Where") == "/mnt/ptstore"
    with open(os.path.join(staging, "usr/lib/sysusers.d/ptstore.conf")) as f:
        assert re.search(r"^u ptstore - .* /var/lib/ptstore$", f.read(), re.M)
    # No build or staging path leaked into an installed text file.
    build = os.environ["PTSTORE_BUILD_DIR"]
    for rel in FILES + ["usr/sbin/mount.ptstore"]:
        with open(os.path.join(staging, rel), errors="replace") as f:
            text = f.read()
        assert staging not in text and build not in text and SRC + "/" not in text, f"{rel} names a build path"


def test_installed_ptstored_version(staging):
    r = subprocess.run([os.path.join(staging, "usr/sbin/ptstored"), "--version"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ptstored " + os.environ["PTSTORE_VERSION"], r.stdout


def test_python_dir_is_where_debians_python_imports_from():
    r = subprocess.run(["/usr/bin/python3", "-c", "import sys; print('\\n'.join(sys.path))"], capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin"}, timeout=30)
    assert "/" + PY_DIR in r.stdout.split("\n"), r.stdout


def wait_for_socket(path, proc, log, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"ptstored exited {proc.returncode}:\n{open(log).read()}"
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.connect(path)
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"ptstored's socket did not accept within {timeout} s:\n{open(log).read()}")


CLIENT = r"""
import os, sys
import numpy as np
import ptstore
staging = os.environ["STAGING"]
assert ptstore.__file__.startswith(staging + "/"), "imported from " + ptstore.__file__
assert ptstore._ptstore.__file__.startswith(staging + "/"), ptstore._ptstore.__file__
layout = ptstore.Layout(layers=2, kv_heads=2, head_dim=16, dtype="fp32", block_tokens=4)
with ptstore.Client(sys.argv[1]) as c:
    c.create_namespace("installed", layout)
    toks = np.arange(1000, 1064, dtype=np.uint32)
    kv = np.random.default_rng(5).standard_normal(layout.kv_shape(64)).astype(np.float32)
    r = c.save("installed", toks, kv)
    assert r.stored_tokens == 64, r
    out = np.zeros(layout.kv_shape(64), dtype=np.float32)
    assert c.load("installed", toks, out) == 64
    assert np.array_equal(out, kv), "wrong bytes"
print("python ok")
"""


def test_installed_programs_serve_with_the_example_config(staging):
    tmp = tempfile.mkdtemp(prefix="ptstore-installed-")
    sock = os.path.join(tmp, "ptstored.sock")
    log = os.path.join(tmp, "ptstored.log")
    # The example config as installed; only the socket (no /run here) and a small arena differ.
    cmd = [os.path.join(staging, "usr/sbin/ptstored"), "--config", os.path.join(staging, "etc/ptstore/ptstored.toml"),
           "--socket", sock, "--arena-size", "32MiB", "--no-prefault"]
    with open(log, "w") as lf:
        proc = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT)
    try:
        wait_for_socket(sock, proc, log)
        r = subprocess.run([os.path.join(staging, "usr/bin/ptstore-stat"), "--socket", sock], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert "arena" in r.stdout.lower(), r.stdout
        if os.environ.get("PTSTORE_INSTALL_PYTHON") == "1":
            env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": os.path.join(staging, PY_DIR), "PYTHONDONTWRITEBYTECODE": "1",
                   "STAGING": staging}
            r = subprocess.run(["/usr/bin/python3", "-c", CLIENT, sock], capture_output=True, text=True, env=env,
                               cwd=tmp, timeout=120)
            assert r.returncode == 0 and "python ok" in r.stdout, f"{r.stdout}\n{r.stderr}"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, open(log).read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    import shutil
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.skipif(os.environ.get("PTSTORE_INSTALL_PYTHON") != "1", reason="the Python module is not built")
def test_python_module_files_are_installed(staging):
    pkg = os.path.join(staging, PY_DIR, "ptstore")
    names = os.listdir(pkg)
    assert "__init__.py" in names, names
    assert any(n.startswith("_ptstore") and n.endswith(".so") for n in names), names
    assert os.path.exists(os.path.join(pkg, "vllm", "__init__.py")), "the vLLM connector subpackage is missing"
    assert not any(n == "__pycache__" for n in names)
