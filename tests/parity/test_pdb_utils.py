"""Parity with Karpenter's PodDisruptionBudget utilities: seen as whether a node holding the pods is blocked.

A node is blocked when evicting one of its pods would be refused: a PDB selecting it allows no disruption
now (status.disruptionsAllowed 0), or two PDBs select it (the eviction API refuses that whatever they
allow). A PDB with unhealthyPodEvictionPolicy AlwaysAllow does not protect a pod whose Ready condition is
False. Pods that are never evicted (mirror pods, terminal or terminating pods, pods tolerating the
karpenter.sh/disrupted taint) are not protected by any PDB.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.parity._candidates import base, blocker, disrupted, node_with, run_round, small
from tests.parity.harness import Obj, pdb
from tests.parity.upstream import mirrors

UPSTREAM = "pkg/utils/pdb/suite_test.go"

_RESCHEDULABLE = (
    "nodeflow's disruption simulation does not re-place the pods of nodes that are already being deleted "
    "(their eviction by the terminate workflow makes them pending for the provisioner), so whether such a "
    "pod is 'currently reschedulable' decides nothing that plan or disrupt show"
)

NOT_EXPRESSIBLE: dict[str, str] = {
    "IsCurrentlyReschedulable / considers unhealthy pod as currently reschedulable when UnhealthyPodEvictionPolicy "
    "is set to always allow": _RESCHEDULABLE,
    "IsCurrentlyReschedulable / does not consider unhealthy pod as currently reschedulable when "
    "UnhealthyPodEvictionPolicy is not set": _RESCHEDULABLE,
    "IsCurrentlyReschedulable / considers pod as currently reschedulable when no PDBs match": _RESCHEDULABLE,
    "IsCurrentlyReschedulable / pods which are not currently reschedulable due to PDBs / 100% min available": (
        _RESCHEDULABLE
    ),
    "IsCurrentlyReschedulable / pods which are not currently reschedulable due to PDBs / 0% max unavailable": (
        _RESCHEDULABLE
    ),
    "IsCurrentlyReschedulable / pods which are not currently reschedulable due to PDBs / 0 max unavailable": (
        _RESCHEDULABLE
    ),
    "IsCurrentlyReschedulable / pods which are not currently reschedulable due to PDBs / multiple PDBs on the "
    "same pod": _RESCHEDULABLE,
    "IsCurrentlyReschedulable / does not consider pod with do-not-disrupt annotation as currently reschedulable": (
        _RESCHEDULABLE
    ),
}

NOT_READY = [{"type": "Ready", "status": "False"}]
APP = {"app": "web"}


def _round(pods: list[Obj], pdbs: list[Obj]) -> tuple[str | None, list[str]]:
    out = run_round([base(), node_with(pods), *pdbs])
    return blocker(out, "n1"), disrupted(out)


def _zero(kind: str, name: str = "web") -> Obj:
    """A PDB selecting app=web that allows nothing now, written the ``kind`` way."""
    amount: dict[str, Any] = {
        "100% min available": {"min_available": "100%"},
        "0% max unavailable": {"max_unavailable": "0%"},
        "0 max unavailable": {"max_unavailable": 0},
    }[kind]
    return pdb(name, APP, disruptions_allowed=0, **amount)


@mirrors("CanEvictPods / can evict unhealthy pods when UnhealthyPodEvictionPolicy is set to always allow")
def test_always_allow_does_not_protect_a_not_ready_pod() -> None:
    budget = pdb("web", APP, min_available="100%", unhealthy_pod_eviction_policy="AlwaysAllow", disruptions_allowed=0)
    message, nodes = _round([small("a", labels=APP, conditions=NOT_READY)], [budget])
    assert message is None
    assert nodes == ["n1"]


def test_always_allow_still_protects_a_ready_pod() -> None:
    """AlwaysAllow only lets unhealthy pods go: a Ready pod under the same PDB still blocks."""
    budget = pdb("web", APP, min_available="100%", unhealthy_pod_eviction_policy="AlwaysAllow", disruptions_allowed=0)
    message, nodes = _round([small("a", labels=APP)], [budget])
    assert message is not None
    assert "web" in message
    assert nodes == []


@mirrors("CanEvictPods / can't evict unhealthy pods when UnhealthyPodEvictionPolicy is not set")
def test_default_policy_protects_a_not_ready_pod() -> None:
    for policy in (None, "IfHealthyBudget"):
        budget = pdb("web", APP, min_available="100%", unhealthy_pod_eviction_policy=policy, disruptions_allowed=0)
        message, nodes = _round([small("a", labels=APP, conditions=NOT_READY)], [budget])
        assert message is not None, policy
        assert "default/web" in message, policy
        assert nodes == [], policy


@mirrors("CanEvictPods / can evict pods when no PDBs match")
def test_pdb_selecting_other_pods_does_not_block() -> None:
    others = pdb("db", {"app": "db"}, max_unavailable=0, disruptions_allowed=0)
    elsewhere = pdb("web", APP, namespace="other", max_unavailable=0, disruptions_allowed=0)
    message, nodes = _round([small("a", labels=APP), small("b", labels=APP)], [others, elsewhere])
    assert message is None
    assert nodes == ["n1"]


@pytest.mark.parametrize("kind", ["100% min available", "0% max unavailable", "0 max unavailable"])
@mirrors(
    "CanEvictPods / can't evict pods when disruptions are not allowed for every pod in the list / 100% min available",
    "CanEvictPods / can't evict pods when disruptions are not allowed for every pod in the list / 0% max unavailable",
    "CanEvictPods / can't evict pods when disruptions are not allowed for every pod in the list / 0 max unavailable",
)
def test_pdb_allowing_nothing_over_every_pod_blocks(kind: str) -> None:
    message, nodes = _round([small("a", labels=APP), small("b", labels=APP)], [_zero(kind)])
    assert message is not None
    assert "PodDisruptionBudget" in message
    assert "default/web" in message
    assert nodes == []


@pytest.mark.parametrize("kind", ["100% min available", "0% max unavailable", "0 max unavailable"])
@mirrors(
    "CanEvictPods / can't evict pods when disruptions are not allowed for one pod in the list / 100% min available",
    "CanEvictPods / can't evict pods when disruptions are not allowed for one pod in the list / 0% max unavailable",
    "CanEvictPods / can't evict pods when disruptions are not allowed for one pod in the list / 0 max unavailable",
)
def test_pdb_allowing_nothing_over_one_pod_blocks(kind: str) -> None:
    message, nodes = _round([small("a", labels=APP), small("b", labels={"app": "free"})], [_zero(kind)])
    assert message is not None
    assert "default/a" in message
    assert "default/web" in message
    assert nodes == []


@mirrors(
    "CanEvictPods / can't evict pods when disruptions are not allowed for every pod in the list / multiple PDBs on "
    "the same pod",
    "CanEvictPods / can't evict pods when disruptions are not allowed for one pod in the list / multiple PDBs on "
    "the same pod",
)
def test_two_pdbs_over_one_pod_block_even_when_both_allow() -> None:
    """Two PDBs selecting one pod: the eviction API refuses it, however many disruptions each allows."""
    one = pdb("web-a", APP, max_unavailable=5, disruptions_allowed=5)
    two = pdb("web-b", {"tier": "front"}, max_unavailable=5, disruptions_allowed=5)
    pods = [small("a", labels={**APP, "tier": "front"}), small("b", labels={"app": "free"})]
    message, nodes = _round(pods, [one, two])
    assert message is not None
    assert "default/web-a" in message
    assert "default/web-b" in message
    assert nodes == []
    # each PDB alone allows the eviction
    for single in (one, two):
        message, nodes = _round(pods, [single])
        assert message is None
        assert nodes == ["n1"]


def test_pdb_does_not_protect_pods_that_are_never_evicted() -> None:
    """Mirror, terminal and terminating pods, and pods tolerating the disrupted taint, are not evicted: no PDB
    blocks their node for them."""
    budget = pdb("web", APP, max_unavailable=0, disruptions_allowed=0)
    mirror = small("m", labels=APP, owner="Node")
    terminal = small("t", labels=APP, phase="Succeeded")
    terminating = small("g", labels=APP, deleting="2026-11-21T11:59:00Z")
    tolerant = small("d", labels=APP, owner="DaemonSet", tolerations=[{"operator": "Exists"}])
    for p in (mirror, terminal, terminating, tolerant):
        message, _ = _round([p], [budget])
        assert message is None, p["metadata"]["name"]
