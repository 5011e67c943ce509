"""The stack's in-cluster install (``Custom::NodeflowInstall``, ``nodeflow.handlers.install``) run for real: the handler
gets CloudFormation's requests, works against a real control plane (as the cluster admin, which the stack's access
entry makes the install role) and PUTs its answer to a local stand-in for the presigned S3 URL.

The module has a control plane of its own (etcd, kube-apiserver, controller-manager, scheduler; no CRDs): the
install writes cluster-wide names (namespace nodeflow, the nodeflow-* ClusterRoles, the CRDs) that the shared one's
tests use, and each test here starts from a cluster without nodeflow (what a test created is deleted after it, but
the CRDs, which the first test deletes itself).

- a first install creates everything and waits for the CRDs; the same request again changes nothing; what it applies
  is exactly what ``kubectl kustomize`` builds from ``install-manifests``' directory;
- an upgrade prunes what the new version no longer has; a rollback of it keeps the new set;
- Delete is refused while a NodeClaim nodeflow manages exists, and says what to run; it goes through once it is gone
  (CRDs kept) or when the namespace says to leave them; installing again waits for the old namespace to go;
- the agent's rollout is waited for; a first install whose agent cannot start fails saying why and deletes what it
  created; hmac mode installs the agent's Secret from Secrets Manager.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeflow.handlers import install as handler_module
from nodeflow.handlers import runtime
from nodeflow.install import INSTALL_SELECTOR, StackOutputs, manifests, render, source_digest
from nodeflow.installer import KEEP_ANNOTATION, KEEP_VALUE, InstallFailed, wait_for_access
from nodeflow.kube.applyset import CRDS, KINDS, apply_all, find_labelled, ref_of, resource_of
from nodeflow.kube.client import NAMESPACES, NODE_CLAIMS, NODES, PODS, KubeClient
from nodeflow.kube.errors import KubeError, NotFound
from sandbox.controlplane import ADMIN, ControlPlane, Identity
from sandbox.controlplane.isolation import ClusterScope
from sandbox.stepfunctions import LambdaContext

CLUSTER = "shop"
REGION = "eu-west-1"
STACK_ID = f"arn:aws:cloudformation:{REGION}:123456789012:stack/Nodeflow-{CLUSTER}/0a1b2c3d"
WEBHOOK = "https://abcdefghij0123456789abcdefghij01.lambda-url.eu-west-1.on.aws/"
AGENT_ROLE = "arn:aws:iam::123456789012:role/Nodeflow-shop-AgentRole"
REPO = Path(__file__).resolve().parents[2]
OURS = {"nodeflow-install"}  # the installer's field manager


# --------------------------------------------------------------------------------------------- harness


@dataclass
class Responses:
    """A stand-in for the presigned S3 URLs CloudFormation waits on: every PUT body, by path."""

    url: str
    bodies: dict[str, dict[str, Any]] = field(default_factory=dict)


@pytest.fixture
def responses() -> Iterator[Responses]:
    got: dict[str, dict[str, Any]] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            got[self.path] = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Responses(f"http://127.0.0.1:{server.server_address[1]}", got)
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class Installer:
    """Sends CloudFormation's requests to the handler, as the stack's custom resource would."""

    responses: Responses
    digest: str = field(default_factory=source_digest)

    def properties(self, **extra: str) -> dict[str, str]:
        return {
            "ServiceToken": f"arn:aws:lambda:{REGION}:123456789012:function:nodeflow-{CLUSTER}-install",
            "ClusterName": CLUSTER,
            "WebhookUrl": WEBHOOK,
            "AgentRoleArn": AGENT_ROLE,
            "PodIdentity": "true",
            "SourceDigest": self.digest,
            "AgentReadySeconds": "0",
            **extra,
        }

    def send(
        self,
        request_type: str,
        properties: Mapping[str, str] | None = None,
        *,
        old: Mapping[str, str] | None = None,
        physical: str | None = None,
        resource_type: str = handler_module.INSTALL_TYPE,
    ) -> dict[str, Any]:
        """The response the handler PUT (Status, Reason, PhysicalResourceId...)."""
        request_id = str(uuid.uuid4())
        event: dict[str, Any] = {
            "RequestType": request_type,
            "ResourceType": resource_type,
            "LogicalResourceId": "InstallInCluster",
            "StackId": STACK_ID,
            "RequestId": request_id,
            "ResponseURL": f"{self.responses.url}/{request_id}",
            "ResourceProperties": dict(properties if properties is not None else self.properties()),
        }
        if old is not None:
            event["OldResourceProperties"] = dict(old)
        if physical is not None:
            event["PhysicalResourceId"] = physical
        context = LambdaContext(f"nodeflow-{CLUSTER}-install", "arn:aws:lambda:::function:x", 512, 300)
        returned = handler_module.handler(event, context)
        body = self.responses.bodies[f"/{request_id}"]
        assert returned["status"] == body["Status"]
        assert (body["StackId"], body["RequestId"], body["LogicalResourceId"]) == (
            STACK_ID,
            request_id,
            "InstallInCluster",
        )
        return body

    def ok(self, request_type: str, properties: Mapping[str, str] | None = None, **kw: Any) -> dict[str, Any]:
        body = self.send(request_type, properties, **kw)
        assert body["Status"] == "SUCCESS", body["Reason"]
        return body


def lambda_env(monkeypatch: pytest.MonkeyPatch, kubeconfig: Path) -> None:
    for key, value in {
        "CLUSTER_NAME": CLUSTER,
        "AWS_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "KUBECONFIG": str(kubeconfig),
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_METRICS_DISABLED": "true",
    }.items():
        monkeypatch.setenv(key, value)
    runtime.reset()


@pytest.fixture
def installer(responses: Responses) -> Iterator[Installer]:
    yield Installer(responses)
    runtime.reset()


def outputs() -> StackOutputs:
    return StackOutputs(
        stack=f"Nodeflow-{CLUSTER}",
        region=REGION,
        cluster_name=CLUSTER,
        webhook_url=WEBHOOK,
        agent_role_arn=AGENT_ROLE,
        pod_identity=True,
    )


def live(kube: KubeClient) -> dict[str, str]:
    """Every object carrying the install's label, and CRDs: ref -> resourceVersion."""
    found = {}
    for ref in find_labelled(kube, INSTALL_SELECTOR, KINDS):
        try:
            obj = kube.get(resource_of(ref.api_version, ref.kind), ref.name, ref.namespace or None)
        except NotFound:  # deleted since it was listed
            continue
        found[str(ref)] = obj["metadata"]["resourceVersion"]
    return found


