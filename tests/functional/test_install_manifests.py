"""`python -m nodeflow install-manifests --stack NAME` against a stack in moto's CloudFormation, its output checked
with the real `kubectl kustomize`, and installed with the real `kubectl apply -k` (validated against the server's
OpenAPI) into the real control plane."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeflow.cli import main
from nodeflow.install import AGENT_IMAGE, CODE_CONFIGMAP
from sandbox.controlplane.binaries import kubectl as binaries_kubectl
from sandbox.controlplane.facade import RealKubeAPI

ROOT = Path(__file__).resolve().parents[2]
AGENT_CODE = ROOT / "agent" / "nodeflow_agent"
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:moto.cloudformation.parsing")
KUBECTL = shutil.which("kubectl") or str(binaries_kubectl())

STACK = "Nodeflow-shop"
WEBHOOK = "https://abcdefghij0123456789abcdefghij01.lambda-url.eu-west-1.on.aws/"
AGENT_ROLE = "arn:aws:iam::123456789012:role/Nodeflow-shop-AgentRole"
SECRET = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:nodeflow-shop-hmac-AbCdEf"


def template(*, pod_identity: bool = True, hmac: bool = False, drop: str = "") -> str:
    """A stack with the outputs (names as infra/stack.py writes them) install-manifests reads."""
    resources: dict[str, Any] = {"Table": {"Type": "AWS::SQS::Queue"}}
    if pod_identity:
        resources["AgentPodIdentity"] = {
            "Type": "AWS::EKS::PodIdentityAssociation",
            "Properties": {"ClusterName": "shop", "Namespace": "nodeflow", "ServiceAccount": "nodeflow-agent"},
        }
    outputs = {
        "ClusterName": "shop",
        "WebhookUrl": WEBHOOK,
        "AgentRoleArn": AGENT_ROLE,
        "NodeRoleName": "KarpenterNodeRole-shop",
        **({"WebhookHmacSecretArn": SECRET} if hmac else {}),
    }
    return json.dumps({"Resources": resources, "Outputs": {k: {"Value": v} for k, v in outputs.items() if k != drop}})


@pytest.fixture
def cloudformation(aws_env: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    import boto3
    from moto import mock_aws

    with mock_aws():
        yield boto3.client("cloudformation", region_name="eu-west-1")


def install(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["install-manifests", *args], out, err)
    return code, out.getvalue(), err.getvalue()


def rendered(cloudformation: Any, tmp_path: Path, **kw: bool) -> Path:
    cloudformation.create_stack(StackName=STACK, TemplateBody=template(**kw))
    out_dir = tmp_path / "install"
    code, out, err = install("--stack", STACK, "-o", str(out_dir))
    assert (code, err) == (0, ""), err
    assert f"kubectl apply -k {out_dir}" in out
    return out_dir


def kustomize(out_dir: Path) -> list[dict[str, Any]]:
    proc = subprocess.run([KUBECTL, "kustomize", str(out_dir)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    return doc


def agent_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    deployment = one(docs, "Deployment", "nodeflow-agent")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container  # type: ignore[no-any-return]


def test_rendered_kustomization_fills_every_value_and_orders_the_install(cloudformation: Any, tmp_path: Path) -> None:
    out_dir = rendered(cloudformation, tmp_path)
    for path in out_dir.rglob("*.yaml"):
        assert "REPLACE_ME" not in path.read_text(), path
    docs = kustomize(out_dir)
    kinds = [d["kind"] for d in docs]
    # A valid order: the namespace, then the CRDs, then everything else (the RBAC file's Role is namespaced).
    assert kinds[0] == "Namespace"
    assert kinds[1:6] == ["CustomResourceDefinition"] * 5
    assert {d["metadata"]["name"] for d in docs[1:6]} == {
        "nodepools.karpenter.sh",
        "nodeclaims.karpenter.sh",
        "ec2nodeclasses.karpenter.k8s.aws",
        "nodeoverlays.karpenter.sh",
        "nodeflowpolicies.nodeflow.io",
    }
    assert kinds.index("ConfigMap") < kinds.index("Deployment")
    for kind in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "NetworkPolicy"):
        assert kind in kinds
    controller_roles = {d["metadata"]["name"] for d in docs if d["kind"] == "ClusterRole"}
    assert {"nodeflow-agent", "nodeflow-provisioner", "nodeflow-drain"} <= controller_roles

    container = agent_container(docs)
    assert container["image"] == AGENT_IMAGE
    assert container["command"] == ["python", "-m", "nodeflow_agent"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["WEBHOOK_URL"] == WEBHOOK
    assert env["CLUSTER_NAME"] == "shop"
    assert env["AUTH_MODE"] == "iam"
    assert env["AWS_REGION"] == "eu-west-1"
    assert env["PYTHONPATH"] == "/opt/nodeflow"
    # The code comes from the generated ConfigMap (hashed name), mounted read-only as the package directory.
    configmap = one(docs, "ConfigMap")
    assert configmap["metadata"]["name"].startswith(CODE_CONFIGMAP + "-")
    assert configmap["metadata"]["namespace"] == "nodeflow"
    volumes = one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "code", "configMap": {"name": configmap["metadata"]["name"], "defaultMode": 0o444}} in volumes
    mount = next(m for m in container["volumeMounts"] if m["name"] == "code")
    assert mount == {"name": "code", "mountPath": "/opt/nodeflow/nodeflow_agent", "readOnly": True}
    assert configmap["data"] == {p.name: p.read_text() for p in AGENT_CODE.glob("*.py")}

    # EKS Pod Identity (the stack made the association): no IRSA annotation on the ServiceAccount.
    account = one(docs, "ServiceAccount", "nodeflow-agent")
    assert "eks.amazonaws.com/role-arn" not in (account["metadata"].get("annotations") or {})


def test_the_configmap_code_runs_on_a_bare_python(cloudformation: Any, tmp_path: Path) -> None:
    """The agent needs only the standard library: the ConfigMap's files alone, on a Python without site-packages
    (-S), import every module and start far enough to check the rendered settings."""
    docs = kustomize(rendered(cloudformation, tmp_path))
    package = tmp_path / "mounted" / "nodeflow_agent"
    package.mkdir(parents=True)
    for name, text in one(docs, "ConfigMap")["data"].items():
        (package / name).write_text(text)
    modules = sorted(p.stem for p in package.glob("*.py") if p.stem != "__init__")
    env = {e["name"]: e["value"] for e in agent_container(docs)["env"] if "value" in e}
    env["PYTHONPATH"] = str(package.parent)
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module('nodeflow_agent.' + m)\n"
        "from nodeflow_agent.config import Settings\n"
        "import os; os.environ['KUBE_API_URL'] = 'http://127.0.0.1:1'\n"
        "s = Settings.from_env()\n"
        "print(s.cluster_name, s.webhook_url)\n"
        "print([k for k in sys.modules if k.split('.')[0] in ('yaml', 'boto3', 'nodeflow', 'kubernetes')])\n"
    )
    proc = subprocess.run(
        [sys.executable, "-S", "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"shop {WEBHOOK}", "[]"]


def test_irsa_and_hmac_stacks(cloudformation: Any, tmp_path: Path) -> None:
    out_dir = rendered(cloudformation, tmp_path, pod_identity=False, hmac=True)
    docs = kustomize(out_dir)
    account = one(docs, "ServiceAccount", "nodeflow-agent")
    assert account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"] == AGENT_ROLE
    env = {e["name"]: e.get("value") for e in agent_container(docs)["env"]}
    assert env["AUTH_MODE"] == "hmac"
    code, out, err = install("--stack", STACK, "-o", str(out_dir))  # rendering again replaces the directory
    assert code == 0, err
    assert f"--secret-id {SECRET}" in out


def test_bad_stacks_and_arguments_are_named(
    cloudformation: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, err = install("--stack", "Nodeflow-none", "-o", str(tmp_path / "a"))
    assert code == 2
    assert err.startswith("error: --stack: 'Nodeflow-none' could not be described in eu-west-1")
    cloudformation.create_stack(StackName="Partial", TemplateBody=template(drop="WebhookUrl"))
    code, _, err = install("--stack", "Partial", "-o", str(tmp_path / "b"))
    assert code == 2
    assert "'Partial' has no output WebhookUrl" in err
    assert not (tmp_path / "b").exists()
    cloudformation.create_stack(StackName=STACK, TemplateBody=template())
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    code, _, err = install("--stack", STACK, "-o", str(mine))
    assert code == 2
    assert "exists and is not a rendered kustomization" in err
    assert (mine / "notes.txt").read_text() == "keep me"
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.delenv("AWS_REGION", raising=False)
    code, _, err = install("--stack", STACK, "-o", str(tmp_path / "c"))
    assert code == 2
    assert err.startswith("error: --region:")


def test_the_region_comes_from_aws_region_alone(
    cloudformation: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the AWS CLI and the Lambda runtime read it: no --region, no AWS_DEFAULT_REGION, no profile region."""
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    out_dir = rendered(cloudformation, tmp_path)
    rendered_env = [
        e
        for path in out_dir.rglob("*.yaml")
        for doc in yaml.safe_load_all(path.read_text())
        if doc and doc.get("kind") == "Deployment"
        for c in doc["spec"]["template"]["spec"]["containers"]
        for e in c.get("env") or ()
    ]
    assert {"name": "AWS_REGION", "value": "eu-west-1"} in rendered_env


