"""Parity: when a NodeClaim is drifted (Karpenter's nodeclaim/disruption drift controller).

nodeflow has no Drifted-condition controller in the loop of ``disrupt``: it judges drift itself each
round, so every spec is checked through ``disrupt --dry-run``: a drifted node (the only thing the pool
lets the round do, see ``_drift.DRIFT_ONLY``) is disrupted with reason Drifted, a node that is not is left.
"""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest

from tests.parity._drift import HASH, HASH_VERSION, busy_node, command, drift_pool, drifted, hash_of, hashed, world
from tests.parity.harness import (
    CAPACITY_TYPE,
    INSTANCE_TYPE,
    NOW,
    RID,
    Obj,
    ago,
    node_class,
    requirement,
    reservations,
    reserved_class,
    taint,
    toleration,
    ts,
)
from tests.parity.upstream import mirrors

UPSTREAM = "pkg/controllers/nodeclaim/disruption/drift_test.go"

NOT_EXPRESSIBLE: dict[str, str] = {
    "Drift / should ignore drift for NodeClaims not managed by this instance of Karpenter": (
        "NodeClaims of another cloud provider's node class next to nodeflow's: nodeflow is the only "
        "provisioner of the cluster by design and judges every NodeClaim of its NodePools"
    ),
    "Drift / should detect static drift before cloud provider drift": (
        "which drift rule is reported is not in disrupt's output (the reason is Drifted either way); "
        "drift.py checks the template hash first, as upstream"
    ),
    "Drift / should detect node requirement drift before cloud provider drift": (
        "which drift rule is reported is not in disrupt's output (the reason is Drifted either way); "
        "drift.py checks requirements before the EC2NodeClass, as upstream"
    ),
    "Drift / should remove the status condition from the nodeClaim when the nodeClaim launch condition is unknown": (
        "Drifted-condition bookkeeping of a NodeClaim that is not launched: it has no node, so disrupt has "
        "no candidate and no condition to show"
    ),
    "Drift / should remove the status condition from the nodeClaim when the nodeClaim launch condition is false": (
        "Drifted-condition bookkeeping of a NodeClaim that is not launched: it has no node, so disrupt has "
        "no candidate and no condition to show"
    ),
    "Drift / Reserved Capacity / should drift when a matching instance type exists but the only offering is spot": (
        "the offerings are the bundled catalog's, and it sells no instance type as spot but not on-demand in a zone; "
        "nodeflow judges a reserved node by its type's on-demand offering in its zone (what it runs as once the "
        "reservation is gone), so a reserved node drifts exactly when that offering is gone, which the "
        "no-compatible-offerings entry shows"
    ),
}


def _one(pool: Obj, **node_kw: Any) -> list[Obj]:
    return world([pool], busy_node("n1", **node_kw))


def _edited(pool: Obj, path: tuple[str, ...], value: Any) -> Obj:
    out = copy.deepcopy(pool)
    target = out
    for key in path[:-1]:
        target = target.setdefault(key, {})
    target[path[-1]] = value
    return out


@mirrors("Drift / should detect drift")
def test_a_changed_template_drifts_the_node() -> None:
    before = drift_pool()
    after = drift_pool(labels={"team": "payments"})
    assert drifted(_one(after, claim_annotations=hashed(before))) == ["n1"]
    assert drifted(_one(before, claim_annotations=hashed(before))) == []


def test_karpenters_own_hash_of_a_template_is_not_drift() -> None:
    """A NodeClaim Karpenter made carries Karpenter's hash number; nodeflow computes the same number
    (EKS Auto Mode's general-purpose NodePool, as `kubectl get nodepool -o yaml` shows it)."""
    pool = drift_pool(
        requirements=[requirement(CAPACITY_TYPE, "In", "on-demand")],
        expire_after="336h",
        termination_grace_period="24h0m0s",
    )
    pool["spec"]["template"]["spec"]["nodeClassRef"] = {
        "group": "eks.amazonaws.com",
        "kind": "NodeClass",
        "name": "default",
    }
    assert hash_of(pool) == "4012513481623584108"


@mirrors("Drift / should not detect drift if the nodePool does not exist")
def test_a_node_of_a_missing_nodepool_is_not_drifted() -> None:
    pool = drift_pool()
    objs = world([pool], busy_node("n1", pool="gone", claim_annotations={HASH: "1", HASH_VERSION: "v3"}))
    assert drifted(objs) == []


@mirrors("Drift / should remove the status condition from the nodeClaim if the nodeClaim is no longer drifted")
def test_a_template_changed_back_is_no_longer_drift() -> None:
    before = drift_pool()
    changed = drift_pool(labels={"team": "payments"})
    stale = {"type": "Drifted", "status": "True", "reason": "NodePoolDrifted", "lastTransitionTime": ago(minutes=5)}
    assert drifted(_one(changed, claim_annotations=hashed(before))) == ["n1"]
    assert drifted(_one(before, claim_annotations=hashed(before), claim_conditions=[stale])) == []


