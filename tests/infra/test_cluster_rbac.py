"""The cluster-side half of the Lambdas' access, read as a file: infra/cluster/controller-rbac.yaml binds each group
of infra/cluster_rbac.py and nothing else, every rule says who needs it, and the privileges that must stay narrow
do; and, on the real control plane (where ``RealKubeAPI.start`` applied the file), that the API server took every
rule as written and decides the narrow ones as intended (SubjectAccessReview). (What the handlers really call, and
that nothing more is granted, is tested by running them against the real API server:
test_cluster_rbac_scenario.py and every sandbox functional test.)"""

from __future__ import annotations

import re
from typing import Any

import yaml

from infra.cluster_rbac import CONTROLLER_RBAC, FUNCTION_GROUPS, GROUPS
from nodeflow.kube import client as kube
from sandbox.controlplane.facade import RealKubeAPI
from tests.functional.conftest import control_plane, real_kube, real_kube_server

__all__ = ["control_plane", "real_kube", "real_kube_server"]

READ = {"get", "list", "watch"}


def _docs() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(CONTROLLER_RBAC.read_text()) if d]


def _cluster_roles() -> dict[str, list[dict[str, Any]]]:
    return {d["metadata"]["name"]: d.get("rules") or [] for d in _docs() if d["kind"] == "ClusterRole"}


def _members(group: str) -> set[str]:
    return {fn for fn, groups in FUNCTION_GROUPS.items() if group in groups}


def _granted(function: str) -> set[tuple[str, str, str]]:
    """(API group, resource, verb) the function's groups get cluster-wide."""
    roles = _cluster_roles()
    return {
        (g, r, v)
        for group in FUNCTION_GROUPS[function]
        for rule in roles.get(group, [])
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


def test_every_group_is_bound_to_its_cluster_role_and_nothing_else_is_bound() -> None:
    docs = _docs()
    roles = _cluster_roles()
    assert set(roles) == set(GROUPS)
    bindings = [d for d in docs if d["kind"] == "ClusterRoleBinding"]
    assert {b["metadata"]["name"] for b in bindings} == set(GROUPS)
    for b in bindings:
        name = b["metadata"]["name"]
        assert b["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name}
        assert b["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": name}]
    # Only the known kinds.
    assert {d["kind"] for d in docs} == {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


def test_the_api_server_stores_every_role_and_binding_as_written(real_kube: RealKubeAPI) -> None:
    for d in _docs():
        ns = d["metadata"].get("namespace")
        stored = real_kube.get("rbac.authorization.k8s.io/v1", d["kind"], d["metadata"]["name"], ns)
        for key in ("rules", "roleRef", "subjects"):
            assert stored.get(key) == d.get(key), (d["kind"], d["metadata"]["name"], key)


def test_every_group_has_members_and_every_member_group_exists() -> None:
    used = {g for groups in FUNCTION_GROUPS.values() for g in groups}
    assert used == set(GROUPS)
    for fn, groups in FUNCTION_GROUPS.items():
        assert len(set(groups)) == len(groups), fn


def test_every_rule_says_which_function_needs_it() -> None:
    """The comment right above each rule names a function of a group the rule is granted to."""
    lines = CONTROLLER_RBAC.read_text().splitlines()
    role: str | None = None
    members: set[str] = set()
    checked = 0
    for i, line in enumerate(lines):
        if line.startswith("kind: "):
            role = line.split(": ", 1)[1]
        if line.startswith("  name: ") and role in ("ClusterRole", "Role"):
            name = line.split(": ", 1)[1]
            members = _members(name)
            assert members, f"{role} {name}: no function has this group"
        if line.startswith("  - apiGroups:"):
            comment: list[str] = []
            j = i - 1
            while j >= 0 and lines[j].strip().startswith("#"):
                comment.insert(0, lines[j].strip().lstrip("# "))
                j -= 1
            assert comment, f"line {i + 1}: a rule without a comment saying who needs it"
            text = " ".join(comment)
            named = {fn for fn in FUNCTION_GROUPS if re.search(rf"\b{fn}\b", text)}
            assert named & members, f"line {i + 1}: the comment names none of {sorted(members)}: {text!r}"
            checked += 1
    assert checked >= 20


def test_no_wildcards_no_watch_no_update_no_deletecollection() -> None:
    for name, rules in _cluster_roles().items():
        for rule in rules:
            for key in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[key], (name, rule)
            assert not set(rule["verbs"]) & {
                "watch",
                "update",
                "deletecollection",
                "escalate",
                "bind",
                "impersonate",
            }, (
                name,
                rule,
            )
            assert "nonResourceURLs" not in rule


# The EC2NodeClass hash annotations (karpenter.k8s.aws/ec2nodeclass-hash, -hash-version) are metadata, not
# status: the functions that keep them (the provisioner and garbage collection) patch the object itself.
HASH_WRITERS = {"provisioner", "gc"}


def test_node_pools_and_node_classes_are_only_read_and_their_status_patched() -> None:
    for fn in FUNCTION_GROUPS:
        granted = _granted(fn)
        for group, resource in (("karpenter.sh", "nodepools"), ("karpenter.k8s.aws", "ec2nodeclasses")):
            allowed = READ | {"patch"} if resource == "ec2nodeclasses" and fn in HASH_WRITERS else READ
            assert {v for g, r, v in granted if (g, r) == (group, resource)} <= allowed, (fn, resource)
            assert {v for g, r, v in granted if (g, r) == (group, f"{resource}/status")} <= {"patch"}, (fn, resource)


def test_only_the_drain_deletes_or_evicts_pods() -> None:
    for fn in FUNCTION_GROUPS:
        granted = _granted(fn)
        pod_writes = {(r, v) for g, r, v in granted if g == "" and r.startswith("pods") and v not in READ}
        if fn == "drain":
            assert pod_writes == {("pods", "delete"), ("pods/eviction", "create")}
        else:
            assert pod_writes == set(), fn


def test_only_housekeeping_and_termination_delete_nodes_and_node_claims() -> None:
    deleting = {fn for fn in FUNCTION_GROUPS if ("", "nodes", "delete") in _granted(fn)}
    assert deleting == {"cleanup", "gc", "taint", "finalize"}
    deleting_claims = {fn for fn in FUNCTION_GROUPS if ("karpenter.sh", "nodeclaims", "delete") in _granted(fn)}
    assert deleting_claims == {"cleanup", "gc", "taint", "finalize"}
    creating = {fn for fn in FUNCTION_GROUPS if ("karpenter.sh", "nodeclaims", "create") in _granted(fn)}
    assert creating == {"provisioner", "disruption"}


def test_the_pause_switch_is_readable_by_the_disruption_function_only() -> None:
    from nodeflow.lifecycle.disruption_round import PAUSE_CONFIG_MAP

    docs = _docs()
    assert all("configmaps" not in r["resources"] for rules in _cluster_roles().values() for r in rules)
    (role,) = [d for d in docs if d["kind"] == "Role"]
    (binding,) = [d for d in docs if d["kind"] == "RoleBinding"]
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "nodeflow"
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [PAUSE_CONFIG_MAP], "verbs": ["get"]}
    ]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "nodeflow-disruption",
    }
    assert [s["name"] for s in binding["subjects"]] == ["nodeflow-disruption"]
    assert _members("nodeflow-disruption") == {"disruption"}


