"""The agent's image and manifests: least privilege, hardened pod, stdlib-only package."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

AGENT = Path(__file__).resolve().parents[3] / "agent"
MODELS = {
    "Namespace": "V1Namespace",
    "ServiceAccount": "V1ServiceAccount",
    "ClusterRole": "V1ClusterRole",
    "ClusterRoleBinding": "V1ClusterRoleBinding",
    "Deployment": "V1Deployment",
    "NetworkPolicy": "V1NetworkPolicy",
    "Service": "V1Service",
}


def documents() -> list[dict[str, Any]]:
    return [d for f in sorted((AGENT / "manifests").glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]


def one(kind: str) -> dict[str, Any]:
    [doc] = [d for d in documents() if d["kind"] == kind]
    return doc


def test_every_manifest_round_trips_through_the_kubernetes_models() -> None:
    """A misspelled field would be dropped by the typed models and the round trip would differ."""
    import kubernetes.client

    api = kubernetes.client.ApiClient()
    docs = documents()
    assert sorted(d["kind"] for d in docs) == sorted(MODELS)
    for doc in docs:
        model = api._ApiClient__deserialize(doc, MODELS[doc["kind"]])  # type: ignore[attr-defined]
        assert api.sanitize_for_serialization(model) == doc, doc["kind"]
        if doc["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
            assert doc["metadata"]["namespace"] == "nodeflow"


def test_cluster_role_only_reads_the_watched_kinds() -> None:
    rules = one("ClusterRole")["rules"]
    granted = {(group, resource) for r in rules for group in r["apiGroups"] for resource in r["resources"]}
    assert granted == {
        ("", "pods"),
        ("", "nodes"),
        ("karpenter.sh", "nodepools"),
        ("karpenter.sh", "nodeclaims"),
        ("karpenter.k8s.aws", "ec2nodeclasses"),
    }
    assert all(sorted(r["verbs"]) == ["list", "watch"] for r in rules)  # no get: the agent never reads one object
    binding = one("ClusterRoleBinding")
    assert binding["roleRef"]["name"] == one("ClusterRole")["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "nodeflow-agent", "namespace": "nodeflow"}]


def test_service_account_has_the_irsa_annotation_placeholder() -> None:
    sa = one("ServiceAccount")
    assert sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].startswith("arn:aws:iam::")


def test_deployment_is_hardened_and_probed() -> None:
    deployment = one("Deployment")
    assert deployment["spec"]["replicas"] == 1
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "nodeflow-agent"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["terminationGracePeriodSeconds"] > 20  # > FLUSH_TIMEOUT_SECONDS (default 20)
    [container] = pod["containers"]
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert set(container["resources"]) == {"requests", "limits"}
    assert {"cpu", "memory"} <= set(container["resources"]["requests"])
    assert "memory" in container["resources"]["limits"]
    env = {e["name"]: e for e in container["env"]}
    assert {"WEBHOOK_URL", "CLUSTER_NAME", "AUTH_MODE", "HMAC_SECRET_FILE", "POD_NAME"} <= set(env)
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    [volume] = pod["volumes"]
    assert volume["secret"]["optional"] is True
    [mount] = container["volumeMounts"]
    assert env["HMAC_SECRET_FILE"]["value"].startswith(mount["mountPath"] + "/")
    assert mount["readOnly"] is True


def test_network_policy_allows_only_dns_api_server_https() -> None:
    policy = one("NetworkPolicy")["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    ports = sorted((p["protocol"], p["port"]) for rule in policy["egress"] for p in rule["ports"])
    assert ports == [("TCP", 53), ("TCP", 80), ("TCP", 443), ("TCP", 6443), ("UDP", 53)]
    pod_identity = next(rule for rule in policy["egress"] if any(p["port"] == 80 for p in rule["ports"]))
    assert pod_identity["to"] == [{"ipBlock": {"cidr": "169.254.170.23/32"}}]  # plain HTTP only there
    assert [p["port"] for rule in policy["ingress"] for p in rule["ports"]] == [8080]


def test_dockerfile() -> None:
    text = (AGENT / "Dockerfile").read_text()
    [base] = re.findall(r"^FROM\s+(\S+)", text, re.M)
    assert re.fullmatch(r"python:3\.12\.\d+-slim(-\w+)?(@sha256:[0-9a-f]{64})?", base), base
    [user] = re.findall(r"^USER\s+(\S+)", text, re.M)
    uid = user.split(":")[0]
    assert uid.isdigit()
    assert int(uid) > 0
    assert "pip install" not in text
    assert "PYTHONDONTWRITEBYTECODE=1" in text
    copies = re.findall(r"^COPY\s+(\S+)", text, re.M)
    assert copies == ["nodeflow_agent/"]
    assert re.search(r'^ENTRYPOINT \["python", "-m", "nodeflow_agent"\]', text, re.M)


@pytest.mark.parametrize("path", sorted((AGENT / "nodeflow_agent").glob("*.py")), ids=lambda p: p.name)
def test_module_imports_only_the_standard_library(path: Path) -> None:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            assert top == "__future__" or top in sys.stdlib_module_names, f"{path.name} imports {name}"
