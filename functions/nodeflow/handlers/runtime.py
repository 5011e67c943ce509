"""What every handler shares: frozen settings read from the environment once (failing fast with
the variable's name), and lazily built clients (boto3, the Kubernetes API, the catalog).

Tests and the demo call ``reset()`` after changing the environment, and may set ``clock``.

Must not touch: what any step decides; the clients are built here, never used here.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from nodeflow.aws.region import region_from_env

if TYPE_CHECKING:
    from nodeflow.aws.decision_log import DecisionLog
    from nodeflow.aws.offerings import UnavailableOfferings
    from nodeflow.aws.userdata import ClusterInfo
    from nodeflow.catalog.model import CatalogData
    from nodeflow.kube.client import KubeClient
    from nodeflow.kube.events import EventRecorder
    from nodeflow.lifecycle.nodeclass import NodeClassResolver

__all__ = ["Runtime", "Settings", "SettingsError", "reset", "runtime"]


class SettingsError(ValueError):
    """A required environment variable is missing or malformed (raised at cold start)."""


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(f"{name}: expected a whole number of seconds, got {raw!r}") from None
    if value < 0:
        raise SettingsError(f"{name}: must not be negative, got {raw!r}")
    return value


def _number(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name}: expected a number, got {raw!r}") from None
    if not 0 <= value < float("inf"):
        raise SettingsError(f"{name}: must be a finite number, 0 or more, got {raw!r}")
    return value


def _flag(env: Mapping[str, str], name: str) -> bool:
    raw = (env.get(name) or "false").strip().lower()
    if raw not in ("true", "false"):
        raise SettingsError(f"{name}: expected true or false, got {raw!r}")
    return raw == "true"


_GATE_VALUES = {"true": True, "t": True, "1": True, "false": False, "f": False, "0": False}


def feature_gates(env: Mapping[str, str]) -> dict[str, bool]:
    """``FEATURE_GATES`` as Karpenter reads it (``NodeRepair=true,SpotToSpotConsolidation=false``); gates not
    named keep their defaults, unknown names are ignored."""
    gates: dict[str, bool] = {}
    for part in (env.get("FEATURE_GATES") or "").split(","):
        key, sep, value = part.strip().partition("=")
        if not part.strip():
            continue
        if not sep or not key.strip() or value.strip().lower() not in _GATE_VALUES:
            raise SettingsError(
                f"FEATURE_GATES: expected Name=true|false pairs separated by commas (e.g. NodeRepair=true), "
                f"got {part.strip()!r}"
            )
        gates[key.strip()] = _GATE_VALUES[value.strip().lower()]
    return gates


@dataclass(frozen=True, slots=True)
class Settings:
    cluster_name: str
    region: str
    table_name: str | None = None
    launch_state_machine_arn: str | None = None
    provisioning_queue_url: str | None = None
    kubeconfig: str | None = None
    cluster_endpoint: str | None = None
    cluster_ca_data: str | None = None
    cluster_dns: str | None = None
    kubernetes_version: str | None = None
    catalog_source: str = "aws"
    registration_ttl_seconds: int = 900
    initialization_ttl_seconds: int = 900
    gc_grace_seconds: int = 30
    event_bus_name: str | None = None
    terminate_state_machine_arn: str | None = None
    replace_state_machine_arn: str | None = None
    nodeflow_namespace: str = "nodeflow"
    spot_to_spot_consolidation: bool = False
    # consolidation's replace bar k (nodeflow.disruption.model.REPLACE_BAR_K; 0: none, as Karpenter)
    consolidation_replace_bar_k: float = 4.5
    disruption_validation_seconds: int = 15
    webhook_auth: str = "iam"
    webhook_hmac_secret_arn: str | None = None
    agent_principal_arns: tuple[str, ...] = ()
    dedup_ttl_seconds: int = 3600
    drain_passes_per_execution: int | None = None  # tests only; None: lifecycle.termination's default
    node_repair: bool = False  # FEATURE_GATES NodeRepair (Karpenter's default: false)
    decision_table_name: str | None = None  # the decision log (None: not written)
    decision_log_ttl_days: int = 90

    @staticmethod
    def from_env(env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        cluster = env.get("CLUSTER_NAME", "").strip()
        if not cluster:
            raise SettingsError("CLUSTER_NAME: required (the EKS cluster name nodeflow provisions for)")
        region = region_from_env(env) or ""
        if not region:
            raise SettingsError("AWS_REGION: required")
        catalog = env.get("CATALOG_SOURCE", "aws")
        if catalog not in ("aws", "offline"):
            raise SettingsError(f"CATALOG_SOURCE: expected 'aws' or 'offline', got {catalog!r}")
        version = env.get("KUBERNETES_VERSION") or None
        if version is not None and not _is_minor_version(version):
            raise SettingsError(f"KUBERNETES_VERSION: expected MAJOR.MINOR such as 1.33, got {version!r}")
        auth = env.get("WEBHOOK_AUTH") or "iam"
        if auth not in ("iam", "hmac"):
            raise SettingsError(f"WEBHOOK_AUTH: expected 'iam' or 'hmac', got {auth!r}")
        principals = tuple(p.strip() for p in (env.get("AGENT_PRINCIPAL_ARNS") or "").split(",") if p.strip())
        for p in principals:
            if not p.startswith("arn:"):
                raise SettingsError(f"AGENT_PRINCIPAL_ARNS: expected comma-separated IAM role ARNs, got {p!r}")
        return Settings(
            cluster_name=cluster,
            region=region,
            table_name=env.get("TABLE_NAME") or None,
            launch_state_machine_arn=env.get("LAUNCH_STATE_MACHINE_ARN") or None,
            provisioning_queue_url=env.get("PROVISIONING_QUEUE_URL") or None,
            kubeconfig=env.get("KUBECONFIG") or None,
            cluster_endpoint=env.get("CLUSTER_ENDPOINT") or None,
            cluster_ca_data=env.get("CLUSTER_CA_DATA") or None,
            cluster_dns=env.get("CLUSTER_DNS") or None,
            kubernetes_version=version,
            catalog_source=catalog,
            registration_ttl_seconds=_int(env, "REGISTRATION_TTL_SECONDS", 900),
            initialization_ttl_seconds=_int(env, "INITIALIZATION_TTL_SECONDS", 900),
            gc_grace_seconds=_int(env, "GC_GRACE_SECONDS", 30),
            event_bus_name=env.get("EVENT_BUS_NAME") or None,
            terminate_state_machine_arn=env.get("TERMINATE_STATE_MACHINE_ARN") or None,
            replace_state_machine_arn=env.get("REPLACE_STATE_MACHINE_ARN") or None,
            nodeflow_namespace=env.get("NODEFLOW_NAMESPACE") or "nodeflow",
            spot_to_spot_consolidation=_flag(env, "SPOT_TO_SPOT_CONSOLIDATION"),
            consolidation_replace_bar_k=_number(env, "CONSOLIDATION_REPLACE_BAR_K", 4.5),
            disruption_validation_seconds=_int(env, "DISRUPTION_VALIDATION_SECONDS", 15),
            webhook_auth=auth,
            webhook_hmac_secret_arn=env.get("WEBHOOK_HMAC_SECRET_ARN") or None,
            agent_principal_arns=principals,
            dedup_ttl_seconds=_int(env, "DEDUP_TTL_SECONDS", 3600),
            drain_passes_per_execution=_int(env, "DRAIN_PASSES_PER_EXECUTION", 0) or None,
            node_repair=feature_gates(env).get("NodeRepair", False),
            decision_table_name=env.get("DECISION_TABLE_NAME") or None,
            decision_log_ttl_days=_ttl_days(env),
        )

    def require(self, *fields: str) -> Settings:
        """Fail fast when a field this function needs is unset (named by its variable)."""
        for name in fields:
            if getattr(self, name) in (None, ""):
                raise SettingsError(f"{name.upper()}: required by this function")
        return self


def _ttl_days(env: Mapping[str, str]) -> int:
    raw = (env.get("DECISION_LOG_TTL_DAYS") or "").strip()
    if not raw:
        return 90
    if not raw.isdigit() or not 1 <= int(raw) <= 3650:
        raise SettingsError(f"DECISION_LOG_TTL_DAYS: expected whole days from 1 to 3650, got {raw!r}")
    return int(raw)


def _is_minor_version(text: str) -> bool:
    parts = text.split(".")
    return len(parts) == 2 and all(p.isdigit() for p in parts)


# A decision-log BatchWriteItem (DynamoDB answers in milliseconds) gives up after this long: connecting, then reading.
DECISION_CONNECT_SECONDS = 1
DECISION_CALL_SECONDS = 4


def _utcnow() -> datetime:
    return datetime.now(UTC)


class Runtime:
    """Clients built on first use and kept for the life of the Lambda container."""

    def __init__(self, settings: Settings, clock: Callable[[], datetime] = _utcnow) -> None:
        self.settings = settings
        self.clock = clock
        self._lock = threading.RLock()
        self._clients: dict[str, Any] = {}
        self._kube: KubeClient | None = None
        self._recorder: EventRecorder | None = None
        self._catalog: CatalogData | None = None
        self._kubernetes_version: str | None = settings.kubernetes_version
        self._decisions_written: set[str] = set()  # decision records this container wrote (DecisionLog.remembered)

    def now(self) -> datetime:
        return self.clock()

    def client(self, service: str) -> Any:
        with self._lock:
            found = self._clients.get(service)
            if found is None:
                from nodeflow.aws.session import new_session

                found = self._clients[service] = new_session().client(
                    service,
                    region_name=self.settings.region,
                )
            return found

    @property
    def kube(self) -> KubeClient:
        with self._lock:
            if self._kube is None:
                from nodeflow.kube.client import KubeClient
                from nodeflow.kube.connection import KubeSettings, connect

                s = self.settings
                self._kube = KubeClient(
                    connect(
                        KubeSettings(
                            kubeconfig=s.kubeconfig,
                            cluster_name=s.cluster_name,
                            endpoint=s.cluster_endpoint,
                            ca_data=s.cluster_ca_data,
                            region=s.region,
                        )
                    )
                )
            return self._kube

    @property
    def catalog(self) -> CatalogData:
        with self._lock:
            if self._catalog is None:
                if self.settings.catalog_source == "offline":
                    from nodeflow.catalog.offline import load_offline

                    self._catalog = load_offline(self.settings.region)
                else:
                    from nodeflow.aws.session import new_session
                    from nodeflow.catalog.aws import AwsCatalogSource

                    session = new_session(region_name=self.settings.region)
                    self._catalog = AwsCatalogSource(session=session).load(self.settings.region)
            return self._catalog

    @property
    def offerings(self) -> UnavailableOfferings:
        from nodeflow.aws.offerings import UnavailableOfferings

        self.settings.require("table_name")
        assert self.settings.table_name is not None
        return UnavailableOfferings(self.client("dynamodb"), self.settings.table_name)

    def decision_log(
        self, log: Callable[[str, dict[str, Any]], None], time_left: Callable[[], float] | None = None
    ) -> DecisionLog | None:
        """A writer of the decision log (one per invocation: it counts what it wrote), None when not configured.
        ``time_left``: the seconds its writes may take (the invocation's remaining time less a margin)."""
        from nodeflow.aws.decision_log import DecisionLog

        s = self.settings
        if not s.decision_table_name:
            return None
        return DecisionLog(
            self.decision_client(),
            s.decision_table_name,
            s.decision_log_ttl_days,
            log=log,
            time_left=time_left,
            remembered=self._decisions_written,
        )

    def decision_client(self) -> Any:
        """DynamoDB for the decision log: no retries of botocore's own (the writer retries, within its deadline)
        and short timeouts, so a call in flight when the deadline comes ends within DECISION_CALL_SECONDS. No
        client-side parameter validation: botocore's walks every attribute of every item (about 20 us of CPU an item:
        0.6 s of the 3.7 s the log took in a 20,000-pod run); the items are ``governance.decisions.items``' own, and
        an item DynamoDB refuses is still reported and sent alone (``DecisionLog``). Its BatchWriteItem bodies are
        written by ``json`` (``encode_batch_writes``: the same bytes as botocore's serializer)."""
        with self._lock:
            found = self._clients.get("dynamodb:decisions")
            if found is None:
                from botocore.config import Config

                from nodeflow.aws.session import new_session

                config = Config(
                    parameter_validation=False,
                    retries={"total_max_attempts": 1},
                    connect_timeout=DECISION_CONNECT_SECONDS,
                    read_timeout=DECISION_CALL_SECONDS - DECISION_CONNECT_SECONDS,
                )
                from nodeflow.aws.decision_log import encode_batch_writes

                found = self._clients["dynamodb:decisions"] = encode_batch_writes(
                    new_session().client("dynamodb", region_name=self.settings.region, config=config)
                )
            return found

    @property
    def recorder(self) -> EventRecorder:
        from nodeflow.kube.events import EventRecorder

        with self._lock:
            if self._recorder is None:
                self._recorder = EventRecorder(self.kube, clock=self.now)
            return self._recorder

    def cluster_info(self) -> ClusterInfo:
        """Endpoint and CA the nodes bootstrap with (settings, else the API connection's own)."""
        import base64

        from nodeflow.aws.userdata import ClusterInfo

        s = self.settings
        config = self.kube.api_client.configuration
        endpoint = s.cluster_endpoint or str(config.host)
        ca = s.cluster_ca_data
        if ca is None and getattr(config, "ssl_ca_cert", None):
            with open(config.ssl_ca_cert, "rb") as fh:
                ca = base64.b64encode(fh.read()).decode()
        return ClusterInfo(name=s.cluster_name, endpoint=endpoint, ca_bundle=ca or "", dns_ip=s.cluster_dns)

    def node_class_resolver(self) -> NodeClassResolver:
        """Resolves EC2NodeClasses (EC2, SSM, IAM) and writes their status."""
        from nodeflow.lifecycle.nodeclass import NodeClassResolver

        return NodeClassResolver(
            kube=self.kube,
            ec2=self.client("ec2"),
            ssm=self.client("ssm"),
            iam=self.client("iam"),
            cluster_name=self.settings.cluster_name,
            kubernetes_version=lambda: self.kubernetes_version,
            now=self.now,
            ca_bundle=self.cluster_info().ca_bundle,
        )

    @property
    def kubernetes_version(self) -> str:
        """MAJOR.MINOR of the API server (setting, else asked once from /version)."""
        with self._lock:
            if self._kubernetes_version is None:
                info = self.kube.request("GET", "/version")
                minor = "".join(ch for ch in str(info.get("minor", "")) if ch.isdigit())
                self._kubernetes_version = f"{info.get('major', '1')}.{minor}"
            return self._kubernetes_version


_runtime: Runtime | None = None
_runtime_lock = threading.Lock()


def runtime() -> Runtime:
    """The process-wide runtime (settings read on first use)."""
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            _runtime = Runtime(Settings.from_env())
        return _runtime


def reset(new: Runtime | None = None) -> None:
    """Forget the runtime (tests, the demo): the next ``runtime()`` reads the environment again."""
    global _runtime
    with _runtime_lock:
        _runtime = new