def test_the_api_server_lets_the_disruption_function_read_the_pause_switch_only(real_kube: RealKubeAPI) -> None:
    """As the real authorizer decides it (SubjectAccessReview): that one ConfigMap, in that namespace, only read."""
    from nodeflow.lifecycle.disruption_round import PAUSE_CONFIG_MAP

    def may(verb: str, namespace: str, name: str | None) -> bool:
        attributes = {
            "verb": verb,
            "resource": "configmaps",
            "namespace": namespace,
            **({"name": name} if name else {}),
        }
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": "disruption",
                "groups": list(FUNCTION_GROUPS["disruption"]),
                "resourceAttributes": attributes,
            },
        }
        path = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
        return bool(real_kube.kube.request("POST", path, body=review)["status"].get("allowed"))

    assert may("get", "nodeflow", PAUSE_CONFIG_MAP)
    assert not may("get", "default", PAUSE_CONFIG_MAP)
    assert not may("get", "nodeflow", "other")
    assert not may("list", "nodeflow", None)
    assert not may("patch", "nodeflow", PAUSE_CONFIG_MAP)


def test_every_resource_the_adapter_names_is_granted_to_some_function() -> None:
    """A resource in nodeflow.kube.client that no group may touch would be dead code or a missing grant."""
    resources = [v for v in vars(kube).values() if isinstance(v, kube.Resource) and v is not kube.CONFIG_MAPS]
    assert len(resources) >= 10
    granted = {(g, r) for fn in FUNCTION_GROUPS for g, r, _ in _granted(fn)}
    for r in resources:
        assert (r.group, r.plural) in granted, r.plural


def test_bindings_name_groups_only() -> None:
    """No binding names a user or a service account: a function gets exactly what its groups get."""
    for d in _docs():
        for s in d.get("subjects") or []:
            assert s["kind"] == "Group", d["metadata"]["name"]
