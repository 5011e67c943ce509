"""The cluster-side half of the Lambdas' access: the ClusterRole bound to the group the stack's EKS
access entries use covers every resource the Kubernetes adapter touches, with the verbs it needs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from infra.iam import CONTROLLER_GROUP
from nodeflow.kube import client as kube

RBAC = Path(__file__).resolve().parents[2] / "infra" / "cluster" / "controller-rbac.yaml"


def _docs() -> dict[str, dict[str, Any]]:
    """Kind -> document (each kind appears once)."""
    return {d["kind"]: d for d in yaml.safe_load_all(RBAC.read_text()) if d}


def _verbs(group: str, resource: str) -> set[str]:
    out: set[str] = set()
    for rule in _docs()["ClusterRole"]["rules"]:
        if group in rule["apiGroups"] and resource in rule["resources"]:
            out |= set(rule["verbs"])
    return out


def test_binding_names_the_stacks_access_entry_group() -> None:
    docs = _docs()
    binding = docs["ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == docs["ClusterRole"]["metadata"]["name"]
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": CONTROLLER_GROUP}]


def test_every_resource_the_adapter_reads_is_readable() -> None:
    resources = [v for v in vars(kube).values() if isinstance(v, kube.Resource) and v is not kube.CONFIG_MAPS]
    assert len(resources) >= 10
    for r in resources:
        assert {"get", "list"} <= _verbs(r.group, r.plural), r.plural


def test_the_writes_the_handlers_make_are_allowed() -> None:
    assert {"create", "patch", "delete", "update"} <= _verbs("karpenter.sh", "nodeclaims")
    assert {"patch", "update"} <= _verbs("karpenter.sh", "nodeclaims/status")
    assert {"patch", "update"} <= _verbs("karpenter.sh", "nodepools/status")
    assert {"patch", "update"} <= _verbs("karpenter.k8s.aws", "ec2nodeclasses/status")
    assert {"patch", "delete"} <= _verbs("", "nodes")
    assert "delete" in _verbs("", "pods")
    assert _verbs("", "pods/eviction") == {"create"}
    assert {"create", "patch"} <= _verbs("", "events")
    assert "delete" not in _verbs("", "persistentvolumes")  # never more than needed


def test_the_pause_switch_is_readable_and_nothing_else_of_configmaps() -> None:
    from nodeflow.lifecycle.disruption import PAUSE_CONFIG_MAP

    docs = _docs()
    assert "configmaps" not in {r for rule in docs["ClusterRole"]["rules"] for r in rule["resources"]}
    role, binding = docs["Role"], docs["RoleBinding"]
    assert role["metadata"]["namespace"] == "nodeflow"
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [PAUSE_CONFIG_MAP], "verbs": ["get"]}
    ]
    assert binding["subjects"][0]["name"] == CONTROLLER_GROUP
