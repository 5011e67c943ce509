"""auth: SigV4 checked against botocore, the HMAC vector, credential providers against local HTTP servers."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import botocore.auth
import botocore.credentials
import pytest
from botocore.awsrequest import AWSRequest

from nodeflow_agent.auth import (
    ContainerProvider,
    Credentials,
    CredentialsError,
    HMACSigner,
    SigV4Signer,
    StaticProvider,
    WebIdentityProvider,
    hmac_signature,
    provider_from_env,
)

FIXED = datetime(2026, 11, 21, 10, 0, 0, tzinfo=UTC)
BODY = b'{"cluster":"demo","agent":"a","sentAt":"2026-11-21T10:00:00Z","events":[]}'
HEADERS = {
    "Content-Type": "application/json",
    "X-Nodeflow-Timestamp": str(int(FIXED.timestamp())),
    "X-Nodeflow-Nonce": "0123456789abcdef0123456789abcdef",
}


def botocore_authorization(
    url: str, headers: dict[str, str], body: bytes, creds: Credentials, region: str, monkeypatch: pytest.MonkeyPatch
) -> str:
    """Sign the same request with botocore at the same instant; return its Authorization header."""
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda *a, **k: FIXED.replace(tzinfo=None))
    request = AWSRequest(method="POST", url=url, data=body, headers=headers)
    botocore.auth.SigV4Auth(
        botocore.credentials.Credentials(creds.access_key, creds.secret_key, creds.token), "lambda", region
    ).add_auth(request)
    return str(request.headers["Authorization"])


@pytest.mark.parametrize(
    ("url", "token"),
    [
        ("https://abcdefghij.lambda-url.eu-west-1.on.aws/", None),
        ("https://abcdefghij.lambda-url.eu-west-1.on.aws/", "FwoGZXIvYXdzEJr//////////session+token/=="),
        ("https://webhook.example.com:8443/nodeflow/events?x=1&a=b%20c&empty=", "tok"),
        ("http://127.0.0.1:9999/", None),
    ],
)
def test_sigv4_matches_botocore(url: str, token: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    creds = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token)
    signer = SigV4Signer(StaticProvider(creds), "eu-west-1", clock=FIXED.timestamp)
    signed = signer.sign("POST", url, dict(HEADERS), BODY)
    assert signed["X-Amz-Date"] == "20261121T100000Z"
    assert signed["X-Amz-Content-SHA256"] == __import__("hashlib").sha256(BODY).hexdigest()
    assert ("X-Amz-Security-Token" in signed) == (token is not None)
    if token:
        assert signed["X-Amz-Security-Token"] == token
    # botocore signs every header it is given (plus host): give it exactly what we send, minus Authorization
    unsigned = {k: v for k, v in signed.items() if k != "Authorization"}
    expected = botocore_authorization(url, unsigned, BODY, creds, "eu-west-1", monkeypatch)
    assert signed["Authorization"] == expected
    signed_headers = expected.split("SignedHeaders=")[1].split(",")[0].split(";")
    for name in (
        "host",
        "x-amz-date",
        "x-amz-content-sha256",
        "content-type",
        "x-nodeflow-timestamp",
        "x-nodeflow-nonce",
    ):
        assert name in signed_headers
    assert ("x-amz-security-token" in signed_headers) == (token is not None)
    assert "/eu-west-1/lambda/aws4_request" in expected


def test_sigv4_signature_changes_with_the_body_and_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    creds = Credentials("AKID", "secret", None)
    signer = SigV4Signer(StaticProvider(creds), "us-east-1", clock=FIXED.timestamp)
    url = "https://x.lambda-url.us-east-1.on.aws/"
    a = signer.sign("POST", url, dict(HEADERS), BODY)["Authorization"]
    b = signer.sign("POST", url, dict(HEADERS), BODY + b" ")["Authorization"]
    assert a != b
    other = SigV4Signer(StaticProvider(Credentials("AKID", "other", None)), "us-east-1", clock=FIXED.timestamp)
    assert other.sign("POST", url, dict(HEADERS), BODY)["Authorization"] != a


def test_hmac_known_vector() -> None:
    # computed independently: printf 'v1\n<ts>\n<nonce>\n<sha256 hex of body>' | openssl dgst -sha256 -hmac s3cret
    body = b'{"cluster":"demo","events":[]}'
    assert (
        hmac_signature("s3cret", "1700000000", "0123456789abcdef0123456789abcdef", body)
        == "v1=55af09de27825f879c2badcbff67d0c8b9c7b344013d8ef6328f130a2fe19d66"
    )


def test_hmac_signer_reads_the_mounted_secret_and_picks_up_rotation(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_text("s3cret\n")  # kubectl create secret --from-file keeps the newline: not part of the secret
    now = {"t": 0.0}
    signer = HMACSigner(str(path), reread_seconds=30, clock=lambda: now["t"])
    headers = {"X-Nodeflow-Timestamp": "1700000000", "X-Nodeflow-Nonce": "0123456789abcdef0123456789abcdef"}
    body = b'{"cluster":"demo","events":[]}'
    signed = signer.sign("POST", "https://x/", dict(headers), body)
    assert signed["X-Nodeflow-Signature"] == "v1=55af09de27825f879c2badcbff67d0c8b9c7b344013d8ef6328f130a2fe19d66"
    path.write_text("rotated")
    assert signer.sign("POST", "https://x/", dict(headers), body) == signed  # cached for reread_seconds
    now["t"] = 31.0
    assert signer.sign("POST", "https://x/", dict(headers), body)["X-Nodeflow-Signature"] == hmac_signature(
        "rotated", "1700000000", "0123456789abcdef0123456789abcdef", body
    )
    path.unlink()
    now["t"] = 62.0
    assert signer.secret() == "rotated"  # unreadable now: keep the last good secret
    with pytest.raises(CredentialsError, match="HMAC_SECRET_FILE"):
        HMACSigner(str(tmp_path / "missing")).secret()


# ------------------------------------------------------------------------------------ providers


class _Recorder(BaseHTTPRequestHandler):
    server: Any

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.requests.append((self.command, self.path, dict(self.headers), body))
        status, content_type, data = self.server.respond(self.server.requests[-1])
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = _answer
    do_POST = _answer


@pytest.fixture
def local_server() -> Iterator[Any]:
    server: Any = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    server.requests = []
    server.respond = lambda request: (500, "text/plain", b"no responder")
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def sts_response(n: int, expiration: datetime) -> bytes:
    return f"""<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <SubjectFromWebIdentityToken>system:serviceaccount:nodeflow:nodeflow-agent</SubjectFromWebIdentityToken>
    <Audience>sts.amazonaws.com</Audience>
    <AssumedRoleUser>
      <Arn>arn:aws:sts::123456789012:assumed-role/nodeflow-agent/nodeflow-agent-0</Arn>
      <AssumedRoleId>AROAEXAMPLE:nodeflow-agent-0</AssumedRoleId>
    </AssumedRoleUser>
    <Credentials>
      <SessionToken>session-token-{n}</SessionToken>
      <SecretAccessKey>secret-{n}</SecretAccessKey>
      <Expiration>{expiration.strftime("%Y-%m-%dT%H:%M:%SZ")}</Expiration>
      <AccessKeyId>ASIAEXAMPLE{n}</AccessKeyId>
    </Credentials>
    <Provider>arn:aws:iam::123456789012:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/EXAMPLE</Provider>
  </AssumeRoleWithWebIdentityResult>
  <ResponseMetadata><RequestId>c6104cbe-af31-11e0-8154-cbc7ccf896c7</RequestId></ResponseMetadata>
