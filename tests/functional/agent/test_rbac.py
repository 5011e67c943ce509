"""The agent's ClusterRole (agent/manifests/20-rbac.yaml, applied as the install applies it) against what the agent
really asks the API server, read from the API server's audit log: every grant is used, and a verb missing from the
role is refused by the real authorizer and fails the test."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sandbox.controlplane.audit import AuditLog, unused_grants
from sandbox.controlplane.facade import RealKubeAPI
from tests.functional.agent.conftest import AGENT_ACCOUNT, AGENT_DIR, Agent, Webhook, wait_for
from tests.functional.agent.objects import node, node_claim, node_class, node_pool, unschedulable_pod

AGENT_RBAC = AGENT_DIR / "manifests" / "20-rbac.yaml"
AGENT_USER = "system:serviceaccount:{}:{}".format(*AGENT_ACCOUNT)
WATCHED = {"pods", "nodes", "nodepools", "nodeclaims", "ec2nodeclasses"}


def test_the_agents_role_grants_what_it_uses_and_nothing_more(
    kube: RealKubeAPI,
    audit_log: AuditLog,
    webhook: Webhook,
    start_agent: Callable[..., Agent],
) -> None:
    since = audit_log.mark()
    agent = start_agent(kube.url)
    agent.wait_ready()
    for obj in (node("node-r"), node_pool("rbac"), node_class("rbac"), node_claim("rbac-x"), unschedulable_pod("p")):
        kube.create(obj)
    webhook.wait("PodUnschedulable", "p")
    webhook.wait("NodeClaimChanged", "rbac-x")

    def watching() -> list[Any] | None:
        mine = [r for r in audit_log.requests(since) if r.user == AGENT_USER]
        return mine if {r.resource for r in mine if r.verb == "watch"} == WATCHED else None

    requests = wait_for(watching, what="the agent's watches in the audit log")
    assert {(r.verb, r.resource) for r in requests} == {(v, r) for v in ("list", "watch") for r in WATCHED}
    assert all(r.allowed for r in requests)
    unused = unused_grants([AGENT_RBAC], requests)
    assert unused == [], "granted to the agent but never used: " + ", ".join(
        f"{g.verb} {g.api_group or 'core'}/{g.resource}" for g in unused
    )


def test_a_verb_missing_from_the_agents_role_is_refused_and_fails_the_test(
    kube: RealKubeAPI, webhook: Webhook, start_agent: Callable[..., Agent]
) -> None:
    role = kube.get("rbac.authorization.k8s.io/v1", "ClusterRole", "nodeflow-agent")
    narrowed = [
        {**rule, "verbs": [v for v in rule["verbs"] if v != "watch"]} if "nodes" in rule["resources"] else rule
        for rule in role["rules"]
    ]
    kube.patch("rbac.authorization.k8s.io/v1", "ClusterRole", "nodeflow-agent", {"rules": narrowed})
    try:
        start_agent(kube.url)

        def refused() -> list[Any]:
            return [d for d in kube.denied() if d.path == "/api/v1/nodes" and "watch=true" in d.query]

        [first, *_] = wait_for(refused, what="the node watch refused")
        assert first.status == 403
        assert 'cannot watch resource "nodes"' in first.message
    finally:
        kube.patch("rbac.authorization.k8s.io/v1", "ClusterRole", "nodeflow-agent", {"rules": role["rules"]})
    restored = len(kube.exchanges)

    def watching_again() -> bool:
        return any(
            e.path == "/api/v1/nodes" and "watch=true" in e.query and e.status == 200 for e in kube.exchanges[restored:]
        )

    wait_for(watching_again, what="the node watch allowed again")
    kube.enable_rbac()  # the refusals were the point: the fixture checks only what comes after
