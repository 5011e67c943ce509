"""The test API server enforces the CRDs' CEL rules (x-kubernetes-validations) by default, like a real API server:
an invalid NodePool is refused on create with 422 naming the field and the rule's message (also through the
real kubectl), transition rules (oldSelf) refuse forbidden updates while admitting allowed ones, and updates that
leave an invalid stored value unchanged are admitted (validation ratcheting)."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from sandbox.controlplane.binaries import kubectl
from tests.kubeapi import APIError, KubeAPIServer
from tests.kubeapi.crds import karpenter_crds

# the machine's kubectl, else the control plane's (none: an error, not a skip)
KUBECTL = shutil.which("kubectl") or str(kubectl())

NODEPOOL: dict[str, Any] = {
    "apiVersion": "karpenter.sh/v1",
    "kind": "NodePool",
    "metadata": {"name": "default"},
    "spec": {
        "template": {
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}],
            }
        },
        "weight": 10,
    },
}


@pytest.fixture(scope="module")
def server() -> Iterator[KubeAPIServer]:
    with KubeAPIServer() as kube:  # CEL enforcement is not switched on here: it is the default
        for crd in karpenter_crds():
            kube.register_crd(crd)
        yield kube


@pytest.fixture
def api(server: KubeAPIServer) -> Iterator[client.CustomObjectsApi]:
    server.reset()
    yield client.CustomObjectsApi(server.api_client())
    server.reset()


def _create(api: client.CustomObjectsApi, body: dict[str, Any]) -> dict[str, Any]:
    return api.create_cluster_custom_object("karpenter.sh", "v1", "nodepools", body)  # type: ignore[no-any-return]


def _refusal(exc: ApiException) -> tuple[str, list[tuple[str, str]]]:
    status = json.loads(exc.body)
    causes = [(c["field"], c["message"]) for c in status["details"]["causes"]]
    return status["message"], causes


def test_valid_nodepool_is_admitted(api: client.CustomObjectsApi) -> None:
    created = _create(api, copy.deepcopy(NODEPOOL))
    assert created["spec"]["weight"] == 10


def test_static_nodepool_with_weight_is_refused_naming_spec(api: client.CustomObjectsApi) -> None:
    bad = copy.deepcopy(NODEPOOL)
    bad["spec"]["replicas"] = 2
    with pytest.raises(ApiException) as err:
        _create(api, bad)
    assert err.value.status == 422
    message, causes = _refusal(err.value)
    assert causes == [("spec", "Invalid value: \"object\": 'weight' is not supported on static NodePools")]
    assert message.startswith('NodePool.karpenter.sh "default" is invalid: spec: Invalid value')
    with pytest.raises(ApiException) as missing:
        api.get_cluster_custom_object("karpenter.sh", "v1", "nodepools", "default")
    assert missing.value.status == 404


def test_restricted_requirement_key_is_refused_at_the_key(api: client.CustomObjectsApi) -> None:
    bad = copy.deepcopy(NODEPOOL)
    bad["spec"]["template"]["spec"]["requirements"].append({"key": "kubernetes.io/hostname", "operator": "Exists"})
    with pytest.raises(ApiException) as err:
        _create(api, bad)
    _, causes = _refusal(err.value)
    assert causes == [
        (
            "spec.template.spec.requirements[1].key",
            'Invalid value: "string": label "kubernetes.io/hostname" is restricted',
        )
    ]


def test_transition_rules_apply_on_update_only(api: client.CustomObjectsApi) -> None:
    created = _create(api, copy.deepcopy(NODEPOOL))
    changed_kind = copy.deepcopy(created)
    changed_kind["spec"]["template"]["spec"]["nodeClassRef"]["kind"] = "OtherNodeClass"
    with pytest.raises(ApiException) as err:
        api.replace_cluster_custom_object("karpenter.sh", "v1", "nodepools", "default", changed_kind)
    _, causes = _refusal(err.value)
    assert causes == [("spec.template.spec.nodeClassRef", 'Invalid value: "object": nodeClassRef.kind is immutable')]
    renamed = copy.deepcopy(created)  # the name may change, group and kind may not
    renamed["spec"]["template"]["spec"]["nodeClassRef"]["name"] = "other"
    updated = api.replace_cluster_custom_object("karpenter.sh", "v1", "nodepools", "default", renamed)
    assert updated["spec"]["template"]["spec"]["nodeClassRef"]["name"] == "other"


def test_nodeclaim_spec_is_immutable_but_status_writes(api: client.CustomObjectsApi) -> None:
    claim = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": "default-x1"},
        "spec": copy.deepcopy(NODEPOOL["spec"]["template"]["spec"]),
    }
    created = api.create_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", claim)
    created["status"] = {"nodeName": "ip-10-0-0-1"}
    api.replace_cluster_custom_object_status("karpenter.sh", "v1", "nodeclaims", "default-x1", created)
    current = api.get_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", "default-x1")
    assert current["status"]["nodeName"] == "ip-10-0-0-1"
    current["spec"]["expireAfter"] = "1h"
    with pytest.raises(ApiException) as err:
        api.replace_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", "default-x1", current)
    assert _refusal(err.value)[1] == [("spec", 'Invalid value: "object": spec is immutable')]


def test_kubectl_create_of_an_invalid_nodepool_is_refused(
    server: KubeAPIServer, api: client.CustomObjectsApi, tmp_path: Path
) -> None:
    # --validate=false: the refusal asserted is the server's (CEL runs server-side), not kubectl's schema check.
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    bad = copy.deepcopy(NODEPOOL)
    bad["spec"]["disruption"] = {"budgets": [{"nodes": "0", "schedule": "@daily"}]}
    proc = subprocess.run(
        [KUBECTL, "--kubeconfig", kubeconfig, "create", "--validate=false", "-f", "-"],
        input=json.dumps(bad),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "spec.disruption.budgets: Invalid value: \"array\": 'schedule' must be set with 'duration'" in proc.stderr
    good = copy.deepcopy(NODEPOOL)
    good["spec"]["disruption"] = {"budgets": [{"nodes": "0", "schedule": "@daily", "duration": "1h"}]}
    proc = subprocess.run(
        [KUBECTL, "--kubeconfig", kubeconfig, "create", "--validate=false", "-f", "-"],
        input=json.dumps(good),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "nodepool.karpenter.sh/default created" in proc.stdout


def test_a_new_server_enforces_the_rules_without_being_told() -> None:
    kube = KubeAPIServer()  # neither started nor reset: the constructor's default
    for crd in karpenter_crds():
        kube.register_crd(crd)
    bad = copy.deepcopy(NODEPOOL)
    bad["spec"]["replicas"] = 2
    with pytest.raises(APIError) as err:
        kube.create(bad)
    assert err.value.code == 422
    assert "'weight' is not supported on static NodePools" in err.value.message
    assert kube.objects("karpenter.sh/v1", "NodePool") == []


def test_cel_validation_can_be_switched_off_until_the_next_reset(
    server: KubeAPIServer, api: client.CustomObjectsApi
) -> None:
    bad = copy.deepcopy(NODEPOOL)
    bad["spec"]["replicas"] = 2
    with pytest.raises(ApiException) as err:  # on by default
        _create(api, copy.deepcopy(bad))
    assert err.value.status == 422
    server.cluster.cel_validation = False
    try:
        assert _create(api, copy.deepcopy(bad))["spec"]["replicas"] == 2
    finally:
        server.reset()  # switches enforcement on again
    assert server.cluster.cel_validation is True
    with pytest.raises(ApiException) as again:
        _create(api, bad)
    assert again.value.status == 422


def test_updates_that_keep_an_invalid_stored_value_are_ratcheted(
    server: KubeAPIServer, api: client.CustomObjectsApi
) -> None:
    bad = copy.deepcopy(NODEPOOL)
    bad["spec"]["template"]["spec"]["requirements"].append({"key": "kubernetes.io/hostname", "operator": "Exists"})
    stored = server.store_bypassing_admission(bad)  # as if written before the rule existed
    assert stored["spec"]["template"]["spec"]["requirements"][1]["key"] == "kubernetes.io/hostname"
    stored["status"] = {
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "Invalid",
                "message": "x",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ]
    }
    written = api.replace_cluster_custom_object_status("karpenter.sh", "v1", "nodepools", "default", stored)
    assert written["status"]["conditions"][0]["reason"] == "Invalid"  # the unchanged spec is not checked
    labelled = api.patch_cluster_custom_object(
        "karpenter.sh", "v1", "nodepools", "default", {"metadata": {"labels": {"team": "a"}}}
    )
    assert labelled["metadata"]["labels"] == {"team": "a"}
    # a spec change re-checks the changed requirements: the restricted key is refused again
    changed = copy.deepcopy(labelled)
    changed["spec"]["template"]["spec"]["requirements"][0]["values"] = ["on-demand"]
    with pytest.raises(ApiException) as err:
        api.replace_cluster_custom_object("karpenter.sh", "v1", "nodepools", "default", changed)
    assert _refusal(err.value)[1] == [
        (
            "spec.template.spec.requirements[1].key",
            'Invalid value: "string": label "kubernetes.io/hostname" is restricted',
        )
    ]
