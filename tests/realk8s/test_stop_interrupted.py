"""A control plane whose stop() is interrupted (a second Ctrl-C while ``make demo KEEP=1`` tears down) still
leaves no process and no scratch folder behind (the folder held etcd's data on tmpfs)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sandbox.controlplane import ControlPlane
from sandbox.controlplane.processes import Child, scratch_dir


def test_an_interrupted_stop_kills_the_rest_and_removes_the_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    plane = ControlPlane()
    plane.workdir = scratch_dir()
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    first = plane.processes["etcd"] = Child("etcd", sleeper, plane.workdir / "etcd.log")
    second = plane.processes["kube-apiserver"] = Child("kube-apiserver", sleeper, plane.workdir / "apiserver.log")
    workdir: Path = plane.workdir
    stop = Child.stop

    def interrupted(self: Child, grace: float = 3.0) -> None:
        if self is second and grace > 0:  # stopped first (reverse order): Ctrl-C arrives while it waits
            raise KeyboardInterrupt
        stop(self, grace)

    monkeypatch.setattr(Child, "stop", interrupted)
    with pytest.raises(KeyboardInterrupt):
        plane.stop()
    assert not first.running()
    assert not second.running()
    assert not workdir.exists()
    plane.stop()  # a no-op now
