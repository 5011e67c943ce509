"""Parity with Karpenter's pod utilities (do-not-disrupt): seen as whether a node holding the pod is blocked.

A pod whose karpenter.sh/do-not-disrupt annotation is active blocks voluntary disruption of its node
(``disrupt`` reports the node DisruptionBlocked naming the pod); an inactive one does not (the node, with one
small pod, is consolidated). A duration counts from the pod's ``status.startTime``; without a start time a
duration protects (fail safe); a value that is not "true" and not a positive Go duration protects nothing.
"""

from __future__ import annotations

import pytest

from tests.parity._candidates import DO_NOT_DISRUPT, base, blocker, disrupted, node_with, run_round, small, with_start
from tests.parity.harness import ago
from tests.parity.upstream import mirrors

UPSTREAM = "pkg/utils/pod/suite_test.go"

NOT_EXPRESSIBLE: dict[str, str] = {
    "HasDRARequirements / should return false when the pod references no ResourceClaims": (
        "Dynamic Resource Allocation (ResourceClaims) is not implemented in nodeflow: a pod's resourceClaims are not read"
    ),
    "HasDRARequirements / should return true when a pod-level ResourceClaim is referenced": (
        "Dynamic Resource Allocation (ResourceClaims) is not implemented in nodeflow: a pod's resourceClaims are not read"
    ),
    "HasDRARequirements / should return true when a container consumes a ResourceClaim": (
        "Dynamic Resource Allocation (ResourceClaims) is not implemented in nodeflow: a pod's resourceClaims are not read"
    ),
    "HasDRARequirements / should return true when an init container consumes a ResourceClaim": (
        "Dynamic Resource Allocation (ResourceClaims) is not implemented in nodeflow: a pod's resourceClaims are not read"
    ),
}


def _verdict(value: str | None, *, started: str | None = None, **pod_kw: object) -> tuple[str | None, list[str]]:
    annotations = {DO_NOT_DISRUPT: value} if value is not None else None
    p = with_start(small("p", annotations=annotations, **pod_kw), started)  # type: ignore[arg-type]
    out = run_round([base(), node_with([p])])
    return blocker(out, "n1"), disrupted(out)


@mirrors(
    "IsDoNotDisruptActive / should return false when no annotation exists",
    "IsDisruptable / should be disruptable for active pod without annotation",
)
def test_pod_without_annotation_does_not_block() -> None:
    message, nodes = _verdict(None, started=ago(hours=1))
    assert message is None
    assert nodes == ["n1"]


@mirrors(
    "IsDoNotDisruptActive / should return true for 'true' annotation",
    "IsDoNotDisruptActive / should not emit disruptable-at event for indefinite protection",
    "IsDisruptable / should not be disruptable for active pod with 'true' annotation and not emit invalid annotation event",
)
def test_true_blocks_for_ever() -> None:
    """'true' protects whatever the pod's age (events are not part of the decision)."""
    message, nodes = _verdict("true", started=ago(days=400))
    assert message is not None
    assert "default/p" in message
    assert DO_NOT_DISRUPT in message
    assert nodes == []


@pytest.mark.parametrize("value", ["invalid", "a while", "Never", "1d", "yes"])
@mirrors("IsDoNotDisruptActive / should return false and emit event for invalid duration format")
def test_invalid_value_does_not_block(value: str) -> None:
    message, nodes = _verdict(value, started=ago(minutes=1))
    assert message is None
    assert nodes == ["n1"]


@pytest.mark.parametrize("value", ["0s", "0", "0m"])
@mirrors("IsDoNotDisruptActive / should return false and emit event for zero duration")
def test_zero_duration_does_not_block(value: str) -> None:
    message, _ = _verdict(value, started=ago(minutes=1))
    assert message is None


@mirrors("IsDoNotDisruptActive / should return false and emit event for negative duration")
def test_negative_duration_does_not_block() -> None:
    message, nodes = _verdict("-1h", started=ago(minutes=1))
    assert message is None
    assert nodes == ["n1"]


@mirrors(
    "IsDoNotDisruptActive / should return true and emit disruptable-at event when duration has not expired",
    "IsDisruptable / should not be disruptable for active pod with non-expired duration",
)
def test_duration_protects_from_the_start_time() -> None:
    """Started 30 minutes ago under "1h": protected, even though the pod object is days old."""
    message, nodes = _verdict("1h", started=ago(minutes=30), created=ago(days=3))
    assert message is not None
    assert "1h" in message
    assert nodes == []


@mirrors(
    "IsDoNotDisruptActive / should return false and emit grace period elapsed event when duration has expired",
    "IsDisruptable / should be disruptable for active pod with expired duration and not emit invalid annotation event",
)
def test_duration_runs_out_after_the_start_time() -> None:
    message, nodes = _verdict("1h", started=ago(hours=2), created=ago(hours=3))
    assert message is None
    assert nodes == ["n1"]


@mirrors("IsDoNotDisruptActive / should fail safe when start time is nil")
def test_duration_without_start_time_protects() -> None:
    """No status.startTime: the duration cannot be judged, so it protects (an old creationTimestamp does not matter)."""
    message, nodes = _verdict("1h", started=None, created=ago(days=3))
    assert message is not None
    assert nodes == []


@mirrors("IsDisruptable / should be disruptable for terminal pod even with annotation")
def test_terminal_pod_with_annotation_does_not_block() -> None:
    for phase in ("Succeeded", "Failed"):
        message, nodes = _verdict("true", started=ago(hours=1), phase=phase)
        assert message is None, phase
        assert nodes == ["n1"], phase