def expected_refs(objects: list[dict[str, Any]]) -> set[str]:
    return {str(ref_of(o)) for o in objects}


def contained(want: Any, got: Any, where: str = "") -> list[str]:
    """Where ``got`` (a live object) lacks or differs from what ``want`` says (the API server adds defaults and
    drops empty lists and objects)."""
    if want in ([], {}) and got is None:
        return []
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return [f"{where}: {got!r} is not an object"]
        return [p for k, v in want.items() for p in contained(v, got.get(k), f"{where}.{k}")]
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return [f"{where}: {got!r} is not {len(want)} items"]
        return [p for i, (w, g) in enumerate(zip(want, got, strict=True)) for p in contained(w, g, f"{where}[{i}]")]
    return [] if want == got else [f"{where}: {got!r} != {want!r}"]


# --------------------------------------------------------------------------------------------- the cluster


@dataclass
class Cluster:
    plane: ControlPlane
    kube: KubeClient  # as the cluster admin

    def name(self, prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def plane() -> Iterator[tuple[ControlPlane, ClusterScope]]:
    identities = {"installer": Identity("nodeflow-installer-role")}  # an access entry not honoured yet: no RBAC
    with ControlPlane(controllers=True, crds=[], identities=identities) as started:
        kube = started.kube(ADMIN)
        scope = ClusterScope(kube)
        # CRDs outlive a test (deleting them takes seconds): the installer keeps them too; the one test that needs a
        # cluster without them deletes them first.
        scope.kinds = [k for k in scope.kinds if k != CRDS]
        try:
            yield started, scope
        finally:
            scope.close()
            kube.api_client.close()  # type: ignore[no-untyped-call]


@pytest.fixture
def cluster(plane: tuple[ControlPlane, ClusterScope], monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    """An empty cluster (what the test creates is deleted after it), the handler's environment pointing at it."""
    started, scope = plane
    mark = scope.mark()
    kube = started.kube(ADMIN)
    lambda_env(monkeypatch, started.kubeconfig)
    try:
        yield Cluster(started, kube)
    finally:
        scope.reset(mark)
        kube.api_client.close()  # type: ignore[no-untyped-call]


def test_first_install_then_the_same_again_changes_nothing(
    cluster: Cluster, installer: Installer, tmp_path: Path
) -> None:
    kube = cluster.kube
    for crd in kube.list_items(CRDS):  # left by an earlier test of this module
        kube.delete(CRDS, crd["metadata"]["name"])
    deadline = time.monotonic() + 60
    while kube.list_items(CRDS) and time.monotonic() < deadline:
        time.sleep(0.2)
    objects = manifests(outputs())
    assert live(kube) == {}

    body = installer.ok("Create")
    assert body["PhysicalResourceId"] == f"nodeflow-install/{CLUSTER}"
    assert body["Reason"] == f"installed: {len(objects)} created, 0 applied, 0 pruned"
    applied = live(kube)
    assert set(applied) == expected_refs(objects)
    for crd in kube.list_items(CRDS):  # waited for: custom resources of them can be created at once
        assert {"type": "Established", "status": "True"}.items() <= next(
            c for c in crd["status"]["conditions"] if c["type"] == "Established"
        ).items()
    kube.create(
        NODE_CLAIMS,
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": "probe"},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
            },
        },
    )
    kube.delete(NODE_CLAIMS, "probe")

    # The same request again (CloudFormation retries, or a deploy that changed nothing here): no write at all.
    again = installer.ok("Update", old=installer.properties(), physical=body["PhysicalResourceId"])
    assert again["Reason"] == f"installed: 0 created, {len(objects)} applied, 0 pruned"
    assert live(kube) == applied

    # One source: what kubectl kustomize builds from install-manifests' directory is what the stack applied.
    render(outputs(), tmp_path / "gitops")
    proc = subprocess.run(
        [str(cluster.plane.binaries.paths["kubectl"]), "kustomize", str(tmp_path / "gitops")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    built = [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert sorted(json.dumps(d, sort_keys=True) for d in built) == sorted(
        json.dumps(d, sort_keys=True) for d in objects
    )
    for doc in built:
        ref = ref_of(doc)
        stored = kube.get(resource_of(ref.api_version, ref.kind), ref.name, ref.namespace or None)
        assert contained(doc, stored) == [], ref
        owners = {m["manager"] for m in stored["metadata"]["managedFields"] if m["operation"] == "Apply"}
        assert owners == OURS, ref


def test_apply_returns_once_a_new_crd_is_served(cluster: Cluster) -> None:
    """A custom resource can be created the moment the set that brings its CRD is applied."""
    group = f"{cluster.name('w')}.example.test"
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Cluster",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
            ],
        },
    }
    applied = apply_all(cluster.kube, [crd], field_manager="nodeflow-install", time_left=lambda: 30.0)
    assert applied.created == [ref_of(crd)]
    cluster.kube.request(
        "POST",
        f"/apis/{group}/v1/widgets",
        body={"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "one"}},
    )


def test_bad_requests_are_answered_failed_with_the_field(cluster: Cluster, installer: Installer) -> None:
    props = installer.properties()
    del props["WebhookUrl"]
    body = installer.send("Create", props)
    assert (body["Status"], body["Reason"]) == ("FAILED", "property WebhookUrl is missing")
    assert body["PhysicalResourceId"] == "InstallInCluster/not-installed"
    # CloudFormation's rollback deletes the failed resource: nothing to do, and it says so.
    gone = installer.ok("Delete", props, physical=body["PhysicalResourceId"])
    assert gone["Reason"] == "the install had failed: nothing to remove"

    body = installer.send("Create", installer.properties(ClusterName="other"))
    assert body["Reason"] == "property ClusterName 'other' is not this function's cluster 'shop'"
    body = installer.send("Create", installer.properties(SourceDigest="0" * 32))
    assert body["Status"] == "FAILED"
    assert f"the function's install files (digest {installer.digest})" in body["Reason"]


# --------------------------------------------------------------------------------------------- upgrade, delete


def test_upgrade_prunes_what_the_new_version_no_longer_has(
    cluster: Cluster, installer: Installer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    kube = cluster.kube
    first = installer.ok("Create")
    before = live(kube)

    # The next version: no Service, the agent's code changed (a new ConfigMap), one ClusterRole dropped.
    new = tmp_path / "bundle"
    for rel in ("agent/manifests", "agent/nodeflow_agent", "infra/cluster"):
        shutil.copytree(REPO / rel, new / rel, ignore=shutil.ignore_patterns("__pycache__", "monitoring"))
    (new / "agent/manifests/50-service.yaml").unlink()
    (new / "agent/nodeflow_agent/log.py").write_text((new / "agent/nodeflow_agent/log.py").read_text() + "\n# v2\n")
    rbac = [d for d in yaml.safe_load_all((new / "infra/cluster/controller-rbac.yaml").read_text()) if d]
    rbac = [d for d in rbac if d["metadata"]["name"] != "nodeflow-replace"]
    (new / "infra/cluster/controller-rbac.yaml").write_text(yaml.safe_dump_all(rbac))
    monkeypatch.setattr("nodeflow.install.BUNDLED_ROOT", new)  # where the Lambda's code asset has them
    upgraded = Installer(installer.responses, digest=source_digest(new))

    body = upgraded.ok("Update", old=installer.properties(), physical=first["PhysicalResourceId"])
    after = live(kube)
    assert set(after) == expected_refs(manifests(outputs()))
    gone = set(before) - set(after)
    old_code = next(r for r in before if r.startswith("ConfigMap nodeflow/nodeflow-agent-code-"))
    assert gone == {
        "Service nodeflow/nodeflow-agent",
        "ClusterRole nodeflow-replace",
        "ClusterRoleBinding nodeflow-replace",
        old_code,
    }
    assert body["Reason"] == f"installed: 1 created, {len(after) - 1} applied, 4 pruned"
    deployment = kube.get(resource_of("apps/v1", "Deployment"), "nodeflow-agent", "nodeflow")
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    assert {v["configMap"]["name"] for v in volumes if "configMap" in v} == {
        r.split("/")[-1] for r in after if r.startswith("ConfigMap ")
    }

    # CloudFormation rolling that update back: the old files are not in this code; the cluster keeps the new set.
    rollback = upgraded.ok(
        "Update", installer.properties(), old=upgraded.properties(), physical=body["PhysicalResourceId"]
    )
    assert rollback["Reason"].startswith(f"rollback: the files of digest {installer.digest} are not in this code")
    assert live(kube) == after


def nodeclaim(kube: KubeClient, name: str) -> None:
    kube.create(
        NODE_CLAIMS,
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
            },
        },
    )


