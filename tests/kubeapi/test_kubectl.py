"""The real kubectl against the test API server: ``get`` prints Karpenter's printer columns and kubectl's default
columns for built-ins (server-side Table), ``explain`` and ``create`` (client-side validation) use the OpenAPI v3
documents built from the CRD schemas."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from sandbox.controlplane.binaries import kubectl
from tests.kubeapi import APIError, KubeAPIServer
from tests.kubeapi.crds import karpenter_crds
from tests.kubeapi.table import human_age, jsonpath

# the machine's kubectl, else the control plane's (none: an error, not a skip)
KUBECTL = shutil.which("kubectl") or str(kubectl())

START = datetime(2026, 1, 1, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture(scope="module")
def clock() -> Clock:
    return Clock()


@pytest.fixture(scope="module")
def server(clock: Clock) -> Iterator[KubeAPIServer]:
    with KubeAPIServer(now=clock) as kube:
        for crd in karpenter_crds():
            kube.register_crd(crd)
        yield kube


@pytest.fixture
def kube(server: KubeAPIServer, clock: Clock) -> Iterator[KubeAPIServer]:
    clock.now = START
    server.reset()
    yield server
    server.reset()


@pytest.fixture
def kubeconfig(kube: KubeAPIServer, tmp_path: Path) -> str:
    return kube.write_kubeconfig(tmp_path / "kubeconfig")


def kubectl(kubeconfig: str, *args: str, stdin: str | None = None, check: bool = True) -> str:
    proc = subprocess.run(
        [KUBECTL, "--kubeconfig", kubeconfig, *args], input=stdin, capture_output=True, text=True, timeout=60
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
    return proc.stdout + proc.stderr if not check else proc.stdout


def rows(output: str) -> list[list[str]]:
    """kubectl's table output split on runs of 2+ spaces (cells never contain two spaces here)."""
    import re

    return [re.split(r"\s{2,}", line.strip()) for line in output.splitlines() if line.strip()]


def seed(kube: KubeAPIServer) -> None:
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "ip-10-0-1-5", "labels": {"node-role.kubernetes.io/worker": ""}},
            "spec": {"unschedulable": True},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "nodeInfo": {"kubeletVersion": "v1.33.1-eks"},
            },
        }
    )
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web-1", "namespace": "default"},
            "spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]},
            "status": {
                "phase": "Running",
                "containerStatuses": [
                    {"name": "a", "ready": True, "restartCount": 2, "state": {"running": {}}},
                    {
                        "name": "b",
                        "ready": False,
                        "restartCount": 1,
                        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    },
                ],
            },
        }
    )
    kube.create(
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {
                "weight": 10,
                "template": {
                    "spec": {
                        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                        "requirements": [],
                    }
                },
            },
            "status": {
                "resources": {"nodes": "1", "cpu": "2"},
                "conditions": [_condition("Ready", "True")],
            },
        }
    )
    kube.create(
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {
                "name": "default-abcde",
                "labels": {
                    "node.kubernetes.io/instance-type": "m5.large",
                    "karpenter.sh/capacity-type": "spot",
                    "topology.kubernetes.io/zone": "us-east-1a",
                    "karpenter.sh/nodepool": "default",
                },
            },
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [],
            },
            "status": {
                "nodeName": "ip-10-0-1-5",
                "providerID": "aws:///us-east-1a/i-0123",
                "conditions": [_condition("Ready", "True"), _condition("Drifted", "False")],
            },
        }
    )
    kube.create(
        {
            "apiVersion": "karpenter.k8s.aws/v1",
            "kind": "EC2NodeClass",
            "metadata": {"name": "default"},
            "spec": {
                "role": "KarpenterNodeRole",
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
                "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
            },
            "status": {"conditions": [_condition("Ready", "False")]},
        }
    )


def _condition(kind: str, status: str) -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": kind,
        "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }


