"""The layer tests use on the real control plane (sandbox/controlplane/facade.py, proxy.py, etcd.py): the fault
proxy forwards everything (impersonation and watches included), logs it and fails what a hook says, as the real
server words its errors; the facade seeds with status, stores what admission would refuse through etcd, compacts,
and reports RBAC denials."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infra.cluster_rbac import FUNCTION_GROUPS
from nodeflow.kube import errors as ke
from nodeflow.kube.client import (
    EC2_NODE_CLASSES,
    NODE_CLAIMS,
    NODE_POOLS,
    NODEFLOW_POLICIES,
    NODES,
    PODS,
    KubeClient,
)
from sandbox.controlplane.facade import RealKubeAPI, wait_for
from sandbox.controlplane.impersonation import Acting, ClientImpersonation, acting_as
from sandbox.controlplane.proxy import CutWatch, Delay, Drop, ExpireWatch, Fault, FaultProxy
from sandbox.informer import Informer
from tests.functional.kube.conftest import node, node_class, node_pool


@pytest.fixture
def kube(real_kube: RealKubeAPI) -> Iterator[KubeClient]:
    client = KubeClient(real_kube.api_client())
    yield client
    client.api_client.close()  # type: ignore[no-untyped-call]


# --- the proxy ---------------------------------------------------------------------------------------------


def test_requests_go_through_and_are_logged(real_kube: RealKubeAPI, kube: KubeClient) -> None:
    real_kube.create(node("log-node"))  # the test's own seeding: not through the proxy, not logged
    assert [n["metadata"]["name"] for n in kube.list_items(NODES)] == ["log-node"]
    kube.list_items(PODS, namespace="default", label_selector="app=web")
    assert real_kube.requests == [
        ("GET", "/api/v1/nodes", ""),
        ("GET", "/api/v1/namespaces/default/pods", "labelSelector=app%3Dweb"),
    ]
    assert real_kube.count("GET", "/api/v1/namespaces/default/pods", "app%3Dweb") == 1
    assert [(e.status, e.injected) for e in real_kube.exchanges] == [(200, False), (200, False)]


@pytest.mark.parametrize(
    ("fault", "error", "status"),
    [
        (Fault.internal(), ke.Unavailable, 500),
        (Fault.unavailable(), ke.Unavailable, 503),
        (Fault.conflict(), ke.Conflict, 409),
        (Fault.forbidden(), ke.Forbidden, 403),
        (Fault.gone(), ke.Gone, 410),
        (Fault.too_many_requests(retry_after=0), ke.TooManyRequests, 429),
    ],
)
def test_a_fault_is_answered_as_the_server_words_it(
    real_kube: RealKubeAPI, kube: KubeClient, fault: Fault, error: type[ke.KubeError], status: int
) -> None:
    real_kube.before_request = lambda method, path, query: fault if path == "/api/v1/nodes" else None
    with pytest.raises(error) as raised:
        kube.list_items(NODES)
    assert (type(raised.value), raised.value.status, raised.value.reason) == (error, status, fault.reason)
    assert raised.value.message == fault.message
    if status == 429:
        assert raised.value.retry_after == 0.0
    assert kube.list_items(PODS, namespace="default") == []  # other paths go through
    # the client (urllib3) itself retries a GET answered 429 with a Retry-After, three times, before giving up
    tries = 4 if status == 429 else 1
    assert [(e.status, e.injected) for e in real_kube.exchanges] == [(status, True)] * tries + [(200, False)]


def test_a_raised_fault_or_a_broken_hook_is_answered(real_kube: RealKubeAPI, kube: KubeClient) -> None:
    def hook(method: str, path: str, query: dict[str, str]) -> None:
        raise Fault(409, "AlreadyExists", "a Fault the hook raised")

    real_kube.before_request = hook
    with pytest.raises(ke.AlreadyExists, match="a Fault the hook raised"):
        kube.list_items(NODES)
    real_kube.before_request = lambda method, path, query: 1 / 0  # type: ignore[return-value]
    with pytest.raises(ke.Unavailable, match="proxy hook failed: ZeroDivisionError"):
        kube.list_items(NODES)
    assert [type(e) for e in real_kube.proxy.hook_errors] == [ZeroDivisionError]


def test_slow_answers_and_dropped_connections(real_kube: RealKubeAPI, kube: KubeClient) -> None:
    real_kube.before_request = lambda method, path, query: Delay(0.4)
    began = time.monotonic()
    assert kube.list_items(NODES) == []
    assert time.monotonic() - began >= 0.4
    real_kube.before_request = lambda method, path, query: Drop()
    with pytest.raises(ke.Unavailable):
        kube.list_items(NODES)
    assert real_kube.exchanges[-1].status == 0


def _watch_nodes(kube: KubeClient) -> tuple[Informer, list[tuple[float, str, str]]]:
    seen: list[tuple[float, str, str]] = []
    informer = Informer(
        kube, NODES, lambda kind, obj: seen.append((time.monotonic(), kind, obj["metadata"]["name"])), backoff=0.05
    )
    informer.start()
    assert informer.synced.wait(10)
    return informer, seen


def test_a_watch_streams_through_unbuffered(real_kube: RealKubeAPI, kube: KubeClient) -> None:
    informer, seen = _watch_nodes(kube)
    try:
        time.sleep(0.3)  # the watch is open
        began = time.monotonic()
        real_kube.create(node("streamed"))
        at = wait_for("the ADDED event", lambda: next((t for t, k, n in seen if (k, n) == ("ADDED", "streamed")), None))
        assert at - began < 1.0  # as it happened, not when the watch ends (300 s)
    finally:
        informer.stop()


def test_cut_and_expired_watches(real_kube: RealKubeAPI, kube: KubeClient) -> None:
    """The first watch breaks after one event, the second is expired at once: the informer watches again, then
    lists again, and misses nothing."""
    actions: list[CutWatch | ExpireWatch] = [CutWatch(events=1), ExpireWatch(events=0)]
    used: list[CutWatch | ExpireWatch] = []

    def next_watch(method: str, path: str, query: dict[str, str]) -> CutWatch | ExpireWatch | None:
        if query.get("watch") and actions:
            used.append(actions.pop(0))
            return used[-1]
        return None

    real_kube.before_request = next_watch
    informer, seen = _watch_nodes(kube)
    try:
        real_kube.create(node("before-cut"))
        wait_for("the second watch expired", lambda: informer.relists >= 1)
        real_kube.create(node("after-cut"))
        wait_for("both Nodes seen", lambda: {n for _, k, n in seen if k != "DELETED"} >= {"before-cut", "after-cut"})
        assert len(used) == 2
        assert informer.errors  # the cut connection
    finally:
        informer.stop()


def test_compact_expires_watches_from_older_resource_versions(real_kube: RealKubeAPI, kube: KubeClient) -> None:
    old = kube.create(NODES, node("compacted"))["metadata"]["resourceVersion"]
    kube.patch(NODES, "compacted", {"metadata": {"labels": {"x": "1"}}})
    revision = real_kube.compact()
    assert revision > int(old)
    informer = Informer(kube, NODES, lambda kind, obj: None)
    informer.resource_version = old
    informer.synced.set()
    informer._known = {}
    with pytest.raises(Exception, match="too old resource version"):
        informer._watch()
    assert real_kube.exchanges[-1].injected


# --- the facade ----------------------------------------------------------------------------------------------


def test_create_keeps_the_given_status(real_kube: RealKubeAPI) -> None:
    ready = {
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Ready",
                "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ]
    }
    stored = real_kube.create({**node_class("seeded"), "status": ready})
    assert stored["status"] == ready
    seeded = node("seeded-node")
    assert real_kube.create(seeded)["status"]["capacity"] == seeded["status"]["capacity"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "seeded"},
        "spec": {"schedulerName": "none", "containers": [{"name": "c", "image": "x"}]},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }
    got = real_kube.create(pod)
    assert got["metadata"]["namespace"] == "default"
    assert got["status"]["conditions"][0]["reason"] == "Unschedulable"
    assert real_kube.get("v1", "Pod", "seeded")["status"]["conditions"][0]["reason"] == "Unschedulable"


def _policy(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "nodeflow.io/v1alpha1", "kind": "NodeflowPolicy", "metadata": {"name": name}, "spec": spec}


def _bad_pool() -> dict[str, Any]:
    bad = node_pool("stored-bad")
    bad["spec"]["template"]["metadata"] = {"labels": {"karpenter.sh/nodepool": "x"}}  # a CEL rule refuses it
    return bad


def _bad_class() -> dict[str, Any]:
    bad = node_class("stored-bad")
    bad["spec"]["instanceStorePolicy"] = "Mirror"  # not one of the schema's values
    return bad


@pytest.mark.parametrize(
    ("body", "resource", "refusal"),
    [
        (_bad_pool(), NODE_POOLS, 'label "karpenter.sh/nodepool" is restricted'),
        (_bad_class(), EC2_NODE_CLASSES, 'Unsupported value: "Mirror"'),
        (_policy("stored-bad", nodePoolAccess=[{"nodePools": ["gpu"]}]), NODEFLOW_POLICIES, "namespaceSelector"),
    ],
    ids=["NodePool", "EC2NodeClass", "NodeflowPolicy"],
)
def test_store_bypassing_admission_serves_what_the_crd_refuses(
    real_kube: RealKubeAPI, kube: KubeClient, body: dict[str, Any], resource: Any, refusal: str
) -> None:
    with pytest.raises(ke.Invalid, match=refusal):
        kube.create(resource, body)
    stored = real_kube.store_bypassing_admission(body)
    name = body["metadata"]["name"]
    assert stored["metadata"]["resourceVersion"]
    assert [o["metadata"]["name"] for o in kube.list_items(resource)] == [name]  # served to the code under test
    assert kube.get(resource, name)["spec"] == stored["spec"]
    condition = {
        "type": "Ready",
        "status": "False",
        "reason": "X",
        "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    if resource in real_kube.discovery.with_status:  # its status can be written (the stored spec is not re-checked)
        kube.patch(resource, name, {"status": {"conditions": [condition]}}, subresource="status")
    again = real_kube.store_bypassing_admission(body)  # a replacement keeps uid and creationTimestamp
    assert again["metadata"]["uid"] == stored["metadata"]["uid"]
    real_kube.reset()
    assert kube.list_items(resource) == []


@pytest.mark.parametrize(
    ("spec", "meta"),
    [
        ({"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "lots"}}}]}, {}),
        ({"containers": [{"name": "c", "image": "x"}]}, {"creationTimestamp": "yesterday"}),
    ],
    ids=["quantity", "time"],
)
def test_an_object_no_server_could_decode_is_refused(
    real_kube: RealKubeAPI, spec: dict[str, Any], meta: dict[str, Any]
) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "undecodable", **meta}, "spec": spec}
    with pytest.raises(ValueError, match="cannot decode Pod undecodable"):
        real_kube.store_bypassing_admission(pod)
    # Never written: once in etcd, even for a moment, the API server's pod cache stays broken and every later
    # consistent LIST of pods waits 3 s for it before reading etcd.
    began = time.monotonic()
    assert real_kube.objects("v1", "Pod", "default") == []
    assert time.monotonic() - began < 1.0


def test_rbac_denials_are_the_servers_403s_to_impersonated_functions(real_kube: RealKubeAPI) -> None:
    """The handlers' token may only impersonate; as the launch function's groups a pod LIST is refused by the
    install's ClusterRoles, a NodeClaim read is not; an injected 403 is not a denial."""
    lambda_kube = KubeClient(real_kube.api_client(real_kube.impersonator_token))
    launch = Acting("nodeflow-demo-launch", FUNCTION_GROUPS["launch"])
    real_kube.enable_rbac()
    ClientImpersonation.install()
    try:
        with acting_as(launch):
            with pytest.raises(ke.NotFound):  # allowed: get its NodeClaim
                lambda_kube.get(NODE_CLAIMS, "absent")
            with pytest.raises(ke.Forbidden, match='User "nodeflow-demo-launch" cannot list resource "pods"'):
                lambda_kube.list_items(PODS)
        with pytest.raises(ke.Forbidden, match="nodeflow-test-impersonator"):  # unattributed: nothing allowed
            lambda_kube.list_items(NODES)
        real_kube.before_request = lambda method, path, query: Fault.forbidden() if "nodeclaims" in path else None
        with acting_as(launch), pytest.raises(ke.Forbidden):
            lambda_kube.get(NODE_CLAIMS, "absent")
    finally:
        ClientImpersonation.uninstall()
        lambda_kube.api_client.close()  # type: ignore[no-untyped-call]
    real_kube.disable_rbac()
    denied = real_kube.denied()
    assert [(d.path, d.impersonated) for d in denied if d.path == "/api/v1/pods"] == [
        ("/api/v1/pods", "nodeflow-demo-launch")
    ]
    assert denied[0].groups == FUNCTION_GROUPS["launch"]
    assert not any(d.injected for d in denied)
    assert "nodeflow-demo-launch" in denied[0].describe()


