"""Replacing nodes for a disruption command (Karpenter's orchestration of a replace command):

1. ``start`` (the disruption Lambda): taint the candidates ``karpenter.sh/disrupted:NoSchedule``, create
   the replacement NodeClaims (deterministic names: a retried round proposes the same), start their
   launch workflows, then start the ``replace`` workflow (named after the command) with
   ``{"reason", "candidates": [{"node", "nodeClaim"}], "replacements": [names], "deadline"}``.
2. ``check`` (polled by the workflow): ``ready`` when every replacement is Initialized, ``failed`` when
   one is gone (its launch failed and CleanUp removed it) or the deadline passed, else ``waiting``.
3. ``terminate_candidates``: the candidates' terminate workflows (taint, drain, terminate).
4. ``rollback``: un-taint the candidates and terminate the replacements that exist, so nothing is lost
   and nothing is left behind.

Must not touch: which nodes a command replaces (``nodeflow.disruption``); how a candidate is terminated (the terminate
workflow).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from nodeflow.api import labels as wk
from nodeflow.api.karpenter import NodePool
from nodeflow.api.meta import Taint
from nodeflow.disruption.model import Command
from nodeflow.kube import errors as kerr
from nodeflow.kube.client import NODE_CLAIMS, KubeClient
from nodeflow.kube.events import NORMAL, WARNING, EventRecorder, ObjectRef
from nodeflow.kube.writes import add_taints, create_node_claim, remove_taints
from nodeflow.lifecycle.claims import node_claim_manifest, node_claim_name

__all__ = ["REPLACE_TIMEOUT", "ReplaceDeps", "check", "replace_name", "rollback", "start", "terminate_candidates"]

REPLACE_TIMEOUT = timedelta(minutes=15)  # replacements not initialized by then: roll back
DISRUPTED = Taint(key=wk.TAINT_DISRUPTED, effect="NoSchedule")


@dataclass(frozen=True)
class ReplaceDeps:
    kube: KubeClient
    recorder: EventRecorder
    now: Callable[[], datetime]
    start_terminate: Callable[[str, str], bool]  # (NodeClaim, reason) -> started
    start_launch: Callable[[str], bool] = lambda _name: False
    start_replace: Callable[[str, Mapping[str, Any]], bool] = lambda _name, _input: False


def replace_name(command: Command) -> str:
    digest = hashlib.sha256("\n".join([command.reason.value, *sorted(command.candidates)]).encode()).hexdigest()
    return f"replace-{digest[:12]}"


def _node(name: str) -> ObjectRef:
    return ObjectRef("Node", name)


def start(
    deps: ReplaceDeps, command: Command, claims: Mapping[str, str], pools: Mapping[str, NodePool]
) -> dict[str, Any]:
    """Taint, create and launch the replacements, start the workflow; returns the workflow input."""
    name = replace_name(command)
    for node in command.candidates:
        add_taints(deps.kube, node, [DISRUPTED])
    replacements: list[str] = []
    for plan in command.replacements:
        claim = node_claim_name(plan.nodepool, name, plan.pods)
        with contextlib.suppress(kerr.AlreadyExists):  # a retried round proposes the same names
            create_node_claim(deps.kube, node_claim_manifest(plan, pools[plan.nodepool], claim, batch=name))
        replacements.append(claim)
        deps.start_launch(claim)
    for node in command.candidates:
        deps.recorder.record(_node(node), NORMAL, "DisruptionLaunching", f"Launching NodeClaim: {command.reason.value}")
    payload = {
        "reason": command.reason.value,
        "candidates": [{"node": n, "nodeClaim": claims.get(n)} for n in command.candidates],
        "replacements": replacements,
        "deadline": (deps.now() + REPLACE_TIMEOUT).isoformat(),
    }
    deps.start_replace(name, payload)
    return {"name": name, **payload}


def _initialized(claim: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "Initialized" and c.get("status") == "True"
        for c in (claim.get("status") or {}).get("conditions") or []
    )


def check(deps: ReplaceDeps, replace: Mapping[str, Any]) -> dict[str, Any]:
    missing: list[str] = []
    waiting: list[str] = []
    for name in replace.get("replacements") or []:
        try:
            claim = deps.kube.get(NODE_CLAIMS, name)
        except kerr.NotFound:
            missing.append(name)
            continue
        if (claim.get("metadata") or {}).get("deletionTimestamp"):
            missing.append(name)
        elif not _initialized(claim):
            waiting.append(name)
    if missing:
        return {"state": "failed", "why": f"replacement NodeClaims gone: {', '.join(missing)}"}
    if not waiting:
        return {"state": "ready"}
    deadline = datetime.fromisoformat(str(replace["deadline"]))
    if deps.now() >= deadline:
        return {
            "state": "failed",
            "why": f"replacements not initialized by {replace['deadline']}: {', '.join(waiting)}",
        }
    for c in _candidates(replace):
        deps.recorder.record(
            _node(c["node"]), NORMAL, "DisruptionWaitingReadiness", "Waiting on readiness to continue disruption"
        )
    return {"state": "waiting", "waiting": waiting}


def _candidates(replace: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
    return [c for c in replace.get("candidates") or [] if isinstance(c, Mapping)]


def terminate_candidates(deps: ReplaceDeps, replace: Mapping[str, Any]) -> dict[str, Any]:
    reason = str(replace.get("reason") or "Disrupted")
    started: list[str] = []
    disrupted: list[dict[str, str]] = []  # the labels of the NodeClaims in ``started`` (for the metrics)
    for c in _candidates(replace):
        claim = c.get("nodeClaim")
        labels = _labels(deps, str(claim)) if claim else {}
        if claim and deps.start_terminate(str(claim), reason):
            started.append(str(claim))
            disrupted.append(labels)
    return {"started": started, "disrupted": disrupted}


def _labels(deps: ReplaceDeps, claim: str) -> dict[str, str]:
    try:
        return dict((deps.kube.get(NODE_CLAIMS, claim).get("metadata") or {}).get("labels") or {})
    except kerr.NotFound:
        return {}


def rollback(deps: ReplaceDeps, replace: Mapping[str, Any]) -> dict[str, Any]:
    untainted: list[str] = []
    for c in _candidates(replace):
        try:
            remove_taints(deps.kube, str(c["node"]), [DISRUPTED])
        except kerr.NotFound:
            continue
        untainted.append(str(c["node"]))
        deps.recorder.record(
            _node(str(c["node"])),
            WARNING,
            "DisruptionBlocked",
            "a replacement NodeClaim did not initialize: the node stays (un-tainted)",
        )
    removed: list[str] = []
    failed = 0  # replacements that never initialized (gone or not yet), for the metrics
    for name in replace.get("replacements") or []:
        try:
            failed += not _initialized(deps.kube.get(NODE_CLAIMS, str(name)))
        except kerr.NotFound:
            failed += 1
            continue
        if deps.start_terminate(str(name), "ReplacementFailed"):
            removed.append(str(name))
    return {"untainted": untainted, "replacementsTerminated": removed, "failedLaunches": failed}
