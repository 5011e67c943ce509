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


def test_round_one_starts_once_the_pre_bound_claims_are_bound(real_kube: RealKubeAPI) -> None:
    """kube-scheduler marks a pod Unschedulable before the PV controller binds the claim that names its volume; a
    plan made then leaves the pod out ("not bound yet", as Karpenter does): the volumes workload flaked so, 1 of 2
    pods unplaceable. Here the volume appears only after the pod is Unschedulable: the round must wait for it."""
    import threading
    import time

    from benchmarks.fidelity import Run, Workload, _scheduled
    from sandbox.controlplane.facade import wait_for

    ns = "fidelity-late-volume"
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "volumeName": "fidelity-late",
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "db"},
        "spec": {
            "containers": [{"name": "db", "image": "postgres:17", "resources": {"requests": {"cpu": "100m"}}}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        },
    }
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "fidelity-late"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "claimRef": {"namespace": ns, "name": "data"},
            "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-0fidelitylate0000"},
        },
    }
    run = Run(real_kube, Workload("late-volume", (), (claim, pod), ns))

    def volume_after_the_verdict() -> None:
        wait_for("db Unschedulable", lambda: any(_scheduled(p).get("reason") == "Unschedulable" for p in run.pods()))
        time.sleep(1.0)  # create() without the wait has returned by now
        real_kube.create(volume)

    late = threading.Thread(target=volume_after_the_verdict, daemon=True)
    late.start()
    try:
        assert run.create() == [f"{ns}/db"]
        bound = real_kube.objects("v1", "PersistentVolumeClaim", ns)
        assert [c["metadata"]["annotations"].get("pv.kubernetes.io/bind-completed") for c in bound] == ["yes"]
    finally:
        late.join(60)
        real_kube.reset()
