"""benchmarks/fidelity.py on one small workload through the real control plane's kube-scheduler:
examples/fidelity/volumes.yaml, a StatefulSet whose two claims are bound to volumes in two zones (with examples/demo's
NodePools and DaemonSets). Each pod can only run in its volume's zone, so kube-scheduler has one choice per pod and
the figures are exact: every planned pod bound to a node of the first round, no NodeClaim in a second round."""

from __future__ import annotations

from sandbox.controlplane.facade import RealKubeAPI


def test_the_volumes_workload_binds_every_planned_pod_in_round_one(real_kube: RealKubeAPI, aws_env: None) -> None:
    from benchmarks.fidelity import run_workload, table, workload

    row = run_workload(real_kube, workload("volumes"))
    assert row["pods"] == row["planned"] == 2, row
    assert row["misses"] == [], table([row])
    assert (row["bound"], row["boundShare"], row["extraNodeClaims"], row["launchesFailed"]) == (2, 100.0, 0, 0)
    assert row["nodeClaims"] == 2  # one per volume zone
    assert row["onPlannedNode"] == 100.0
    assert "| volumes " in table([row])
    assert real_kube.objects("karpenter.sh/v1", "NodeClaim") == []  # what the run created is gone