def test_delete_is_refused_while_nodeflow_manages_nodeclaims(cluster: Cluster, installer: Installer) -> None:
    kube = cluster.kube
    physical = installer.ok("Create")["PhysicalResourceId"]
    installed = live(kube)
    claim = cluster.name("default")
    nodeclaim(kube, claim)

    refused = installer.send("Delete", physical=physical)
    assert refused["Status"] == "FAILED"
    assert refused["PhysicalResourceId"] == physical
    assert f"it still manages 1 NodeClaims ({claim})" in refused["Reason"]
    assert "kubectl delete nodepools --all" in refused["Reason"]
    assert "kubectl delete nodeclaims --all" in refused["Reason"]
    assert live(kube) == installed  # nothing removed

    kube.delete(NODE_CLAIMS, claim)
    body = installer.ok("Delete", physical=physical)
    crds = {r for r in installed if r.startswith("CustomResourceDefinition ")}
    assert body["Reason"] == f"removed {len(installed) - len(crds)} objects (CRDs kept)"
    # The namespace is being deleted by the namespace controller (or already gone); the CRDs stay.
    assert set(live(kube)) - {"Namespace nodeflow"} == crds
    assert kube.list_items(resource_of("v1", "ServiceAccount"), label_selector=INSTALL_SELECTOR) == []

    # Installing again right away waits for the old namespace to be gone.
    again = installer.ok("Create")
    assert set(live(kube)) == set(installed)
    assert again["PhysicalResourceId"] == physical

    # Told to leave the NodeClaims to another controller (moving back to Karpenter): removed, the NodeClaim stays.
    other = cluster.name("karpenter")
    nodeclaim(kube, other)
    kube.patch(NAMESPACES, "nodeflow", {"metadata": {"annotations": {KEEP_ANNOTATION: KEEP_VALUE}}})
    installer.ok("Delete", physical=physical)
    assert kube.get(NODE_CLAIMS, other)["metadata"]["name"] == other
    assert kube.list_items(resource_of("apps/v1", "Deployment"), label_selector=INSTALL_SELECTOR) == []


