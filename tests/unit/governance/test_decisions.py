"""The decision log's records (nodeflow.governance.decisions): what each kind holds, the policy reasons picked out,
and the DynamoDB key layout (time, NodePool and pod partitions, TTL)."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from nodeflow.disruption.model import Blocked, BlockKind
from nodeflow.governance import decisions as dl
from nodeflow.governance.decisions import ClaimOutcome, Decision, DecisionError
from nodeflow.scheduling.nodepools import NO_NODEPOOL
from nodeflow.scheduling.requirements import Requirements
from nodeflow.scheduling.types import NodeClaimPlan, SchedulingResult, UnschedulablePod

AT = datetime(2026, 11, 25, 5, 1, 2, 345678, tzinfo=UTC)
DENIED = "namespace ml-exp may not use NodePool gpu: policy gpu-access"
CEILING = (
    "NodeClaim of NodePool gpu ($3.0600/hour) would cross the $/hour ceiling of NodePool gpu "
    "($20.00/hour, $18.50 in use): policy cost-caps"
)
PAUSED = (
    "provisioning paused for NodePool batch by policy freeze: window quarter-end (0 18 * * 5 for 60h) "
    "until 2026-11-30T06:00:00Z"
)


def plan(pool: str, types: tuple[str, ...], pods: tuple[str, ...], price: float = 0.096) -> NodeClaimPlan:
    return NodeClaimPlan(
        nodepool=pool,
        requirements=Requirements(),
        instance_types=types,
        capacity_type="spot",
        zones=("us-east-1a", "us-east-1b"),
        pods=pods,
        requests={"cpu": 2000, "memory": 4 * 1024**3 * 1000},
        price=price,
    )


def provisioning() -> list[Decision]:
    result = SchedulingResult(
        node_claims=(
            plan("default", ("m5.large", "m6i.large", "c5.xlarge", "m5.xlarge"), ("shop/web-1", "shop/web-2")),
            plan("batch", ("c6i.large",), ("etl/job-1",), price=0.085),
        ),
        existing=(),
        unschedulable=(
            UnschedulablePod("ml-exp/train-1", {"gpu": DENIED, "default": "no instance type has nvidia.com/gpu"}),
            UnschedulablePod("ml-exp/train-2", {"gpu": DENIED, "default": "no instance type has nvidia.com/gpu"}),
            UnschedulablePod("ml/big-1", {"gpu": CEILING}),
            UnschedulablePod("etl/late-1", {"batch": PAUSED}),
        ),
    )
    outcomes = [ClaimOutcome("default-abcde", "created"), ClaimOutcome(None, "refused", "admission webhook said no")]
    pods = ["shop/web-1", "shop/web-2", "etl/job-1", "ml-exp/train-1", "ml-exp/train-2", "ml/big-1", "etl/late-1"]
    return dl.provisioning_records("0123456789abcdef", AT, pods, result, outcomes, claim_types=2)


def test_a_provisioner_run_gives_the_run_each_nodeclaim_and_each_group_of_unschedulable_pods() -> None:
    run, created, refused, *unschedulable = provisioning()
    assert [r.kind for r in (run, created, refused, *unschedulable)] == [
        "provisioning",
        "nodeclaim",
        "nodeclaim",
        "unschedulable",
        "unschedulable",
        "unschedulable",
    ]
    assert run.pod_count == 7
    assert run.pods == ()
    assert run.node_pools == ("batch", "default", "gpu")
    assert run.detail["created"] == ["default-abcde"]
    assert run.detail["unschedulable"] == 4
    assert run.detail["pricePerHour"] == 0.096  # the refused NodeClaim costs nothing
    assert run.summary.startswith("7 pending pods: 1 NodeClaim created, 1 refused ($0.0960/hour), 4 pods")
    assert set(run.detail["policies"]) == {"gpu-access", "cost-caps", "freeze"}

    assert created.node_pools == ("default",)
    assert created.pods == ("shop/web-1", "shop/web-2")
    d = created.detail
    assert (d["nodeClaim"], d["status"], d["instanceType"]) == ("default-abcde", "created", "m5.large")
    assert d["instanceTypes"] == ["m5.large", "m6i.large"]  # what the NodeClaim carries (claim_types=2)
    assert d["otherInstanceTypes"] == ["c5.xlarge", "m5.xlarge"]
    assert d["otherInstanceTypeCount"] == 2
    assert (d["capacityType"], d["zones"], d["pricePerHour"]) == ("spot", ["us-east-1a", "us-east-1b"], 0.096)
    assert d["requests"] == {"cpu": "2", "memory": "4Gi"}
    assert "NodeClaim default-abcde created: m5.large +1 more, spot" in created.summary

    assert refused.detail["status"] == "refused"
    assert refused.detail["nodeClaim"] is None
    assert refused.detail["message"] == "admission webhook said no"


def test_unschedulable_pods_keep_every_reason_and_list_the_policy_ones() -> None:
    *_, denied, ceiling, paused = provisioning()
    assert denied.pods == ("ml-exp/train-1", "ml-exp/train-2")
    assert denied.pod_count == 2
    assert denied.node_pools == ("default", "gpu")
    assert denied.detail["reasons"] == {"default": "no instance type has nvidia.com/gpu", "gpu": DENIED}
    assert denied.policy == (f"gpu: {DENIED}",)
    assert denied.detail["policies"] == ["gpu-access"]
    assert ceiling.policy == (f"gpu: {CEILING}",)
    assert ceiling.detail["policies"] == ["cost-caps"]
    assert paused.policy == (f"batch: {PAUSED}",)
    assert paused.detail["policies"] == ["freeze"]
    assert denied.summary.startswith("2 pods got no NodeClaim: default: no instance type")


def test_policy_reasons_are_only_those_naming_a_policy() -> None:
    reasons = {"a": "incompatible requirements", "b": DENIED, "": "no NodePool: policy x"}
    assert dl.policy_reasons(reasons) == ("no NodePool: policy x", f"b: {DENIED}")
    assert dl.policy_reasons({"a": "the policy of the house"}) == ()


def test_outcomes_must_match_the_plan() -> None:
    result = SchedulingResult(node_claims=(plan("a", ("m5.large",), ("x/y",)),), existing=(), unschedulable=())
    with pytest.raises(DecisionError, match="0 outcomes for 1 planned"):
        dl.provisioning_records("r", AT, [], result, [])


def test_a_disruption_round_gives_its_command_blocked_candidates_and_forceful_terminations() -> None:
    command = {
        "reason": "Underutilized",
        "method": "single-node consolidation",
        "decision": "replace",
        "candidates": ["ip-10-0-1-1"],
        "replacements": [{"nodePool": "default", "instanceTypes": ["m5.large"], "pricePerHour": 0.05}],
        "moves": [{"pod": "shop/web-1", "replacement": 0}, {"pod": "shop/web-2", "node": "ip-10-0-2-2"}],
        "candidatesPricePerHour": 0.2,
        "replacementsPricePerHour": 0.05,
        "savedPerHour": 0.15,
    }
    blocked = [
        Blocked("ip-10-0-3-3", BlockKind.BLOCKED, 'Pod "shop/db-0" has "karpenter.sh/do-not-disrupt"').to_json(),
        Blocked("ip-10-0-4-4", BlockKind.BLOCKED, "disruption paused for NodePool gpu by policy freeze: x").to_json(),
    ]
    records = dl.disruption_records(
        "d20261125T050102",
        AT,
        command=command,
        replacing=True,
        blocked=blocked,
        expired=["default-old"],
        scaled_down=["static-x"],
        node_pools={"ip-10-0-1-1": "default", "ip-10-0-3-3": "db", "ip-10-0-4-4": "gpu"},
        claim_pools={"default-old": "default", "static-x": "fixed"},
    )
    cmd, b1, b2, expired, scaled = records
    assert [r.kind for r in records] == ["disruption", "blocked", "blocked", "expiration", "scale-down"]
    assert cmd.node_pools == ("default",)
    assert cmd.pods == ("shop/web-1", "shop/web-2")  # the pods it moves
    assert cmd.detail["outcome"] == "replacing"
    assert cmd.detail["savedPerHour"] == 0.15
    assert (cmd.detail["candidatesPricePerHour"], cmd.detail["replacementsPricePerHour"]) == (0.2, 0.05)
    assert cmd.summary == (
        "Underutilized (single-node consolidation): replace ip-10-0-1-1 with 1 replacement, saves $0.1500/hour; "
        "replacing"
    )
    assert (b1.node_pools, b1.detail["event"], b1.policy) == (("db",), "DisruptionBlocked", ())
    assert b2.policy == ("disruption paused for NodePool gpu by policy freeze: x",)
    assert expired.node_pools == ("default",)
    assert expired.detail == {"nodeClaim": "default-old"}
    assert scaled.node_pools == ("fixed",)
    assert len({r.id for r in records}) == len(records)


def test_a_blocked_candidate_is_one_record_per_hour_and_blocker() -> None:
    blocked = [Blocked("n1", BlockKind.UNCONSOLIDATABLE, "no cheaper replacement").to_json()]
    first = dl.disruption_records("d1", AT, blocked=blocked)[0]
    later = dl.disruption_records("d2", AT + timedelta(minutes=30), blocked=blocked)[0]
    next_hour = dl.disruption_records("d3", AT + timedelta(hours=1), blocked=blocked)[0]
    other = dl.disruption_records("d4", AT, blocked=[{**blocked[0], "message": "budget"}])[0]
    assert dl.to_item(first)["pk"] == dl.to_item(later)["pk"]
    assert first.sk == later.sk  # the later round rewrites it
    assert first.sk.startswith("2026-11-25T05:00:00.000Z#blocked-")
    assert later.time == "2026-11-25T05:31:02.345Z"  # the latest round's
    assert dl.from_item(dl.to_item(later)) == later
    assert [i["sk"]["S"] for i in dl.index_items(later)] == []  # no NodePool known here, no pods
    assert next_hour.sk != first.sk
    assert other.sk != first.sk


def test_an_unschedulable_group_is_one_record_per_hour_and_reason_set() -> None:
    def unschedulable(run: str, at: datetime, pods: list[str], reason: str = PAUSED) -> Decision:
        result = SchedulingResult((), (), tuple(UnschedulablePod(p, {"batch": reason}) for p in pods))
        _, record = dl.provisioning_records(run, at, pods, result, [])
        return record

    first = unschedulable("r1", AT, ["etl/late-1"])
    later = unschedulable("r2", AT + timedelta(minutes=30), ["etl/late-1", "etl/late-2"])  # a pod joined
    next_hour = unschedulable("r3", AT + timedelta(hours=1), ["etl/late-1"])
    other = unschedulable("r4", AT, ["etl/late-1"], reason=DENIED)
    assert dl.to_item(first)["pk"] == dl.to_item(later)["pk"]
    assert first.sk == later.sk  # the later run rewrites it
    assert first.sk.startswith("2026-11-25T05:00:00.000Z#unschedulable-")
    assert (later.time, later.run) == ("2026-11-25T05:31:02.345Z", "r2")  # the latest run's
    assert later.pods == ("etl/late-1", "etl/late-2")
    assert dl.from_item(dl.to_item(later)) == later
    # its NodePool's and every pod's index item point to that one record
    shard = dl.shard(first.sk)
    *pods, pool = dl.index_items(later)
    assert [(i["pk"]["S"], i["sk"]["S"], i["ref"]["S"]) for i in pods] == [
        ("POD#etl/late-1", first.sk, f"DECISION#2026-11-25#{shard}"),
        ("POD#etl/late-2", first.sk, f"DECISION#2026-11-25#{shard}"),
    ]
    assert pool["pk"]["S"] == dl.nodepool_partition("batch", pool["sk"]["S"])
    assert dl.pointer_refs(pool) == [(f"DECISION#2026-11-25#{shard}", first.sk)]
    assert next_hour.sk != first.sk
    assert other.sk != first.sk


def test_a_skipped_command_says_why() -> None:
    (cmd,) = dl.disruption_records(
        "d1", AT, command={"reason": "Empty", "method": "emptiness", "candidates": ["n1"]}, skipped="cluster changed"
    )
    assert cmd.detail["outcome"] == "skipped"
    assert cmd.detail["skipped"] == "cluster changed"
    assert cmd.summary.endswith("; skipped: cluster changed")


def test_keys_time_nodepool_and_pod_partitions_and_ttl() -> None:
    _run, created, *_ = provisioning()
    item = dl.to_item(created)
    shard = dl.shard("2026-11-25T05:01:02.345Z#0123456789abcdef-0001")
    assert item["pk"] == {"S": f"DECISION#2026-11-25#{shard}"}
    assert item["sk"] == {"S": "2026-11-25T05:01:02.345Z#0123456789abcdef-0001"}
    assert item["kind"] == {"S": "nodeclaim"}
    assert int(item["ttl"]["N"]) == int((AT + timedelta(days=90)).timestamp())
    assert int(dl.to_item(created, ttl_days=7)["ttl"]["N"]) == int((AT + timedelta(days=7)).timestamp())
    index = dl.index_items(created)
    assert [i["pk"]["S"] for i in index[:2]] == ["POD#shop/web-1", "POD#shop/web-2"]
    assert index[2]["pk"]["S"] == dl.nodepool_partition("default", index[2]["sk"]["S"])
    assert [dl.pointer_refs(i) for i in index] == [[(item["pk"]["S"], item["sk"]["S"])]] * 3
    assert index[-1]["sk"]["S"].startswith(item["sk"]["S"] + "#")  # the newest record it names, then a digest
    assert all(i["ttl"] == item["ttl"] for i in index)
    assert dl.from_item(item) == created
    assert json.loads(item["body"]["S"])["kind"] == "nodeclaim"


def test_round_trip_of_every_record_and_the_json_is_stable() -> None:
    for record in provisioning():
        back = dl.from_item(dl.to_item(record))
        assert back == record
        assert list(back.to_json()) == [
            "time",
            "kind",
            "id",
            "run",
            "nodePools",
            "summary",
            "podCount",
            "pods",
            "policy",
            "detail",
            "version",
        ]


def test_big_records_name_at_most_max_pods_but_index_every_pod() -> None:
    pods = tuple(f"ns/p-{i}" for i in range(dl.MAX_PODS_PER_RECORD + 5))
    result = SchedulingResult(node_claims=(plan("a", ("m5.large",), pods),), existing=(), unschedulable=())
    run, claim = dl.provisioning_records("r", AT, list(pods), result, [ClaimOutcome("a-1", "created")])
    assert claim.pod_count == len(pods)
    item = dl.to_item(claim)
    assert len(item["body"]["S"]) < 100_000  # far below DynamoDB's 400 KB
    stored = dl.from_item(item)
    assert stored.pods == pods[: dl.MAX_PODS_PER_RECORD]
    assert stored.pod_count == len(pods)
    index = [i["pk"]["S"] for i in dl.index_items(claim)]
    assert len(index) == 1 + len(pods)  # every pod (each one is found by --pod), and the NodePool
    assert index[-2] == f"POD#{pods[-1]}"
    assert len(dl.to_item(run)["body"]["S"]) < 100_000


def test_day_partitions_newest_first() -> None:
    since = datetime(2026, 11, 23, 23, 0, tzinfo=UTC)
    days = dl.day_partitions(since, AT)
    assert [{pk.rsplit("#", 1)[0] for pk in shards} for shards in days] == [
        {"DECISION#2026-11-25"},
        {"DECISION#2026-11-24"},
        {"DECISION#2026-11-23"},
    ]
    assert all(len(set(shards)) == dl.SHARDS for shards in days)
    assert dl.day_partitions(AT - timedelta(hours=1), AT) == [[f"DECISION#2026-11-25#{n:02d}" for n in range(16)]]


def test_a_burst_of_records_spreads_over_the_shards() -> None:
    """One run's NodeClaim records go to every shard of the day about evenly: DynamoDB writes one partition key at
    most 1,000 WCU a second. Their NodePool's pointers are a few items (POOL_REFS records each), not one a record."""
    pods = tuple(f"ns/p-{i}" for i in range(1600))
    claims = tuple(plan("default", ("m5.large",), (p,)) for p in pods)
    result = SchedulingResult(node_claims=claims, existing=(), unschedulable=())
    outcomes = [ClaimOutcome(f"default-{i}", "created") for i in range(len(claims))]
    records = dl.provisioning_records("r", AT, list(pods), result, outcomes)
    per_key = Counter(dl.to_item(r)["pk"]["S"] for r in records)
    assert len(per_key) == dl.SHARDS
    assert max(per_key.values()) < 2 * len(records) / dl.SHARDS
    written = dl.write_items(records)
    pointers = [i for i in written if i["pk"]["S"].startswith("NODEPOOL#")]
    assert len(pointers) == -(-len(records) // dl.POOL_REFS) == 7
    assert {i["pk"]["S"] for i in pointers} <= set(dl.nodepool_partitions("default"))
    named = [ref for i in pointers for ref in dl.pointer_refs(i)]
    assert sorted(named) == sorted(
        (i["pk"]["S"], i["sk"]["S"]) for i in written if i["pk"]["S"].startswith("DECISION#")
    )
    assert max(dl.item_size(i) for i in pointers) < 30_000
    assert len(written) == dl.item_count(records) == len(records) + len(pods) + 7


def test_bad_input_names_what_is_wrong() -> None:
    with pytest.raises(DecisionError, match="no timezone"):
        dl.time_key(datetime(2026, 1, 1))
    with pytest.raises(DecisionError, match="ttl days"):
        dl.to_item(provisioning()[0], ttl_days=0)
    with pytest.raises(DecisionError, match="no body"):
        dl.from_item({"pk": {"S": "POD#a/b"}, "sk": {"S": "x"}})
    with pytest.raises(DecisionError, match="decision record"):
        dl.from_item({"body": {"S": json.dumps({"kind": "x"})}})
    with pytest.raises(DecisionError, match="decision record: date value out of range"):  # not an OverflowError
        dl.from_item({"body": {"S": json.dumps({"kind": "x", "time": "0001-01-01T00:00:00+01:00", "id": "a"})}})


def test_an_interruption_records_the_nodeclaim_its_offering_and_why() -> None:
    labels = {
        "karpenter.sh/nodepool": "default",
        "node.kubernetes.io/instance-type": "m5.large",
        "topology.kubernetes.io/zone": "us-east-1a",
        "karpenter.sh/capacity-type": "spot",
    }
    (record,) = dl.interruption_records("i1", AT, [("default-abcde", "SpotInterrupted", "SpotInterruption", labels)])
    assert record.kind == "interruption"
    assert record.node_pools == ("default",)
    assert record.summary == (
        "terminate NodeClaim default-abcde (m5.large, us-east-1a, spot): SpotInterrupted (SpotInterruption)"
    )
    assert record.detail == {
        "nodeClaim": "default-abcde",
        "reason": "SpotInterrupted",
        "message": "SpotInterruption",
        "instanceType": "m5.large",
        "zone": "us-east-1a",
        "capacityType": "spot",
    }
    assert dl.interruption_records("i2", AT, [("c", "Deleted", "Deletion", {})])[0].node_pools == ()


def test_pods_no_nodepool_can_take_are_one_record_that_says_why_once_and_names_no_nodepool() -> None:
    result = SchedulingResult(
        node_claims=(),
        existing=(),
        unschedulable=tuple(
            UnschedulablePod(f"shop/web-{i}", {NO_NODEPOOL: "no NodePool is defined"}) for i in range(3)
        ),
    )
    run, record = dl.provisioning_records("r", AT, [f"shop/web-{i}" for i in range(3)], result, [])
    assert record.summary == "3 pods got no NodeClaim: no NodePool is defined"
    assert record.node_pools == ()  # "-" is not a NodePool: nothing to find it by with --nodepool
    assert run.node_pools == ()
    assert record.pods == ("shop/web-0", "shop/web-1", "shop/web-2")


# ------------------------------------------------------------------------------------------ item size


def _long(tag: str, n: int) -> str:
    return (tag + "-") * (n // (len(tag) + 1)) + tag


def _hostile_records() -> list[Decision]:
    """One record of every kind with every unbounded field huge: 20,000 pods of 253-character names, 3,000
    NodePools with 1,000-character reasons, 1 MB messages, 5,000 candidates, replacements and moves."""
    pods = tuple(f"ns-{i % 7}/{_long(f'p{i}', 240)}" for i in range(20_000))
    pools = [f"pool-{i:04d}" for i in range(3_000)]
    huge = "requires In [" + ", ".join(f"rack-{i:07d}" for i in range(80_000)) + "]"
    types = tuple(f"type-{i}.{_long('x', 40)}" for i in range(400))
    claims = tuple(
        NodeClaimPlan(
            nodepool=pools[i % len(pools)],
            requirements=Requirements(),
            instance_types=types,
            capacity_type="spot",
            zones=tuple(f"zone-{z}" for z in range(300)),
            pods=pods[i * 4000 : (i + 1) * 4000],
            requests={f"example.com/{_long(f'r{r}', 60)}": r for r in range(2000)},
            price=1.0,
        )
        for i in range(5)
    )
    result = SchedulingResult(
        node_claims=claims,
        existing=(),
        unschedulable=(
            *(
                UnschedulablePod(p, {pool: f"{_long('why', 1000)}: policy gpu-access" for pool in pools})
                for p in pods[:50]
            ),
            UnschedulablePod("racks/one", {"default": huge}),
        ),
    )
    outcomes = [ClaimOutcome(_long(f"claim{i}", 253), "refused", huge) for i in range(5)]
    records = dl.provisioning_records("r" * 16, AT, list(pods), result, outcomes, claim_types=300)
    command = {
        "reason": "Underutilized",
        "method": "multi-node consolidation",
        "decision": "replace",
        "candidates": [_long(f"node{i}", 253) for i in range(5_000)],
        "replacements": [{"nodePool": p, "instanceTypes": list(types)} for p in pools[:1000]],
        "moves": [{"pod": p, "node": _long("n", 253)} for p in pods],
    }
    records += dl.disruption_records(
        "d1",
        AT,
        command=command,
        skipped=huge,
        blocked=[{"node": _long("node", 253), "event": "DisruptionBlocked", "message": huge}],
        expired=[_long("claim", 253)],
        node_pools={c: pools[i % len(pools)] for i, c in enumerate(command["candidates"])},
    )
    labels = {"karpenter.sh/nodepool": "default", "node.kubernetes.io/instance-type": _long("t", 63)}
    records += dl.interruption_records("i1", AT, [(_long("claim", 253), huge, huge, labels)])
    return records


def test_no_stored_record_exceeds_the_item_size_and_what_was_cut_is_counted() -> None:
    """Every kind of record, with every field it takes as large as input allows: each stored item is at most
    MAX_ITEM_BYTES (DynamoDB refuses a batch with one item over 400 KB), each string at most MAX_TEXT characters
    and a marker; ``detail.truncated`` counts what was cut, by field, and the record still reads back."""
    records = _hostile_records()
    assert {r.kind for r in records} == {
        "provisioning",
        "nodeclaim",
        "unschedulable",
        "disruption",
        "blocked",
        "expiration",
        "interruption",
    }
    for record in records:
        item = dl.to_item(record)
        assert dl.item_size(item) <= dl.MAX_ITEM_BYTES, record.kind
        back = dl.from_item(item)
        assert (back.kind, back.id, back.pod_count) == (record.kind, record.id, record.pod_count)

        def strings(value: object) -> list[str]:
            if isinstance(value, str):
                return [value]
            if isinstance(value, dict):
                return [s for v in value.values() for s in strings(v)]
            if isinstance(value, list | tuple):
                return [s for v in value for s in strings(v)]
            return []

        assert max(len(s) for s in strings(back.to_json())) <= dl.MAX_TEXT + len("...[+9999999 characters]")
        if record.kind != "expiration":
            assert back.detail["truncated"], record.kind
    unschedulable = [dl.from_item(dl.to_item(r)) for r in records if r.kind == "unschedulable"]
    racks = next(r for r in unschedulable if r.pods == ("racks/one",))
    assert racks.detail["reasons"]["default"].startswith("requires In [rack-0000000, rack-0000001")
    assert racks.detail["reasons"]["default"].endswith(" characters]")
    assert racks.detail["truncated"] == {"detail.reasons": {"characters": len(racks_reason()) - dl.MAX_TEXT}}
    by_pool = next(r for r in unschedulable if r.pods != ("racks/one",))
    assert by_pool.detail["truncated"]["detail.reasons"]["entries"] > 0  # 3,000 NodePools' reasons: some cut
    assert by_pool.detail["truncated"]["nodePools"]["entries"] > 0
    run = dl.from_item(dl.to_item(records[0]))
    assert run.kind == "provisioning"
    assert run.detail["truncated"]["detail.pods"]["entries"] > 0
    assert len(run.detail["pods"]) < dl.MAX_PODS_PER_RECORD


def racks_reason() -> str:
    return "requires In [" + ", ".join(f"rack-{i:07d}" for i in range(80_000)) + "]"


def test_a_record_within_the_caps_is_stored_as_it_is() -> None:
    for record in provisioning():
        body = json.loads(dl.to_item(record)["body"]["S"])
        assert body == record.to_json()
        assert "truncated" not in body["detail"]


def test_item_size_counts_names_and_values_in_utf8() -> None:
    assert dl.item_size({"pk": {"S": "ab"}, "n": {"N": "123"}, "é": {"S": "ü"}}) == 2 + 2 + 1 + 3 + 2 + 2


@pytest.mark.parametrize(
    ("detail", "cut"),
    [
        ({"message": "x" * dl.MAX_TEXT}, None),  # at the cap: kept
        ({"message": "x" * (dl.MAX_TEXT + 1)}, {"detail.message": {"characters": 1}}),
        ({"message": 'say "' + "x" * dl.MAX_TEXT + '"'}, {"detail.message": {"characters": 6}}),  # escaped quotes
        ({"message": "é" * (dl.MAX_TEXT + 2)}, {"detail.message": {"characters": 2}}),  # escapes: \\u00e9
        ({"ids": list(range(dl.MAX_PODS_PER_RECORD + 1))}, {"detail.ids": {"entries": 1}}),  # numbers, no quotes
        ({"by": {str(i): i for i in range(dl.MAX_PODS_PER_RECORD + 3)}}, {"detail.by": {"entries": 3}}),
    ],
)
def test_each_cap_is_found_whatever_the_json_looks_like(detail: dict[str, object], cut: object) -> None:
    record = Decision("blocked", AT, "b-1", "d1", "summary", detail=detail)
    stored = dl.from_item(dl.to_item(record))
    assert stored.detail.get("truncated") == cut
    if cut is None:
        assert stored == record


def test_a_deletion_through_the_api_is_its_own_kind_not_an_interruption() -> None:
    """kubectl delete nodeclaim: Karpenter's termination controller treats it as a user's deletion."""
    labels = {"karpenter.sh/nodepool": "default", "node.kubernetes.io/instance-type": "m5.large"}
    (record,) = dl.deletion_records("i3", AT, [("default-abcde", "NodeClaim default-abcde", labels)], first=2)
    assert record.kind == "deletion" != "interruption"
    assert record.id == "i3-0002"
    assert record.node_pools == ("default",)
    assert record.summary == (
        "terminate NodeClaim default-abcde (m5.large): NodeClaim default-abcde deleted through the Kubernetes API"
    )
    assert record.detail == {
        "nodeClaim": "default-abcde",
        "reason": "Deleted",
        "deleted": "NodeClaim default-abcde",
        "instanceType": "m5.large",
    }
    assert dl.from_item(dl.to_item(record, 90)) == record


def test_a_records_pointers_share_its_key_worked_out_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A NodeClaim's record names up to hundreds of pods, each pointer keyed by the record's sk: the record's time is
    rendered once for all its pointers (it was once per pointer: 20,000 strftime calls in a 20,000-pod run), and
    ``items`` (what the writer stores) is the record item and its pointers, unchanged."""
    rendered: list[datetime] = []
    real = dl.time_key

    def counted(at: datetime) -> str:
        rendered.append(at)
        return real(at)

    monkeypatch.setattr(dl, "time_key", counted)
    pods = tuple(f"shop/web-{i}" for i in range(500))
    record = Decision(dl.NODECLAIM, AT, "run-0001", "run", "NodeClaim", ("default",), pods, len(pods))

    *pods, pool = dl.index_items(record)
    assert len(pods) == 500
    assert len(rendered) == 1
    assert {i["sk"]["S"] for i in pods} == {f"{real(AT)}#run-0001"}
    assert pool["sk"]["S"].startswith(f"{real(AT)}#run-0001#")
    for kind in provisioning() + dl.disruption_records("r", AT, blocked=[{"node": "n", "event": "e", "message": "m"}]):
        assert dl.items(kind, 7) == [dl.to_item(kind, 7), *dl.index_items(kind, 7)]


def test_pointer_refs_reads_both_pointer_layouts_and_names_a_bad_item() -> None:
    """A NodePool's pointers written before they were grouped (one a record, ``ref``) stay readable for their TTL;
    a grouped one names its records in ``refs``; a ``refs`` that is not a list of [pk, sk] is an error naming it."""
    old = {"pk": {"S": "NODEPOOL#default#03"}, "sk": {"S": "t#r-1"}, "ref": {"S": "DECISION#d#03"}, "kind": {"S": "x"}}
    assert dl.pointer_refs(old) == [("DECISION#d#03", "t#r-1")]
    grouped = {
        "pk": {"S": "NODEPOOL#default#05"},
        "sk": {"S": "t#r-2#abc"},
        "refs": {"S": '[["P1","t#r-1"],["P2","t#r-2"]]'},
    }
    assert dl.pointer_refs(grouped) == [("P1", "t#r-1"), ("P2", "t#r-2")]
    assert dl.pointer_refs({"pk": {"S": "x"}, "sk": {"S": "y"}}) == []
    for bad in ('[["P1"]]', "{}", "[[1, 2]]", "not json"):
        with pytest.raises(DecisionError, match=r"pointer NODEPOOL#default#05/t#r-2#abc: refs"):
            dl.pointer_refs({**grouped, "refs": {"S": bad}})


def test_may_cut_finds_a_long_run_without_quotes_as_splitting_at_quotes_did() -> None:
    """``_may_cut`` looks for more than ``text`` characters without a quote with a regular expression (splitting every
    body at its quotes built a string per piece): the same answer as the split on random bodies."""
    import random

    def split(stored: str, text: int) -> bool:
        return max(map(len, stored.split('"'))) > text

    rng = random.Random(7)
    for _ in range(3000):
        stored = "".join(rng.choice(['"', "a", ",", "x" * rng.randint(0, 12)]) for _ in range(rng.randint(0, 40)))
        for text in (1, 5, 12, 30):
            assert dl._may_cut(stored, text, 10**9) == split(stored, text), (stored, text)
