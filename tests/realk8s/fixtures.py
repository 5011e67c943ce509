"""Pytest fixtures for tests against the real control plane (sandbox/controlplane).

- ``control_plane`` (session: one per xdist worker): etcd, kube-apiserver, kube-controller-manager and
  kube-scheduler with nodeflow's CRDs. The node lifecycle controller is quick (``NODE_MONITOR_GRACE_PERIOD``,
  ``NODE_MONITOR_PERIOD``), so a Node whose kubelet stops turns unreachable within seconds. Missing binaries are
  an error, not a skip.
- ``audit_log`` (session): the API server's audit log of the handlers' and the agent's requests
  (``sandbox.controlplane.audit``: what they asked, as authorized; which grants of the install went unused).
- ``real_kube_server`` (session): a ``RealKubeAPI`` over it (``sandbox.controlplane.facade``): the fault proxy,
  the install's RBAC applied, the baseline marked.
- ``real_kube`` (function): that facade, reset first (what earlier tests created is deleted, the proxy's log and
  hook cleared); it is the functional tests' ``kube_server`` (tests/functional/conftest.py).
- ``admission`` (session): ``tests.realk8s.admission.Admission``: what the server says of a custom resource in a
  dry-run create or update (the CRDs' OpenAPI schemas, list types and CEL rules, as kube-apiserver runs them).
- ``cluster_scope`` (session): the kinds to reset between tests (``sandbox.controlplane.isolation``).
- ``cluster`` (function): a ``TestCluster`` with a namespace of the test's own (and its ``default``
  ServiceAccount, so pods are admitted at once) and unique names; whatever the test created is deleted when it
  ends.

In a conftest: ``from tests.realk8s.fixtures import cluster, cluster_scope, control_plane  # noqa: F401`` (and
``real_kube, real_kube_server``).
"""

from __future__ import annotations

import contextlib
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from _pytest.tmpdir import TempPathFactory

from nodeflow.kube.client import NAMESPACES, KubeClient, Resource
from nodeflow.kube.errors import AlreadyExists
from sandbox.controlplane import ADMIN, ControlPlane
from sandbox.controlplane.audit import AuditLog, apiserver_args
from sandbox.controlplane.facade import RealKubeAPI
from sandbox.controlplane.isolation import ClusterScope
from tests.realk8s.admission import Admission, crd_resources

NODE_MONITOR_GRACE_PERIOD = 8.0
NODE_MONITOR_PERIOD = 1.0
#: kube-scheduler retries an unschedulable pod after at most this (its default backoff doubles up to 10 s): a pod that
#: failed on a Node still tainted unregistered / not-ready is tried again within a second of the Node turning Ready
SCHEDULER_MAX_BACKOFF = 1.0
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount", True)
#: whose requests the audit log records: the handlers' impersonating token, the agent's ServiceAccount
AUDITED = ("nodeflow-test-impersonator", "system:serviceaccount:nodeflow:nodeflow-agent")


@dataclass
class TestCluster:
    """One test's view of the shared control plane."""

    plane: ControlPlane
    kube: KubeClient  # as the cluster admin
    namespace: str
    clients: list[KubeClient] = field(default_factory=list)

    __test__ = False  # not a test class, whatever pytest thinks of its name

    def name(self, prefix: str) -> str:
        """A name no other test uses (DNS-1123)."""
        return f"{prefix}-{secrets.token_hex(3)}"

    def kube_as(self, identity: str) -> KubeClient:
        """A client authenticated as one of the control plane's identities (closed after the test)."""
        client = self.plane.kube(identity)
        self.clients.append(client)
        return client

    def new_namespace(self, prefix: str = "t") -> str:
        name = self.name(prefix)
        self.kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        # The controller-manager creates it too, a moment later; pods are refused until it exists.
        with contextlib.suppress(AlreadyExists):
            self.kube.create(SERVICE_ACCOUNTS, {"metadata": {"name": "default"}}, namespace=name)
        return name


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: TempPathFactory) -> Iterator[ControlPlane]:
    plane = ControlPlane(
        controllers=True,
        node_monitor_grace_period=NODE_MONITOR_GRACE_PERIOD,
        node_monitor_period=NODE_MONITOR_PERIOD,
        scheduler_max_backoff=SCHEDULER_MAX_BACKOFF,
        extra_args={"kube-apiserver": apiserver_args(tmp_path_factory.mktemp("audit"), AUDITED)},
    )
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def audit_log(control_plane: ControlPlane) -> AuditLog:
    return AuditLog.of(control_plane)


@pytest.fixture(scope="session")
def admission(control_plane: ControlPlane) -> Iterator[Admission]:
    kube = control_plane.kube(ADMIN)
    try:
        yield Admission(kube, crd_resources())
    finally:
        kube.api_client.close()  # type: ignore[no-untyped-call]


@pytest.fixture(scope="session")
def real_kube_server(control_plane: ControlPlane) -> Iterator[RealKubeAPI]:
    facade = RealKubeAPI(control_plane).start()
    try:
        yield facade
    finally:
        facade.stop()


@pytest.fixture
def real_kube(real_kube_server: RealKubeAPI) -> RealKubeAPI:
    real_kube_server.reset()
    return real_kube_server


@pytest.fixture(scope="session")
def cluster_scope(real_kube_server: RealKubeAPI) -> ClusterScope:
    assert real_kube_server.scope is not None
    return real_kube_server.scope


@pytest.fixture
def cluster(control_plane: ControlPlane, cluster_scope: ClusterScope, request: Any) -> Iterator[TestCluster]:
    mark = cluster_scope.mark()
    kube = control_plane.kube(ADMIN)
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-") or "t"
    view = TestCluster(control_plane, kube, "")
    view.namespace = view.new_namespace(slug)
    try:
        yield view
    finally:
        cluster_scope.reset(mark)
        for client in [kube, *view.clients]:
            client.api_client.close()  # type: ignore[no-untyped-call]
