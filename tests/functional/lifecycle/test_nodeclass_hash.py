"""The EC2NodeClass hash annotations written by the deployed code, read back through the API server: the class
carries ``karpenter.k8s.aws/ec2nodeclass-hash`` and ``-hash-version`` (provisioner, gc), each NodeClaim launched
from it the same two (Launch); an edit of the class's spec drifts its NodeClaims; a hash of another version (or
none: a NodeClaim from before nodeflow wrote the hash) does not, it is re-stamped instead (issue 17, part 1)."""

from __future__ import annotations

from typing import Any

from nodeflow.api.karpenter import EC2NodeClass
from nodeflow.api.template_hash import ec2nodeclass_hash
from nodeflow.handlers import runtime
from nodeflow.kube import client as kc
from nodeflow.kube.client import KubeClient
from sandbox.nodeflow import LocalNodeflow
from tests.functional.lifecycle.conftest import pending
from tests.realk8s.workloads import running

HASH = "karpenter.k8s.aws/ec2nodeclass-hash"
VERSION = "karpenter.k8s.aws/ec2nodeclass-hash-version"
PAUSE = [  # the disruption round marks NodeClaims Drifted, then stops: no workflow outlives the test
    # (namespace nodeflow: the install's, agent/manifests/00-namespace.yaml)
    {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "nodeflow-disruption", "namespace": "nodeflow"},
        "data": {"paused": "true", "reason": "test"},
    },
]


NOT_WITH_WEB = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
        ]
    }
}


def _launch(local: LocalNodeflow) -> str:
    pending(local, "web", 2, cpu="1", memory="2Gi")
    local.send_pending(["default/web"])
    created = local.provision()["result"]["nodeClaimsCreated"]
    assert len(created) == 1, created
    assert all(d["status"] == "SUCCEEDED" for d in local.wait_for_executions())
    running(local.kube_server, "web", 2)  # bound there before other pods come
    return str(created[0])


def _annotations(obj: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in (obj["metadata"].get("annotations") or {}).items() if k in (HASH, VERSION)}


def _drifted(kube: KubeClient, claim: str) -> dict[str, Any]:
    status = kube.get(kc.NODE_CLAIMS, claim).get("status") or {}
    return next((c for c in status.get("conditions") or [] if c["type"] == "Drifted"), {})


def _disruption_round(local: LocalNodeflow) -> None:
    result = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    assert result["paused"] == "test"


def test_hash_annotations_after_a_launch_and_drift_on_a_spec_edit(local: LocalNodeflow) -> None:
    kube = KubeClient(local.kube_server.api_client())
    claim = _launch(local)

    node_class = kube.get(kc.EC2_NODE_CLASSES, "default")
    expected = ec2nodeclass_hash(EC2NodeClass.model_validate(node_class), runtime.runtime().cluster_info().ca_bundle)
    assert _annotations(node_class) == {HASH: expected, VERSION: "v5"}
    assert _annotations(kube.get(kc.NODE_CLAIMS, claim)) == {HASH: expected, VERSION: "v5"}

    local.apply(PAUSE)
    _disruption_round(local)
    assert _drifted(kube, claim)["status"] == "False"

    # a NodeClaim hash of another hash version is not compared (the AWS provider's rule)
    kube.patch(kc.NODE_CLAIMS, claim, {"metadata": {"annotations": {HASH: "999", VERSION: "v4"}}})
    _disruption_round(local)
    assert _drifted(kube, claim)["status"] == "False"
    kube.patch(kc.NODE_CLAIMS, claim, {"metadata": {"annotations": {HASH: expected, VERSION: "v5"}}})

    # a spec edit: gc writes the new hash (only the annotations change), the next round finds the drift
    kube.patch(kc.EC2_NODE_CLASSES, "default", {"spec": {"tags": {"team": "payments"}}})
    local.collect_garbage()
    edited = kube.get(kc.EC2_NODE_CLASSES, "default")
    assert _annotations(edited)[HASH] != expected
    assert _annotations(edited)[VERSION] == "v5"
    assert _annotations(kube.get(kc.NODE_CLAIMS, claim)) == {HASH: expected, VERSION: "v5"}  # as launched
    _disruption_round(local)
    drifted = _drifted(kube, claim)
    assert drifted["status"] == "True"
    assert "EC2NodeClass default changed" in drifted["message"]


def test_a_hash_of_another_version_or_none_is_restamped_not_drifted(local: LocalNodeflow) -> None:
    kube = KubeClient(local.kube_server.api_client())
    legacy = _launch(local)
    pending(local, "api", 2, cpu="1", memory="2Gi", affinity=NOT_WITH_WEB)  # a NodeClaim of their own
    local.send_pending(["default/api"])
    (older,) = local.provision()["result"]["nodeClaimsCreated"]
    assert all(d["status"] == "SUCCEEDED" for d in local.wait_for_executions())

    # as an earlier hash algorithm (v4) left them: the class and one NodeClaim at v4 with that algorithm's number,
    # the other NodeClaim from before nodeflow wrote the hash at all
    kube.patch(kc.EC2_NODE_CLASSES, "default", {"metadata": {"annotations": {HASH: "111", VERSION: "v4"}}})
    kube.patch(kc.NODE_CLAIMS, older, {"metadata": {"annotations": {HASH: "111", VERSION: "v4"}}})
    kube.patch(kc.NODE_CLAIMS, legacy, {"metadata": {"annotations": {HASH: None, VERSION: None}}})
    local.apply(PAUSE)
    _disruption_round(local)
    assert _drifted(kube, legacy)["status"] == "False"  # no hash on the NodeClaim: nothing to compare
    assert _drifted(kube, older)["status"] == "False"  # the same v4 number

    # the new algorithm (v5) gives another number: gc writes it on the class and re-stamps both NodeClaims with it
    # (a spec edit made under the old version is not judged across algorithms): still not drifted
    kube.patch(kc.EC2_NODE_CLASSES, "default", {"spec": {"tags": {"team": "payments"}}})
    local.collect_garbage()
    current = _annotations(kube.get(kc.EC2_NODE_CLASSES, "default"))
    assert current[VERSION] == "v5"
    assert _annotations(kube.get(kc.NODE_CLAIMS, legacy)) == current
    assert _annotations(kube.get(kc.NODE_CLAIMS, older)) == current
    _disruption_round(local)
    assert _drifted(kube, legacy)["status"] == "False"
    assert _drifted(kube, older)["status"] == "False"

    # from now on an edit drifts them
    kube.patch(kc.EC2_NODE_CLASSES, "default", {"spec": {"userData": "echo hello"}})
    local.send_pending(["default/web"])
    local.provision()  # the provisioner writes the hash too
    assert _annotations(kube.get(kc.EC2_NODE_CLASSES, "default"))[HASH] != current[HASH]
    _disruption_round(local)
    assert _drifted(kube, legacy)["status"] == "True"
    assert _drifted(kube, older)["status"] == "True"