STATIC_CHANGES: dict[str, tuple[tuple[str, ...], Any]] = {
    "Annoations": (("spec", "template", "metadata", "annotations"), {"team": "payments"}),
    "Labels": (("spec", "template", "metadata", "labels"), {"team": "payments"}),
    "Taints": (("spec", "template", "spec", "taints"), [taint("dedicated", "db")]),
    "StartupTaints": (("spec", "template", "spec", "startupTaints"), [taint("cni-not-ready")]),
    "NodeClassRef Name": (
        ("spec", "template", "spec", "nodeClassRef"),
        {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "other"},
    ),
    "ExpireAfter": (("spec", "template", "spec", "expireAfter"), "100h"),
    "TerminationGracePeriod": (("spec", "template", "spec", "terminationGracePeriod"), "30m"),
}


@mirrors(
    *(
        f"Drift / NodePool Static Drift / should detect drift on changes to the static fields / {f}"
        for f in STATIC_CHANGES
    )
)
@pytest.mark.parametrize("field", list(STATIC_CHANGES))
def test_every_hashed_template_field_drifts_the_node(field: str) -> None:
    before = drift_pool()
    path, value = STATIC_CHANGES[field]
    after = _edited(before, path, value)
    tolerate = {"tolerations": [toleration()]}  # the pods still fit under the new taints
    objs = world([after], busy_node("n1", claim_annotations=hashed(before), pod_kw=tolerate), [node_class("other")])
    assert drifted(objs) == ["n1"]


def test_requirements_are_not_hashed() -> None:
    before = drift_pool()
    after = drift_pool(requirements=[requirement(CAPACITY_TYPE, "In", "on-demand", "spot")])
    assert hash_of(after) == hash_of(before)
    assert drifted(_one(after, claim_annotations=hashed(before))) == []


@mirrors(
    "Drift / NodePool Static Drift / should not return drifted if karpenter.sh/nodepool-hash annotation is not present on the NodePool",
    differs=(
        "nodeflow has no NodePool hash controller: it computes the NodePool's hash from its template each "
        "round (a Karpenter annotation left on the NodePool would go stale after an edit), so a changed "
        "template is drift whatever the NodePool's annotations say"
    ),
)
def test_the_nodepools_own_annotation_is_not_needed() -> None:
    before = drift_pool()
    after = drift_pool(labels={"team": "payments"})
    assert "annotations" not in after["metadata"]
    assert drifted(_one(after, claim_annotations=hashed(before))) == ["n1"]


@mirrors(
    "Drift / NodePool Static Drift / should not return drifted if karpenter.sh/nodepool-hash annotation is not present on the NodeClaim"
)
def test_a_nodeclaim_without_a_hash_is_not_hash_drifted() -> None:
    after = drift_pool(labels={"team": "payments"})
    assert drifted(_one(after, claim_annotations={HASH_VERSION: "v3"})) == []


@mirrors(
    "Drift / NodePool Static Drift / should not return drifted if the NodeClaim's karpenter.sh/nodepool-hash-version annotation does not match the NodePool's"
)
def test_a_hash_of_another_version_is_not_compared() -> None:
    before = drift_pool()
    after = drift_pool(labels={"team": "payments"})
    assert drifted(_one(after, claim_annotations=hashed(before, version="v2"))) == []


@mirrors(
    "Drift / NodePool Static Drift / should not return drifted if karpenter.sh/nodepool-hash-version annotation is not present on the NodeClaim"
)
def test_a_hash_without_its_version_is_not_compared() -> None:
    before = drift_pool()
    after = drift_pool(labels={"team": "payments"})
    assert drifted(_one(after, claim_annotations=hashed(before, version=None))) == []


@mirrors(
    "Drift / NodeRequirement Drift / should return drifted only on NodeClaims that are drifted from an updated nodePool"
)
@pytest.mark.parametrize(
    ("requirements", "is_drifted"),
    [
        ([requirement(CAPACITY_TYPE, "In", "on-demand", "spot")], False),
        ([requirement(CAPACITY_TYPE, "In", "spot")], True),
        ([requirement(INSTANCE_TYPE, "In", "m5.large", "m5.xlarge")], False),
        ([requirement(INSTANCE_TYPE, "NotIn", "m5.xlarge")], True),
        ([requirement("topology.kubernetes.io/zone", "In", "us-east-1b")], True),
        ([requirement("team", "In", "payments")], True),  # a label the node does not have
        ([requirement("team", "Exists")], True),
        ([requirement("team", "NotIn", "payments")], False),
        ([requirement("team", "DoesNotExist")], False),
        ([requirement("karpenter.k8s.aws/instance-family", "In", "m5")], False),  # the type's own label
        ([requirement("karpenter.k8s.aws/instance-family", "In", "c5")], True),
    ],
)
def test_requirements_the_node_no_longer_meets_drift_it(requirements: list[Obj], is_drifted: bool) -> None:
    pool = drift_pool(requirements=requirements)
    objs = _one(pool, claim_annotations=hashed(pool))
    assert drifted(objs) == (["n1"] if is_drifted else [])


