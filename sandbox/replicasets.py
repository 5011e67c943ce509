"""A stand-in for the ReplicaSet controller and kube-scheduler's "no fit" verdict: pods owned by a
ReplicaSet that disappear (evicted, deleted) are replaced by new pods from the same template, which
start Pending with ``PodScheduled=False/Unschedulable``. With it, a drained node's pods come back as
pending pods: the simulated scheduler (sandbox/scheduler.py) binds them to a node they fit when its
``place_pending`` is on, else the agent and the provisioner take it from there.
"""

from __future__ import annotations

import copy
import secrets
from dataclasses import dataclass
from typing import Any

from nodeflow.kube.client import PODS, KubeClient
from sandbox.background import BackgroundLoop

__all__ = ["SimulatedReplicaSets"]

_UNSCHEDULABLE = {
    "type": "PodScheduled",
    "status": "False",
    "reason": "Unschedulable",
    "message": "0/0 nodes are available: no node fits the pod",
}


@dataclass
class _Owned:
    namespace: str
    replicas: int
    template: dict[str, Any]


def _owner_uid(pod: dict[str, Any]) -> str | None:
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == "ReplicaSet":
            return str(ref.get("uid"))
    return None


class SimulatedReplicaSets(BackgroundLoop):
    def __init__(self, kube: KubeClient) -> None:
        super().__init__("replicasets")
        self.kube = kube
        self.owned: dict[str, _Owned] = {}
        self.created: list[str] = []  # "namespace/name" of replacement pods

    def track_existing(self) -> SimulatedReplicaSets:
        """Keep the current number of pods of every ReplicaSet (the desired replicas); ReplicaSets already
        tracked keep their desired replicas (so it can be called again for ReplicaSets created since)."""
        found: dict[str, _Owned] = {}
        for pod in self.kube.list_items(PODS):
            uid = _owner_uid(pod)
            if uid is None or uid in self.owned or (pod.get("metadata") or {}).get("deletionTimestamp"):
                continue
            meta = pod["metadata"]
            entry = found.get(uid)
            if entry is None:
                template = copy.deepcopy(pod)
                template["spec"].pop("nodeName", None)
                found[uid] = _Owned(meta.get("namespace", "default"), 1, template)
            else:
                entry.replicas += 1
        self.owned.update(found)
        return self

    def scale(self, namespace: str, prefix: str, replicas: int) -> list[str]:
        """Scale the ReplicaSet whose pods are named ``prefix-...`` to ``replicas``: the newest extra pods
        are deleted (as the controller does); returns their names."""
        pods = [
            p
            for p in self.kube.list_items(PODS, namespace=namespace)
            if p["metadata"]["name"].startswith(f"{prefix}-") and not p["metadata"].get("deletionTimestamp")
        ]
        uid = next((u for u in (_owner_uid(p) for p in pods) if u is not None), None)
        if uid is None or uid not in self.owned:
            return []
        self.owned[uid].replicas = replicas
        pods.sort(key=lambda p: (p["metadata"].get("creationTimestamp", ""), p["metadata"]["name"]), reverse=True)
        gone = [p["metadata"]["name"] for p in pods[: max(0, len(pods) - replicas)]]
        for name in gone:
            self.kube.delete(PODS, name, namespace)
        return gone

    def step(self) -> int:
        live: dict[str, int] = {}
        for pod in self.kube.list_items(PODS):
            uid = _owner_uid(pod)
            if uid is not None and not (pod.get("metadata") or {}).get("deletionTimestamp"):
                live[uid] = live.get(uid, 0) + 1
        made = 0
        for uid, owned in self.owned.items():
            for _ in range(owned.replicas - live.get(uid, 0)):
                self._create(owned)
                made += 1
        return made

    def _create(self, owned: _Owned) -> None:
        body = copy.deepcopy(owned.template)
        meta = body["metadata"]
        base = meta["name"].rsplit("-", 1)[0]
        meta["name"] = f"{base}-{secrets.token_hex(3)[:5]}"
        for key in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "generation"):
            meta.pop(key, None)
        body.pop("status", None)
        self.kube.create(PODS, body, namespace=owned.namespace)
        self.kube.patch(
            PODS,
            meta["name"],
            {"status": {"conditions": [_UNSCHEDULABLE]}},
            namespace=owned.namespace,
            subresource="status",
        )
        self.created.append(f"{owned.namespace}/{meta['name']}")
