from __future__ import annotations

import dataclasses

import pytest

from nodeflow.disruption.model import BlockKind, Reason, Settings, Snapshot
from nodeflow.disruption.round import decide
from nodeflow.disruption.simulation import Simulator

from .builders import CATALOG, NOW, node, pod, pool, snapshot

ALL = [{"nodes": "100%"}]


def test_delete_when_pods_fit_on_other_nodes() -> None:
    s = snapshot([node("a"), node("b")], [pod("p1", "a"), pod("p2", "b")], pools=[pool(budgets=[{"nodes": "1"}])])
    command = decide(s, CATALOG, NOW).command
    assert command is not None
    assert command.reason is Reason.UNDERUTILIZED
    assert command.method == "single-node consolidation"
    assert command.decision == "delete"
    assert command.price_after == 0
    (move,) = command.moves
    assert move.node is not None
    assert move.node not in command.candidates


def test_replace_with_one_cheaper_node() -> None:
    s = snapshot([node("big", "m5.4xlarge")], [pod("p", "big", "1", "2Gi")], pools=[pool(budgets=ALL)])
    command = decide(s, CATALOG, NOW).command
    assert command is not None
    assert command.decision == "replace"
    (replacement,) = command.replacements
    assert replacement.price < command.price_before
    assert command.saved > 0
    assert command.moves[0].replacement == 0
    prices = CATALOG.on_demand_prices
    assert all(prices[t] < command.price_before for t in replacement.instance_types)


def test_no_replacement_that_is_not_cheaper() -> None:
    only = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large", "m5.xlarge"]}]
    s = snapshot(
        [node("right", "m5.large")], [pod("p", "right", "1500m", "6Gi")], pools=[pool(budgets=ALL, extra=only)]
    )
    result = decide(s, CATALOG, NOW)
    assert result.command is None
    (blocked,) = result.blocked
    assert blocked.kind is BlockKind.UNCONSOLIDATABLE


def test_unavailable_offerings_are_not_used_for_replacements() -> None:
    s = snapshot([node("big", "m5.4xlarge")], [pod("p", "big", "1", "2Gi")], pools=[pool(budgets=ALL)])
    first = decide(s, CATALOG, NOW).command
    assert first is not None
    assert first.replacements
    cheapest = first.replacements[0].instance_types[0]
    gone = frozenset((cheapest, z, "on-demand") for z in ("us-east-1a", "us-east-1b"))
    second = decide(s, CATALOG, NOW, unavailable=gone).command
    assert second is not None
    assert second.replacements
    assert cheapest not in second.replacements[0].instance_types


def test_multi_node_consolidation_merges_nodes() -> None:
    nodes = [node(f"n{i}", "m5.xlarge") for i in range(4)]
    pods = [pod(f"p{i}", f"n{i}", "1500m", "4Gi") for i in range(4)]
    command = decide(snapshot(nodes, pods, pools=[pool(budgets=ALL)]), CATALOG, NOW).command
    assert command is not None
    assert command.method == "multi-node consolidation"
    assert len(command.candidates) >= 2
    assert len(command.replacements) <= 1
    assert command.price_after < command.price_before
    assert {m.pod for m in command.moves} == {f"default/p{n[1:]}" for n in command.candidates}


def test_multi_node_respects_the_candidate_limit() -> None:
    nodes = [node(f"n{i}", "m5.xlarge") for i in range(4)]
    pods = [pod(f"p{i}", f"n{i}", "500m", "1Gi") for i in range(4)]
    s = snapshot(nodes, pods, pools=[pool(budgets=ALL)])
    command = decide(s, CATALOG, NOW, settings=Settings(multi_node_candidates=2)).command
    assert command is not None
    assert len(command.candidates) <= 2


