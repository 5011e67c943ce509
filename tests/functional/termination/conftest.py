"""The terminate workflow for real: moto's Step Functions engine runs statemachines/terminate.asl.json with the
handlers in-process (``LocalNodeflow``), against the real control plane (kube-apiserver, etcd, the controller-manager
and kube-scheduler; simulated kubelets). Nodes come up through the normal provisioning path for a real ReplicaSet's
pods, which kube-scheduler binds to them; other pods on a node (DaemonSet, static, mirror, finished pods) are
created bound to it, owned by real controllers where they have an owner (the garbage collector deletes a pod whose
owner does not exist)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nodeflow.kube.client import DAEMON_SETS, PODS, KubeClient, Resource
from sandbox.controlplane.facade import RealKubeAPI, wait_for
from sandbox.nodeflow import LocalNodeflow
from tests.functional.lifecycle.conftest import make_local
from tests.realk8s.workloads import TEMPLATE_HASH, replica_set, running, unschedulable

__all__ = [
    "Launched",
    "Seed",
    "bound_pod",
    "eventually",
    "launch",
    "make_local",
    "replacement",
    "replacement_for_evicted",
    "scale",
    "seed",
]

REPLICA_SETS = Resource("apps", "v1", "replicasets", "ReplicaSet", True)


@pytest.fixture
def kube_server(real_kube: RealKubeAPI) -> RealKubeAPI:
    return real_kube


@dataclass(frozen=True)
class Launched:
    claim: str
    node: str
    instance_id: str
    pods: list[str]  # names of the ReplicaSet's pods kube-scheduler bound there (namespace default)


def kube(local: LocalNodeflow) -> KubeClient:
    return KubeClient(local.kube_server.api_client())


def eventually(check: Callable[[], Any], timeout: float = 30.0, interval: float = 0.02, what: str = "") -> Any:
    """Poll ``check`` until it returns something truthy (returned), or fail after ``timeout`` seconds."""
    return wait_for(what or str(check), check, timeout, interval)


def provision_for(local: LocalNodeflow, app: str, count: int) -> tuple[str, str]:
    """Wait until kube-scheduler found no node for ``count`` pods of ``app`` (its others may run), provision for
    them (one NodeClaim) and wait for its launch; (NodeClaim, Node)."""

    def waiting() -> bool:
        pods = local.kube_server.list_items("v1", "Pod", "default", label_selector=f"app={app}")
        return count == sum(
            1
            for p in pods
            if not p["spec"].get("nodeName")
            and any(
                c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
                for c in (p.get("status") or {}).get("conditions") or []
            )
        )

    wait_for(f"{count} unschedulable pods of {app}", waiting)
    local.send_pending([f"default/{app}"])
    created = local.provision()["result"]["nodeClaimsCreated"]
    assert len(created) == 1, created
    done = local.wait_for_executions()
    assert [d["status"] for d in done if d["name"] == created[0]] == ["SUCCEEDED"]
    claim = local.kube_server.get("karpenter.sh/v1", "NodeClaim", created[0])
    return created[0], claim["status"]["nodeName"]


def replacement(local: LocalNodeflow, app: str) -> str:
    """Scale ``app`` up by one while its node is tainted: a node is provisioned for the new pod, which runs there
    (waited for); that node's name."""
    current = local.kube_server.get("apps/v1", "ReplicaSet", f"{app}-{TEMPLATE_HASH}")["spec"]["replicas"]
    scale(local, app, current + 1)
    return replacement_for_evicted(local, app)


def replacement_for_evicted(local: LocalNodeflow, app: str) -> str:
    """Once a pod of ``app`` evicted from a tainted node was made again (its ReplicaSet) and has no node: a node is
    provisioned for it, where it runs (waited for); that node's name."""
    _, node = provision_for(local, app, 1)
    wait_for(
        f"a pod of {app} running on {node}",
        lambda: any(
            p["spec"].get("nodeName") == node and (p.get("status") or {}).get("phase") == "Running"
            for p in local.kube_server.list_items("v1", "Pod", "default", label_selector=f"app={app}")
        ),
    )
    return node


def launch(local: LocalNodeflow, app: str, replicas: int = 1, **spec: Any) -> Launched:
    """A ReplicaSet of ``replicas`` pods of ``app`` (``spec``: more pod spec fields) provisioned for through the
    normal path; waits until kube-scheduler bound them to the one new node and they run there."""
    local.apply([replica_set(app, replicas, "500m", "512Mi", **spec)])
    unschedulable(local.kube_server, app, replicas)
    name, node = provision_for(local, app, replicas)
    pods = running(local.kube_server, app, replicas)
    assert {p["spec"]["nodeName"] for p in pods} == {node}
    claim = local.kube_server.get("karpenter.sh/v1", "NodeClaim", name)
    return Launched(name, node, claim["status"]["providerID"].rsplit("/", 1)[-1], [p["metadata"]["name"] for p in pods])


