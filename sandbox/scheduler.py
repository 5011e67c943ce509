"""A stand-in for kube-scheduler's part of the story: once a NodeClaim is initialized, the pods
nodeflow nominated to it are bound to its node (``pods/binding``) and marked Running.

Without it, pending pods would stay pending forever in the local setup and every later batch
would see them again.
"""

from __future__ import annotations

import json
from typing import Any

from nodeflow.api import labels as wk
from nodeflow.kube import errors as kerr
from nodeflow.kube.client import NODE_CLAIMS, PODS, KubeClient
from sandbox.background import BackgroundLoop

__all__ = ["SimulatedScheduler"]


class SimulatedScheduler(BackgroundLoop):
    def __init__(self, kube: KubeClient) -> None:
        super().__init__("scheduler")
        self.kube = kube
        self.bound: list[tuple[str, str]] = []  # (pod key, node)

    def step(self) -> int:
        done = 0
        for claim in self.kube.list_items(NODE_CLAIMS):
            status = claim.get("status") or {}
            node = status.get("nodeName")
            ready = any(
                c.get("type") == "Initialized" and c.get("status") == "True" for c in status.get("conditions", [])
            )
            if not node or not ready or (claim.get("metadata") or {}).get("deletionTimestamp"):
                continue
            keys = json.loads(
                ((claim.get("metadata") or {}).get("annotations") or {}).get(wk.ANNOTATION_NOMINATED_PODS, "[]")
            )
            for key in keys:
                namespace, _, name = key.partition("/")
                if self._bind(namespace, name, node):
                    self.bound.append((key, node))
                    done += 1
        return done

    def _bind(self, namespace: str, name: str, node: str) -> bool:
        try:
            pod = self.kube.get(PODS, name, namespace)
        except kerr.NotFound:
            return False
        if (pod.get("spec") or {}).get("nodeName"):
            return False
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            self.kube.request("POST", PODS.path(name, namespace, "binding"), body=body)
            self.kube.patch(PODS, name, {"status": {"phase": "Running"}}, namespace=namespace, subresource="status")
        except kerr.Conflict:
            return False
        return True