# --------------------------------------------------------------------------------------------- the agent's rollout


def play_kubelet(kube: KubeClient, node: str, stop: threading.Event) -> None:
    """The one kubelet the agent's pod needs: bind each pod of namespace nodeflow to ``node`` (as the scheduler would,
    without racing the node lifecycle controller's not-ready taint of a node just made) and report it Running and
    Ready."""
    while not stop.wait(0.2):
        for pod in kube.list_items(PODS, namespace="nodeflow"):
            name = pod["metadata"]["name"]
            if pod.get("status", {}).get("phase") == "Running" or pod["metadata"].get("deletionTimestamp"):
                continue
            now = pod["metadata"]["creationTimestamp"]
            containers = [
                {
                    "name": c["name"],
                    "image": c["image"],
                    "imageID": "",
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": now}},
                }
                for c in pod["spec"]["containers"]
            ]
            conditions = [
                {"type": t, "status": "True", "lastTransitionTime": now}
                for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
            ]
            try:
                if not pod["spec"].get("nodeName"):
                    kube.request(
                        "POST",
                        PODS.path(name, "nodeflow", "binding"),
                        body={
                            "apiVersion": "v1",
                            "kind": "Binding",
                            "metadata": {"name": name},
                            "target": {"kind": "Node", "name": node},
                        },
                    )
                kube.patch(
                    PODS,
                    name,
                    {"status": {"phase": "Running", "conditions": conditions, "containerStatuses": containers}},
                    namespace="nodeflow",
                    subresource="status",
                )
            except KubeError:  # deleted meanwhile, or bound by the scheduler first: the next round sees it
                continue


