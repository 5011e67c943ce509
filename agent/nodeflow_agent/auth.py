"""Request signing for the webhook: AWS Signature Version 4 (``iam``) or the shared-secret HMAC (``hmac``).

Credentials for SigV4, first match wins (as the AWS SDKs do):

1. static: ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` (/ ``AWS_SESSION_TOKEN``);
2. IRSA: ``AWS_ROLE_ARN`` + ``AWS_WEB_IDENTITY_TOKEN_FILE`` -> STS ``AssumeRoleWithWebIdentity`` on the regional
   endpoint (``AWS_STS_ENDPOINT`` overrides it);
3. EKS Pod Identity / container credentials: ``AWS_CONTAINER_CREDENTIALS_FULL_URI`` with
   ``AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE`` (or ``AWS_CONTAINER_AUTHORIZATION_TOKEN``).

Temporary credentials are refreshed ``REFRESH_MARGIN`` seconds before they expire.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import threading
import time
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from .log import get_logger

__all__ = [
    "REFRESH_MARGIN",
    "ContainerProvider",
    "CredentialProvider",
    "Credentials",
    "CredentialsError",
    "HMACSigner",
    "SigV4Signer",
    "Signer",
    "StaticProvider",
    "WebIdentityProvider",
    "hmac_signature",
    "provider_from_env",
]

log = get_logger("auth")
REFRESH_MARGIN = 300.0  # refresh temporary credentials this long before they expire
_STS_NS = "{https://sts.amazonaws.com/doc/2011-06-15/}"
_CONTAINER_HOSTS = ("169.254.170.2", "169.254.170.23", "fd00:ec2::23")


class CredentialsError(Exception):
    """No usable AWS credentials (the message says which source failed and why)."""


@dataclass(frozen=True)
class Credentials:
    access_key: str
    secret_key: str
    token: str | None = None
    expiration: float | None = None  # Unix time; None for long-term keys


class CredentialProvider(Protocol):
    def get(self) -> Credentials: ...


class Signer(Protocol):
    def sign(self, method: str, url: str, headers: dict[str, str], body: bytes) -> dict[str, str]:
        """Return ``headers`` plus the authentication headers for this request."""
        ...


# ---------------------------------------------------------------------------------------- providers


class StaticProvider:
    def __init__(self, credentials: Credentials) -> None:
        self._credentials = credentials

    def get(self) -> Credentials:
        return self._credentials


class _Refreshing:
    """Caches temporary credentials; fetches new ones ``REFRESH_MARGIN`` before expiry. If a refresh fails while
    the cached credentials are still valid, they are used (and the refresh is retried on the next call)."""

    source = "credentials"

    def __init__(self, clock: Callable[[], float] = time.time, refresh_margin: float = REFRESH_MARGIN) -> None:
        self._clock = clock
        self._margin = refresh_margin
        self._lock = threading.Lock()
        self._cached: Credentials | None = None

    def _fetch(self) -> Credentials:
        raise NotImplementedError

    def get(self) -> Credentials:
        with self._lock:
            now = self._clock()
            cached = self._cached
            if cached is not None and (cached.expiration is None or cached.expiration - now > self._margin):
                return cached
            try:
                fresh = self._fetch()
            except CredentialsError as e:
                if cached is not None and cached.expiration is not None and cached.expiration > now:
                    log.warning("credential refresh failed; using the cached ones", extra={"error": str(e)})
                    return cached
                raise
            log.info(
                "credentials refreshed",
                extra={
                    "source": self.source,
                    "expires_in": round(fresh.expiration - now) if fresh.expiration else None,
                },
            )
            self._cached = fresh
            return fresh


def _parse_time(value: str, what: str) -> float:
    try:
        return datetime.fromisoformat(value.strip()).timestamp()
    except ValueError:
        raise CredentialsError(f"{what}: unreadable expiration {value!r}") from None


def sts_endpoint(region: str) -> str:
    suffix = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return f"https://sts.{region}.{suffix}/"


class WebIdentityProvider(_Refreshing):
    """IRSA: exchange the projected service-account token for role credentials (STS AssumeRoleWithWebIdentity)."""

    source = "web-identity"

    def __init__(
        self,
        role_arn: str,
        token_file: str,
        endpoint: str,
        session_name: str = "nodeflow-agent",
        timeout: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(clock)
        self.role_arn = role_arn
        self.token_file = token_file
        self.endpoint = endpoint
        self.session_name = session_name[:64]
        self.timeout = timeout

    def _fetch(self) -> Credentials:
        try:
            with open(self.token_file, encoding="utf-8") as f:
                token = f.read().strip()
        except OSError as e:
            raise CredentialsError(
                f"AWS_WEB_IDENTITY_TOKEN_FILE: cannot read {self.token_file}: {e.strerror}"
            ) from None
        form = urlencode(
            {
                "Action": "AssumeRoleWithWebIdentity",
                "Version": "2011-06-15",
                "RoleArn": self.role_arn,
                "RoleSessionName": self.session_name,
                "WebIdentityToken": token,
            }
        ).encode()
        request = urllib.request.Request(
            self.endpoint,
            data=form,
            method="POST",
            headers={"Content-Type": "application/x-www-form-urlencoded; charset=utf-8", "Accept": "application/xml"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            code, message = _sts_error(e.read())
            raise CredentialsError(f"STS AssumeRoleWithWebIdentity: HTTP {e.code} {code}: {message}") from None
        except (OSError, ValueError) as e:
            raise CredentialsError(f"STS AssumeRoleWithWebIdentity: {e}") from None
        try:
            root = ET.fromstring(raw)
        except ET.ParseError as e:
            raise CredentialsError(f"STS AssumeRoleWithWebIdentity: unreadable response: {e}") from None
        creds = root.find(f"{_STS_NS}AssumeRoleWithWebIdentityResult/{_STS_NS}Credentials")
        if creds is None:
            raise CredentialsError("STS AssumeRoleWithWebIdentity: no Credentials in the response")

        def text(tag: str) -> str:
            value = creds.findtext(f"{_STS_NS}{tag}")
            if not value:
                raise CredentialsError(f"STS AssumeRoleWithWebIdentity: {tag} missing from the response")
            return value.strip()

        return Credentials(
            text("AccessKeyId"),
            text("SecretAccessKey"),
            text("SessionToken"),
            _parse_time(text("Expiration"), "STS"),
        )


def _sts_error(raw: bytes) -> tuple[str, str]:
    try:
        root = ET.fromstring(raw)
    except ET.ParseError:
        return "", raw[:200].decode("utf-8", "replace")
    return (root.findtext(f".//{_STS_NS}Code") or "", root.findtext(f".//{_STS_NS}Message") or "")


class ContainerProvider(_Refreshing):
    """EKS Pod Identity (and ECS): GET the credentials URI with the authorization token, read the JSON."""

    source = "container"

    def __init__(
        self,
        uri: str,
        token_file: str = "",
        token: str = "",
        timeout: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(clock)
        parts = urlsplit(uri)
        host = parts.hostname or ""
        if parts.scheme == "http" and not (host in _CONTAINER_HOSTS or _loopback(host)):
            raise CredentialsError(
                f"AWS_CONTAINER_CREDENTIALS_FULL_URI: plain http is only allowed to loopback or "
                f"{', '.join(_CONTAINER_HOSTS)}, got {host!r}"
            )
        if parts.scheme not in ("http", "https"):
            raise CredentialsError(f"AWS_CONTAINER_CREDENTIALS_FULL_URI: not an http(s) URL: {uri!r}")
        self.uri = uri
        self.token_file = token_file
        self.token = token
        self.timeout = timeout

    def _fetch(self) -> Credentials:
        headers = {"Accept": "application/json"}
        token = self.token
        if self.token_file:
            try:
                with open(self.token_file, encoding="utf-8") as f:
                    token = f.read().strip()
            except OSError as e:
                raise CredentialsError(
                    f"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE: cannot read {self.token_file}: {e.strerror}"
                ) from None
        if token:
            headers["Authorization"] = token
        try:
            with urllib.request.urlopen(urllib.request.Request(self.uri, headers=headers), timeout=self.timeout) as r:
                body = json.loads(r.read())
        except urllib.error.HTTPError as e:
            raise CredentialsError(f"container credentials: HTTP {e.code} from {self.uri}") from None
        except (OSError, ValueError) as e:
            raise CredentialsError(f"container credentials: {e}") from None
        try:
            return Credentials(
                str(body["AccessKeyId"]),
                str(body["SecretAccessKey"]),
                str(body["Token"]) if body.get("Token") else None,
                _parse_time(str(body["Expiration"]), "container credentials") if body.get("Expiration") else None,
            )
        except (KeyError, TypeError) as e:
            raise CredentialsError(f"container credentials: field {e} missing from the response") from None


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def provider_from_env(env: Mapping[str, str], region: str, session_name: str = "nodeflow-agent") -> CredentialProvider:
    """The first configured credential source; ``CredentialsError`` naming the variables when there is none."""

    def get(name: str) -> str:
        return env.get(name, "").strip()

    key, secret = get("AWS_ACCESS_KEY_ID"), get("AWS_SECRET_ACCESS_KEY")
    if key or secret:
        if not (key and secret):
            missing = "AWS_SECRET_ACCESS_KEY" if key else "AWS_ACCESS_KEY_ID"
            raise CredentialsError(f"{missing}: required together with the other static key variable")
        return StaticProvider(Credentials(key, secret, get("AWS_SESSION_TOKEN") or None))
    role, token_file = get("AWS_ROLE_ARN"), get("AWS_WEB_IDENTITY_TOKEN_FILE")
    if role or token_file:
        if not (role and token_file):
            missing = "AWS_WEB_IDENTITY_TOKEN_FILE" if role else "AWS_ROLE_ARN"
            raise CredentialsError(f"{missing}: required for IRSA (web identity) credentials")
        endpoint = get("AWS_STS_ENDPOINT") or sts_endpoint(region)
        return WebIdentityProvider(role, token_file, endpoint, get("AWS_ROLE_SESSION_NAME") or session_name)
    uri = get("AWS_CONTAINER_CREDENTIALS_FULL_URI")
    if not uri and get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"):
        uri = "http://169.254.170.2" + get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
    if uri:
        return ContainerProvider(
            uri,
            token_file=get("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"),
            token=get("AWS_CONTAINER_AUTHORIZATION_TOKEN"),
        )
    raise CredentialsError(
        "AWS_ROLE_ARN: no AWS credentials configured for AUTH_MODE=iam (set AWS_ROLE_ARN + "
        "AWS_WEB_IDENTITY_TOKEN_FILE for IRSA, use EKS Pod Identity, or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)"
    )


# ------------------------------------------------------------------------------------------ signers


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _hmac(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


class SigV4Signer:
    """AWS Signature Version 4 over every header given plus host, x-amz-date, x-amz-content-sha256 (and
    x-amz-security-token with temporary credentials)."""

    def __init__(
        self, provider: CredentialProvider, region: str, service: str = "lambda", clock: Callable[[], float] = time.time
    ) -> None:
        self.provider = provider
        self.region = region
        self.service = service
        self._clock = clock

    def sign(self, method: str, url: str, headers: dict[str, str], body: bytes) -> dict[str, str]:
        creds = self.provider.get()
        parts = urlsplit(url)
        amz_date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(self._clock()))
        date = amz_date[:8]
        payload_hash = _sha256(body)
        out = {k: v for k, v in headers.items() if k.lower() not in ("authorization", "host")}
        default_port = {"https": 443, "http": 80}.get(parts.scheme)
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        out["Host"] = host if parts.port in (None, default_port) else f"{host}:{parts.port}"
        out["X-Amz-Date"] = amz_date
        out["X-Amz-Content-SHA256"] = payload_hash
        if creds.token:
            out["X-Amz-Security-Token"] = creds.token
        else:
            out.pop("X-Amz-Security-Token", None)
        canonical_headers: dict[str, str] = {}
        for name, value in out.items():
            lname = name.lower()
            value = " ".join(str(value).split())
            canonical_headers[lname] = f"{canonical_headers[lname]},{value}" if lname in canonical_headers else value
        signed = ";".join(sorted(canonical_headers))
        query = "&".join(
            f"{k}={v}"
            for k, v in sorted(
                (quote(k, safe="-_.~"), quote(v, safe="-_.~"))
                for k, v in parse_qsl(parts.query, keep_blank_values=True)
            )
        )
        canonical_request = "\n".join(
            [
                method.upper(),
                quote(parts.path or "/", safe="/~"),
                query,
                "".join(f"{k}:{canonical_headers[k]}\n" for k in sorted(canonical_headers)),
                signed,
                payload_hash,
            ]
        )
        scope = f"{date}/{self.region}/{self.service}/aws4_request"
        string_to_sign = f"AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{_sha256(canonical_request.encode())}"
        key = _hmac(f"AWS4{creds.secret_key}".encode(), date)
        key = _hmac(_hmac(_hmac(key, self.region), self.service), "aws4_request")
        signature = hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest()
        out["Authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={creds.access_key}/{scope}, SignedHeaders={signed}, Signature={signature}"
        )
        return out


def hmac_signature(secret: str, timestamp: str, nonce: str, body: bytes) -> str:
    """PROTOCOL.md: ``v1=`` + hex HMAC-SHA256(secret, "v1\\n" + timestamp + "\\n" + nonce + "\\n" + hex(SHA-256(body)))
    with the secret as UTF-8 bytes."""
    message = f"v1\n{timestamp}\n{nonce}\n{_sha256(body)}"
    return "v1=" + hmac.new(secret.encode(), message.encode(), hashlib.sha256).hexdigest()


class HMACSigner:
    """Signs with the shared secret from a file (a mounted Secret), re-read every ``reread_seconds`` so a rotated
    Secret is picked up. Trailing newlines in the file are not part of the secret."""

    def __init__(self, secret_file: str, reread_seconds: float = 30.0, clock: Callable[[], float] = time.monotonic):
        self.secret_file = secret_file
        self._reread = reread_seconds
        self._clock = clock
        self._secret = ""
        self._read_at: float | None = None

    def secret(self) -> str:
        now = self._clock()
        if self._read_at is None or now - self._read_at >= self._reread:
            try:
                with open(self.secret_file, encoding="utf-8") as f:
                    secret = f.read().rstrip("\r\n")
            except OSError as e:
                if not self._secret:
                    raise CredentialsError(f"HMAC_SECRET_FILE: cannot read {self.secret_file}: {e.strerror}") from None
                log.warning("cannot re-read the HMAC secret; keeping the previous one", extra={"error": e.strerror})
            else:
                if secret:
                    self._secret = secret
            self._read_at = now
        if not self._secret:
            raise CredentialsError(f"HMAC_SECRET_FILE: {self.secret_file} is empty")
        return self._secret

    def sign(self, method: str, url: str, headers: dict[str, str], body: bytes) -> dict[str, str]:
        lower = {k.lower(): v for k, v in headers.items()}
        timestamp, nonce = lower.get("x-nodeflow-timestamp", ""), lower.get("x-nodeflow-nonce", "")
        return {**headers, "X-Nodeflow-Signature": hmac_signature(self.secret(), timestamp, nonce, body)}
