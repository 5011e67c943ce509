"""A real Kubernetes control plane on 127.0.0.1: etcd and kube-apiserver, and with ``controllers=True``
kube-controller-manager and kube-scheduler too.

What it decides:

- Everything binds 127.0.0.1 on free ports; etcd keeps its data in a scratch folder on tmpfs with
  ``--unsafe-no-fsync`` (nothing here must survive the process).
- Certificates are made at start (``pki.py``); authentication is by static bearer tokens (``tokens.csv``):
  ``admin`` is in ``system:masters``; each ``Identity`` gets its own token and kubeconfig; identities with
  ``impersonate=True`` are bound to a ClusterRole that may only impersonate. Authorization is RBAC alone
  (``--authorization-mode=RBAC``), so what an identity may do is what its (Cluster)RoleBindings grant.
- kube-controller-manager runs as ``system:kube-controller-manager`` with ``--use-service-account-credentials``,
  so each controller acts with its own ``system:controller:*`` role, as kubeadm sets it up; kube-scheduler runs as
  ``system:kube-scheduler``. Both talk to the API server with a raised client rate limit (scale tests create
  thousands of pods). ``scheduler_max_backoff`` caps how long kube-scheduler waits before it tries an unschedulable
  pod again after a cluster change (10 s by default, doubling from 1 s): the demo's pods are bound as soon as their
  node is ready.
- The simulated kubelets' identity (``KUBELET``) is in ``system:nodes``, which is bound to the ``system:node``
  ClusterRole (there is no Node authorizer: the RBAC role alone decides).
- nodeflow's CRDs (agent/manifests/crds) are installed and Established before ``start()`` returns; with
  controllers, so is the ``default`` ServiceAccount of ``default`` (pods are refused without it).
- ``stop()`` stops the processes in reverse order and removes the scratch folder; it also runs at interpreter
  exit and on SIGTERM (when no one else handles that signal); a ``kill -9`` of the owner leaves the children to
  ``PR_SET_PDEATHSIG`` (``processes.py``).
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import secrets
import shutil
import signal
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import yaml

from sandbox.controlplane.binaries import REPO, Binaries, find_binaries
from sandbox.controlplane.pki import Pki, make_pki
from sandbox.controlplane.processes import Child, free_ports, scratch_dir

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from nodeflow.kube.client import KubeClient

__all__ = ["ADMIN", "IMPERSONATOR", "KUBELET", "ControlPlane", "ControlPlaneError", "Identity"]

CRD_DIR = REPO / "agent" / "manifests" / "crds"
SERVICE_CIDR = "10.0.0.0/24"
ADMIN = "admin"
KUBELET = "kubelet"
IMPERSONATOR = "impersonator"
IMPERSONATOR_ROLE = "nodeflow-test:impersonator"
KUBELET_BINDING = "nodeflow-test:simulated-kubelets"
START_ATTEMPTS = 3
PORT_TAKEN = "address already in use"
CONTROLLERS = "*,-node-ipam-controller,-cloud-node-lifecycle-controller,-service-lb-controller,-node-route-controller"


class ControlPlaneError(RuntimeError):
    """The control plane did not start (the message has the failing process's last log lines)."""


@dataclass(frozen=True)
class Identity:
    """Who a token authenticates as; ``impersonate``: may impersonate users, groups and service accounts
    (and nothing else)."""

    user: str
    groups: tuple[str, ...] = ()
    impersonate: bool = False


DEFAULT_IDENTITIES: Mapping[str, Identity] = {
    KUBELET: Identity("system:node:simulated-kubelet", ("system:nodes",)),
    IMPERSONATOR: Identity("nodeflow-test-impersonator", impersonate=True),
}


COMPONENT_IDENTITIES: Mapping[str, Identity] = {
    "kube-controller-manager": Identity("system:kube-controller-manager"),
    "kube-scheduler": Identity("system:kube-scheduler"),
}


def _duration(seconds: float) -> str:
    return f"{int(seconds * 1000)}ms"


class ControlPlane:
    """Start with ``start()`` (or ``with ControlPlane() as cp:``); ``url``, ``kubeconfig`` (admin),
    ``kubeconfig_for(name)``, ``token_for(name)``, ``api_client(name)``, ``kube(name)``; ``stop()``."""

    def __init__(
        self,
        *,
        controllers: bool = False,
        binaries: Binaries | None = None,
        identities: Mapping[str, Identity] = DEFAULT_IDENTITIES,
        crds: Sequence[Path] | None = None,
        node_monitor_grace_period: float | None = None,
        node_monitor_period: float | None = None,
        client_qps: int = 200,
        scheduler_max_backoff: float | None = None,
        extra_args: Mapping[str, Sequence[str]] | None = None,
        start_timeout: float = 90.0,
        log: Callable[[str], None] = lambda message: None,
    ) -> None:
        if ADMIN in identities:
            raise ValueError(f"identity name {ADMIN!r} is reserved for the cluster admin")
        self.controllers = controllers
        self._binaries = binaries
        self.identities: dict[str, Identity] = {ADMIN: Identity("nodeflow-test-admin", ("system:masters",))}
        self.identities.update(identities)
        if controllers:  # their tokens must be in tokens.csv, which the API server reads once
            self.identities.update(COMPONENT_IDENTITIES)
        self.crd_files = sorted(CRD_DIR.glob("*.yaml")) if crds is None else list(crds)
        self.node_monitor_grace_period = node_monitor_grace_period
        self.node_monitor_period = node_monitor_period
        self.client_qps = client_qps
        self.scheduler_max_backoff = scheduler_max_backoff
        self.extra_args = dict(extra_args or {})
        self.start_timeout = start_timeout
        self.log = log
        self.processes: dict[str, Child] = {}
        self.workdir: Path | None = None
        self.pki: Pki | None = None
        self.url = ""
        self.ports: dict[str, int] = {}
        self.tokens: dict[str, str] = {}
        self.timings: dict[str, float] = {}
        self._stopped = threading.Event()

    # --------------------------------------------------------------------------------------------- paths

    @property
    def binaries(self) -> Binaries:
        if self._binaries is None:
            self._binaries = find_binaries(log=self.log)
        return self._binaries

    def _dir(self) -> Path:
        if self.workdir is None:
            raise ControlPlaneError("the control plane is not started")
        return self.workdir

    @property
    def kubeconfig(self) -> Path:
        """The admin's kubeconfig (``kubectl --kubeconfig``)."""
        return self.kubeconfig_for(ADMIN)

    def kubeconfig_for(self, name: str) -> Path:
        path = self._dir() / "kubeconfigs" / f"{name}.kubeconfig"
        if not path.is_file():
            raise KeyError(f"no identity {name!r} (have {', '.join(sorted(self.identities))})")
        return path

    def token_for(self, name: str = ADMIN) -> str:
        return self.tokens[name]

    @property
    def ca_file(self) -> Path:
        if self.pki is None:
            raise ControlPlaneError("the control plane is not started")
        return self.pki.ca_cert

    # --------------------------------------------------------------------------------------------- clients

    def api_client(self, name: str = ADMIN) -> ApiClient:
        """An official ``kubernetes`` ApiClient authenticated as identity ``name`` (close it when done)."""
        import kubernetes.client

        config = kubernetes.client.Configuration(host=self.url)
        config.ssl_ca_cert = str(self.ca_file)
        config.api_key = {"BearerToken": self.token_for(name)}
        config.api_key_prefix = {"BearerToken": "Bearer"}
        return kubernetes.client.ApiClient(config)

    def kube(self, name: str = ADMIN) -> KubeClient:
        """nodeflow's ``KubeClient`` as identity ``name``."""
        from nodeflow.kube.client import KubeClient

        return KubeClient(self.api_client(name))

    # --------------------------------------------------------------------------------------------- start

    def start(self) -> ControlPlane:
        """Start (a no-op when started); a port taken by someone else between its choice and its use means one
        more try with new ports."""
        if self.workdir is not None:
            return self
        began = time.monotonic()
        binaries = self.binaries
        if self.controllers:  # fail before starting anything when they are not available
            binaries.path("kube-controller-manager")
            binaries.path("kube-scheduler")
        for attempt in range(1, START_ATTEMPTS + 1):
            self._stopped.clear()
            _register(self)
            try:
                self._start_once(began)
                break
            except ControlPlaneError as exc:
                self.stop()
                if PORT_TAKEN not in str(exc) or attempt == START_ATTEMPTS:
                    raise
                line = next(x for x in str(exc).splitlines() if PORT_TAKEN in x)
                self.log(f"a port was taken meanwhile, starting again: {line.strip()[-200:]}")
            except BaseException:
                self.stop()
                raise
        self.timings["ready"] = time.monotonic() - began
        self.log(f"control plane ready at {self.url} in {self.timings['ready']:.1f} s (kubeconfig {self.kubeconfig})")
        return self

    def _start_once(self, began: float) -> None:
        self.workdir = scratch_dir()
        self.pki = make_pki(self.workdir / "pki", service_ip=SERVICE_CIDR.rsplit(".", 1)[0] + ".1")
        self._write_auth()
        self._start_etcd()
        self._start_apiserver()
        self._wait_ready(began)
        self.timings["apiserver_ready"] = time.monotonic() - began
        if self.controllers:  # they need nothing below: start them first, they are up meanwhile
            self._start_controllers()
        kube = self.kube()
        try:
            self._bootstrap(kube)
            self._install_crds(kube)
            self.timings["crds"] = time.monotonic() - began
            if self.controllers:
                self._wait_default_service_account(kube, began)
        finally:
            kube.api_client.close()  # type: ignore[no-untyped-call]

    def _write_auth(self) -> None:
        folder = self._dir() / "kubeconfigs"
        folder.mkdir()
        lines = []
        for name, who in self.identities.items():
            token = self.tokens[name] = secrets.token_hex(24)
            groups = ",".join(who.groups)
            lines.append(f'{token},{who.user},{who.user},"{groups}"')
        (self._dir() / "tokens.csv").write_text("\n".join(lines) + "\n")
        (self._dir() / "tokens.csv").chmod(0o600)

    def _write_kubeconfigs(self) -> None:
        ca = base64.b64encode(self.ca_file.read_bytes()).decode()
        for name in self.identities:
            doc = {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "nodeflow-test", "cluster": {"server": self.url, "certificate-authority-data": ca}}
                ],
                "users": [{"name": name, "user": {"token": self.tokens[name]}}],
                "contexts": [
                    {"name": name, "context": {"cluster": "nodeflow-test", "user": name, "namespace": "default"}}
                ],
                "current-context": name,
            }
            path = self._dir() / "kubeconfigs" / f"{name}.kubeconfig"
            path.write_text(json.dumps(doc, indent=2) + "\n")
            path.chmod(0o600)

    def _spawn(self, name: str, args: list[str]) -> Child:
        child = Child(
            name, [str(self.binaries.path(name)), *args, *self.extra_args.get(name, ())], self._dir() / f"{name}.log"
        )
        self.processes[name] = child
        return child

    def _start_etcd(self) -> None:
        client, peer, apiserver = free_ports(3)
        self.ports.update(etcd=client, etcd_peer=peer, apiserver=apiserver)
        self._spawn(
            "etcd",
            [
                "--name=nodeflow-test",
                f"--data-dir={self._dir() / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{client}",
                f"--advertise-client-urls=http://127.0.0.1:{client}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=nodeflow-test=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )

    def _start_apiserver(self) -> None:
        pki = self.pki
        assert pki is not None
        port = self.ports["apiserver"]
        self.url = f"https://127.0.0.1:{port}"
        self._write_kubeconfigs()
        self._spawn(
            "kube-apiserver",
            [
                f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={port}",
                f"--tls-cert-file={pki.serving_cert}",
                f"--tls-private-key-file={pki.serving_key}",
                f"--client-ca-file={pki.ca_cert}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                f"--token-auth-file={self._dir() / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--allow-privileged=true",
                "--profiling=false",
            ],
        )

    def _start_controllers(self) -> None:
        pki = self.pki
        assert pki is not None
        qps = [f"--kube-api-qps={self.client_qps}", f"--kube-api-burst={self.client_qps * 2}"]
        monitor = []
        if self.node_monitor_grace_period is not None:
            monitor.append(f"--node-monitor-grace-period={_duration(self.node_monitor_grace_period)}")
        if self.node_monitor_period is not None:
            monitor.append(f"--node-monitor-period={_duration(self.node_monitor_period)}")
        self._spawn(
            "kube-controller-manager",
            [
                f"--kubeconfig={self.kubeconfig_for('kube-controller-manager')}",
                "--leader-elect=false",
                "--secure-port=0",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={pki.sa_key}",
                f"--root-ca-file={pki.ca_cert}",
                f"--cluster-signing-cert-file={pki.ca_cert}",
                f"--cluster-signing-key-file={pki.ca_key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--controllers={CONTROLLERS}",
                *qps,
                *monitor,
            ],
        )
        # With --config, kube-scheduler ignores --kubeconfig and the client flags: they are in the file.
        config: dict[str, object] = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {
                "kubeconfig": str(self.kubeconfig_for("kube-scheduler")),
                "qps": self.client_qps,
                "burst": self.client_qps * 2,
            },
            "leaderElection": {"leaderElect": False},
        }
        if self.scheduler_max_backoff is not None:
            seconds = max(1, int(self.scheduler_max_backoff))
            config.update(podInitialBackoffSeconds=1, podMaxBackoffSeconds=seconds)
        path = self._dir() / "kube-scheduler.yaml"
        path.write_text(json.dumps(config, indent=2) + "\n")
        self._spawn("kube-scheduler", [f"--config={path}", "--secure-port=0"])

    # --------------------------------------------------------------------------------------------- readiness

    def _check_alive(self) -> None:
        for child in self.processes.values():
            if not child.running():
                raise ControlPlaneError(
                    f"{child.name} exited with {child.popen.returncode} during start-up; its log ({child.log}):\n"
                    + child.tail()
                )

    def _wait_ready(self, began: float) -> None:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        request = urllib.request.Request(
            f"{self.url}/readyz", headers={"Authorization": f"Bearer {self.tokens[ADMIN]}"}
        )
        last = ""
        while time.monotonic() - began < self.start_timeout:
            self._check_alive()
            try:
                with urllib.request.urlopen(request, context=context, timeout=2) as response:
                    if response.status == 200:
                        return
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}: {exc.read()[-500:].decode(errors='replace')}"
            except OSError as exc:
                last = str(exc)
            time.sleep(0.05)
        raise ControlPlaneError(
            f"kube-apiserver not ready after {self.start_timeout:.0f} s ({last}); its log:\n"
            + self.processes["kube-apiserver"].tail()
        )

    def _wait_default_service_account(self, kube: KubeClient, began: float) -> None:
        from nodeflow.kube.client import Resource
        from nodeflow.kube.errors import NotFound

        accounts = Resource("", "v1", "serviceaccounts", "ServiceAccount", True)
        while time.monotonic() - began < self.start_timeout:
            self._check_alive()
            try:
                kube.get(accounts, "default", "default")
                return
            except NotFound:
                time.sleep(0.05)
        raise ControlPlaneError(
            "kube-controller-manager did not create the default ServiceAccount; its log:\n"
            + self.processes["kube-controller-manager"].tail()
        )

    # --------------------------------------------------------------------------------------------- objects

    def _bootstrap(self, kube: KubeClient) -> None:
        from nodeflow.kube.client import Resource

        roles = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False)
        bindings = Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False)
        kube.create(
            roles,
            {
                "metadata": {"name": IMPERSONATOR_ROLE},
                "rules": [
                    {"apiGroups": [""], "resources": ["users", "groups", "serviceaccounts"], "verbs": ["impersonate"]},
                    {
                        "apiGroups": ["authentication.k8s.io"],
                        "resources": ["userextras/*", "uids"],
                        "verbs": ["impersonate"],
                    },
                ],
            },
        )
        impersonators = [w.user for w in self.identities.values() if w.impersonate]
        if impersonators:
            kube.create(
                bindings,
                {
                    "metadata": {"name": IMPERSONATOR_ROLE},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": IMPERSONATOR_ROLE,
                    },
                    "subjects": [
                        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": u} for u in impersonators
                    ],
                },
            )
        # Simulated kubelets: what a kubelet may do, plus reading NodeClaims (a real one has them from its user data).
        kube.create(
            roles,
            {
                "metadata": {"name": KUBELET_BINDING},
                "rules": [
                    {"apiGroups": ["karpenter.sh"], "resources": ["nodeclaims"], "verbs": ["get", "list", "watch"]}
                ],
            },
        )
        for role in ("system:node", KUBELET_BINDING):
            kube.create(
                bindings,
                {
                    "metadata": {"name": f"{KUBELET_BINDING}:{role.rsplit(':', 1)[-1]}"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}],
                },
            )

    def _install_crds(self, kube: KubeClient) -> None:
        from nodeflow.kube.client import Resource

        crds = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False)
        names = []
        for path in self.crd_files:
            for doc in yaml.safe_load_all(path.read_text()):
                if doc:
                    kube.create(crds, doc)
                    names.append(doc["metadata"]["name"])
        deadline = time.monotonic() + self.start_timeout
        for name in names:
            while True:
                conditions = (kube.get(crds, name).get("status") or {}).get("conditions") or []
                if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
                    break
                if time.monotonic() > deadline:
                    raise ControlPlaneError(f"CRD {name} not Established: {conditions}")
                time.sleep(0.02)

    # --------------------------------------------------------------------------------------------- stop

    def stop(self) -> None:
        """Stop every process (reverse start order) and remove the scratch folder; safe to call twice."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        children = list(reversed(list(self.processes.values())))
        try:
            for child in children:
                child.stop()
        finally:  # also when interrupted meanwhile (a second Ctrl-C): the rest are killed, the folder goes
            for child in children:
                if child.running():
                    child.stop(grace=0)
            self.processes.clear()
            if self.workdir is not None:
                shutil.rmtree(self.workdir, ignore_errors=True)
                self.workdir = None
            _unregister(self)

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ------------------------------------------------------------------------------------------------- process exit

_RUNNING: set[ControlPlane] = set()
_RUNNING_LOCK = threading.Lock()
_SIGTERM_INSTALLED = False


def _stop_running() -> None:
    with _RUNNING_LOCK:
        planes = list(_RUNNING)
    for plane in planes:
        with contextlib.suppress(Exception):
            plane.stop()


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    _stop_running()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.raise_signal(signal.SIGTERM)


def _register(plane: ControlPlane) -> None:
    global _SIGTERM_INSTALLED
    with _RUNNING_LOCK:
        _RUNNING.add(plane)
        if not _SIGTERM_INSTALLED and threading.current_thread() is threading.main_thread():
            if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
                signal.signal(signal.SIGTERM, _on_sigterm)
            _SIGTERM_INSTALLED = True


def _unregister(plane: ControlPlane) -> None:
    with _RUNNING_LOCK:
        _RUNNING.discard(plane)


atexit.register(_stop_running)