def test_the_install_waits_for_the_agent_and_says_why_it_cannot_start(cluster: Cluster, installer: Installer) -> None:
    kube = cluster.kube
    # No node the agent may run on: the first install fails with the scheduler's reason, and undoes itself.
    failed = installer.send("Create", installer.properties(AgentReadySeconds="3"))
    assert failed["Status"] == "FAILED"
    assert failed["PhysicalResourceId"] == "InstallInCluster/not-installed"
    assert "Deployment nodeflow/nodeflow-agent did not roll out" in failed["Reason"]
    assert "not scheduled: " in failed["Reason"]
    assert "objects this install created were deleted again" in failed["Reason"]
    left = {r for r in live(kube) if not r.startswith(("CustomResourceDefinition ", "Namespace "))}
    assert left == set()

    # A node for it (and a kubelet): the install returns once the agent is available.
    node = cluster.name("system")
    kube.create(
        NODES,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node, "labels": {"kubernetes.io/os": "linux", "kubernetes.io/hostname": node}},
            "status": {
                "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            },
        },
    )
    kube.patch(
        NODES,
        node,
        {
            "status": {
                "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"}],
            }
        },
        subresource="status",
    )
    stop = threading.Event()
    kubelet = threading.Thread(target=play_kubelet, args=(kube, node, stop), daemon=True)
    kubelet.start()
    try:
        body = installer.ok("Create", installer.properties(AgentReadySeconds="60"))
    finally:
        stop.set()
        kubelet.join()
    deployment = kube.get(resource_of("apps/v1", "Deployment"), "nodeflow-agent", "nodeflow")
    assert deployment["status"]["availableReplicas"] == 1
    assert body["PhysicalResourceId"] == f"nodeflow-install/{CLUSTER}"


