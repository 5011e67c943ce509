"""The agent's stdlib Kubernetes client against the real API server: paging, watch, 410, 404, abort, tokens, TLS."""

from __future__ import annotations

import http.client
import ssl
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from nodeflow_agent.kube import KubeClient, NotFound
from sandbox.controlplane.facade import RealKubeAPI
from tests.functional.agent.conftest import Agent, Webhook, wait_for
from tests.functional.agent.objects import unschedulable_pod


def _client(kube: RealKubeAPI, token: Path) -> KubeClient:
    """The agent's client through the fault proxy, as the agent's ServiceAccount."""
    return KubeClient(kube.url, token_file=str(token))


def test_list_pages_with_limit_and_continue(kube: RealKubeAPI, agent_token: Path) -> None:
    for i in range(7):
        kube.create(unschedulable_pod(f"p{i}"))
    client = _client(kube, agent_token)
    pages = list(client.list_pages("/api/v1/namespaces/default/pods", page_size=3))
    assert [len(p.items) for p in pages] == [3, 3, 1]
    assert sorted(o["metadata"]["name"] for p in pages for o in p.items) == [f"p{i}" for i in range(7)]
    # every page is of one snapshot: the list's resourceVersion, at least that of the newest pod
    assert len({p.resource_version for p in pages}) == 1
    newest = max(int(o["metadata"]["resourceVersion"]) for p in pages for o in p.items)
    assert int(pages[0].resource_version) >= newest
    assert kube.count("GET", "/api/v1/namespaces/default/pods", "continue=") == 2


def test_watch_streams_events_and_ends_at_the_timeout_without_a_bookmark(kube: RealKubeAPI, agent_token: Path) -> None:
    """A real API server sends BOOKMARKs about once a minute, not when a short watch times out (the old imitation did):
    the watch just ends, and the agent watches again from the last resourceVersion it saw."""
    client = _client(kube, agent_token)
    [page] = list(client.list_pages("/api/v1/pods"))
    threading.Timer(0.2, lambda: kube.create(unschedulable_pod("w1"))).start()
    began = time.monotonic()
    events = list(client.watch("/api/v1/pods", page.resource_version, timeout_seconds=2))
    assert time.monotonic() - began >= 1.5  # ended by the server at its timeout
    # created, then its status written (the facade's create: as the scheduler would mark it)
    assert [(e["type"], e["object"]["metadata"].get("name")) for e in events] == [("ADDED", "w1"), ("MODIFIED", "w1")]
    assert int(events[0]["object"]["metadata"]["resourceVersion"]) > int(page.resource_version)
    _, _path, query = next(r for r in kube.requests if "watch=true" in r[2])
    assert "allowWatchBookmarks=true" in query
    assert "timeoutSeconds=2" in query


def test_expired_version_and_missing_resource(kube: RealKubeAPI, agent_token: Path) -> None:
    client = _client(kube, agent_token)
    [page] = list(client.list_pages("/api/v1/pods"))
    kube.create(unschedulable_pod("x"))
    kube.compact()  # etcd's history is compacted: a watch from before it is answered 410 (as an ERROR event)
    [event] = list(client.watch("/api/v1/pods", page.resource_version, timeout_seconds=5))
    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 410
    # a resource the agent may list but nobody serves (a CRD not installed, here a version): 404. One its RBAC does
    # not grant is refused before the server looks (403, not 404): the real authorizer runs first.
    with pytest.raises(NotFound):
        list(client.list_pages("/apis/karpenter.sh/v9/nodepools"))


def test_abort_breaks_a_blocked_watch(kube: RealKubeAPI, agent_token: Path) -> None:
    client = _client(kube, agent_token)
    [page] = list(client.list_pages("/api/v1/nodes"))
    errors: list[BaseException] = []

    def watch() -> None:
        try:
            list(client.watch("/api/v1/nodes", page.resource_version, timeout_seconds=60))
        except BaseException as e:
            errors.append(e)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    wait_for(lambda: kube.count("GET", "/api/v1/nodes", "watch=true") == 1, what="the watch request")
    time.sleep(0.1)
    started = time.monotonic()
    client.abort()
    thread.join(5)
    assert not thread.is_alive()
    assert time.monotonic() - started < 2
    assert len(errors) == 1
    assert isinstance(errors[0], OSError | http.client.HTTPException)


class _Recorder(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Any

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.server.auth.append(self.headers.get("Authorization"))
        data = b'{"kind":"PodList","metadata":{"resourceVersion":"1"},"items":[]}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_service_account_token_is_reread_when_it_rotates(tmp_path: Path) -> None:
    server: Any = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    server.auth = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        token = tmp_path / "token"
        token.write_text("token-1\n")
        now = {"t": 0.0}
        client = KubeClient(
            f"http://127.0.0.1:{server.server_address[1]}",
            token_file=str(token),
            token_refresh_seconds=60,
            clock=lambda: now["t"],
        )
        list(client.list_pages("/api/v1/pods"))
        token.write_text("token-2\n")  # the kubelet rotated the projected token
        list(client.list_pages("/api/v1/pods"))
        now["t"] = 61.0
        list(client.list_pages("/api/v1/pods"))
        assert server.auth == ["Bearer token-1", "Bearer token-1", "Bearer token-2"]
        no_token = KubeClient(f"http://127.0.0.1:{server.server_address[1]}", token_file=str(tmp_path / "none"))
        list(no_token.list_pages("/api/v1/pods"))
        assert server.auth[-1] is None
    finally:
        server.shutdown()
        server.server_close()


# ----------------------------------------------------------------------------------------------- TLS
# The API server itself serves TLS with the control plane's CA (what the in-cluster service endpoint does).


def test_https_with_the_cluster_ca(kube: RealKubeAPI, agent_token: Path) -> None:
    url, ca = kube.plane.url, str(kube.plane.ca_file)
    token = str(agent_token)
    assert next(iter(KubeClient(url, ca_file=ca, token_file=token).list_pages("/api/v1/nodes"))).resource_version
    with pytest.raises(ssl.SSLError):
        list(KubeClient(url, token_file=token).list_pages("/api/v1/nodes"))  # system CAs do not know it
    assert next(iter(KubeClient(url, insecure=True, token_file=token).list_pages("/api/v1/nodes"))).resource_version


def test_agent_in_cluster_mode_over_https(
    tmp_path: Path, kube: RealKubeAPI, agent_token: Path, webhook: Webhook, start_agent: Callable[..., Agent]
) -> None:
    port = kube.plane.url.rsplit(":", 1)[1]
    agent = start_agent(
        "",  # no KUBE_API_URL: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT
        KUBERNETES_SERVICE_HOST="127.0.0.1",
        KUBERNETES_SERVICE_PORT=port,
        KUBE_CA_FILE=str(kube.plane.ca_file),
        KUBE_TOKEN_FILE=str(agent_token),
    )
    agent.wait_ready()
    kube.create(unschedulable_pod("over-tls"))
    webhook.wait("PodUnschedulable", "over-tls")
