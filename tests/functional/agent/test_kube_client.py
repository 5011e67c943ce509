"""The agent's stdlib Kubernetes client against the test API server: paging, watch, 410, 404, abort, tokens, TLS."""

from __future__ import annotations

import contextlib
import http.client
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from nodeflow_agent.kube import KubeClient, NotFound
from tests.functional.agent.conftest import Agent, Webhook, wait_for
from tests.functional.agent.objects import unschedulable_pod
from tests.kubeapi import KubeAPIServer


def test_list_pages_with_limit_and_continue(kube: KubeAPIServer) -> None:
    for i in range(7):
        kube.create(unschedulable_pod(f"p{i}"))
    client = KubeClient(kube.url)
    pages = list(client.list_pages("/api/v1/pods", page_size=3))
    assert [len(p.items) for p in pages] == [3, 3, 1]
    assert sorted(o["metadata"]["name"] for p in pages for o in p.items) == [f"p{i}" for i in range(7)]
    assert pages[0].resource_version == str(kube.cluster.resource_version)
    assert kube.count("GET", "/api/v1/pods", "continue=") == 2


def test_watch_streams_events_and_a_bookmark_at_the_timeout(kube: KubeAPIServer) -> None:
    client = KubeClient(kube.url)
    [page] = list(client.list_pages("/api/v1/pods"))
    threading.Timer(0.2, lambda: kube.create(unschedulable_pod("w1"))).start()
    events = list(client.watch("/api/v1/pods", page.resource_version, timeout_seconds=1))
    assert [(e["type"], e["object"]["metadata"].get("name")) for e in events] == [("ADDED", "w1"), ("BOOKMARK", None)]
    assert int(events[-1]["object"]["metadata"]["resourceVersion"]) >= int(page.resource_version) + 1
    _, _path, query = next(r for r in kube.requests if "watch=true" in r[2])
    assert "allowWatchBookmarks=true" in query
    assert "timeoutSeconds=1" in query


def test_expired_version_and_missing_resource(kube: KubeAPIServer) -> None:
    client = KubeClient(kube.url)
    [page] = list(client.list_pages("/api/v1/pods"))
    kube.create(unschedulable_pod("x"))
    kube.compact()
    [event] = list(client.watch("/api/v1/pods", page.resource_version, timeout_seconds=5))
    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 410
    with pytest.raises(NotFound):
        list(client.list_pages("/apis/example.com/v1/widgets"))


def test_abort_breaks_a_blocked_watch(kube: KubeAPIServer) -> None:
    client = KubeClient(kube.url)
    errors: list[BaseException] = []

    def watch() -> None:
        try:
            list(client.watch("/api/v1/nodes", str(kube.cluster.resource_version), timeout_seconds=60))
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


class TLSProxy:
    """TLS termination in front of the (plain HTTP) test API server, like the in-cluster service endpoint."""

    def __init__(self, upstream_port: int, cert: Path, key: Path) -> None:
        self.upstream_port = upstream_port
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                raw, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        try:
            client = self.context.wrap_socket(raw, server_side=True)
        except (OSError, ssl.SSLError):
            raw.close()
            return
        upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()
        self._pump(client, upstream)

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.close()

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()


@pytest.fixture
def tls(tmp_path: Path, kube: KubeAPIServer) -> Iterator[tuple[TLSProxy, Path]]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    cert, key = tmp_path / "ca.crt", tmp_path / "tls.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=kubernetes",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:kubernetes.default.svc",
        ],
        check=True,
        capture_output=True,
    )
    proxy = TLSProxy(int(kube.url.rsplit(":", 1)[1]), cert, key)
    yield proxy, cert
    proxy.stop()


def test_https_with_the_cluster_ca(tls: tuple[TLSProxy, Path], tmp_path: Path) -> None:
    proxy, ca = tls
    url = f"https://127.0.0.1:{proxy.port}"
    assert next(iter(KubeClient(url, ca_file=str(ca)).list_pages("/api/v1/namespaces"))).items
    with pytest.raises(ssl.SSLError):
        list(KubeClient(url).list_pages("/api/v1/namespaces"))  # system CAs do not know it
    assert next(iter(KubeClient(url, insecure=True).list_pages("/api/v1/namespaces"))).items


def test_agent_in_cluster_mode_over_https(
    tls: tuple[TLSProxy, Path],
    tmp_path: Path,
    kube: KubeAPIServer,
    webhook: Webhook,
    start_agent: Callable[..., Agent],
) -> None:
    proxy, ca = tls
    token = tmp_path / "sa-token"
    token.write_text("service-account-token")
    agent = start_agent(
        "",  # no KUBE_API_URL: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT
        KUBERNETES_SERVICE_HOST="127.0.0.1",
        KUBERNETES_SERVICE_PORT=str(proxy.port),
        KUBE_CA_FILE=str(ca),
        KUBE_TOKEN_FILE=str(token),
    )
    agent.wait_ready()
    kube.create(unschedulable_pod("over-tls"))
    webhook.wait("PodUnschedulable", "over-tls")