def test_a_tls_proxy_serves_kubectl(real_kube: RealKubeAPI, tmp_path: Path) -> None:
    plane = real_kube.plane
    kubectl = plane.binaries.kubectl
    assert kubectl is not None
    assert plane.pki is not None
    with FaultProxy(
        plane.url, plane.ca_file, tls=True, serving_cert=plane.pki.serving_cert, serving_key=plane.pki.serving_key
    ) as proxy:
        config = real_kube.kubeconfig()
        config["clusters"][0]["cluster"] = {"server": proxy.url, "certificate-authority": str(plane.ca_file)}
        path = tmp_path / "kubeconfig"
        path.write_text(json.dumps(config))
        got = subprocess.run(
            [str(kubectl), "--kubeconfig", str(path), "get", "ns", "default", "-o", "name"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert (got.returncode, got.stdout.strip()) == (0, "namespace/default"), got.stderr
        assert proxy.url.startswith("https://")
        assert any(p == "/api/v1/namespaces/default" for _, p, _ in proxy.requests)


def test_stopping_the_proxy_ends_its_open_watches(real_kube: RealKubeAPI) -> None:
    plane = real_kube.plane
    proxy = FaultProxy(plane.url, plane.ca_file).start()
    config = real_kube.api_client().configuration
    config.host = proxy.url
    from kubernetes.client import ApiClient

    kube = KubeClient(ApiClient(config))
    informer = Informer(kube, NODES, lambda kind, obj: None, backoff=5.0)
    informer.start()
    assert informer.synced.wait(10)
    time.sleep(0.2)
    began = time.monotonic()
    proxy.stop()
    wait_for("the watch to break", lambda: informer.errors, timeout=5)  # not when the server would end it (300 s)
    assert time.monotonic() - began < 5
    informer.stop()
    kube.api_client.close()  # type: ignore[no-untyped-call]
