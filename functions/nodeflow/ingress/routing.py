"""Where events go from the EventBridge bus, and how the provisioning queue batches them.

One source of truth for the sandbox (moto rules in tests and the demo) and the CDK stack.

Batching. Karpenter waits for 1 s without a new pending pod, at most 10 s from the first. An SQS
event-source mapping cannot extend its window on activity: ``MaximumBatchingWindowInSeconds`` is
counted from the first message of a batch, and a batch also closes when ``BatchSize`` messages
(or 6 MB) are in. A window of 1 s therefore reproduces the idle rule for a burst that arrives
within a second, and bounds the delay for a single pod to ~1 s; a long burst becomes a batch per
second instead of one 10 s batch. That costs little here: the batch is only a trigger, the
provisioner solves a fresh snapshot of *all* pending pods, and pods nominated by an earlier batch
are counted on their NodeClaims, so a later batch adds only what is still missing. A 10 s window
would match Karpenter's ceiling but add up to 10 s to every single pod.

Must not touch: the bus or the queues themselves (``nodeflow.aws.bus``, the stack); no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nodeflow.ingress.protocol import DETAIL_TYPES, KINDS, SOURCE

__all__ = [
    "AWS_ROUTES",
    "PROVISIONING_BATCH_SIZE",
    "PROVISIONING_BATCH_WINDOW_SECONDS",
    "ROUTES",
    "AwsRoute",
    "Route",
    "event_pattern",
]

PROVISIONING_BATCH_WINDOW_SECONDS = 1  # MaximumBatchingWindowInSeconds of the provisioner's SQS mapping
PROVISIONING_BATCH_SIZE = 500  # BatchSize (a window > 0 allows up to 10,000; 500 pod events ≈ 1 MB)


@dataclass(frozen=True, slots=True)
class Route:
    """An EventBridge rule: events of ``detail_types`` from the agent go to queue ``queue``."""

    name: str
    queue: str  # "provisioning" | "interruption" | "disruption"
    detail_types: tuple[str, ...]


ROUTES: tuple[Route, ...] = (
    # Pending pods, and NodePool / EC2NodeClass spec changes (a new NodePool may serve pods that
    # were waiting for one).
    Route(
        "pending-pods",
        "provisioning",
        tuple(
            DETAIL_TYPES[k] for k in ("PodUnschedulable", "NodePoolChanged", "EC2NodeClassChanged", "NodeClaimDeleted")
        ),
    ),
    # A NodeClaim or Node deleted by a user (kubectl delete) waits on its termination finalizer: the
    # interruption Lambda starts the terminate workflow for it.
    Route("deletions", "interruption", tuple(DETAIL_TYPES[k] for k in ("NodeClaimDeleting", "NodeDeleting"))),
    # Everything disruption decisions depend on: node state, pool/class/claim changes, pod
    # placement (consolidateAfter timers): every kind but a pod turning unschedulable.
    Route("cluster-changes", "disruption", tuple(DETAIL_TYPES[k] for k in KINDS if k != "PodUnschedulable")),
)


@dataclass(frozen=True, slots=True)
class AwsRoute:
    """An EventBridge rule on the account's *default* bus (where AWS services put their events)."""

    name: str
    queue: str
    pattern: Mapping[str, Any]


# Interruption events (Karpenter's four rules), to the interruption queue. The Lambda filters by
# instance: events for instances nodeflow does not own are ignored there.
AWS_ROUTES: tuple[AwsRoute, ...] = (
    AwsRoute(
        "spot-interruption",
        "interruption",
        {"source": ["aws.ec2"], "detail-type": ["EC2 Spot Instance Interruption Warning"]},
    ),
    AwsRoute(
        "rebalance-recommendation",
        "interruption",
        {"source": ["aws.ec2"], "detail-type": ["EC2 Instance Rebalance Recommendation"]},
    ),
    AwsRoute(
        "instance-state-change",
        "interruption",
        {
            "source": ["aws.ec2"],
            "detail-type": ["EC2 Instance State-change Notification"],
            "detail": {"state": ["stopping", "stopped", "shutting-down", "terminated"]},
        },
    ),
    AwsRoute(
        "scheduled-change",
        "interruption",
        {
            "source": ["aws.health"],
            "detail-type": ["AWS Health Event"],
            "detail": {"service": ["EC2"], "eventTypeCategory": ["scheduledChange"]},
        },
    ),
)


def event_pattern(cluster: str, detail_types: Sequence[str]) -> dict[str, Any]:
    """The EventBridge pattern of a route for ``cluster``."""
    return {"source": [SOURCE], "detail-type": list(detail_types), "detail": {"cluster": [cluster]}}


def routes_by_queue() -> Mapping[str, tuple[Route, ...]]:
    out: dict[str, tuple[Route, ...]] = {}
    for r in ROUTES:
        out[r.queue] = (*out.get(r.queue, ()), r)
    return out
