"""NodeflowPolicies in the disruption round: pause windows stop voluntary disruption (emptiness, drift, consolidation,
static scale-down) of their NodePools' nodes, reported blocked with the window, while expiration goes on; replacement
simulations leave out NodePools the moving pods' namespaces may not use; a replacement may not push a $/hour ceiling
or a group limit over its maximum (the candidates counted as freed); a move that lowers spend is never blocked."""

from __future__ import annotations

import dataclasses
import re
from datetime import timedelta
from typing import Any

import pytest

from nodeflow.api.core import Namespace, Pod
from nodeflow.api.nodeflow_policy import NodeflowPolicy
from nodeflow.disruption.model import BlockKind, Snapshot
from nodeflow.disruption.policy import RoundPolicy
from nodeflow.disruption.round import Prepared, decide
from nodeflow.disruption.simulation import PodInputs
from nodeflow.plan import build_input

from ..disruption.builders import CATALOG, NOW, node, pod, pool, snapshot
from ..disruption.test_static import launched, static, unlaunched, with_claims

ALL = [{"nodes": "100%"}]
OPEN = "0 11 * * *"  # NOW is 12:00 UTC: open 11:00-13:00 with duration 2h
UNTIL = "until 2026-11-21T13:00:00Z"
LATER = NOW + timedelta(hours=2)  # the window has closed


def policy(name: str, **spec: Any) -> NodeflowPolicy:
    return NodeflowPolicy.model_validate(
        {"apiVersion": "nodeflow.io/v1alpha1", "kind": "NodeflowPolicy", "metadata": {"name": name}, "spec": spec}
    )


def freeze(pools: list[str] | None = None, *, disruption: bool = True, provisioning: bool = False) -> NodeflowPolicy:
    window: dict[str, Any] = {
        "name": "quarter-end",
        "schedule": OPEN,
        "duration": "2h",
        "disruption": disruption,
        "provisioning": provisioning,
    }
    if pools is not None:
        window["nodePools"] = pools
    return policy("freeze", pauses=[window])


def governed(snap: Snapshot, *policies: NodeflowPolicy, namespaces: tuple[Namespace, ...] = ()) -> Snapshot:
    state = dataclasses.replace(snap.state, policies=policies, namespaces=namespaces)
    return dataclasses.replace(snap, state=state)


def in_namespace(p: Pod, namespace: str) -> Pod:
    body = p.model_dump(by_alias=True, exclude_none=True)
    body["metadata"]["namespace"] = namespace
    return Pod.model_validate(body)


def blocked_of(result: Any) -> dict[str, str]:
    return {b.node: b.message for b in result.blocked if b.kind == BlockKind.BLOCKED}


PAUSED = f"disruption paused for NodePool general by policy freeze: window quarter-end ({OPEN} for 2h) {UNTIL}"


# -- pause windows ---------------------------------------------------------------------------------------------


def test_pause_stops_emptiness_and_names_the_window_until_it_closes() -> None:
    snap = governed(snapshot([node("idle")], [], pools=[pool(budgets=ALL)]), freeze())
    during = decide(snap, CATALOG, NOW)
    assert during.command is None
    assert blocked_of(during) == {"idle": PAUSED}
    after = decide(snap, CATALOG, LATER)
    assert after.command is not None
    assert after.command.candidates == ("idle",)
    assert "idle" not in blocked_of(after)


def test_pause_stops_drift() -> None:
    nodes = [node("old", image="ami-old"), node("spare", "m5.2xlarge")]
    snap = governed(snapshot(nodes, [pod("p", "old"), pod("q", "spare")], pools=[pool(budgets=ALL)]), freeze())
    during = decide(snap, CATALOG, NOW)
    assert during.command is None
    assert blocked_of(during)["old"] == PAUSED
    after = decide(snap, CATALOG, LATER)
    assert after.command is not None
    assert after.command.reason.value == "Drifted"


def test_pause_stops_consolidation() -> None:
    nodes = [node("a", "m5.2xlarge"), node("b", "m5.2xlarge")]
    snap = governed(snapshot(nodes, [pod("p1", "a"), pod("p2", "b")], pools=[pool(budgets=ALL)]), freeze())
    during = decide(snap, CATALOG, NOW)
    assert during.command is None
    assert blocked_of(during) == {"a": PAUSED, "b": PAUSED}
    after = decide(snap, CATALOG, LATER)
    assert after.command is not None
    assert after.command.reason.value == "Underutilized"


