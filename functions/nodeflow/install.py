"""``python -m nodeflow install-manifests --stack NAME``: the in-cluster half of an install, from the stack's outputs.

Reads the deployed stack (CloudFormation DescribeStacks and GetTemplate) and writes a kustomization directory
that ``kubectl apply -k DIR`` installs in a valid order (kustomize sorts the namespace and the CRDs first):

- ``namespace.yaml``, ``crds/`` (NodePool, NodeClaim, EC2NodeClass, NodeOverlay, NodeflowPolicy),
  ``controller-rbac.yaml`` (the Lambdas' groups), ``agent/`` (ServiceAccount, read-only RBAC, Deployment,
  NetworkPolicy), copied from the repository;
- every value filled in: the webhook URL, the cluster name, the region, the auth mode (``hmac`` when the stack
  has the HMAC secret), the agent's identity (EKS Pod Identity when the stack made the association, else the
  IRSA annotation with ``AgentRoleArn``);
- no image to build: the agent (standard library only) runs from the stock ``AGENT_IMAGE`` with its code in a
  ConfigMap that ``configMapGenerator`` makes from ``agent-code/`` (its name carries a hash of the code, so new
  code rolls the Deployment).

Not part of the pure core: this module reads files and calls AWS (only when run).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

__all__ = ["AGENT_IMAGE", "CODE_CONFIGMAP", "InstallError", "StackOutputs", "read_stack", "render"]

ROOT = Path(__file__).resolve().parents[2]
#: A stock image: the agent needs nothing but the Python standard library (same base as agent/Dockerfile).
AGENT_IMAGE = "python:3.12.8-slim-bookworm"
CODE_CONFIGMAP = "nodeflow-agent-code"
CODE_DIR = "/opt/nodeflow"
_IRSA_ANNOTATION = "eks.amazonaws.com/role-arn"
_POD_IDENTITY_TYPE = "AWS::EKS::PodIdentityAssociation"
_REQUIRED_OUTPUTS = ("ClusterName", "WebhookUrl", "AgentRoleArn")


class InstallError(Exception):
    """The stack or the repository cannot give what the manifests need (the message says what)."""


@dataclass(frozen=True, slots=True)
class StackOutputs:
    """What the in-cluster manifests need from the deployed stack."""

    stack: str
    region: str
    cluster_name: str
    webhook_url: str
    agent_role_arn: str
    pod_identity: bool  # the stack made an EKS Pod Identity association for the agent (else: IRSA)
    hmac_secret_arn: str | None = None
    node_role_name: str | None = None

    @property
    def auth_mode(self) -> str:
        return "hmac" if self.hmac_secret_arn else "iam"


def read_stack(cloudformation: Any, stack: str, region: str) -> StackOutputs:
    """The outputs of ``stack`` (a boto3 CloudFormation client of ``region``)."""
    from botocore.exceptions import ClientError

    try:
        stacks = cloudformation.describe_stacks(StackName=stack)["Stacks"]
    except ClientError as exc:
        raise InstallError(f"--stack: {stack!r} could not be described in {region}: {exc}") from None
    if not stacks:
        raise InstallError(f"--stack: {stack!r} was not found in {region}")
    described = stacks[0]
    status = described.get("StackStatus", "")
    if not status.endswith("_COMPLETE") or status in ("ROLLBACK_COMPLETE", "DELETE_COMPLETE"):
        raise InstallError(f"--stack: {stack!r} is {status}, not deployed (wait for cdk deploy to finish)")
    outputs = {o["OutputKey"]: o.get("OutputValue", "") for o in described.get("Outputs") or ()}
    missing = [k for k in _REQUIRED_OUTPUTS if not outputs.get(k)]
    if missing:
        raise InstallError(
            f"--stack: {stack!r} has no output {', '.join(missing)} (is it a nodeflow stack, deployed by cdk deploy?)"
        )
    body = cloudformation.get_template(StackName=stack)["TemplateBody"]
    template = json.loads(body) if isinstance(body, str) else body
    resources: Mapping[str, Any] = template.get("Resources") or {}
    return StackOutputs(
        stack=stack,
        region=region,
        cluster_name=outputs["ClusterName"],
        webhook_url=outputs["WebhookUrl"],
        agent_role_arn=outputs["AgentRoleArn"],
        pod_identity=any(r.get("Type") == _POD_IDENTITY_TYPE for r in resources.values()),
        hmac_secret_arn=outputs.get("WebhookHmacSecretArn") or None,
        node_role_name=outputs.get("NodeRoleName") or None,
    )


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _dump(docs: list[dict[str, Any]], header: str) -> str:
    return header + "---\n".join(yaml.safe_dump(d, sort_keys=False, width=120) for d in docs)


def _service_account(doc: dict[str, Any], outputs: StackOutputs) -> dict[str, Any]:
    annotations = dict(doc["metadata"].get("annotations") or {})
    annotations.pop(_IRSA_ANNOTATION, None)
    if not outputs.pod_identity:
        annotations[_IRSA_ANNOTATION] = outputs.agent_role_arn
    doc["metadata"]["annotations"] = annotations
    if not annotations:
        del doc["metadata"]["annotations"]
    return doc


def _deployment(doc: dict[str, Any], outputs: StackOutputs) -> dict[str, Any]:
    pod = doc["spec"]["template"]["spec"]
    (container,) = [c for c in pod["containers"] if c["name"] == "agent"]
    container["image"] = AGENT_IMAGE
    container["command"] = ["python", "-m", "nodeflow_agent"]
    container["workingDir"] = CODE_DIR
    values = {
        "WEBHOOK_URL": outputs.webhook_url,
        "CLUSTER_NAME": outputs.cluster_name,
        "AUTH_MODE": outputs.auth_mode,
        "AWS_REGION": outputs.region,
        "PYTHONPATH": CODE_DIR,
        "PYTHONDONTWRITEBYTECODE": "1",  # the root filesystem is read-only
        "PYTHONUNBUFFERED": "1",
    }
    env = [e for e in container.get("env") or () if e["name"] not in values]
    container["env"] = [{"name": k, "value": v} for k, v in values.items()] + env
    mounts = [m for m in container.get("volumeMounts") or () if m["name"] != "code"]
    container["volumeMounts"] = [*mounts, {"name": "code", "mountPath": f"{CODE_DIR}/nodeflow_agent", "readOnly": True}]
    volumes = [v for v in pod.get("volumes") or () if v["name"] != "code"]
    pod["volumes"] = [*volumes, {"name": "code", "configMap": {"name": CODE_CONFIGMAP, "defaultMode": 0o444}}]
    return doc


def _check_filled(text: str, where: str) -> None:
    if "REPLACE_ME" in text:
        raise InstallError(f"{where}: a REPLACE_ME placeholder is left (the renderer does not know that field)")


def render(outputs: StackOutputs, out_dir: Path, root: Path = ROOT) -> Path:
    """Write the kustomization directory for ``outputs`` into ``out_dir`` (replaced if it exists); returns the
    path of its kustomization.yaml."""
    manifests = root / "agent" / "manifests"
    rbac = root / "infra" / "cluster" / "controller-rbac.yaml"
    code = root / "agent" / "nodeflow_agent"
    for needed in (manifests / "00-namespace.yaml", manifests / "crds", rbac, code / "__main__.py"):
        if not needed.exists():
            raise InstallError(f"{needed} is missing: run install-manifests from a nodeflow checkout")
    if out_dir.exists():
        if not (out_dir / "kustomization.yaml").exists() and any(out_dir.iterdir()):
            raise InstallError(f"-o: {out_dir} exists and is not a rendered kustomization; not overwriting it")
        shutil.rmtree(out_dir)
    (out_dir / "crds").mkdir(parents=True)
    (out_dir / "agent").mkdir()
    (out_dir / "agent-code").mkdir()
    header = f"# Rendered by `python -m nodeflow install-manifests --stack {outputs.stack}`; do not edit.\n"

    resources = ["namespace.yaml"]
    shutil.copyfile(manifests / "00-namespace.yaml", out_dir / "namespace.yaml")
    for crd in sorted((manifests / "crds").glob("*.yaml")):
        shutil.copyfile(crd, out_dir / "crds" / crd.name)
        resources.append(f"crds/{crd.name}")
    shutil.copyfile(rbac, out_dir / "controller-rbac.yaml")
    resources.append("controller-rbac.yaml")
    for source in sorted(manifests.glob("*.yaml")):
        if source.name == "00-namespace.yaml":
            continue
        docs = _documents(source)
        kinds = {d.get("kind") for d in docs}
        if "ServiceAccount" in kinds or "Deployment" in kinds:
            docs = [
                _service_account(d, outputs)
                if d.get("kind") == "ServiceAccount"
                else _deployment(d, outputs)
                if d.get("kind") == "Deployment"
                else d
                for d in docs
            ]
            text = _dump(docs, header)
        else:
            text = source.read_text()
        _check_filled(text, str(source.relative_to(root)))
        (out_dir / "agent" / source.name).write_text(text)
        resources.append(f"agent/{source.name}")

    files = []
    for module in sorted(code.glob("*.py")):
        shutil.copyfile(module, out_dir / "agent-code" / module.name)
        files.append(f"agent-code/{module.name}")
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        # kustomize orders the output itself (Namespace, CRDs, RBAC, ConfigMap, Deployment...).
        "resources": resources,
        "configMapGenerator": [
            {
                "name": CODE_CONFIGMAP,
                "namespace": "nodeflow",
                "files": files,
                "options": {
                    "labels": {"app.kubernetes.io/name": "nodeflow-agent", "app.kubernetes.io/part-of": "nodeflow"}
                },
            }
        ],
    }
    path = out_dir / "kustomization.yaml"
    path.write_text(header + yaml.safe_dump(kustomization, sort_keys=False, width=120))
    return path
