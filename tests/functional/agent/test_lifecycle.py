"""The agent process: SIGTERM flushes and exits 0, health endpoints, settings errors, IAM (SigV4) signing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import nodeflow_agent
from sandbox.controlplane.facade import RealKubeAPI
from tests.functional.agent.conftest import AGENT_DIR, Agent, Webhook, wait_for
from tests.functional.agent.objects import node, unschedulable_pod


def test_sigterm_flushes_the_buffer_and_exits_0(
    kube: RealKubeAPI, webhook: Webhook, start_agent: Callable[..., Agent]
) -> None:
    agent = start_agent(kube.url, BATCH_MAX_WAIT="30", BATCH_MAX_EVENTS="500")  # events wait in the buffer
    agent.wait_ready()
    for i in range(40):
        kube.create(unschedulable_pod(f"pending-{i}"))
    wait_for(lambda: agent.metric("nodeflow_agent_buffer_events") == 40, what="40 buffered events")
    assert webhook.events == []
    started = time.monotonic()
    assert agent.terminate() == 0
    assert time.monotonic() - started < 10
    assert len(webhook.of("PodUnschedulable")) == 40
    [stopped] = agent.log_lines("stopped")
    assert stopped["flushed"] is True
    assert stopped["buffered"] == 0


def test_sigint_with_the_webhook_down_exits_0_after_the_flush_deadline(
    kube: RealKubeAPI, webhook: Webhook, start_agent: Callable[..., Agent]
) -> None:
    agent = start_agent(kube.url, FLUSH_TIMEOUT_SECONDS="1")
    agent.wait_ready()
    webhook.fail(503)
    kube.create(unschedulable_pod("stuck"))
    wait_for(lambda: 503 in webhook.statuses, what="a failed delivery")
    started = time.monotonic()
    agent.proc.send_signal(signal.SIGINT)
    assert agent.proc.wait(15) == 0
    assert time.monotonic() - started < 6
    [stopped] = agent.log_lines("stopped")
    assert stopped["flushed"] is False


def test_health_endpoints_and_metrics(kube: RealKubeAPI, webhook: Webhook, start_agent: Callable[..., Agent]) -> None:
    agent = start_agent(kube.url)
    agent.wait_ready()
    assert agent.get("/healthz") == (200, "ok\n")
    assert agent.get("/readyz") == (200, "ok\n")
    assert agent.get("/nope")[0] == 404
    kube.create(node("node-m"))
    webhook.wait("NodeReady", "node-m")
    status, text = agent.get("/metrics")
    assert status == 200
    for name in (
        "nodeflow_agent_events_observed_total",
        "nodeflow_agent_events_sent_total",
        "nodeflow_agent_events_dropped_total",
        "nodeflow_agent_events_coalesced_total",
        "nodeflow_agent_buffer_events",
        "nodeflow_agent_send_failures_total",
        "nodeflow_agent_relists_total",
    ):
        assert f"# TYPE {name} " in text
    assert 'nodeflow_agent_events_observed_total{kind="NodeReady"} 1' in text
    assert 'nodeflow_agent_relists_total{cause="start",resource="pods"} 1' in text
    assert f'nodeflow_agent_build_info{{version="{nodeflow_agent.__version__}"}} 1' in text
    wait_for(lambda: agent.metric("nodeflow_agent_events_sent_total") >= 1, what="sent counter")
    assert agent.metric("nodeflow_agent_ready") == 1
    logs = agent.log_lines("listed")
    assert {entry["resource"] for entry in logs} == {"pods", "nodes", "nodepools", "nodeclaims", "ec2nodeclasses"}
    assert all(entry["level"] == "info" and entry["logger"] == "nodeflow_agent.watch" for entry in logs)


@pytest.mark.parametrize(
    ("drop", "variable"),
    [("WEBHOOK_URL", "WEBHOOK_URL"), ("CLUSTER_NAME", "CLUSTER_NAME"), ("HMAC_SECRET_FILE", "HMAC_SECRET_FILE")],
)
def test_bad_settings_exit_2_naming_the_variable(
    kube: RealKubeAPI, start_agent: Callable[..., Agent], drop: str, variable: str
) -> None:
    agent = start_agent(kube.url, **{drop: ""})
    assert agent.proc.wait(15) == 2
    wait_for(lambda: agent.log_lines("invalid settings"), what="the error log")
    [error] = agent.log_lines("invalid settings")
    assert error["level"] == "error"
    assert error["error"].startswith(f"{variable}:")


# ------------------------------------------------------------------------------------- IAM mode


class _STS(BaseHTTPRequestHandler):
    server: Any

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
        self.server.calls.append(body)
        expiration = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        data = f"""<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <Credentials>
      <AccessKeyId>ASIAIRSAEXAMPLE</AccessKeyId>
      <SecretAccessKey>irsa-secret-key</SecretAccessKey>
      <SessionToken>irsa-session-token</SessionToken>
      <Expiration>{expiration}</Expiration>
    </Credentials>
  </AssumeRoleWithWebIdentityResult>
