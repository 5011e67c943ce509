"""Typed settings from the environment; a bad value fails at start with a message naming the variable."""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, TypeVar
from urllib.parse import urlsplit

__all__ = ["MAX_BODY_BYTES", "MAX_EVENTS_PER_REQUEST", "Settings", "SettingsError", "region_from_url"]

MAX_BODY_BYTES = 262_144  # PROTOCOL.md: larger requests get 413
MAX_EVENTS_PER_REQUEST = 500  # PROTOCOL.md: 1 to 500 events per request

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
_FUNCTION_URL_HOST = re.compile(r"^[a-z0-9]+\.lambda-url\.(?P<region>[a-z]{2}(?:-[a-z]+)+-\d+)\.on\.aws$")
_REGION = re.compile(r"^[a-z]{2}(?:-[a-z]+)+-\d+$")
_CLUSTER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")

T = TypeVar("T", int, float)


class SettingsError(ValueError):
    """A setting is missing or invalid; the message starts with the variable's name."""


def region_from_url(url: str) -> str | None:
    """``https://abc.lambda-url.eu-west-1.on.aws/`` -> ``eu-west-1``; None for other hosts."""
    m = _FUNCTION_URL_HOST.match((urlsplit(url).hostname or "").lower())
    return m["region"] if m else None


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Settings:
    webhook_url: str
    cluster_name: str
    agent_name: str
    auth_mode: Literal["iam", "hmac"] = "iam"
    signing_region: str = ""  # iam mode: the Function URL's region
    aws_region: str = ""  # the pod's region (regional STS endpoint)
    hmac_secret_file: str = ""
    kube_api_url: str = ""
    kube_token_file: str = f"{SA_DIR}/token"
    kube_ca_file: str = f"{SA_DIR}/ca.crt"
    kube_insecure: bool = False
    health_port: int = 8080
    health_bind: str = "0.0.0.0"
    resync_seconds: float = 300.0
    cluster_metrics_seconds: float = 10.0
    buffer_max_events: int = 20_000
    batch_max_events: int = 100
    batch_max_bytes: int = 200_000
    batch_max_wait: float = 0.1
    flush_timeout_seconds: float = 20.0
    watch_timeout_seconds: int = 300
    list_page_size: int = 500
    backoff_base_seconds: float = 0.5
    backoff_max_seconds: float = 30.0
    request_timeout_seconds: float = 15.0
    ready_failure_seconds: float = 60.0
    log_level: str = "info"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env

        def get(name: str, default: str = "") -> str:
            return env.get(name, "").strip() or default

        def required(name: str) -> str:
            value = get(name)
            if not value:
                raise SettingsError(f"{name}: required")
            return value

        def number(name: str, default: T, parse: Callable[[str], T], low: T, high: T | None = None) -> T:
            raw = get(name)
            if not raw:
                return default
            try:
                value = parse(raw)
            except ValueError:
                raise SettingsError(f"{name}: expected a number, got {raw!r}") from None
            if value < low or (high is not None and value > high):
                bound = f"between {low} and {high}" if high is not None else f"at least {low}"
                raise SettingsError(f"{name}: must be {bound}, got {raw!r}")
            return value

        def flag(name: str) -> bool:
            raw = get(name, "false").lower()
            if raw not in ("true", "false", "1", "0", "yes", "no"):
                raise SettingsError(f"{name}: expected true or false, got {raw!r}")
            return raw in ("true", "1", "yes")

        webhook_url = required("WEBHOOK_URL")
        parts = urlsplit(webhook_url)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise SettingsError(f"WEBHOOK_URL: expected an https:// URL, got {webhook_url!r}")
        if parts.scheme == "http" and not _is_loopback(parts.hostname):
            raise SettingsError("WEBHOOK_URL: plain http is only allowed to a loopback address; use https")

        cluster = required("CLUSTER_NAME")
        if not _CLUSTER.match(cluster):
            raise SettingsError(f"CLUSTER_NAME: 1-100 characters of [A-Za-z0-9_.-], got {cluster!r}")

        mode = get("AUTH_MODE", "iam").lower()
        if mode not in ("iam", "hmac"):
            raise SettingsError(f"AUTH_MODE: expected 'iam' or 'hmac', got {mode!r}")
        aws_region = get("AWS_REGION") or get("AWS_DEFAULT_REGION")
        signing_region = ""
        hmac_file = get("HMAC_SECRET_FILE")
        if mode == "iam":
            signing_region = region_from_url(webhook_url) or aws_region
            if not signing_region:
                raise SettingsError(
                    "AWS_REGION: required in iam mode when WEBHOOK_URL is not a Lambda Function URL "
                    "(<id>.lambda-url.<region>.on.aws)"
                )
            if not _REGION.match(signing_region):
                raise SettingsError(f"AWS_REGION: not a region name: {signing_region!r}")
        else:
            if not hmac_file:
                raise SettingsError("HMAC_SECRET_FILE: required when AUTH_MODE=hmac")
            try:
                with open(hmac_file, encoding="utf-8") as f:
                    secret = f.read().rstrip("\r\n")
            except OSError as e:
                raise SettingsError(f"HMAC_SECRET_FILE: cannot read {hmac_file}: {e.strerror}") from None
            if not secret:
                raise SettingsError(f"HMAC_SECRET_FILE: {hmac_file} is empty")

        kube_api_url = get("KUBE_API_URL")
        if not kube_api_url:
            host, port = get("KUBERNETES_SERVICE_HOST"), get("KUBERNETES_SERVICE_PORT", "443")
            if not host:
                raise SettingsError(
                    "KUBE_API_URL: required outside a cluster (KUBERNETES_SERVICE_HOST is not set either)"
                )
            if ":" in host and not host.startswith("["):
                host = f"[{host}]"  # IPv6 service address
            kube_api_url = f"https://{host}:{port}"
        elif urlsplit(kube_api_url).scheme not in ("http", "https"):
            raise SettingsError(f"KUBE_API_URL: expected http(s)://host:port, got {kube_api_url!r}")

        log_level = get("LOG_LEVEL", "info").lower()
        if log_level not in ("debug", "info", "warning", "error"):
            raise SettingsError(f"LOG_LEVEL: expected debug, info, warning or error, got {log_level!r}")

        return cls(
            webhook_url=webhook_url,
            cluster_name=cluster,
            agent_name=get("AGENT_NAME") or get("POD_NAME") or socket.gethostname(),
            auth_mode="iam" if mode == "iam" else "hmac",
            signing_region=signing_region,
            aws_region=aws_region or signing_region,
            hmac_secret_file=hmac_file,
            kube_api_url=kube_api_url.rstrip("/"),
            kube_token_file=get("KUBE_TOKEN_FILE", f"{SA_DIR}/token"),
            kube_ca_file=get("KUBE_CA_FILE", f"{SA_DIR}/ca.crt"),
            kube_insecure=flag("KUBE_INSECURE"),
            health_port=number("HEALTH_PORT", 8080, int, 0, 65535),
            health_bind=get("HEALTH_BIND", "0.0.0.0"),
            resync_seconds=number("RESYNC_SECONDS", 300.0, float, 0.1),
            cluster_metrics_seconds=number("CLUSTER_METRICS_SECONDS", 10.0, float, 0.0),
            buffer_max_events=number("BUFFER_MAX_EVENTS", 20_000, int, 1),
            batch_max_events=number("BATCH_MAX_EVENTS", 100, int, 1, MAX_EVENTS_PER_REQUEST),
            batch_max_bytes=number("BATCH_MAX_BYTES", 200_000, int, 4096, MAX_BODY_BYTES),
            batch_max_wait=number("BATCH_MAX_WAIT", 0.1, float, 0.0, 60.0),
            flush_timeout_seconds=number("FLUSH_TIMEOUT_SECONDS", 20.0, float, 0.0),
            watch_timeout_seconds=number("WATCH_TIMEOUT_SECONDS", 300, int, 1, 3600),
            list_page_size=number("LIST_PAGE_SIZE", 500, int, 1, 100_000),
            backoff_base_seconds=number("BACKOFF_BASE_SECONDS", 0.5, float, 0.001),
            backoff_max_seconds=number("BACKOFF_MAX_SECONDS", 30.0, float, 0.001),
            request_timeout_seconds=number("REQUEST_TIMEOUT_SECONDS", 15.0, float, 0.1),
            ready_failure_seconds=number("READY_FAILURE_SECONDS", 60.0, float, 0.0),
            log_level=log_level,
        )