def test_pause_stops_static_scale_down() -> None:
    nodes = [launched(node("a")), launched(node("b"))]
    snap = governed(with_claims(snapshot(nodes, [], pools=[static(pool(), 1)]), unlaunched("c")), freeze())
    during = decide(snap, CATALOG, NOW)
    assert during.scale_downs == ()  # neither the NodeClaim not launched yet nor a node
    assert blocked_of(during) == {"a": PAUSED, "b": PAUSED}  # every node of a paused NodePool is reported
    assert [s.node_claim for s in decide(snap, CATALOG, LATER).scale_downs] == ["c", "a-claim"]


def test_pause_without_disruption_or_for_other_pools_changes_nothing() -> None:
    base = snapshot([node("idle")], [], pools=[pool(budgets=ALL)])
    for other in (freeze(["gpu"]), freeze(disruption=False, provisioning=True)):
        result = decide(governed(base, other), CATALOG, NOW)
        assert result.command is not None
        assert result.command.candidates == ("idle",)
        assert result == decide(base, CATALOG, NOW)


def test_pause_covers_only_its_node_pools() -> None:
    nodes = [node("g-idle", pool_name="gpu"), node("idle")]
    pools = [pool(budgets=ALL), pool("gpu", budgets=ALL)]
    result = decide(governed(snapshot(nodes, [], pools=pools), freeze(["gpu"])), CATALOG, NOW)
    assert result.command is not None
    assert result.command.candidates == ("idle",)
    assert blocked_of(result) == {"g-idle": PAUSED.replace("NodePool general", "NodePool gpu")}


def test_expiration_goes_on_during_a_pause() -> None:
    nodes = [node("old", expire_after="1h"), node("idle")]
    result = decide(governed(snapshot(nodes, [], pools=[pool(budgets=ALL)]), freeze()), CATALOG, NOW)
    assert [e.node for e in result.expirations] == ["old"]
    assert result.command is None
    assert blocked_of(result) == {"idle": PAUSED}


# -- access: replacements are new capacity ----------------------------------------------------------------------

ACCESS = policy("gpu-access", nodePoolAccess=[{"nodePools": ["general"], "namespaces": ["ml-prod"]}])


def test_drift_replacement_in_a_denied_node_pool_is_not_made() -> None:
    nodes = [node("old", image="ami-old")]
    pods = [in_namespace(pod("p", "old"), "ml-exp")]
    result = decide(governed(snapshot(nodes, pods, pools=[pool(budgets=ALL)]), ACCESS), CATALOG, NOW)
    assert result.command is None
    message = blocked_of(result)["old"]
    assert message.startswith("drifted, but pod ml-exp/p could not be rescheduled")
    assert "general: namespace ml-exp may not use NodePool general: policy gpu-access" in message
    allowed = [in_namespace(pod("p", "old"), "ml-prod")]
    ok = decide(governed(snapshot(nodes, allowed, pools=[pool(budgets=ALL)]), ACCESS), CATALOG, NOW)
    assert ok.command is not None
    assert ok.command.decision == "replace"


def test_no_drift_replacement_in_a_node_pool_whose_provisioning_is_paused() -> None:
    nodes = [node("old", image="ami-old")]
    snap = snapshot(nodes, [pod("p", "old")], pools=[pool(budgets=ALL)])
    result = decide(governed(snap, freeze(disruption=False, provisioning=True)), CATALOG, NOW)
    assert result.command is None
    paused = PAUSED.replace("disruption paused", "provisioning paused")
    assert blocked_of(result) == {"old": f"drifted, but pod default/p could not be rescheduled (general: {paused})"}
    after = decide(governed(snap, freeze(disruption=False, provisioning=True)), CATALOG, LATER)
    assert after.command is not None
    assert after.command.decision == "replace"


def test_denied_pods_may_still_move_to_existing_nodes_delete_only() -> None:
    nodes = [node("old", image="ami-old"), node("spare", "m5.2xlarge")]
    pods = [in_namespace(pod("p", "old"), "ml-exp"), pod("q", "spare")]
    result = decide(governed(snapshot(nodes, pods, pools=[pool(budgets=ALL)]), ACCESS), CATALOG, NOW)
    assert result.command is not None
    assert result.command.decision == "delete"
    assert result.command.candidates == ("old",)
    assert [(m.pod, m.node) for m in result.command.moves] == [("ml-exp/p", "spare")]


