"""benchmarks/burst.py: the Deployments it creates, and how it splits the time of the last pod bound."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from benchmarks import burst
from sandbox.esm import BatchRecord


def _stamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_deployments_hold_every_pod_in_the_shapes_in_turn() -> None:
    out = burst.deployments(5003)
    assert len(out) == burst.DEPLOYMENTS
    assert sum(d["spec"]["replicas"] for d in out) == 5003
    requests = [d["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] for d in out]
    assert (requests[0]["cpu"], requests[1]["cpu"], requests[4]["cpu"]) == ("100m", "250m", "100m")


def test_the_control_path_leaves_out_the_batch_window_and_the_simulated_boot() -> None:
    t0 = 1000.0
    pod = {
        "metadata": {"name": "p1", "creationTimestamp": _stamp(t0)},
        "spec": {"nodeName": "n1"},
        "status": {"conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": _stamp(t0 + 20)}]},
    }
    claim = {
        "status": {
            "nodeName": "n1",
            "conditions": [
                {"type": "Registered", "status": "True", "lastTransitionTime": _stamp(t0 + 15)},
                {"type": "Initialized", "status": "True", "lastTransitionTime": _stamp(t0 + 17)},
            ],
        }
    }
    record: dict[str, Any] = {
        "pods": 1,
        "scale": 0.02,
        "began": t0,
        "ended": t0 + 21,
        "seen": [pod],
        "nodes": {"n1": {}},
        "claims": {"c1": claim},
        "statuses": [{"name": "c1", "startDate": datetime.fromtimestamp(t0 + 8, UTC), "status": "SUCCEEDED"}],
        "batches": [BatchRecord([], [], t0 + 5, t0 + 6, True, None)],
        "arrivals": {"p1": (t0 + 4, t0 + 6)},
        "provisioner": [(t0 + 6, t0 + 9, None)],
        "fleet": {"c1": t0 + 9},
        "kubelet": {("registered", "c1"): t0 + 11, ("ready", "c1"): t0 + 13},
        "load": ("1", "1"),
        "cpu": {},
        "tasks": {},
        "invocations": 4,
    }
    out = burst._report(**record)
    path = out["critical_path"]
    assert path["total"] == 20
    assert path["batch window (apart)"] == 1
    assert path["simulated boot + readiness (apart): CreateFleet -> Node Ready"] == 4
    assert path["control path"] == 15
    stages = path["stages"]
    assert stages["provisioner: invoked -> StartExecution"] == 2
    assert stages["StartExecution -> CreateFleet"] == 1
    assert stages["Node registered -> NodeClaim Registered (Register)"] == 4
    assert out["stages"]["agent + webhook + bus (pod created -> queued)"]["median"] == 4
