"""A Lambda Function URL on 127.0.0.1: HTTP in, a payload-v2.0 event to the function, its response out.

With auth type ``AWS_IAM`` it verifies SigV4 the way the real Function URL does before the function
runs (403 ``{"Message": "Forbidden"}`` when unsigned, wrongly signed, signed for another service or
region, or dated more than 15 minutes away), and passes the caller in
``requestContext.authorizer.iam``. Callers are the access keys given in ``credentials``
(access key id -> ``Caller``); a real deployment gets them from IAM.

``outage(status)`` makes it answer every request with ``status`` (a webhook outage) until
``recover()``; ``requests`` records ``(status, monotonic time)`` per request.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

__all__ = ["Caller", "FunctionUrlServer"]

MAX_SKEW_SECONDS = 900
Invoke = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Caller:
    secret_key: str
    arn: str  # e.g. arn:aws:sts::123456789012:assumed-role/nodeflow-demo-agent/agent
    account_id: str = "123456789012"


class _Refused(Exception):
    pass


def _forbidden() -> tuple[int, dict[str, str], bytes]:
    return 403, {"content-type": "application/json"}, json.dumps({"Message": "Forbidden"}).encode()


class FunctionUrlServer:
    def __init__(
        self,
        invoke: Invoke,
        *,
        auth_type: str = "AWS_IAM",
        region: str = "us-east-1",
        credentials: Mapping[str, Caller] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        if auth_type not in ("AWS_IAM", "NONE"):
            raise ValueError(f"auth_type: expected AWS_IAM or NONE, got {auth_type!r}")
        self.invoke = invoke
        self.auth_type = auth_type
        self.region = region
        self.credentials = dict(credentials or {})
        self.requests: list[tuple[int, float]] = []
        self._outage: int | None = None
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer((host, port), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ control

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/"

    def start(self) -> FunctionUrlServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="function-url", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> FunctionUrlServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def outage(self, status: int = 503) -> None:
        self._outage = status

    def recover(self) -> None:
        self._outage = None

    def statuses(self) -> list[int]:
        with self._lock:
            return [s for s, _ in self.requests]

    # ------------------------------------------------------------------ request handling

    def _verify(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
        """SigV4 as Lambda Function URLs check it; the ``authorizer.iam`` block for the caller."""
        auth = headers.get("authorization", "")
        if not auth.startswith("AWS4-HMAC-SHA256 "):
            raise _Refused("unsigned")
        fields = dict(part.strip().split("=", 1) for part in auth[len("AWS4-HMAC-SHA256 ") :].split(",") if "=" in part)
        try:
            access_key, date, region, service, terminal = fields["Credential"].split("/")
            signed = fields["SignedHeaders"].split(";")
            signature = fields["Signature"]
        except (KeyError, ValueError):
            raise _Refused("malformed authorization") from None
        caller = self.credentials.get(access_key)
        if caller is None or region != self.region or service != "lambda" or terminal != "aws4_request":
            raise _Refused("unknown key or scope")
        amz_date = headers.get("x-amz-date", "")
        try:
            when = datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
        except ValueError:
            raise _Refused("bad x-amz-date") from None
        if abs((datetime.now(UTC) - when).total_seconds()) > MAX_SKEW_SECONDS or not amz_date.startswith(date):
            raise _Refused("signature expired")
        if "host" not in signed or any(h not in headers for h in signed):
            raise _Refused("signed header missing")
        declared = headers.get("x-amz-content-sha256")
        if declared and declared != "UNSIGNED-PAYLOAD" and declared != hashlib.sha256(body).hexdigest():
            raise _Refused("payload hash mismatch")
        request = AWSRequest(
            method=method, url=f"http://{headers['host']}{path}", data=body, headers={h: headers[h] for h in signed}
        )
        request.context["timestamp"] = amz_date
        signer = SigV4Auth(
            Credentials(access_key, caller.secret_key, headers.get("x-amz-security-token")), "lambda", region
        )
        canonical = signer.canonical_request(request)
        expected = signer.signature(signer.string_to_sign(request, canonical), request)
        if expected != signature:
            raise _Refused("signature mismatch")
        return {
            "accessKey": access_key,
            "accountId": caller.account_id,
            "callerId": caller.arn.rsplit("/", 1)[-1],
            "userArn": caller.arn,
            "userId": caller.arn.rsplit("/", 1)[-1],
        }

    def _event(
        self, method: str, raw: str, headers: Mapping[str, str], body: bytes, iam: dict[str, Any] | None
    ) -> dict[str, Any]:
        parts = urlsplit(raw)
        textual = headers.get("content-type", "").startswith(("application/json", "text/"))
        try:
            text = body.decode() if textual else None
        except UnicodeDecodeError:
            text = None
        now = datetime.now(UTC)
        context: dict[str, Any] = {
            "accountId": iam["accountId"] if iam else "anonymous",
            "apiId": "sandbox",
            "domainName": headers.get("host", ""),
            "http": {
                "method": method,
                "path": parts.path or "/",
                "protocol": "HTTP/1.1",
                "sourceIp": "127.0.0.1",
                "userAgent": headers.get("user-agent", ""),
            },
            "requestId": str(uuid.uuid4()),
            "routeKey": "$default",
            "stage": "$default",
            "time": now.strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "timeEpoch": int(now.timestamp() * 1000),
        }
        if iam:
            context["authorizer"] = {"iam": iam}
        return {
            "version": "2.0",
            "routeKey": "$default",
            "rawPath": parts.path or "/",
            "rawQueryString": parts.query,
            "headers": dict(headers),
            "requestContext": context,
            "body": text if text is not None else base64.b64encode(body).decode(),
            "isBase64Encoded": text is None,
        }

    def handle(
        self, method: str, raw_path: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        if self._outage is not None:
            return self._outage, {"content-type": "application/json"}, b'{"Message":"Service Unavailable"}'
        iam = None
        if self.auth_type == "AWS_IAM":
            try:
                iam = self._verify(method, urlsplit(raw_path).path or "/", headers, body)
            except _Refused:
                return _forbidden()
        try:
            out = self.invoke(self._event(method, raw_path, headers, body, iam))
        except Exception:
            return 502, {"content-type": "application/json"}, b'{"Message":"Internal Server Error"}'
        status = int(out.get("statusCode", 200))
        payload = out.get("body") or ""
        data = base64.b64decode(payload) if out.get("isBase64Encoded") else str(payload).encode()
        return status, {str(k): str(v) for k, v in (out.get("headers") or {}).items()}, data

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers: dict[str, str] = {}
                for key, value in self.headers.items():
                    k = key.lower()
                    headers[k] = f"{headers[k]},{value}" if k in headers else value
                status, out_headers, data = server.handle(self.command, self.path, headers, body)
                with server._lock:
                    server.requests.append((status, time.monotonic()))
                self.send_response(status)
                for k, v in out_headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_POST = do_GET = do_PUT = do_DELETE = _serve

        return Handler
