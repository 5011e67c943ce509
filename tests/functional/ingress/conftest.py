"""Ingress tests: the webhook served at a Function URL on 127.0.0.1, the moto bus and its rules, the
queues, and (for the end-to-end tests) the agent as a subprocess and the provisioner behind an SQS
event-source mapping, on the real control plane (``kube_server`` is ``real_kube``). Fixtures ``make_local`` /
``local`` come from the lifecycle tests."""

from __future__ import annotations

import hashlib
import json
import secrets
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from nodeflow.ingress.auth import hmac_signature
from sandbox.controlplane.facade import RealKubeAPI
from sandbox.nodeflow import AGENT_ACCESS_KEY, AGENT_SECRET_KEY
from tests.functional.lifecycle.conftest import demo_node_pools, local, make_local

__all__ = [
    "Reply",
    "demo_node_pools",
    "event",
    "kube_server",
    "local",
    "make_local",
    "post",
    "signed_request",
]


@pytest.fixture
def kube_server(real_kube: RealKubeAPI) -> RealKubeAPI:
    return real_kube


@dataclass(frozen=True)
class Reply:
    status: int
    body: dict[str, Any]


def event(kind: str = "PodUnschedulable", *, eid: str | None = None, name: str = "web-1", **obj: Any) -> dict[str, Any]:
    o: dict[str, Any] = {"name": name, "uid": f"uid-{name}", **obj}
    if kind.startswith("Pod"):
        o.setdefault("namespace", "default")
    if kind == "PodUnschedulable":
        o.setdefault("spec", {"containers": [{"name": "app", "resources": {"requests": {"cpu": "1"}}}]})
    return {
        "id": eid or secrets.token_hex(16),
        "kind": kind,
        "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "reason": "watch",
        "object": o,
    }


def signed_request(
    url: str,
    body: bytes,
    *,
    mode: str = "iam",
    secret: str = "",
    access_key: str = AGENT_ACCESS_KEY,
    secret_key: str = AGENT_SECRET_KEY,
    timestamp: int | None = None,
    nonce: str | None = None,
    content_type: str = "application/json",
) -> tuple[str, dict[str, str], bytes]:
    """Headers as the agent sends them (SigV4 for service lambda, or the HMAC header)."""
    ts = str(int(datetime.now(UTC).timestamp()) if timestamp is None else timestamp)
    headers = {
        "content-type": content_type,
        "x-nodeflow-timestamp": ts,
        "x-nodeflow-nonce": nonce or secrets.token_hex(16),
    }
    if mode == "hmac":
        headers["x-nodeflow-signature"] = hmac_signature(secret, ts, headers["x-nodeflow-nonce"], body)
    elif mode == "iam":
        headers["x-amz-content-sha256"] = hashlib.sha256(body).hexdigest()
        request = AWSRequest(method="POST", url=url, data=body, headers=headers)
        SigV4Auth(Credentials(access_key, secret_key), "lambda", "us-east-1").add_auth(request)
        headers = dict(request.headers.items())
    return url, headers, body


def post(url: str, body: bytes | dict[str, Any], **sign: Any) -> Reply:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    url, headers, data = signed_request(url, raw, **sign)
    return send(url, headers, data)


def send(url: str, headers: dict[str, str], data: bytes) -> Reply:
    req = urllib.request.Request(url, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return Reply(resp.status, json.loads(resp.read() or b"{}"))
    except urllib.error.HTTPError as exc:
        return Reply(exc.code, json.loads(exc.read() or b"{}"))
