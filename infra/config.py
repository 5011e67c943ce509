"""The stack's configuration: CDK context (cdk.json or ``-c key=value``), validated once.

Every value is checked before a construct is made; a missing or malformed one raises ``ConfigError`` whose
message starts with the context key, so ``cdk synth`` fails saying what to fix. Values from ``-c`` arrive as
strings, values from cdk.json as JSON: booleans accept ``true``/``false`` either way, lists accept a JSON list or a
comma-separated string.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from constructs import Node

__all__ = ["CONTEXT_KEYS", "ConfigError", "NodeflowConfig"]


class ConfigError(ValueError):
    """A context value is missing or malformed (the message names the key)."""


# context key -> what it is (also the order of the help text)
CONTEXT_KEYS: Mapping[str, str] = {
    "clusterName": "name of the EKS cluster nodeflow provisions for (required)",
    "clusterEndpoint": "API server URL (https://...); with clusterCa, else the Lambdas call eks:DescribeCluster",
    "clusterCa": "the cluster's certificate authority data (base64), with clusterEndpoint",
    "kubernetesVersion": "MAJOR.MINOR of the cluster (e.g. 1.33); else asked from the API server",
    "clusterDns": "cluster DNS IP for the nodes' kubelet (IPv4 or IPv6); else the AMI's default",
    "lambdaVpcId": "VPC to place the Lambdas in (vpc-...), with lambdaSubnetIds",
    "lambdaSubnetIds": "subnets for the Lambdas (subnet-..., a list or comma-separated), with lambdaVpcId",
    "interruption": "true/false: route EC2 spot/rebalance/state-change and AWS Health events (default true)",
    "agentRoleArn": "IAM role ARN of the in-cluster agent; else a role for EKS Pod Identity is created",
    "nodeRoleName": "IAM role of the nodes (EC2NodeClass spec.role); default KarpenterNodeRole-<clusterName>",
    "createNodeRole": "true/false: create nodeRoleName with its instance profile (default true)",
    "eksAccessEntries": "true/false: create EKS access entries for the Lambda and node roles (default true)",
    "clusterInstall": "true/false: cdk deploy also applies the in-cluster side (namespace, CRDs, RBAC, agent) and cdk "
    "destroy removes it (default: eksAccessEntries); false: apply `python -m nodeflow install-manifests` yourself",
    "installWaitSeconds": "seconds cdk deploy waits for the agent to roll out, 0-600 (default 300; 0: do not wait)",
    "webhookAuth": "iam (Function URL AWS_IAM, SigV4; default) or hmac (shared secret in Secrets Manager)",
    "webhookConcurrency": "reserved concurrency of the webhook function, 1-1000 (default 10): caps what a flood of "
    "requests can cost (in hmac mode its URL is public); more concurrent requests get 429 and the agent retries",
    "catalogSource": "aws (live instance types and prices; default) or offline (the bundled snapshot)",
    "alarmTopicArn": "SNS topic ARN the alarms notify (optional)",
    "decisionLogTtlDays": "days the decision log keeps its records, 1-3650 (default 90)",
    "featureGates": "Karpenter's feature gates for the Lambdas (FEATURE_GATES), e.g. NodeRepair=true; unset: "
    "Karpenter's defaults (NodeRepair=false)",
    "consolidationReplaceBarK": "nodeflow's replace bar, 0-100 (CONSOLIDATION_REPLACE_BAR_K; default 4.5): a "
    "consolidation replace must save at least 1/K of what Balanced asks for the pods it evicts; 0: every cheaper "
    "replacement, as Karpenter",
}

_CLUSTER_NAME = re.compile(r"^[0-9A-Za-z][A-Za-z0-9_-]{0,99}$")  # EKS's rule
_VPC_ID = re.compile(r"^vpc-[0-9a-f]{8}([0-9a-f]{9})?$")
_SUBNET_ID = re.compile(r"^subnet-[0-9a-f]{8}([0-9a-f]{9})?$")
_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]{1,512}$")
_ROLE_NAME = re.compile(r"^[\w+=,.@-]{1,64}$")
_TOPIC_ARN = re.compile(r"^arn:aws[a-z-]*:sns:[a-z0-9-]+:\d{12}:[\w-]{1,256}$")
_VERSION = re.compile(r"^1\.\d{1,3}$")
_GATE = r"[A-Za-z][A-Za-z0-9]*=(?i:true|false|t|f|1|0)"
_GATES = re.compile(rf"^\s*{_GATE}\s*(,\s*{_GATE}\s*)*$")
_ENDPOINT = re.compile(r"^https://[A-Za-z0-9.-]+(:\d{1,5})?(/[\w./-]*)?$")
WEBHOOK_CONCURRENCY_DEFAULT = 10
INSTALL_WAIT_DEFAULT = 300
INSTALL_WAIT_RANGE = (0, 600)  # within the install function's 900 s, with room for the apply itself
WEBHOOK_CONCURRENCY_RANGE = (1, 1000)
_TRUE = {"true", "yes", "1", "on"}
_FALSE = {"false", "no", "0", "off"}


def _text(key: str, raw: Any) -> str | None:
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise ConfigError(f"context {key}: expected a string, got {type(raw).__name__} {raw!r}")
    value = raw.strip()
    return value or None


def _matching(key: str, raw: Any, pattern: re.Pattern[str], what: str) -> str | None:
    value = _text(key, raw)
    if value is not None and not pattern.fullmatch(value):
        raise ConfigError(f"context {key}: expected {what}, got {value!r}")
    return value


def _bool(key: str, raw: Any, default: bool) -> bool:
    if raw is None or raw == "":
        return default
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().lower() in _TRUE | _FALSE:
        return raw.strip().lower() in _TRUE
    raise ConfigError(f"context {key}: expected true or false, got {raw!r}")


def _whole(key: str, raw: Any, default: int, bounds: tuple[int, int]) -> int:
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return default
    value: int | None = None
    if isinstance(raw, int) and not isinstance(raw, bool):
        value = raw
    elif isinstance(raw, str) and raw.strip().isdigit():
        value = int(raw.strip())
    low, high = bounds
    if value is None or not low <= value <= high:
        raise ConfigError(f"context {key}: expected a whole number from {low} to {high}, got {raw!r}")
    return value


def _bounded(key: str, raw: Any, bounds: tuple[float, float]) -> float | None:
    """A number within ``bounds`` (None when unset)."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    value: float | None = None
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        value = float(raw)
    elif isinstance(raw, str):
        try:
            value = float(raw.strip())
        except ValueError:
            value = None
    low, high = bounds
    if value is None or not low <= value <= high:
        raise ConfigError(f"context {key}: expected a number from {low:g} to {high:g}, got {raw!r}")
    return value


