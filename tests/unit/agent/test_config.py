"""config: defaults, parsing, and errors that name the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeflow_agent.config import Settings, SettingsError, region_from_url

FUNCTION_URL = "https://abcdefghij0123456789.lambda-url.eu-west-1.on.aws/"
BASE = {"WEBHOOK_URL": FUNCTION_URL, "CLUSTER_NAME": "demo", "KUBERNETES_SERVICE_HOST": "10.100.0.1"}


def test_defaults_in_cluster() -> None:
    s = Settings.from_env({**BASE, "KUBERNETES_SERVICE_PORT": "443", "POD_NAME": "nodeflow-agent-7d9c-abcde"})
    assert s.webhook_url == FUNCTION_URL
    assert s.cluster_name == "demo"
    assert s.agent_name == "nodeflow-agent-7d9c-abcde"
    assert s.auth_mode == "iam"
    assert s.signing_region == "eu-west-1"  # from the Function URL
    assert s.kube_api_url == "https://10.100.0.1:443"
    assert s.kube_token_file == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    assert s.kube_ca_file == "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
    assert (s.health_port, s.resync_seconds, s.buffer_max_events) == (8080, 300.0, 20_000)
    assert (s.batch_max_events, s.batch_max_wait, s.flush_timeout_seconds) == (100, 0.1, 20.0)
    assert s.batch_max_bytes < 262_144


def test_overrides() -> None:
    s = Settings.from_env(
        {
            "WEBHOOK_URL": "http://127.0.0.1:8000/hook",
            "CLUSTER_NAME": "c1",
            "AWS_REGION": "us-west-2",
            "KUBE_API_URL": "http://127.0.0.1:6443/",
            "KUBE_INSECURE": "true",
            "HEALTH_PORT": "0",
            "HEALTH_BIND": "127.0.0.1",
            "RESYNC_SECONDS": "2.5",
            "BUFFER_MAX_EVENTS": "50",
            "BATCH_MAX_EVENTS": "500",
            "BATCH_MAX_WAIT": "0.01",
            "AGENT_NAME": "a1",
        }
    )
    assert s.signing_region == "us-west-2"
    assert s.kube_api_url == "http://127.0.0.1:6443"
    assert s.kube_insecure
    assert (s.health_port, s.health_bind, s.resync_seconds) == (0, "127.0.0.1", 2.5)
    assert (s.buffer_max_events, s.batch_max_events, s.batch_max_wait, s.agent_name) == (50, 500, 0.01, "a1")


def test_ipv6_service_host() -> None:
    s = Settings.from_env({**BASE, "KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"})
    assert s.kube_api_url == "https://[fd00::1]:443"


def test_hmac_mode_reads_the_secret_file(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    s = Settings.from_env({**BASE, "AUTH_MODE": "hmac", "HMAC_SECRET_FILE": str(secret)})
    assert (s.auth_mode, s.hmac_secret_file) == ("hmac", str(secret))


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"WEBHOOK_URL": ""}, "WEBHOOK_URL"),
        ({"WEBHOOK_URL": "ftp://x"}, "WEBHOOK_URL"),
        ({"WEBHOOK_URL": "http://webhook.example.com/"}, "WEBHOOK_URL"),  # plain http off-host
        ({"CLUSTER_NAME": ""}, "CLUSTER_NAME"),
        ({"CLUSTER_NAME": "bad name!"}, "CLUSTER_NAME"),
        ({"AUTH_MODE": "token"}, "AUTH_MODE"),
        ({"WEBHOOK_URL": "https://webhook.example.com/"}, "AWS_REGION"),  # iam without a region
        ({"WEBHOOK_URL": "https://webhook.example.com/", "AWS_REGION": "mars"}, "AWS_REGION"),
        ({"AUTH_MODE": "hmac"}, "HMAC_SECRET_FILE"),
        ({"AUTH_MODE": "hmac", "HMAC_SECRET_FILE": "/nonexistent/secret"}, "HMAC_SECRET_FILE"),
        ({"KUBERNETES_SERVICE_HOST": ""}, "KUBE_API_URL"),
        ({"KUBE_API_URL": "127.0.0.1:6443"}, "KUBE_API_URL"),
        ({"KUBE_INSECURE": "maybe"}, "KUBE_INSECURE"),
        ({"HEALTH_PORT": "http"}, "HEALTH_PORT"),
        ({"HEALTH_PORT": "70000"}, "HEALTH_PORT"),
        ({"RESYNC_SECONDS": "0"}, "RESYNC_SECONDS"),
        ({"BUFFER_MAX_EVENTS": "0"}, "BUFFER_MAX_EVENTS"),
        ({"BATCH_MAX_EVENTS": "501"}, "BATCH_MAX_EVENTS"),  # the protocol's limit per request
        ({"BATCH_MAX_BYTES": "300000"}, "BATCH_MAX_BYTES"),  # over 256 KiB
        ({"BATCH_MAX_WAIT": "-1"}, "BATCH_MAX_WAIT"),
        ({"FLUSH_TIMEOUT_SECONDS": "soon"}, "FLUSH_TIMEOUT_SECONDS"),
        ({"LOG_LEVEL": "loud"}, "LOG_LEVEL"),
    ],
)
def test_errors_name_the_variable(env: dict[str, str], variable: str) -> None:
    with pytest.raises(SettingsError) as excinfo:
        Settings.from_env({**BASE, **env})
    assert str(excinfo.value).startswith(f"{variable}:")


def test_empty_secret_file_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("\n")
    with pytest.raises(SettingsError, match=r"^HMAC_SECRET_FILE: .* is empty"):
        Settings.from_env({**BASE, "AUTH_MODE": "hmac", "HMAC_SECRET_FILE": str(secret)})


def test_settings_are_frozen() -> None:
    s = Settings.from_env(BASE)
    with pytest.raises(AttributeError):
        s.cluster_name = "other"  # type: ignore[misc]


def test_region_from_function_url() -> None:
    assert region_from_url("https://abc123.lambda-url.us-gov-west-1.on.aws/") == "us-gov-west-1"
    assert region_from_url("https://abc123.lambda-url.ap-southeast-3.on.aws") == "ap-southeast-3"
    assert region_from_url("https://webhook.example.com/") is None