def test_consolidation_replacement_goes_to_a_node_pool_the_namespace_may_use() -> None:
    # one big node for a small pod: replaced by a smaller node, but only in the NodePool ml-exp may use
    nodes = [node("big", "m5.4xlarge")]
    pods = [in_namespace(pod("p", "big"), "ml-exp")]
    pools = [pool(budgets=ALL), pool("batch", budgets=ALL, capacity=("spot", "on-demand"))]
    denied = policy("gpu-access", nodePoolAccess=[{"nodePools": ["batch"], "namespaces": ["ml-prod"]}])
    free = decide(snapshot(nodes, pods, pools=pools), CATALOG, NOW, settings=None)
    result = decide(governed(snapshot(nodes, pods, pools=pools), denied), CATALOG, NOW)
    assert result.command is not None
    assert result.command.decision == "replace"
    assert {r.nodepool for r in result.command.replacements} == {"general"}
    assert free.command is not None  # without the policy the cheaper spot pool could take it
    assert {r.nodepool for r in free.command.replacements} == {"batch"}


# -- ceilings and group limits ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scope", "what"),
    [("nodePools", "NodePool general"), ("namespaces", "namespace default"), ("cluster", "the cluster")],
)
def test_ceiling_blocks_a_drift_replacement_that_raises_spend_over_it(scope: str, what: str) -> None:
    # the NodePool now allows only on-demand: its spot node drifted, its replacement is on-demand (dearer)
    nodes = [node("cheap", "m5.2xlarge", capacity="spot")]
    pods = [pod("p", "cheap", cpu="6")]

    def caps(limit: str) -> NodeflowPolicy:
        ceiling: Any = {"maxPricePerHour": limit}
        if scope != "cluster":
            ceiling = [{"name": what.split()[-1], **ceiling}]
        return policy("cost-caps", costCeilings={scope: ceiling})

    result = decide(governed(snapshot(nodes, pods, pools=[pool(budgets=ALL)]), caps("0.30")), CATALOG, NOW)
    assert result.command is None
    message = blocked_of(result)["cheap"]
    assert re.match(r"drift replacement NodeClaim of NodePool general \(\$0\.\d{4}/hour\) would cross ", message)
    assert f"the $/hour ceiling of {what} ($0.30/hour, $" in message
    assert message.endswith("freed by the candidates): policy cost-caps")
    ok = decide(governed(snapshot(nodes, pods, pools=[pool(budgets=ALL)]), caps("0.50")), CATALOG, NOW)
    assert ok.command is not None
    assert ok.command.reason.value == "Drifted"


def test_a_move_that_lowers_spend_is_never_blocked_by_a_ceiling() -> None:
    nodes = [node("big", "m5.4xlarge")]
    pods = [pod("p", "big")]
    over = policy(
        "cost-caps",
        costCeilings={
            "cluster": {"maxPricePerHour": "0.01"},
            "nodePools": [{"name": "general", "maxPricePerHour": "0.01"}],
            "namespaces": [{"name": "default", "maxPricePerHour": "0.01"}],
        },
    )
    result = decide(governed(snapshot(nodes, pods, pools=[pool(budgets=ALL)]), over), CATALOG, NOW)
    assert result.command is not None
    assert result.command.decision == "replace"
    assert result.command.price_after < result.command.price_before