def _choice(key: str, raw: Any, choices: tuple[str, ...]) -> str:
    value = _text(key, raw)
    if value is None:
        return choices[0]
    if value not in choices:
        raise ConfigError(f"context {key}: expected one of {', '.join(choices)}, got {value!r}")
    return value


def _list(key: str, raw: Any, pattern: re.Pattern[str], what: str) -> tuple[str, ...]:
    if raw is None or raw == "":
        return ()
    if isinstance(raw, str):
        items: list[Any] = [p.strip() for p in raw.split(",")]
    elif isinstance(raw, list | tuple):
        items = list(raw)
    else:
        raise ConfigError(f"context {key}: expected a list or a comma-separated string, got {raw!r}")
    out: list[str] = []
    for item in items:
        if not isinstance(item, str) or not pattern.fullmatch(item.strip()):
            raise ConfigError(f"context {key}: expected {what}, got {item!r}")
        out.append(item.strip())
    if len(set(out)) != len(out):
        raise ConfigError(f"context {key}: lists {sorted({o for o in out if out.count(o) > 1})} more than once")
    return tuple(out)


@dataclass(frozen=True, slots=True)
class NodeflowConfig:
    cluster_name: str
    cluster_endpoint: str | None = None
    cluster_ca: str | None = None
    kubernetes_version: str | None = None
    cluster_dns: str | None = None
    lambda_vpc_id: str | None = None
    lambda_subnet_ids: tuple[str, ...] = ()
    interruption: bool = True
    agent_role_arn: str | None = None
    node_role_name: str = ""
    create_node_role: bool = True
    eks_access_entries: bool = True
    cluster_install: bool = True  # the stack applies the in-cluster side (infra/install.py)
    install_wait_seconds: int = INSTALL_WAIT_DEFAULT
    webhook_auth: str = "iam"
    webhook_concurrency: int = WEBHOOK_CONCURRENCY_DEFAULT
    catalog_source: str = "aws"
    alarm_topic_arn: str | None = None
    feature_gates: str | None = None  # FEATURE_GATES of every function (nodeflow.handlers.runtime.feature_gates)
    decision_log_ttl_days: int = 90  # DECISION_LOG_TTL_DAYS of the functions that write the decision log
    replace_bar_k: float | None = None  # CONSOLIDATION_REPLACE_BAR_K of every function (None: the Lambdas' default)

    @staticmethod
    def from_node(node: Node) -> NodeflowConfig:
        """Read every key in ``CONTEXT_KEYS`` from the construct tree's context."""
        return NodeflowConfig.from_mapping({k: node.try_get_context(k) for k in CONTEXT_KEYS})

    @staticmethod
    def from_mapping(context: Mapping[str, Any]) -> NodeflowConfig:
        get: Callable[[str], Any] = context.get
        cluster = _text("clusterName", get("clusterName"))
        if cluster is None:
            raise ConfigError("context clusterName: required (the EKS cluster's name), e.g. -c clusterName=demo")
        if not _CLUSTER_NAME.fullmatch(cluster):
            raise ConfigError(
                f"context clusterName: expected 1-100 letters, digits, '-' or '_' starting with a letter or digit, "
                f"got {cluster!r}"
            )

        endpoint = _matching("clusterEndpoint", get("clusterEndpoint"), _ENDPOINT, "an https:// URL")
        ca = _text("clusterCa", get("clusterCa"))
        if ca is not None:
            try:
                base64.b64decode(ca, validate=True)
            except (binascii.Error, ValueError):
                raise ConfigError("context clusterCa: expected base64 certificate data") from None
        if (endpoint is None) != (ca is None):
            missing = "clusterCa" if ca is None else "clusterEndpoint"
            raise ConfigError(f"context {missing}: required with {'clusterEndpoint' if ca is None else 'clusterCa'}")

        dns = _text("clusterDns", get("clusterDns"))
        if dns is not None:
            try:
                ipaddress.ip_address(dns)
            except ValueError:
                raise ConfigError(f"context clusterDns: expected an IP address, got {dns!r}") from None

        vpc = _matching("lambdaVpcId", get("lambdaVpcId"), _VPC_ID, "a VPC id (vpc-...)")
        subnets = _list("lambdaSubnetIds", get("lambdaSubnetIds"), _SUBNET_ID, "subnet ids (subnet-...)")
        if vpc is not None and not subnets:
            raise ConfigError("context lambdaSubnetIds: required with lambdaVpcId")
        if subnets and vpc is None:
            raise ConfigError("context lambdaVpcId: required with lambdaSubnetIds")

        create_role = _bool("createNodeRole", get("createNodeRole"), True)
        role_name = _matching("nodeRoleName", get("nodeRoleName"), _ROLE_NAME, "an IAM role name")
        if role_name is None:
            role_name = f"KarpenterNodeRole-{cluster}"
            if not _ROLE_NAME.fullmatch(role_name):
                raise ConfigError(
                    f"context nodeRoleName: required with a clusterName this long ({role_name!r} is over 64 characters)"
                )

        access_entries = _bool("eksAccessEntries", get("eksAccessEntries"), True)
        cluster_install = _bool("clusterInstall", get("clusterInstall"), access_entries)
        if cluster_install and not access_entries:
            raise ConfigError(
                "context clusterInstall: needs eksAccessEntries=true (the installer reaches the cluster through an EKS "
                "access entry); with eksAccessEntries=false pass clusterInstall=false and apply install-manifests"
            )

        return NodeflowConfig(
            cluster_name=cluster,
            cluster_endpoint=endpoint,
            cluster_ca=ca,
            kubernetes_version=_matching(
                "kubernetesVersion", get("kubernetesVersion"), _VERSION, "MAJOR.MINOR such as 1.33"
            ),
            cluster_dns=dns,
            lambda_vpc_id=vpc,
            lambda_subnet_ids=subnets,
            interruption=_bool("interruption", get("interruption"), True),
            agent_role_arn=_matching("agentRoleArn", get("agentRoleArn"), _ROLE_ARN, "an IAM role ARN"),
            node_role_name=role_name,
            create_node_role=create_role,
            eks_access_entries=access_entries,
            cluster_install=cluster_install,
            install_wait_seconds=_whole(
                "installWaitSeconds", get("installWaitSeconds"), INSTALL_WAIT_DEFAULT, INSTALL_WAIT_RANGE
            ),
            webhook_auth=_choice("webhookAuth", get("webhookAuth"), ("iam", "hmac")),
            webhook_concurrency=_whole(
                "webhookConcurrency", get("webhookConcurrency"), WEBHOOK_CONCURRENCY_DEFAULT, WEBHOOK_CONCURRENCY_RANGE
            ),
            catalog_source=_choice("catalogSource", get("catalogSource"), ("aws", "offline")),
            alarm_topic_arn=_matching("alarmTopicArn", get("alarmTopicArn"), _TOPIC_ARN, "an SNS topic ARN"),
            feature_gates=_matching(
                "featureGates", get("featureGates"), _GATES, "Name=true|false pairs separated by commas"
            ),
            decision_log_ttl_days=_whole("decisionLogTtlDays", get("decisionLogTtlDays"), 90, (1, 3650)),
            replace_bar_k=_bounded("consolidationReplaceBarK", get("consolidationReplaceBarK"), (0.0, 100.0)),
        )

    # ------------------------------------------------------------------ names

    def name(self, suffix: str, limit: int = 64) -> str:
        """``nodeflow-<cluster>-<suffix>``: what the sandbox names the same resource (at most ``limit`` characters,
        the service's limit for that kind of name)."""
        name = f"nodeflow-{self.cluster_name}-{suffix}"
        if len(name) > limit:
            raise ConfigError(
                f"context clusterName: too long for the resource name {name!r} ({len(name)} > {limit} characters)"
            )
        return name

    @property
    def prefix(self) -> str:
        """``nodeflow-<cluster>``: the table and the bus."""
        return f"nodeflow-{self.cluster_name}"

    @property
    def stack_name(self) -> str:
        """One stack per cluster: ``Nodeflow-<cluster>`` (CloudFormation allows no '_')."""
        return "Nodeflow-" + self.cluster_name.replace("_", "-")

    @property
    def read_cluster_from_eks(self) -> bool:
        """The Lambdas learn the endpoint and CA from eks:DescribeCluster."""
        return self.cluster_endpoint is None
