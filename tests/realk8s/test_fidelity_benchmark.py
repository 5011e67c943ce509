"""benchmarks/fidelity.py on one small workload: examples/fidelity/spread.yaml (zone- and hostname-spread Deployments
with examples/demo's NodePools and DaemonSets), through the real control plane's kube-scheduler. Every pod the plan
placed is bound to a node of the first round and a second round adds no NodeClaim: without Register's
status.nominatedNodeName, kube-scheduler spreads the hostname-spread pods onto nodes planned for the zone-spread
ones and a pod is left over (92 % bound, one extra NodeClaim, when this benchmark was written)."""

from __future__ import annotations

from sandbox.controlplane.facade import RealKubeAPI


def test_the_spread_workload_binds_every_planned_pod_in_round_one(real_kube: RealKubeAPI, aws_env: None) -> None:
    from benchmarks.fidelity import run_workload, table, workload

    row = run_workload(real_kube, workload("spread"))
    assert row["pods"] == row["planned"] == 13, row
    assert row["misses"] == [], table([row])
    assert (row["bound"], row["boundShare"], row["extraNodeClaims"]) == (13, 100.0, 0), table([row])
    assert row["nodeClaims"] >= 3  # web spreads over the three zones
    assert "| spread " in table([row])
