"""A private ptstored for tests, benchmarks and notebooks.

    with ptstore.testing.Daemon(arena_size="256MiB") as d:
        client = ptstore.Client(d.socket)
        ...

The server runs on a unix socket in a fresh temporary directory and is
stopped (SIGTERM, then SIGKILL) by ``stop()``, on leaving the ``with`` block,
or when this process dies (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket as _socket
import subprocess
import tempfile
import time
from typing import Optional, Sequence

__all__ = ["Daemon", "find_ptstored"]


def find_ptstored() -> str:
    """The ptstored binary: ``$PTSTORE_PTSTORED``, else the build tree's (when this package runs from
    ``<build>/python``), else ``ptstored`` on PATH."""
    env = os.environ.get("PTSTORE_PTSTORED")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    built = os.path.join(here, os.pardir, os.pardir, "storage", "ptstored")
    if os.access(built, os.X_OK):
        return os.path.normpath(built)
    found = shutil.which("ptstored")
    if found:
        return found
    raise FileNotFoundError("no ptstored binary: set $PTSTORE_PTSTORED or build the project")


def _die_with_parent() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Daemon:
    """A ptstored owned by the caller.

    Args:
        arena_size: the DRAM arena (``--arena-size``), e.g. ``"64MiB"``.
        extra_args: more command-line arguments.
        binary: the ptstored to run (default: :func:`find_ptstored`).
        keep_dir: leave the temporary directory (socket, log) behind.
    """

    def __init__(self, arena_size: str = "64MiB", extra_args: Sequence[str] = (), binary: Optional[str] = None,
                 keep_dir: bool = False) -> None:
        self.binary = os.path.abspath(binary or find_ptstored())  # it runs in its own directory
        self.arena_size = arena_size
        self.extra_args = list(extra_args)
        self.keep_dir = keep_dir
        self.dir = ""
        self.socket = ""
        self.log_path = ""
        self._proc: Optional[subprocess.Popen] = None

    def start(self, timeout: float = 60.0) -> "Daemon":
        """Starts the server and waits until its socket accepts connections."""
        self.dir = tempfile.mkdtemp(prefix="ptstored-py-")
        os.chmod(self.dir, 0o755)
        self.socket = os.path.join(self.dir, "ptstored.sock")
        self.log_path = os.path.join(self.dir, "ptstored.log")
        args = [self.binary, "--socket", self.socket, "--arena-size", self.arena_size, *self.extra_args]
        with open(self.log_path, "wb") as log:
            self._proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          cwd=self.dir, preexec_fn=_die_with_parent)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"ptstored exited during start ({self._proc.returncode}): {self.log()}")
            s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            try:
                s.connect(self.socket)
                return self
            except OSError:
                time.sleep(0.02)
            finally:
                s.close()
        self.stop()
        raise TimeoutError(f"ptstored did not start within {timeout} s")

    def stop(self) -> int:
        """SIGTERM, wait (SIGKILL after 20 s); returns the exit status. Removes the directory."""
        rc = 0
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.terminate()
                try:
                    self._proc.wait(20)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait()
            rc = self._proc.returncode
            self._proc = None
        if self.dir and not self.keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
        return rc

    @property
    def pid(self) -> int:
        """The server's process id (0 when not running)."""
        return self._proc.pid if self._proc is not None else 0

    def log(self) -> str:
        """The server's output so far."""
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def __enter__(self) -> "Daemon":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
