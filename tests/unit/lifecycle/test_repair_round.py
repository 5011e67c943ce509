"""lifecycle.node_repair: the disruption round's node repair against fakes (which workflows start, events, metric rows)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nodeflow.kube import errors as kerr
from nodeflow.kube.events import ObjectRef
from nodeflow.lifecycle.node_repair import RepairDeps, repair_nodes
from tests.unit.disruption.test_repair import NOW, claim, healthy, node


@dataclass
class Recorder:
    events: list[tuple[str, str, str, str]] = field(default_factory=list)
    fail: bool = False

    def record(self, ref: ObjectRef, event_type: str, reason: str, message: str) -> dict[str, Any]:
        if self.fail:
            raise kerr.Unavailable("events unavailable", status=503)
        self.events.append((ref.kind, ref.name, event_type, reason))
        return {}


def _deps(recorder: Recorder, started: list[tuple[str, str]], running: set[str]) -> RepairDeps:
    def start(name: str, reason: str) -> bool:
        if name in running:
            return False
        running.add(name)
        started.append((name, reason))
        return True

    return RepairDeps(kube=None, recorder=recorder, start_terminate=start, now=lambda: NOW)  # type: ignore[arg-type]


def test_due_nodes_start_a_forceful_termination_once() -> None:
    nodes = [node("gpu", ("AcceleratedHardwareReady", "False", 11)), *healthy(4)]
    claims = [claim(n) for n in nodes]
    started: list[tuple[str, str]] = []
    running: set[str] = set()
    out = repair_nodes(_deps(Recorder(), started, running), nodes, claims)
    assert started == [("gpu-claim", "Unhealthy")]
    assert out.repaired == ["gpu-claim"]
    assert out.disrupted == [("Unhealthy", {"karpenter.sh/nodepool": "general", "karpenter.sh/capacity-type": "spot"})]
    assert out.unhealthy == [
        {"condition": "accelerated_hardware_ready", "nodepool": "general", "capacity_type": "spot", "image_id": "ami-1"}
    ]
    again = repair_nodes(_deps(Recorder(), started, running), nodes, claims)  # the next round: already running
    assert (again.repaired, again.disrupted, again.unhealthy) == ([], [], [])
    assert len(started) == 1


def test_blocked_nodes_get_an_event_and_an_event_failure_fails_nothing() -> None:
    nodes = [node("a", ("Ready", "False", 40)), node("b", ("Ready", "Unknown", 40)), *healthy(3)]
    claims = [claim(n) for n in nodes]
    recorder = Recorder()
    out = repair_nodes(_deps(recorder, [], set()), nodes, claims)
    assert out.repaired == []
    assert [b["node"] for b in out.blocked] == ["a", "b"]
    assert recorder.events == [
        ("Node", "a", "Warning", "NodeRepairBlocked"),
        ("Node", "b", "Warning", "NodeRepairBlocked"),
    ]
    quiet = repair_nodes(_deps(Recorder(fail=True), [], set()), nodes, claims)
    assert len(quiet.blocked) == 2
