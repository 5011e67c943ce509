"""The control plane launcher (sandbox/controlplane): it answers as a real cluster with RBAC, the identities it
was given and nodeflow's CRDs; and whatever way its owner ends (Ctrl-C, SIGTERM, kill -9, a failing test), no
process, port or scratch folder of it is left behind."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from nodeflow.kube.client import NODE_POOLS, PODS, Resource
from nodeflow.kube.errors import Forbidden
from sandbox.controlplane import IMPERSONATOR, KUBELET
from sandbox.controlplane.impersonation import Acting, ClientImpersonation, acting_as
from sandbox.controlplane.processes import port_is_free, sweep_orphans
from tests.functional.kube.conftest import node_pool
from tests.realk8s.fixtures import TestCluster

REPO = Path(__file__).resolve().parents[2]
SECRETS = Resource("", "v1", "secrets", "Secret", True)
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(str(REPO / p) for p in ("functions", ".", "agent"))}


def test_rbac_decides_what_each_identity_may_do(cluster: TestCluster) -> None:
    assert cluster.kube.list_items(SECRETS, namespace="kube-system") is not None  # admin: system:masters
    kubelet = cluster.kube_as(KUBELET)
    assert kubelet.list_items(PODS) is not None  # the system:node role
    with pytest.raises(Forbidden, match='cannot list resource "nodepools"'):
        kubelet.list_items(NODE_POOLS)
    impersonator = cluster.kube_as(IMPERSONATOR)
    with pytest.raises(Forbidden, match="nodeflow-test-impersonator"):
        impersonator.list_items(PODS, namespace=cluster.namespace)
    ClientImpersonation.install()
    try:
        with acting_as(Acting("someone", ("system:masters",))):
            assert impersonator.list_items(PODS, namespace=cluster.namespace) == []
        with acting_as(Acting("nobody", ("system:authenticated",))), pytest.raises(Forbidden, match='"nobody"'):
            impersonator.list_items(PODS, namespace=cluster.namespace)
    finally:
        ClientImpersonation.uninstall()


def test_nodeflows_crds_are_served_with_their_schema(cluster: TestCluster) -> None:
    pool = node_pool(cluster.name("pool"))
    created = cluster.kube.create(NODE_POOLS, pool)
    assert created["spec"]["disruption"]["consolidateAfter"] == "0s"  # a schema default applied by the server


def test_kubectl_works_against_it(cluster: TestCluster) -> None:
    kubectl = cluster.plane.binaries.kubectl
    assert kubectl is not None
    run = [str(kubectl), "--kubeconfig", str(cluster.plane.kubeconfig), "-n", cluster.namespace]
    made = subprocess.run([*run, "create", "configmap", "c", "--from-literal=a=b"], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr  # a protobuf request
    can = subprocess.run(
        [*run, "auth", "can-i", "create", "nodes", "--as=system:node:x", "--as-group=system:nodes"],
        capture_output=True,
        text=True,
    )
    assert can.stdout.strip() == "yes"


# --- leaving nothing behind ----------------------------------------------------------------------------------

OWNER = textwrap.dedent(
    """
    import json, sys, time
    from sandbox.controlplane import ControlPlane
    plane = ControlPlane().start()
    print(json.dumps({"pids": {n: c.pid for n, c in plane.processes.items()}, "ports": plane.ports,
                      "workdir": str(plane.workdir)}), flush=True)
    time.sleep(600)
    """
)


def _dead(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")  # a zombie waiting for its new parent to reap it runs no more


def _start_owner(how: str) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    if how == "cli":
        args = [sys.executable, "-m", "sandbox.controlplane", "--no-controllers"]
    else:
        args = [sys.executable, "-c", OWNER]
    proc = subprocess.Popen(args, cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    info: dict[str, Any] = {}
    for line in proc.stdout:
        if line.startswith("{"):
            info = json.loads(line)
        elif line.startswith("kubeconfig: "):
            info["workdir"] = str(Path(line.split(": ", 1)[1].strip()).parent.parent)
        elif line.startswith(("pids: ", "ports: ")):
            key, _, values = line.strip().partition(": ")
            info[key] = {k: int(v) for k, v in (item.split("=") for item in values.split())}
        if line.startswith(("Ctrl-C", "{")):
            break
    assert info.get("pids"), f"the owner did not start a control plane (exit {proc.poll()})"
    return proc, info


def _assert_gone(info: dict[str, Any], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(_dead(pid) for pid in info["pids"].values()) and all(port_is_free(p) for p in info["ports"].values()):
            return
        time.sleep(0.1)
    alive = {n: p for n, p in info["pids"].items() if not _dead(p)}
    taken = {n: p for n, p in info["ports"].items() if not port_is_free(p)}
    raise AssertionError(f"left behind: processes {alive}, ports {taken}")


@pytest.mark.parametrize(
    ("how", "sig"),
    [("cli", signal.SIGINT), ("library", signal.SIGTERM), ("library", signal.SIGKILL)],
    ids=["ctrl-c-the-cli", "sigterm-a-library-user", "kill-9-a-library-user"],
)
def test_whatever_ends_the_owner_nothing_is_left_behind(how: str, sig: signal.Signals) -> None:
    proc, info = _start_owner(how)
    assert set(info["pids"]) == {"etcd", "kube-apiserver"}
    assert not any(port_is_free(p) for p in info["ports"].values())
    proc.send_signal(sig)
    code = proc.wait(30)
    _assert_gone(info)
    workdir = Path(info["workdir"])
    if sig == signal.SIGKILL:
        assert code == -signal.SIGKILL
        assert workdir.exists()  # the owner could not remove it ...
        assert workdir in sweep_orphans(workdir.parent)  # ... the next control plane does
    else:
        assert code == (0 if how == "cli" else -sig)
    assert not workdir.exists()


FAILING = textwrap.dedent(
    """
    import json
    from tests.realk8s.fixtures import control_plane  # noqa: F401

    def test_that_fails(control_plane):
        info = {"pids": {n: c.pid for n, c in control_plane.processes.items()}, "ports": control_plane.ports,
                "workdir": str(control_plane.workdir)}
        print("INFO " + json.dumps(info), flush=True)
        raise AssertionError("failing on purpose")
    """
)


def test_a_failing_test_leaves_nothing_behind(tmp_path: Path) -> None:
    (tmp_path / "test_failing.py").write_text(FAILING)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-n", "0", str(tmp_path)],
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 1, run.stdout[-2000:]
    assert "failing on purpose" in run.stdout
    info = json.loads(next(line for line in run.stdout.splitlines() if line.startswith("INFO "))[5:])
    assert set(info["pids"]) == {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}
    _assert_gone(info, timeout=1.0)
    assert not Path(info["workdir"]).exists()


def test_a_port_taken_between_its_choice_and_its_use_means_another_try(monkeypatch: pytest.MonkeyPatch) -> None:
    from sandbox.controlplane import launcher

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        real = launcher.free_ports
        answers = [[taken.getsockname()[1], *real(2)]]  # etcd's client port is someone else's
        monkeypatch.setattr(launcher, "free_ports", lambda n: answers.pop() if answers else real(n))
        logs: list[str] = []
        plane = launcher.ControlPlane(crds=[], log=logs.append).start()
        try:
            assert plane.ports["etcd"] != taken.getsockname()[1]
            assert any("a port was taken meanwhile" in m and "address already in use" in m for m in logs)
        finally:
            plane.stop()
