"""The agent as a real subprocess against the real control plane (``real_kube``: kube-apiserver, etcd and the
controllers, behind the fault proxy of sandbox/controlplane/proxy.py), forwarding to a recording webhook.

- ``kube``: the ``RealKubeAPI``, reset before the test; RBAC denials are recorded, and a test that drew one fails
  at teardown unless it cleared them (``kube.disable_rbac()`` after checking ``kube.denied()``).
- ``agent_token``: a file with a bound token of the agent's ServiceAccount (agent/manifests): the agent runs with
  the install's ClusterRole ``nodeflow-agent``, through real RBAC.

- ``webhook``: an HTTP server on 127.0.0.1 that checks what the real webhook checks (HMAC signature or SigV4
  recomputed with botocore, timestamp skew, nonce replay, body size, event ids de-duplicated) and answers 202;
  ``webhook.fail(503)`` makes it fail until ``webhook.recover()``.
- ``start_agent(url, **env)``: ``python -m nodeflow_agent`` with ``PYTHONPATH=agent`` and the agent's token; JSON logs
  are collected, the health port is read from the start log line; the process is killed at teardown if still
  running.
- ``Proxy``: a TCP proxy in front of the fault proxy that can be stopped and restarted on the same port (what an API
  server restart looks like to the agent: every connection drops, nothing listens).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import pathlib
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from sandbox.controlplane.facade import RealKubeAPI
from tests.realk8s.fixtures import audit_log  # noqa: F401 (the API server's audit log: test_rbac.py)

REPO = pathlib.Path(__file__).resolve().parents[3]
AGENT_DIR = REPO / "agent"
SECRET = "functional-test-secret"
CLUSTER = "test-cluster"


def wait_for(predicate: Callable[[], Any], timeout: float = 15.0, what: str = "condition") -> Any:
    """Poll until ``predicate()`` is truthy (returns it) or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


# --------------------------------------------------------------------------------------------- webhook


