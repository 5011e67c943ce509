"""RBAC in the test API server, over real HTTP with the official client: authentication by token, impersonation
headers, ClusterRole/Role evaluation as the real authorizer does it, and 401/403/400 answers the real server gives."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3

from tests.kubeapi import KubeAPIServer
from tests.kubeapi.impersonation import ClientImpersonation, acting_as, current
from tests.kubeapi.rbac import (
    AUTHENTICATED,
    Authorizer,
    Tokens,
    UserInfo,
    request_attributes,
    service_account_user,
)

MANIFESTS: list[dict[str, Any]] = [
    {
        "kind": "ClusterRole",
        "metadata": {"name": "readers"},
        "rules": [
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]},
            {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
        ],
    },
    {
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "readers"},
        "roleRef": {"kind": "ClusterRole", "name": "readers"},
        "subjects": [{"kind": "Group", "name": "readers"}],
    },
    {
        "kind": "Role",
        "metadata": {"name": "one-map", "namespace": "team"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["switch"], "verbs": ["get"]}],
    },
    {
        "kind": "RoleBinding",
        "metadata": {"name": "one-map", "namespace": "team"},
        "roleRef": {"kind": "Role", "name": "one-map"},
        "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": "team"}],
    },
    {  # a ClusterRole bound in one namespace only
        "kind": "RoleBinding",
        "metadata": {"name": "nodes-here", "namespace": "team"},
        "roleRef": {"kind": "ClusterRole", "name": "pod-deleter"},
        "subjects": [{"kind": "User", "name": "alice"}],
    },
    {
        "kind": "ClusterRole",
        "metadata": {"name": "pod-deleter"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]}],
    },
]


@pytest.fixture
def server() -> Iterator[KubeAPIServer]:
    s = KubeAPIServer().start()
    tokens = Tokens()
    tokens.add("reader-token", UserInfo("reader", ("readers", AUTHENTICATED)))
    tokens.add("lambda-token", UserInfo("lambda", (AUTHENTICATED,)), impersonate=True)
    tokens.add("bot-token", service_account_user("team", "bot"))
    tokens.add("alice-token", UserInfo("alice", (AUTHENTICATED,)))
    s.enable_rbac(Authorizer(MANIFESTS), tokens)
    try:
        yield s
    finally:
        s.stop()


def _request(
    server: KubeAPIServer, method: str, path: str, token: str | None = None, **headers: Any
) -> tuple[int, dict[str, Any]]:
    hdrs = urllib3.HTTPHeaderDict()
    if token is not None:
        hdrs["Authorization"] = f"Bearer {token}"
    for key, value in headers.items():
        for v in value if isinstance(value, list) else [value]:
            hdrs.add(key.replace("_", "-"), v)
    body = json.dumps({}).encode() if method in ("POST", "PUT", "PATCH") else None
    if method == "PATCH":
        hdrs["Content-Type"] = "application/merge-patch+json"
    r = urllib3.request(method, server.url + path, headers=hdrs, body=body, timeout=5)
    try:
        return r.status, json.loads(r.data or b"{}")
    except ValueError:
        return r.status, {}


def test_allowed_by_a_group_binding(server: KubeAPIServer) -> None:
    assert _request(server, "GET", "/api/v1/nodes", "reader-token")[0] == 200
    (decision,) = server.decisions.items()
    assert decision.allowed
    assert decision.grants[0].role == "ClusterRole/readers"
    assert decision.grants[0].subject == "Group/readers"


def test_forbidden_answers_the_real_servers_status(server: KubeAPIServer) -> None:
    code, body = _request(server, "DELETE", "/api/v1/namespaces/default/pods/web", "reader-token")
    assert code == 403
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "web" is forbidden: User "reader" cannot delete resource "pods" in API group "" '
        'in the namespace "default"',
        "reason": "Forbidden",
        "details": {"name": "web", "kind": "pods"},
        "code": 403,
    }
    code, body = _request(server, "GET", "/apis/karpenter.sh/v1/nodepools", "reader-token")
    assert code == 403
    assert body["message"] == (
        'nodepools.karpenter.sh is forbidden: User "reader" cannot list resource "nodepools" in API group '
        '"karpenter.sh" at the cluster scope'
    )
    assert body["details"] == {"kind": "nodepools", "group": "karpenter.sh"}
    assert [d.allowed for d in server.denied()] == [False, False]


def test_verbs_from_methods_and_subresources(server: KubeAPIServer) -> None:
    def attrs(method: str, path: str, **query: str) -> tuple[str, str, str, str | None, str | None]:
        a = request_attributes(method, path, query)
        return a.verb, a.api_group, a.full_resource, a.namespace, a.name

    assert attrs("GET", "/api/v1/pods") == ("list", "", "pods", None, None)
    assert attrs("GET", "/api/v1/pods", watch="true") == ("watch", "", "pods", None, None)
    assert attrs("GET", "/api/v1/namespaces/a/pods/p") == ("get", "", "pods", "a", "p")
    assert attrs("POST", "/api/v1/namespaces/a/pods/p/eviction") == ("create", "", "pods/eviction", "a", "p")
    assert attrs("PATCH", "/apis/karpenter.sh/v1/nodeclaims/c/status") == (
        "patch",
        "karpenter.sh",
        "nodeclaims/status",
        None,
        "c",
    )
    assert attrs("PUT", "/api/v1/nodes/n") == ("update", "", "nodes", None, "n")
    assert attrs("DELETE", "/api/v1/namespaces/a/pods") == ("deletecollection", "", "pods", "a", None)
    assert attrs("GET", "/api/v1/namespaces/a") == ("get", "", "namespaces", "a", "a")
    # A subresource is its own resource: pods/eviction is allowed, pods itself is not.
    assert _request(server, "POST", "/api/v1/namespaces/default/pods/p/eviction", "reader-token")[0] != 403
    assert _request(server, "GET", "/api/v1/namespaces/default/pods/p", "reader-token")[0] == 403
    # get and list are granted, watch is not
    assert _request(server, "GET", "/api/v1/nodes?watch=true&timeoutSeconds=1", "reader-token")[0] == 403


def test_role_bindings_grant_in_their_namespace_only_and_resource_names_restrict(server: KubeAPIServer) -> None:
    assert _request(server, "GET", "/api/v1/namespaces/team/configmaps/switch", "bot-token")[0] == 404  # allowed
    assert _request(server, "GET", "/api/v1/namespaces/team/configmaps/other", "bot-token")[0] == 403
    assert _request(server, "GET", "/api/v1/namespaces/default/configmaps/switch", "bot-token")[0] == 403
    assert _request(server, "GET", "/api/v1/namespaces/team/configmaps", "bot-token")[0] == 403  # list: no name
    assert _request(server, "DELETE", "/api/v1/namespaces/team/pods/p", "alice-token")[0] == 404  # allowed
    assert _request(server, "DELETE", "/api/v1/namespaces/default/pods/p", "alice-token")[0] == 403


def test_authentication(server: KubeAPIServer) -> None:
    code, body = _request(server, "GET", "/api/v1/nodes", "no-such-token")
    assert (code, body["reason"]) == (401, "Unauthorized")
    code, body = _request(server, "GET", "/api/v1/nodes")  # anonymous
    assert code == 403
    assert 'User "system:anonymous"' in body["message"]
    assert _request(server, "GET", "/version")[0] == 200  # public
    assert _request(server, "GET", "/api")[0] == 403  # discovery: authenticated users only
    assert _request(server, "GET", "/api", "alice-token")[0] == 200
    assert _request(server, "GET", "/api/v1/nodes", "nodeflow-test")[0] == 200  # the admin (system:masters)


def test_impersonation(server: KubeAPIServer) -> None:
    as_reader = {"Impersonate_User": "fn", "Impersonate_Group": ["other", "readers"]}
    assert _request(server, "GET", "/api/v1/nodes", "lambda-token", **as_reader)[0] == 200
    decision = server.decisions.items()[-1]
    assert decision.user == UserInfo("fn", ("other", "readers", AUTHENTICATED))
    # the impersonator itself may do nothing
    assert _request(server, "GET", "/api/v1/nodes", "lambda-token")[0] == 403
    # only impersonators may impersonate; a group needs a user
    code, body = _request(server, "GET", "/api/v1/nodes", "alice-token", **as_reader)
    assert code == 403
    assert 'cannot impersonate resource "users"' in body["message"]
    assert _request(server, "GET", "/api/v1/nodes", "lambda-token", Impersonate_Group="readers")[0] == 400


def test_the_official_client_impersonates_inside_acting_as(server: KubeAPIServer) -> None:
    from nodeflow.kube.client import NODES, KubeClient
    from nodeflow.kube.errors import Forbidden

    kube = KubeClient(server.api_client("lambda-token"))
    ClientImpersonation.install()
    ClientImpersonation.install()  # counted
    try:
        with pytest.raises(Forbidden):
            kube.list_items(NODES)
        with acting_as(UserInfo("fn", ("readers",))):
            assert current() == UserInfo("fn", ("readers",))
            assert kube.list_items(NODES) == []
        assert current() is None
        ClientImpersonation.uninstall()
        with acting_as(UserInfo("fn", ("readers",))):
            assert kube.list_items(NODES) == []  # still installed once
    finally:
        ClientImpersonation.uninstall()
    with acting_as(UserInfo("fn", ("readers",))), pytest.raises(Forbidden):
        kube.list_items(NODES)  # uninstalled: no headers


def test_disabled_rbac_accepts_anything_and_reset_disables_it(server: KubeAPIServer) -> None:
    assert _request(server, "GET", "/api/v1/nodes", "no-such-token")[0] == 401
    server.reset()
    assert server.rbac is None
    assert _request(server, "GET", "/api/v1/nodes", "no-such-token")[0] == 200
    assert _request(server, "DELETE", "/api/v1/namespaces/default/pods/p")[0] == 404


def test_bad_manifests_are_refused() -> None:
    with pytest.raises(ValueError, match=r"roleRef names ClusterRole/missing"):
        Authorizer(
            [
                {
                    "kind": "ClusterRoleBinding",
                    "metadata": {"name": "b"},
                    "roleRef": {"kind": "ClusterRole", "name": "missing"},
                    "subjects": [{"kind": "Group", "name": "g"}],
                }
            ]
        )
    with pytest.raises(ValueError, match=r"rule 0: a rule needs verbs"):
        Authorizer([{"kind": "ClusterRole", "metadata": {"name": "r"}, "rules": [{"resources": ["pods"]}]}])
    with pytest.raises(ValueError, match=r"unknown rule fields \['verb'\]"):
        Authorizer([{"kind": "ClusterRole", "metadata": {"name": "r"}, "rules": [{"verbs": ["get"], "verb": []}]}])
