"""NodeflowPolicies through the real provisioner Lambda (moto, the launch workflow, the real control plane with the
NodeflowPolicy CRD; the pods are held Unschedulable, no scheduler runs them: only nodeflow's decisions are looked at): a pod of a namespace a policy denies a NodePool gets its FailedScheduling event naming the
policy and no NodeClaim while an admitted namespace's pod gets one; a $/hour ceiling stops the next NodeClaim
(existing spend close to it) but lets a cheaper one through; a provisioning pause window stops NodeClaims until it
closes (the Lambda's clock); an invalid policy fails safe (an Event naming the field; its NodePools paused). "*" in
a list of NodePools is every NodePool (a pause, a group limit, an access rule); a pause window or a NodePool duration
nodeflow cannot evaluate stops only its own NodePools."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client

from nodeflow.catalog.offline import load_offline
from nodeflow.handlers import runtime
from nodeflow.kube.errors import Invalid
from sandbox.controlplane.facade import RealKubeAPI
from sandbox.nodeflow import LocalNodeflow
from tests.functional.conftest import aws_env
from tests.functional.lifecycle.conftest import make_local
from tests.realk8s.workloads import held_pods

__all__ = ["aws_env", "kube_server", "make_local"]


@pytest.fixture
def kube_server(real_kube: RealKubeAPI) -> RealKubeAPI:
    return real_kube


CAPPED: dict[str, Any] = {
    "apiVersion": "karpenter.sh/v1",
    "kind": "NodePool",
    "metadata": {"name": "capped"},
    "spec": {
        "template": {
            "spec": {
                "requirements": [
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large", "m5.2xlarge"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                ],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            }
        }
    },
}


def policy(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "nodeflow.io/v1alpha1", "kind": "NodeflowPolicy", "metadata": {"name": name}, "spec": spec}


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def pods(name: str, ns: str, pool: str | None = None, cpu: str = "1", memory: str = "2Gi") -> list[dict[str, Any]]:
    selector = {"nodeSelector": {"karpenter.sh/nodepool": pool}} if pool else {}
    return held_pods(name, 1, cpu, memory, namespace=ns, **selector)


def trigger(n: int) -> list[dict[str, Any]]:
    return [{"messageId": f"policy-{n}", "body": json.dumps({"detail-type": "PodUnschedulable"})}]


def claims_of(local: LocalNodeflow) -> dict[str, list[str]]:
    """NodeClaim name -> the pods nominated to it (ns/name)."""
    return {
        c["metadata"]["name"]: json.loads(c["metadata"].get("annotations", {}).get("nodeflow.io/nominated-pods", "[]"))
        for c in local.kube_server.objects("karpenter.sh/v1", "NodeClaim")
    }


def nominated(local: LocalNodeflow) -> set[str]:
    return {pod for pods_ in claims_of(local).values() for pod in pods_}


def failed_scheduling(local: LocalNodeflow, ns: str) -> dict[str, str]:
    """Pod name -> its latest FailedScheduling message (events are listed by name, a hash: order them by when they
    were written, their resourceVersion, since the test's clock stands still)."""
    events = sorted(
        (e for e in local.kube_server.objects("v1", "Event", ns) if e["reason"] == "FailedScheduling"),
        key=lambda e: int(e["metadata"]["resourceVersion"]),
    )
    return {e["involvedObject"]["name"]: e["message"] for e in events}


def test_a_denied_namespace_gets_the_event_and_no_nodeclaim_an_invalid_policy_fails_safe(
    make_local: Callable[..., LocalNodeflow],
) -> None:
    local = make_local()
    frozen = {**CAPPED, "metadata": {"name": "frozen"}}
    local.apply([CAPPED, frozen, namespace("ml-prod", team="ml"), namespace("ml-exp")])
    access = [{"nodePools": ["capped"], "namespaceSelector": {"matchLabels": {"team": "ml"}}}]
    # a minute field out of range: the CRD's pattern admits it, the model does not
    bad = {"name": "w", "schedule": "99 18 * * 5", "duration": "1h", "provisioning": True, "nodePools": ["frozen"]}
    local.apply([policy("gpu-access", nodePoolAccess=access), policy("broken", pauses=[bad])])
    local.apply(
        [*pods("train", "ml-prod", "capped"), *pods("try", "ml-exp", "capped"), *pods("held", "ml-prod", "frozen")]
    )
    result = local.provision(trigger(1))["result"]
    assert len(result["nodeClaimsCreated"]) == 1, result
    assert nominated(local) == {"ml-prod/train-7d4b9c-00000"}
    events = failed_scheduling(local, "ml-exp")
    assert "namespace ml-exp may not use NodePool capped: policy gpu-access" in events["try-7d4b9c-00000"]
    assert list(failed_scheduling(local, "ml-prod")) == ["held-7d4b9c-00000"]

    # the invalid policy: not ignored (its NodePool paused, the pod told why), and reported naming the field
    why = failed_scheduling(local, "ml-prod")["held-7d4b9c-00000"]
    assert "provisioning paused for NodePool frozen by policy broken" in why, why
    (event,) = [
        e
        for e in local.kube_server.objects("v1", "Event", "default")
        if e["involvedObject"]["kind"] == "NodeflowPolicy" and e["reason"] == "ValidationFailed"
    ]
    assert event["involvedObject"]["name"] == "broken"
    assert "spec.pauses" in event["message"]
    assert "provisioning is paused in NodePool frozen" in event["message"]


def test_a_ceiling_stops_the_next_nodeclaim_a_cheaper_one_goes_a_pause_window_holds_nodeclaims_until_it_closes(
    make_local: Callable[..., LocalNodeflow], monkeypatch: pytest.MonkeyPatch
) -> None:
    prices = load_offline().on_demand_prices
    large, xlarge2 = prices["m5.large"], prices["m5.2xlarge"]
    local = make_local()
    local.apply([CAPPED, namespace("batch")])
    local.apply(pods("big-a", "batch", "capped", cpu="7", memory="24Gi"))  # only an m5.2xlarge fits it
    first = local.provision(trigger(1))["result"]
    assert len(first["nodeClaimsCreated"]) == 1, (first, failed_scheduling(local, "batch"))
    # the ceiling leaves room for one m5.large more, not for another m5.2xlarge
    ceiling = f"{xlarge2 + 1.5 * large:.4f}"
    local.apply([policy("cost-caps", costCeilings={"nodePools": [{"name": "capped", "maxPricePerHour": ceiling}]})])
    local.apply(
        [
            *pods("big-b", "batch", "capped", cpu="7", memory="24Gi"),
            *pods("small", "batch", "capped", cpu="1", memory="2Gi"),
        ]
    )
    second = local.provision(trigger(2))["result"]
    assert len(second["nodeClaimsCreated"]) == 1, json.dumps(failed_scheduling(local, "batch"))
    assert "batch/small-7d4b9c-00000" in nominated(local)
    assert "batch/big-b-7d4b9c-00000" not in nominated(local)
    why = failed_scheduling(local, "batch")["big-b-7d4b9c-00000"]
    assert "ceiling of NodePool capped" in why, why
    assert "policy cost-caps" in why, why

    # a quarter-end freeze: Fridays 18:00 UTC for 60h (every NodePool); the Lambda's clock says Friday 19:00
    rt = runtime.runtime()
    monkeypatch.setattr(rt, "clock", lambda: datetime(2026, 11, 27, 19, 0, tzinfo=UTC))
    freeze = {"name": "quarter-end-freeze", "schedule": "0 18 * * 5", "duration": "60h", "provisioning": True}
    local.apply([namespace("shop"), policy("freeze", pauses=[freeze])])
    # pinned to NodePool default: unpinned it could join the capped NodePool's NodeClaim while that is still launching
    # (in-flight capacity stays usable under a pause), which made the test depend on background launch timing
    local.apply(pods("web", "shop", "default"))
    paused = local.provision(trigger(3))["result"]
    assert paused["nodeClaimsCreated"] == [], paused
    why = failed_scheduling(local, "shop")["web-7d4b9c-00000"]
    assert "provisioning paused for NodePool default by policy freeze: window quarter-end-freeze" in why, why
    assert "until 2026-11-30T06:00:00Z" in why, why
    # Monday 07:00: the window closed; the next run (the agent re-sends pending pods every resync) launches
    monkeypatch.setattr(rt, "clock", lambda: datetime(2026, 11, 30, 7, 0, tzinfo=UTC))
    after = local.provision(trigger(4))["result"]
    assert len(after["nodeClaimsCreated"]) == 1, after
    assert "shop/web-7d4b9c-00000" in nominated(local)
    assert "batch/big-b-7d4b9c-00000" not in nominated(local)  # still over its ceiling


def _delete_policy(local: LocalNodeflow, name: str) -> None:
    client.CustomObjectsApi(local.kube_server.api_client()).delete_cluster_custom_object(
        "nodeflow.io", "v1alpha1", "nodeflowpolicies", name
    )


def test_star_is_every_nodepool_for_a_pause_a_group_limit_and_access(
    make_local: Callable[..., LocalNodeflow], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reviewer's three policies on ["*"] (each was compared literally and enforced nothing)."""
    local = make_local()
    monkeypatch.setattr(runtime.runtime(), "clock", lambda: datetime(2026, 11, 25, 5, 30, tzinfo=UTC))
    local.apply([CAPPED, namespace("ml-prod"), namespace("web")])
    pools = ("capped", "default")

    pause = {"name": "all", "schedule": "* * * * *", "duration": "1h", "provisioning": True, "nodePools": ["*"]}
    local.apply([policy("freeze", pauses=[pause]), *pods("shop", "web")])
    assert local.provision(trigger(1))["result"]["nodeClaimsCreated"] == []
    why = failed_scheduling(local, "web")["shop-7d4b9c-00000"]
    for pool in pools:
        assert f"provisioning paused for NodePool {pool} by policy freeze: window all" in why, why
    _delete_policy(local, "freeze")

    local.apply([policy("none", limits=[{"name": "all", "nodePools": ["*"], "resources": {"nodes": "0"}}])])
    assert local.provision(trigger(2))["result"]["nodeClaimsCreated"] == []
    why = failed_scheduling(local, "web")["shop-7d4b9c-00000"]
    assert "exceeds limit nodes=0 of NodePool group all (every NodePool): 0 remaining" in why, why
    _delete_policy(local, "none")

    local.apply([policy("prod-only", nodePoolAccess=[{"nodePools": ["*"], "namespaces": ["ml-prod"]}])])
    local.apply([*pods("train", "ml-prod"), *pods("cart", "web")])  # a new pod: a new FailedScheduling event
    result = local.provision(trigger(3))["result"]
    assert len(result["nodeClaimsCreated"]) == 1, result
    assert nominated(local) == {"ml-prod/train-7d4b9c-00000"}
    why = failed_scheduling(local, "web")["cart-7d4b9c-00000"]
    for pool in pools:
        assert f"namespace web may not use NodePool {pool}: policy prod-only" in why, why


def test_durations_nodeflow_cannot_evaluate_stop_only_their_own_nodepools(
    make_local: Callable[..., LocalNodeflow],
) -> None:
    """The reviewer's pause durations (the provisioner failed for every NodePool, and the batch came back every 12
    minutes): the CRD refuses them now; one stored anyway (an older CRD) is an invalid policy pausing only the
    NodePool it names, with its Warning Event. A NodePool whose consolidateAfter is past Go's range is invalid (its
    condition names the field); the other NodePools keep provisioning."""
    local = make_local()
    frozen = {**CAPPED, "metadata": {"name": "frozen"}}
    # Karpenter's CRD pattern admits it; Go (and so Karpenter) cannot hold it
    slow = {
        **CAPPED,
        "metadata": {"name": "slow"},
        "spec": {**CAPPED["spec"], "disruption": {"consolidateAfter": "99999999999h"}},
    }
    local.apply([CAPPED, frozen, slow, namespace("shop")])
    window = {"name": "w", "schedule": "0 0 30 2 *", "provisioning": True, "disruption": True, "nodePools": ["frozen"]}
    long_windows = [
        policy(f"long-{i}", pauses=[{**window, "duration": d}]) for i, d in enumerate(("99999999999h", "20000000h"))
    ]
    for doc in long_windows:
        with pytest.raises(Invalid) as refused:
            local.apply([doc])
        assert "spec.pauses[0].duration" in str(refused.value)
        local.kube_server.store_bypassing_admission(doc)
    local.apply([*pods("web", "shop", "capped"), *pods("held", "shop", "frozen"), *pods("lazy", "shop", "slow")])
    result = local.provision(trigger(1))["result"]
    assert len(result["nodeClaimsCreated"]) == 1, result
    assert nominated(local) == {"shop/web-7d4b9c-00000"}
    events = failed_scheduling(local, "shop")
    assert (
        "provisioning paused for NodePool frozen by policy long-0: window invalid-policy" in events["held-7d4b9c-00000"]
    )
    assert "lazy-7d4b9c-00000" in events
    invalid = {
        e["involvedObject"]["name"]: e["message"]
        for e in local.kube_server.objects("v1", "Event", "default")
        if e["reason"] == "ValidationFailed"
    }
    for name, duration in (("long-0", "99999999999h"), ("long-1", "20000000h")):
        assert f"spec.pauses[0].duration: '{duration}' is longer than 8784h" in invalid[name], invalid
        assert "provisioning is paused in NodePool frozen" in invalid[name]
    assert "spec.disruption.consolidateAfter" in invalid["slow"], invalid
    (condition,) = [
        c
        for c in local.kube_server.get("karpenter.sh/v1", "NodePool", "slow")["status"]["conditions"]
        if c["type"] == "ValidationSucceeded"
    ]
    assert condition["status"] == "False"
    assert "spec.disruption.consolidateAfter" in condition["message"]
