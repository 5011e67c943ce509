"""lifecycle/karpenter_guard.py: what it reads, what it answers, and that a guard without RBAC does not stop
nodeflow (the functional tests on the real control plane are tests/functional/migration/test_pause.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from nodeflow.kube.client import DEPLOYMENTS, LEASES, Resource
from nodeflow.kube.errors import Forbidden
from nodeflow.lifecycle.karpenter_guard import karpenter_guard

NOW = datetime(2026, 11, 28, 21, 0, tzinfo=UTC)


class Lists:
    """A KubeClient's ``list_items`` over fixed answers (or an error), recording what was asked."""

    def __init__(self, answers: dict[str, list[dict[str, Any]]], error: Exception | None = None) -> None:
        self.answers = answers
        self.error = error
        self.asked: list[tuple[str, dict[str, Any]]] = []

    def list_items(self, resource: Resource, **query: Any) -> list[dict[str, Any]]:
        self.asked.append((resource.plural, query))
        if self.error is not None:
            raise self.error
        return self.answers.get(resource.plural, [])


def deployment(ready: int) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "kube-system", "name": "karpenter"},
        "spec": {"replicas": 2},
        "status": {"readyReplicas": ready},
    }


def test_asks_for_karpenters_deployments_by_label_and_its_lease_by_name() -> None:
    kube = Lists({})
    assert karpenter_guard(kube, NOW) is None  # type: ignore[arg-type]
    assert kube.asked == [
        (DEPLOYMENTS.plural, {"label_selector": "app.kubernetes.io/name=karpenter"}),
        (LEASES.plural, {"field_selector": "metadata.name=karpenter-leader-election"}),
    ]


def test_a_ready_deployment_pauses_with_a_stable_reason_and_what_to_run() -> None:
    pause = karpenter_guard(Lists({"deployments": [deployment(2)]}), NOW)  # type: ignore[arg-type]
    assert pause is not None
    assert pause.why == (
        "a Karpenter controller is running (Deployment kube-system/karpenter has ready replicas): nodeflow launches "
        "and disrupts nothing until it is gone; to hand over, kubectl -n kube-system scale deployment karpenter "
        "--replicas=0"
    )
    assert pause.evidence == ("Deployment kube-system/karpenter: 2/2 ready",)
    assert karpenter_guard(Lists({"deployments": [deployment(0)]}), NOW) is None  # type: ignore[arg-type]


def test_without_rbac_to_look_nodeflow_is_not_held_and_says_why() -> None:
    logged: list[tuple[str, dict[str, Any]]] = []
    kube = Lists({}, error=Forbidden("deployments.apps is forbidden"))
    assert karpenter_guard(kube, NOW, lambda m, e: logged.append((m, e))) is None  # type: ignore[arg-type]
    [(message, extra)] = logged
    assert "nodeflow-karpenter-watch" in message
    assert extra == {"error": "deployments.apps is forbidden"}
