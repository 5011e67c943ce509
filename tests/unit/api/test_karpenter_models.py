"""Karpenter v1 models: published example shapes load, defaults apply, every rule rejects."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml

from nodeflow.api.duration import DurationError, format_duration, parse_duration
from nodeflow.api.errors import format_loc, format_validation_error
from nodeflow.api.karpenter import (
    AMISelectorTerm,
    Budget,
    EC2NodeClass,
    KubeletConfiguration,
    NodeClaim,
    NodePool,
    NodeSelectorRequirementWithMinValues,
    cron_error,
    load_manifest,
    restricted_label_error,
)
from nodeflow.api.meta import NodeSelectorRequirement, ObjectMeta, Taint, Toleration

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "karpenter"

Doc = dict[str, Any]


def nodepool(**spec: Any) -> Doc:
    doc: Doc = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "template": {
                "spec": {
                    "requirements": [
                        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                    ],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                }
            }
        },
    }
    doc["spec"].update(spec)
    return doc


def nodeclass(**spec: Any) -> Doc:
    doc: Doc = {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": "KarpenterNodeRole-my-cluster",
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "my-cluster"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "my-cluster"}}],
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
        },
    }
    doc["spec"].update(spec)
    return doc


def nodeclaim() -> Doc:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": "default-abcde", "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {
            "requirements": [
                {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["default"]},
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]},
            ],
            "resources": {"requests": {"cpu": "1500m", "memory": "2Gi", "pods": 3}},
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
        },
        "status": {
            "nodeName": "ip-10-0-0-1.ec2.internal",
            "providerID": "aws:///us-east-1a/i-0123456789abcdef0",
            "imageID": "ami-0123456789abcdef0",
            "capacity": {"cpu": "2", "memory": "8Gi", "pods": "29"},
            "allocatable": {"cpu": "1930m", "memory": "7Gi", "pods": "29"},
            "conditions": [
                {"type": "Launched", "status": "True", "lastTransitionTime": "2024-08-01T00:00:00Z"},
                {"type": "Ready", "status": "Unknown", "reason": "AwaitingReconciliation"},
            ],
            "lastPodEventTime": "2024-08-01T00:05:00Z",
        },
    }


def errors_of(model: type[pydantic.BaseModel], doc: Doc) -> list[str]:
    with pytest.raises(pydantic.ValidationError) as info:
        model.model_validate(doc)
    return format_validation_error(info.value)


def assert_error(model: type[pydantic.BaseModel], doc: Doc, path: str, rule: str) -> None:
    lines = errors_of(model, doc)
    assert any(line.startswith(f"{path}: ") and rule in line for line in lines), lines


# ---------------------------------------------------------------------------------------------
# Example manifests


EXAMPLE_FILES = sorted(EXAMPLES.glob("*.yaml"))


def test_examples_exist() -> None:
    names = {p.stem for p in EXAMPLE_FILES}
    assert {
        "general-purpose",
        "spot",
        "multi-arch",
        "min-values",
        "max-node-lifetime",
        "cpu-limit",
        "large-instances",
        "bottlerocket",
        "windows",
        "custom-ami-userdata",
        "multiple-ebs",
        "instance-store-raid0",
    } <= names


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.stem)
def test_example_file_loads(path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    objects = [load_manifest(d) for d in docs]
    pools = [o for o in objects if isinstance(o, NodePool)]
    classes = {o.name: o for o in objects if isinstance(o, EC2NodeClass)}
    assert len(pools) == 1
    assert len(classes) == 1
    ref = pools[0].spec.template.spec.node_class_ref
    assert (ref.group, ref.kind) == ("karpenter.k8s.aws", "EC2NodeClass")
    assert ref.name in classes
    # round trip: dump by alias and load again gives the same object
    for obj in objects:
        dumped = obj.model_dump(by_alias=True, exclude_none=True)
        assert type(obj).model_validate(dumped) == obj


def _example(stem: str) -> tuple[NodePool, EC2NodeClass]:
    docs = [d for d in yaml.safe_load_all((EXAMPLES / f"{stem}.yaml").read_text()) if d]
    pool = NodePool.model_validate(next(d for d in docs if d["kind"] == "NodePool"))
    nc = EC2NodeClass.model_validate(next(d for d in docs if d["kind"] == "EC2NodeClass"))
    return pool, nc


def test_example_specifics() -> None:
    pool, nc = _example("min-values")
    reqs = {r.key: r for r in pool.spec.template.spec.requirements}
    assert reqs["karpenter.k8s.aws/instance-family"].min_values == 5
    assert reqs["node.kubernetes.io/instance-type"].min_values == 10

    pool, _ = _example("max-node-lifetime")
    assert pool.spec.template.spec.expire_after_seconds == 24 * 3600
    assert pool.spec.template.spec.termination_grace_period_seconds == 3600
    assert pool.spec.disruption.consolidation_policy == "WhenEmpty"
    assert pool.spec.disruption.budgets[1].reasons == ["Drifted", "Underutilized"]
    assert pool.spec.disruption.budgets[1].duration_seconds == 8 * 3600

    pool, _ = _example("cpu-limit")
    assert pool.spec.limits == {"cpu": "1000", "memory": "1000Gi"}

    pool, _ = _example("large-instances")
    assert pool.weight == 10
    assert pool.labels == {"workload-size": "large"}

    _, nc = _example("bottlerocket")
    assert nc.resolved_ami_family == "Bottlerocket"
    assert nc.kubelet.max_pods == 110
    assert nc.kubelet.effective_eviction_hard["memory.available"] == "5%"

    _, nc = _example("windows")
    assert nc.resolved_ami_family == "Windows2022"
    assert nc.spec.metadata_options.http_put_response_hop_limit == 2

    _, nc = _example("custom-ami-userdata")
    assert nc.resolved_ami_family == "AL2023"
    assert nc.ami_alias is None
    assert nc.spec.user_data
    assert "NodeConfig" in nc.spec.user_data

    _, nc = _example("multiple-ebs")
    bdms = nc.spec.block_device_mappings or []
    assert [m.root_volume for m in bdms] == [None, True]
    assert bdms[1].ebs is not None
    assert bdms[1].ebs.kms_key_id is not None
    assert bdms[1].ebs.volume_size_bytes == 100 * 2**30

    _, nc = _example("instance-store-raid0")
    assert nc.spec.instance_store_policy == "RAID0"


# ---------------------------------------------------------------------------------------------
# Defaults


def test_nodepool_defaults() -> None:
    pool = NodePool.model_validate(nodepool())
    assert pool.name == "default"
    assert pool.weight == 0
    tmpl = pool.spec.template.spec
    assert tmpl.expire_after == "720h"
    assert tmpl.expire_after_seconds == 720 * 3600
    assert tmpl.termination_grace_period is None
    d = pool.spec.disruption
    assert d.consolidation_policy == "WhenEmptyOrUnderutilized"
    assert d.consolidate_after == "0s"
    assert d.consolidate_after_seconds == 0
    assert [b.nodes for b in d.budgets] == ["10%"]
    assert d.budgets[0].allowed_disruptions(25) == 3  # rounds up
    assert d.budgets[0].applies_to("Drifted")


def test_nodepool_never_and_budget_defaults() -> None:
    pool = NodePool.model_validate(
        nodepool(disruption={"consolidateAfter": "Never", "budgets": [{"reasons": ["Empty"]}, {"nodes": 5}]})
    )
    assert pool.spec.disruption.consolidate_after_seconds is None
    assert pool.spec.disruption.budgets[0].nodes == "10%"
    assert pool.spec.disruption.budgets[1].nodes == "5"
    assert pool.spec.disruption.budgets[1].allowed_disruptions(100) == 5
    assert not pool.spec.disruption.budgets[0].applies_to("Drifted")
    doc = nodepool()
    doc["spec"]["template"]["spec"]["expireAfter"] = "Never"
    assert NodePool.model_validate(doc).spec.template.spec.expire_after_seconds is None


def test_nodeclass_defaults() -> None:
    nc = EC2NodeClass.model_validate(nodeclass())
    assert nc.name == "default"
    assert nc.resolved_ami_family == "AL2023"
    assert nc.ami_alias == "al2023@latest"
    mo = nc.spec.metadata_options
    assert (mo.http_endpoint, mo.http_protocol_ipv6, mo.http_put_response_hop_limit, mo.http_tokens) == (
        "enabled",
        "disabled",
        1,
        "required",
    )
    kubelet = nc.kubelet
    assert kubelet.max_pods is None
    assert kubelet.effective_eviction_hard == {
        "memory.available": "100Mi",
        "nodefs.available": "10%",
        "nodefs.inodesFree": "5%",
    }
    assert kubelet.effective_cpu_cfs_quota is True
    assert kubelet.effective_image_gc_high_threshold_percent == 85
    assert kubelet.effective_image_gc_low_threshold_percent == 80


def test_alias_families() -> None:
    for alias, family in [
        ("al2@v20240807", "AL2"),
        ("al2023@latest", "AL2023"),
        ("bottlerocket@v1.20.3", "Bottlerocket"),
        ("windows2019@latest", "Windows2019"),
        ("windows2022@latest", "Windows2022"),
    ]:
        nc = EC2NodeClass.model_validate(nodeclass(amiSelectorTerms=[{"alias": alias}]))
        assert nc.resolved_ami_family == family
    nc = EC2NodeClass.model_validate(nodeclass(amiFamily="Custom"))
    assert nc.resolved_ami_family == "Custom"
    term = AMISelectorTerm(alias="al2@v20240807")
    assert (term.alias_family, term.alias_version) == ("AL2", "v20240807")


def test_nodeclaim_loads_and_round_trips() -> None:
    doc = nodeclaim()
    claim = NodeClaim.model_validate(doc)
    assert claim.name == "default-abcde"
    assert claim.spec.expire_after == "720h"
    assert claim.spec.resources is not None
    assert claim.spec.resources.requests == {"cpu": "1500m", "memory": "2Gi", "pods": "3"}
    assert claim.status is not None
    assert claim.status.provider_id == "aws:///us-east-1a/i-0123456789abcdef0"
    assert claim.status.image_id == "ami-0123456789abcdef0"
    ready = claim.status.condition("Ready")
    assert ready is not None
    assert ready.status == "Unknown"
    dumped = claim.model_dump(by_alias=True, exclude_none=True, mode="json")
    assert dumped["status"]["providerID"] == doc["status"]["providerID"]
    assert dumped["spec"]["nodeClassRef"] == doc["spec"]["nodeClassRef"]
    assert NodeClaim.model_validate(dumped) == claim


def test_round_trip_preserves_manifest() -> None:
    doc = nodepool(weight=50, limits={"cpu": "100"})
    dumped = NodePool.model_validate(doc).model_dump(by_alias=True, exclude_none=True)
    expected = copy.deepcopy(doc)
    expected["spec"]["template"]["metadata"] = {}
    expected["spec"]["template"]["spec"]["expireAfter"] = "720h"
    expected["spec"]["disruption"] = {
        "consolidateAfter": "0s",
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
        "budgets": [{"nodes": "10%"}],
    }
    assert dumped == expected


def test_populate_by_name_and_frozen() -> None:
    req = NodeSelectorRequirementWithMinValues(key="kubernetes.io/arch", operator="In", values=["a"], min_values=1)
    assert req.model_dump(by_alias=True, exclude_none=True) == {
        "key": "kubernetes.io/arch",
        "operator": "In",
        "values": ["a"],
        "minValues": 1,
    }
    with pytest.raises(pydantic.ValidationError):
        req.key = "other"  # type: ignore[misc]


def test_status_models_accept_controller_fields() -> None:
    doc = nodepool()
    doc["status"] = {
        "resources": {"cpu": "4", "memory": "16Gi", "nodes": "2"},
        "nodeClassObservedGeneration": 3,
        "conditions": [{"type": "Ready", "status": "True", "observedGeneration": 1}],
        "somethingNew": True,
    }
    pool = NodePool.model_validate(doc)
    assert pool.status is not None
    assert pool.status.node_class_observed_generation == 3
    ncdoc = nodeclass()
    ncdoc["status"] = {
        "subnets": [{"id": "subnet-1", "zone": "us-east-1a", "zoneID": "use1-az1"}],
        "securityGroups": [{"id": "sg-1", "name": "nodes"}],
        "amis": [
            {
                "id": "ami-1",
                "name": "al2023",
                "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
            }
        ],
        "capacityReservations": [
            {
                "id": "cr-1",
                "availabilityZone": "us-east-1a",
                "instanceType": "m5.large",
                "ownerID": "111122223333",
                "instanceMatchCriteria": "targeted",
            }
        ],
        "instanceProfile": "my-cluster_123",
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    nc = EC2NodeClass.model_validate(ncdoc)
    assert nc.status is not None
    assert nc.status.subnets is not None
    assert nc.status.subnets[0].zone_id == "use1-az1"


# ---------------------------------------------------------------------------------------------
# NodePool validation rules

Mutator = Callable[[Doc], None]


def _tmpl(doc: Doc) -> Doc:
    spec: Doc = doc["spec"]["template"]["spec"]
    return spec


def _req(**req: Any) -> Mutator:
    def mutate(doc: Doc) -> None:
        _tmpl(doc)["requirements"].append(req)

    return mutate


def _set(path: str, value: Any) -> Mutator:
    def mutate(doc: Doc) -> None:
        node = doc
        parts = path.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value

    return mutate


REQS = "spec.template.spec.requirements"

NODEPOOL_CASES: list[tuple[str, Mutator, str, str]] = [
    (
        "in-no-values",
        _req(key="a", operator="In"),
        f"{REQS}[1].values",
        "operator In requires at least one value",
    ),
    (
        "in-empty-values",
        _req(key="a", operator="In", values=[]),
        f"{REQS}[1].values",
        "operator In requires at least one value",
    ),
    (
        "exists-values",
        _req(key="a", operator="Exists", values=["x"]),
        f"{REQS}[1].values",
        "operator Exists must not have values",
    ),
    (
        "doesnotexist-values",
        _req(key="a", operator="DoesNotExist", values=["x"]),
        f"{REQS}[1].values",
        "must not have values",
    ),
    ("gt-two", _req(key="a", operator="Gt", values=["1", "2"]), f"{REQS}[1].values", "exactly one value"),
    ("lt-not-int", _req(key="a", operator="Lt", values=["x"]), f"{REQS}[1].values", "non-negative integer"),
    (
        "gte-negative",
        _req(key="a", operator="Gte", values=["-1"]),
        f"{REQS}[1].values",
        "non-negative integer",
    ),
    ("lte-none", _req(key="a", operator="Lte"), f"{REQS}[1].values", "exactly one value"),
    (
        "bad-operator",
        _req(key="a", operator="Within", values=["x"]),
        f"{REQS}[1].operator",
        "Input should be",
    ),
    (
        "minvalues-gt-values",
        _req(key="a", operator="In", values=["x"], minValues=2),
        f"{REQS}[1].minValues",
        "must have at least that many values",
    ),
    (
        "minvalues-zero",
        _req(key="a", operator="Exists", minValues=0),
        f"{REQS}[1].minValues",
        "greater than or equal to 1",
    ),
    (
        "minvalues-51",
        _req(key="a", operator="Exists", minValues=51),
        f"{REQS}[1].minValues",
        "less than or equal to 50",
    ),
    (
        "minvalues-doesnotexist",
        _req(key="a", operator="DoesNotExist", minValues=1),
        f"{REQS}[1].minValues",
        "DoesNotExist",
    ),
    (
        "nodepool-key",
        _req(key="karpenter.sh/nodepool", operator="In", values=["x"]),
        f"{REQS}[1].key",
        'label "karpenter.sh/nodepool" is restricted',
    ),
    (
        "hostname-key",
        _req(key="kubernetes.io/hostname", operator="In", values=["x"]),
        f"{REQS}[1].key",
        'label "kubernetes.io/hostname" is restricted',
    ),
    (
        "karpenter-sh-subdomain",
        _req(key="team.karpenter.sh/bar", operator="Exists"),
        f"{REQS}[1].key",
        'label domain "karpenter.sh" is restricted',
    ),
    (
        "karpenter-sh-domain",
        _req(key="karpenter.sh/custom", operator="Exists"),
        f"{REQS}[1].key",
        'label domain "karpenter.sh" is restricted',
    ),
    (
        "karpenter-aws-domain",
        _req(key="karpenter.k8s.aws/custom", operator="Exists"),
        f"{REQS}[1].key",
        'label domain "karpenter.k8s.aws" is restricted',
    ),
    (
        "bad-key",
        _req(key="-bad", operator="Exists"),
        f"{REQS}[1].key",
        "must start and end with an alphanumeric",
    ),
    ("long-key-name", _req(key="a" * 64, operator="Exists"), f"{REQS}[1].key", "no more than 63 characters"),
    ("bad-prefix", _req(key="Foo.com/a", operator="Exists"), f"{REQS}[1].key", "RFC 1123 subdomain"),
    (
        "bad-value",
        _req(key="a", operator="In", values=["ok", "bad value"]),
        f"{REQS}[1].values[1]",
        "alphanumeric",
    ),
    (
        "long-value",
        _req(key="a", operator="In", values=["v" * 64]),
        f"{REQS}[1].values[0]",
        "no more than 63 characters",
    ),
    (
        "too-many-requirements",
        lambda d: _tmpl(d).__setitem__("requirements", [{"key": f"k{i}", "operator": "Exists"} for i in range(101)]),
        REQS,
        "at most 100 items",
    ),
    ("requirements-missing", lambda d: _tmpl(d).pop("requirements"), REQS, "required field is missing"),
    (
        "label-restricted",
        _set("spec.template.metadata.labels", {"karpenter.sh/nodepool": "x"}),
        "spec.template.metadata.labels[karpenter.sh/nodepool]",
        "is restricted",
    ),
    (
        "label-hostname",
        _set("spec.template.metadata.labels", {"kubernetes.io/hostname": "x"}),
        "spec.template.metadata.labels[kubernetes.io/hostname]",
        "is restricted",
    ),
    (
        "label-domain",
        _set("spec.template.metadata.labels", {"team.karpenter.k8s.aws/x": "y"}),
        "spec.template.metadata.labels[team.karpenter.k8s.aws/x]",
        'label domain "karpenter.k8s.aws" is restricted',
    ),
    (
        "label-value",
        _set("spec.template.metadata.labels", {"team": "a b"}),
        "spec.template.metadata.labels[team]",
        "alphanumeric",
    ),
    (
        "too-many-labels",
        _set("spec.template.metadata.labels", {f"l{i}": "v" for i in range(101)}),
        "spec.template.metadata.labels",
        "at most 100 labels",
    ),
    (
        "taint-effect",
        _set("spec.template.spec.taints", [{"key": "a", "effect": "Sometimes"}]),
        "spec.template.spec.taints[0].effect",
        "Input should be 'NoSchedule', 'PreferNoSchedule' or 'NoExecute'",
    ),
    (
        "taint-key",
        _set("spec.template.spec.startupTaints", [{"key": "", "effect": "NoSchedule"}]),
        "spec.template.spec.startupTaints[0].key",
        "key must not be empty",
    ),
    (
        "taint-missing-effect",
        _set("spec.template.spec.taints", [{"key": "a"}]),
        "spec.template.spec.taints[0].effect",
        "required field is missing",
    ),
    (
        "taint-duplicate",
        lambda d: _tmpl(d).update(
            taints=[{"key": "a", "effect": "NoSchedule"}],
            startupTaints=[{"key": "a", "effect": "NoSchedule"}],
        ),
        "spec.template.spec.startupTaints[0]",
        "duplicate taint Key/Effect pair a=NoSchedule",
    ),
    (
        "nodeclassref-missing",
        lambda d: _tmpl(d).pop("nodeClassRef"),
        "spec.template.spec.nodeClassRef",
        "required field is missing",
    ),
    (
        "nodeclassref-group-missing",
        lambda d: _tmpl(d)["nodeClassRef"].pop("group"),
        "spec.template.spec.nodeClassRef.group",
        "required field is missing",
    ),
    (
        "nodeclassref-kind-empty",
        lambda d: _tmpl(d)["nodeClassRef"].update(kind=""),
        "spec.template.spec.nodeClassRef.kind",
        "kind may not be empty",
    ),
    (
        "nodeclassref-name-empty",
        lambda d: _tmpl(d)["nodeClassRef"].update(name=""),
        "spec.template.spec.nodeClassRef.name",
        "name may not be empty",
    ),
    (
        "nodeclassref-group-slash",
        lambda d: _tmpl(d)["nodeClassRef"].update(group="karpenter.k8s.aws/v1"),
        "spec.template.spec.nodeClassRef.group",
        "must not contain '/'",
    ),
    (
        "nodeclassref-v1beta1-apiversion",
        lambda d: _tmpl(d)["nodeClassRef"].update(apiVersion="karpenter.k8s.aws/v1beta1"),
        "spec.template.spec.nodeClassRef.apiVersion",
        "unknown field",
    ),
    (
        "expire-after",
        _set("spec.template.spec.expireAfter", "30d"),
        "spec.template.spec.expireAfter",
        "not a valid duration",
    ),
    (
        "tgp-never",
        _set("spec.template.spec.terminationGracePeriod", "Never"),
        "spec.template.spec.terminationGracePeriod",
        "not a valid duration",
    ),
    ("weight-zero", _set("spec.weight", 0), "spec.weight", "greater than or equal to 1"),
    ("weight-101", _set("spec.weight", 101), "spec.weight", "less than or equal to 100"),
    (
        "consolidation-policy",
        _set("spec.disruption", {"consolidationPolicy": "WhenUnderutilized"}),
        "spec.disruption.consolidationPolicy",
        "Input should be 'WhenEmpty', 'WhenEmptyOrUnderutilized' or 'Balanced'",
    ),
    (
        "consolidate-after",
        _set("spec.disruption", {"consolidateAfter": "1.5h"}),
        "spec.disruption.consolidateAfter",
        "not a valid duration",
    ),
    (
        "budget-nodes",
        _set("spec.disruption", {"budgets": [{"nodes": "101%"}]}),
        "spec.disruption.budgets[0].nodes",
        "integer or a percentage",
    ),
    (
        "budget-nodes-text",
        _set("spec.disruption", {"budgets": [{"nodes": "ten"}]}),
        "spec.disruption.budgets[0].nodes",
        "integer or a percentage",
    ),
    (
        "budget-schedule-without-duration",
        _set("spec.disruption", {"budgets": [{"nodes": "0", "schedule": "@daily"}]}),
        "spec.disruption.budgets[0].duration",
        "'schedule' must be set with 'duration'",
    ),
    (
        "budget-duration-without-schedule",
        _set("spec.disruption", {"budgets": [{"nodes": "0", "duration": "10m"}]}),
        "spec.disruption.budgets[0].schedule",
        "'schedule' must be set with 'duration'",
    ),
    (
        "budget-bad-cron",
        _set("spec.disruption", {"budgets": [{"nodes": "0", "schedule": "0 25 * * *", "duration": "1h"}]}),
        "spec.disruption.budgets[0].schedule",
        "invalid hour field",
    ),
    (
        "budget-cron-fields",
        _set("spec.disruption", {"budgets": [{"nodes": "0", "schedule": "0 9 * *", "duration": "1h"}]}),
        "spec.disruption.budgets[0].schedule",
        "5 fields",
    ),
    (
        "budget-duration-seconds",
        _set("spec.disruption", {"budgets": [{"nodes": "0", "schedule": "@daily", "duration": "30s"}]}),
        "spec.disruption.budgets[0].duration",
        "hours and/or minutes",
    ),
    (
        "budget-reason",
        _set("spec.disruption", {"budgets": [{"nodes": "1", "reasons": ["Expired"]}]}),
        "spec.disruption.budgets[0].reasons[0]",
        "Input should be 'Underutilized', 'Empty' or 'Drifted'",
    ),
    (
        "too-many-budgets",
        _set("spec.disruption", {"budgets": [{"nodes": "1"}] * 51}),
        "spec.disruption.budgets",
        "at most 50 items",
    ),
    (
        "limit-quantity",
        _set("spec.limits", {"cpu": "lots"}),
        "spec.limits.cpu",
        "not a valid resource quantity",
    ),
    (
        "static-limits",
        lambda d: d["spec"].update(replicas=3, limits={"cpu": "10"}),
        "spec.limits",
        "only 'limits.nodes' is supported on static NodePools",
    ),
    (
        "static-weight",
        lambda d: d["spec"].update(replicas=3, weight=10),
        "spec.weight",
        "'weight' is not supported on static NodePools",
    ),
    (
        "typo-field",
        lambda d: _tmpl(d).update(requirments=[]),
        "spec.template.spec.requirments",
        "unknown field",
    ),
    # in no Karpenter version (and read by nothing): refused, not silently accepted
    (
        "consolidate-when",
        _set("spec.disruption", {"consolidateWhen": "WhenEmpty"}),
        "spec.disruption.consolidateWhen",
        "unknown field",
    ),
    (
        "decision-ratio-threshold",
        _set("spec.disruption", {"decisionRatioThreshold": 1.5}),
        "spec.disruption.decisionRatioThreshold",
        "unknown field",
    ),
    ("wrong-api-version", _set("apiVersion", "karpenter.sh/v1beta1"), "apiVersion", "karpenter.sh/v1"),
    ("name-missing", lambda d: d["metadata"].pop("name"), "metadata.name", "name is required"),
    ("name-invalid", _set("metadata.name", "Default_Pool"), "metadata.name", "RFC 1123 subdomain"),
]


@pytest.mark.parametrize(
    ("mutate", "path", "rule"), [c[1:] for c in NODEPOOL_CASES], ids=[c[0] for c in NODEPOOL_CASES]
)
def test_nodepool_rejects(mutate: Mutator, path: str, rule: str) -> None:
    doc = nodepool()
    mutate(doc)
    assert_error(NodePool, doc, path, rule)


NODEPOOL_VALID: list[tuple[str, Mutator]] = [
    ("notin-values", _req(key="a", operator="NotIn", values=["x"])),
    ("exists-minvalues", _req(key="karpenter.k8s.aws/instance-family", operator="Exists", minValues=3)),
    ("notin-minvalues", _req(key="a", operator="NotIn", values=["x"], minValues=2)),
    ("gte", _req(key="karpenter.k8s.aws/instance-cpu", operator="Gte", values=["4"])),
    ("lte", _req(key="karpenter.k8s.aws/instance-cpu", operator="Lte", values=["64"])),
    ("beta-label", _req(key="beta.kubernetes.io/arch", operator="In", values=["amd64"])),
    ("zone", _req(key="topology.kubernetes.io/zone", operator="In", values=["us-east-1a"])),
    ("zone-id", _req(key="topology.k8s.aws/zone-id", operator="In", values=["use1-az1"])),
    ("node-k8s-io", _req(key="node.kubernetes.io/custom", operator="Exists")),
    ("node-restriction", _req(key="node-restriction.kubernetes.io/team", operator="In", values=["a"])),
    ("kops", _req(key="kops.k8s.io/instancegroup", operator="Exists")),
    ("custom-label", _req(key="example.com/team", operator="In", values=["a"])),
    (
        "labels",
        _set(
            "spec.template.metadata.labels",
            {"team": "a", "node.kubernetes.io/pool": "x", "karpenter.sh/capacity-type": "spot", "empty": ""},
        ),
    ),
    ("annotations", _set("spec.template.metadata.annotations", {"anything/goes": "any value at all"})),
    (
        "taint-value-qualified",
        _set("spec.template.spec.taints", [{"key": "a", "value": "b.c/d", "effect": "NoExecute"}]),
    ),
    (
        "same-key-different-effect",
        _set(
            "spec.template.spec.taints",
            [{"key": "a", "effect": "NoSchedule"}, {"key": "a", "effect": "NoExecute"}],
        ),
    ),
    (
        "budget-macro",
        _set("spec.disruption", {"budgets": [{"nodes": "0", "schedule": "@weekly", "duration": "1h30m"}]}),
    ),
    (
        "budget-cron-step",
        _set(
            "spec.disruption",
            {"budgets": [{"nodes": "0", "schedule": "*/15 0-6 1,15 jan-jun sun", "duration": "1h0s"}]},
        ),
    ),
    ("weight-bounds", _set("spec.weight", 100)),
    ("limits-int", _set("spec.limits", {"cpu": 100, "memory": "100Gi", "nvidia.com/gpu": "2"})),
    ("static", lambda d: d["spec"].update(replicas=2, limits={"nodes": "5"})),
    ("tgp", _set("spec.template.spec.terminationGracePeriod", "48h")),
]


@pytest.mark.parametrize("mutate", [c[1] for c in NODEPOOL_VALID], ids=[c[0] for c in NODEPOOL_VALID])
def test_nodepool_accepts(mutate: Mutator) -> None:
    doc = nodepool()
    mutate(doc)
    NodePool.model_validate(doc)


# ---------------------------------------------------------------------------------------------
# NodeClaim


def test_nodeclaim_rules() -> None:
    doc = nodeclaim()
    doc["spec"]["requirements"].append({"key": "a", "operator": "In"})
    assert_error(NodeClaim, doc, "spec.requirements[2].values", "operator In requires at least one value")
    doc = nodeclaim()
    doc["spec"]["resources"]["requests"]["cpu"] = "1 core"
    assert_error(NodeClaim, doc, "spec.resources.requests.cpu", "not a valid resource quantity")
    doc = nodeclaim()
    doc["spec"]["expireAfter"] = "forever"
    assert_error(NodeClaim, doc, "spec.expireAfter", "not a valid duration")
    doc = nodeclaim()
    del doc["metadata"]["name"]
    doc["metadata"]["generateName"] = "default-"
    assert NodeClaim.model_validate(doc).name == ""


# ---------------------------------------------------------------------------------------------
# EC2NodeClass validation rules


def _spec(**changes: Any) -> Mutator:
    def mutate(doc: Doc) -> None:
        for key, value in changes.items():
            if value is None:
                doc["spec"].pop(key, None)
            else:
                doc["spec"][key] = value

    return mutate


NODECLASS_CASES: list[tuple[str, Mutator, str, str]] = [
    ("no-role", _spec(role=None), "spec.role", "must specify exactly one of ['role', 'instanceProfile']"),
    (
        "role-and-profile",
        _spec(instanceProfile="p"),
        "spec.role",
        "exactly one of ['role', 'instanceProfile']",
    ),
    ("empty-role", _spec(role=""), "spec.role", "role cannot be empty"),
    (
        "empty-profile",
        _spec(role=None, instanceProfile=""),
        "spec.instanceProfile",
        "instanceProfile cannot be empty",
    ),
    (
        "subnets-missing",
        _spec(subnetSelectorTerms=None),
        "spec.subnetSelectorTerms",
        "required field is missing",
    ),
    ("subnets-empty", _spec(subnetSelectorTerms=[]), "spec.subnetSelectorTerms", "cannot be empty"),
    (
        "subnets-too-many",
        _spec(subnetSelectorTerms=[{"id": f"subnet-{i}"} for i in range(31)]),
        "spec.subnetSelectorTerms",
        "at most 30 terms",
    ),
    (
        "subnet-term-empty",
        _spec(subnetSelectorTerms=[{}]),
        "spec.subnetSelectorTerms[0]",
        "at least one of ['tags', 'id']",
    ),
    (
        "subnet-id-and-tags",
        _spec(subnetSelectorTerms=[{"id": "subnet-123", "tags": {"a": "b"}}]),
        "spec.subnetSelectorTerms[0].id",
        "'id' is mutually exclusive",
    ),
    (
        "subnet-id-pattern",
        _spec(subnetSelectorTerms=[{"id": "sg-123"}]),
        "spec.subnetSelectorTerms[0].id",
        "not a valid id",
    ),
    (
        "subnet-empty-tag-value",
        _spec(subnetSelectorTerms=[{"tags": {"Name": ""}}]),
        "spec.subnetSelectorTerms[0].tags",
        "empty tag keys or values aren't supported",
    ),
    (
        "subnet-too-many-tags",
        _spec(subnetSelectorTerms=[{"tags": {f"t{i}": "v" for i in range(21)}}]),
        "spec.subnetSelectorTerms[0].tags",
        "at most 20 tags",
    ),
    ("sg-empty", _spec(securityGroupSelectorTerms=[]), "spec.securityGroupSelectorTerms", "cannot be empty"),
    (
        "sg-term-empty",
        _spec(securityGroupSelectorTerms=[{}]),
        "spec.securityGroupSelectorTerms[0]",
        "at least one of ['tags', 'id', 'name']",
    ),
    (
        "sg-id-and-name",
        _spec(securityGroupSelectorTerms=[{"id": "sg-1", "name": "x"}]),
        "spec.securityGroupSelectorTerms[0].id",
        "mutually exclusive",
    ),
    (
        "sg-name-and-tags",
        _spec(securityGroupSelectorTerms=[{"name": "x", "tags": {"a": "b"}}]),
        "spec.securityGroupSelectorTerms[0].name",
        "'name' is mutually exclusive",
    ),
    ("ami-empty", _spec(amiSelectorTerms=[]), "spec.amiSelectorTerms", "cannot be empty"),
    ("ami-term-empty", _spec(amiSelectorTerms=[{}]), "spec.amiSelectorTerms[0]", "at least one of"),
    (
        "ami-owner-only",
        _spec(amiSelectorTerms=[{"owner": "self"}], amiFamily="AL2023"),
        "spec.amiSelectorTerms[0]",
        "at least one of",
    ),
    (
        "alias-with-other-field",
        _spec(amiSelectorTerms=[{"alias": "al2023@latest", "owner": "self"}]),
        "spec.amiSelectorTerms[0].alias",
        "'alias' is mutually exclusive",
    ),
    (
        "alias-with-other-term",
        _spec(amiSelectorTerms=[{"alias": "al2023@latest"}, {"id": "ami-123"}]),
        "spec.amiSelectorTerms",
        "combination of other amiSelectorTerms",
    ),
    (
        "two-aliases",
        _spec(amiSelectorTerms=[{"alias": "al2023@latest"}, {"alias": "al2@latest"}]),
        "spec.amiSelectorTerms",
        "combination of other amiSelectorTerms",
    ),
    (
        "ami-id-and-tags",
        _spec(amiSelectorTerms=[{"id": "ami-123", "tags": {"a": "b"}}], amiFamily="AL2023"),
        "spec.amiSelectorTerms[0].id",
        "'id' is mutually exclusive",
    ),
    (
        "alias-format",
        _spec(amiSelectorTerms=[{"alias": "al2023"}]),
        "spec.amiSelectorTerms[0].alias",
        "must match the format 'family@version'",
    ),
    (
        "alias-family",
        _spec(amiSelectorTerms=[{"alias": "ubuntu@latest"}]),
        "spec.amiSelectorTerms[0].alias",
        "is not supported",
    ),
    (
        "alias-windows-version",
        _spec(amiSelectorTerms=[{"alias": "windows2022@v2024"}]),
        "spec.amiSelectorTerms[0].alias",
        "windows families may only specify version 'latest'",
    ),
    (
        "alias-too-long",
        _spec(amiSelectorTerms=[{"alias": "bottlerocket@" + "1" * 30}]),
        "spec.amiSelectorTerms[0].alias",
        "at most 30 characters",
    ),
    (
        "no-alias-no-family",
        _spec(amiSelectorTerms=[{"id": "ami-123"}]),
        "spec.amiFamily",
        "must specify amiFamily if amiSelectorTerms does not contain an alias",
    ),
    (
        "family-mismatch",
        _spec(amiFamily="AL2"),
        "spec.amiFamily",
        "amiFamily must be 'AL2023' or 'Custom' when using an AL2023 alias",
    ),
    (
        "family-enum",
        _spec(amiFamily="Ubuntu", amiSelectorTerms=[{"id": "ami-1"}]),
        "spec.amiFamily",
        "Input should be",
    ),
    (
        "tag-cluster",
        _spec(tags={"kubernetes.io/cluster/my-cluster": "owned"}),
        "spec.tags[kubernetes.io/cluster/my-cluster]",
        "restricted tag matching kubernetes.io/cluster/",
    ),
    (
        "tag-nodepool",
        _spec(tags={"karpenter.sh/nodepool": "x"}),
        "spec.tags[karpenter.sh/nodepool]",
        "restricted tag matching karpenter.sh/nodepool",
    ),
    (
        "tag-nodeclaim",
        _spec(tags={"karpenter.sh/nodeclaim": "x"}),
        "spec.tags[karpenter.sh/nodeclaim]",
        "restricted tag",
    ),
    (
        "tag-nodeclass",
        _spec(tags={"karpenter.k8s.aws/ec2nodeclass": "x"}),
        "spec.tags[karpenter.k8s.aws/ec2nodeclass]",
        "restricted tag",
    ),
    (
        "tag-eks",
        _spec(tags={"eks:eks-cluster-name": "x"}),
        "spec.tags[eks:eks-cluster-name]",
        "restricted tag",
    ),
    ("tag-empty-key", _spec(tags={"": "x"}), "spec.tags", "empty tag keys aren't supported"),
    (
        "kube-reserved-key",
        _spec(kubelet={"kubeReserved": {"gpu": "1"}}),
        "spec.kubelet.kubeReserved[gpu]",
        "valid keys for kubeReserved are ['cpu','memory','ephemeral-storage','pid']",
    ),
    (
        "system-reserved-negative",
        _spec(kubelet={"systemReserved": {"cpu": "-1"}}),
        "spec.kubelet.systemReserved[cpu]",
        "cannot be a negative resource quantity",
    ),
    (
        "kube-reserved-quantity",
        _spec(kubelet={"kubeReserved": {"memory": "lots"}}),
        "spec.kubelet.kubeReserved.memory",
        "not a valid resource quantity",
    ),
    (
        "eviction-hard-key",
        _spec(kubelet={"evictionHard": {"memory.free": "1Gi"}}),
        "spec.kubelet.evictionHard[memory.free]",
        "valid keys for evictionHard",
    ),
    (
        "eviction-hard-value",
        _spec(kubelet={"evictionHard": {"memory.available": "101%"}}),
        "spec.kubelet.evictionHard[memory.available]",
        "percentage",
    ),
    (
        "eviction-soft-no-grace",
        _spec(kubelet={"evictionSoft": {"memory.available": "1Gi"}}),
        "spec.kubelet.evictionSoft[memory.available]",
        "does not have a matching evictionSoftGracePeriod",
    ),
    (
        "eviction-grace-no-soft",
        _spec(kubelet={"evictionSoftGracePeriod": {"memory.available": "1m"}}),
        "spec.kubelet.evictionSoftGracePeriod[memory.available]",
        "does not have a matching evictionSoft",
    ),
    (
        "eviction-grace-duration",
        _spec(
            kubelet={
                "evictionSoft": {"memory.available": "1Gi"},
                "evictionSoftGracePeriod": {"memory.available": "1 min"},
            }
        ),
        "spec.kubelet.evictionSoftGracePeriod[memory.available]",
        "invalid duration",
    ),
    (
        "image-gc",
        _spec(kubelet={"imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 50}),
        "spec.kubelet.imageGCHighThresholdPercent",
        "must be greater than imageGCLowThresholdPercent",
    ),
    (
        "image-gc-range",
        _spec(kubelet={"imageGCHighThresholdPercent": 101}),
        "spec.kubelet.imageGCHighThresholdPercent",
        "less than or equal to 100",
    ),
    ("max-pods", _spec(kubelet={"maxPods": -1}), "spec.kubelet.maxPods", "greater than or equal to 0"),
    ("kubelet-typo", _spec(kubelet={"maxPod": 10}), "spec.kubelet.maxPod", "unknown field"),
    (
        "two-root-volumes",
        _spec(
            blockDeviceMappings=[
                {"deviceName": "/dev/xvda", "rootVolume": True, "ebs": {"volumeSize": "20Gi"}},
                {"deviceName": "/dev/xvdb", "rootVolume": True, "ebs": {"volumeSize": "20Gi"}},
            ]
        ),
        "spec.blockDeviceMappings",
        "must have only one blockDeviceMappings with rootVolume",
    ),
    (
        "ebs-no-size",
        _spec(blockDeviceMappings=[{"deviceName": "/dev/xvda", "ebs": {"volumeType": "gp3"}}]),
        "spec.blockDeviceMappings[0].ebs.volumeSize",
        "snapshotID or volumeSize must be defined",
    ),
    (
        "ebs-size-unit",
        _spec(blockDeviceMappings=[{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "20Mi"}}]),
        "spec.blockDeviceMappings[0].ebs.volumeSize",
        "whole size in Gi, G, Ti or T",
    ),
    (
        "ebs-type",
        _spec(blockDeviceMappings=[{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "20Gi", "volumeType": "gp4"}}]),
        "spec.blockDeviceMappings[0].ebs.volumeType",
        "Input should be",
    ),
    (
        "ebs-init-rate",
        _spec(blockDeviceMappings=[{"ebs": {"volumeSize": "20Gi", "volumeInitializationRate": 150}}]),
        "spec.blockDeviceMappings[0].ebs.snapshotID",
        "snapshotID must be set when volumeInitializationRate is set",
    ),
    (
        "ebs-kms-case",
        _spec(blockDeviceMappings=[{"ebs": {"volumeSize": "20Gi", "kmsKeyId": "k"}}]),
        "spec.blockDeviceMappings[0].ebs.kmsKeyId",
        "unknown field",
    ),
    (
        "metadata-hop-limit",
        _spec(metadataOptions={"httpPutResponseHopLimit": 65}),
        "spec.metadataOptions.httpPutResponseHopLimit",
        "less than or equal to 64",
    ),
    (
        "metadata-tokens",
        _spec(metadataOptions={"httpTokens": "sometimes"}),
        "spec.metadataOptions.httpTokens",
        "Input should be 'required' or 'optional'",
    ),
    (
        "instance-store",
        _spec(instanceStorePolicy="RAID1"),
        "spec.instanceStorePolicy",
        "Input should be 'RAID0'",
    ),
    (
        "cr-term-empty",
        _spec(capacityReservationSelectorTerms=[{"ownerID": "111122223333"}]),
        "spec.capacityReservationSelectorTerms[0]",
        "at least one of",
    ),
    (
        "cr-id-and-tags",
        _spec(capacityReservationSelectorTerms=[{"id": "cr-1", "tags": {"a": "b"}}]),
        "spec.capacityReservationSelectorTerms[0].id",
        "mutually exclusive",
    ),
    (
        "cr-owner",
        _spec(capacityReservationSelectorTerms=[{"tags": {"a": "b"}, "ownerID": "123"}]),
        "spec.capacityReservationSelectorTerms[0].ownerID",
        "12-digit AWS account id",
    ),
    ("typo", _spec(subnetSelectorTerm=[]), "spec.subnetSelectorTerm", "unknown field"),
    # not an EC2NodeClass field in any Karpenter version (Karpenter enables enclaves for eks.amazonaws.com/nip-slots)
    ("enclave-options", _spec(enclaveOptions={"enabled": True}), "spec.enclaveOptions", "unknown field"),
    ("name-missing", lambda d: d["metadata"].pop("name"), "metadata.name", "name is required"),
    ("wrong-kind", lambda d: d.update(kind="AWSNodeTemplate"), "kind", "EC2NodeClass"),
]


@pytest.mark.parametrize(
    ("mutate", "path", "rule"), [c[1:] for c in NODECLASS_CASES], ids=[c[0] for c in NODECLASS_CASES]
)
def test_nodeclass_rejects(mutate: Mutator, path: str, rule: str) -> None:
    doc = nodeclass()
    mutate(doc)
    assert_error(EC2NodeClass, doc, path, rule)


NODECLASS_VALID: list[tuple[str, Mutator]] = [
    ("instance-profile", _spec(role=None, instanceProfile="KarpenterNodeInstanceProfile")),
    ("custom-with-alias", _spec(amiFamily="Custom")),
    ("matching-family", _spec(amiFamily="AL2023")),
    (
        "ssm",
        _spec(amiSelectorTerms=[{"ssmParameter": "/aws/service/eks/optimized-ami/x"}], amiFamily="AL2023"),
    ),
    ("name-owner", _spec(amiSelectorTerms=[{"name": "my-ami-*", "owner": "123456789012"}], amiFamily="AL2")),
    (
        "selectors",
        _spec(
            subnetSelectorTerms=[{"id": "subnet-0abc"}, {"tags": {"Name": "*private*"}}],
            securityGroupSelectorTerms=[{"id": "sg-0abc"}, {"name": "my-sg"}, {"tags": {"a": "*"}}],
            capacityReservationSelectorTerms=[
                {"id": "cr-0abc"},
                {"tags": {"team": "a"}, "ownerID": "111122223333"},
                {"instanceMatchCriteria": "open"},
            ],
        ),
    ),
    ("tags", _spec(tags={"team": "a", "kubernetes.io/team": "b", "karpenter.sh/discovery": "my-cluster"})),
    (
        "kubelet-full",
        _spec(
            kubelet={
                "clusterDNS": ["10.0.1.100"],
                "maxPods": 110,
                "podsPerCore": 2,
                "systemReserved": {"cpu": "100m", "memory": "100Mi", "ephemeral-storage": "1Gi", "pid": 100},
                "kubeReserved": {"cpu": "200m", "memory": "100Mi", "ephemeral-storage": "3Gi"},
                "evictionHard": {"memory.available": "5%", "nodefs.available": "10%", "pid.available": "10%"},
                "evictionSoft": {"memory.available": "500Mi", "nodefs.available": "15.5%"},
                "evictionSoftGracePeriod": {"memory.available": "1m", "nodefs.available": "1m30s"},
                "evictionMaxPodGracePeriod": 60,
                "imageGCHighThresholdPercent": 85,
                "imageGCLowThresholdPercent": 80,
                "cpuCFSQuota": True,
            }
        ),
    ),
    (
        "ebs-snapshot",
        _spec(
            blockDeviceMappings=[
                {"deviceName": "/dev/xvda", "ebs": {"snapshotID": "snap-1", "volumeInitializationRate": 200}},
                {"deviceName": "/dev/xvdb", "ebs": {"volumeSize": "1Ti", "volumeType": "st1"}},
                {"deviceName": "/dev/xvdc", "ebs": {"volumeSize": "100G"}},
            ]
        ),
    ),
    ("misc", _spec(associatePublicIPAddress=False, detailedMonitoring=True, ipPrefixCount=1, context="ctx")),
]


@pytest.mark.parametrize("mutate", [c[1] for c in NODECLASS_VALID], ids=[c[0] for c in NODECLASS_VALID])
def test_nodeclass_accepts(mutate: Mutator) -> None:
    doc = nodeclass()
    mutate(doc)
    nc = EC2NodeClass.model_validate(doc)
    assert EC2NodeClass.model_validate(nc.model_dump(by_alias=True, exclude_none=True)) == nc


def test_nodeclass_aliases_dump_exact_names() -> None:
    doc = nodeclass(
        associatePublicIPAddress=True,
        kubelet={"clusterDNS": ["10.0.0.10"], "cpuCFSQuota": False, "imageGCHighThresholdPercent": 90},
        blockDeviceMappings=[{"ebs": {"snapshotID": "snap-1", "kmsKeyID": "k"}}],
        metadataOptions={"httpProtocolIPv6": "enabled"},
    )
    dumped = EC2NodeClass.model_validate(doc).model_dump(by_alias=True, exclude_none=True)
    spec = dumped["spec"]
    assert spec["associatePublicIPAddress"] is True
    assert set(spec["kubelet"]) == {"clusterDNS", "cpuCFSQuota", "imageGCHighThresholdPercent"}
    assert spec["blockDeviceMappings"][0]["ebs"] == {"snapshotID": "snap-1", "kmsKeyID": "k"}
    assert spec["metadataOptions"]["httpProtocolIPv6"] == "enabled"
    assert spec["amiSelectorTerms"] == [{"alias": "al2023@latest"}]


# ---------------------------------------------------------------------------------------------
# Helpers: load_manifest, durations, errors, meta, cron


def test_load_manifest_rejects_unknown_kind() -> None:
    with pytest.raises(ValueError, match="not a Karpenter v1 kind"):
        load_manifest({"apiVersion": "karpenter.sh/v1beta1", "kind": "NodePool"})
    assert isinstance(load_manifest(nodeclass()), EC2NodeClass)
    assert isinstance(load_manifest(nodeclaim()), NodeClaim)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("720h", 720 * 3600),
        ("30s", 30),
        ("1h30m", 5400),
        ("0s", 0),
        ("0", 0),
        ("1.5h", 5400),
        ("300ms", 0.3),
        ("-1m", -60),
        ("Never", None),
    ],
)
def test_parse_duration(text: str, seconds: float | None) -> None:
    assert parse_duration(text) == (pytest.approx(seconds) if seconds is not None else None)


@pytest.mark.parametrize("text", ["", "h", "10", "1d", "1h 30m", "never", "1.h.5"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(DurationError):
        parse_duration(text)


def test_format_duration() -> None:
    assert format_duration(None) == "Never"
    assert format_duration(5400) == "1h30m0s"
    assert format_duration(90) == "1m30s"
    assert format_duration(0) == "0s"


def test_format_validation_error_lists_every_error() -> None:
    doc = nodepool(weight=0)
    _tmpl(doc)["requirements"].append({"key": "a", "operator": "In"})
    lines = errors_of(NodePool, doc)
    assert "spec.weight: Input should be greater than or equal to 1" in lines
    assert "spec.template.spec.requirements[1].values: operator In requires at least one value" in lines
    assert format_loc(("spec", "limits", "nvidia.com/gpu")) == "spec.limits[nvidia.com/gpu]"
    assert format_loc(("spec", "requirements", 0, "values")) == "spec.requirements[0].values"


def test_restricted_label_error() -> None:
    assert restricted_label_error("karpenter.sh/capacity-type") is None
    assert restricted_label_error("karpenter.k8s.aws/instance-family") is None
    assert restricted_label_error("karpenter.k8s.aws/ec2nodeclass") is None
    assert restricted_label_error("failure-domain.beta.kubernetes.io/zone") is None
    assert restricted_label_error("karpenter.sh/registered") is not None
    # Karpenter v1 reserves only its own domains: kubernetes.io and k8s.io labels are the user's.
    for key in ("kubernetes.io/custom", "foo.k8s.io/bar", "team.kubernetes.io/x", "node.kubernetes.io/x"):
        assert restricted_label_error(key) is None, key


def test_cron_error() -> None:
    assert cron_error("@daily") is None
    assert cron_error("0 0 * * *") is None
    assert cron_error("15,45 9-17/2 ? * MON-FRI") is None
    assert cron_error("0 0 32 * *") is not None
    assert cron_error("0 0 * 13 *") is not None
    assert cron_error("0 0 * * 7") is not None
    assert cron_error("*/0 * * * *") is not None
    assert cron_error("@every 5m") is not None


def test_budget_model_direct() -> None:
    assert Budget().nodes == "10%"
    assert Budget(nodes="0").allowed_disruptions(10) == 0
    assert Budget(nodes="100%").allowed_disruptions(7) == 7


def test_kubelet_model_direct() -> None:
    kubelet = KubeletConfiguration.model_validate({"evictionHard": {"memory.available": "1Gi"}, "cpuCFSQuota": False})
    assert kubelet.effective_eviction_hard["memory.available"] == "1Gi"
    assert kubelet.effective_eviction_hard["nodefs.available"] == "10%"
    assert kubelet.effective_cpu_cfs_quota is False


def test_meta_models() -> None:
    meta = ObjectMeta.model_validate(
        {
            "name": "x",
            "namespace": "default",
            "labels": {"a": "b"},
            "uid": "123",
            "resourceVersion": "7",
            "generation": 2,
            "creationTimestamp": "2024-01-01T00:00:00Z",
            "finalizers": ["karpenter.sh/termination"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u", "controller": True}],
            "managedFields": [{"manager": "kubectl"}],
        }
    )
    assert meta.label("a") == "b"
    assert meta.owner_references is not None
    assert meta.owner_references[0].api_version == "v1"
    assert meta.model_dump(by_alias=True, exclude_none=True)["managedFields"] == [{"manager": "kubectl"}]

    taint = Taint(key="karpenter.sh/disrupted", effect="NoSchedule")
    assert Toleration(operator="Exists").tolerates(taint)
    assert Toleration(key="karpenter.sh/disrupted", operator="Exists", effect="NoSchedule").tolerates(taint)
    assert not Toleration(key="other", operator="Exists").tolerates(taint)
    assert Toleration(key="k", value="v", effect="NoExecute").tolerates(Taint(key="k", value="v", effect="NoExecute"))
    assert not Toleration(key="k", value="v").tolerates(Taint(key="k", value="w", effect="NoSchedule"))
    with pytest.raises(pydantic.ValidationError, match="operator must be Exists when key is empty"):
        Toleration(operator="Equal", value="x")
    with pytest.raises(pydantic.ValidationError, match="effect must be NoExecute when tolerationSeconds is set"):
        Toleration(key="k", operator="Exists", effect="NoSchedule", toleration_seconds=5)

    NodeSelectorRequirement(key="a", operator="NotIn", values=["x"])
    with pytest.raises(pydantic.ValidationError, match="operator NotIn requires at least one value"):
        NodeSelectorRequirement(key="a", operator="NotIn")
    with pytest.raises(pydantic.ValidationError, match="operator Gt requires an integer value"):
        NodeSelectorRequirement(key="a", operator="Gt", values=["x"])
    with pytest.raises(pydantic.ValidationError, match="Input should be"):
        NodeSelectorRequirement.model_validate({"key": "a", "operator": "Gte", "values": ["1"]})


def test_durations_beyond_go_range_are_refused_and_time_arithmetic_saturates() -> None:
    from datetime import UTC, datetime

    from nodeflow.api.duration import MAX_SECONDS, shift

    assert parse_duration("2562047h") == 2562047 * 3600
    for text in ("2562048h", "99999999999h", "1" + "0" * 30 + "s"):
        with pytest.raises(DurationError, match="out of range"):
            parse_duration(text)
    late = datetime(9999, 12, 31, 23, 59, tzinfo=UTC)
    assert shift(late, 3600) == datetime.max.replace(tzinfo=UTC)
    assert shift(datetime(1, 1, 1, tzinfo=UTC), -60) == datetime.min.replace(tzinfo=UTC)
    assert shift(datetime(2026, 1, 1, tzinfo=UTC), MAX_SECONDS).year == 2318
    assert shift(datetime(2026, 1, 1, tzinfo=UTC), 1e30) == datetime.max.replace(tzinfo=UTC)


def _pool_with(path: tuple[str, ...], value: str) -> Doc:
    """A NodePool with the duration at ``path`` under spec set to ``value`` (under "budgets": one budget's)."""
    doc = nodepool(disruption={})
    where = doc["spec"]
    for key in path[:-1]:
        where = where[key]
    where[path[-1]] = [{"nodes": "1", "schedule": "@daily", "duration": value}] if path[-1] == "budgets" else value
    return doc


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("disruption", "consolidateAfter"), "99999999999h", "spec.disruption.consolidateAfter"),
        (("template", "spec", "expireAfter"), "99999999999h", "spec.template.spec.expireAfter"),
        (("template", "spec", "terminationGracePeriod"), "2562048h", "spec.template.spec.terminationGracePeriod"),
        (("disruption", "budgets"), "20000000h", "spec.disruption.budgets[0].duration"),
        (("disruption", "budgets"), "99999999999h", "spec.disruption.budgets[0].duration"),
    ],
)
def test_a_nodepool_duration_beyond_go_range_is_refused_naming_the_field(
    path: tuple[str, ...], value: str, field: str
) -> None:
    """Karpenter's CRD patterns admit them and Karpenter cannot read them; nodeflow refuses the NodePool (its
    ValidationSucceeded condition names the field) instead of failing a provisioning or disruption run."""
    with pytest.raises(pydantic.ValidationError) as info:
        NodePool.model_validate(_pool_with(path, value))
    (line,) = format_validation_error(info.value)
    assert line.startswith(f"{field}: ")
    assert "out of range (at most 2562047h, as in Go)" in line
    NodePool.model_validate(_pool_with(path, "2562047h"))


def test_a_nodeclaim_duration_beyond_go_range_reads_as_the_longest() -> None:
    """A NodeClaim is never refused for it (its instance would be orphaned): it reads as Go's longest duration."""
    from nodeflow.api.duration import MAX_SECONDS

    doc = nodeclaim()
    doc["spec"].update(expireAfter="99999999999h", terminationGracePeriod="99999999999h")
    claim = NodeClaim.model_validate(doc)
    assert claim.spec.expire_after_seconds == MAX_SECONDS
    assert claim.spec.termination_grace_period_seconds == MAX_SECONDS