class _WebhookHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Webhook

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        status, answer = self.server.handle({k.lower(): v for k, v in self.headers.items()}, body, self.path)
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class Webhook(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self, secret: str = SECRET, verify: Callable[[dict[str, str], bytes, str], bool] | None = None
    ) -> None:
        super().__init__(("127.0.0.1", 0), _WebhookHandler)
        self.secret = secret
        self.verify = verify or self._verify_hmac
        self.lock = threading.Lock()
        self.events: list[dict[str, Any]] = []  # accepted, de-duplicated, in arrival order
        self.bodies: list[dict[str, Any]] = []
        self.seen_ids: set[str] = set()
        self.nonces: set[str] = set()
        self.statuses: list[int] = []
        self.rejections: list[str] = []
        self.failing: int | None = None
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/"

    def start(self) -> Webhook:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()

    def fail(self, status: int = 503) -> None:
        self.failing = status

    def recover(self) -> None:
        self.failing = None

    def _verify_hmac(self, headers: dict[str, str], body: bytes, path: str) -> bool:
        message = f"v1\n{headers.get('x-nodeflow-timestamp')}\n{headers.get('x-nodeflow-nonce')}\n"
        message += hashlib.sha256(body).hexdigest()
        expected = "v1=" + hmac.new(self.secret.encode(), message.encode(), hashlib.sha256).hexdigest()
        return hmac.compare_digest(expected, headers.get("x-nodeflow-signature", ""))

    def handle(self, headers: dict[str, str], body: bytes, path: str) -> tuple[int, dict[str, Any]]:
        status, answer = self._decide(headers, body, path)
        with self.lock:
            self.statuses.append(status)
            if status >= 400:
                self.rejections.append(f"{status} {answer.get('message')}")
        return status, answer

    def _decide(self, headers: dict[str, str], body: bytes, path: str) -> tuple[int, dict[str, Any]]:
        if len(body) > 262_144:
            return 413, {"message": "body too large"}
        if self.failing is not None:
            return self.failing, {"message": "injected failure"}
        ts, nonce = headers.get("x-nodeflow-timestamp", ""), headers.get("x-nodeflow-nonce", "")
        if not ts.isdigit() or len(nonce) != 32 or int(nonce, 16) < 0:
            return 401, {"message": "missing timestamp or nonce"}
        if not self.verify(headers, body, path):
            return 403, {"message": "signature does not verify"}
        if abs(time.time() - int(ts)) > 300:
            return 403, {"message": "stale"}
        if headers.get("content-type") != "application/json":
            return 415, {"message": "not JSON"}
        payload = json.loads(body)
        if payload.get("cluster") != CLUSTER:
            return 403, {"message": "wrong cluster"}
        events = payload.get("events") or []
        if not 1 <= len(events) <= 500:
            return 400, {"message": "1 to 500 events"}
        with self.lock:
            if nonce in self.nonces:
                return 403, {"message": "replayed nonce"}
            self.nonces.add(nonce)
            self.bodies.append(payload)
            accepted = duplicates = 0
            for event in events:
                if event["id"] in self.seen_ids:
                    duplicates += 1
                    continue
                self.seen_ids.add(event["id"])
                self.events.append(event)
                accepted += 1
        return 202, {"accepted": accepted, "duplicates": duplicates}

    # ------------------------------------------------------------------------------------ queries

    def of(self, kind: str | None = None, name: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [
                e
                for e in self.events
                if (kind is None or e["kind"] == kind) and (name is None or e["object"]["name"] == name)
            ]

    def wait(self, kind: str, name: str, timeout: float = 15.0, **match: Any) -> dict[str, Any]:
        def found() -> dict[str, Any] | None:
            for e in self.of(kind, name):
                if all(e["object"].get(k) == v for k, v in match.items()):
                    return e
            return None

        event: dict[str, Any] = wait_for(found, timeout, f"{kind} {name} {match or ''} (got {self.summary()})")
        return event

    def summary(self) -> list[str]:
        with self.lock:
            return [f"{e['kind']}:{e['object']['name']}:{e['reason']}" for e in self.events][-30:]


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    hook = Webhook().start()
    yield hook
    hook.stop()


# ----------------------------------------------------------------------------------------------- agent


class Agent:
    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.logs: list[dict[str, Any]] = []
        self.raw: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.raw.append(line)
            with contextlib.suppress(ValueError):
                self.logs.append(json.loads(line))

    def log_lines(self, msg: str) -> list[dict[str, Any]]:
        return [entry for entry in list(self.logs) if entry.get("msg") == msg]

    @property
    def health_port(self) -> int:
        started = wait_for(lambda: self.log_lines("nodeflow agent started") or self.proc.poll() is not None, 15)
        if self.proc.poll() is not None and not self.log_lines("nodeflow agent started"):
            raise AssertionError(f"agent exited {self.proc.returncode}: {''.join(self.raw)}")
        assert isinstance(started, list)
        return int(started[0]["health_port"])

    def get(self, path: str) -> tuple[int, str]:
        url = f"http://127.0.0.1:{self.health_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def metric(self, name: str) -> float:
        """The sum of a metric's samples from /metrics."""
        _, text = self.get("/metrics")
        total = 0.0
        for line in text.splitlines():
            if line.startswith((name + "{", name + " ")):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def wait_ready(self, timeout: float = 15.0) -> None:
        wait_for(lambda: self.get("/readyz")[0] == 200, timeout, "agent /readyz 200")

    def terminate(self, timeout: float = 30.0) -> int:
        self.proc.terminate()
        return self.proc.wait(timeout)


AGENT_ACCOUNT = ("nodeflow", "nodeflow-agent")  # agent/manifests/10-serviceaccount.yaml


@pytest.fixture
def kube(real_kube: RealKubeAPI) -> Iterator[RealKubeAPI]:
    real_kube.enable_rbac()
    yield real_kube
    denied = real_kube.denied()
    real_kube.disable_rbac()
    assert denied == [], "the API server denied requests: " + "; ".join(d.describe() for d in denied)


@pytest.fixture
def agent_token(kube: RealKubeAPI, tmp_path: pathlib.Path) -> pathlib.Path:
    """A file holding a bound token of the agent's ServiceAccount (what the kubelet projects into its pod)."""
    path = tmp_path / "agent-token"
    path.write_text(kube.service_account_token(*AGENT_ACCOUNT) + "\n")
    return path


@pytest.fixture
def start_agent(tmp_path: pathlib.Path, webhook: Webhook, agent_token: pathlib.Path) -> Iterator[Callable[..., Agent]]:
    secret = tmp_path / "hmac-secret"
    secret.write_text(SECRET + "\n")
    agents: list[Agent] = []

    def start(kube_url: str, **overrides: str) -> Agent:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": str(AGENT_DIR),
            "PYTHONDONTWRITEBYTECODE": "1",
            "WEBHOOK_URL": webhook.url,
            "CLUSTER_NAME": CLUSTER,
            "AGENT_NAME": "functional-agent",
            "AUTH_MODE": "hmac",
            "HMAC_SECRET_FILE": str(secret),
            "KUBE_API_URL": kube_url,
            "KUBE_TOKEN_FILE": str(agent_token),
            "HEALTH_PORT": "0",
            "HEALTH_BIND": "127.0.0.1",
            "BATCH_MAX_WAIT": "0.05",
            "BACKOFF_BASE_SECONDS": "0.05",
            "BACKOFF_MAX_SECONDS": "0.5",
            "FLUSH_TIMEOUT_SECONDS": "10",
            "LOG_LEVEL": "info",
        }
        env.update(overrides)
        proc = subprocess.Popen(
            [sys.executable, "-m", "nodeflow_agent"],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        agent = Agent(proc)
        agents.append(agent)
        return agent

    yield start
    for agent in agents:
        if agent.proc.poll() is None:
            agent.proc.kill()
            agent.proc.wait(10)
        print("".join(agent.raw[-200:]))  # shown by pytest when the test failed


@pytest.fixture
def core(kube: RealKubeAPI) -> Iterator[Any]:
    import kubernetes.client

    api = kube.api_client()
    yield kubernetes.client.CoreV1Api(api)
    api.close()


@pytest.fixture
def custom(kube: RealKubeAPI) -> Iterator[Any]:
    import kubernetes.client

    api = kube.api_client()
    yield kubernetes.client.CustomObjectsApi(api)
    api.close()


# ----------------------------------------------------------------------------------------------- proxy


class Proxy:
    """A TCP proxy on 127.0.0.1 that can be stopped (listener and every connection closed) and started again
    on the same port: what an API server restart looks like to a client."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Proxy:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def stop(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):  # shutdown wakes the accept(); close alone leaves it listening
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

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
                    s.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def proxy(kube: RealKubeAPI) -> Iterator[Proxy]:
    port = int(kube.url.rsplit(":", 1)[1])
    p = Proxy(port).start()
    yield p
    p.stop()
