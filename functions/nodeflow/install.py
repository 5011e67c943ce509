"""The in-cluster half of an install, rendered ONCE for both ways of applying it.

``manifests(values)`` is the list of objects: the namespace, the CRDs (NodePool, NodeClaim, EC2NodeClass,
NodeOverlay, NodeflowPolicy), ``infra/cluster/controller-rbac.yaml`` (the Lambdas' groups), the agent (ServiceAccount,
read-only RBAC, its code as a ConfigMap, Deployment, NetworkPolicy, Service), every value filled in: the webhook URL,
the cluster name, the region, the auth mode (``hmac`` when the stack has the HMAC secret), the agent's identity (EKS
Pod Identity when the stack made the association, else the IRSA annotation with ``AgentRoleArn``). Every object
carries the label ``INSTALL_LABEL``: it is how the stack's installer finds what it applied (to prune and remove it).

Two consumers, the same objects:

- ``cdk deploy`` applies them to the cluster from the stack's custom resource (``nodeflow.installer``, run by the
  ``install`` Lambda, which carries these files in its code asset: ``infra/bundling.py``);
- ``python -m nodeflow install-manifests --stack NAME`` (``read_stack`` + ``render``) writes them as a kustomization
  directory for GitOps (``kubectl apply -k DIR``; kustomize sorts the namespace and the CRDs first). It has no
  generator: what kustomize builds is exactly ``manifests()`` (tests/realk8s/test_install.py compares them).

No image to build: the agent (standard library only) runs from the stock ``AGENT_IMAGE`` with its code in the
ConfigMap ``nodeflow-agent-code-<hash of the code>`` (new code, new name: the Deployment rolls).

Not part of the pure core: this module reads files and calls AWS (``read_stack``, only when run).

Must not touch: the cluster or AWS (``nodeflow.installer`` applies what is rendered here).
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from nodeflow import __version__

__all__ = [
    "AGENT_IMAGE",
    "CODE_CONFIGMAP",
    "HMAC_SECRET",
    "INSTALL_LABEL",
    "INSTALL_SELECTOR",
    "NAMESPACE",
    "VERSION_LABEL",
    "InstallError",
    "StackOutputs",
    "hmac_secret",
    "install_root",
    "manifests",
    "read_stack",
    "render",
    "source_digest",
    "source_files",
]

#: Where the install's files are in a checkout (agent/, infra/cluster/), and in the Lambda's code asset, which
#: carries them under nodeflow/_install/ with the same layout (infra/bundling.py).
REPO_ROOT = Path(__file__).resolve().parents[2]
BUNDLED_ROOT = Path(__file__).resolve().parent / "_install"
#: A stock image: the agent needs nothing but the Python standard library (same base as agent/Dockerfile).
AGENT_IMAGE = "python:3.12.8-slim-bookworm"
#: The agent Deployment's and pods' label naming the nodeflow release (the agent's code comes with the stack).
VERSION_LABEL = "app.kubernetes.io/version"
CODE_CONFIGMAP = "nodeflow-agent-code"
CODE_DIR = "/opt/nodeflow"
NAMESPACE = "nodeflow"
#: On every object of the install: the stack's installer lists by it to prune what a new version no longer has and
#: to remove the install. (A GitOps tool may use it the same way.)
INSTALL_LABEL = "nodeflow.io/install"
INSTALL_LABEL_VALUE = "nodeflow"
INSTALL_SELECTOR = f"{INSTALL_LABEL}={INSTALL_LABEL_VALUE}"
#: The Secret the agent reads its HMAC secret from in hmac mode (agent/manifests/30-deployment.yaml), key ``secret``.
HMAC_SECRET = "nodeflow-agent-hmac"
_IRSA_ANNOTATION = "eks.amazonaws.com/role-arn"
_POD_IDENTITY_TYPE = "AWS::EKS::PodIdentityAssociation"
_REQUIRED_OUTPUTS = ("ClusterName", "WebhookUrl", "AgentRoleArn")
_MANIFESTS = Path("agent") / "manifests"
_RBAC = Path("infra") / "cluster" / "controller-rbac.yaml"
_CODE = Path("agent") / "nodeflow_agent"
_NAMESPACE_FILE = _MANIFESTS / "00-namespace.yaml"


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


def install_root() -> Path:
    """The folder holding agent/ and infra/cluster/: the code asset's copy in Lambda, else the checkout."""
    return BUNDLED_ROOT if BUNDLED_ROOT.is_dir() else REPO_ROOT


def source_files(root: Path | None = None) -> list[Path]:
    """The files the install is rendered from, relative to ``root``, in a fixed order (InstallError naming the
    first one missing)."""
    base = install_root() if root is None else root
    for needed in (_NAMESPACE_FILE, _MANIFESTS / "crds", _RBAC, _CODE / "__main__.py"):
        if not (base / needed).exists():
            raise InstallError(f"{base / needed} is missing: run install-manifests from a nodeflow checkout")
    files = [
        *sorted((base / _MANIFESTS).glob("*.yaml")),
        *sorted((base / _MANIFESTS / "crds").glob("*.yaml")),
        base / _RBAC,
        *sorted((base / _CODE).glob("*.py")),
    ]
    return [f.relative_to(base) for f in files]