</AssumeRoleWithWebIdentityResponse>""".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/xml")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def sts() -> Iterator[Any]:
    server: Any = ThreadingHTTPServer(("127.0.0.1", 0), _STS)
    server.calls = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def sigv4_verifier(secret_key: str, region: str) -> Callable[[dict[str, str], bytes, str], bool]:
    """What the Function URL does before the Lambda runs, with botocore recomputing the signature."""
    import botocore.auth
    import botocore.credentials
    from botocore.awsrequest import AWSRequest

    def verify(headers: dict[str, str], body: bytes, path: str) -> bool:
        authorization = headers.get("authorization", "")
        if not authorization.startswith("AWS4-HMAC-SHA256 "):
            return False
        fields = dict(part.strip().split("=", 1) for part in authorization[len("AWS4-HMAC-SHA256 ") :].split(","))
        access_key = fields["Credential"].split("/")[0]
        signed = fields["SignedHeaders"].split(";")
        request = AWSRequest(
            method="POST", url=f"http://{headers['host']}{path}", data=body, headers={h: headers[h] for h in signed}
        )
        request.context["timestamp"] = headers["x-amz-date"]
        creds = botocore.credentials.Credentials(access_key, secret_key, headers.get("x-amz-security-token"))
        signer = botocore.auth.SigV4Auth(creds, "lambda", region)
        expected = signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)
        required = {
            "host",
            "x-amz-date",
            "x-amz-content-sha256",
            "content-type",
            "x-nodeflow-timestamp",
            "x-nodeflow-nonce",
        }
        return expected == fields["Signature"] and required <= set(signed)

    return verify


def test_iam_mode_with_irsa_credentials(
    kube: RealKubeAPI, sts: Any, tmp_path: Path, start_agent: Callable[..., Agent]
) -> None:
    hook = Webhook(verify=sigv4_verifier("irsa-secret-key", "eu-west-1")).start()
    try:
        token = tmp_path / "irsa-token"
        token.write_text("projected-service-account-jwt")
        agent = start_agent(
            kube.url,
            WEBHOOK_URL=hook.url,
            AUTH_MODE="iam",
            AWS_REGION="eu-west-1",
            AWS_ROLE_ARN="arn:aws:iam::123456789012:role/nodeflow-agent",
            AWS_WEB_IDENTITY_TOKEN_FILE=str(token),
            AWS_STS_ENDPOINT=f"http://127.0.0.1:{sts.server_address[1]}/",
        )
        agent.wait_ready()
        kube.create(unschedulable_pod("signed"))
        hook.wait("PodUnschedulable", "signed")
        assert hook.rejections == []
        assert len(sts.calls) == 1
        assert "WebIdentityToken=projected-service-account-jwt" in sts.calls[0]
        assert "RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Fnodeflow-agent" in sts.calls[0]
    finally:
        hook.stop()


def test_iam_mode_rejected_signature_is_retried_not_dropped(
    kube: RealKubeAPI, tmp_path: Path, start_agent: Callable[..., Agent]
) -> None:
    hook = Webhook(verify=sigv4_verifier("the-real-secret", "us-east-1")).start()
    try:
        agent = start_agent(
            kube.url,
            WEBHOOK_URL=hook.url,
            AUTH_MODE="iam",
            AWS_REGION="us-east-1",
            AWS_ACCESS_KEY_ID="AKIAEXAMPLE",
            AWS_SECRET_ACCESS_KEY="a-stale-secret",
            FLUSH_TIMEOUT_SECONDS="0.5",
        )
        agent.wait_ready()
        kube.create(unschedulable_pod("retried"))
        wait_for(lambda: hook.statuses.count(403) >= 2, what="403s")
        assert hook.events == []
        assert agent.metric("nodeflow_agent_events_dropped_total") == 0
        assert agent.terminate() == 0
    finally:
        hook.stop()


def test_the_package_imports_nothing_outside_the_standard_library() -> None:
    code = (
        "import sys, nodeflow_agent.__main__\n"
        "mods = {m.split('.')[0] for m in sys.modules}\n"
        "std = set(sys.stdlib_module_names) | set(sys.builtin_module_names) | {'nodeflow_agent', '__main__'}\n"
        "print(sorted(mods - std))\n"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {str(AGENT_DIR)!r})\n{code}"],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": os.environ.get("PATH", "")},
    )
    assert out.stdout.strip() == "[]"
