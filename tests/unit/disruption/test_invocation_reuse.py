"""One disruption invocation does each piece of work once, and decides exactly as before.

- ``build_input`` sums the requests of pods already on nodes without building solver input for them (only pending
  pods, pods of deleting nodes and DaemonSet pods are converted), with the same node totals as converting them.
- ``PodInputs`` builds its converter (the cluster's namespace and volume maps) once, for every batch.
- drift computes a NodePool's requirements and hash once per NodePool object, not per node.
- ``decide`` given ``prepare``'s candidates and drift decides as it does on its own; a ``Prepared`` for another
  snapshot or time is refused.
"""

from __future__ import annotations

from typing import Any

import pytest

from nodeflow import plan as plan_mod
from nodeflow.disruption import drift_detection as drift_mod
from nodeflow.disruption import round as round_mod
from nodeflow.disruption import simulation
from nodeflow.disruption.candidates import build_candidates
from nodeflow.disruption.drift_detection import drift_reason
from nodeflow.disruption.model import Settings
from nodeflow.disruption.round import decide, prepare
from nodeflow.disruption.simulation import PodInputs
from nodeflow.plan import build_input, convert_pods
from nodeflow.scheduling import resources as res

from .builders import CATALOG, NOW, node, node_class, pool
from .test_round_scale import random_cluster

SEEDS = range(40)


@pytest.mark.parametrize("seed", SEEDS)
def test_node_totals_equal_the_converted_pods_requests(seed: int) -> None:
    snap = random_cluster(seed)
    inp = build_input(snap.state, CATALOG)
    bound = [p for p in snap.state.pods if p.spec.node_name]
    converted = convert_pods(snap.state, bound)
    on_nodes = [n for n in inp.nodes if not n.in_flight]
    assert on_nodes
    for n in on_nodes:
        assert n.requested == res.total(converted[k].requests for k in n.pods)
        assert n.pods == tuple(p.key for p in bound if p.spec.node_name == n.name and p.status.phase != "Succeeded")


def test_build_input_converts_no_pod_already_on_a_live_node(monkeypatch: pytest.MonkeyPatch) -> None:
    snap = random_cluster(3)
    converted: list[str] = []
    real = plan_mod.pods._Converter.pod

    def counting(self: Any, pod: Any, pending: bool = False) -> Any:
        converted.append(pod.key)
        return real(self, pod, pending)

    monkeypatch.setattr(plan_mod.pods._Converter, "pod", counting)
    inp = build_input(snap.state, CATALOG)
    deleting = {n.name for n in inp.nodes if not n.schedulable}
    on_live = {p.key for p in snap.state.pods if p.spec.node_name and p.spec.node_name not in deleting}
    assert len(on_live) > 20
    assert not on_live & set(converted)  # was every one of them
    assert {p.key for p in inp.pods} <= set(converted)  # pending pods still are


def test_pod_inputs_build_one_converter_for_every_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    snap = random_cluster(5)
    made: list[int] = []
    real = plan_mod.pod_converter

    def counting(state: Any) -> Any:
        made.append(1)
        return real(state)

    monkeypatch.setattr(simulation, "pod_converter", counting)
    bound = [p for c in build_candidates(snap, CATALOG, NOW) for p in c.movable]
    lazy = PodInputs(snap.state, bound)
    keys = [p.key for p in bound]
    assert len(keys) > 6
    for i in range(0, len(keys), 3):  # a batch per simulation
        lazy.load(keys[i : i + 3])
    assert len(made) == 1  # was one per batch, each scanning every pod's namespace
    eager = convert_pods(snap.state, bound)
    assert {k: lazy[k] for k in keys} == eager


@pytest.mark.parametrize("seed", SEEDS)
def test_decide_with_prepared_decides_as_without(seed: int) -> None:
    snap = random_cluster(seed)
    for settings in (Settings(), Settings(multi_node_candidates=3)):
        alone = decide(snap, CATALOG, NOW, settings=settings)
        prepared = prepare(snap, CATALOG, NOW)
        shared = decide(snap, CATALOG, NOW, settings=settings, prepared=prepared)
        assert shared.to_json() == alone.to_json()
        assert shared == alone
        assert prepared.candidates == build_candidates(snap, CATALOG, NOW)


def test_drift_is_checked_once_per_candidate_however_often_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = round_mod.drift_reason

    def counting(claim: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(claim.name)
        return real(claim, *args, **kwargs)

    monkeypatch.setattr(round_mod, "drift_reason", counting)
    checked_in_decide = 0
    for seed in range(12):
        snap = random_cluster(seed)
        calls.clear()
        prepared = prepare(snap, CATALOG, NOW)
        decide(snap, CATALOG, NOW, prepared=prepared)  # checks the live candidates' drift (past emptiness)
        checked_in_decide += len(calls)
        for c in prepared.candidates:  # what mark_conditions asks next
            prepared.drift(c)
        assert sorted(calls) == sorted(c.claim.name for c in prepared.candidates)  # once each
    assert checked_in_decide > 0


def test_a_prepared_for_another_snapshot_or_time_is_refused() -> None:
    snap = random_cluster(1)
    prepared = prepare(snap, CATALOG, NOW)
    with pytest.raises(ValueError, match="prepared"):
        decide(random_cluster(1), CATALOG, NOW, prepared=prepared)
    with pytest.raises(ValueError, match="prepared"):
        decide(snap, CATALOG, NOW.replace(minute=NOW.minute + 1), prepared=prepared)


def test_drift_reads_each_nodepool_once_and_never_a_stale_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """The NodePool's requirements and hash are computed once per NodePool object, not per node; another NodePool
    object (an edited NodePool in the next snapshot) gets its own."""
    hashes: list[str] = []
    real_hash = drift_mod.nodepool_hash

    def counting(p: Any) -> str:
        hashes.append(p.name)
        return str(real_hash(p))

    monkeypatch.setattr(drift_mod, "nodepool_hash", counting)
    p = pool()
    hashed = {"karpenter.sh/nodepool-hash": real_hash(p), "karpenter.sh/nodepool-hash-version": "v3"}
    pairs = [node(f"n{i}", "m5.2xlarge", claim_annotations=hashed) for i in range(30)]
    for n, c in pairs:
        assert drift_reason(c, p, node_class(), n.metadata.labels, catalog=CATALOG, now=NOW) is None
    assert hashes == [p.name]  # was one per node
    only = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.xlarge"]}]
    edited = pool(extra=only)
    for n, c in pairs:
        why = drift_reason(c, edited, node_class(), n.metadata.labels, catalog=CATALOG, now=NOW)
        assert "m5.2xlarge" in (why or "")
        assert drift_reason(c, p, node_class(), n.metadata.labels, catalog=CATALOG, now=NOW) is None
