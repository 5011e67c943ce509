"""`plan` / `explain` with EC2 capacity reservations: the `aws ec2 describe-capacity-reservations` JSON as an
input, EC2NodeClass capacityReservationSelectorTerms, reserved NodeClaims first and never beyond the count."""

from __future__ import annotations

import io
import json
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from nodeflow.cli import main

OWNER = "123456789012"
OTHER = "210987654321"
RID = "karpenter.k8s.aws/capacity-reservation-id"
RTYPE = "karpenter.k8s.aws/capacity-reservation-type"
CT = "karpenter.sh/capacity-type"


def node_pool(name: str = "gpu", capacity_types: list[str] | None = None, node_class: str = "default") -> str:
    ct = (
        ""
        if capacity_types is None
        else f"\n        - {{key: {CT}, operator: In, values: {json.dumps(capacity_types)}}}"
    )
    return f"""
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: {name}}}
spec:
  template:
    spec:
      requirements:
        - {{key: karpenter.k8s.aws/instance-family, operator: In, values: [g5]}}{ct}
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: {node_class}}}
"""


def node_class(terms: list[dict[str, Any]] | None, name: str = "default") -> str:
    selector = "" if terms is None else f"\n  capacityReservationSelectorTerms: {json.dumps(terms)}"
    return f"""
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {{name: {name}}}
spec:
  role: KarpenterNodeRole-test
  amiSelectorTerms: [{{alias: al2023@latest}}]
  subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: test}}}}]
  securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: test}}}}]{selector}
"""


def pods(name: str, replicas: int, gpus: int = 4, node_selector: dict[str, str] | None = None) -> str:
    selector = f"\n      nodeSelector: {json.dumps(node_selector)}" if node_selector else ""
    return f"""
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:{selector}
      containers:
        - name: c
          image: x
          resources:
            requests: {{cpu: "30", memory: 100Gi, nvidia.com/gpu: "{gpus}"}}
            limits: {{nvidia.com/gpu: "{gpus}"}}
"""


def reservation(rid: str, available: int, zone: str = "us-east-1a", **over: Any) -> dict[str, Any]:
    item: dict[str, Any] = {
        "CapacityReservationId": rid,
        "OwnerId": OWNER,
        "CapacityReservationArn": f"arn:aws:ec2:us-east-1:{OWNER}:capacity-reservation/{rid}",
        "InstanceType": "g5.12xlarge",
        "InstancePlatform": "Linux/UNIX",
        "AvailabilityZone": zone,
        "Tenancy": "default",
        "TotalInstanceCount": max(available, 1) + 1,
        "AvailableInstanceCount": available,
        "EbsOptimized": True,
        "State": "active",
        "StartDate": "2026-01-01T00:00:00+00:00",
        "EndDateType": "unlimited",
        "InstanceMatchCriteria": "targeted",
        "CreateDate": "2026-01-01T00:00:00+00:00",
        "Tags": [{"Key": "team", "Value": "ml"}],
        "ReservationType": "default",
    }
    item.update(over)
    return item


def files(tmp_path: Path, manifests: list[str], reservations: list[dict[str, Any]] | None) -> list[str]:
    path = tmp_path / "cluster.yaml"
    path.write_text("\n---\n".join(textwrap.dedent(d).strip() for d in manifests) + "\n")
    args = ["-f", str(path)]
    if reservations is not None:
        doc = tmp_path / "reservations.json"
        doc.write_text(json.dumps({"CapacityReservations": reservations}, indent=4))
        args += ["-f", str(doc)]
    return args