def kubectl(kubeconfig: str, *args: str) -> str:
    proc = subprocess.run([KUBECTL, "--kubeconfig", kubeconfig, *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
    return proc.stdout


def test_kubectl_apply_k_installs_into_the_api_server(
    cloudformation: Any, tmp_path: Path, real_kube: RealKubeAPI
) -> None:
    """On the shared control plane, which already has nodeflow's CRDs, namespace and RBAC (what the install applied
    when it started): the install's Deployment and ConfigMap are created, what exists is unchanged or configured,
    and a second apply changes nothing."""
    out_dir = rendered(cloudformation, tmp_path)
    kubeconfig = str(real_kube.plane.kubeconfig)  # the admin's, over TLS (kubectl sends no token over plain HTTP)
    dry = kubectl(kubeconfig, "apply", "--dry-run=server", "-k", str(out_dir))
    assert "deployment.apps/nodeflow-agent created (server dry run)" in dry
    assert real_kube.objects("apps/v1", "Deployment", "nodeflow") == []

    applied = kubectl(kubeconfig, "apply", "-k", str(out_dir))
    verbs = {line.rsplit(" ", 1)[-1] for line in applied.splitlines()}
    assert verbs <= {"created", "configured", "unchanged"}, applied
    assert "deployment.apps/nodeflow-agent created" in applied.splitlines()
    assert real_kube.get("v1", "Namespace", "nodeflow")
    names = {c["metadata"]["name"] for c in real_kube.objects("apiextensions.k8s.io/v1", "CustomResourceDefinition")}
    assert {"nodepools.karpenter.sh", "nodeclaims.karpenter.sh", "ec2nodeclasses.karpenter.k8s.aws"} <= names
    (deployment,) = real_kube.objects("apps/v1", "Deployment", "nodeflow")
    configmaps = real_kube.objects("v1", "ConfigMap", "nodeflow")
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    (configmap,) = [
        c for c in configmaps if any(v.get("configMap", {}).get("name") == c["metadata"]["name"] for v in volumes)
    ]
    assert set(configmap["data"]) == {p.name for p in AGENT_CODE.glob("*.py")}
    assert real_kube.get("rbac.authorization.k8s.io/v1", "Role", "nodeflow-disruption", "nodeflow")
    assert real_kube.get("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "nodeflow-agent")
    # The CRDs are served: NodePools can be read through kubectl.
    assert kubectl(kubeconfig, "get", "nodepools", "-o", "name") == ""

    again = kubectl(kubeconfig, "apply", "-k", str(out_dir))
    assert all(line.endswith(" unchanged") for line in again.splitlines()), again