def test_pods_that_fit_nowhere_block_consolidation() -> None:
    s = snapshot(
        [node("a", "m5.xlarge")],
        [pod("huge", "a", "3", "12Gi", labels={"app": "x"})],
        pools=[
            pool(
                budgets=ALL,
                extra=[{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.xlarge"]}],
            )
        ],
    )
    result = decide(s, CATALOG, NOW)
    assert result.command is None
    assert result.blocked[0].kind is BlockKind.UNCONSOLIDATABLE


def test_spot_to_spot_is_off_by_default() -> None:
    s = snapshot(
        [node("s", "m5.4xlarge", capacity="spot")], [pod("p", "s")], pools=[pool(budgets=ALL, capacity=("spot",))]
    )
    result = decide(s, CATALOG, NOW)
    assert result.command is None
    assert "spot-to-spot" in result.blocked[0].message
    on = decide(s, CATALOG, NOW, settings=Settings(spot_to_spot_consolidation=True)).command
    assert on is not None
    assert on.replacements[0].capacity_type == "spot"
    assert len(on.replacements[0].instance_types) >= 15


def test_spot_to_spot_needs_enough_cheaper_types() -> None:
    s = snapshot(
        [node("s", "m5.4xlarge", capacity="spot")], [pod("p", "s")], pools=[pool(budgets=ALL, capacity=("spot",))]
    )
    strict = Settings(spot_to_spot_consolidation=True, spot_to_spot_min_types=10_000)
    result = decide(s, CATALOG, NOW, settings=strict)
    assert result.command is None
    assert "cheaper spot instance types" in result.blocked[0].message


def test_on_demand_to_spot_replacement_is_allowed() -> None:
    s = snapshot(
        [node("od", "m5.4xlarge")], [pod("p", "od")], pools=[pool(budgets=ALL, capacity=("spot", "on-demand"))]
    )
    command = decide(s, CATALOG, NOW).command
    assert command is not None
    assert command.replacements[0].capacity_type == "spot"


def _types_with_min_values(types: list[str], min_values: int) -> list[dict[str, object]]:
    return [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": types, "minValues": min_values}]


def test_a_replacement_narrowed_below_min_values_is_not_made() -> None:
    # only m5.large is cheaper than the m5.xlarge: one instance type where the NodePool wants two
    extra = _types_with_min_values(["m5.large", "m5.xlarge", "m5.2xlarge", "m5.4xlarge"], 2)
    s = snapshot([node("n", "m5.xlarge")], [pod("p", "n", "1", "2Gi")], pools=[pool(budgets=ALL, extra=extra)])
    result = decide(s, CATALOG, NOW)
    assert result.command is None
    (blocked,) = result.blocked
    assert blocked.kind is BlockKind.UNCONSOLIDATABLE
    assert "minValues" in blocked.message
    assert "node.kubernetes.io/instance-type needs 2" in blocked.message


def test_a_replacement_that_still_meets_min_values_is_made() -> None:
    extra = _types_with_min_values(["m5.large", "c5.large", "m5.xlarge", "m5.2xlarge"], 2)
    s = snapshot([node("n", "m5.xlarge")], [pod("p", "n", "1", "2Gi")], pools=[pool(budgets=ALL, extra=extra)])
    command = decide(s, CATALOG, NOW).command
    assert command is not None
    (replacement,) = command.replacements
    assert set(replacement.instance_types) == {"m5.large", "c5.large"}


def test_a_replacement_is_priced_at_its_dearest_zone() -> None:
    """Karpenter's launch price is the worst case: a spot type that is cheap in one zone but dearer than the
    node in another may land there, so it is no cheaper replacement."""
    spot = dict(CATALOG.spot_prices)
    for it in ("m5.large", "c5.large"):
        spot[(it, "us-east-1a")] = 0.2  # dearer than the m5.large on-demand node ($0.096)
        spot[(it, "us-east-1b")] = 0.02
    zonal = dataclasses.replace(CATALOG, spot_prices=spot)
    only = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large", "c5.large"]}]
    s = snapshot(
        [node("od", "m5.large")],
        [pod("p", "od", "500m", "1Gi")],
        pools=[pool(budgets=ALL, capacity=("spot", "on-demand"), extra=only)],
    )
    result = decide(s, zonal, NOW)
    assert result.command is None
    (blocked,) = result.blocked
    assert blocked.kind is BlockKind.UNCONSOLIDATABLE
    # with the same price in every zone the spot replacement is made
    spot[("m5.large", "us-east-1a")] = spot[("c5.large", "us-east-1a")] = 0.02
    cheap = dataclasses.replace(CATALOG, spot_prices=spot)
    command = decide(s, cheap, NOW).command
    assert command is not None
    assert command.replacements[0].capacity_type == "spot"


def _two_third_full_m5_4xlarge() -> Snapshot:
    """Two m5.4xlarge, each running three pods of 3 CPU and 12Gi."""
    nodes = [node("a", "m5.4xlarge"), node("b", "m5.4xlarge")]
    pods = [pod(f"p{i}", "ab"[i % 2], "3", "12Gi") for i in range(6)]
    return snapshot(nodes, pods, pools=[pool(budgets=ALL)])


def test_pods_the_cost_sized_plan_spreads_over_several_nodes_are_packed_on_one() -> None:
    # Sized for cost, the six pods go on several small nodes (cheaper than one large one); Karpenter's scheduler packs
    # them on one NodeClaim, which is what consolidation may launch: one node, cheaper than the two it replaces.
    # (Without the replace bar, as Karpenter: the move saves 10% of the NodePool for all its pods, which the bar
    # refuses: test_a_replace_saving_little_for_the_pods_it_evicts_is_refused.)
    command = decide(_two_third_full_m5_4xlarge(), CATALOG, NOW, settings=Settings(replace_bar_k=0)).command
    assert command is not None
    assert command.method == "multi-node consolidation"
    assert set(command.candidates) == {"a", "b"}
    (replacement,) = command.replacements
    assert {m.replacement for m in command.moves} == {0}
    assert replacement.price < command.price_before
    assert all(CATALOG.on_demand_prices[t] < command.price_before for t in replacement.instance_types)


def test_a_right_sized_node_first_in_the_order_does_not_stop_multi_node_consolidation() -> None:
    # "full" is first by savings per disruption, but no type of the NodePool cheaper than it holds its pod, so every
    # prefix holding it fails (Karpenter's search finds nothing, single-node takes one node); with it moved last the
    # search consolidates the small nodes together.
    types = ["m5.large", "m5.xlarge", "m5.2xlarge", "m5.4xlarge"]
    only = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": types}]
    nodes = [node("full", "m5.4xlarge")] + [node(f"n{i}", "m5.xlarge") for i in range(4)]
    pods = [pod("big", "full", "15", "60Gi")] + [pod(f"p{i}", f"n{i}", "1500m", "4Gi") for i in range(4)]
    s = snapshot(nodes, pods, pools=[pool(budgets=ALL, extra=only)])
    command = decide(s, CATALOG, NOW).command
    assert command is not None
    assert command.method == "multi-node consolidation"
    assert "full" not in command.candidates
    assert len(command.candidates) >= 2
    assert command.saved >= 2 * CATALOG.on_demand_prices["m5.xlarge"] - 1e-9


# --- nodeflow's replace bar (Settings.replace_bar_k): a replace must save enough for the pods it evicts -----------


def test_a_replace_saving_little_for_the_pods_it_evicts_is_refused() -> None:
    # m5.2xlarge -> m5a.2xlarge saves $0.04/h (10.4% of the NodePool) and evicts every pod of the NodePool: score
    # 0.10, under the bar of 1/4.5. Karpenter (no bar) makes the replacement.
    s = snapshot([node("a", "m5.2xlarge")], [pod(f"p{i}", "a", "1500m", "6Gi") for i in range(4)], pools=[pool()])
    karpenter = decide(s, CATALOG, NOW, settings=Settings(replace_bar_k=0)).command
    assert karpenter is not None
    assert karpenter.decision == "replace"
    assert karpenter.saved < karpenter.price_before / 4.5
    result = decide(s, CATALOG, NOW)
    assert result.command is None
    (blocked,) = result.blocked
    assert blocked.kind is BlockKind.UNCONSOLIDATABLE
    # refused before any simulation: the cheapest type holding its pods (m5a.2xlarge) bounds the saving
    assert blocked.message.startswith(
        "the replacement saves too little for the pods it evicts (saving at most $0.0400/h)"
    )
    assert "score 0.10 < threshold 0.22 (k: 4.5, savings 10.4%, disruption 100.0%)" in blocked.message


def test_the_replace_bar_refuses_a_packed_multi_node_replace_for_one_that_saves_more_per_eviction() -> None:
    # The two m5.4xlarge of test_pods_the_cost_sized_plan_spreads_over_several_nodes_are_packed_on_one: one node for
    # both saves 10% of the NodePool and evicts all its pods (score 0.10); the bar refuses it, and single-node
    # consolidation replaces "a" alone (some of its pods to "b"), saving more for fewer evictions.
    s = _two_third_full_m5_4xlarge()
    karpenter = decide(s, CATALOG, NOW, settings=Settings(replace_bar_k=0)).command
    assert karpenter is not None
    assert (karpenter.method, len(karpenter.moves)) == ("multi-node consolidation", 6)
    command = decide(s, CATALOG, NOW).command
    assert command is not None
    assert (command.method, command.candidates, command.decision) == ("single-node consolidation", ("a",), "replace")
    assert command.saved > karpenter.saved
    assert len(command.moves) == 3


def test_a_replace_saving_enough_for_its_evictions_passes_the_bar() -> None:
    # one 1-CPU pod on an m5.4xlarge: a small node saves most of the price for one eviction
    s = snapshot([node("big", "m5.4xlarge")], [pod("p", "big", "1", "2Gi")], pools=[pool(budgets=ALL)])
    command = decide(s, CATALOG, NOW).command
    assert command is not None
    assert command.decision == "replace"
    assert command.saved > command.price_before / 4.5


def test_a_delete_is_never_held_back_by_the_replace_bar() -> None:
    # Deleting "a" moves 10 pods (85% of the NodePool's disruption) to save $0.096/h (11% of its price): as a replace
    # it would score 0.13 < 0.22, but a delete launches nothing and is made.
    only = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large", "m5.4xlarge"]}]
    nodes = [node("a", "m5.large"), node("b", "m5.4xlarge")]
    pods = [pod(f"p{i}", "a", "100m", "128Mi") for i in range(10)] + [pod("q", "b", "14", "50Gi")]
    command = decide(snapshot(nodes, pods, pools=[pool(budgets=ALL, extra=only)]), CATALOG, NOW).command
    assert command is not None
    assert (command.decision, command.candidates) == ("delete", ("a",))
    assert len(command.moves) == 10


def test_pods_no_single_node_holds_bound_the_replace_before_simulating(monkeypatch: pytest.MonkeyPatch) -> None:
    # The other nodes' room, summed, holds a's four pods (1500m, 6Gi each), but it is split: the "cpu" nodes have CPU
    # and no memory left, the "mem" nodes memory and no CPU. No node holds one of the pods alone, so a new node
    # must take all four: at least an m5a.2xlarge, saving at most $0.04/h, which the bar refuses unsimulated.
    nodes = [node("a", "m5.2xlarge")]
    nodes += [node(f"{kind}{i}", "m5.xlarge", pool_name="fixed") for kind in ("cpu", "mem") for i in range(2)]
    pods = [pod(f"p{i}", "a", "1500m", "6Gi") for i in range(4)]
    pods += [pod(f"c{i}", f"cpu{i}", "200m", "14Gi") for i in range(2)]
    pods += [pod(f"m{i}", f"mem{i}", "3500m", "1Gi") for i in range(2)]
    s = snapshot(nodes, pods, pools=[pool(), pool(name="fixed", after="Never")])
    bar = "the replacement saves too little for the pods it evicts"
    result = decide(s, CATALOG, NOW)
    assert result.command is None
    assert {b.node: b.message for b in result.blocked}["a"].startswith(f"{bar} (saving at most $0.0400/h)")
    with monkeypatch.context() as m:  # the summed room alone: a is simulated, and refused after
        m.setattr(Simulator, "_stranded", lambda self, candidates: {})
        summed = decide(s, CATALOG, NOW)
    assert summed.command is None
    assert {b.node: b.message for b in summed.blocked}["a"].startswith(f"{bar} (saving $0.0400/h)")
