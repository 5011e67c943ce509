"""Building ApiClients: EKS tokens (offline, fake credentials), token caching, kubeconfig."""

from __future__ import annotations

import base64
import pathlib
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlparse

import boto3
import pytest
from moto import mock_aws

from nodeflow.kube import connection
from nodeflow.kube.connection import TOKEN_PREFIX, TokenProvider, api_client_for_eks, eks_token
from nodeflow.kube.snapshot import take_snapshot

FAKE_CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").decode()


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[boto3.Session]:
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")
    with mock_aws():
        yield boto3.Session(region_name="us-west-2")


def _decode(token: str) -> str:
    assert token.startswith(TOKEN_PREFIX)
    body = token[len(TOKEN_PREFIX) :]
    assert "=" not in body, "base64url without padding"
    return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode()


def test_eks_token_is_a_presigned_get_caller_identity_with_the_cluster_header(aws: boto3.Session) -> None:
    token = eks_token("demo-cluster", session=aws)
    url = urlparse(_decode(token))
    query = parse_qs(url.query)
    assert url.scheme == "https"
    assert url.hostname is not None
    assert url.hostname.startswith("sts.")
    assert query["Action"] == ["GetCallerIdentity"]
    assert query["Version"] == ["2011-06-15"]
    assert query["X-Amz-Expires"] == ["60"]
    assert "x-k8s-aws-id" in query["X-Amz-SignedHeaders"][0].split(";")
    assert query["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"]
    assert query["X-Amz-Credential"][0].endswith("/us-west-2/sts/aws4_request")


def test_the_cluster_name_is_signed(aws: boto3.Session) -> None:
    """Two clusters, same instant: different signatures (the header value is part of the signature)."""
    a = parse_qs(urlparse(_decode(eks_token("cluster-a", session=aws))).query)["X-Amz-Signature"]
    b = parse_qs(urlparse(_decode(eks_token("cluster-b", session=aws))).query)["X-Amz-Signature"]
    assert a != b


def test_token_provider_caches_and_refreshes_before_expiry(aws: boto3.Session) -> None:
    now = [1_000.0]
    provider = TokenProvider("demo", session=aws, clock=lambda: now[0])
    first = provider.token()
    assert provider.token() is first
    assert provider.generated == 1
    now[0] += 12 * 60  # 12 min: still inside 14 min lifetime - 1 min margin
    assert provider.token() is first
    now[0] += 61  # 13 min 1 s: refresh
    provider.token()
    assert provider.generated == 2
    assert provider.expires_at == pytest.approx(now[0] + 14 * 60)


def test_api_client_for_eks_sends_the_bearer_token(aws: boto3.Session) -> None:
    now = [0.0]
    provider = TokenProvider("demo", session=aws, clock=lambda: now[0])
    client = api_client_for_eks(
        "demo",
        endpoint="https://ABC.gr7.us-west-2.eks.amazonaws.com",
        ca_data=FAKE_CA,
        session=aws,
        token_provider=provider,
    )
    config = client.configuration
    assert config.host == "https://ABC.gr7.us-west-2.eks.amazonaws.com"
    assert "BEGIN CERTIFICATE" in config.ca_cert_data
    header = config.auth_settings()["BearerToken"]["value"]
    assert header.startswith("Bearer k8s-aws-v1.")
    config.auth_settings()
    assert provider.generated == 1  # cached across requests
    # the refresh hook renews the token once it is old
    now[0] += 3600
    assert config.auth_settings()["BearerToken"]["value"].startswith("Bearer k8s-aws-v1.")
    assert provider.generated == 2


def test_endpoint_and_ca_come_from_describe_cluster(aws: boto3.Session) -> None:
    eks = aws.client("eks")
    iam = aws.client("iam")
    role = iam.create_role(RoleName="eks", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    eks.create_cluster(name="demo", roleArn=role, resourcesVpcConfig={"subnetIds": []})
    info = connection.describe_cluster("demo", session=aws)
    assert info.endpoint.startswith("https://")
    client = api_client_for_eks("demo", session=aws)
    assert client.configuration.host == info.endpoint


def test_kubeconfig_path_reaches_the_server(server: Any, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "kubeconfig"
    server.write_kubeconfig(str(path))
    settings = connection.KubeSettings(kubeconfig=str(path))
    client = connection.connect(settings)
    snap = take_snapshot(client)
    assert {n.name for n in snap.namespaces} >= {"default", "kube-system"}


def test_settings_need_a_target() -> None:
    with pytest.raises(ValueError, match="kubeconfig"):
        connection.KubeSettings()
