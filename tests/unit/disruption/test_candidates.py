from __future__ import annotations

from nodeflow.disruption.candidates import build_candidates

from .builders import CATALOG, NOW, node, pod, snapshot


def test_candidates_ordered_by_disruption_cost() -> None:
    s = snapshot(
        [node("many"), node("few"), node("vip"), node("old", created="2026-10-23T00:00:00Z")],
        [
            *[pod(f"m{i}", "many", "100m", "64Mi") for i in range(3)],
            pod("f", "few", "100m", "64Mi"),
            pod("v", "vip", "100m", "64Mi", priority=1_000_000_000),
            *[pod(f"o{i}", "old", "100m", "64Mi") for i in range(3)],
        ],
    )
    order = [c.name for c in build_candidates(s, CATALOG, NOW)]
    # "old" has 3 pods but little lifetime left (720h expireAfter, created 29 days ago)
    assert order == ["old", "few", "many", "vip"]


def test_price_and_movable_pods() -> None:
    s = snapshot(
        [node("a", "m5.xlarge")],
        [pod("app", "a"), pod("ds", "a", owner="DaemonSet"), pod("mirror", "a", owner="Node")],
    )
    (c,) = build_candidates(s, CATALOG, NOW)
    assert c.price == CATALOG.on_demand_prices["m5.xlarge"]
    assert [p.name for p in c.movable] == ["app"]
    assert len(c.pods) == 3


def test_unmanaged_nodes_are_not_candidates() -> None:
    s = snapshot([node("a", pool_name="elsewhere")], [])
    assert build_candidates(s, CATALOG, NOW) == ()
