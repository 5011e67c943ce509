"""take_snapshot's slim pod parse, over HTTP from the real API server: the same pods and the same invalid-object
reports as validating each listed pod with ``Pod.model_validate`` (pods nodeflow's model refuses, written into etcd
as an older server could have stored them)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from pydantic import ValidationError

from nodeflow.api.core import Pod
from nodeflow.api.errors import format_validation_error
from nodeflow.kube import client as kc
from nodeflow.kube.client import KubeClient
from nodeflow.kube.snapshot import take_snapshot
from sandbox.controlplane.facade import RealKubeAPI
from tests.realk8s.workloads import NO_SCHEDULER
from tests.unit.kube.test_pod_parse import SPECS, _assert_same_model, _invalid_pods, _pod


def _store(server: RealKubeAPI, body: dict[str, Any]) -> None:
    """Into etcd, without its made-up ReplicaSet (the garbage collector deletes a pod whose owner does not exist)
    and out of kube-scheduler's hands (it would rewrite the pods' status between the two LISTs compared). Those
    the API server cannot even decode (a quantity "lots") cannot be stored, nor served: skipped."""
    body["metadata"].pop("ownerReferences", None)
    body["spec"]["schedulerName"] = NO_SCHEDULER
    with contextlib.suppress(ValueError):
        server.store_bypassing_admission(body)


def test_snapshot_pods_equal_the_full_validation_of_the_list(kube: KubeClient, server: RealKubeAPI) -> None:
    server.create(
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000}
    )
    for i in range(60):
        body = _pod(i, SPECS[i % len(SPECS)])
        body["metadata"]["namespace"] = "default"
        if i % 4 == 0:
            body["spec"]["nodeName"] = f"node-{i % 3}"
        _store(server, body)
    for raw in _invalid_pods()[:20]:
        if isinstance(raw.get("metadata"), dict) and isinstance(raw["metadata"].get("name"), str):
            raw["metadata"]["namespace"] = "default"
            raw["metadata"]["name"] = "bad-" + raw["metadata"]["name"]
            if raw.get("kind") == "Pod" and raw.get("apiVersion") == "v1" and isinstance(raw.get("spec"), dict):
                _store(server, raw)

    listed = json.loads(kube.list_raw(kc.PODS))["items"]
    want_pods, want_invalid = [], []
    for raw in listed:
        try:
            want_pods.append(Pod.model_validate(raw))
        except ValidationError as exc:
            want_invalid.append((raw["metadata"]["name"], tuple(format_validation_error(exc))))

    snap = take_snapshot(kube)
    assert len(snap.pods) == len(want_pods) >= 60
    for got, want in zip(snap.pods, want_pods, strict=True):
        _assert_same_model(got, want)
    assert [(o.name, o.errors) for o in snap.invalid] == want_invalid
    assert len(want_invalid) >= 8  # of 20: the API server cannot decode the others (a quantity "lots", a bad time)
    assert all(o.kind == "Pod" and o.namespace == "default" for o in snap.invalid)
