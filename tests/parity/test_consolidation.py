"""Parity: Karpenter's consolidation suite (pkg/controllers/disruption/consolidation_test.go), through
``disrupt --dry-run -o json`` (and ``plan`` for the one provisioning spec).

Upstream runs a fake cloud provider whose prices the tests set; here the bundled us-east-1 catalog prices the
nodes, so "the most expensive instance type" is the priciest type a NodePool allows (m5.4xlarge by default)
and "the least expensive" the cheapest. Spot prices in the bundled catalog are one estimate per type, the same
in every zone.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import Any

from nodeflow.catalog.offline import load_offline

from .harness import (
    CAPACITY_TYPE,
    HOSTNAME,
    INSTANCE_TYPE,
    NOW,
    RID,
    ZONE,
    Obj,
    affinity_term,
    ago,
    disrupt,
    managed_node,
    node,
    node_class,
    node_pool,
    pdb,
    plan,
    pod,
    requirement,
    reservations,
    reserved_class,
    spread,
    ts,
)
from .upstream import mirrors

UPSTREAM = "pkg/controllers/disruption/consolidation_test.go"

_CATALOG = load_offline("us-east-1")
_Z = "us-east-1a"

# The default NodePool's instance types, cheapest first (on-demand and spot order alike).
TYPES = ("c5.large", "m5.large", "c5.xlarge", "m5.xlarge", "c5.2xlarge", "m5.2xlarge", "c5.4xlarge", "m5.4xlarge")
MOST = TYPES[-1]
LEAST = TYPES[0]


def _spot(it: str) -> float:
    return _CATALOG.spot_prices[(it, _Z)]


def _distinct_by_price(families: Sequence[str], sizes: Sequence[str], count: int) -> tuple[str, ...]:
    """``count`` instance types of ``families`` x ``sizes`` with pairwise different spot prices, cheapest first."""
    seen: dict[float, str] = {}
    for fam in families:
        for size in sizes:
            it = f"{fam}.{size}"
            if (it, _Z) in _CATALOG.spot_prices and _CATALOG.infos[it].vcpus >= 2:
                seen.setdefault(_spot(it), it)
    ordered = [seen[p] for p in sorted(seen)]
    assert len(ordered) >= count, ordered
    return tuple(ordered[:count])


# Twenty spot types with distinct prices: enough for spot-to-spot's 15 cheaper options.
WIDE = _distinct_by_price(
    ("m5", "c5", "r5", "m5a", "c5a", "r5a", "m6a", "c6a", "m7i", "c7i", "m7a", "c7a"),
    ("large", "xlarge", "2xlarge"),
    20,
)


# --- builders -----------------------------------------------------------------------------------------------------


def pool(
    name: str = "default",
    *,
    types: Sequence[str] | None = TYPES,
    capacity: Sequence[str] | None = ("on-demand",),
    nodes: str | None = "100%",
    policy: str = "WhenEmptyOrUnderutilized",
    after: str = "0s",
    min_values: int | None = None,
    **kw: Any,
) -> Obj:
    """A NodePool over ``types`` (None: the whole catalog) and ``capacity`` types, budget ``nodes``."""
    reqs: list[Obj] = []
    if capacity is not None:
        reqs.append(requirement(CAPACITY_TYPE, "In", *capacity))
    if types is not None:
        reqs.append(requirement(INSTANCE_TYPE, "In", *types, min_values=min_values))
    disruption: Obj = {"consolidationPolicy": policy, "consolidateAfter": after}
    if nodes is not None:
        disruption["budgets"] = [{"nodes": nodes}]
    return node_pool(name, requirements=reqs, disruption=disruption, **kw)


def mn(
    name: str,
    it: str = MOST,
    *,
    ct: str = "on-demand",
    last_pod_event: str | None = None,
    claim_spec: Obj | None = None,
    **kw: Any,
) -> list[Obj]:
    """A managed node and its NodeClaim (``last_pod_event``: the claim's status.lastPodEventTime)."""
    objs = managed_node(name, instance_type=it, capacity_type=ct, **kw)
    if last_pod_event is not None:
        objs[1]["status"]["lastPodEventTime"] = last_pod_event
    if claim_spec:
        objs[1]["spec"].update(claim_spec)
    return objs


def pods_on(node_name: str, *names: str, started: str | None = None, **kw: Any) -> list[Obj]:
    """Pods ``names`` (label app=web) bound to ``node_name`` (``started``: their status.startTime)."""
    out = [pod(n, node=node_name, labels={"app": "web"}, **kw) for n in names]
    if started is not None:
        for p in out:
            p["status"]["startTime"] = started
    return out


def base(*pools: Obj) -> list[Obj]:
    return [node_class(), *(pools or (pool(),))]


def strip_label(objs: list[Obj], key: str) -> list[Obj]:
    """``objs`` (a node and its NodeClaim) without label ``key`` (nor a NodeClaim requirement on it)."""
    out = copy.deepcopy(objs)
    for o in out:
        o["metadata"]["labels"].pop(key, None)
        if o["kind"] == "NodeClaim":
            o["spec"]["requirements"] = [r for r in o["spec"]["requirements"] if r["key"] != key]
    return out


def command(result: Obj) -> Obj:
    cmd = result["command"]
    assert cmd is not None, f"no command; blocked: {result['blocked']}"
    return cmd


def blocked(result: Obj) -> dict[str, tuple[str, str]]:
    return {b["node"]: (b["event"], b["message"]) for b in result["blocked"]}


def unconsolidatable(result: Obj, name: str) -> str:
    event, message = blocked(result)[name]
    assert event == "Unconsolidatable", (event, message)
    return message


def types_of(cmd: Obj) -> list[str]:
    (replacement,) = cmd["replacements"]
    return list(replacement["instanceTypes"])


def start_disrupting(objects: Iterable[Obj | list[Obj]], names: Iterable[str]) -> list[Obj]:
    """The cluster after a command started on ``names``: their Node and NodeClaim deleting (pods still bound)."""
    flat: list[Obj] = []
    for o in objects:
        flat.extend([o] if isinstance(o, dict) else o)
    out = copy.deepcopy(flat)
    doomed = set(names)
    for o in out:
        owner = o.get("status", {}).get("nodeName") if o["kind"] == "NodeClaim" else o["metadata"]["name"]
        if o["kind"] in ("Node", "NodeClaim") and owner in doomed:
            o["metadata"]["deletionTimestamp"] = ts(NOW)
            o["metadata"]["finalizers"] = ["karpenter.sh/termination"]
    return out


def rounds(objects: list[Obj], *args: str, limit: int = 12) -> list[Obj]:
    """Run rounds, starting each command before the next (as the orchestration queue does), until none."""
    commands = []
    for _ in range(limit):
        cmd = disrupt(objects, *args)["command"]
        if cmd is None:
            return commands
        commands.append(cmd)
        objects = start_disrupting(objects, cmd["candidates"])
    raise AssertionError("disruption never settles")


# --- Events -------------------------------------------------------------------------------------------------------


@mirrors(
    "Consolidation / Events / should not fire an event for ConsolidationDisabled when the NodePool has "
    "consolidation set to WhenEmptyOrUnderutilized"
)
def test_an_empty_node_of_an_underutilized_pool_gets_no_unconsolidatable_event() -> None:
    result = disrupt([*base(), mn("n1")])
    assert command(result)["reason"] == "Empty"
    assert [b for b in result["blocked"] if b["event"] == "Unconsolidatable"] == []


@mirrors(
    "Consolidation / Events / should fire an event for ConsolidationDisabled when the NodePool has consolidation "
    "set to WhenEmpty"
)
def test_a_busy_node_of_a_when_empty_pool_is_unconsolidatable() -> None:
    result = disrupt([*base(pool(policy="WhenEmpty", after="1m")), mn("n1"), *pods_on("n1", "p1")])
    assert result["command"] is None
    assert "WhenEmpty" in unconsolidatable(result, "n1")


@mirrors(
    "Consolidation / Events / should fire an event for ConsolidationDisabled when the NodePool has consolidateAfter "
    "set to 'Never'"
)
def test_a_node_of_a_never_pool_is_unconsolidatable() -> None:
    result = disrupt([*base(pool(after="Never")), mn("n1"), *pods_on("n1", "p1")])
    assert result["command"] is None
    assert "consolidation disabled" in unconsolidatable(result, "n1")


@mirrors("Consolidation / Events / should fire an event when a candidate does not have a resolvable instance type")
def test_a_node_without_an_instance_type_is_unconsolidatable() -> None:
    # a young NodeClaim: one over an hour old without a known instance type is drifted (drift's own rule)
    young = strip_label(mn("n1", created=ago(minutes=10)), INSTANCE_TYPE)
    result = disrupt([*base(pool(types=None)), *young, *pods_on("n1", "p1")])
    assert result["command"] is None
    assert "instance type" in unconsolidatable(result, "n1").lower()


@mirrors("Consolidation / Events / should fire an event when a candidate does not have the capacity type label")
def test_a_node_without_a_capacity_type_is_unconsolidatable() -> None:
    result = disrupt([*base(pool(capacity=None)), *strip_label(mn("n1"), CAPACITY_TYPE), *pods_on("n1", "p1")])
    assert result["command"] is None
    assert CAPACITY_TYPE in unconsolidatable(result, "n1")


@mirrors("Consolidation / Events / should fire an event when a candidate does not have the zone label")
def test_a_node_without_a_zone_is_unconsolidatable() -> None:
    result = disrupt([*base(), *strip_label(mn("n1"), ZONE), *pods_on("n1", "p1")])
    assert result["command"] is None
    assert ZONE in unconsolidatable(result, "n1")


def test_a_node_without_a_zone_is_still_deleted_when_empty() -> None:
    """The labels consolidation needs to price a node do not matter to emptiness (upstream: other methods)."""
    result = disrupt([*base(), *strip_label(mn("n1"), ZONE)])
    assert command(result)["reason"] == "Empty"


# --- Budgets ------------------------------------------------------------------------------------------------------


def _empty_nodes(count: int, pool_name: str = "default", prefix: str = "n") -> list[Obj]:
    return [o for i in range(count) for o in mn(f"{prefix}{i}", pool=pool_name)]


def _busy_nodes(count: int, cpu: str, pool_name: str = "default", prefix: str = "n") -> list[Obj]:
    out: list[Obj] = []
    for i in range(count):
        out += mn(f"{prefix}{i}", pool=pool_name)
        out += pods_on(f"{prefix}{i}", f"{prefix}{i}-p", cpu=cpu)
    return out


def _pools(nodes_budget: str, count: int = 10) -> list[Obj]:
    return [pool(f"pool-{i}", nodes=nodes_budget) for i in range(count)]


@mirrors("Consolidation / Budgets / should only allow 3 empty nodes to be disrupted")
def test_a_30_percent_budget_empties_3_of_10() -> None:
    cmd = command(disrupt([*base(pool(nodes="30%")), *_empty_nodes(10)]))
    assert (cmd["reason"], len(cmd["candidates"])) == ("Empty", 3)


@mirrors("Consolidation / Budgets / should allow all empty nodes to be disrupted")
def test_a_100_percent_budget_empties_all() -> None:
    cmd = command(disrupt([*base(pool(nodes="100%")), *_empty_nodes(10)]))
    assert (cmd["reason"], len(cmd["candidates"])) == ("Empty", 10)


@mirrors(
    "Consolidation / Budgets / should allow no empty nodes to be disrupted",
    "Consolidation / Budgets / should not mark empty node consolidated if the candidates can't be disrupted due to "
    "budgets with one nodepool",
)
def test_a_0_percent_budget_empties_none() -> None:
    result = disrupt([*base(pool(nodes="0%")), *_empty_nodes(10)])
    assert result["command"] is None
    assert len(result["blocked"]) == 10
    assert all(event == "DisruptionBlocked" and "budget" in msg for event, msg in blocked(result).values())


@mirrors("Consolidation / Budgets / should only allow 3 nodes to be deleted in multi node consolidation delete")
def test_a_30_percent_budget_lets_multi_node_delete_3() -> None:
    cmd = command(disrupt([*base(pool(nodes="30%")), *_busy_nodes(10, "100m")]))
    assert (cmd["method"], cmd["decision"], len(cmd["candidates"])) == ("multi-node consolidation", "delete", 3)


@mirrors("Consolidation / Budgets / should only allow 3 nodes to be deleted in single node consolidation delete")
def test_a_30_percent_budget_stops_consolidation_after_3_nodes() -> None:
    # one 9-CPU pod per 16-vCPU node: each node has room for one more, so nodes go one or a few at a time
    objects = [*base(pool(nodes="30%")), *_busy_nodes(10, "7")]
    done = rounds(objects)
    assert sum(len(c["candidates"]) for c in done) == 3
    assert all(c["decision"] == "delete" for c in done)


@mirrors("Consolidation / Budgets / should allow 2 nodes from each nodePool to be deleted")
def test_a_50_percent_budget_of_3_nodes_rounds_up_to_2_per_pool() -> None:
    nodes = [o for i in range(10) for o in _empty_nodes(3, f"pool-{i}", f"p{i}-n")]
    cmd = command(disrupt([node_class(), *_pools("50%"), *nodes]))
    assert len(cmd["candidates"]) == 20
    for i in range(10):
        assert len([c for c in cmd["candidates"] if c.startswith(f"p{i}-")]) == 2


@mirrors("Consolidation / Budgets / should allow all nodes from each nodePool to be deleted")
def test_a_100_percent_budget_per_pool_deletes_all() -> None:
    nodes = [o for i in range(10) for o in _empty_nodes(3, f"pool-{i}", f"p{i}-n")]
    cmd = command(disrupt([node_class(), *_pools("100%"), *nodes]))
    assert len(cmd["candidates"]) == 30


@mirrors(
    "Consolidation / Budgets / should allow no nodes from each nodePool to be deleted",
    "Consolidation / Budgets / should not mark empty node consolidated if all candidates can't be disrupted due to "
    "budgets with many nodepools",
)
def test_a_0_percent_budget_per_pool_deletes_none() -> None:
    nodes = [o for i in range(10) for o in _empty_nodes(3, f"pool-{i}", f"p{i}-n")]
    result = disrupt([node_class(), *_pools("0%"), *nodes])
    assert result["command"] is None
    assert len(result["blocked"]) == 30
    assert all("budget" in msg for _, msg in blocked(result).values())


@mirrors(
    "Consolidation / Budgets / should not mark multi node consolidated if the candidates can't be disrupted due to "
    "budgets with one nodepool",
    "Consolidation / Budgets / should not mark single node consolidated if the candidates can't be disrupted due to "
    "budgets with one nodepool",
)
def test_busy_nodes_under_a_0_percent_budget_are_blocked_not_unconsolidatable() -> None:
    objects = [*base(pool(nodes="0%")), *_busy_nodes(10, "1")]
    result = disrupt(objects)
    assert result["command"] is None
    assert len(result["blocked"]) == 10
    assert all(event == "DisruptionBlocked" and "budget" in msg for event, msg in blocked(result).values())
    # nothing is remembered as consolidated: the same nodes consolidate as soon as the budget allows
    assert disrupt([*base(pool(nodes="100%")), *_busy_nodes(10, "1")])["command"] is not None


@mirrors(
    "Consolidation / Budgets / should not mark multi node consolidated if all candidates can't be disrupted due to "
    "budgets with many nodepools",
    "Consolidation / Budgets / should not mark single node consolidated if all candidates can't be disrupted due to "
    "budgets with many nodepools",
)
def test_busy_nodes_of_many_pools_under_0_percent_budgets_are_blocked() -> None:
    nodes = [o for i in range(10) for o in _busy_nodes(3, "1", f"pool-{i}", f"p{i}-n")]
    result = disrupt([node_class(), *_pools("0%"), *nodes])
    assert result["command"] is None
    assert len(result["blocked"]) == 30
    assert all(event == "DisruptionBlocked" and "budget" in msg for event, msg in blocked(result).values())


# --- Replace ------------------------------------------------------------------------------------------------------


@mirrors("Consolidation / Replace / can replace node / if the candidate is on-demand node")
def test_an_on_demand_node_is_replaced_by_a_cheaper_one() -> None:
    cmd = command(disrupt([*base(), *mn("n1"), *pods_on("n1", "p1")]))
    assert (cmd["decision"], cmd["candidates"]) == ("replace", ["n1"])
    assert MOST not in types_of(cmd)
    assert cmd["replacementsPricePerHour"] < cmd["candidatesPricePerHour"]


@mirrors("Consolidation / Replace / can replace node / if the candidate is spot node")
def test_a_spot_node_is_replaced_by_a_cheaper_spot_one() -> None:
    objects = [*base(pool(types=WIDE, capacity=("spot",))), *mn("n1", WIDE[-1], ct="spot"), *pods_on("n1", "p1")]
    cmd = command(disrupt(objects, "--spot-to-spot"))
    assert (cmd["decision"], cmd["candidates"]) == ("replace", ["n1"])
    assert cmd["replacements"][0]["capacityType"] == "spot"
    assert WIDE[-1] not in types_of(cmd)


@mirrors("Consolidation / Replace / cannot replace spot with spot if less than minimum InstanceTypes flexibility")
def test_spot_to_spot_needs_15_cheaper_types() -> None:
    five = WIDE[:5]
    objects = [*base(pool(types=five, capacity=("spot",))), *mn("n1", five[1], ct="spot"), *pods_on("n1", "p1")]
    result = disrupt(objects, "--spot-to-spot")
    assert result["command"] is None
    message = unconsolidatable(result, "n1")
    assert "needs 15" in message
    assert "only 1 cheaper" in message


@mirrors("Consolidation / Replace / cannot replace spot with spot if the spotToSpotConsolidation is disabled")
def test_spot_to_spot_is_off_without_the_feature_gate() -> None:
    objects = [*base(pool(types=WIDE, capacity=("spot",))), *mn("n1", WIDE[-1], ct="spot"), *pods_on("n1", "p1")]
    result = disrupt(objects)
    assert result["command"] is None
    assert "spot-to-spot consolidation is disabled" in unconsolidatable(result, "n1")


@mirrors("Consolidation / Replace / cannot replace spot with spot if it is part of the 15 cheapest instance types.")
def test_a_spot_node_among_the_15_cheapest_is_kept() -> None:
    objects = [*base(pool(types=WIDE, capacity=("spot",))), *mn("n1", WIDE[1], ct="spot"), *pods_on("n1", "p1")]
    result = disrupt(objects, "--spot-to-spot")
    assert result["command"] is None
    assert blocked(result)["n1"][0] == "Unconsolidatable"


def _spot_replacement(min_values: int | None) -> list[str]:
    types = WIDE[:18]
    objects = [
        *base(pool(types=types, capacity=("spot",), min_values=min_values)),
        *mn("n1", types[-1], ct="spot"),
        *pods_on("n1", "p1"),
    ]
    cmd = command(disrupt(objects, "--spot-to-spot"))
    assert cmd["candidates"] == ["n1"]
    return types_of(cmd)


@mirrors(
    "Consolidation / Replace / spot to spot consolidation should order the instance types by price before "
    "enforcing minimum flexibility."
)
def test_spot_to_spot_launches_from_the_15_cheapest() -> None:
    assert set(_spot_replacement(None)) == set(WIDE[:15])


@mirrors(
    "Consolidation / Replace / spot to spot consolidation should consider the max of default and minimum number "
    "of instanceTypeOptions from minValues in requirement for truncation if minimum number of instanceTypeOptions "
    "from minValues in requirement is greater than 15."
)
def test_spot_to_spot_keeps_min_values_types_beyond_15() -> None:
    assert set(_spot_replacement(16)) == set(WIDE[:16])


@mirrors(
    "Consolidation / Replace / spot to spot consolidation should consider the default for truncation if minimum "
    "number of instanceTypeOptions from minValues in requirement is less than 15."
)
def test_spot_to_spot_keeps_15_when_min_values_is_lower() -> None:
    assert set(_spot_replacement(10)) == set(WIDE[:15])


@mirrors(
    "Consolidation / Replace / should handle failing filterOutSameInstanceType correctly (without a panic) when "
    "minValues isn't satisfied"
)
def test_a_merge_that_leaves_too_few_types_falls_back_to_one_delete() -> None:
    # two types, minValues 2: merging two m5.xlarge nodes into one would keep only the cheaper c5.xlarge
    objects = [
        *base(pool(types=("c5.xlarge", "m5.xlarge"), min_values=2)),
        *mn("n0", "m5.xlarge"),
        *mn("n1", "m5.xlarge"),
        *mn("n2", "m5.xlarge"),
        *pods_on("n0", "p0", cpu="1500m"),
        *pods_on("n1", "p1", cpu="1500m"),
        *pods_on("n2", "p2", "p3", cpu="1500m"),
    ]
    cmd = command(disrupt(objects))
    assert cmd["decision"] == "delete"
    assert cmd["method"] == "single-node consolidation"
    assert cmd["candidates"] in (["n0"], ["n1"])


@mirrors(
    "Consolidation / Replace / Consolidation should fail if filterByPrice breaks the minimum requirement from the "
    "NodePools. / if the candidate is on-demand node"
)
def test_on_demand_replacement_must_keep_min_values_after_the_price_cut() -> None:
    od = sorted(WIDE[:18], key=lambda t: _CATALOG.on_demand_prices[t])
    assert len({_CATALOG.on_demand_prices[t] for t in od[:16]}) == 16
    objects = [*base(pool(types=od, min_values=16)), *mn("n1", od[15]), *pods_on("n1", "p1")]
    result = disrupt(objects)
    assert result["command"] is None
    assert "minValues" in unconsolidatable(result, "n1")


@mirrors(
    "Consolidation / Replace / Consolidation should fail if filterByPrice breaks the minimum requirement from the "
    "NodePools. / if the candidate is spot node"
)
def test_spot_replacement_must_keep_min_values_after_the_price_cut() -> None:
    types = WIDE[:18]
    objects = [
        *base(pool(types=types, capacity=("spot",), min_values=16)),
        *mn("n1", types[15], ct="spot"),
        *pods_on("n1", "p1"),
    ]
    result = disrupt(objects, "--spot-to-spot")
    assert result["command"] is None
    assert "minValues" in unconsolidatable(result, "n1")


@mirrors(
    "Consolidation / Replace / can replace nodes if another nodePool returns no instance types / if the candidate "
    "is on-demand node"
)
def test_a_pool_without_types_does_not_stop_an_on_demand_replacement() -> None:
    objects = [node_class(), pool(), pool("none", types=("no-such-type",)), *mn("n1"), *pods_on("n1", "p1")]
    cmd = command(disrupt(objects))
    assert (cmd["decision"], cmd["candidates"]) == ("replace", ["n1"])


@mirrors(
    "Consolidation / Replace / can replace nodes if another nodePool returns no instance types / if the candidate "
    "is spot node"
)
def test_a_pool_without_types_does_not_stop_a_spot_replacement() -> None:
    objects = [
        node_class(),
        pool(types=WIDE, capacity=("spot",)),
        pool("none", types=("no-such-type",)),
        *mn("n1", WIDE[-1], ct="spot"),
        *pods_on("n1", "p1"),
    ]
    cmd = command(disrupt(objects, "--spot-to-spot"))
    assert (cmd["decision"], cmd["candidates"]) == ("replace", ["n1"])


def _replace_case(spot: bool) -> tuple[list[Obj], tuple[str, ...], str]:
    """(the default NodePool, the flags, the node type) of a Replace entry: on-demand or spot-to-spot."""
    if spot:
        return base(pool(types=WIDE, capacity=("spot",))), ("--spot-to-spot",), WIDE[-1]
    return base(), (), MOST


def _pdb_blocks(spot: bool) -> None:
    objects, flags, it = _replace_case(spot)
    ct = "spot" if spot else "on-demand"
    objects += [*mn("n1", it, ct=ct), *pods_on("n1", "p0", "p1", "p2")]
    objects.append(pdb("web", {"app": "web"}, max_unavailable=0, disruptions_allowed=0))
    result = disrupt(objects, *flags)
    assert result["command"] is None
    event, message = blocked(result)["n1"]
    assert event == "DisruptionBlocked"
    assert "PodDisruptionBudget" in message


@mirrors("Consolidation / Replace / can replace nodes, considers PDB / if the candidate is on-demand node")
def test_a_pdb_allowing_nothing_blocks_an_on_demand_replacement() -> None:
    _pdb_blocks(spot=False)


@mirrors("Consolidation / Replace / can replace nodes, considers PDB / if the candidate is spot node")
def test_a_pdb_allowing_nothing_blocks_a_spot_replacement() -> None:
    _pdb_blocks(spot=True)


def _pdb_policy(spot: bool) -> None:
    objects, flags, it = _replace_case(spot)
    not_ready = [{"type": "Ready", "status": "False"}]
    objects += [*mn("n1", it, ct="spot" if spot else "on-demand")]
    objects += pods_on("n1", "p0", "p1", "p2", cpu="500m", conditions=not_ready)
    objects.append(
        pdb(
            "web",
            {"app": "web"},
            max_unavailable=0,
            disruptions_allowed=0,
            unhealthy_pod_eviction_policy="AlwaysAllow",
        )
    )
    cmd = command(disrupt(objects, *flags))
    assert (cmd["decision"], cmd["candidates"]) == ("replace", ["n1"])


@mirrors("Consolidation / Replace / can replace nodes, considers PDB policy / if the candidate is on-demand node")
def test_always_allow_pdb_does_not_protect_unready_pods_on_demand() -> None:
    _pdb_policy(spot=False)


@mirrors("Consolidation / Replace / can replace nodes, considers PDB policy / if the candidate is spot node")
def test_always_allow_pdb_does_not_protect_unready_pods_spot() -> None:
    _pdb_policy(spot=True)


def _pdb_other_namespace(spot: bool) -> None:
    objects, flags, it = _replace_case(spot)
    objects += [*mn("n1", it, ct="spot" if spot else "on-demand"), *pods_on("n1", "p0")]
    objects.append(pdb("web", {"app": "web"}, namespace="other", max_unavailable=0, disruptions_allowed=0))
    cmd = command(disrupt(objects, *flags))
    assert (cmd["decision"], cmd["candidates"]) == ("replace", ["n1"])


@mirrors("Consolidation / Replace / can replace nodes, PDB namespace must match / if the candidate is on-demand node")
def test_a_pdb_of_another_namespace_does_not_block_on_demand() -> None:
    _pdb_other_namespace(spot=False)


@mirrors("Consolidation / Replace / can replace nodes, PDB namespace must match / if the candidate is spot node")
def test_a_pdb_of_another_namespace_does_not_block_spot() -> None:
    _pdb_other_namespace(spot=True)


def _do_not_disrupt(spot: bool, *, on_node: bool) -> None:
    objects, flags, it = _replace_case(spot)
    ct = "spot" if spot else "on-demand"
    guard = {"karpenter.sh/do-not-disrupt": "true"}
    small = {"cpu": "3", "memory": "8Gi", "pods": "110"}  # no room for the other node's pods
    objects += [*mn("n1", it, ct=ct), *pods_on("n1", "p0", "p1", cpu="500m")]
    if on_node:
        objects += mn("guarded", it, ct=ct, annotations=guard, allocatable=small, claim_annotations=guard)
        objects += pods_on("guarded", "p2", cpu="2700m")
    else:
        objects += mn("guarded", it, ct=ct, allocatable=small)
        objects += pods_on("guarded", "p2", cpu="2700m", annotations=guard)
    result = disrupt(objects, *flags)
    cmd = command(result)
    assert (cmd["decision"], cmd["candidates"]) == ("replace", ["n1"])
    assert blocked(result)["guarded"][0] == "DisruptionBlocked"


@mirrors(
    "Consolidation / Replace / can replace nodes, considers karpenter.sh/do-not-disrupt set to true on nodes / if "
    "the candidate is on-demand node"
)
def test_do_not_disrupt_node_is_skipped_and_the_other_replaced_on_demand() -> None:
    _do_not_disrupt(spot=False, on_node=True)


@mirrors(
    "Consolidation / Replace / can replace nodes, considers karpenter.sh/do-not-disrupt set to true on nodes / if "
    "the candidate is spot node"
)
def test_do_not_disrupt_node_is_skipped_and_the_other_replaced_spot() -> None:
    _do_not_disrupt(spot=True, on_node=True)


@mirrors(
    "Consolidation / Replace / can replace nodes, considers karpenter.sh/do-not-disrupt set to true on pods / if "
    "the candidate is on-demand node"
)
def test_do_not_disrupt_pod_is_skipped_and_the_other_replaced_on_demand() -> None:
    _do_not_disrupt(spot=False, on_node=False)


@mirrors(
    "Consolidation / Replace / can replace nodes, considers karpenter.sh/do-not-disrupt set to true on pods / if "
    "the candidate is spot node"
)
def test_do_not_disrupt_pod_is_skipped_and_the_other_replaced_spot() -> None:
    _do_not_disrupt(spot=True, on_node=False)


@mirrors("Consolidation / Replace / won't replace on-demand node if on-demand replacement is more expensive")
def test_no_on_demand_replacement_that_is_not_cheaper() -> None:
    objects = [*base(pool(types=("m5.large", "m5.xlarge"))), *mn("n1", "m5.large"), *pods_on("n1", "p1")]
    result = disrupt(objects)
    assert result["command"] is None
    assert "cheaper" in unconsolidatable(result, "n1")


# --- Delete -------------------------------------------------------------------------------------------------------

DELETE_TYPES = ("m5.2xlarge", "m5.4xlarge")  # the nodes are the cheapest type: no replacement is cheaper


def _two_nodes(**pool_kw: Any) -> list[Obj]:
    """Two of the cheapest nodes: n0 with pods p0 and p1, n1 with p2 (1 CPU each)."""
    return [*base(pool(types=DELETE_TYPES, **pool_kw)), *mn("n0", "m5.2xlarge"), *mn("n1", "m5.2xlarge")]


def _deleted(result: Obj) -> list[str]:
    cmd = command(result)
    assert cmd["decision"] == "delete", cmd
    return list(cmd["candidates"])


@mirrors(
    "Consolidation / Delete / can delete nodes",
    "Consolidation / Delete / can delete nodes if another nodePool has no node template",
)
def test_the_node_with_fewer_pods_is_deleted() -> None:
    objects = [*_two_nodes(), *pods_on("n0", "p0", "p1"), *pods_on("n1", "p2")]
    result = disrupt(objects)
    assert _deleted(result) == ["n1"]
    assert command(result)["moves"] == [{"pod": "default/p2", "node": "n0"}]
    # a NodePool whose EC2NodeClass does not exist changes nothing
    objects.append(pool("orphan", node_class_name="missing"))
    assert _deleted(disrupt(objects)) == ["n1"]


@mirrors("Consolidation / Delete / can delete nodes, when non-Karpenter capacity can fit pods")
def test_pods_move_to_a_node_karpenter_does_not_manage() -> None:
    objects = [*base(pool(types=DELETE_TYPES)), *mn("n0", "m5.2xlarge"), node("static", pool=None)]
    objects += pods_on("n0", "p0", "p1", "p2")
    result = disrupt(objects)
    assert _deleted(result) == ["n0"]
    assert {m["node"] for m in command(result)["moves"]} == {"static"}


@mirrors("Consolidation / Delete / can delete nodes, considers PDB")
def test_a_pdb_protected_pod_moves_the_choice_to_the_other_node() -> None:
    objects = [*_two_nodes(), pod("p0", node="n0"), pod("p1", node="n0"), *pods_on("n1", "p2")]
    objects.append(pdb("web", {"app": "web"}, max_unavailable=0, disruptions_allowed=0))
    assert _deleted(disrupt(objects)) == ["n0"]


@mirrors("Consolidation / Delete / can delete nodes, considers karpenter.sh/do-not-disrupt set to true on nodes")
def test_a_do_not_disrupt_node_moves_the_choice_to_the_other_node() -> None:
    guard = {"karpenter.sh/do-not-disrupt": "true"}
    objects = [*base(pool(types=DELETE_TYPES)), *mn("n0", "m5.2xlarge")]
    objects += mn("n1", "m5.2xlarge", annotations=guard, claim_annotations=guard)
    objects += [*pods_on("n0", "p0", "p1"), *pods_on("n1", "p2")]
    assert _deleted(disrupt(objects)) == ["n0"]


@mirrors("Consolidation / Delete / can delete nodes, considers karpenter.sh/do-not-disrupt set to true on pods")
def test_a_do_not_disrupt_pod_moves_the_choice_to_the_other_node() -> None:
    objects = [*_two_nodes(), *pods_on("n0", "p0", "p1")]
    objects += pods_on("n1", "p2", annotations={"karpenter.sh/do-not-disrupt": "true"})
    assert _deleted(disrupt(objects)) == ["n0"]


@mirrors(
    "Consolidation / Delete / does not consolidate nodes with karpenter.sh/do-not-disrupt set to true on pods when "
    "the NodePool's TerminationGracePeriod is not nil"
)
def test_do_not_disrupt_pods_block_consolidation_despite_a_grace_period() -> None:
    tgp = {"terminationGracePeriod": "300s"}
    guard = {"karpenter.sh/do-not-disrupt": "true"}
    objects = [*base(pool(types=DELETE_TYPES)), *mn("n0", "m5.2xlarge", claim_spec=tgp)]
    objects += mn("n1", "m5.2xlarge", claim_spec=tgp)
    objects += [*pods_on("n0", "p0", "p1", annotations=guard), *pods_on("n1", "p2", annotations=guard)]
    result = disrupt(objects)
    assert result["command"] is None
    assert {event for event, _ in blocked(result).values()} == {"DisruptionBlocked"}


@mirrors(
    "Consolidation / Delete / does not consolidate nodes with pods with blocking PDBs when the NodePool's "
    "TerminationGracePeriod is not nil"
)
def test_blocking_pdbs_block_consolidation_despite_a_grace_period() -> None:
    tgp = {"terminationGracePeriod": "300s"}
    objects = [*base(pool(types=DELETE_TYPES)), *mn("n0", "m5.2xlarge", claim_spec=tgp)]
    objects += mn("n1", "m5.2xlarge", claim_spec=tgp)
    objects += [*pods_on("n0", "p0", "p1"), *pods_on("n1", "p2"), pdb("web", {"app": "web"}, max_unavailable=0)]
    result = disrupt(objects)
    assert result["command"] is None
    assert all("PodDisruptionBudget" in msg for _, msg in blocked(result).values())


@mirrors(
    "Consolidation / Delete / does not consolidate nodes with pods that have a duration-based do-not-disrupt "
    "annotation that is still active"
)
def test_a_running_do_not_disrupt_duration_protects_its_node() -> None:
    started = {"started": ts(NOW), "created": ts(NOW), "annotations": {"karpenter.sh/do-not-disrupt": "2m"}}
    objects = [*_two_nodes(), *pods_on("n0", "p0", "p1"), *pods_on("n1", "p2", **started)]
    assert _deleted(disrupt(objects)) == ["n0"]


@mirrors("Consolidation / Delete / can consolidate nodes after duration-based do-not-disrupt annotation expires")
def test_do_not_disrupt_durations_protect_until_they_run_out() -> None:
    started = {"started": ts(NOW), "created": ts(NOW), "annotations": {"karpenter.sh/do-not-disrupt": "2m"}}
    objects = [*_two_nodes(), *pods_on("n0", "p0", "p1", **started), *pods_on("n1", "p2", **started)]
    assert disrupt(objects)["command"] is None
    assert disrupt(objects, now=NOW + timedelta(minutes=3))["command"] is not None


@mirrors(
    "Consolidation / Delete / can delete nodes, considers invalid do-not-disrupt annotation format as not blocking"
)
def test_an_invalid_do_not_disrupt_value_does_not_protect() -> None:
    objects = [*_two_nodes(), *pods_on("n0", "p0", "p1")]
    objects += pods_on("n1", "p2", annotations={"karpenter.sh/do-not-disrupt": "invalid-format"})
    assert _deleted(disrupt(objects)) == ["n1"]


@mirrors("Consolidation / Delete / can delete nodes, evicts pods without an ownerRef")
def test_a_pod_without_an_owner_does_not_protect_its_node() -> None:
    objects = [*_two_nodes(), *pods_on("n0", "p0", "p1"), *pods_on("n1", "p2", owner=None)]
    assert _deleted(disrupt(objects)) == ["n1"]


@mirrors("Consolidation / Delete / won't delete node if it would require pods to schedule on an uninitialized node")
def test_pods_are_not_moved_onto_an_uninitialized_node() -> None:
    objects = [*base(pool(types=DELETE_TYPES)), *mn("n0", "m5.2xlarge", initialized=False, claim_initialized="")]
    objects += [*mn("n1", "m5.2xlarge"), *pods_on("n0", "p0", "p1"), *pods_on("n1", "p2")]
    result = disrupt(objects)
    assert result["command"] is None
    assert "uninitialized" in unconsolidatable(result, "n1")
    assert blocked(result)["n0"][0] == "DisruptionBlocked"


@mirrors(
    "Consolidation / Delete / should not consolidate pods onto a destination node that is under its "
    "consolidateAfter window"
)
def test_pods_are_not_moved_onto_a_node_inside_its_consolidate_after_window() -> None:
    objects = [*base(pool(types=DELETE_TYPES, after="1m"))]
    objects += mn("n0", "m5.2xlarge", last_pod_event=ago(seconds=30))
    objects += mn("n1", "m5.2xlarge", last_pod_event=ago(hours=1))
    objects += [*pods_on("n0", "p0", "p1"), *pods_on("n1", "p2")]
    result = disrupt(objects)
    assert result["command"] is None
    assert blocked(result)["n1"][0] == "Unconsolidatable"
    # two minutes later n0 has settled: n1's pod may move there
    assert _deleted(disrupt(objects, now=NOW + timedelta(minutes=2))) == ["n1"]


@mirrors("Consolidation / Delete / should consolidate pods onto a destination node with consolidateAfter set to Never")
def test_a_node_of_a_never_pool_is_still_a_destination() -> None:
    objects = [node_class(), pool(types=DELETE_TYPES), pool("keep", types=DELETE_TYPES, after="Never")]
    objects += mn("n0", "m5.2xlarge", last_pod_event=ago(hours=1))
    objects += mn("dest", "m5.2xlarge", pool="keep", last_pod_event=ago(seconds=5))
    objects += pods_on("n0", "p0")
    assert _deleted(disrupt(objects)) == ["n0"]


@mirrors("Consolidation / Delete / should replace a node with a cheaper one even when consolidateAfter has not expired")
def test_a_settled_node_is_replaced_when_its_pool_waits_a_minute() -> None:
    objects = [*base(pool(after="1m")), *mn("n1", last_pod_event=ago(minutes=2)), *pods_on("n1", "p1")]
    cmd = command(disrupt(objects))
    assert (cmd["decision"], cmd["candidates"]) == ("replace", ["n1"])


@mirrors("Consolidation / Delete / should consider initialized nodes before uninitialized nodes")
def test_initialized_nodes_are_tried_before_uninitialized_ones() -> None:
    objects = [*base(pool(types=("c5.large", "m5.xlarge")))]
    for i in range(6):  # uninitialized nodes whose names sort first, each with room for the small node's pod
        objects += mn(f"a{i}", "m5.xlarge", initialized=False, claim_initialized="")
        objects += pods_on(f"a{i}", f"a{i}-p", cpu="2500m")
    objects += [*mn("z-ready", "m5.xlarge"), *pods_on("z-ready", "z-p", cpu="2500m")]
    objects += [*mn("small", "c5.large"), *pods_on("small", "s-p", cpu="1")]
    result = disrupt(objects)
    assert _deleted(result) == ["small"]
    assert command(result)["moves"] == [{"pod": "default/s-p", "node": "z-ready"}]


@mirrors("Consolidation / Delete / can delete nodes with a permanently pending pod")
def test_a_pending_pod_that_fits_nowhere_does_not_stop_a_delete() -> None:
    objects = [*_two_nodes(), *pods_on("n0", "p0", "p1"), *pods_on("n1", "p2")]
    objects.append(pod("stuck", node_selector={"non-existent": "node-label"}))
    assert _deleted(disrupt(objects)) == ["n1"]


@mirrors("Consolidation / Delete / won't delete nodes if it would make a non-pending pod go pending")
def test_no_delete_when_a_pod_could_go_nowhere_else() -> None:
    objects = [*base(pool(types=DELETE_TYPES))]
    objects += mn("n0", "m5.2xlarge", labels={"foo": "1"}) + mn("n1", "m5.2xlarge", labels={"foo": "2"})
    objects += pods_on("n0", "p0", "p1", node_selector={"foo": "1"})
    objects += pods_on("n1", "p2", node_selector={"foo": "2"})
    result = disrupt(objects)
    assert result["command"] is None
    assert {event for event, _ in blocked(result).values()} == {"Unconsolidatable"}


@mirrors("Consolidation / Delete / can delete nodes while an invalid node pool exists")
def test_an_invalid_pool_does_not_stop_consolidation() -> None:
    objects = [*_two_nodes(), *pods_on("n0", "p0", "p1"), *pods_on("n1", "p2")]
    objects.append(pool("bad", types=None, node_class_name="non-existent"))
    assert _deleted(disrupt(objects)) == ["n1"]


# --- Multi-NodeClaim ----------------------------------------------------------------------------------------------


def _three(ct: Sequence[str], pool_obj: Obj) -> list[Obj]:
    objects = [*base(pool_obj)]
    for i, c in enumerate(ct):
        it = MOST if c == "on-demand" else WIDE[-1]
        objects += [*mn(f"n{i}", it, ct=c), *pods_on(f"n{i}", f"p{i}")]
    return objects


def _merged(result: Obj) -> None:
    cmd = command(result)
    assert (cmd["method"], cmd["decision"]) == ("multi-node consolidation", "replace")
    assert sorted(cmd["candidates"]) == ["n0", "n1", "n2"]
    assert len(cmd["replacements"]) == 1


@mirrors("Consolidation / Multi-NodeClaim / can merge 3 nodes into 1 / if the candidate is on-demand node")
def test_three_on_demand_nodes_merge_into_one() -> None:
    _merged(disrupt(_three(["on-demand"] * 3, pool())))


@mirrors("Consolidation / Multi-NodeClaim / can merge 3 nodes into 1 / if the candidate is spot node")
def test_three_spot_nodes_merge_into_one_spot_node() -> None:
    result = disrupt(_three(["spot"] * 3, pool(types=WIDE, capacity=("spot",))), "--spot-to-spot")
    _merged(result)
    assert command(result)["replacements"][0]["capacityType"] == "spot"


@mirrors("Consolidation / Multi-NodeClaim / can merge 3 nodes into 1 if the candidates have both spot and on-demand")
def test_spot_and_on_demand_nodes_merge_into_one() -> None:
    types = tuple(sorted({*TYPES, *WIDE}))
    _merged(disrupt(_three(["on-demand", "on-demand", "spot"], pool(types=types, capacity=("on-demand", "spot")))))


def _same_type(ct: str) -> None:
    objects = [*base(pool(types=DELETE_TYPES, capacity=(ct,)))]
    objects += [*mn("n0", "m5.2xlarge", ct=ct), *mn("n1", "m5.2xlarge", ct=ct)]
    objects += [*pods_on("n0", "p0"), *pods_on("n1", "p1", "p2")]
    result = disrupt(objects, "--spot-to-spot")
    assert _deleted(result) == ["n0"]


@mirrors(
    "Consolidation / Multi-NodeClaim / won't merge 2 nodes into 1 of the same type / if the candidate is on-demand node"
)
def test_two_on_demand_nodes_are_not_merged_into_one_of_their_type() -> None:
    _same_type("on-demand")


@mirrors(
    "Consolidation / Multi-NodeClaim / won't merge 2 nodes into 1 of the same type / if the candidate is spot node"
)
def test_two_spot_nodes_are_not_merged_into_one_of_their_type() -> None:
    _same_type("spot")


@mirrors(
    "Consolidation / Multi-NodeClaim / should consolidate multiple empty nodes via multi-nodeclaim consolidation / "
    "if the candidate is on-demand node"
)
def test_three_empty_on_demand_nodes_go_together() -> None:
    cmd = command(disrupt([*base(), *mn("n0"), *mn("n1"), *mn("n2")]))
    assert (cmd["decision"], sorted(cmd["candidates"])) == ("delete", ["n0", "n1", "n2"])


@mirrors(
    "Consolidation / Multi-NodeClaim / should consolidate multiple empty nodes via multi-nodeclaim consolidation / "
    "if the candidate is spot node"
)
def test_three_empty_spot_nodes_go_together() -> None:
    objects = [*base(pool(types=WIDE, capacity=("spot",)))]
    objects += [o for i in range(3) for o in mn(f"n{i}", WIDE[-1], ct="spot")]
    cmd = command(disrupt(objects, "--spot-to-spot"))
    assert (cmd["decision"], sorted(cmd["candidates"])) == ("delete", ["n0", "n1", "n2"])


# --- Node lifetime, topology --------------------------------------------------------------------------------------


@mirrors("Consolidation / Node Lifetime Consideration / should consolidate the node with best savings ratio first")
def test_the_node_with_the_best_savings_per_disruption_goes_first() -> None:
    # n0 is old (little lifetime left, so cheap to disrupt by Karpenter's older cost) but holds two pods
    objects = [*base(pool(types=DELETE_TYPES))]
    objects += mn("n0", "m5.2xlarge", created=ago(minutes=50), claim_expire_after="1h")
    objects += mn("n1", "m5.2xlarge", created=ago(minutes=5), claim_expire_after="1h")
    objects += [*pods_on("n0", "p0", "p1"), *pods_on("n1", "p2")]
    assert _deleted(disrupt(objects)) == ["n1"]


@mirrors("Consolidation / Topology Consideration / can replace node maintaining zonal topology spread")
def test_a_replacement_stays_in_the_zone_the_spread_needs() -> None:
    objects = [*base()]
    zones = ("us-east-1a", "us-east-1b", "us-east-1c")
    for i, (z, it) in enumerate(zip(zones, (LEAST, MOST, LEAST), strict=True)):
        objects += mn(f"n{i}", it, zone=z)
        objects += pods_on(f"n{i}", f"p{i}", spread=[spread(ZONE, labels={"app": "web"})])
    cmd = command(disrupt(objects))
    assert (cmd["decision"], cmd["candidates"]) == ("replace", ["n1"])
    assert cmd["replacements"][0]["zones"] == ["us-east-1b"]


@mirrors("Consolidation / Topology Consideration / won't delete node if it would violate pod anti-affinity")
def test_no_delete_that_would_break_hostname_anti_affinity() -> None:
    objects = [*base()]
    anti = [affinity_term(HOSTNAME, {"app": "web"})]
    for i, z in enumerate(("us-east-1a", "us-east-1b", "us-east-1c")):
        objects += [*mn(f"n{i}", LEAST, zone=z), *pods_on(f"n{i}", f"p{i}", pod_anti_affinity=anti)]
    result = disrupt(objects)
    assert result["command"] is None


# --- Parallelization ----------------------------------------------------------------------------------------------


@mirrors(
    "Consolidation / Parallelization / should not schedule an additional node when receiving pending pods while "
    "consolidating"
)
def test_a_pending_pod_joins_the_launching_replacement() -> None:
    # a replace command is under way: the old node is tainted disrupted, its replacement still launching
    old = mn("old", taints=[{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}])
    fresh = mn("fresh", "c5.xlarge")
    launching = copy.deepcopy(fresh[1])
    launching["status"] = {
        "conditions": [{"type": "Launched", "status": "True", "lastTransitionTime": ago(seconds=10)}]
    }
    launching["metadata"]["name"] = "replacement"
    result = plan([*base(), *old, *pods_on("old", "p1"), launching, pod("new")])
    assert result.node_claims == []
    assert result.scheduled("new")


@mirrors("Consolidation / Parallelization / should not consolidate a node that is launched for pods on a deleting node")
def test_a_node_launched_for_a_deleting_nodes_pods_is_not_consolidated() -> None:
    # the deleting node's three pods still need the room the new node was sized for
    m5 = ("m5.large", "m5.xlarge", "m5.2xlarge", "m5.4xlarge")
    objects = [*base(pool(types=m5)), *mn("old", "m5.2xlarge", deleting=ts(NOW - timedelta(minutes=1)))]
    objects += pods_on("old", "p0", "p1", "p2", cpu="1500m")
    objects += [*mn("new", "m5.2xlarge"), *pods_on("new", "p3", "p4", cpu="1500m")]
    result = disrupt(objects)
    assert result["command"] is None


# --- Preferences, minValues policy --------------------------------------------------------------------------------


@mirrors("Consolidation / Preferences / should consolidate a node through deletion when ignoring preferences")
def test_ignoring_preferences_allows_a_delete() -> None:
    anti = [affinity_term(HOSTNAME, {"app": "web"}, weight=1)]
    objects = [*_two_nodes(), *pods_on("n0", "p0", "p1", pod_anti_affinity=anti)]
    objects += pods_on("n1", "p2", pod_anti_affinity=anti)
    assert _deleted(disrupt(objects, "--ignore-preferences")) == ["n1"]


@mirrors("Consolidation / Preferences / should consolidate a node through replacement when ignoring preferences")
def test_ignoring_preferences_allows_a_replacement() -> None:
    prefer = [(1, requirement(INSTANCE_TYPE, "In", MOST))]
    objects = [*base(), *mn("n1"), *pods_on("n1", "p1", preferred_node_affinity=prefer)]
    cmd = command(disrupt(objects, "--ignore-preferences"))
    assert (cmd["decision"], cmd["candidates"]) == ("replace", ["n1"])
    assert MOST not in types_of(cmd)


@mirrors(
    "Consolidation / MinValuesPolicy / should not consolidate a node by relaxing min values when policy is set to "
    "BestEffort"
)
def test_best_effort_min_values_is_not_relaxed_further_to_consolidate() -> None:
    # minValues 3 over three names of which the catalog sells two: BestEffort relaxes the NodeClaim to 2
    objects = [*base(pool(types=(LEAST, MOST, "no-such-type"), min_values=3)), *mn("n1", MOST), *pods_on("n1", "p1")]
    result = disrupt(objects, "--min-values-policy", "BestEffort")
    assert result["command"] is None
    assert "minValues" in unconsolidatable(result, "n1")


_BUFFERS = (
    "capacity buffers (CapacityBuffer and the virtual buffer pods cluster state counts per node) are not implemented "
    "in nodeflow: no manifest expresses them"
)
NOT_EXPRESSIBLE: dict[str, str] = {
    "Consolidation / Metrics / should correctly report eligible nodes": "a Prometheus gauge",
    **{
        f"Consolidation / Metrics / should correctly report invalidated commands for {kind} disruption / {entry}": (
            "a Prometheus counter of commands a test validator rejects after the validation wait"
        )
        for kind, entries in (
            (
                "emptiness",
                (
                    "when a candidate is blocked by budgets",
                    "when candidates are filtered out due to pod churn",
                    "when candidates are filtered out due to candidate being nominated",
                ),
            ),
            (
                "multi node",
                (
                    "when candidates are blocked by budgets",
                    "when candidates are filtered out due to pod churn",
                    "when candidates are filtered out due to candidate being nominated",
                ),
            ),
            (
                "single node",
                (
                    "when a candidate is blocked by budgets",
                    "when candidates are filtered out due to pod churn",
                    "when candidates are filtered out due to candidate being nominated",
                ),
            ),
        )
        for entry in entries
    },
    "Consolidation / Replace / won't replace node if any spot replacement is more expensive": (
        "needs spot prices that differ by zone; the bundled catalog has one spot estimate per type (the rule, "
        "a replacement priced at its dearest allowed offering, is unit-tested in tests/unit/disruption)"
    ),
    "Consolidation / Delete / does not delete nodes with pod churn, deletes nodes without pod churn": (
        "pods bound by a test validator during the validation wait; one dry-run round has no wait"
    ),
    **{
        f"Consolidation / TTL / {title}": (
            "the cluster changes during the 15 s validation wait (lifecycle/disruption_round.run re-decides after it; "
            "tests/functional/disruption); one dry-run round has no wait"
        )
        for title in (
            "should wait for the node TTL for non-empty nodes before consolidating",
            "should not consolidate if the action picks different instance types after the node TTL wait",
            "should not consolidate if the action becomes invalid during the node TTL wait",
            "should not replace node if a pod schedules with karpenter.sh/do-not-disrupt set to true during the TTL "
            "wait",
            "should not replace node if a pod schedules with a blocking PDB during the TTL wait",
            "should not delete node if pods schedule with karpenter.sh/do-not-disrupt set to true during the TTL wait",
            "should not delete node if pods schedule with a blocking PDB during the TTL wait",
        )
    },
    **{
        f"Consolidation / Multi-NodeClaim / {title} / if the candidate is {kind} node": (
            "the validation wait (and pods bound during it); one dry-run round has no wait"
        )
        for title in (
            "should wait for the node TTL for non-empty nodes before consolidating (multi-node)",
            "should continue to single nodeclaim consolidation when multi-nodeclaim consolidation fails validation "
            "after the node ttl",
        )
        for kind in ("on-demand", "spot")
    },
    **{
        f"Consolidation / Buffer Pods / {title}": _BUFFERS
        for title in (
            "should not empty-consolidate a node with only buffer pods",
            "should allow consolidation of a node with real pods and buffer pods to a cheaper instance",
            "should skip buffer-only nodes in single-node consolidation but protect via emptiness",
            "should consolidate a buffer node once buffer pods are cleared",
        )
    },
}


# --- single-node order: budgets and NodePools (Karpenter's single-node consolidation, no spec of its own) ---------


def _stuck_first(pool_a: Obj, pool_b: Obj | None) -> list[Obj]:
    """a0 saves the most but its pod can go nowhere else; a1 and b0 can each be deleted (pods onto a0)."""
    objects = [node_class(), pool_a, *([pool_b] if pool_b else [])]
    objects += [*mn("a0", "m5.4xlarge", pool="a", labels={"only": "a0"}), *pods_on("a0", "pa0")]
    objects[-1]["spec"]["nodeSelector"] = {"only": "a0"}
    objects += [*mn("a1", "m5.2xlarge", pool="a"), *pods_on("a1", "pa1")]
    if pool_b:
        objects += [*mn("b0", "m5.xlarge", pool="b"), *pods_on("b0", "pb0")]
    return objects


def test_single_node_tries_every_node_of_a_pool_with_budget_left() -> None:
    objects = _stuck_first(pool("a", nodes="1", types=(*DELETE_TYPES, "m5.xlarge")), None)
    assert _deleted(disrupt(objects)) == ["a1"]


def test_single_node_interleaves_node_pools() -> None:
    types = (*DELETE_TYPES, "m5.xlarge")
    objects = _stuck_first(pool("a", types=types), pool("b", types=types))
    assert _deleted(disrupt(objects)) == ["b0"]


def test_pending_pods_are_simulated_with_the_candidates() -> None:
    """Karpenter simulates the cluster's pending pods too: the big node's room is what a pending pod needs, so
    it is not replaced by a small one (without the pending pod it is)."""
    m5 = ("m5.large", "m5.xlarge", "m5.2xlarge", "m5.4xlarge", "m5.8xlarge", "m5.12xlarge", "m5.16xlarge")
    objects = [*base(pool(types=m5)), *mn("big", "m5.16xlarge"), *pods_on("big", "small")]
    assert command(disrupt(objects))["decision"] == "replace"
    result = disrupt([*objects, pod("huge", cpu="62")])
    assert result["command"] is None
    assert "no cheaper" in unconsolidatable(result, "big")


def test_a_deleting_nodes_pod_is_placed_once() -> None:
    """The pods of a node being deleted are placed once before the candidate's (not once as pending, once more
    as leaving): here the other node has room for that pod and the candidate's, not for two copies."""
    objects = [*base(pool(types=DELETE_TYPES)), *mn("old", "m5.2xlarge", deleting=ago(minutes=1))]
    objects += [*pods_on("old", "o0", cpu="3"), *mn("dest", "m5.2xlarge")]
    objects += pods_on("dest", "d0", "d1", cpu="1750m")
    objects += [*mn("n1", "m5.2xlarge"), *pods_on("n1", "p1")]
    result = disrupt(objects)
    assert _deleted(result) == ["n1"]
    assert command(result)["moves"] == [{"pod": "default/p1", "node": "dest"}]


# --- static NodePools (spec.replicas) ------------------------------------------------------------------------------


@mirrors("Consolidation / Static NodePool / should not consolidate static NodePool nodes")
def test_static_pool_nodes_are_neither_emptied_nor_consolidated() -> None:
    """Two of a static pool's nodes: one empty, one with a pod a cheaper node would hold. No command."""
    static = node_pool(
        "fixed", disruption={"consolidationPolicy": "WhenEmptyOrUnderutilized", "budgets": [{"nodes": "100%"}]}
    )
    static["spec"]["replicas"] = 2
    objs = [
        node_class(),
        static,
        *managed_node("n0", pool="fixed", instance_type=MOST),
        *managed_node("n1", pool="fixed", instance_type=MOST),
        pod("p1", node="n1", cpu="100m"),
    ]
    assert disrupt(objs)["command"] is None
    del static["spec"]["replicas"]  # without replicas the same nodes are disrupted
    assert disrupt(objs)["command"] is not None


# --- reserved capacity (capacity reservations: aws ec2 describe-capacity-reservations in the input) ---------------


def _reserved_pool() -> Obj:
    return node_pool(
        requirements=[
            requirement(CAPACITY_TYPE, "In", "reserved", "spot", "on-demand"),
            requirement(INSTANCE_TYPE, "In", *TYPES),
        ]
    )


def _replacement(objs: list[Obj]) -> tuple[str, str, str | None]:
    """The one replacement of a single-node consolidation: (its cheapest type, capacity type, reservation)."""
    cmd = disrupt(objs)["command"]
    assert cmd is not None
    assert (cmd["reason"], cmd["decision"], cmd["candidates"]) == ("Underutilized", "replace", ["n1"])
    (made,) = cmd["replacements"]
    return made["instanceTypes"][0], made["capacityType"], made["labels"].get(RID)


@mirrors("Consolidation / Reserved Capacity / can consolidate from one reserved offering to another")
def test_a_reserved_node_moves_to_a_cheaper_types_reservation() -> None:
    objs = [
        reserved_class(ids=["cr-most", "cr-least"]),
        _reserved_pool(),
        *managed_node("n1", instance_type=MOST, zone=_Z, capacity_type="reserved", labels={RID: "cr-most"}),
        pod("p1", node="n1", cpu="100m"),
        reservations(("cr-most", MOST, 10), ("cr-least", LEAST, 10)),
    ]
    assert _replacement(objs) == (LEAST, "reserved", "cr-least")


@mirrors(
    "Consolidation / Reserved Capacity / from on-demand",
    "Consolidation / Reserved Capacity / from spot",
)
def test_a_node_moves_into_a_reservation_of_its_own_type() -> None:
    for capacity_type in ("on-demand", "spot"):
        objs = [
            reserved_class(ids=["cr-most"]),
            _reserved_pool(),
            *managed_node("n1", instance_type=MOST, zone=_Z, capacity_type=capacity_type),
            pod("p1", node="n1", cpu="100m"),
        ]
        without = disrupt(objs)["command"]  # no reservation in the input: a cheaper spot node, or (spot) nothing
        assert without is None or all(r["capacityType"] != "reserved" for r in without["replacements"])
        assert _replacement([*objs, reservations(("cr-most", MOST, 10))]) == (MOST, "reserved", "cr-most")


def test_a_reserved_node_is_not_replaced_by_its_own_reservation() -> None:
    """A reserved node is priced at its reserved offering's price (as upstream), so moving it into a new node of the
    same reservation saves nothing and is not done (it was when reserved nodes were priced at on-demand)."""
    objs = [
        reserved_class(ids=["cr-most"]),
        _reserved_pool(),
        *managed_node("n1", instance_type=MOST, zone=_Z, capacity_type="reserved", labels={RID: "cr-most"}),
        pod("p1", node="n1", cpu="100m"),
        reservations(("cr-most", MOST, 10)),
    ]
    assert disrupt(objs)["command"] is None
