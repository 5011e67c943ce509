"""The real control plane for the benchmarks (``sandbox.controlplane``): start one, seed it through its API, and
read what its processes cost.

What it decides:

- ``started(controllers=...)``: a ``ControlPlane`` (etcd and kube-apiserver; with ``controllers``, also
  kube-controller-manager and kube-scheduler) and a ``RealKubeAPI`` over it for the block, both stopped after.
  Without controllers nothing acts on the seeded objects (no garbage collector deletes a pod whose made-up owner
  does not exist, no scheduler binds a pending pod, no node lifecycle controller taints a Node no kubelet renews):
  the cluster stays as seeded, as tests/kubeapi's store did.
- ``seed(kube, objects)``: every object created as the admin through the API server, ``workers`` at a time
  (``RealKubeAPI.create``: admission, defaulting and validation run; a given ``status`` is then written through
  the status subresource). Namespaces go first, each with its ``default`` ServiceAccount (pods are refused
  without it); ``default``'s is created too when no controller-manager runs. Kinds named in ``stored`` are
  written into etcd instead (``RealKubeAPI.store_bypassing_admission``), their ``creationTimestamp`` kept: the
  API server sets its own on a create, and a benchmark whose decisions depend on ages needs the given ones.
- ``server_cpu(plane)``: CPU seconds (user + system) the control plane's processes have used so far
  (``cpu_seconds(pid)``: one process's); ``pin(plane, cpu)`` keeps them on one CPU.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Collection, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from nodeflow.kube.errors import AlreadyExists
from sandbox.controlplane import ControlPlane
from sandbox.controlplane.facade import SERVICE_ACCOUNTS, RealKubeAPI

__all__ = ["cpu_seconds", "pin", "seed", "server_cpu", "started"]


@contextlib.contextmanager
def started(*, controllers: bool = False, **options: Any) -> Iterator[RealKubeAPI]:
    """A started control plane and its ``RealKubeAPI`` (``options``: more ``ControlPlane`` arguments)."""
    with ControlPlane(controllers=controllers, **options) as plane, RealKubeAPI(plane) as kube:
        yield kube


def seed(
    kube: RealKubeAPI, objects: Iterable[Mapping[str, Any]], *, workers: int = 8, stored: Collection[str] = ()
) -> float:
    """Create ``objects`` (namespaces first, the rest ``workers`` at a time, in no particular order); those of a kind
    in ``stored`` are written with ``store_bypassing_admission`` instead (their ``creationTimestamp`` kept, for
    figures that depend on ages); seconds."""
    began = time.perf_counter()
    rest = []
    for obj in objects:
        if obj.get("kind") == "Namespace":
            kube.create(obj)  # with its default ServiceAccount
        else:
            rest.append(obj)
    if not kube.plane.controllers:  # the controller-manager makes default's ServiceAccount; nobody else does
        with contextlib.suppress(AlreadyExists):
            kube.kube.create(SERVICE_ACCOUNTS, {"metadata": {"name": "default"}}, namespace="default")
    for kind in {(str(o.get("apiVersion")), str(o.get("kind"))) for o in rest}:
        kube.resource_for(*kind)  # discovery once, before the threads

    def write(obj: Mapping[str, Any]) -> object:
        return kube.store_bypassing_admission(obj) if obj.get("kind") in stored else kube.create(obj)

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(write, rest))
    return time.perf_counter() - began


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pin(plane: ControlPlane, cpu: int) -> None:
    """Run every thread of the control plane's processes on CPU ``cpu`` only (threads started later inherit it)."""
    for child in plane.processes.values():
        for task in Path(f"/proc/{child.pid}/task").iterdir():
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(int(task.name), {cpu})


def server_cpu(plane: ControlPlane) -> float:
    """User + system CPU seconds of etcd, kube-apiserver (and the controllers, when they run) so far."""
    return sum(cpu_seconds(child.pid) for child in plane.processes.values() if child.running())