def run(command: str, *args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main([command, *args], out, err)
    return code, out.getvalue(), err.getvalue()


def plan(tmp_path: Path, manifests: list[str], reservations: list[dict[str, Any]] | None) -> dict[str, Any]:
    code, out, err = run("plan", *files(tmp_path, manifests, reservations), "-o", "json")
    assert code == 0, err
    result: dict[str, Any] = json.loads(out)
    return result


def used(result: dict[str, Any]) -> Counter[str]:
    return Counter(nc["labels"].get(RID, nc["capacityType"]) for nc in result["nodeClaims"])


def test_reserved_node_claims_first_then_on_demand(tmp_path: Path) -> None:
    result = plan(
        tmp_path,
        [node_pool(capacity_types=["reserved", "on-demand"]), node_class([{"tags": {"team": "ml"}}]), pods("t", 6)],
        [reservation("cr-0aaa", 2), reservation("cr-0bbb", 1, zone="us-east-1b")],
    )
    assert used(result) == {"cr-0aaa": 2, "cr-0bbb": 1, "on-demand": 3}
    on_demand = 0.0
    for nc in result["nodeClaims"]:
        if nc["capacityType"] == "reserved":
            assert nc["pricePerHour"] == 0.0
            assert nc["instanceTypes"] == ["g5.12xlarge"]
            assert nc["zones"] == [{"cr-0aaa": "us-east-1a", "cr-0bbb": "us-east-1b"}[nc["labels"][RID]]]
            assert nc["labels"][CT] == "reserved"
            assert nc["labels"][RTYPE] == "default"
            assert nc["labels"]["topology.kubernetes.io/zone"] == nc["zones"][0]
        else:
            assert nc["capacityType"] == "on-demand"
            assert nc["labels"][CT] == "on-demand"
            assert RID not in nc["labels"]
            on_demand += nc["pricePerHour"]
    assert result["totalPricePerHour"] == pytest.approx(on_demand)
    assert not result["unschedulable"]

    code, table, _ = run(
        "plan",
        *files(
            tmp_path,
            [node_pool(capacity_types=["reserved", "on-demand"]), node_class([{"tags": {"team": "ml"}}]), pods("t", 6)],
            [reservation("cr-0aaa", 2), reservation("cr-0bbb", 1, zone="us-east-1b")],
        ),
    )
    assert code == 0
    rows = [line.split() for line in table.splitlines() if line.startswith("gpu ")]
    assert sorted(row[3] for row in rows) == ["on-demand"] * 3 + ["reserved"] * 3
    assert all(row[-1] == "0.0000" for row in rows if row[3] == "reserved")


def test_without_the_document_or_terms_nothing_is_reserved(tmp_path: Path) -> None:
    manifests = [node_pool(capacity_types=["reserved", "on-demand"]), node_class(None), pods("t", 3)]
    baseline = plan(tmp_path, manifests, None)
    assert used(baseline) == {"on-demand": 3}
    # a document, but the class selects nothing: the same plan
    assert plan(tmp_path, manifests, [reservation("cr-0aaa", 2)]) == baseline
    # terms, but no document: the same plan
    with_terms = [manifests[0], node_class([{"tags": {"team": "ml"}}]), manifests[2]]
    assert plan(tmp_path, with_terms, None) == baseline


def test_nodepool_must_allow_reserved(tmp_path: Path) -> None:
    terms = node_class([{"tags": {"team": "ml"}}])
    docs = [reservation("cr-0aaa", 3)]
    not_allowed = plan(tmp_path, [node_pool(capacity_types=["spot", "on-demand"]), terms, pods("t", 2)], docs)
    assert all(nc["capacityType"] != "reserved" for nc in not_allowed["nodeClaims"])
    # no capacity-type requirement: every capacity type is allowed, reservations first (the rest spot, as
    # Karpenter: reserved, then spot, then on-demand)
    default = plan(tmp_path, [node_pool(capacity_types=None), terms, pods("t", 4)], docs)
    assert used(default) == {"cr-0aaa": 3, "spot": 1}


def test_selector_terms_id_tags_owner_and_match_criteria(tmp_path: Path) -> None:
    docs = [
        reservation("cr-0aaa", 1, InstanceMatchCriteria="open"),
        reservation("cr-0bbb", 1, Tags=[{"Key": "team", "Value": "web"}]),
        reservation("cr-0ccc", 1, OwnerId=OTHER),
        reservation("cr-0ddd", 1, Tags=[]),
    ]
    pool = node_pool(capacity_types=["reserved", "on-demand"])

    def chosen(terms: list[dict[str, Any]]) -> set[str]:
        result = plan(tmp_path, [pool, node_class(terms), pods("t", 5)], docs)
        return {rid for rid in used(result) if rid.startswith("cr-")}

    assert chosen([{"id": "cr-0ddd"}]) == {"cr-0ddd"}
    assert chosen([{"tags": {"team": "ml"}}]) == {"cr-0aaa", "cr-0ccc"}
    assert chosen([{"tags": {"team": "ml"}, "ownerID": OWNER}]) == {"cr-0aaa"}
    assert chosen([{"tags": {"team": "*"}}]) == {"cr-0aaa", "cr-0bbb", "cr-0ccc"}
    assert chosen([{"instanceMatchCriteria": "open"}]) == {"cr-0aaa"}
    assert chosen([{"tags": {"team": "web"}}, {"id": "cr-0ddd"}]) == {"cr-0bbb", "cr-0ddd"}


def test_expired_cancelled_used_up_and_other_types_are_not_used(tmp_path: Path) -> None:
    docs = [
        reservation("cr-0exp", 4, State="expired"),
        reservation("cr-0can", 4, State="cancelled"),
        reservation("cr-0zero", 0),
        reservation("cr-0big", 4, InstanceType="g5.48xlarge"),  # 8 GPUs: two of the pods on each node
    ]
    manifests = [node_pool(capacity_types=["reserved", "on-demand"]), node_class([{"tags": {"team": "ml"}}])]
    result = plan(tmp_path, [*manifests, pods("t", 6)], docs)
    # only the g5.48xlarge reservation is usable, and it is free: three of its four instances hold the six pods
    assert used(result) == {"cr-0big": 3}
    assert all(len(nc["pods"]) == 2 for nc in result["nodeClaims"])
    # the used-up reservation is named when a pod falls back to on-demand
    only_zero = plan(tmp_path, [*manifests, pods("t", 1)], [reservation("cr-0zero", 0)])
    assert used(only_zero) == {"on-demand": 1}
    pod = only_zero["nodeClaims"][0]["pods"][0]
    code, out, err = run("explain", *files(tmp_path, [*manifests, pods("t", 1)], [reservation("cr-0zero", 0)]), pod)
    assert code == 0, err
    assert "capacity reservations used up: cr-0zero (g5.12xlarge, us-east-1a)" in out


def test_zone_pinned_pods_and_a_pod_requiring_reserved(tmp_path: Path) -> None:
    docs = [reservation("cr-0aaa", 2), reservation("cr-0bbb", 2, zone="us-east-1b")]
    manifests = [node_pool(capacity_types=["reserved", "on-demand"]), node_class([{"tags": {"team": "ml"}}])]
    in_b = plan(tmp_path, [*manifests, pods("t", 3, node_selector={"topology.kubernetes.io/zone": "us-east-1b"})], docs)
    assert used(in_b) == {"cr-0bbb": 2, "on-demand": 1}
    assert all(nc["zones"] == ["us-east-1b"] for nc in in_b["nodeClaims"])
    must = plan(tmp_path, [*manifests, pods("t", 5, node_selector={CT: "reserved"})], docs)
    assert used(must) == {"cr-0aaa": 2, "cr-0bbb": 2}
    (stuck,) = must["unschedulable"]
    assert "capacity reservations used up" in stuck["reasons"]["gpu"]
    by_id = plan(tmp_path, [*manifests, pods("t", 1, node_selector={RID: "cr-0bbb"})], docs)
    assert used(by_id) == {"cr-0bbb": 1}


def test_capacity_block_labels_and_document_inside_yaml(tmp_path: Path) -> None:
    block = reservation("cr-0blk", 1, ReservationType="capacity-block", EndDate="2099-01-01T00:00:00.000Z")
    manifests = [node_pool(capacity_types=["reserved", "on-demand"]), node_class([{"id": "cr-0blk"}]), pods("t", 1)]
    path = tmp_path / "all.yaml"
    text = "\n---\n".join(textwrap.dedent(d).strip() for d in manifests)
    path.write_text(text + "\n---\n" + json.dumps({"CapacityReservations": [block]}) + "\n")
    code, out, err = run("plan", "-f", str(path), "-o", "json")
    assert code == 0, err
    (nc,) = json.loads(out)["nodeClaims"]
    assert (nc["capacityType"], nc["pricePerHour"], nc["labels"][RTYPE]) == ("reserved", 0.0, "capacity-block")


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"AvailableInstanceCount": -1}, "AvailableInstanceCount: expected a non-negative integer"),
        ({"InstanceType": None}, "InstanceType: required field is missing"),
        ({"ReservationType": "spot-block"}, "ReservationType: 'spot-block' is not one of default, capacity-block"),
    ],
)
def test_bad_document_is_refused_naming_the_field(tmp_path: Path, bad: dict[str, Any], message: str) -> None:
    item = {k: v for k, v in {**reservation("cr-0aaa", 1), **bad}.items() if v is not None}
    args = files(tmp_path, [node_pool(), node_class([{"id": "cr-0aaa"}]), pods("t", 1)], [item])
    code, _, err = run("plan", *args)
    assert code != 0
    assert "reservations.json" in err
    assert "CapacityReservations[0][cr-0aaa]." + message.split(":")[0] in err
    assert message in err


def test_reservation_listed_twice_is_refused(tmp_path: Path) -> None:
    args = files(tmp_path, [node_pool(), node_class([{"id": "cr-0aaa"}]), pods("t", 1)], [reservation("cr-0aaa", 1)])
    again = tmp_path / "again.json"
    again.write_text(json.dumps({"CapacityReservations": [reservation("cr-0aaa", 3)]}))
    code, _, err = run("plan", *args, "-f", str(again))
    assert code != 0
    assert "capacity reservation cr-0aaa is listed twice" in err
