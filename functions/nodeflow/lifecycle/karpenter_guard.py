"""nodeflow holds still while a Karpenter controller runs in the cluster.

Two controllers acting on the same NodeClaims would launch twice and disrupt each other's decisions, and a cut-over
from Karpenter (docs/migration/from-karpenter.md) has both installed for a while. So, at the start of each run, the
provisioner, the disruption round, the interruption handler and garbage collection ask ``karpenter_guard``; while it
answers a ``Pause`` they launch nothing, disrupt nothing and terminate nothing, and carry on by themselves on the first
run after the controller is gone (Karpenter's Deployment scaled to zero; its leader-election Lease released, or
expired once its holder died). What counts as running is ``nodeflow.karpenter_presence`` (pure), judged here on two
LISTs: Deployments labelled ``app.kubernetes.io/name=karpenter`` and Leases named ``karpenter-leader-election``,
cluster-wide (the chart installs into any namespace). RBAC: the ``nodeflow-karpenter-watch`` ClusterRole
(infra/cluster/controller-rbac.yaml).

Why is said once per NodePool as a Warning Event ``KarpenterControllerRunning`` (``announce``): its message names the
Deployment or Lease and what to run, and no figure that changes between runs, so a repeated pause bumps the count of
the same Event. No NodePool condition: Karpenter's own status controller writes NodePool conditions while it runs,
and a condition of ours would be dropped and written again on every run of each.

A guard that cannot read Deployments or Leases (403: an older install's RBAC) does not hold nodeflow still: it logs
why, and ``python -m nodeflow doctor`` checks for Karpenter with the operator's own credentials. Any other error
propagates (the run fails and is retried, as it would on the snapshot).

Must not touch: what nodeflow does when Karpenter is absent (the steps); Karpenter's own objects.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any

from nodeflow.karpenter_presence import DEPLOYMENT_SELECTOR, LEASE_NAME, KarpenterController, karpenter_controller
from nodeflow.kube import errors as kerr
from nodeflow.kube.client import DEPLOYMENTS, LEASES, NODE_POOLS, KubeClient
from nodeflow.kube.events import WARNING, EventRecorder, ObjectRef
from nodeflow.kube.reports import Reports

__all__ = ["REASON", "RETRY_SECONDS", "Pause", "announce", "hold", "karpenter_guard"]

REASON = "KarpenterControllerRunning"
RETRY_SECONDS = 30  # the provisioner runs again this long after a pause (its pods are provisioned once it ends)

Log = Callable[[str, dict[str, Any]], None]


@dataclass(frozen=True, slots=True)
class Pause:
    """A Karpenter controller runs: ``why`` (stable wording, for Events and results) and ``evidence`` (one line per
    Deployment / Lease, with ages: for logs)."""

    why: str
    evidence: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"why": self.why, "evidence": list(self.evidence)}


def _why(found: KarpenterController) -> str:
    if found.deployment is not None:
        namespace, name = found.deployment.split("/", 1)
        what = f"Deployment {found.deployment} has ready replicas"
        action = f"kubectl -n {namespace} scale deployment {name} --replicas=0"
    else:
        namespace = (found.lease or "/").split("/", 1)[0]
        what = f"its leader-election Lease {found.lease} is held"
        action = f"stop the controller holding it (kubectl -n {namespace} get pods)"
    return (
        f"a Karpenter controller is running ({what}): nodeflow launches and disrupts nothing until it is gone; "
        f"to hand over, {action}"
    )


def karpenter_guard(kube: KubeClient, now: datetime, log: Log = lambda _m, _e: None) -> Pause | None:
    """A ``Pause`` while a Karpenter controller runs at ``now``, else None (see the module docstring)."""
    try:
        deployments = kube.list_items(DEPLOYMENTS, label_selector=DEPLOYMENT_SELECTOR)
        leases = kube.list_items(LEASES, field_selector=f"metadata.name={LEASE_NAME}")
    except kerr.Forbidden as exc:
        log(
            "cannot tell whether a Karpenter controller runs (acting anyway): allow list on deployments and leases "
            "(ClusterRole nodeflow-karpenter-watch)",
            {"error": str(exc)[:400]},
        )
        return None
    found = karpenter_controller(deployments, leases, now)
    if not found.running:
        return None
    return Pause(_why(found), found.evidence)


def announce(recorder: EventRecorder, pause: Pause, node_pools: Iterable[str], reports: Reports) -> int:
    """The pause's Warning Event on each NodePool; returns how many were written (a refused one is logged in
    ``reports``, the others go on)."""
    written = 0
    for name in sorted(set(node_pools)):
        ref = ObjectRef("NodePool", name, api_version="karpenter.sh/v1")
        if reports.run("NodePool event", f"NodePool/{name}", partial(recorder.record, ref, WARNING, REASON, pause.why)):
            written += 1
    return written


def hold(
    kube: KubeClient, recorder: EventRecorder, now: datetime, reports: Reports, log: Log = lambda _m, _e: None
) -> Pause | None:
    """``karpenter_guard``, and while it pauses, its Event on every NodePool (``announce``): the provisioner's and the
    disruption round's first step."""
    pause = karpenter_guard(kube, now, log)
    if pause is None:
        return None
    log("a Karpenter controller is running: holding still", {"evidence": list(pause.evidence)})
    names = [str((p.get("metadata") or {}).get("name") or "") for p in kube.list_items(NODE_POOLS)]
    announce(recorder, pause, [n for n in names if n], reports)
    return pause