</AssumeRoleWithWebIdentityResponse>""".encode()


def test_web_identity_assumes_the_role_and_refreshes_before_expiry(local_server: Any, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("eyJhbGciOiJSUzI1NiJ9.projected.token\n")
    now = {"t": FIXED.timestamp()}
    served = {"n": 0}

    def respond(request: Any) -> tuple[int, str, bytes]:
        served["n"] += 1
        return 200, "text/xml", sts_response(served["n"], FIXED + timedelta(hours=1))

    local_server.respond = respond
    provider = WebIdentityProvider(
        "arn:aws:iam::123456789012:role/nodeflow-agent",
        str(token_file),
        local_server.url + "/",
        session_name="nodeflow-agent-0",
        clock=lambda: now["t"],
    )
    creds = provider.get()
    assert creds == Credentials("ASIAEXAMPLE1", "secret-1", "session-token-1", (FIXED + timedelta(hours=1)).timestamp())
    method, _path, headers, body = local_server.requests[0]
    assert method == "POST"
    form = {k: v[0] for k, v in parse_qs(body.decode()).items()}
    assert form == {
        "Action": "AssumeRoleWithWebIdentity",
        "Version": "2011-06-15",
        "RoleArn": "arn:aws:iam::123456789012:role/nodeflow-agent",
        "RoleSessionName": "nodeflow-agent-0",
        "WebIdentityToken": "eyJhbGciOiJSUzI1NiJ9.projected.token",
    }
    assert "Authorization" not in headers  # the web identity token is the credential
    now["t"] += 50 * 60  # 10 minutes left: still cached
    assert provider.get().access_key == "ASIAEXAMPLE1"
    now["t"] += 6 * 60  # 4 minutes left: refreshed
    assert provider.get().access_key == "ASIAEXAMPLE2"
    assert len(local_server.requests) == 2


def test_web_identity_errors_name_the_cause(local_server: Any, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("t")
    error = b"""<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type>
