"""Workloads for tests on the real control plane: real ReplicaSets whose pods the real kube-scheduler finds no
node for (what nodeflow provisions for), and waits for what the real controllers do with them.

On the old imitation (tests/kubeapi) a test seeded pods with a made-up owner and a ``PodScheduled=False`` status. On a real cluster the
garbage collector deletes pods whose owner does not exist, and kube-scheduler writes (and rewrites) their
``PodScheduled`` condition itself; so the pods come from a ReplicaSet, and a test waits for the scheduler's verdict
before it provisions (as the agent only reports pods once the scheduler gave up on them).
"""

from __future__ import annotations

from typing import Any

from sandbox.controlplane.facade import RealKubeAPI, wait_for

__all__ = [
    "NO_SCHEDULER",
    "TEMPLATE_HASH",
    "held",
    "held_pods",
    "pod_keys",
    "replica_set",
    "running",
    "scale",
    "unschedulable",
]

TEMPLATE_HASH = "7d4b9c"
#: ``spec.schedulerName`` of pods whose scheduling status a test seeds itself: no scheduler of that name runs, so
#: kube-scheduler neither binds them nor rewrites their ``PodScheduled`` condition (nodeflow, as Karpenter, looks at
#: the condition, not at the scheduler's name).
NO_SCHEDULER = "nodeflow-test-no-scheduler"


def replica_set(
    name: str, replicas: int, cpu: str = "1", memory: str = "2Gi", *, namespace: str = "default", **spec: Any
) -> dict[str, Any]:
    """A ReplicaSet ``<name>-7d4b9c`` of ``replicas`` pods labelled ``app=<name>`` requesting ``cpu``/``memory``
    (``spec``: more pod spec fields)."""
    labels = {"app": name, "pod-template-hash": TEMPLATE_HASH}
    container = {"name": "app", "image": "app:1", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": f"{name}-{TEMPLATE_HASH}", "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container], **spec}},
        },
    }


def _scheduled(pod: dict[str, Any]) -> tuple[str, str] | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled":
            return str(c.get("status")), str(c.get("reason") or "")
    return None


def _pods(kube: RealKubeAPI, name: str, namespace: str) -> list[dict[str, Any]]:
    return kube.list_items("v1", "Pod", namespace, label_selector=f"app={name}")


def pod_keys(pods: list[dict[str, Any]]) -> list[str]:
    return sorted(f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods)


def unschedulable(
    kube: RealKubeAPI, name: str, count: int, *, namespace: str = "default", timeout: float = 30.0
) -> list[str]:
    """Wait until ``count`` pods of workload ``name`` exist and kube-scheduler marked each
    ``PodScheduled=False/Unschedulable``; their keys."""

    def check() -> list[str] | None:
        pods = _pods(kube, name, namespace)
        done = [p for p in pods if _scheduled(p) == ("False", "Unschedulable")]
        return pod_keys(done) if len(pods) == count == len(done) else None

    return wait_for(f"{count} unschedulable pods of {namespace}/{name}", check, timeout)


def running(
    kube: RealKubeAPI, name: str, count: int, *, namespace: str = "default", timeout: float = 30.0
) -> list[dict[str, Any]]:
    """Wait until ``count`` pods of workload ``name`` are bound and Running (kube-scheduler bound them, a
    simulated kubelet runs them); the pods."""

    def check() -> list[dict[str, Any]] | None:
        pods = _pods(kube, name, namespace)
        up = [p for p in pods if p["spec"].get("nodeName") and (p.get("status") or {}).get("phase") == "Running"]
        return pods if len(pods) == count == len(up) else None

    try:
        return wait_for(f"{count} running pods of {namespace}/{name}", check, timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; they are: {_describe(_pods(kube, name, namespace))}") from None


def _describe(pods: list[dict[str, Any]]) -> str:
    """Each pod's node, phase and scheduling verdict (for a wait that timed out)."""
    out = []
    for p in pods:
        scheduled: dict[str, Any] = next(
            (c for c in (p.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"), {}
        )
        out.append(
            f"{p['metadata']['name']} on {p['spec'].get('nodeName') or '-'} {(p.get('status') or {}).get('phase')} "
            f"{scheduled.get('status')}/{scheduled.get('reason')}: {scheduled.get('message')}"
        )
    return "; ".join(out)


def scale(kube: RealKubeAPI, name: str, replicas: int, *, namespace: str = "default", timeout: float = 90.0) -> None:
    """Scale workload ``name``'s ReplicaSet (as ``kubectl scale`` on its Deployment would) and wait until it has
    ``replicas`` pods: the ReplicaSet controller deletes the others, their kubelet confirms, they are gone."""
    kube.patch("apps/v1", "ReplicaSet", f"{name}-{TEMPLATE_HASH}", {"spec": {"replicas": replicas}}, namespace)
    try:
        wait_for(
            f"{namespace}/{name} scaled to {replicas}",
            lambda: len(_pods(kube, name, namespace)) == replicas or None,
            timeout,
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}; they are: {_describe(_pods(kube, name, namespace))}") from None


def held(pod: dict[str, Any]) -> dict[str, Any]:
    """A pending pod seeded for a test (``PodScheduled=False/Unschedulable`` in its status), made to stay so on a
    real cluster: no owner (the garbage collector deletes a pod whose owner does not exist) and no scheduler runs
    for it (``NO_SCHEDULER``: kube-scheduler neither binds it nor rewrites its condition). For tests about what
    nodeflow decides for given pods (policies, pauses, the decision log), where names matter and no pod is meant to
    run. Create it with ``RealKubeAPI.create`` (or ``LocalNodeflow.apply``), which keeps the status."""
    meta = {k: v for k, v in pod["metadata"].items() if k != "ownerReferences"}
    return {**pod, "metadata": meta, "spec": {**pod["spec"], "schedulerName": NO_SCHEDULER}}


def held_pods(
    name: str, count: int, cpu: str = "1", memory: str = "2Gi", *, namespace: str = "default", **spec: Any
) -> list[dict[str, Any]]:
    """``count`` pods ``<name>-7d4b9c-0000i`` (label ``app=<name>``, ``spec``: more pod spec fields), ``held``."""
    labels = {"app": name, "pod-template-hash": TEMPLATE_HASH}
    container = {"name": "app", "image": "app:1", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
    status = {
        "phase": "Pending",
        "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/0 nodes available"}
        ],
    }
    return [
        held(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"{name}-{TEMPLATE_HASH}-{i:05d}", "namespace": namespace, "labels": labels},
                "spec": {"containers": [container], **spec},
                "status": status,
            }
        )
        for i in range(count)
    ]
