"""The demo passes consolidateAfter without a clock ahead of time (sandbox.demo.consolidate_now): the NodePools'
consolidateAfter is 0s while its rounds run, and every time the round writes (NodeClaim conditions, Events, the
decision log's rows) is the real one (issue 26, item 18: the kept demo cluster had times 5 minutes in the future).
On the real control plane, as the demo runs."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeflow.catalog.offline import load_offline
from nodeflow.governance.decisions import Decision
from nodeflow.kube import client as kc
from nodeflow.kube.client import KubeClient
from nodeflow.kube.events import EventRecorder
from nodeflow.lifecycle.disruption_round import DisruptionDeps, run
from sandbox.controlplane.facade import RealKubeAPI, ready_condition
from sandbox.demo import consolidate_now

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def kube_server(real_kube: RealKubeAPI) -> RealKubeAPI:
    return real_kube


def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _empty_node(kube: KubeClient, kube_server: RealKubeAPI, name: str, last_pod_event: datetime) -> None:
    """An initialized node of NodePool default, its last pod gone at ``last_pod_event``."""
    labels = {
        "karpenter.sh/nodepool": "default",
        "node.kubernetes.io/instance-type": "m5.large",
        "topology.kubernetes.io/zone": "us-east-1a",
        "karpenter.sh/capacity-type": "on-demand",
        "karpenter.sh/initialized": "true",
        "karpenter.sh/registered": "true",
        "kubernetes.io/hostname": name,
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
    }
    provider = "aws:///us-east-1a/i-0123456789abcdef0"
    capacity = {"cpu": "2", "memory": "8Gi", "pods": "29"}
    kube_server.create(  # with its status (written through the status subresource)
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": labels},
            "spec": {"providerID": provider},
            "status": {
                "capacity": capacity,
                "allocatable": capacity,
                "conditions": [ready_condition()],
            },
        },
    )
    claim = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": "default-abcde", "labels": labels},
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]}],
        },
    }
    kube.create(kc.NODE_CLAIMS, claim)
    since = _stamp(last_pod_event - timedelta(minutes=10))
    status = {
        "providerID": provider,
        "nodeName": name,
        "capacity": capacity,
        "lastPodEventTime": _stamp(last_pod_event),
        "conditions": [
            {"type": t, "status": "True", "reason": t, "message": "", "lastTransitionTime": since}
            for t in ("Launched", "Registered", "Initialized")
        ],
    }
    kube.patch(kc.NODE_CLAIMS, "default-abcde", {"status": status}, subresource="status")


def test_the_demos_rounds_pass_consolidate_after_with_real_times(kube: KubeClient, kube_server: Any) -> None:
    for pool in yaml.safe_load_all((ROOT / "examples/demo/nodepools.yaml").read_text()):
        if pool:
            kube_server.create(pool)
    now = datetime.now(UTC).replace(microsecond=0)
    _empty_node(kube, kube_server, "ip-10-0-0-1", now - timedelta(seconds=10))  # consolidateAfter (1m) has not passed
    records: list[Decision] = []
    started: list[tuple[str, str]] = []
    deps = DisruptionDeps(
        kube=kube,
        catalog=load_offline("us-east-1"),
        unavailable=lambda _now: frozenset(),
        start_terminate=lambda claim, reason: started.append((claim, reason)) is None,
        recorder=EventRecorder(kube),
        now=lambda: datetime.now(UTC),
        sleep=lambda _s: None,
        decisions=lambda batch: records.extend(batch),
    )
    first = run(deps)
    assert first.command is None, first.command  # as the demo's nodes are: consolidateAfter not passed
    with consolidate_now(kube_server) as shortened:
        assert shortened == "NodePool default consolidateAfter 1m -> 0s"
        outcome = run(deps)
    assert outcome.command is not None
    assert outcome.command["reason"] == "Empty"
    assert started == [("default-abcde", "Empty")]
    after = datetime.now(UTC)
    pool = kube.get(kc.NODE_POOLS, "default")
    assert pool["spec"]["disruption"]["consolidateAfter"] == "1m"  # restored

    # everything written carries a time that has come
    written: Sequence[str] = [
        *(c["lastTransitionTime"] for c in kube.get(kc.NODE_CLAIMS, "default-abcde")["status"]["conditions"]),
        *(
            e[k]
            for e in kube.list_items(kc.EVENTS, namespace="default")
            if (e.get("source") or {}).get("component") == "karpenter"  # the round's (not the controllers')
            for k in ("firstTimestamp", "lastTimestamp")
        ),
    ]
    assert written
    assert max(written) <= _stamp(after), written
    assert records
    assert max(r.at for r in records) <= after
