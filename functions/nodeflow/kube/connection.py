"""An official ``kubernetes.client.ApiClient`` for a cluster: from a kubeconfig file, or for EKS.

EKS: the endpoint and CA come from settings, or from ``eks:DescribeCluster``; the bearer
token is what ``aws eks get-token`` prints: ``k8s-aws-v1.`` + base64url (no padding) of
an STS ``GetCallerIdentity`` URL presigned (SigV4, query auth, 60 s) with the signed
header ``x-k8s-aws-id: <cluster name>``. It is generated offline by botocore's presigner;
``TokenProvider`` caches it and makes a new one before it expires (clock injectable).
The ApiClient asks for it on every request through the configuration's refresh hook.

Must not touch: what is done with the client; only how it connects and authenticates.
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import boto3
    from kubernetes.client import ApiClient, Configuration

__all__ = [
    "CLUSTER_ID_HEADER",
    "TOKEN_PREFIX",
    "ClusterInfo",
    "KubeSettings",
    "TokenProvider",
    "api_client_for_eks",
    "api_client_from_kubeconfig",
    "connect",
    "describe_cluster",
    "eks_token",
]

TOKEN_PREFIX = "k8s-aws-v1."
CLUSTER_ID_HEADER = "x-k8s-aws-id"
PRESIGN_EXPIRES_SECONDS = 60
TOKEN_LIFETIME_SECONDS = 14 * 60  # `aws eks get-token` reports 14 min; EKS accepts a token for 15
REFRESH_MARGIN_SECONDS = 60


@dataclass(frozen=True, slots=True)
class KubeSettings:
    """How to reach the API server: a kubeconfig file, or an EKS cluster (endpoint/CA optional)."""

    kubeconfig: str | None = None
    context: str | None = None
    cluster_name: str | None = None
    endpoint: str | None = None
    ca_data: str | None = None
    """Base64 of the PEM CA bundle, as DescribeCluster's certificateAuthority.data."""
    region: str | None = None

    def __post_init__(self) -> None:
        if not self.kubeconfig and not self.cluster_name:
            raise ValueError("KubeSettings: set kubeconfig (any cluster) or cluster_name (EKS)")


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    endpoint: str
    ca_data: str


def _sts_client(session: boto3.Session, region: str | None) -> Any:
    region = region or session.region_name
    if not region:
        raise ValueError("an AWS region is needed for the EKS token (set it on the session or pass region=)")
    return session.client("sts", region_name=region)


def eks_token(cluster_name: str, *, session: boto3.Session, region: str | None = None, sts: Any = None) -> str:
    """A fresh EKS bearer token for ``cluster_name`` (no network: presigning is local)."""
    client = sts if sts is not None else _sts_client(session, region)

    def add_cluster_header(request: Any, **_: Any) -> None:
        request.headers[CLUSTER_ID_HEADER] = cluster_name

    event = "before-sign.sts.GetCallerIdentity"
    client.meta.events.register(event, add_cluster_header)
    try:
        url: str = client.generate_presigned_url(
            "get_caller_identity", Params={}, ExpiresIn=PRESIGN_EXPIRES_SECONDS, HttpMethod="GET"
        )
    finally:
        client.meta.events.unregister(event, add_cluster_header)
    return TOKEN_PREFIX + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


class TokenProvider:
    """Caches an EKS token; a new one is made ``refresh_margin`` seconds before ``lifetime`` ends."""

    def __init__(
        self,
        cluster_name: str,
        *,
        session: boto3.Session | None = None,
        region: str | None = None,
        clock: Callable[[], float] = time.time,
        lifetime: float = TOKEN_LIFETIME_SECONDS,
        refresh_margin: float = REFRESH_MARGIN_SECONDS,
    ) -> None:
        if session is None:
            from nodeflow.aws.session import new_session

            session = new_session()
        self.cluster_name = cluster_name
        self._sts = _sts_client(session, region)
        self._session = session
        self._clock = clock
        self._lifetime = lifetime
        self._margin = refresh_margin
        self._lock = threading.Lock()
        self._token: str | None = None
        self._expires_at = 0.0
        self.generated = 0

    @property
    def expires_at(self) -> float:
        return self._expires_at

    def token(self) -> str:
        with self._lock:
            now = self._clock()
            if self._token is None or now >= self._expires_at - self._margin:
                self._token = eks_token(self.cluster_name, session=self._session, sts=self._sts)
                self._expires_at = now + self._lifetime
                self.generated += 1
            return self._token

    def refresh_hook(self, configuration: Configuration) -> None:
        """For ``Configuration.refresh_api_key_hook``: called before each request's auth."""
        configuration.api_key["BearerToken"] = self.token()


def describe_cluster(cluster_name: str, *, session: boto3.Session, region: str | None = None) -> ClusterInfo:
    """Endpoint and CA of an EKS cluster (``eks:DescribeCluster``)."""
    eks = session.client("eks", region_name=region or session.region_name)
    cluster = eks.describe_cluster(name=cluster_name)["cluster"]
    return ClusterInfo(endpoint=cluster["endpoint"], ca_data=cluster["certificateAuthority"]["data"])


def api_client_for_eks(
    cluster_name: str,
    *,
    endpoint: str | None = None,
    ca_data: str | None = None,
    session: boto3.Session | None = None,
    region: str | None = None,
    token_provider: TokenProvider | None = None,
    clock: Callable[[], float] = time.time,
) -> ApiClient:
    """An ApiClient for an EKS cluster, authenticated with a cached, self-refreshing token."""
    from kubernetes.client import ApiClient, Configuration

    if session is None:
        from nodeflow.aws.session import new_session

        session = new_session()
    if endpoint is None or ca_data is None:
        info = describe_cluster(cluster_name, session=session, region=region)
        endpoint = endpoint or info.endpoint
        ca_data = ca_data or info.ca_data
    provider = token_provider or TokenProvider(cluster_name, session=session, region=region, clock=clock)
    config = Configuration(host=endpoint)
    ca = base64.b64decode(ca_data)
    # PEM (what EKS returns) as text; anything else is handed to ssl as DER bytes.
    config.ca_cert_data = ca.decode() if ca.lstrip().startswith(b"-----BEGIN") else ca
    config.verify_ssl = True
    config.api_key = {"BearerToken": provider.token()}
    config.api_key_prefix = {"BearerToken": "Bearer"}
    config.refresh_api_key_hook = provider.refresh_hook  # type: ignore[assignment]
    return ApiClient(config)


def api_client_from_kubeconfig(path: str, *, context: str | None = None) -> ApiClient:
    """An ApiClient from a kubeconfig file (any cluster that is not reached as EKS)."""
    from kubernetes.client import ApiClient, Configuration
    from kubernetes.config.kube_config import load_kube_config

    config = Configuration()
    load_kube_config(  # type: ignore[no-untyped-call]
        config_file=path, context=context, client_configuration=config, persist_config=False
    )
    return ApiClient(config)


def connect(settings: KubeSettings, *, session: boto3.Session | None = None) -> ApiClient:
    """The ApiClient ``settings`` describe (kubeconfig wins when both are set)."""
    if settings.kubeconfig:
        return api_client_from_kubeconfig(settings.kubeconfig, context=settings.context)
    assert settings.cluster_name is not None
    return api_client_for_eks(
        settings.cluster_name,
        endpoint=settings.endpoint,
        ca_data=settings.ca_data,
        session=session,
        region=settings.region,
    )