def test_hmac_mode_installs_the_agents_secret(cluster: Cluster, installer: Installer) -> None:
    """From Secrets Manager (moto), as the Secret the Deployment mounts; a switch back to iam prunes it."""
    from moto import mock_aws

    kube = cluster.kube
    with mock_aws():
        import boto3

        arn = boto3.client("secretsmanager", region_name=REGION).create_secret(
            Name=f"nodeflow-{CLUSTER}-webhook-hmac", SecretString="s3cret-one\ns3cret-two"
        )["ARN"]
        physical = installer.ok("Create", installer.properties(HmacSecretArn=arn))["PhysicalResourceId"]
    secret = kube.get(resource_of("v1", "Secret"), "nodeflow-agent-hmac", "nodeflow")
    assert base64.b64decode(secret["data"]["secret"]).decode() == "s3cret-one\ns3cret-two"
    deployment = kube.get(resource_of("apps/v1", "Deployment"), "nodeflow-agent", "nodeflow")
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["AUTH_MODE"] == "hmac"
    installer.ok("Update", old=installer.properties(HmacSecretArn=arn), physical=physical)
    with pytest.raises(NotFound):
        kube.get(resource_of("v1", "Secret"), "nodeflow-agent-hmac", "nodeflow")


# --------------------------------------------------------------------------------------------- access, the cluster


def test_the_install_waits_until_its_access_entry_is_honoured(cluster: Cluster) -> None:
    """A new EKS access entry answers 401/403 for a few seconds: the installer retries, then gives up naming it."""
    kube = cluster.plane.kube("installer")
    bindings = resource_of("rbac.authorization.k8s.io/v1", "ClusterRoleBinding")
    with pytest.raises(InstallFailed, match=r"^the install role cannot use the cluster's API after 1 s .*HTTP 403"):
        wait_for_access(kube, time_left=lambda: 60.0, patience=1.0)
    with pytest.raises(InstallFailed, match=r"InstallerAccessEntry\) is not honoured$"):
        wait_for_access(kube, time_left=lambda: 60.0, patience=0.0)

    def grant() -> None:
        time.sleep(1.5)
        cluster.kube.create(
            bindings,
            {
                "metadata": {"name": cluster.name("installer")},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "nodeflow-installer-role"}
                ],
            },
        )

    granting = threading.Thread(target=grant)
    granting.start()
    started = time.monotonic()
    wait_for_access(kube, time_left=lambda: 60.0)
    granting.join()
    assert 1.5 <= time.monotonic() - started < 10
    kube.api_client.close()  # type: ignore[no-untyped-call]


