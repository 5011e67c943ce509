"""``make demo KEEP=1``: after the scenario, keep the local cluster up for kubectl until interrupted.

The API server, the moto server and the Lambdas on their triggers (SQS event sources, Step Functions, the webhook's
Function URL; garbage collection every ``GC_SECONDS``, as its schedule runs it in AWS) stay as the scenario left
them; a fresh agent watches the API server again, so pods created with kubectl are provisioned as in the scenario:
the simulated scheduler binds those that fit a node, and the ones that fit none are marked Unschedulable
(``mark_unschedulable``), as kube-scheduler does. A kubeconfig for the API
server is written and announced on a line ``KUBECONFIG=<path>``; SIGINT or SIGTERM ends the wait (the caller then
tears everything down).

The API server enforces the CRDs' CEL rules (x-kubernetes-validations) as a real one does: ``kubectl create`` of an
invalid NodePool or EC2NodeClass is refused with the rule's message.

kubectl sends no credentials to a plain-http server, so its requests come as ``system:anonymous``; the demo cluster
lets that user do anything (``KUBECTL_ACCESS``, added to the RBAC the server enforces), as a throwaway local
cluster may.
"""

from __future__ import annotations

import signal
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

#: how often the kept cluster runs garbage collection (every 2 minutes in AWS): stale nominations are pruned,
#: NodeClaims whose instance is gone deleted, EC2NodeClass and NodePool status kept current
GC_SECONDS = 30.0

#: granted before the kubeconfig is announced: kubectl (anonymous over http) may do anything in the demo cluster
KUBECTL_ACCESS: list[dict[str, Any]] = [
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "nodeflow-demo-kubectl"},
        "rules": [
            {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
            {"nonResourceURLs": ["*"], "verbs": ["*"]},
        ],
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "nodeflow-demo-kubectl"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "nodeflow-demo-kubectl"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "system:anonymous"}],
    },
]


def grant_kubectl_access(kube: Any) -> None:
    """Add ``KUBECTL_ACCESS`` to the API server's RBAC authorizer (when it enforces RBAC)."""
    from tests.kubeapi.rbac import Authorizer

    if kube.rbac is None:
        return
    extra = Authorizer(KUBECTL_ACCESS)
    kube.rbac.roles.update(extra.roles)
    kube.rbac.bindings.extend(extra.bindings)


def mark_unschedulable(kube: Any, now: datetime, after: float = 1.0) -> list[str]:
    """kube-scheduler's part for pods created with kubectl: a pending, unbound pod that no node took within ``after``
    seconds (the simulated scheduler places the ones that fit) gets PodScheduled=False/Unschedulable, which the agent
    forwards to the provisioner. Returns the pods marked (namespace/name)."""
    import kubernetes.client

    marked: list[str] = []
    api = kube.api_client()
    try:
        core = kubernetes.client.CoreV1Api(api)
        for pod in kube.objects("v1", "Pod"):
            meta, status = pod["metadata"], pod.get("status") or {}
            created = datetime.strptime(meta["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
            if (
                (pod.get("spec") or {}).get("nodeName")
                or meta.get("deletionTimestamp")
                or status.get("phase", "Pending") != "Pending"
                or any(c.get("type") == "PodScheduled" for c in status.get("conditions") or [])
                or (now - created).total_seconds() < after
            ):
                continue
            condition = {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "no node fits the pod (nodeflow demo scheduler)",
                "lastTransitionTime": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
            core.patch_namespaced_pod_status(meta["name"], meta["namespace"], {"status": {"conditions": [condition]}})
            marked.append(f"{meta['namespace']}/{meta['name']}")
    finally:
        api.close()
    return marked


def keep_running(local: Any, out: TextIO, kubeconfig: str | None = None) -> None:
    """Announce ``KUBECONFIG=<path>`` and block until SIGINT/SIGTERM (must run in the main thread)."""
    from sandbox.agent import AgentProcess

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    tmp = None
    if kubeconfig is None:
        tmp = tempfile.TemporaryDirectory(prefix="nodeflow-demo-")
        kubeconfig = str(Path(tmp.name) / "kubeconfig")
    agent = AgentProcess(local.agent_env(BATCH_MAX_WAIT="0.1")).start()
    try:
        agent.wait_ready()
        grant_kubectl_access(local.kube_server)
        local.kube_server.cluster.cel_validation = True  # the default; kubectl users get a real server's refusals
        path = local.kube_server.write_kubeconfig(kubeconfig)
        print(
            "\nKEEP=1: the cluster stays up (API server, moto, Lambdas on their triggers, agent); try\n"
            f"  kubectl --kubeconfig {path} get nodepools,nodeclaims,ec2nodeclasses,nodes\n"
            "Ctrl-C (SIGINT) or SIGTERM stops it.",
            file=out,
        )
        print(f"KUBECONFIG={path}", file=out, flush=True)
        local.scheduler.place_pending = True  # pods that fit existing nodes are bound to them
        collected = time.monotonic()
        while not stop.wait(0.5):
            for key in mark_unschedulable(local.kube_server, datetime.now(UTC)):
                print(f"pod {key}: Unschedulable (no node fits) - the agent forwards it to the provisioner", file=out)
            if time.monotonic() - collected >= GC_SECONDS:  # EventBridge Scheduler's part (moto never fires it)
                collected = time.monotonic()
                try:
                    local.collect_garbage()
                except Exception as exc:  # the next run tries again; the kept cluster stays up
                    print(f"garbage collection failed: {exc}", file=out)
            out.flush()
        print("interrupted: stopping the cluster", file=out, flush=True)
    finally:
        agent.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if tmp is not None:
            tmp.cleanup()
