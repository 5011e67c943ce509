"""The terminate workflow for real: moto's Step Functions engine runs statemachines/terminate.asl.json with the
handlers in-process (``LocalNodeflow``), against the test Kubernetes API server. Nodes come up through the
normal provisioning path; the pods on them are bound by the simulated scheduler or seeded."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nodeflow.kube.client import PODS, KubeClient
from sandbox.nodeflow import LocalNodeflow
from tests.functional.lifecycle.conftest import make_local, pending_pods

__all__ = ["Launched", "bound_pod", "eventually", "launch", "make_local"]


@dataclass(frozen=True)
class Launched:
    claim: str
    node: str
    instance_id: str
    pods: list[str]  # names of the pods the scheduler bound (namespace default)


def kube(local: LocalNodeflow) -> KubeClient:
    return KubeClient(local.kube_server.api_client())


def eventually(check: Callable[[], Any], timeout: float = 20.0, interval: float = 0.02, what: str = "") -> Any:
    """Poll ``check`` until it returns something truthy (returned), or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what or check}")
        time.sleep(interval)


def ready(local: LocalNodeflow, name: str, namespace: str = "default") -> None:
    """Mark a pod Running and Ready (what its kubelet would report)."""
    status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    kube(local).patch(PODS, name, {"status": status}, namespace=namespace, subresource="status")


def launch(local: LocalNodeflow, app: str, replicas: int = 1, **spec: Any) -> Launched:
    """Provision ``replicas`` pods of ``app`` through the normal path; wait until they run, Ready, on one node."""
    pods = pending_pods(app, replicas, cpu="500m", memory="512Mi", **spec)
    local.apply(pods)
    local.send_pending([f"default/{p['metadata']['name']}" for p in pods])
    created = local.provision()["result"]["nodeClaimsCreated"]
    assert len(created) == 1, created
    done = local.wait_for_executions()
    assert [d["status"] for d in done if d["name"] == created[0]] == ["SUCCEEDED"]
    claim = local.kube_server.get("karpenter.sh/v1", "NodeClaim", created[0])
    node = claim["status"]["nodeName"]
    names = [p["metadata"]["name"] for p in pods]

    def bound() -> bool:
        return all(
            (local.kube_server.get("v1", "Pod", n, "default").get("spec") or {}).get("nodeName") == node for n in names
        )

    eventually(bound, what="the scheduler to bind the pods")
    for n in names:
        ready(local, n)
    return Launched(created[0], node, claim["status"]["providerID"].rsplit("/", 1)[-1], names)


def bound_pod(
    name: str,
    node: str,
    *,
    namespace: str = "default",
    owner: str | None = "ReplicaSet",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    phase: str = "Running",
    **spec: Any,
) -> dict[str, Any]:
    """A pod already running on ``node`` (seeded as the API server would hold it)."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {"app": name}}
    if annotations:
        meta["annotations"] = annotations
    if owner:
        meta["ownerReferences"] = [
            {
                "apiVersion": "v1" if owner == "Node" else "apps/v1",
                "kind": owner,
                "name": f"{name}-owner",
                "uid": f"uid-{name}-owner",
                "controller": True,
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": spec.pop("terminationGracePeriodSeconds", 30),
            "containers": [{"name": "app", "image": "app:1", "resources": {"requests": {"cpu": "10m"}}}],
            **spec,
        },
        "status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "True" if phase == "Running" else "False"}],
        },
    }


def volume_agent(node: str, attached: tuple[str, ...] = ("pv-logs",)) -> list[dict[str, Any]]:
    """A DaemonSet pod on ``node`` (it tolerates every taint) using the PVC ``logs`` (bound to ``pv-logs``),
    and a CSI VolumeAttachment of each of ``attached`` to the node."""
    return [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "logs", "namespace": "default"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "volumeName": "pv-logs",
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
        bound_pod(
            "log-agent",
            node,
            owner="DaemonSet",
            tolerations=[{"operator": "Exists"}],
            volumes=[{"name": "logs", "persistentVolumeClaim": {"claimName": "logs"}}],
        ),
        *(
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "VolumeAttachment",
                "metadata": {"name": f"csi-{pv}"},
                "spec": {"attacher": "ebs.csi.aws.com", "nodeName": node, "source": {"persistentVolumeName": pv}},
            }
            for pv in attached
        ),
    ]


@pytest.fixture
def local(make_local: Callable[..., LocalNodeflow]) -> LocalNodeflow:
    return make_local()


@pytest.fixture
def count_ec2() -> Iterator[Callable[[str], Callable[[], int]]]:
    """``count_ec2("TerminateInstances")`` -> a function returning how often the handlers called it since."""
    from nodeflow.handlers import runtime

    hooks: list[tuple[Any, str, Any]] = []

    def count(operation: str) -> Callable[[], int]:
        calls: list[int] = []
        client = runtime.runtime().client("ec2")
        event = f"before-call.ec2.{operation}"

        def hook(**_: Any) -> None:
            calls.append(1)

        client.meta.events.register(event, hook)
        hooks.append((client, event, hook))
        return lambda: len(calls)

    yield count
    for client, event, hook in hooks:
        client.meta.events.unregister(event, hook)


def fast_clock(local: LocalNodeflow) -> None:
    """Make the handlers' clock run as fast as the scaled Step Functions waits (1 real second is
    1 / wait_scale seconds for them), from now on."""
    from nodeflow.handlers import runtime

    anchor, start = datetime.now(UTC), time.monotonic()
    factor = 1.0 / local.wait_scale
    runtime.runtime().clock = lambda: anchor + timedelta(seconds=(time.monotonic() - start) * factor)
