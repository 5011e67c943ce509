"""Node repair decisions (nodeflow.disruption.repair): policies, tolerations, the 20 % valve, ownership."""

from __future__ import annotations

import zlib
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nodeflow.api.core import Node
from nodeflow.api.karpenter import NodeClaim
from nodeflow.disruption.repair import (
    REPAIR_POLICIES,
    RepairPolicy,
    condition_label,
    decide_repairs,
    unhealthy_condition,
    unhealthy_threshold,
)

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def _ago(minutes: float) -> str:
    return (NOW - timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


def node(name: str, *conds: tuple[str, str, float | None], pool: str | None = "general") -> Node:
    """A node with conditions (type, status, minutes since the transition; None: no lastTransitionTime)."""
    conditions: list[dict[str, Any]] = [{"type": "Ready", "status": "True", "lastTransitionTime": _ago(600)}]
    for t, s, m in conds:
        conditions = [c for c in conditions if c["type"] != t]
        c: dict[str, Any] = {"type": t, "status": s}
        if m is not None:
            c["lastTransitionTime"] = _ago(m)
        conditions.append(c)
    labels = {"karpenter.sh/capacity-type": "spot"}
    if pool is not None:
        labels["karpenter.sh/nodepool"] = pool
    return Node.model_validate(
        {
            "metadata": {"name": name, "labels": labels},
            "spec": {"providerID": f"aws:///us-east-1a/i-{zlib.crc32(name.encode()):08x}"},
            "status": {"conditions": conditions},
        }
    )


def claim(n: Node, pool: str | None = "general", name: str | None = None) -> NodeClaim:
    labels = {"karpenter.sh/nodepool": pool} if pool is not None else {}
    return NodeClaim.model_validate(
        {
            "metadata": {"name": name or f"{n.name}-claim", "labels": labels},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [],
            },
            "status": {"providerID": n.spec.provider_id, "nodeName": n.name, "imageID": "ami-1"},
        }
    )


def healthy(count: int, prefix: str = "ok", pool: str = "general") -> list[Node]:
    return [node(f"{prefix}-{i}", pool=pool) for i in range(count)]


def decide(nodes: list[Node], claims: list[NodeClaim] | None = None) -> Any:
    return decide_repairs(nodes, [claim(n) for n in nodes] if claims is None else claims, NOW)


def test_the_aws_policies_are_karpenters() -> None:
    got = {(p.condition_type, p.condition_status): p.toleration_seconds for p in REPAIR_POLICIES}
    assert got == {
        ("Ready", "False"): 1800,
        ("Ready", "Unknown"): 1800,
        ("AcceleratedHardwareReady", "False"): 600,
        ("StorageReady", "False"): 1800,
        ("NetworkingReady", "False"): 1800,
        ("KernelReady", "False"): 1800,
        ("ContainerRuntimeReady", "False"): 1800,
    }


@pytest.mark.parametrize(
    ("nodes", "allowed"), [(0, 0), (1, 1), (3, 1), (5, 1), (6, 2), (10, 2), (11, 3), (15, 3), (16, 4), (100, 20)]
)
def test_threshold_is_twenty_percent_rounded_up(nodes: int, allowed: int) -> None:
    assert unhealthy_threshold(nodes) == allowed


def test_threshold_rejects_a_negative_count() -> None:
    with pytest.raises(ValueError, match="nodes"):
        unhealthy_threshold(-1)


@pytest.mark.parametrize(
    ("cond", "due"),
    [
        (("Ready", "False", 30), True),
        (("Ready", "False", 29.9), False),
        (("Ready", "Unknown", 31), True),
        (("Ready", "Unknown", 29), False),
        (("AcceleratedHardwareReady", "False", 10), True),
        (("AcceleratedHardwareReady", "False", 9), False),
        (("StorageReady", "False", 30), True),
        (("NetworkingReady", "False", 45), True),
        (("KernelReady", "False", 29), False),
        (("ContainerRuntimeReady", "False", 60), True),
        (("StorageReady", "Unknown", 600), False),  # only False is a monitoring-agent failure
        (("DiskPressure", "True", 600), False),  # not a repair policy
        (("Ready", "True", 600), False),
    ],
)
def test_tolerations(cond: tuple[str, str, float], due: bool) -> None:
    n = node("sick", cond)
    result = decide([n, *healthy(9)])
    assert [r.node for r in result.repairs] == (["sick"] if due else [])


def test_repair_names_node_claim_condition_and_since() -> None:
    n = node("sick", ("NetworkingReady", "False", 45))
    (r,) = decide([n, *healthy(4)]).repairs
    assert r.to_json() == {
        "node": "sick",
        "nodeClaim": "sick-claim",
        "nodePool": "general",
        "condition": "NetworkingReady",
        "status": "False",
        "since": (NOW - timedelta(minutes=45)).isoformat(),
        "tolerationSeconds": 1800,
    }
    assert (r.capacity_type, r.image_id, r.deleting) == ("spot", "ami-1", False)


