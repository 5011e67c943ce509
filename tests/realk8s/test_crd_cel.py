"""Every CEL rule (x-kubernetes-validations) of the generated NodePool, NodeClaim and EC2NodeClass CRDs, run by the
real kube-apiserver (a server-side dry run per case, ``tests/realk8s/admission.py``): a good object is admitted on
create and update, and for each rule a bad object (or update) is refused with that rule's message at that rule's
field, and only by it (and by the OpenAPI checks the same bad value breaks: the server runs both).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from sandbox.controlplane.facade import RealKubeAPI
from sandbox.controlplane.launcher import CRD_DIR
from tests.realk8s.admission import Admission, Issue, schema

Obj = dict[str, Any]

SCHEMAS = {
    "NodePool": schema("karpenter.sh_nodepools.yaml"),
    "NodeClaim": schema("karpenter.sh_nodeclaims.yaml"),
    "EC2NodeClass": schema("karpenter.k8s.aws_ec2nodeclasses.yaml"),
}

_REF = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
_REQUIREMENTS = [
    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"], "minValues": 2},
    {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt", "values": ["3"]},
    {"key": "karpenter.k8s.aws/instance-memory", "operator": "Lte", "values": ["65536"]},
    {"key": "example.com/team", "operator": "Exists"},
]

GOOD: dict[str, Obj] = {
    "NodePool": {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "template": {
                "metadata": {"labels": {"team": "a", "karpenter.sh/capacity-type": "spot"}},
                "spec": {"nodeClassRef": dict(_REF), "requirements": copy.deepcopy(_REQUIREMENTS)},
            },
            "disruption": {
                "consolidationPolicy": "WhenEmptyOrUnderutilized",
                "budgets": [{"nodes": "10%"}, {"nodes": "0", "schedule": "@daily", "duration": "10m"}],
            },
            "limits": {"cpu": "1000"},
            "weight": 10,
        },
    },
    "NodeClaim": {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": "default-abc12"},
        "spec": {
            "nodeClassRef": dict(_REF),
            "requirements": [
                *copy.deepcopy(_REQUIREMENTS),
                {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["default"]},
            ],
        },
    },
}

GOOD["EC2NodeClass"] = {
    "apiVersion": "karpenter.k8s.aws/v1",
    "kind": "EC2NodeClass",
    "metadata": {"name": "default"},
    "spec": {
        "role": "KarpenterNodeRole",
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
        "tags": {"team": "a", "kubernetes.io/role": "node"},
        "capacityReservationSelectorTerms": [{"tags": {"team": "a"}}],
        "blockDeviceMappings": [
            {"deviceName": "/dev/xvda", "rootVolume": True, "ebs": {"volumeSize": "50Gi", "volumeType": "gp3"}},
            {
                "deviceName": "/dev/xvdb",
                "ebs": {"snapshotID": "snap-0123456789abcdef0", "volumeInitializationRate": 200},
            },
        ],
        "kubelet": {
            "maxPods": 110,
            "systemReserved": {"cpu": "100m", "memory": "100Mi"},
            "kubeReserved": {"cpu": "200m", "ephemeral-storage": "1Gi"},
            "evictionHard": {"memory.available": "5%"},
            "evictionSoft": {"memory.available": "10%"},
            "evictionSoftGracePeriod": {"memory.available": "1m"},
            "imageGCHighThresholdPercent": 85,
            "imageGCLowThresholdPercent": 80,
        },
        "placementGroupSelector": {"name": "training"},
        "networkInterfaces": [
            {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
            {"networkCardIndex": 1, "deviceIndex": 0, "interfaceType": "efa-only"},
        ],
        "connectionTracking": {"tcpEstablishedTimeout": 3600},
        "cpuOptions": {"nestedVirtualization": "enabled"},
    },
}

_NP_SPEC = "spec.template.spec"
_SIGNALS = (
    "'memory.available','nodefs.available','nodefs.inodesFree','imagefs.available','imagefs.inodesFree','pid.available'"
)


def _set(path: str, value: Any) -> Callable[[Obj], None]:
    """A mutation setting a dotted path (list indexes as numbers; label keys may contain dots: use '|')."""

    def mutate(obj: Obj) -> None:
        parts = [int(p) if p.isdigit() else p.replace("|", ".") for p in path.split(".")]
        node: Any = obj
        for part in parts[:-1]:
            node = node[part]
        node[parts[-1]] = value

    return mutate


def _delete(path: str) -> Callable[[Obj], None]:
    def mutate(obj: Obj) -> None:
        parts = path.split(".")
        node: Any = obj
        for part in parts[:-1]:
            node = node[int(part) if part.isdigit() else part]
        del node[parts[-1]]

    return mutate


def _label(key: str) -> Callable[[Obj], None]:
    def mutate(obj: Obj) -> None:
        obj["spec"]["template"]["metadata"]["labels"][key] = "x"

    return mutate


def _both(*mutations: Callable[[Obj], None]) -> Callable[[Obj], None]:
    def mutate(obj: Obj) -> None:
        for m in mutations:
            m(obj)

    return mutate


# (kind, rule field path, message, mutation, bad on update only). The rule field path is the schema
# path of the field carrying the rule ([] for any list item); the mutation makes the good object break
# exactly that rule (on create, or on update from the good object when the last column is True).
CASES: list[tuple[str, str, str, Callable[[Obj], None], bool]] = [
    # NodePool
    (
        "NodePool",
        "spec.disruption.budgets",
        "'schedule' must be set with 'duration'",
        _set("spec.disruption.budgets.1", {"nodes": "0", "schedule": "@daily"}),
        False,
    ),
    (
        "NodePool",
        "spec.template.metadata.labels",
        'label domain "karpenter.sh" is restricted',
        _label("team.karpenter.sh/x"),
        False,
    ),
    (
        "NodePool",
        "spec.template.metadata.labels",
        'label "karpenter.sh/nodepool" is restricted',
        _label("karpenter.sh/nodepool"),
        False,
    ),
    (
        "NodePool",
        "spec.template.metadata.labels",
        'label "kubernetes.io/hostname" is restricted',
        _label("kubernetes.io/hostname"),
        False,
    ),
    (
        "NodePool",
        f"{_NP_SPEC}.nodeClassRef.group",
        "group may not be empty",
        _set(f"{_NP_SPEC}.nodeClassRef.group", ""),
        False,
    ),
    (
        "NodePool",
        f"{_NP_SPEC}.nodeClassRef.kind",
        "kind may not be empty",
        _set(f"{_NP_SPEC}.nodeClassRef.kind", ""),
        False,
    ),
    (
        "NodePool",
        f"{_NP_SPEC}.nodeClassRef.name",
        "name may not be empty",
        _set(f"{_NP_SPEC}.nodeClassRef.name", ""),
        False,
    ),
    (
        "NodePool",
        f"{_NP_SPEC}.nodeClassRef",
        "nodeClassRef.group is immutable",
        _set(f"{_NP_SPEC}.nodeClassRef.group", "example.com"),
        True,
    ),
    (
        "NodePool",
        f"{_NP_SPEC}.nodeClassRef",
        "nodeClassRef.kind is immutable",
        _set(f"{_NP_SPEC}.nodeClassRef.kind", "OtherNodeClass"),
        True,
    ),
    (
        "NodePool",
        f"{_NP_SPEC}.requirements[].key",
        'label domain "karpenter.sh" is restricted',
        _set(f"{_NP_SPEC}.requirements.3.key", "sub.karpenter.sh/thing"),
        False,
    ),
    (
        "NodePool",
        f"{_NP_SPEC}.requirements[].key",
        'label "karpenter.sh/nodepool" is restricted',
        _set(f"{_NP_SPEC}.requirements.3.key", "karpenter.sh/nodepool"),
        False,
    ),
    (
        "NodePool",
        f"{_NP_SPEC}.requirements[].key",
        'label "kubernetes.io/hostname" is restricted',
        _set(f"{_NP_SPEC}.requirements.3.key", "kubernetes.io/hostname"),
        False,
    ),
    (
        "NodePool",
        f"{_NP_SPEC}.requirements",
        "requirements with operator 'In' must have a value defined",
        _set(f"{_NP_SPEC}.requirements.3", {"key": "example.com/team", "operator": "In", "values": []}),
        False,
    ),
    (
        "NodePool",
        f"{_NP_SPEC}.requirements",
        "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
        _set(f"{_NP_SPEC}.requirements.1.values", ["3", "4"]),
        False,
    ),
    (
        "NodePool",
        f"{_NP_SPEC}.requirements",
        "requirements with 'minValues' must have at least that many values specified in the 'values' field",
        _set(f"{_NP_SPEC}.requirements.0.minValues", 3),
        False,
    ),
    (
        "NodePool",
        "spec",
        "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes",
        _both(_set("spec.replicas", 3), _delete("spec.weight"), _set("spec.limits", {"nodes": "5"})),
        True,
    ),
    (
        "NodePool",
        "spec",
        "only 'limits.nodes' is supported on static NodePools",
        _both(_set("spec.replicas", 3), _delete("spec.weight")),
        False,
    ),
    (
        "NodePool",
        "spec",
        "'weight' is not supported on static NodePools",
        _both(_set("spec.replicas", 3), _set("spec.limits", {"nodes": "5"})),
        False,
    ),
    # NodeClaim
    ("NodeClaim", "spec.nodeClassRef.group", "group may not be empty", _set("spec.nodeClassRef.group", ""), False),
    ("NodeClaim", "spec.nodeClassRef.kind", "kind may not be empty", _set("spec.nodeClassRef.kind", ""), False),
    ("NodeClaim", "spec.nodeClassRef.name", "name may not be empty", _set("spec.nodeClassRef.name", ""), False),
    (
        "NodeClaim",
        "spec.requirements[].key",
        'label domain "karpenter.sh" is restricted',
        _set("spec.requirements.3.key", "karpenter.sh/thing"),
        False,
    ),
    (
        "NodeClaim",
        "spec.requirements[].key",
        'label "kubernetes.io/hostname" is restricted',
        _set("spec.requirements.3.key", "kubernetes.io/hostname"),
        False,
    ),
    (
        "NodeClaim",
        "spec.requirements",
        "requirements with operator 'In' must have a value defined",
        _set("spec.requirements.3", {"key": "example.com/team", "operator": "In", "values": []}),
        False,
    ),
    (
        "NodeClaim",
        "spec.requirements",
        "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
        _set("spec.requirements.2.values", ["-1"]),
        False,
    ),
    (
        "NodeClaim",
        "spec.requirements",
        "requirements with 'minValues' must have at least that many values specified in the 'values' field",
        _set("spec.requirements.0.minValues", 5),
        False,
    ),
    ("NodeClaim", "spec", "spec is immutable", _set("spec.expireAfter", "24h"), True),
    # EC2NodeClass (all of Karpenter's rules on the fields nodeflow's model has, except the kubelet ones; the
    # networkInterfaces, placementGroup and NAT timeout rules belong to fields the model lacks)
    (
        "EC2NodeClass",
        "spec",
        "must specify exactly one of ['role', 'instanceProfile']",
        _set("spec.instanceProfile", "KarpenterNodeProfile"),
        False,
    ),
    *(
        (
            "EC2NodeClass",
            "spec",
            f"if set, amiFamily must be '{family}' or 'Custom' when using {article} {family} alias",
            _both(_set("spec.amiSelectorTerms", [{"alias": f"{alias}@latest"}]), _set("spec.amiFamily", other)),
            False,
        )
        for alias, family, article, other in [
            ("al2", "AL2", "an", "AL2023"),
            ("al2023", "AL2023", "an", "Bottlerocket"),
            ("bottlerocket", "Bottlerocket", "a", "AL2"),
            ("windows2019", "Windows2019", "a", "Windows2022"),
            ("windows2022", "Windows2022", "a", "Windows2019"),
            ("windows2025", "Windows2025", "a", "AL2023"),
        ]
    ),
    (
        "EC2NodeClass",
        "spec",
        "must specify amiFamily if amiSelectorTerms does not contain an alias",
        _set("spec.amiSelectorTerms", [{"id": "ami-0123456789abcdef0"}]),
        False,
    ),
    ("EC2NodeClass", "spec.tags", "empty tag keys aren't supported", _set("spec.tags.", "x"), False),
    ("EC2NodeClass", "spec.role", "role cannot be empty", _set("spec.role", ""), False),
    (
        "EC2NodeClass",
        "spec.capacityReservationSelectorTerms[].tags",
        "empty tag keys or values aren't supported",
        _set("spec.capacityReservationSelectorTerms.0.tags", {"team": ""}),
        False,
    ),
    (
        "EC2NodeClass",
        "spec.capacityReservationSelectorTerms",
        "expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']",
        _set("spec.capacityReservationSelectorTerms", [{"ownerID": "123456789012"}]),
        False,
    ),
    (
        "EC2NodeClass",
        "spec.capacityReservationSelectorTerms",
        "'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation selector term",
        _set("spec.capacityReservationSelectorTerms", [{"id": "cr-0123456789abcdef0", "ownerID": "123456789012"}]),
        False,
    ),
    (
        "EC2NodeClass",
        "spec.blockDeviceMappings[].ebs",
        "snapshotID or volumeSize must be defined",
        _set("spec.blockDeviceMappings.0.ebs", {"volumeType": "gp3"}),
        False,
    ),
    (
        "EC2NodeClass",
        "spec.blockDeviceMappings[].ebs",
        "snapshotID must be set when volumeInitializationRate is set",
        _set("spec.blockDeviceMappings.0.ebs.volumeInitializationRate", 150),
        False,
    ),
    (
        "EC2NodeClass",
        "spec.blockDeviceMappings",
        "must have only one blockDeviceMappings with rootVolume",
        _set("spec.blockDeviceMappings.1.rootVolume", True),
        False,
    ),
    (
        "EC2NodeClass",
        "spec.amiSelectorTerms[].alias",
        "'alias' is improperly formatted, must match the format 'family@version'",
        _set("spec.amiSelectorTerms.0.alias", "al2023"),
        False,
    ),
    (
        "EC2NodeClass",
        "spec.amiSelectorTerms[].alias",
        "family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', 'windows2019', "
        "'windows2022', 'windows2025'",
        _set("spec.amiSelectorTerms.0.alias", "ubuntu@latest"),
        False,
    ),
    (
        "EC2NodeClass",
        "spec.amiSelectorTerms[].alias",
        "windows families may only specify version 'latest'",
        _set("spec.amiSelectorTerms.0.alias", "windows2022@v20250101"),
        False,
    ),
    (
        "EC2NodeClass",
        "spec.amiSelectorTerms[].tags",
        "empty tag keys or values aren't supported",
        _both(_set("spec.amiSelectorTerms", [{"tags": {"team": ""}}]), _set("spec.amiFamily", "AL2023")),
        False,
    ),
    (
        "EC2NodeClass",
        "spec.amiSelectorTerms",
        "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']",
        _both(_set("spec.amiSelectorTerms", [{"owner": "self"}]), _set("spec.amiFamily", "AL2023")),
        False,
    ),
    (
        "EC2NodeClass",
        "spec.amiSelectorTerms",
        "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
        _both(
            _set("spec.amiSelectorTerms", [{"id": "ami-0123456789abcdef0", "owner": "self"}]),
            _set("spec.amiFamily", "AL2023"),
        ),
        False,
    ),
    (
        "EC2NodeClass",
        "spec.amiSelectorTerms",
        "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
        _set("spec.amiSelectorTerms.0.owner", "amazon"),
        False,
    ),
    (
        "EC2NodeClass",
        "spec.amiSelectorTerms",
        "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms",
        _set("spec.amiSelectorTerms", [{"alias": "al2023@latest"}, {"name": "my-ami-*"}]),
        False,
    ),
    (
        "EC2NodeClass",
        "spec.instanceProfile",
        "instanceProfile cannot be empty",
        _both(_delete("spec.role"), _set("spec.instanceProfile", "")),
        False,
    ),
    (
        "EC2NodeClass",
        "spec.subnetSelectorTerms[].tags",
        "empty tag keys or values aren't supported",
        _set("spec.subnetSelectorTerms.0.tags", {"karpenter.sh/discovery": ""}),
        False,
    ),
    (
        "EC2NodeClass",
        "spec.securityGroupSelectorTerms[].tags",
        "empty tag keys or values aren't supported",
        _set("spec.securityGroupSelectorTerms.0.tags", {"": "demo"}),
        False,
    ),
    (
        "EC2NodeClass",
        "spec.subnetSelectorTerms",
        "subnetSelectorTerms cannot be empty",
        _set("spec.subnetSelectorTerms", []),
        False,
    ),
    (
        "EC2NodeClass",
        "spec.subnetSelectorTerms",
        "expected at least one, got none, ['tags', 'id']",
        _set("spec.subnetSelectorTerms", [{}]),
        False,
    ),
    (
        "EC2NodeClass",
        "spec.subnetSelectorTerms",
        "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term",
        _set("spec.subnetSelectorTerms.0.id", "subnet-0123456789abcdef0"),
        False,
    ),
    (
        "EC2NodeClass",
        "spec.securityGroupSelectorTerms",
        "securityGroupSelectorTerms cannot be empty",
        _set("spec.securityGroupSelectorTerms", []),
        False,
    ),
    (
        "EC2NodeClass",
        "spec.securityGroupSelectorTerms",
        "expected at least one, got none, ['tags', 'id', 'name']",
        _set("spec.securityGroupSelectorTerms", [{}]),
        False,
    ),
    (
        "EC2NodeClass",
        "spec.securityGroupSelectorTerms",
        "'id' is mutually exclusive, cannot be set with a combination of other fields in a security group "
        "selector term",
        _set("spec.securityGroupSelectorTerms", [{"id": "sg-0123456789abcdef0", "tags": {"a": "b"}}]),
        False,
    ),
    (
        "EC2NodeClass",
        "spec.securityGroupSelectorTerms",
        "'name' is mutually exclusive, cannot be set with a combination of other fields in a security group "
        "selector term",
        _set("spec.securityGroupSelectorTerms", [{"name": "nodes", "tags": {"a": "b"}}]),
        False,
    ),
    *(
        (
            "EC2NodeClass",
            "spec.tags",
            f"tag contains a restricted tag matching {shown}",
            _set(f"spec.tags.{key.replace('.', '|')}", "x"),
            False,
        )
        for key, shown in [
            ("eks:eks-cluster-name", "eks:eks-cluster-name"),
            ("kubernetes.io/cluster/demo", "kubernetes.io/cluster/"),
            ("karpenter.sh/nodepool", "karpenter.sh/nodepool"),
            ("karpenter.sh/nodeclaim", "karpenter.sh/nodeclaim"),
            ("karpenter.k8s.aws/ec2nodeclass", "karpenter.k8s.aws/ec2nodeclass"),
        ]
    ),
    (
        "EC2NodeClass",
        "spec.placementGroupSelector",
        "expected at least one, got none, ['name', 'id']",
        _set("spec.placementGroupSelector", {}),
        False,
    ),
    (
        "EC2NodeClass",
        "spec.placementGroupSelector",
        "'name' and 'id' are mutually exclusive",
        _set("spec.placementGroupSelector.id", "pg-0123456789abcdef0"),
        False,
    ),
    (
        "EC2NodeClass",
        "spec.networkInterfaces",
        "networkInterfaces must include a primary interface with interfaceType='interface'",
        _set("spec.networkInterfaces.0.interfaceType", "efa-only"),
        False,
    ),
    (
        "EC2NodeClass",
        "spec.networkInterfaces",
        "networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs, and can have at most "
        "one efa device per network card",
        _set("spec.networkInterfaces.1.networkCardIndex", 0),
        False,
    ),
    (
        "EC2NodeClass",
        "spec.connectionTracking",
        "at least one of tcpEstablishedTimeout, udpStreamTimeout, or udpTimeout must be set",
        _set("spec.connectionTracking", {}),
        False,
    ),
    (
        "EC2NodeClass",
        "spec.kubelet",
        "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent",
        _set("spec.kubelet.imageGCLowThresholdPercent", 85),
        False,
    ),
    (
        "EC2NodeClass",
        "spec.kubelet",
        "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod",
        _set("spec.kubelet.evictionSoft.nodefs|available", "10%"),
        False,
    ),
    (
        "EC2NodeClass",
        "spec.kubelet",
        "evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft",
        _set("spec.kubelet.evictionSoftGracePeriod.nodefs|available", "2m"),
        False,
    ),
    *(
        case
        for name in ("systemReserved", "kubeReserved")
        for case in (
            (
                "EC2NodeClass",
                f"spec.kubelet.{name}",
                f"valid keys for {name} are ['cpu','memory','ephemeral-storage','pid']",
                _set(f"spec.kubelet.{name}.nvidia|com/gpu", "1"),
                False,
            ),
            (
                "EC2NodeClass",
                f"spec.kubelet.{name}",
                f"{name} value cannot be a negative resource quantity",
                _set(f"spec.kubelet.{name}.cpu", "-100m"),
                False,
            ),
        )
    ),
    (
        "EC2NodeClass",
        "spec.kubelet.evictionHard",
        f"valid keys for evictionHard are [{_SIGNALS}]",
        _set("spec.kubelet.evictionHard.memory|free", "100Mi"),
        False,
    ),
    # evictionSoft and evictionSoftGracePeriod must keep the same keys: one bad key in both (ALSO_BROKEN)
    (
        "EC2NodeClass",
        "spec.kubelet.evictionSoft",
        f"valid keys for evictionSoft are [{_SIGNALS}]",
        _both(_set("spec.kubelet.evictionSoft.swap", "1Gi"), _set("spec.kubelet.evictionSoftGracePeriod.swap", "1m")),
        False,
    ),
    (
        "EC2NodeClass",
        "spec.kubelet.evictionSoftGracePeriod",
        f"valid keys for evictionSoftGracePeriod are [{_SIGNALS}]",
        _both(_set("spec.kubelet.evictionSoft.swap", "1Gi"), _set("spec.kubelet.evictionSoftGracePeriod.swap", "1m")),
        False,
    ),
]


def _too_short(path: str) -> str:
    return f"{path} in body should be at least 1 chars long"


_SG_EXCLUSIVE = (
    "'id' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term",
    "'name' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term",
)
# Bad objects that break more than their own rule. Karpenter states the mutual-exclusion rules as "not every term
# has both", which an empty list of terms also breaks; a key bad in both evictionSoft and evictionSoftGracePeriod
# breaks the key rule of each; and the server runs the OpenAPI checks (minLength, minItems, pattern) with the CEL
# rules, so an empty string or list, or a value a pattern refuses, breaks those too. Entries are messages at the
# case's own rule path, or (path, message) pairs.
ALSO_BROKEN: dict[tuple[str, str], tuple[str | tuple[str, str], ...]] = {
    **{
        (kind, f"{field} may not be empty"): (_too_short(f"{ref}.{field}"),)
        for kind, ref in (("NodePool", f"{_NP_SPEC}.nodeClassRef"), ("NodeClaim", "spec.nodeClassRef"))
        for field in ("group", "kind", "name")
    },
    ("NodeClaim", "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value"): (
        (
            "spec.requirements[].values[]",
            "spec.requirements[2].values[0] in body should match '^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$'",
        ),
    ),
    ("EC2NodeClass", "role cannot be empty"): (_too_short("spec.role"),),
    ("EC2NodeClass", "instanceProfile cannot be empty"): (_too_short("spec.instanceProfile"),),
    ("EC2NodeClass", "'alias' is improperly formatted, must match the format 'family@version'"): (
        "spec.amiSelectorTerms[0].alias in body should match '^[a-zA-Z0-9]+@.+$'",
    ),
    ("EC2NodeClass", "subnetSelectorTerms cannot be empty"): (
        "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term",
        "spec.subnetSelectorTerms in body should have at least 1 items",
    ),
    ("EC2NodeClass", "securityGroupSelectorTerms cannot be empty"): (
        *_SG_EXCLUSIVE,
        "spec.securityGroupSelectorTerms in body should have at least 1 items",
    ),
    ("EC2NodeClass", f"valid keys for evictionSoft are [{_SIGNALS}]"): (
        ("spec.kubelet.evictionSoftGracePeriod", f"valid keys for evictionSoftGracePeriod are [{_SIGNALS}]"),
    ),
    ("EC2NodeClass", f"valid keys for evictionSoftGracePeriod are [{_SIGNALS}]"): (
        ("spec.kubelet.evictionSoft", f"valid keys for evictionSoft are [{_SIGNALS}]"),
    ),
}


def _rules(schema: Obj, path: str = "") -> list[tuple[str, str, str]]:
    """(schema path, message, rule) of every x-kubernetes-validations entry."""
    out = [(path, r["message"], r["rule"]) for r in schema.get("x-kubernetes-validations") or []]
    for key, sub in (schema.get("properties") or {}).items():
        out += _rules(sub, f"{path}.{key}" if path else key)
    if isinstance(schema.get("items"), dict):
        out += _rules(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        out += _rules(schema["additionalProperties"], f"{path}{{}}")
    return out


def _case_id(case: tuple[str, str, str, Callable[[Obj], None], bool]) -> str:
    return f"{case[0]}:{case[1]}:{case[2]}"


def _by_field(issues: list[Issue]) -> list[tuple[str, str]]:
    """(field with list indexes as [], detail), sorted."""
    return sorted((re.sub(r"\[\d+\]", "[]", issue.field), issue.detail) for issue in issues)


def test_every_rule_has_a_case_and_every_case_a_rule() -> None:
    in_crds = {(kind, path, message) for kind, schema in SCHEMAS.items() for path, message, _ in _rules(schema)}
    in_table = {(kind, path, message) for kind, path, message, _, _ in CASES}
    assert in_crds == in_table
    assert len(CASES) == len(in_table)  # one case per rule
    # Karpenter v1.14's NodePool (18), NodeClaim (9) and EC2NodeClass (54) rules
    assert len(in_crds) == 81


@pytest.mark.parametrize("kind", sorted(GOOD))
def test_good_object_is_admitted_on_create_and_update(kind: str, admission: Admission) -> None:
    good = GOOD[kind]
    assert admission.create(good) == []
    assert admission.update(good, copy.deepcopy(good)) == []


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_each_rule_rejects_its_bad_object(
    case: tuple[str, str, str, Callable[[Obj], None], bool], admission: Admission
) -> None:
    kind, rule_path, message, mutate, on_update = case
    good = GOOD[kind]
    bad = copy.deepcopy(good)
    mutate(bad)
    issues = admission.update(good, bad) if on_update else admission.create(bad)
    expected = [(rule_path, message)] + [
        (rule_path, m) if isinstance(m, str) else m for m in ALSO_BROKEN.get((kind, message), ())
    ]
    assert _by_field(issues) == sorted(expected)
    assert {issue.reason for issue in issues} == {"FieldValueInvalid"}
    if on_update:  # a transition rule does not apply on create
        assert admission.create(bad) == []


def test_transition_rules_are_the_ones_naming_oldself() -> None:
    transition = {m for s in SCHEMAS.values() for _, m, rule in _rules(s) if re.search(r"\boldSelf\b", rule)}
    assert transition == {
        "nodeClassRef.group is immutable",
        "nodeClassRef.kind is immutable",
        "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes",
        "spec is immutable",
    }
    assert transition == {message for _, _, message, _, on_update in CASES if on_update}


PROBES = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "celprobes.test.nodeflow.io"},
    "spec": {
        "group": "test.nodeflow.io",
        "scope": "Cluster",
        "names": {"plural": "celprobes", "singular": "celprobe", "kind": "CelProbe", "listKind": "CelProbeList"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "n": {
                                "type": "string",
                                "maxLength": 16,
                                "x-kubernetes-validations": [{"rule": "int(self) > 0", "message": "positive"}],
                            }
                        },
                    }
                },
            }
        ],
    },
}


def test_a_rule_that_cannot_evaluate_is_reported_with_its_field(real_kube: RealKubeAPI) -> None:
    real_kube.register_crd(PROBES)  # deleted by the next reset
    admission = Admission(real_kube.kube, {"CelProbe": real_kube.resource_for("test.nodeflow.io/v1", "CelProbe")})

    def issues(n: str) -> list[Issue]:
        return admission.create(
            {"apiVersion": "test.nodeflow.io/v1", "kind": "CelProbe", "metadata": {"name": "p"}, "n": n}
        )

    assert issues("5") == []
    assert issues("0") == [Issue("n", "FieldValueInvalid", "positive")]
    [issue] = issues("five")
    assert (issue.field, issue.reason) == ("n", "FieldValueInvalid")
    # the rule's message, after the evaluation error (the old imitation said "failed to evaluate")
    assert issue.detail == "type conversion error from 'string' to 'int' evaluating rule: positive"


def _examples() -> list[tuple[str, Obj]]:
    root = CRD_DIR.parents[2] / "examples"
    return [
        (f"{path.relative_to(root)}:{doc['metadata']['name']}", doc)
        for path in sorted(root.rglob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if isinstance(doc, dict) and doc.get("kind") in SCHEMAS
    ]


EXAMPLES = _examples()


def test_examples_exist() -> None:
    assert {doc["kind"] for _, doc in EXAMPLES} >= {"NodePool", "EC2NodeClass"}


@pytest.mark.parametrize(("name", "doc"), EXAMPLES, ids=[name for name, _ in EXAMPLES])
def test_every_example_is_admitted(name: str, doc: Obj, admission: Admission) -> None:
    assert admission.create(doc) == []