def source_digest(root: Path | None = None) -> str:
    """A digest of every file ``source_files`` names (path and content): the stack passes the synthesized one to
    its installer, which renders only from files with the same digest."""
    base = install_root() if root is None else root
    digest = hashlib.sha256()
    for rel in source_files(base):
        digest.update(rel.as_posix().encode() + b"\0" + (base / rel).read_bytes() + b"\0")
    return digest.hexdigest()[:32]


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


def _deployment(doc: dict[str, Any], outputs: StackOutputs, code_configmap: str) -> dict[str, Any]:
    for meta in (doc["metadata"], doc["spec"]["template"]["metadata"]):  # which release runs, for kubectl -L
        meta["labels"] = {**(meta.get("labels") or {}), VERSION_LABEL: __version__}
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
    pod["volumes"] = [*volumes, {"name": "code", "configMap": {"name": code_configmap, "defaultMode": 0o444}}]
    return doc


def _code_configmap(root: Path) -> dict[str, Any]:
    """The agent's modules as a ConfigMap named after a hash of their names and contents."""
    data = {p.name: p.read_text() for p in sorted((root / _CODE).glob("*.py"))}
    digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:10]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{CODE_CONFIGMAP}-{digest}",
            "namespace": NAMESPACE,
            "labels": {"app.kubernetes.io/name": "nodeflow-agent", "app.kubernetes.io/part-of": "nodeflow"},
        },
        "data": data,
    }


def _check_filled(docs: list[dict[str, Any]], where: str) -> None:
    if "REPLACE_ME" in json.dumps(docs):
        raise InstallError(f"{where}: a REPLACE_ME placeholder is left (the renderer does not know that field)")


def _labelled(doc: dict[str, Any]) -> dict[str, Any]:
    doc.setdefault("metadata", {})
    doc["metadata"]["labels"] = {**(doc["metadata"].get("labels") or {}), INSTALL_LABEL: INSTALL_LABEL_VALUE}
    return doc


def _files(outputs: StackOutputs, root: Path) -> list[tuple[str, list[dict[str, Any]]]]:
    """(kustomization-relative path, its objects), in a valid apply order."""
    source_files(root)  # every file is there
    files: list[tuple[str, list[dict[str, Any]]]] = [("namespace.yaml", _documents(root / _NAMESPACE_FILE))]
    for crd in sorted((root / _MANIFESTS / "crds").glob("*.yaml")):
        files.append((f"crds/{crd.name}", _documents(crd)))
    files.append(("controller-rbac.yaml", _documents(root / _RBAC)))
    code = _code_configmap(root)
    files.append(("agent/code-configmap.yaml", [code]))
    for source in sorted((root / _MANIFESTS).glob("*.yaml")):
        if source == root / _NAMESPACE_FILE:
            continue
        docs = [
            _service_account(d, outputs)
            if d.get("kind") == "ServiceAccount"
            else _deployment(d, outputs, code["metadata"]["name"])
            if d.get("kind") == "Deployment"
            else d
            for d in _documents(source)
        ]
        _check_filled(docs, str(source.relative_to(root)))
        files.append((f"agent/{source.name}", docs))
    return [(path, [_labelled(d) for d in docs]) for path, docs in files]


def hmac_secret(value: str) -> dict[str, Any]:
    """The agent's HMAC secret as the Secret it mounts (hmac mode): the stack's installer applies it from Secrets
    Manager; a GitOps install creates it (install-manifests prints the command)."""
    return _labelled(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": HMAC_SECRET,
                "namespace": NAMESPACE,
                "labels": {"app.kubernetes.io/name": "nodeflow-agent", "app.kubernetes.io/part-of": "nodeflow"},
            },
            "type": "Opaque",
            "data": {"secret": base64.b64encode(value.encode()).decode()},
        }
    )


def manifests(outputs: StackOutputs, root: Path | None = None) -> list[dict[str, Any]]:
    """Every object of the install for ``outputs``, in a valid apply order (the namespace, the CRDs, the RBAC, the
    agent's code before its Deployment)."""
    return [doc for _, docs in _files(outputs, install_root() if root is None else root) for doc in docs]


def render(outputs: StackOutputs, out_dir: Path, root: Path | None = None) -> Path:
    """Write ``manifests(outputs)`` as a kustomization directory into ``out_dir`` (replaced if it exists); returns
    the path of its kustomization.yaml."""
    files = _files(outputs, install_root() if root is None else root)
    if out_dir.exists():
        if not (out_dir / "kustomization.yaml").exists() and any(out_dir.iterdir()):
            raise InstallError(f"-o: {out_dir} exists and is not a rendered kustomization; not overwriting it")
        shutil.rmtree(out_dir)
    header = f"# Rendered by `python -m nodeflow install-manifests --stack {outputs.stack}`; do not edit.\n"
    for rel, docs in files:
        path = out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_dump(docs, header))
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        # kustomize orders the output itself (Namespace, CRDs, RBAC, ConfigMap, Deployment...).
        "resources": [rel for rel, _ in files],
    }
    path = out_dir / "kustomization.yaml"
    path.write_text(header + yaml.safe_dump(kustomization, sort_keys=False, width=120))
    return path
