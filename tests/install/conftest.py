"""The staging root of the install tests: `cmake --install <build> --prefix /usr
--strip` with DESTDIR set to a fresh temporary directory, once per test file.
ctest sets PTSTORE_BUILD_DIR, CMAKE_COMMAND and what the build has
(PTSTORE_INSTALL_PYTHON, PTSTORE_INSTALL_BENCH)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import pytest


@pytest.fixture(scope="module")
def staging():
    build = os.environ["PTSTORE_BUILD_DIR"]
    cmake = os.environ.get("CMAKE_COMMAND", "cmake")
    root = tempfile.mkdtemp(prefix="ptstore-install-")
    env = dict(os.environ, DESTDIR=root)
    r = subprocess.run([cmake, "--install", build, "--prefix", "/usr", "--strip"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"cmake --install failed:\n{r.stdout}\n{r.stderr}"
    yield root
    shutil.rmtree(root, ignore_errors=True)