@pytest.fixture
def eks(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """moto's EKS, with the cluster's authentication mode settable (moto does not model accessConfig)."""
    from moto import mock_aws

    with mock_aws():
        import boto3

        yield boto3.client("eks", region_name=REGION)


def eks_cluster(eks: Any, mode: str | None) -> None:
    from moto.eks.models import eks_backends

    eks.create_cluster(name=CLUSTER, roleArn="arn:aws:iam::123456789012:role/eks", resourcesVpcConfig={})
    if mode is not None:
        eks_backends["123456789012"][REGION].clusters[CLUSTER].access_config = {"authenticationMode": mode}


@pytest.mark.parametrize(
    ("mode", "entries", "outcome"),
    [
        ("API_AND_CONFIG_MAP", True, "SUCCESS"),
        ("API", True, "SUCCESS"),
        ("CONFIG_MAP", True, "FAILED"),
        ("CONFIG_MAP", False, "SUCCESS"),  # no access entries in the stack: aws-auth is fine
        (None, True, "FAILED"),  # no such cluster
    ],
)
def test_the_cluster_check_says_what_to_run_when_access_entries_cannot_work(
    installer: Installer,
    eks: Any,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    mode: str | None,
    entries: bool,
    outcome: str,
) -> None:
    lambda_env(monkeypatch, tmp_path / "unused.kubeconfig")
    if mode is not None:
        eks_cluster(eks, mode)
    props = {"ServiceToken": "arn:x", "ClusterName": CLUSTER, "AccessEntries": "true" if entries else "false"}
    body = installer.send("Create", props, resource_type=handler_module.CHECK_TYPE)
    assert body["Status"] == outcome, body["Reason"]
    if outcome == "SUCCESS":
        assert body["Reason"] == f"cluster {CLUSTER} is ACTIVE, authentication mode {mode}"
        assert body["PhysicalResourceId"] == f"nodeflow-cluster-check/{CLUSTER}"
    elif mode is None:
        assert body["Reason"] == (
            f"EKS cluster {CLUSTER!r} was not found in {REGION}: check -c clusterName and the region you deploy to"
        )
    else:
        assert body["Reason"].startswith(f"EKS cluster {CLUSTER!r} has authentication mode CONFIG_MAP")
        assert (
            f"aws eks update-cluster-config --name {CLUSTER} --region {REGION} "
            "--access-config authenticationMode=API_AND_CONFIG_MAP" in body["Reason"]
        )
    deleted = installer.ok(
        "Delete", props, physical=body["PhysicalResourceId"], resource_type=handler_module.CHECK_TYPE
    )
    assert deleted["Reason"] == "nothing to delete"


def unreachable_kubeconfig(path: Path) -> Path:
    """A cluster whose API server is gone (nothing listens on 127.0.0.1:1)."""
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "gone", "cluster": {"server": "http://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "u"}}],
                "current-context": "gone",
            }
        )
    )
    return path


def test_destroy_after_the_cluster_was_deleted_goes_through(
    installer: Installer, eks: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The API cannot be reached: with the EKS cluster gone there is nothing to remove; while it exists, Delete fails
    (it cannot check for NodeClaims) rather than pretend."""
    lambda_env(monkeypatch, unreachable_kubeconfig(tmp_path / "gone.kubeconfig"))
    physical = f"nodeflow-install/{CLUSTER}"
    gone = installer.ok("Delete", physical=physical)
    assert gone["Reason"] == "the EKS cluster is gone: nothing to remove"
    # Without a kubeconfig the function asks EKS for the endpoint first, which fails the same way.
    monkeypatch.delenv("KUBECONFIG")
    runtime.reset()
    assert installer.ok("Delete", physical=physical)["Reason"] == "the EKS cluster is gone: nothing to remove"
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "gone.kubeconfig"))
    eks_cluster(eks, "API")
    runtime.reset()
    body = installer.send("Delete", physical=physical)
    assert body["Status"] == "FAILED"
    assert body["Reason"].startswith("the cluster's API cannot be reached to remove nodeflow: ")