def test_the_condition_whose_toleration_ends_first_decides() -> None:
    # Ready False for 25 min (ends in 5), AcceleratedHardwareReady False for 8 min (ends in 2)
    n = node("gpu", ("Ready", "False", 25), ("AcceleratedHardwareReady", "False", 8))
    u = unhealthy_condition(n)
    assert u is not None
    assert (u.condition, u.repair_at) == ("AcceleratedHardwareReady", NOW + timedelta(minutes=2))
    result = decide([n, *healthy(9)])
    assert result.repairs == ()
    assert result.next_due == NOW + timedelta(minutes=2)


def test_missing_transition_time_counts_as_long_ago() -> None:
    n = node("sick", ("KernelReady", "False", None))
    (r,) = decide([n, *healthy(4)]).repairs
    assert r.unhealthy.since is None
    assert r.to_json()["since"] is None


def test_more_than_twenty_percent_unhealthy_in_the_pool_blocks_every_repair() -> None:
    # 10 nodes: 2 may be unhealthy. 3 unhealthy (one still within its toleration, it counts too): blocked.
    sick = [node("a", ("Ready", "False", 40)), node("b", ("Ready", "Unknown", 40)), node("c", ("Ready", "False", 1))]
    result = decide([*sick, *healthy(7)])
    assert result.repairs == ()
    assert [b.node for b in result.blocked] == ["a", "b"]
    assert "3 of 10 nodes of NodePool general" in result.blocked[0].message
    assert result.to_json()["repairsBlocked"][0]["event"] == "NodeRepairBlocked"


def test_exactly_the_threshold_is_still_repaired() -> None:
    sick = [node("a", ("Ready", "False", 40)), node("b", ("Ready", "False", 40))]
    assert [r.node for r in decide([*sick, *healthy(8)]).repairs] == ["a", "b"]


def test_rounding_up_lets_one_of_three_be_repaired() -> None:
    assert [r.node for r in decide([node("a", ("Ready", "False", 40)), *healthy(2)]).repairs] == ["a"]
    two = [node("a", ("Ready", "False", 40)), node("b", ("Ready", "False", 40)), *healthy(1)]
    assert decide(two).repairs == ()


def test_pools_are_measured_apart() -> None:
    gpu = [node("g1", ("AcceleratedHardwareReady", "False", 20), pool="gpu"), *healthy(1, "g", pool="gpu")]
    gpu.append(node("g2", ("AcceleratedHardwareReady", "False", 20), pool="gpu"))  # 2 of 3: blocked
    general = [node("a", ("Ready", "False", 40)), *healthy(4)]
    claims = [claim(n, pool=n.labels["karpenter.sh/nodepool"]) for n in [*gpu, *general]]
    result = decide([*gpu, *general], claims)
    assert [r.node for r in result.repairs] == ["a"]
    assert sorted(b.node for b in result.blocked) == ["g1", "g2"]


def test_a_node_claim_without_nodepool_is_measured_against_the_cluster() -> None:
    standalone = node("solo", ("Ready", "False", 40), pool=None)
    others = healthy(3)
    claims = [claim(standalone, pool=None), *(claim(n) for n in others)]
    assert [r.node for r in decide([standalone, *others], claims).repairs] == ["solo"]  # 1 of 4
    worse = [standalone, node("x", ("Ready", "False", 1)), *healthy(3)]
    claims = [claim(standalone, pool=None), *(claim(n) for n in worse[1:])]
    result = decide(worse, claims)  # 2 of 5 unhealthy in the cluster: 1 allowed
    assert result.repairs == ()
    assert "of the cluster" in result.blocked[0].message


def test_unmanaged_or_ambiguous_nodes_are_left_alone() -> None:
    n = node("sick", ("Ready", "False", 40))
    others = healthy(4)
    claims = [claim(o) for o in others]
    assert decide([n, *others], claims).repairs == ()  # no NodeClaim has its providerID
    twice = [*claims, claim(n), claim(n, name="dup")]
    assert decide([n, *others], twice).repairs == ()  # two NodeClaims claim it


def test_ignores_do_not_disrupt_and_reports_a_deleting_claim() -> None:
    n = node("sick", ("Ready", "False", 40))
    n = n.model_copy(
        update={"metadata": n.metadata.model_copy(update={"annotations": {"karpenter.sh/do-not-disrupt": "true"}})}
    )
    c = claim(n)
    c = c.model_copy(update={"metadata": c.metadata.model_copy(update={"deletion_timestamp": NOW})})
    (r,) = decide([n, *healthy(4)], [c]).repairs
    assert r.deleting


def test_custom_policies() -> None:
    n = node("sick", ("DiskPressure", "True", 6))
    policy = RepairPolicy("DiskPressure", "True", 300)
    assert [r.node for r in decide_repairs([n], [claim(n)], NOW, [policy]).repairs] == ["sick"]


@pytest.mark.parametrize(
    ("t", "label"),
    [
        ("Ready", "ready"),
        ("AcceleratedHardwareReady", "accelerated_hardware_ready"),
        ("ContainerRuntimeReady", "container_runtime_ready"),
    ],
)
def test_condition_label(t: str, label: str) -> None:
    assert condition_label(t) == label