<Code>InvalidIdentityToken</Code><Message>Incorrect token audience</Message></Error><RequestId>x</RequestId></ErrorResponse>"""
    local_server.respond = lambda request: (400, "text/xml", error)
    provider = WebIdentityProvider("arn:aws:iam::1:role/r", str(token_file), local_server.url + "/")
    with pytest.raises(CredentialsError, match="InvalidIdentityToken: Incorrect token audience"):
        provider.get()
    missing = WebIdentityProvider("arn:aws:iam::1:role/r", str(tmp_path / "nope"), local_server.url + "/")
    with pytest.raises(CredentialsError, match="AWS_WEB_IDENTITY_TOKEN_FILE"):
        missing.get()


def test_a_failed_refresh_keeps_still_valid_credentials(local_server: Any, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("t")
    now = {"t": FIXED.timestamp()}
    local_server.respond = lambda request: (200, "text/xml", sts_response(1, FIXED + timedelta(hours=1)))
    provider = WebIdentityProvider(
        "arn:aws:iam::1:role/r", str(token_file), local_server.url + "/", clock=lambda: now["t"]
    )
    assert provider.get().access_key == "ASIAEXAMPLE1"
    local_server.respond = lambda request: (503, "text/plain", b"unavailable")
    now["t"] += 58 * 60  # inside the refresh margin, not expired
    assert provider.get().access_key == "ASIAEXAMPLE1"
    now["t"] += 5 * 60  # expired
    with pytest.raises(CredentialsError, match="HTTP 503"):
        provider.get()


def test_pod_identity_credentials(local_server: Any, tmp_path: Path) -> None:
    token_file = tmp_path / "eks-pod-identity-token"
    token_file.write_text("pod-identity-jwt")
    now = {"t": FIXED.timestamp()}
    served = {"n": 0}

    def respond(request: Any) -> tuple[int, str, bytes]:
        _, _, headers, _ = request
        if headers.get("Authorization") != "pod-identity-jwt":
            return 401, "application/json", b'{"message":"unauthorized"}'
        served["n"] += 1
        body = {
            "AccessKeyId": f"ASIAPOD{served['n']}",
            "SecretAccessKey": "pod-secret",
            "Token": "pod-token",
            "AccountId": "123456789012",
            "Expiration": (FIXED + timedelta(hours=6)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        return 200, "application/json", json.dumps(body).encode()

    local_server.respond = respond
    provider = ContainerProvider(
        local_server.url + "/v1/credentials", token_file=str(token_file), clock=lambda: now["t"]
    )
    creds = provider.get()
    assert (creds.access_key, creds.secret_key, creds.token) == ("ASIAPOD1", "pod-secret", "pod-token")
    assert creds.expiration == (FIXED + timedelta(hours=6)).timestamp()
    assert local_server.requests[0][:2] == ("GET", "/v1/credentials")
    now["t"] += 6 * 3600 - 120
    assert provider.get().access_key == "ASIAPOD2"
    token_file.write_text("wrong")
    now["t"] += 3600
    with pytest.raises(CredentialsError, match="HTTP 401"):
        provider.get()


def test_container_uri_must_be_local_or_https() -> None:
    with pytest.raises(CredentialsError, match="AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        ContainerProvider("http://attacker.example.com/creds")
    ContainerProvider("http://169.254.170.23/v1/credentials")
    ContainerProvider("https://creds.example.com/v1")


def test_provider_chain_from_env(tmp_path: Path) -> None:
    static = provider_from_env(
        {"AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "s", "AWS_SESSION_TOKEN": "t"}, "us-east-1"
    )
    assert static.get() == Credentials("AKID", "s", "t")
    irsa = provider_from_env(
        {"AWS_ROLE_ARN": "arn:aws:iam::1:role/r", "AWS_WEB_IDENTITY_TOKEN_FILE": str(tmp_path / "t")}, "eu-west-1"
    )
    assert isinstance(irsa, WebIdentityProvider)
    assert irsa.endpoint == "https://sts.eu-west-1.amazonaws.com/"
    cn = provider_from_env(
        {"AWS_ROLE_ARN": "arn:aws-cn:iam::1:role/r", "AWS_WEB_IDENTITY_TOKEN_FILE": "f"}, "cn-north-1"
    )
    assert isinstance(cn, WebIdentityProvider)
    assert cn.endpoint == "https://sts.cn-north-1.amazonaws.com.cn/"
    override = provider_from_env(
        {"AWS_ROLE_ARN": "r", "AWS_WEB_IDENTITY_TOKEN_FILE": "f", "AWS_STS_ENDPOINT": "http://127.0.0.1:1/"},
        "us-east-1",
    )
    assert isinstance(override, WebIdentityProvider)
    assert override.endpoint == "http://127.0.0.1:1/"
    pod_identity = provider_from_env(
        {
            "AWS_CONTAINER_CREDENTIALS_FULL_URI": "http://169.254.170.23/v1/credentials",
            "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": "/var/run/secrets/pods.eks.amazonaws.com/serviceaccount/eks-pod-identity-token",
        },
        "us-east-1",
    )
    assert isinstance(pod_identity, ContainerProvider)
    with pytest.raises(CredentialsError, match="AWS_ROLE_ARN"):
        provider_from_env({}, "us-east-1")
    with pytest.raises(CredentialsError, match="AWS_SECRET_ACCESS_KEY"):
        provider_from_env({"AWS_ACCESS_KEY_ID": "AKID"}, "us-east-1")
    with pytest.raises(CredentialsError, match="AWS_WEB_IDENTITY_TOKEN_FILE"):
        provider_from_env({"AWS_ROLE_ARN": "arn:aws:iam::1:role/r"}, "us-east-1")
