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

NOT_EXPRESSIBLE: dict[str, str] = {}

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


# --- currently reschedulable: which pods a simulation moves ----------------------------------------------------------
#
# Seen through drift (eventual disruption) of a node whose NodeClaim has a terminationGracePeriod: the node is
# replaced even though some of its pods cannot be evicted now, and those pods are left out of the simulation
# (nothing is launched for a pod that cannot leave); the others move.


def _moved(pods: list[Obj], pdbs: list[Obj]) -> set[str]:
    objs = node_with(pods, claim_image_id="ami-0old")  # drifted: its AMI is no longer resolved
    objs[1]["spec"]["terminationGracePeriod"] = "5m"
    out = run_round([base(), objs, *pdbs])
    assert disrupted(out) == ["n1"]
    assert out["command"]["reason"] == "Drifted"
    return {m["pod"] for m in out["command"]["moves"]}


@mirrors(
    "IsCurrentlyReschedulable / considers unhealthy pod as currently reschedulable when UnhealthyPodEvictionPolicy "
    "is set to always allow"
)
def test_not_ready_pod_under_always_allow_is_simulated() -> None:
    budget = pdb("web", APP, min_available="100%", unhealthy_pod_eviction_policy="AlwaysAllow", disruptions_allowed=0)
    assert _moved([small("a", labels=APP, conditions=NOT_READY), small("b")], [budget]) == {"default/a", "default/b"}


@mirrors(
    "IsCurrentlyReschedulable / does not consider unhealthy pod as currently reschedulable when "
    "UnhealthyPodEvictionPolicy is not set"
)
def test_not_ready_pod_under_default_policy_is_not_simulated() -> None:
    budget = pdb("web", APP, min_available="100%", disruptions_allowed=0)
    assert _moved([small("a", labels=APP, conditions=NOT_READY), small("b")], [budget]) == {"default/b"}


@mirrors("IsCurrentlyReschedulable / considers pod as currently reschedulable when no PDBs match")
def test_pod_no_pdb_selects_is_simulated() -> None:
    """(The other pod's do-not-disrupt lets drift through only because of the grace period.)"""
    others = pdb("db", {"app": "db"}, max_unavailable=0, disruptions_allowed=0)
    held = small("h", annotations={"karpenter.sh/do-not-disrupt": "true"})
    assert _moved([small("a", labels=APP), held], [others]) == {"default/a"}


@pytest.mark.parametrize("kind", ["100% min available", "0% max unavailable", "0 max unavailable"])
@mirrors(
    "IsCurrentlyReschedulable / pods which are not currently reschedulable due to PDBs / 100% min available",
    "IsCurrentlyReschedulable / pods which are not currently reschedulable due to PDBs / 0% max unavailable",
    "IsCurrentlyReschedulable / pods which are not currently reschedulable due to PDBs / 0 max unavailable",
)
def test_pod_under_fully_blocking_pdb_is_not_simulated(kind: str) -> None:
    assert _moved([small("a", labels=APP), small("b")], [_zero(kind)]) == {"default/b"}


@mirrors(
    "IsCurrentlyReschedulable / pods which are not currently reschedulable due to PDBs / multiple PDBs on the same pod"
)
def test_pod_under_two_pdbs_is_not_simulated() -> None:
    one = pdb("web-a", APP, max_unavailable=5, disruptions_allowed=5)
    two = pdb("web-b", {"tier": "front"}, max_unavailable=5, disruptions_allowed=5)
    pods = [small("a", labels={**APP, "tier": "front"}), small("b")]
    assert _moved(pods, [one, two]) == {"default/b"}


@mirrors("IsCurrentlyReschedulable / does not consider pod with do-not-disrupt annotation as currently reschedulable")
def test_do_not_disrupt_pod_is_not_simulated() -> None:
    held = small("a", annotations={"karpenter.sh/do-not-disrupt": "true"})
    assert _moved([held, small("b")], []) == {"default/b"}
