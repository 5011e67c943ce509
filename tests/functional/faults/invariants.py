"""The invariants every fault scenario must leave standing, checked on the whole local world (moto's EC2 and
Step Functions, the real control plane), not on what a scenario thinks it did:

- ``instance-without-nodeclaim``: every pending or running instance nodeflow launched (tagged for the cluster and
  a NodePool) is named by the providerID of a NodeClaim (nothing paid for that nodeflow does not account for);
- ``nodeclaim-without-node``: no NodeClaim older than ``claim_ttl_seconds`` is without its Node (by
  ``status.nodeName`` or providerID);
- ``pod-stranded``: every pending pod (PodScheduled=False/Unschedulable, no node) is either placed — nominated
  to a NodeClaim that exists — or was told why not by nodeflow (a FailedScheduling Event of source ``karpenter``:
  kube-scheduler's own FailedScheduling says only that no node fits yet);
- ``terminate-history``: no terminate execution has more history events than ``max_terminate_events``
  (Step Functions fails an execution at 25,000);
- ``execution-running``: no workflow execution is still running when the world is checked;
- ``disruption-round``: a disruption round still runs (the Lambda answers without an error).

``settle`` waits until the world is quiet (every execution ended, pods placed or reported) before checking.
``tests/functional/faults/test_invariants.py`` shows the checker fails on a deliberately broken world.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from nodeflow.api import labels as wk
from nodeflow.lifecycle.termination import max_history_events
from sandbox.nodeflow import LocalNodeflow
from sandbox.stepfunctions import wait_for_execution

__all__ = ["Violation", "check_world", "history_length", "rules", "settle"]

CLAIMS = ("karpenter.sh/v1", "NodeClaim")
NODEFLOW_COMPONENT = "karpenter"  # the source of the Events nodeflow records (nodeflow.kube.events)


@dataclass(frozen=True)
class Violation:
    rule: str
    subject: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.rule}: {self.subject}" + (f" ({self.detail})" if self.detail else "")


def _time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def _executions(local: LocalNodeflow) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for arn in (local.launch_arn, local.terminate_arn, local.replace_arn):
        kwargs: dict[str, Any] = {"stateMachineArn": arn}
        while True:
            page = local.clients.sfn.list_executions(**kwargs)
            out.extend(page.get("executions", []))
            if not page.get("nextToken"):
                break
            kwargs["nextToken"] = page["nextToken"]
    return out


def _pending(pod: dict[str, Any]) -> bool:
    if (pod.get("spec") or {}).get("nodeName") or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):
        return False
    scheduled = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), {})
    return scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable"


def _stranded(local: LocalNodeflow) -> list[Violation]:
    kube = local.kube_server
    nominated: set[str] = set()
    for claim in kube.objects(*CLAIMS):
        raw = ((claim.get("metadata") or {}).get("annotations") or {}).get(wk.ANNOTATION_NOMINATED_PODS)
        nominated.update(json.loads(raw) if raw else [])
    told = {
        (e["involvedObject"].get("namespace"), e["involvedObject"].get("name"))
        for e in kube.objects("v1", "Event")
        if e.get("reason") == "FailedScheduling"
        and e["involvedObject"].get("kind") == "Pod"
        and (e.get("source") or {}).get("component") == NODEFLOW_COMPONENT
    }
    out = []
    for pod in kube.objects("v1", "Pod"):
        meta = pod["metadata"]
        key = f"{meta.get('namespace', 'default')}/{meta['name']}"
        if _pending(pod) and key not in nominated and (meta.get("namespace", "default"), meta["name"]) not in told:
            out.append(Violation("pod-stranded", key, "pending, not nominated to a NodeClaim, no FailedScheduling"))
    return out


def settle(local: LocalNodeflow, timeout: float = 60.0) -> None:
    """Wait until every workflow execution has ended and every pending pod is placed or reported."""
    deadline = time.monotonic() + timeout
    while True:
        running = [e for e in _executions(local) if e["status"] == "RUNNING"]
        for e in running:
            wait_for_execution(local.clients.sfn, e["executionArn"], timeout=max(0.1, deadline - time.monotonic()))
        if not [e for e in _executions(local) if e["status"] == "RUNNING"] and not _stranded(local):
            return
        if time.monotonic() >= deadline:
            return  # the checker reports what is left
        time.sleep(0.1)


def check_world(
    local: LocalNodeflow,
    *,
    claim_ttl_seconds: float = 0.0,
    max_terminate_events: int | None = None,
    run_round: bool = True,
) -> list[Violation]:
    """Every invariant violated now (empty: the world is sound)."""
    kube = local.kube_server
    now = datetime.now(UTC)
    out: list[Violation] = []
    claims = kube.objects(*CLAIMS)
    nodes = kube.objects("v1", "Node")

    named = {
        (c.get("status") or {}).get("providerID", "").rsplit("/", 1)[-1]
        for c in claims
        if (c.get("status") or {}).get("providerID")
    }
    for inst in local.instances(("pending", "running")):
        tags = {t["Key"]: t["Value"] for t in inst.get("Tags") or []}
        if wk.LABEL_NODEPOOL in tags and inst["InstanceId"] not in named:  # nodeflow's (a NodePool's) instances
            out.append(Violation("instance-without-nodeclaim", inst["InstanceId"], tags.get(wk.LABEL_NODECLAIM, "")))

    node_names = {n["metadata"]["name"] for n in nodes}
    providers = {(n.get("spec") or {}).get("providerID") for n in nodes} - {None}
    for claim in claims:
        status = claim.get("status") or {}
        created = _time(claim["metadata"].get("creationTimestamp"))
        old = created is None or (now - created).total_seconds() >= claim_ttl_seconds
        if old and status.get("nodeName") not in node_names and status.get("providerID") not in providers:
            out.append(Violation("nodeclaim-without-node", claim["metadata"]["name"]))

    out.extend(_stranded(local))

    bound = max_history_events() if max_terminate_events is None else max_terminate_events
    for e in _executions(local):
        if e["status"] == "RUNNING":
            out.append(Violation("execution-running", e["name"], e["stateMachineArn"].rsplit(":", 1)[-1]))
        if e["stateMachineArn"] == local.terminate_arn:
            events = history_length(local, e["executionArn"])
            if events > bound:
                out.append(Violation("terminate-history", e["name"], f"{events} events > {bound}"))

    if run_round:
        try:
            local.invoke("disruption", {"source": "aws.scheduler", "detail-type": "Scheduled Event"})
        except RuntimeError as exc:
            out.append(Violation("disruption-round", "disruption", str(exc)[:300]))
    return out


def history_length(local: LocalNodeflow, arn: str) -> int:
    total, kwargs = 0, {"executionArn": arn, "maxResults": 1000}
    while True:
        page = local.clients.sfn.get_execution_history(**kwargs)
        total += len(page.get("events", []))
        if not page.get("nextToken"):
            return total
        kwargs["nextToken"] = page["nextToken"]


def rules(violations: Iterable[Violation]) -> set[str]:
    return {v.rule for v in violations}