def test_human_age_matches_kubectl_buckets() -> None:
    assert [human_age(s) for s in (0, 45, 119, 330, 600, 5700, 12000, 30 * 3600, 3 * 86400 + 5 * 3600)] == [
        "0s",
        "45s",
        "119s",
        "5m30s",
        "10m",
        "95m",
        "3h20m",
        "30h",
        "3d5h",
    ]
    assert human_age(200 * 86400) == "200d"
    assert human_age(3 * 365 * 86400 + 30 * 86400) == "3y30d"


def test_jsonpath_subset_of_printer_columns() -> None:
    obj = {
        "metadata": {"labels": {"karpenter.sh/nodepool": "np"}},
        "status": {"conditions": [{"type": "A", "status": "x"}, {"type": "Ready", "status": "True"}]},
    }
    assert jsonpath(obj, r".metadata.labels.karpenter\.sh/nodepool") == ["np"]
    assert jsonpath(obj, '.status.conditions[?(@.type=="Ready")].status') == ["True"]
    assert jsonpath(obj, ".status.conditions[0].type") == ["A"]
    assert jsonpath(obj, ".status.conditions[*].type") == ["A", "Ready"]
    assert jsonpath(obj, ".spec.missing") == []
    with pytest.raises(ValueError, match="unsupported JSONPath"):
        jsonpath(obj, ".status..conditions")


def test_kubectl_get_prints_karpenter_and_builtin_columns(kube: KubeAPIServer, kubeconfig: str, clock: Clock) -> None:
    seed(kube)
    clock.now = START + timedelta(minutes=5, seconds=30)
    out = kubectl(kubeconfig, "get", "nodepools,nodeclaims,ec2nodeclasses,nodes,pods")
    blocks = [rows(block) for block in out.strip().split("\n\n")]
    assert blocks == [
        [
            ["NAME", "NODECLASS", "NODES", "READY", "AGE"],
            ["nodepool.karpenter.sh/default", "default", "1", "True", "5m30s"],
        ],
        [
            ["NAME", "TYPE", "CAPACITY", "ZONE", "NODE", "READY", "AGE"],
            ["nodeclaim.karpenter.sh/default-abcde", "m5.large", "spot", "us-east-1a", "ip-10-0-1-5", "True", "5m30s"],
        ],
        [
            ["NAME", "READY", "AGE"],
            ["ec2nodeclass.karpenter.k8s.aws/default", "False", "5m30s"],
        ],
        [
            ["NAME", "STATUS", "ROLES", "AGE", "VERSION"],
            ["node/ip-10-0-1-5", "Ready,SchedulingDisabled", "worker", "5m30s", "v1.33.1-eks"],
        ],
        [
            ["NAME", "READY", "STATUS", "RESTARTS", "AGE"],
            ["pod/web-1", "1/2", "CrashLoopBackOff", "3", "5m30s"],
        ],
    ]


def test_kubectl_get_wide_shows_priority_columns(kube: KubeAPIServer, kubeconfig: str) -> None:
    seed(kube)
    out = rows(kubectl(kubeconfig, "get", "nodeclaims", "-o", "wide"))
    assert out[0] == [
        "NAME",
        "TYPE",
        "CAPACITY",
        "ZONE",
        "NODE",
        "READY",
        "AGE",
        "IMAGEID",
        "ID",
        "NODEPOOL",
        "NODECLASS",
        "DRIFTED",
    ]
    assert out[1][-4:] == ["aws:///us-east-1a/i-0123", "default", "default", "False"]


