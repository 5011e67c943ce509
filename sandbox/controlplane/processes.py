"""Child processes that cannot outlive their owner, and the scratch folders they leave when the owner is killed.

- Every child is started in its own session (so a terminal's Ctrl-C reaches only the owner, which then stops the
  children in order) with ``PR_SET_PDEATHSIG`` = SIGKILL: the kernel kills it when its parent dies, even by
  ``kill -9``. Linux sends that signal when the *thread* that forked the child ends, so all children are forked
  by one daemon thread kept for the life of the process (``_Spawner``), never by a caller's short-lived thread.
- ``Child.stop()`` sends SIGTERM to the child's process group, then SIGKILL after a grace period, and reaps it.
  ``stop_all()`` (registered with ``atexit``) stops every child still running.
- Scratch folders are named ``nodeflow-cp-<owner pid>-<random>``; ``sweep_orphans()`` removes those whose owner
  is gone (a ``kill -9``'d owner cannot remove its own; on tmpfs they would hold memory).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

__all__ = ["Child", "free_ports", "port_is_free", "scratch_dir", "stop_all", "sweep_orphans"]

PR_SET_PDEATHSIG = 1
SCRATCH_PREFIX = "nodeflow-cp-"
_SCRATCH_RE = re.compile(rf"^{SCRATCH_PREFIX}(\d+)-")
_libc: Any = None


def _die_with_parent(parent: int) -> Callable[[], None]:
    def preexec() -> None:  # runs in the child between fork and exec: no locks, no allocation-heavy work
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before the prctl took effect
            os._exit(1)

    return preexec


class _Spawner:
    """One daemon thread that forks every child (see the module docstring)."""

    def __init__(self) -> None:
        self._requests: queue.Queue[tuple[Callable[[], subprocess.Popen[bytes]], Future[subprocess.Popen[bytes]]]]
        self._requests = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def run(self, start: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name="controlplane-spawner", daemon=True)
                self._thread.start()
        future: Future[subprocess.Popen[bytes]] = Future()
        self._requests.put((start, future))
        return future.result()

    def _serve(self) -> None:
        while True:
            start, future = self._requests.get()
            try:
                future.set_result(start())
            except BaseException as exc:
                future.set_exception(exc)


_SPAWNER = _Spawner()
_LIVE: set[Child] = set()
_LIVE_LOCK = threading.Lock()


class Child:
    """A started binary: ``name``, ``pid``, its combined output in ``log``."""

    def __init__(self, name: str, args: Sequence[str], log: Path, *, env: dict[str, str] | None = None) -> None:
        global _libc
        if _libc is None:
            _libc = ctypes.CDLL(None, use_errno=True)
        self.name = name
        self.args = list(args)
        self.log = log
        parent = os.getpid()
        with log.open("ab") as out:
            self.popen = _SPAWNER.run(
                lambda: subprocess.Popen(
                    self.args,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=_die_with_parent(parent),
                    env=env,
                )
            )
        self.pid = self.popen.pid
        with _LIVE_LOCK:
            _LIVE.add(self)

    def running(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 30) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace: float = 3.0) -> None:
        """SIGTERM the process group, SIGKILL what is left after ``grace`` seconds; reaps the child."""
        try:
            if self.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.pid, signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.popen.wait(grace)
            with contextlib.suppress(ProcessLookupError):  # the group may hold more than the leader
                os.killpg(self.pid, signal.SIGKILL)
            self.popen.wait()
        finally:
            with _LIVE_LOCK:
                _LIVE.discard(self)


def stop_all() -> None:
    """Stop every child still running (at exit: they would die with us anyway, but in order and reaped)."""
    with _LIVE_LOCK:
        children = list(_LIVE)
    for child in children:
        child.stop(grace=1.0)


atexit.register(stop_all)


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports on 127.0.0.1 nobody listens on now (the caller's children bind them a moment
    later; someone else may be quicker, which the caller notices and retries)."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def port_is_free(port: int) -> bool:
    """Nobody listens on ``port`` of 127.0.0.1: a server could bind it now (as servers do, with SO_REUSEADDR, so
    connections of a dead process still in TIME_WAIT do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _scratch_base() -> Path:
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_orphans(base: Path | None = None) -> list[Path]:
    """Remove the scratch folders of owners that no longer run; returns them."""
    base = base or _scratch_base()
    removed = []
    for path in base.glob(f"{SCRATCH_PREFIX}*"):
        match = _SCRATCH_RE.match(path.name)
        if match and not _alive(int(match.group(1))):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def scratch_dir(base: Path | None = None) -> Path:
    """A new scratch folder on tmpfs when there is one (etcd's data needs no disk), named after this process."""
    base = base or _scratch_base()
    sweep_orphans(base)
    return Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-", dir=base))