def test_group_limit_blocks_a_replacement_into_the_group() -> None:
    # NodePool "old" no longer offers any instance type: its node's replacement must come from "general"
    old = pool(
        "old", budgets=ALL, extra=[{"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["x"]}]
    )
    keep = {"karpenter.sh/do-not-disrupt": "true"}
    nodes = [node("legacy", "m5.xlarge", pool_name="old"), node("g1", "m5.xlarge", node_annotations=keep)]
    pods = [pod("p", "legacy", cpu="3"), pod("q", "g1", cpu="3")]
    group = policy("groups", limits=[{"name": "main", "nodePools": ["general"], "resources": {"nodes": "1"}}])
    snap = snapshot(nodes, pods, pools=[pool(budgets=ALL), old])
    result = decide(governed(snap, group), CATALOG, NOW)
    assert result.command is None
    message = blocked_of(result)["legacy"]
    assert message == (
        "drift replacement NodeClaim of NodePool general would exceed the nodes limit of NodePool group main "
        "(1; 1 in use, 2 after the move): policy groups"
    )
    roomy = policy("groups", limits=[{"name": "main", "nodePools": ["general"], "resources": {"nodes": "2"}}])
    ok = decide(governed(snap, roomy), CATALOG, NOW)
    assert ok.command is not None
    assert ok.command.candidates == ("legacy",)


@pytest.mark.parametrize("resources", [{"nodes": "1"}, {"nodes": "2"}, {"cpu": "8"}, {"cpu": "12"}, {"cpu": "64"}])
def test_a_star_group_is_every_nodepool_in_the_disruption_round(resources: dict[str, str]) -> None:
    """A group on ["*"] decides as the group naming every NodePool: their nodes counted, replacements checked."""
    old = pool(
        "old", budgets=ALL, extra=[{"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["x"]}]
    )
    keep = {"karpenter.sh/do-not-disrupt": "true"}
    nodes = [node("legacy", "m5.xlarge", pool_name="old"), node("g1", "m5.xlarge", node_annotations=keep)]
    snap = snapshot(nodes, [pod("p", "legacy", cpu="3"), pod("q", "g1", cpu="3")], pools=[*SPOT_POOLS, old])

    def group(pools: list[str]) -> NodeflowPolicy:
        return policy("groups", limits=[{"name": "main", "nodePools": pools, "resources": resources}])

    named = decide(governed(snap, group(["batch", "general", "old"])), CATALOG, NOW)
    assert decide(governed(snap, group(["*"])), CATALOG, NOW) == named
    if resources == {"cpu": "8"}:  # 8 CPUs in use in the NodePools: a larger replacement would cross it
        assert named != decide(snap, CATALOG, NOW)


# -- replacements go to the next NodePool when one is at its ceiling or group limit (as the provisioner's do) ----

SPOT_POOLS = [pool(budgets=ALL), pool("batch", budgets=ALL, capacity=("spot", "on-demand"))]


def test_drift_replacement_goes_to_another_node_pool_when_the_first_is_at_its_ceiling() -> None:
    # without policies the cheaper spot NodePool batch takes the drifted node's pod; batch is at its ceiling
    nodes = [node("old", image="ami-old")]
    snap = snapshot(nodes, [pod("p", "old")], pools=SPOT_POOLS)
    free = decide(snap, CATALOG, NOW)
    assert free.command is not None
    assert {r.nodepool for r in free.command.replacements} == {"batch"}
    capped = policy("cost-caps", costCeilings={"nodePools": [{"name": "batch", "maxPricePerHour": "0.01"}]})
    result = decide(governed(snap, capped), CATALOG, NOW)
    assert result.command is not None
    assert result.command.reason.value == "Drifted"
    assert result.command.candidates == ("old",)
    assert {r.nodepool for r in result.command.replacements} == {"general"}
    assert "old" not in blocked_of(result)


@pytest.mark.parametrize(
    "capped",
    [
        policy("cost-caps", costCeilings={"nodePools": [{"name": "batch", "maxPricePerHour": "0.01"}]}),
        policy("groups", limits=[{"name": "spot", "nodePools": ["batch"], "resources": {"nodes": "0"}}]),
    ],
    ids=["ceiling", "group-limit"],
)
def test_consolidation_replacement_goes_to_another_node_pool_when_the_first_is_at_its_ceiling(
    capped: NodeflowPolicy,
) -> None:
    # one big node for a small pod: without policies replaced by a spot node of batch; batch is at its ceiling /
    # group limit, so by a smaller on-demand node of general (still cheaper than the big one)
    nodes = [node("big", "m5.4xlarge")]
    snap = snapshot(nodes, [pod("p", "big")], pools=SPOT_POOLS)
    free = decide(snap, CATALOG, NOW)
    assert free.command is not None
    assert {r.nodepool for r in free.command.replacements} == {"batch"}
    result = decide(governed(snap, capped), CATALOG, NOW)
    assert result.command is not None
    assert result.command.reason.value == "Underutilized"
    assert result.command.decision == "replace"
    assert {r.nodepool for r in result.command.replacements} == {"general"}
    assert result.command.price_after < result.command.price_before
    assert "big" not in {b.node for b in result.blocked}


def test_a_rerouted_replacement_may_lower_a_ceiling_that_is_over_already() -> None:
    # the cluster is over its ceiling: a cheaper replacement in general lowers what it counts, so it is allowed
    nodes = [node("big", "m5.4xlarge")]
    snap = snapshot(nodes, [pod("p", "big")], pools=SPOT_POOLS)
    caps = policy(
        "cost-caps",
        costCeilings={
            "nodePools": [{"name": "batch", "maxPricePerHour": "0.01"}],
            "cluster": {"maxPricePerHour": "0.01"},
        },
    )
    result = decide(governed(snap, caps), CATALOG, NOW)
    assert result.command is not None
    assert {r.nodepool for r in result.command.replacements} == {"general"}


def test_drift_is_still_blocked_when_every_node_pool_is_at_its_ceiling() -> None:
    # NodePool "old" no longer offers any instance type: the replacement must come from general or batch, both capped
    old = pool(
        "old", budgets=ALL, extra=[{"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["x"]}]
    )
    snap = snapshot([node("legacy", "m5.xlarge", pool_name="old")], [pod("p", "legacy")], pools=[*SPOT_POOLS, old])
    both = [{"name": "batch", "maxPricePerHour": "0.01"}, {"name": "general", "maxPricePerHour": "0.01"}]
    result = decide(governed(snap, policy("cost-caps", costCeilings={"nodePools": both})), CATALOG, NOW)
    assert result.command is None
    message = blocked_of(result)["legacy"]
    assert message.startswith("drift replacement NodeClaim of NodePool batch ($0.")
    assert "would cross the $/hour ceiling of NodePool batch ($0.01/hour, $0.00 in use" in message
    assert message.endswith("freed by the candidates): policy cost-caps")
    one = decide(governed(snap, policy("cost-caps", costCeilings={"nodePools": both[:1]})), CATALOG, NOW)
    assert one.command is not None  # general alone is not capped: the replacement goes there
    assert {r.nodepool for r in one.command.replacements} == {"general"}


def test_a_ceiling_that_cannot_bind_leaves_the_decisions_as_without_policies() -> None:
    nodes = [node("a", "m5.2xlarge"), node("b", "m5.2xlarge"), node("old", image="ami-old")]
    pods = [pod("p1", "a"), pod("p2", "b"), pod("p3", "old")]
    snap = snapshot(nodes, pods, pools=SPOT_POOLS)
    roomy = policy(
        "cost-caps",
        costCeilings={"cluster": {"maxPricePerHour": "1000"}},
        limits=[{"name": "all", "nodePools": ["general", "batch"], "resources": {"nodes": "100"}}],
    )
    assert decide(governed(snap, roomy), CATALOG, NOW) == decide(snap, CATALOG, NOW)


def test_the_solver_gets_only_the_ceilings_and_limits_that_could_bind_with_the_candidates_freed() -> None:
    # (the solver skips its merge / re-pack passes under ceilings and limits: those with room to spare stay out)
    nodes = [node("big", "m5.4xlarge")]
    snap = snapshot(nodes, [pod("p", "big")], pools=SPOT_POOLS)
    caps = policy(
        "caps",
        costCeilings={
            "cluster": {"maxPricePerHour": "1000"},
            "nodePools": [{"name": "batch", "maxPricePerHour": "0.01"}, {"name": "general", "maxPricePerHour": "0.9"}],
        },
        limits=[
            {"name": "roomy", "nodePools": ["general", "batch"], "resources": {"nodes": "100"}},
            {"name": "full", "nodePools": ["general"], "resources": {"cpu": "16"}},  # one pod needs at most one node
        ],
    )
    state = governed(snap, caps).state
    candidates = Prepared(governed(snap, caps), CATALOG, NOW).candidates
    rule = RoundPolicy.of(state, candidates, CATALOG, NOW)
    assert rule is not None
    base = build_input(state, CATALOG, now=NOW)
    moving = list(PodInputs(state, [p for c in candidates for p in c.movable]).values())
    big = [c for c in candidates if c.name == "big"]
    ceilings, groups = rule.limits(big, moving, base)
    price = big[0].price or 0.0
    # batch: $0.01 of room; general: its only node is the candidate, $0.90 of room still less than one dearest type
    assert [(c.name, c.max_per_hour, round(c.in_use, 6)) for c in ceilings] == [
        ("batch", 0.01, 0.0),
        ("general", 0.9, 0.0),
    ]
    assert [(g.name, dict(g.in_use)) for g in groups] == [("full", {"cpu": 0})]  # the candidate's 16 CPUs freed
    # without the candidate freed general's ceiling is counted with its price in use
    ceilings, groups = rule.limits([], moving, base)
    assert [(c.name, round(c.in_use, 6)) for c in ceilings] == [("batch", 0.0), ("general", round(price, 6))]
    assert [(g.name, dict(g.in_use)) for g in groups] == [("full", {"cpu": 16000})]
