"""consolidationPolicy Balanced (Karpenter v1.14): the score, the NodePool totals, and the round with it.

The numbers of the scoring cases are those of Karpenter's RFC (designs/balanced-consolidation.md) and its
balanced tests: a NodePool of eight m7i.xlarge ($4.84/day) and two m7i.2xlarge ($9.68/day), $58.08/day, 80
pods of cost 1 (disruption 90 with the 1.0 per node).
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from nodeflow.disruption.balanced import (
    BALANCED_K,
    PoolTotals,
    best_case,
    evaluate,
    pool_totals,
    score_move,
)
from nodeflow.disruption.candidates import build_candidates
from nodeflow.disruption.model import BlockKind, Reason
from nodeflow.disruption.round import decide

from .builders import CATALOG, NOW, node, pod, pool, snapshot

ALL = [{"nodes": "100%"}]
RFC = PoolTotals(cost=58.08, disruption=90)
MAX_DELETION_COST = {"controller.kubernetes.io/pod-deletion-cost": "2147483647"}  # eviction cost 10 (clamped)


def _expected(savings: float, disruption: float, totals: PoolTotals) -> float:
    return (savings / totals.cost) / (disruption / totals.disruption)


# --- the score (Karpenter's ScoreMove cases) ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("savings", "disruption", "totals", "approved"),
    [
        (7.26, 4.0, RFC, True),  # oversized m7i.2xlarge -> m7i.large, 3 pods
        (4.84, 5.0, RFC, True),  # spare-capacity delete, 4 pods
        (2.42, 9.0, RFC, False),  # marginal: m7i.xlarge -> m7i.large with 8 pods
        (2.42, 9.0, PoolTotals(48.40, 90), True),  # uniform pool: the replacement costs half, score exactly 0.5
        (4.84, 5.0, PoolTotals(58.08, 117), True),  # heterogeneous disruption: node A (4 default pods)
        (4.84, 32.0, PoolTotals(58.08, 117), False),  # node B (1 default pod, 3 at the maximum deletion cost)
    ],
)
def test_score_of_the_rfc_moves(savings: float, disruption: float, totals: PoolTotals, approved: bool) -> None:
    s = score_move(savings, disruption, totals)
    assert s.approved is approved, s.describe()
    assert s.score == pytest.approx(_expected(savings, disruption, totals))
    assert s.savings_fraction == pytest.approx(savings / totals.cost)
    assert s.disruption_fraction == pytest.approx(disruption / totals.disruption)
    assert s.k == BALANCED_K == 2
    assert s.threshold == 0.5


def test_uniform_pool_boundary_is_approved_at_exactly_half() -> None:
    s = score_move(2.42, 9.0, PoolTotals(48.40, 90))
    assert s.score == 0.5
    assert s.approved
    assert s.describe() == "score 0.50 >= threshold 0.50 (k: 2, savings 5.0%, disruption 10.0%)"


def test_zero_or_negative_savings_score_zero() -> None:
    for savings in (0.0, -5.0, math.nan):
        s = score_move(savings, 11.0, RFC)
        assert s.score == 0.0
        assert not s.approved


def test_scale_invariance() -> None:
    small = score_move(7.26, 4.0, RFC)
    large = score_move(7.26, 4.0, PoolTotals(580.80, 900))
    assert small.score == pytest.approx(large.score)


def test_zero_denominators() -> None:
    inf = score_move(4.84, 0.0, RFC)  # no disruption, positive savings
    assert math.isinf(inf.score)
    assert inf.approved
    assert inf.to_json()["score"] is None  # JSON has no Infinity
    assert not score_move(0.0, 0.0, RFC).approved
    assert not score_move(4.84, 5.0, PoolTotals(0.0, 90)).approved  # a NodePool with no cost
    assert not score_move(4.84, 5.0, PoolTotals(58.08, 0.0)).approved


@pytest.mark.parametrize(("k", "approved"), [(1, False), (2, False), (3, True)])
def test_threshold_is_one_over_k(k: int, approved: bool) -> None:
    assert score_move(2.42, 9.0, RFC, k=k).approved is approved


def test_cross_pool_equivalent_moves_score_alike() -> None:
    on_demand = score_move(4.84, 4.0, PoolTotals(48.40, 90))
    spot = score_move(1.45, 4.0, PoolTotals(14.50, 90))
    assert on_demand.score == pytest.approx(spot.score)
    assert on_demand.approved
    assert spot.approved


@pytest.mark.parametrize(
    ("savings", "disruption", "score", "approved"),
    [(20.0, 5.0, 4.0, True), (10.0, 10.0, 1.0, True), (5.0, 50.0, 0.1, False), (0.0, 10.0, 0.0, False)],
)
def test_score_table(savings: float, disruption: float, score: float, approved: bool) -> None:
    s = score_move(savings, disruption, PoolTotals(100.0, 100.0))
    assert s.score == pytest.approx(score)
    assert s.approved is approved


# --- NodePool totals and the move's verdict over real candidates --------------------------------------------------


def _candidates(nodes: list, pods: list, pools: list | None = None) -> dict:
    built = build_candidates(snapshot(nodes, pods, pools=pools or [pool(policy="Balanced")]), CATALOG, NOW)
    return {c.name: c for c in built}


def test_totals_count_every_node_of_the_pool() -> None:
    price = CATALOG.on_demand_prices["m5.xlarge"]
    cs = _candidates(
        [node(f"n{i}", "m5.xlarge") for i in range(5)],
        [pod(f"p{i}", f"n{i}") for i in range(5)],
    )
    (totals,) = pool_totals(cs.values()).values()
    assert totals.cost == pytest.approx(5 * price)
    assert totals.disruption == pytest.approx(5 * 2.0)  # 1 per node + 1 per default pod


def test_totals_include_blocked_nodes_and_unpriced_ones_cost_nothing() -> None:
    price = CATALOG.on_demand_prices["m5.xlarge"]
    cs = _candidates(
        [node("a", "m5.xlarge"), node("b", "m5.xlarge", node_annotations={"karpenter.sh/do-not-disrupt": "true"})],
        [pod("p", "a"), pod("q", "b", annotations=MAX_DELETION_COST)],
    )
    assert cs["b"].blocker is not None
    unpriced = dataclasses.replace(cs["a"], price=math.nan)
    totals = pool_totals([unpriced, cs["b"]])["general"]
    assert totals.cost == pytest.approx(price)  # NaN counts 0, it does not poison the total
    assert totals.disruption == pytest.approx(2.0 + 11.0)


def test_evaluate_skips_other_policies() -> None:
    cs = _candidates([node("a"), node("b")], [pod("p", "a"), pod("q", "b")], pools=[pool()])
    approved, scores = evaluate([cs["a"]], 1.0, pool_totals(cs.values()))
    assert approved
    assert scores == ()


def test_evaluate_rejects_no_candidates_and_missing_totals() -> None:
    cs = _candidates([node("a")], [pod("p", "a")])
    assert evaluate([], 1.0, {}) == (False, ())
    approved, (score,) = evaluate([cs["a"]], 0.384, {})
    assert not approved
    assert score.score == 0.0


def test_deleting_one_of_ten_uniform_nodes_scores_one() -> None:
    cs = _candidates([node(f"n{i}", "m5.xlarge") for i in range(10)], [pod(f"p{i}", f"n{i}") for i in range(10)])
    approved, (score,) = evaluate([cs["n0"]], cs["n0"].price or 0, pool_totals(cs.values()))
    assert approved
    assert score.score == pytest.approx(1.0)


def test_single_node_pool_delete_scores_one() -> None:
    cs = _candidates([node("only", "m5.xlarge")], [pod("p", "only")])
    approved, (score,) = evaluate([cs["only"]], cs["only"].price or 0, pool_totals(cs.values()))
    assert approved
    assert score.savings_fraction == pytest.approx(1.0)
    assert score.disruption_fraction == pytest.approx(1.0)


def test_cross_pool_savings_are_shared_by_source_price() -> None:
    pools = [pool("bal", policy="Balanced"), pool("std")]
    nodes = [node(f"b{i}", "m5.xlarge", pool_name="bal") for i in range(5)]
    nodes += [node(f"s{i}", "m5.2xlarge", pool_name="std") for i in range(5)]
    cs = _candidates(nodes, [pod(f"p{n[0].metadata.name}", n[0].metadata.name) for n in nodes], pools)
    move = [cs["b0"], cs["s0"]]
    saved = sum(c.price or 0 for c in move)
    approved, (score,) = evaluate(move, saved, pool_totals(cs.values()))  # only the Balanced NodePool scores
    assert approved
    assert score.nodepool == "bal"
    assert score.savings == pytest.approx(cs["b0"].price)  # its node's share of the saving
    assert score.score == pytest.approx(1.0)


def test_every_balanced_pool_must_approve() -> None:
    pools = [pool("a", policy="Balanced"), pool("b", policy="Balanced")]
    nodes = [node(f"a{i}", "m5.xlarge", pool_name="a") for i in range(10)]
    nodes += [node("heavy", "m5.large", pool_name="b"), node("light", "m5.large", pool_name="b")]
    pods = [pod(f"pa{i}", f"a{i}", "100m", "128Mi") for i in range(10)]
    pods += [pod(f"h{i}", "heavy", "10m", "16Mi", annotations=MAX_DELETION_COST) for i in range(4)]
    pods += [pod("l", "light", "10m", "16Mi")]
    cs = _candidates(nodes, pods, pools)
    move = [cs["a0"], cs["heavy"]]
    # a saving of a third of the moved price: pool a scores (1/30)/(2/20) (rejected), b too: every pool must pass
    approved, scores = evaluate(move, sum(c.price or 0 for c in move) / 3, pool_totals(cs.values()))
    assert not approved
    assert [s.nodepool for s in scores] == ["a", "b"]
    assert not scores[1].approved
    # deleting both outright: pool a scores 1.0, pool b 0.5 / (41/44) > 0.5: both approve
    approved, scores = evaluate(move, sum(c.price or 0 for c in move), pool_totals(cs.values()))
    assert approved
    assert scores[1].disruption == pytest.approx(41.0)


def test_best_case_rules_out_nodes_whose_delete_would_fail() -> None:
    cs = _candidates(
        [node("heavy", "m5.xlarge"), node("light", "m5.xlarge"), node("light2", "m5.xlarge")],
        [pod(f"h{i}", "heavy", "100m", "128Mi", annotations=MAX_DELETION_COST) for i in range(3)]
        + [pod("l", "light"), pod("l2", "light2")],
    )
    totals = pool_totals(cs.values())
    failing = best_case(cs["heavy"], totals)
    assert failing is not None  # a third of the cost for 31/35 of the disruption
    assert failing.score == pytest.approx((1 / 3) / (31 / 35))
    assert best_case(cs["light"], totals) is None


# --- the round ----------------------------------------------------------------------------------------------------


def _marginal(policy: str) -> object:
    """Node a: eight small pods on an m5.xlarge; node b: an m5.xlarge filled by one pod. Replacing either with a
    cheaper type saves little next to the disruption (b: $0.02/h; a: 28% of the cost for 82% of the disruption)."""
    pods = [pod(f"a{i}", "a", "200m", "512Mi") for i in range(8)] + [pod("big", "b", "3500m", "12Gi")]
    return snapshot([node("a", "m5.xlarge"), node("b", "m5.xlarge")], pods, pools=[pool(budgets=ALL, policy=policy)])


def test_balanced_rejects_marginal_moves_that_underutilized_takes() -> None:
    taken = decide(_marginal("WhenEmptyOrUnderutilized"), CATALOG, NOW).command
    assert taken is not None
    assert taken.decision == "replace"
    assert taken.scores == ()
    assert "balanced" not in taken.to_json()
    result = decide(_marginal("Balanced"), CATALOG, NOW)
    assert result.command is None
    why = {b.node: b for b in result.blocked}
    assert set(why) == {"a", "b"}
    for b in why.values():
        assert b.kind is BlockKind.UNCONSOLIDATABLE
        assert "Balanced consolidation rejected the replace" in b.message
        assert "< threshold 0.50 (k: 2," in b.message


def test_balanced_takes_an_oversized_node_with_its_score() -> None:
    s = snapshot(
        [node("big", "m5.4xlarge")], [pod("p", "big", "1", "2Gi")], pools=[pool(budgets=ALL, policy="Balanced")]
    )
    command = decide(s, CATALOG, NOW).command
    assert command is not None
    assert command.decision == "replace"
    (score,) = command.scores
    assert score.approved
    assert score.nodepool == "general"
    assert score.savings == pytest.approx(command.saved)
    assert score.disruption_fraction == pytest.approx(1.0)  # the only node of its NodePool
    out = json.loads(json.dumps(command.to_json()))
    (shown,) = out["balanced"]
    assert shown["approved"] is True
    assert shown["k"] == 2
    assert shown["threshold"] == 0.5
    assert shown["score"] == pytest.approx(score.score)


KEEP = {"karpenter.sh/do-not-disrupt": "true"}


def test_balanced_totals_in_the_round_count_blocked_nodes() -> None:
    # m5.xlarge nodes: a and b hold four small pods each (b's costly to evict), c is blocked (do-not-disrupt)
    nodes = [node("a", "m5.xlarge"), node("b", "m5.xlarge"), node("c", "m5.xlarge", node_annotations=KEEP)]
    pods = [pod(f"a{i}", "a", "100m", "256Mi") for i in range(4)] + [pod("b0", "b", "100m", "256Mi")]
    pods += [pod(f"b{i}", "b", "100m", "256Mi", annotations=MAX_DELETION_COST) for i in range(1, 4)]
    pods += [pod("c0", "c", "1", "2Gi")]
    s = snapshot(nodes, pods, pools=[pool(budgets=[{"nodes": "1"}], policy="Balanced")])
    result = decide(s, CATALOG, NOW)
    assert result.command is not None
    assert result.command.candidates == ("a",)
    assert result.command.decision == "delete"
    (score,) = result.command.scores
    assert score.disruption == pytest.approx(5.0)
    assert score.totals.disruption == pytest.approx(5.0 + 32.0 + 2.0)
    assert score.totals.cost == pytest.approx(3 * CATALOG.on_demand_prices["m5.xlarge"])


def test_balanced_does_not_simulate_a_node_whose_delete_would_be_rejected() -> None:
    nodes = [node("b", "m5.xlarge")] + [node(n, "m5.xlarge", node_annotations=KEEP) for n in ("c", "d")]
    pods = [pod("b0", "b", "100m", "256Mi")]
    pods += [pod(f"b{i}", "b", "100m", "256Mi", annotations=MAX_DELETION_COST) for i in range(1, 4)]
    pods += [pod("c0", "c", "1", "2Gi"), pod("d0", "d", "1", "2Gi")]
    result = decide(snapshot(nodes, pods, pools=[pool(budgets=ALL, policy="Balanced")]), CATALOG, NOW)
    assert result.command is None
    messages = {b.node: b.message for b in result.blocked if b.kind is BlockKind.UNCONSOLIDATABLE}
    # a third of the NodePool's price for 32/36 of its disruption
    assert messages == {
        "b": "Balanced consolidation: even deleting it would be rejected: "
        "score 0.38 < threshold 0.50 (k: 2, savings 33.3%, disruption 88.9%)"
    }
    under = decide(snapshot(nodes, pods, pools=[pool(budgets=ALL)]), CATALOG, NOW).command
    assert under is not None  # WhenEmptyOrUnderutilized deletes it
    assert under.candidates == ("b",)


def test_mixed_policies_score_only_the_balanced_pool() -> None:
    pools = [pool("bal", budgets=ALL, policy="Balanced"), pool("std", budgets=ALL)]
    pods = [pod(f"x{i}", "bal-a", "200m", "512Mi") for i in range(8)] + [pod("bigx", "bal-b", "3500m", "12Gi")]
    pods += [pod(f"y{i}", "std-a", "200m", "512Mi") for i in range(8)] + [pod("bigy", "std-b", "3500m", "12Gi")]
    nodes = [node("bal-a", "m5.xlarge", pool_name="bal"), node("bal-b", "m5.xlarge", pool_name="bal")]
    nodes += [node("std-a", "m5.xlarge", pool_name="std"), node("std-b", "m5.xlarge", pool_name="std")]
    result = decide(snapshot(nodes, pods, pools=pools), CATALOG, NOW)
    assert result.command is not None
    assert all(c.startswith("std-") for c in result.command.candidates)
    assert result.command.scores == ()


def test_empty_nodes_of_balanced_pools_go_by_emptiness_unscored() -> None:
    s = snapshot(
        [node("empty", "m5.xlarge"), node("busy", "m5.xlarge")],
        [pod("p", "busy")],
        pools=[pool(budgets=ALL, policy="Balanced")],
    )
    command = decide(s, CATALOG, NOW).command
    assert command is not None
    assert command.reason is Reason.EMPTY
    assert command.candidates == ("empty",)
    assert command.scores == ()


def test_balanced_waits_for_consolidate_after() -> None:
    s = snapshot(
        [node("big", "m5.4xlarge")],
        [pod("p", "big", "1", "2Gi", created="2026-11-21T11:59:50Z")],
        pools=[pool(budgets=ALL, policy="Balanced", after="5m")],
    )
    assert decide(s, CATALOG, NOW).command is None


def test_balanced_multi_node_move_carries_scores() -> None:
    nodes = [node(f"n{i}", "m5.2xlarge") for i in range(4)]
    pods = [pod(f"p{i}", f"n{i}", "500m", "1Gi") for i in range(4)]
    command = decide(snapshot(nodes, pods, pools=[pool(budgets=ALL, policy="Balanced")]), CATALOG, NOW).command
    assert command is not None
    assert command.method == "multi-node consolidation"
    (score,) = command.scores
    assert score.approved
    assert score.disruption == pytest.approx(2.0 * len(command.candidates))


# --- the API value ------------------------------------------------------------------------------------------------


def test_the_policy_value_is_balanced_exactly() -> None:
    assert pool(policy="Balanced").spec.disruption.consolidation_policy == "Balanced"
    for wrong in ("balanced", "BALANCED", "Balanced2"):
        with pytest.raises(ValueError, match="consolidationPolicy"):
            pool(policy=wrong)
