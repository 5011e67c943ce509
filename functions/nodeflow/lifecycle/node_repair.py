"""Node repair in the deployed path: the disruption Lambda's round, when the ``NodeRepair`` feature gate is on.

``nodeflow.disruption.repair.decide_repairs`` says which nodes are due; here each due node is replaced
forcefully, as Karpenter's node health controller does:

the terminate workflow starts with reason ``Unhealthy``, one of ``lifecycle.termination.FORCEFUL_REASONS``: its
Taint step deletes the NodeClaim and its Node and sets the NodeClaim's ``karpenter.sh/nodeclaim-termination-timestamp``
to now (kept when an earlier time is set already), so Drain deletes every pod at once, PodDisruptionBudgets and
``karpenter.sh/do-not-disrupt`` notwithstanding, without waiting out the terminationGracePeriod; then the instance is
terminated. The pods become pending and the provisioner places them on new capacity.

Disruption budgets and the pause ConfigMap do not apply (repair is not voluntary). A node blocked by the 20 %
rule gets a ``NodeRepairBlocked`` Warning event on the Node. Every step is idempotent: the workflow is named
after the NodeClaim, so a node that stays unhealthy for several rounds is repaired once.

Must not touch: which nodes are due (``nodeflow.disruption.repair``); how a node is terminated (the terminate workflow).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nodeflow.api import labels as wk
from nodeflow.api.core import Node
from nodeflow.api.karpenter_core import NodeClaim
from nodeflow.disruption.repair import (
    EVENT_NODE_REPAIR_BLOCKED,
    TERMINATION_REASON,
    Repair,
    condition_label,
    decide_repairs,
)
from nodeflow.kube import errors as kerr
from nodeflow.kube.client import KubeClient
from nodeflow.kube.events import WARNING, EventRecorder, ObjectRef

__all__ = ["RepairDeps", "RepairOutcome", "repair_nodes"]


@dataclass(frozen=True)
class RepairDeps:
    kube: KubeClient
    recorder: EventRecorder
    start_terminate: Callable[[str, str], bool]  # (NodeClaim name, reason) -> started
    now: Callable[[], datetime]


@dataclass
class RepairOutcome:
    repaired: list[str] = field(default_factory=list)  # NodeClaims whose terminate workflow this round started
    blocked: list[dict[str, Any]] = field(default_factory=list)
    disrupted: list[tuple[str, dict[str, str]]] = field(default_factory=list)  # (reason, labels) for the metric
    unhealthy: list[dict[str, str]] = field(default_factory=list)  # karpenter_nodeclaims_unhealthy_disrupted_total

    def to_json(self) -> dict[str, Any]:
        return {"repaired": self.repaired, "repairsBlocked": self.blocked}


def repair_nodes(deps: RepairDeps, nodes: Sequence[Node], node_claims: Sequence[NodeClaim]) -> RepairOutcome:
    """Replace the nodes due for repair now; event the blocked ones."""
    now = deps.now()
    out = RepairOutcome()
    result = decide_repairs(nodes, node_claims, now)
    for b in result.blocked:
        out.blocked.append(b.to_json())
        with contextlib.suppress(kerr.KubeError):  # an event is for people: it never fails the round
            deps.recorder.record(ObjectRef("Node", b.node), WARNING, EVENT_NODE_REPAIR_BLOCKED, b.message)
    for r in result.repairs:
        if deps.start_terminate(r.node_claim, TERMINATION_REASON) and not r.deleting:
            out.repaired.append(r.node_claim)
            out.disrupted.append((TERMINATION_REASON, _labels(r)))
            out.unhealthy.append({**_labels_metric(r), "condition": condition_label(r.unhealthy.condition)})
    return out


def _labels(r: Repair) -> dict[str, str]:
    return {wk.LABEL_NODEPOOL: r.node_pool or "", wk.LABEL_CAPACITY_TYPE: r.capacity_type}


def _labels_metric(r: Repair) -> dict[str, str]:
    return {"nodepool": r.node_pool or "", "capacity_type": r.capacity_type, "image_id": r.image_id}