def test_protobuf_body_refused_with_415_and_protobuf_only_accept_with_406(kube: KubeAPIServer) -> None:
    import json
    import urllib.error
    import urllib.request

    def post(ctype: str, accept: str, body: bytes) -> tuple[int, dict[str, Any]]:
        req = urllib.request.Request(
            kube.url + "/api/v1/namespaces/default/configmaps",
            data=body,
            method="POST",
            headers={"Content-Type": ctype, "Accept": accept},
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    code, status = post("application/vnd.kubernetes.protobuf", "application/json", b"k8s\x00\n\x0f")
    assert (code, status["reason"]) == (415, "UnsupportedMediaType")
    assert "application/vnd.kubernetes.protobuf" in status["message"]
    good = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}).encode()
    code, status = post("application/json", "application/vnd.kubernetes.protobuf", good)
    assert (code, status["reason"]) == (406, "NotAcceptable")
    code, created = post("application/json", "application/vnd.kubernetes.protobuf,application/json", good)
    assert (code, created["metadata"]["name"]) == (201, "c")


def test_kubectl_create_from_file_sends_json_and_imperative_protobuf_is_refused(
    kube: KubeAPIServer, kubeconfig: str
) -> None:
    manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: from-file}\ndata: {a: b}\n"
    assert "configmap/from-file created" in kubectl(kubeconfig, "create", "--validate=false", "-f", "-", stdin=manifest)
    assert kube.get("v1", "ConfigMap", "from-file", "default")["data"] == {"a": "b"}
    # kubectl's typed clients send built-ins as protobuf and (client-go, kubernetes#86253) do not retry as JSON
    out = kubectl(kubeconfig, "create", "configmap", "imperative", "--from-literal=a=b", check=False)
    assert "unknown format (application/vnd.kubernetes.protobuf)" in out


NODEPOOL = """apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: %s}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements: []
%s"""


def test_kubectl_explain_reads_the_crd_schema(kube: KubeAPIServer, kubeconfig: str) -> None:
    out = kubectl(kubeconfig, "explain", "nodepool.spec.disruption")
    assert "KIND:       NodePool" in out
    assert "GROUP:      karpenter.sh" in out
    assert "consolidationPolicy\t<string>" in out
    assert "budgets\t<[]Object>" in out
    out = kubectl(kubeconfig, "explain", "ec2nodeclass.spec.role")
    assert "FIELD: role <string>" in out


def test_kubectl_create_validates_fields_strictly(kube: KubeAPIServer, kubeconfig: str) -> None:
    assert "nodepool.karpenter.sh/good created" in kubectl(
        kubeconfig, "create", "-f", "-", stdin=NODEPOOL % ("good", "")
    )
    out = kubectl(kubeconfig, "create", "-f", "-", stdin=NODEPOOL % ("bad", "      bogusField: 1\n"), check=False)
    assert 'strict decoding error: unknown field "spec.template.spec.bogusField"' in out
    with pytest.raises(APIError, match="not found"):
        kube.get("karpenter.sh/v1", "NodePool", "bad")
    # --validate=false: the unknown field is pruned, as the real server does
    kubectl(kubeconfig, "create", "--validate=false", "-f", "-", stdin=NODEPOOL % ("pruned", "      bogusField: 1\n"))
    assert "bogusField" not in kube.get("karpenter.sh/v1", "NodePool", "pruned")["spec"]["template"]["spec"]


def test_openapi_v3_index_and_documents(kube: KubeAPIServer) -> None:
    index = kube.openapi_v3("")
    assert index is not None
    url = index["paths"]["apis/karpenter.sh/v1"]["serverRelativeURL"]
    assert url.startswith("/openapi/v3/apis/karpenter.sh/v1?hash=")
    doc = kube.openapi_v3("apis/karpenter.sh/v1")
    assert doc is not None
    schema = doc["components"]["schemas"]["sh.karpenter.v1.NodePool"]
    assert schema["x-kubernetes-group-version-kind"] == [{"group": "karpenter.sh", "version": "v1", "kind": "NodePool"}]
    assert "disruption" in schema["properties"]["spec"]["properties"]
    assert "io.k8s.api.core.v1.Pod" in (kube.openapi_v3("api/v1") or {})["components"]["schemas"]
    assert kube.openapi_v3("apis/nope/v1") is None