def scale(local: LocalNodeflow, app: str, replicas: int) -> None:
    """Scale ``app``'s ReplicaSet (as ``kubectl scale`` does)."""
    local.kube_server.patch("apps/v1", "ReplicaSet", f"{app}-{TEMPLATE_HASH}", {"spec": {"replicas": replicas}})


@dataclass
class Seed:
    """A pod to create bound to a node (``seed``), and what owns it."""

    body: dict[str, Any]
    owner: str | None
    status: dict[str, Any] | None = None
    labels: dict[str, str] = field(default_factory=dict)


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
) -> Seed:
    """A pod on ``node`` owned by a real ``owner`` (``ReplicaSet``, ``DaemonSet``, ``Node``: a static pod's mirror,
    or None), created by ``seed``. A pod of ``phase`` Succeeded or Failed has finished (its kubelet said so)."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {"app": name}}
    if annotations:
        meta["annotations"] = annotations
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": spec.pop("terminationGracePeriodSeconds", 30),
            "containers": [{"name": "app", "image": "app:1", "resources": {"requests": {"cpu": "10m"}}}],
            **spec,
        },
    }
    status = None
    if phase != "Running":
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        done = {"exitCode": 0 if phase == "Succeeded" else 1, "startedAt": stamp, "finishedAt": stamp}
        status = {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted"}],
            "containerStatuses": [
                {
                    "name": "app",
                    "image": "app:1",
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"terminated": done},
                }
            ],
        }
    return Seed(body, owner, status)


def seed(local: LocalNodeflow, *seeds: Seed) -> dict[str, str]:
    """Create each pod bound to its node, owned as its ``Seed`` says: a real DaemonSet for that node (the DaemonSet
    controller makes the pod, named ``<name>-<suffix>``), or a real ReplicaSet of one replica that adopts it (the
    pod is created first, so the controller makes none of its own), or its Node (a mirror pod). Waits until each
    runs (or has finished). The pods' names -> the names they were seeded as."""
    server = local.kube_server
    admin = server.kube
    names: dict[str, str] = {}
    for s in seeds:
        meta, spec = s.body["metadata"], s.body["spec"]
        ns, name, node = meta["namespace"], meta["name"], spec["nodeName"]
        if s.owner in ("ReplicaSet", "DaemonSet"):
            meta["labels"] = {**meta["labels"], "owned-pod": name}
        elif s.owner == "Node":
            uid = server.get("v1", "Node", node)["metadata"]["uid"]
            meta["ownerReferences"] = [
                {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid, "controller": True}
            ]
        template_spec = {k: v for k, v in spec.items() if k != "nodeName"}
        owner: dict[str, Any] = {
            "metadata": {"name": name},
            "spec": {
                "selector": {"matchLabels": {"owned-pod": name}},
                "template": {"metadata": {"labels": meta["labels"]}, "spec": template_spec},
            },
        }
        if s.owner == "DaemonSet":
            template_spec["nodeSelector"] = {"kubernetes.io/hostname": node}
            admin.create(DAEMON_SETS, owner, ns)
        else:
            admin.create(PODS, s.body, namespace=ns)
        if s.owner == "ReplicaSet":
            owner["spec"]["replicas"] = 1
            admin.create(REPLICA_SETS, owner, ns)

        def runs(ns: str = ns, name: str = name, node: str = node, kind: str | None = s.owner) -> str | None:
            if kind == "DaemonSet":  # made by the controller, a moment after the DaemonSet
                pods = admin.list_items(PODS, namespace=ns, label_selector=f"owned-pod={name}")
            else:
                pods = [admin.get(PODS, name, ns)]
            for p in pods:
                owned = kind in (None, "Node") or p["metadata"].get("ownerReferences")
                if p["spec"].get("nodeName") == node and p["status"].get("phase") == "Running" and owned:
                    return str(p["metadata"]["name"])
            return None

        actual = wait_for(f"pod {name} running on {node}", runs)
        if s.status is not None:  # its containers ran, then exited
            admin.patch(PODS, actual, {"status": s.status}, namespace=ns, subresource="status")
        names[actual] = name
    return names


def volume_agent(local: LocalNodeflow, node: str, attached: tuple[str, ...] = ("pv-logs",)) -> None:
    """A DaemonSet pod on ``node`` (it tolerates every taint) using the PVC ``logs`` (bound to the EBS volume
    ``pv-logs``: kube-scheduler places no pod whose claim is unbound), and a CSI VolumeAttachment of each of
    ``attached`` to the node."""
    local.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": "pv-logs"},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-0logs"},
                    "claimRef": {"namespace": "default", "name": "logs"},
                },
            },
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
    )
    seed(
        local,
        bound_pod(
            "log-agent",
            node,
            owner="DaemonSet",
            tolerations=[{"operator": "Exists"}],
            volumes=[{"name": "logs", "persistentVolumeClaim": {"claimName": "logs"}}],
        ),
    )


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