def _relabelled(objs: list[Obj], labels: dict[str, str | None]) -> list[Obj]:
    for o in objs:
        if o["kind"] in ("Node", "NodeClaim"):
            for k, v in labels.items():
                if v is None:
                    o["metadata"]["labels"].pop(k, None)
                else:
                    o["metadata"]["labels"][k] = v
    return objs


@mirrors("Drift / should detect stale instance type drift if the instance type label doesn't exist")
def test_a_node_without_an_instance_type_label_is_drifted() -> None:
    pool = drift_pool()
    objs = _relabelled(_one(pool, claim_annotations=hashed(pool)), {INSTANCE_TYPE: None})
    for o in objs:
        if o["kind"] == "NodeClaim":
            o["spec"]["requirements"] = [r for r in o["spec"]["requirements"] if r["key"] != INSTANCE_TYPE]
    assert drifted(objs) == ["n1"]


def _with_type(objs: list[Obj], name: str) -> list[Obj]:
    _relabelled(objs, {INSTANCE_TYPE: name})
    for o in objs:
        if o["kind"] == "NodeClaim":
            o["spec"]["requirements"] = [
                requirement(INSTANCE_TYPE, "In", name) if r["key"] == INSTANCE_TYPE else r
                for r in o["spec"]["requirements"]
            ]
    return objs


@mirrors("Drift / should detect stale instance type drift if the instance type doesn't exist")
def test_an_instance_type_no_longer_sold_drifts_the_node_after_an_hour() -> None:
    pool = drift_pool()
    old = _with_type(_one(pool, claim_annotations=hashed(pool), created=ago(hours=2)), "m5.retired")
    assert drifted(old) == ["n1"]
    young = _with_type(_one(pool, claim_annotations=hashed(pool), created=ago(minutes=30)), "m5.retired")
    assert drifted(young) == []  # Karpenter looks only an hour after the NodeClaim was made


@mirrors("Drift / should detect stale instance type drift if the instance type offerings doesn't exist")
def test_a_capacity_type_no_longer_sold_for_the_type_drifts_the_node() -> None:
    pool = drift_pool()
    objs = _one(pool, claim_annotations=hashed(pool), instance_type="t2.nano", capacity_type="spot")
    assert drifted(objs) == ["n1"]  # t2.nano has no spot offering any more
    objs = _one(pool, claim_annotations=hashed(pool), instance_type="t2.nano", capacity_type="on-demand")
    assert drifted(objs) == []


@mirrors(
    "Drift / should detect stale instance type drift if the instance type offerings aren't compatible with the nodeclaim"
)
def test_a_zone_where_the_type_is_not_sold_drifts_the_node() -> None:
    pool = drift_pool()
    objs = _one(pool, claim_annotations=hashed(pool), zone="us-east-1e")  # m5.xlarge is not sold in 1e
    assert drifted(objs) == ["n1"]
    objs = _one(pool, claim_annotations=hashed(pool), zone="us-east-1b")
    assert drifted(objs) == []


def test_now_is_the_clock_of_the_hour_rule() -> None:
    pool = drift_pool()
    objs = _with_type(_one(pool, claim_annotations=hashed(pool), created=ts(NOW)), "m5.retired")
    assert command(objs) is None
    later = command(objs, now=NOW + timedelta(hours=1, minutes=1))
    assert later is not None
    assert later["reason"] == "Drifted"


# --- reserved capacity: a reserved node is judged by its type's on-demand offering in its zone -----------------------

_RES = "Drift / Reserved Capacity / "


def _reserved(zone: str = "us-east-1a", *, listed: bool = True) -> list[Obj]:
    """A reserved m5.xlarge node of reservation cr-1, with the reservation in the input (``listed``) or gone."""
    pool = drift_pool()
    objs = [
        reserved_class(ids=["cr-1"]),
        pool,
        *busy_node(
            "n1",
            claim_annotations=hashed(pool),
            zone=zone,
            capacity_type="reserved",
            labels={RID: "cr-1"},
            created=ago(hours=2),
        ),
    ]
    return [*objs, reservations(("cr-1", "m5.xlarge", 0))] if listed else objs


@mirrors(
    _RES + "shouldn't drift when a matching instance type exists with reserved and on-demand offerings",
    _RES + "shouldn't drift when a matching instance type exists with reserved offerings",
)
def test_a_reserved_node_whose_type_is_still_sold_does_not_drift() -> None:
    """With its reservation listed. A capacity reservation exists only for a type EC2 sells on-demand in that zone,
    so "reserved offerings only" is this case in the catalog: the type's on-demand offering is still there."""
    assert drifted(_reserved()) == []


@mirrors(_RES + "shouldn't drift when a matching instance type exists with on-demand offerings")
def test_a_reserved_node_whose_reservation_is_gone_does_not_drift() -> None:
    assert drifted(_reserved(listed=False)) == []


@mirrors(_RES + "should drift when a matching instance type exists but there are no compatible offerings")
def test_a_reserved_node_in_a_zone_its_type_is_not_sold_in_drifts() -> None:
    assert drifted(_reserved("us-east-1e", listed=False)) == ["n1"]  # m5.xlarge is not sold in 1e
