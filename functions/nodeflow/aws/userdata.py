"""EC2 userData for nodeflow nodes, per AMI family, the way Karpenter's AWS provider writes it.

Pure: no boto3, no clock, no randomness. The same :class:`NodeBootstrap` always renders to the
same string (the caller base64-encodes it for RunInstances / launch templates).

Families:

- ``AL2023``: a MIME multi-part archive for nodeadm. The user's parts come first (a MIME archive
  is split into its parts; a plain YAML mapping becomes an ``application/node.eks.aws`` part; anything
  else a shell-script part), then nodeflow's ``NodeConfig``.
- ``Bottlerocket``: TOML. The user's TOML is the base; nodeflow always sets the cluster name,
  API server, CA, labels (merged, nodeflow's win) and taints (replaced), and the kubelet settings
  the NodeClass spells out.
- ``AL2``: a MIME multi-part archive; the user's parts first, then a shell part calling
  ``/etc/eks/bootstrap.sh``.
- ``Windows2019`` / ``Windows2022`` / ``Windows2025``: one ``<powershell>`` block, the user's script first, then
  ``Start-EKSBootstrap.ps1``.
- ``Custom``: the user's userData unchanged.

Malformed user data raises :class:`ValueError` naming the problem.

Must not touch: the launch template around it (``nodeflow.aws.ec2.launch_template_data``); AMI resolution.
"""

from __future__ import annotations

import base64
import binascii
import datetime as _dt
import email.errors
import email.message
import email.parser
import email.policy
import ipaddress
import math
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from nodeflow.api.karpenter import KubeletConfiguration

__all__ = [
    "AMI_FAMILIES",
    "CONTENT_TYPE_MULTIPART",
    "CONTENT_TYPE_NODECONFIG",
    "CONTENT_TYPE_SHELL",
    "MIME_BOUNDARY",
    "ClusterInfo",
    "MimePart",
    "NodeBootstrap",
    "TaintLike",
    "bottlerocket_version",
    "eks_bootstrap_script",
    "kubelet_extra_args",
    "nodeconfig",
    "parse_mime_archive",
    "render_mime_archive",
    "render_user_data",
    "toml_dumps",
]

MIME_BOUNDARY = "//"
CONTENT_TYPE_SHELL = 'text/x-shellscript; charset="us-ascii"'
CONTENT_TYPE_NODECONFIG = "application/node.eks.aws"
CONTENT_TYPE_MULTIPART = "multipart/mixed"
NODECONFIG_API_VERSION = "node.eks.aws/v1alpha1"

RAID0 = "RAID0"
AMI_FAMILIES = ("AL2023", "AL2", "Bottlerocket", "Custom", "Windows2019", "Windows2022", "Windows2025")


class TaintLike(Protocol):
    """Anything with a taint's key, value and effect (``nodeflow.api.meta.Taint`` fits)."""

    @property
    def key(self) -> str: ...

    @property
    def value(self) -> str | None: ...

    @property
    def effect(self) -> str: ...


@dataclass(frozen=True)
class ClusterInfo:
    name: str
    endpoint: str
    ca_bundle: str
    """Base64 of the PEM CA bundle, as EKS DescribeCluster returns it."""
    cidr: str | None = None
    """Service CIDR (nodeadm's ``spec.cluster.cidr``)."""
    dns_ip: str | None = None
    """Cluster DNS IP, used when the kubelet configuration does not name one."""
    ip_family: str = "ipv4"


@dataclass(frozen=True)
class NodeBootstrap:
    cluster: ClusterInfo
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: Sequence[TaintLike] = ()
    kubelet: KubeletConfiguration | None = None
    max_pods: int | None = None
    """Effective max pods for the node; falls back to ``kubelet.max_pods`` when None."""
    ami_family: str = "AL2023"
    user_data: str | None = None
    """The EC2NodeClass ``spec.userData``."""
    instance_store_policy: str | None = None
    """The EC2NodeClass ``spec.instanceStorePolicy``: ``RAID0`` stripes the instance store disks into the node's
    ephemeral storage (nodeadm's local storage strategy, bootstrap.sh's ``--local-disks raid0``, Bottlerocket's
    ``apiclient ephemeral-storage`` bootstrap command), as the instance types' ephemeral-storage counts them."""
    bottlerocket_version: str | None = None
    """The Bottlerocket AMI's version (``v1.46.0``, ``latest``; None when unknown): from 1.46 the ephemeral
    storage bind needs no directories."""


# --------------------------------------------------------------------------------------------- entry


def render_user_data(boot: NodeBootstrap) -> str:
    """Return the final userData (not base64-encoded) for ``boot``."""
    family = boot.ami_family
    if family == "AL2023":
        return _render_al2023(boot)
    if family == "Bottlerocket":
        return _render_bottlerocket(boot)
    if family == "AL2":
        return _render_al2(boot)
    if family in ("Windows2019", "Windows2022", "Windows2025"):
        return _render_windows(boot)
    if family == "Custom":
        return boot.user_data or ""
    raise ValueError(f"amiFamily: unsupported AMI family {family!r}; expected one of {', '.join(AMI_FAMILIES)}")


# ------------------------------------------------------------------------------------- shared values


def _max_pods(boot: NodeBootstrap) -> int | None:
    if boot.max_pods is not None:
        return boot.max_pods
    return boot.kubelet.max_pods if boot.kubelet is not None else None


def _kubelet_dns(boot: NodeBootstrap) -> list[str]:
    if boot.kubelet is not None and boot.kubelet.cluster_dns:
        return list(boot.kubelet.cluster_dns)
    return []


def _cluster_dns(boot: NodeBootstrap) -> list[str]:
    """The kubelet's clusterDNS if set, else the cluster's DNS IP if known."""
    dns = _kubelet_dns(boot)
    if not dns and boot.cluster.dns_ip:
        dns = [boot.cluster.dns_ip]
    return dns


def _check_ca(ca_bundle: str) -> None:
    if not ca_bundle:
        return
    try:
        base64.b64decode(ca_bundle, validate=True)
    except (binascii.Error, ValueError) as err:
        raise ValueError(f"cluster.ca_bundle: not valid base64 ({err})") from err


def _taint_value(taint: TaintLike) -> str:
    return taint.value or ""


def _taint_effect(taint: TaintLike) -> str:
    return str(taint.effect)


def _sorted_labels(labels: Mapping[str, str]) -> list[tuple[str, str]]:
    return sorted(labels.items())


def _normalize_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


# ----------------------------------------------------------------------------------------------- MIME


@dataclass(frozen=True)
class MimePart:
    """One part of a multi-part archive: its headers (in order) and its body."""

    headers: tuple[tuple[str, str], ...]
    content: str

    @property
    def content_type(self) -> str:
        for name, value in self.headers:
            if name.lower() == "content-type":
                return value
        return "text/plain"

    @staticmethod
    def of(content_type: str, content: str) -> MimePart:
        return MimePart(headers=(("Content-Type", content_type),), content=content)


def _looks_like_mime(text: str) -> bool:
    head = text.lstrip()
    return head.startswith(("MIME-Version:", "Content-Type:"))


def _leaf_parts(message: email.message.Message, where: str) -> list[MimePart]:
    payload = message.get_payload()
    if not isinstance(payload, list):
        raise ValueError(f"{where}: multipart section has no parts")
    parts: list[MimePart] = []
    for index, sub in enumerate(payload):
        if not isinstance(sub, email.message.Message):  # pragma: no cover - email always yields Messages here
            raise ValueError(f"{where}: part {index} is not a MIME entity")
        if sub.is_multipart():
            parts.extend(_leaf_parts(sub, f"{where} part {index}"))
            continue
        body = sub.get_payload()
        if not isinstance(body, str):  # pragma: no cover - defensive
            raise ValueError(f"{where}: part {index} has no text body")
        headers = tuple((str(name), str(value)) for name, value in sub.items())
        parts.append(MimePart(headers=headers or (("Content-Type", "text/plain"),), content=body))
    return parts


def parse_mime_archive(text: str) -> list[MimePart]:
    """Split a MIME multi-part archive into its leaf parts (nested multiparts are flattened).

    Raises ValueError if ``text`` is not a well-formed multipart document.
    """
    message = email.parser.Parser(policy=email.policy.compat32).parsestr(_normalize_newlines(text).lstrip())
    content_type = message.get("Content-Type")
    if content_type is None:
        raise ValueError("userData MIME archive: missing Content-Type header")
    if message.get_content_maintype() != "multipart":
        raise ValueError(f"userData MIME archive: Content-Type {message.get_content_type()!r} is not multipart/*")
    if not message.get_boundary():
        raise ValueError("userData MIME archive: multipart Content-Type has no boundary parameter")
    fatal = (
        email.errors.StartBoundaryNotFoundDefect,
        email.errors.CloseBoundaryNotFoundDefect,
        email.errors.NoBoundaryInMultipartDefect,
    )
    for sub in message.walk():
        for defect in sub.defects:
            if isinstance(defect, fatal):
                raise ValueError(f"userData MIME archive: {(defect.__doc__ or type(defect).__name__).strip()}")
    parts = _leaf_parts(message, "userData MIME archive")
    if not parts:
        raise ValueError("userData MIME archive: no parts")
    return parts


def _pick_boundary(parts: Sequence[MimePart]) -> str:
    """``//`` (Karpenter's) unless a body contains a line starting with ``--//``; then a fixed fallback."""
    candidates = [MIME_BOUNDARY] + [f"==nodeflow-boundary-{n}==" for n in range(1, 100)]
    for boundary in candidates:
        marker = "--" + boundary
        if not any(line.startswith(marker) for part in parts for line in part.content.split("\n")):
            return boundary
    raise ValueError("userData: could not find a MIME boundary absent from every part")  # pragma: no cover


def render_mime_archive(parts: Sequence[MimePart]) -> str:
    """Serialize parts as a deterministic ``multipart/mixed`` document (LF line endings)."""
    boundary = _pick_boundary(parts)
    out = ["MIME-Version: 1.0\n", f'Content-Type: multipart/mixed; boundary="{boundary}"\n', "\n"]
    for index, part in enumerate(parts):
        out.append(("" if index == 0 else "\n") + f"--{boundary}\n")
        for name, value in part.headers:
            out.append(f"{name}: {value}\n")
        out.append("\n")
        out.append(_normalize_newlines(part.content))
    out.append(f"\n--{boundary}--\n")
    return "".join(out)


def _is_yaml_mapping(text: str) -> bool:
    import yaml  # here, not at the top: only launches read or write YAML (~0.05 s of a cold import)

    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError:
        return False
    return isinstance(loaded, dict)


def _user_parts(boot: NodeBootstrap, *, detect_nodeconfig: bool) -> list[MimePart]:
    user_data = boot.user_data or ""
    if not user_data.strip():
        return []
    if _looks_like_mime(user_data):
        return parse_mime_archive(user_data)
    if detect_nodeconfig and _is_yaml_mapping(user_data):
        return [MimePart.of(CONTENT_TYPE_NODECONFIG, _normalize_newlines(user_data))]
    return [MimePart.of(CONTENT_TYPE_SHELL, _normalize_newlines(user_data))]


# -------------------------------------------------------------------------------------------- AL2023


def _register_with_taints(boot: NodeBootstrap) -> list[dict[str, str]]:
    result: list[dict[str, str]] = []
    for taint in boot.taints:
        entry = {"key": taint.key, "effect": _taint_effect(taint)}
        if taint.value:
            entry["value"] = taint.value
        result.append(entry)
    return result


def _nodeconfig_kubelet_config(boot: NodeBootstrap) -> dict[str, Any]:
    config: dict[str, Any] = {}
    kubelet = boot.kubelet
    max_pods = _max_pods(boot)
    if max_pods is not None:
        config["maxPods"] = max_pods
    dns = _cluster_dns(boot)
    if dns:
        config["clusterDNS"] = dns
    if kubelet is not None:
        if kubelet.pods_per_core is not None:
            config["podsPerCore"] = kubelet.pods_per_core
        maps: list[tuple[str, Mapping[str, str] | None]] = [
            ("systemReserved", kubelet.system_reserved),
            ("kubeReserved", kubelet.kube_reserved),
            ("evictionHard", kubelet.eviction_hard),
            ("evictionSoft", kubelet.eviction_soft),
            ("evictionSoftGracePeriod", kubelet.eviction_soft_grace_period),
        ]
        for name, mapping in maps:
            if mapping:
                config[name] = {k: str(v) for k, v in sorted(mapping.items())}
        if kubelet.eviction_max_pod_grace_period is not None:
            config["evictionMaxPodGracePeriod"] = kubelet.eviction_max_pod_grace_period
        if kubelet.image_gc_high_threshold_percent is not None:
            config["imageGCHighThresholdPercent"] = kubelet.image_gc_high_threshold_percent
        if kubelet.image_gc_low_threshold_percent is not None:
            config["imageGCLowThresholdPercent"] = kubelet.image_gc_low_threshold_percent
        if kubelet.cpu_cfs_quota is not None:
            config["cpuCFSQuota"] = kubelet.cpu_cfs_quota
    taints = _register_with_taints(boot)
    if taints:
        config["registerWithTaints"] = taints
    return config


def nodeconfig(boot: NodeBootstrap) -> dict[str, Any]:
    """nodeflow's nodeadm ``NodeConfig`` for ``boot`` as a plain mapping."""
    cluster = boot.cluster
    _check_ca(cluster.ca_bundle)
    cluster_spec: dict[str, Any] = {"name": cluster.name, "apiServerEndpoint": cluster.endpoint}
    if cluster.ca_bundle:
        cluster_spec["certificateAuthority"] = cluster.ca_bundle
    if cluster.cidr:
        cluster_spec["cidr"] = cluster.cidr
    kubelet_spec: dict[str, Any] = {}
    config = _nodeconfig_kubelet_config(boot)
    if config:
        kubelet_spec["config"] = config
    if boot.labels:
        kubelet_spec["flags"] = ["--node-labels=" + ",".join(f"{k}={v}" for k, v in _sorted_labels(boot.labels))]
    spec: dict[str, Any] = {"cluster": cluster_spec}
    if boot.instance_store_policy == RAID0:
        spec["instance"] = {"localStorage": {"strategy": RAID0}}
    if kubelet_spec:
        spec["kubelet"] = kubelet_spec
    return {"apiVersion": NODECONFIG_API_VERSION, "kind": "NodeConfig", "spec": spec}


def _render_al2023(boot: NodeBootstrap) -> str:
    import yaml

    body = yaml.safe_dump(nodeconfig(boot), sort_keys=False, default_flow_style=False, allow_unicode=True)
    generated = MimePart.of(CONTENT_TYPE_NODECONFIG, "# nodeflow generated NodeConfig\n" + body)
    return render_mime_archive([*_user_parts(boot, detect_nodeconfig=True), generated])


# ----------------------------------------------------------------------------------- AL2 and Windows


def _shell_quote(value: str) -> str:
    return "'" + value.replace("'", "'\"'\"'") + "'"


def _ps_quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _joined_arg(name: str, mapping: Mapping[str, str] | None, separator: str) -> list[str]:
    if not mapping:
        return []
    return [f'{name}="' + ",".join(f"{k}{separator}{v}" for k, v in sorted(mapping.items())) + '"']


def kubelet_extra_args(boot: NodeBootstrap) -> list[str]:
    """Kubelet command-line flags for bootstrap scripts that take ``--kubelet-extra-args`` (AL2, Windows)."""
    args: list[str] = []
    if boot.labels:
        args.append('--node-labels="' + ",".join(f"{k}={v}" for k, v in _sorted_labels(boot.labels)) + '"')
    if boot.taints:
        joined = ",".join(f"{t.key}={_taint_value(t)}:{_taint_effect(t)}" for t in boot.taints)
        args.append(f'--register-with-taints="{joined}"')
    max_pods = _max_pods(boot)
    if max_pods is not None:
        args.append(f"--max-pods={max_pods}")
    kubelet = boot.kubelet
    if kubelet is None:
        return args
    if kubelet.pods_per_core is not None:
        args.append(f"--pods-per-core={kubelet.pods_per_core}")
    args += _joined_arg("--system-reserved", kubelet.system_reserved, "=")
    args += _joined_arg("--kube-reserved", kubelet.kube_reserved, "=")
    args += _joined_arg("--eviction-hard", kubelet.eviction_hard, "<")
    args += _joined_arg("--eviction-soft", kubelet.eviction_soft, "<")
    args += _joined_arg("--eviction-soft-grace-period", kubelet.eviction_soft_grace_period, "=")
    if kubelet.eviction_max_pod_grace_period is not None:
        args.append(f"--eviction-max-pod-grace-period={kubelet.eviction_max_pod_grace_period}")
    if kubelet.image_gc_high_threshold_percent is not None:
        args.append(f"--image-gc-high-threshold={kubelet.image_gc_high_threshold_percent}")
    if kubelet.image_gc_low_threshold_percent is not None:
        args.append(f"--image-gc-low-threshold={kubelet.image_gc_low_threshold_percent}")
    if kubelet.cpu_cfs_quota is not None:
        args.append(f"--cpu-cfs-quota={'true' if kubelet.cpu_cfs_quota else 'false'}")
    return args


def _is_ipv6(boot: NodeBootstrap) -> bool:
    if boot.cluster.ip_family == "ipv6":
        return True
    dns = _cluster_dns(boot)
    if not dns:
        return False
    try:
        return ipaddress.ip_address(dns[0]).version == 6
    except ValueError:
        return False


def eks_bootstrap_script(boot: NodeBootstrap) -> str:
    """The AL2 shell part: run ``/etc/eks/bootstrap.sh`` with the cluster and kubelet settings."""
    cluster = boot.cluster
    _check_ca(cluster.ca_bundle)
    lines = [
        "#!/bin/bash -xe",
        "exec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1",
    ]
    command = (
        f"/etc/eks/bootstrap.sh {_shell_quote(cluster.name)} --apiserver-endpoint {_shell_quote(cluster.endpoint)}"
    )
    if cluster.ca_bundle:
        command += f" --b64-cluster-ca {_shell_quote(cluster.ca_bundle)}"
    options: list[str] = []
    if _is_ipv6(boot):
        options.append("--ip-family ipv6")
    dns = _cluster_dns(boot)
    if dns:
        options.append(f"--dns-cluster-ip {_shell_quote(dns[0])}")
    if _max_pods(boot) is not None:
        options.append("--use-max-pods false")
    args = kubelet_extra_args(boot)
    if args:
        options.append(f"--kubelet-extra-args {_shell_quote(' '.join(args))}")
    if boot.instance_store_policy == RAID0:
        options.append("--local-disks raid0")
    lines.append(" \\\n".join([command, *options]))
    return "\n".join(lines)


def _render_al2(boot: NodeBootstrap) -> str:
    generated = MimePart.of(CONTENT_TYPE_SHELL, eks_bootstrap_script(boot))
    return render_mime_archive([*_user_parts(boot, detect_nodeconfig=False), generated])


def _render_windows(boot: NodeBootstrap) -> str:
    cluster = boot.cluster
    _check_ca(cluster.ca_bundle)
    lines = ["<powershell>"]
    user = _normalize_newlines(boot.user_data or "").strip("\n")
    if user.strip():
        lines.append(user)
    lines.append('[string]$EKSBootstrapScriptFile = "$env:ProgramFiles\\Amazon\\EKS\\Start-EKSBootstrap.ps1"')
    command = (
        f"& $EKSBootstrapScriptFile -EKSClusterName {_ps_quote(cluster.name)}"
        f" -APIServerEndpoint {_ps_quote(cluster.endpoint)}"
    )
    if cluster.ca_bundle:
        command += f" -Base64ClusterCA {_ps_quote(cluster.ca_bundle)}"
    args = kubelet_extra_args(boot)
    if args:
        command += f" -KubeletExtraArgs {_ps_quote(' '.join(args))}"
    dns = _cluster_dns(boot)
    if dns:
        command += f" -DNSClusterIP {_ps_quote(dns[0])}"
    lines.append(command)
    lines.append("</powershell>")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------- Bottlerocket


def _table(parent: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = parent.setdefault(key, {})
    if not isinstance(value, dict):
        raise ValueError(f"Bottlerocket userData: {where} must be a table, got {type(value).__name__}")
    return value


def _render_bottlerocket(boot: NodeBootstrap) -> str:
    cluster = boot.cluster
    _check_ca(cluster.ca_bundle)
    try:
        doc: dict[str, Any] = tomllib.loads(boot.user_data or "")
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"Bottlerocket userData: invalid TOML: {err}") from err
    settings = _table(doc, "settings", "settings")
    kubernetes = _table(settings, "kubernetes", "settings.kubernetes")

    # Karpenter nodes never join an Auto Scaling group; should-wait would block the kubelet forever.
    autoscaling = settings.get("autoscaling")
    if isinstance(autoscaling, dict) and "should-wait" in autoscaling:
        autoscaling["should-wait"] = False

    # Always nodeflow's: cluster identity.
    kubernetes["cluster-name"] = cluster.name
    kubernetes["api-server"] = cluster.endpoint
    if cluster.ca_bundle:
        kubernetes["cluster-certificate"] = cluster.ca_bundle

    # Labels merge, nodeflow's win; taints are nodeflow's alone.
    labels = _table(kubernetes, "node-labels", "settings.kubernetes.node-labels")
    labels.update(boot.labels)
    if not labels:
        del kubernetes["node-labels"]
    kubernetes.pop("node-taints", None)
    taints: dict[str, list[str]] = {}
    for taint in boot.taints:
        taints.setdefault(taint.key, []).append(f"{_taint_value(taint)}:{_taint_effect(taint)}")
    if taints:
        kubernetes["node-taints"] = taints

    # Kubelet settings the NodeClass (or the instance type) spells out override the user's.
    max_pods = _max_pods(boot)
    if max_pods is not None:
        kubernetes["max-pods"] = max_pods
    dns = _kubelet_dns(boot)
    if dns:
        kubernetes["cluster-dns-ip"] = dns[0]
    elif "cluster-dns-ip" not in kubernetes and cluster.dns_ip:
        kubernetes["cluster-dns-ip"] = cluster.dns_ip
    kubelet = boot.kubelet
    if kubelet is not None:
        maps: list[tuple[str, Mapping[str, str] | None]] = [
            ("system-reserved", kubelet.system_reserved),
            ("kube-reserved", kubelet.kube_reserved),
            ("eviction-hard", kubelet.eviction_hard),
            ("eviction-soft", kubelet.eviction_soft),
            ("eviction-soft-grace-period", kubelet.eviction_soft_grace_period),
        ]
        for name, mapping in maps:
            if mapping is not None:
                kubernetes[name] = {k: str(v) for k, v in mapping.items()}
        if kubelet.eviction_max_pod_grace_period is not None:
            kubernetes["eviction-max-pod-grace-period"] = kubelet.eviction_max_pod_grace_period
        if kubelet.image_gc_high_threshold_percent is not None:
            kubernetes["image-gc-high-threshold-percent"] = str(kubelet.image_gc_high_threshold_percent)
        if kubelet.image_gc_low_threshold_percent is not None:
            kubernetes["image-gc-low-threshold-percent"] = str(kubelet.image_gc_low_threshold_percent)
        if kubelet.cpu_cfs_quota is not None:
            kubernetes["cpu-cfs-quota"] = kubelet.cpu_cfs_quota
    if boot.instance_store_policy == RAID0:
        commands = _table(settings, "bootstrap-commands", "settings.bootstrap-commands")
        bind = ["apiclient", "ephemeral-storage", "bind"]
        if not _binds_by_default(boot.bottlerocket_version):
            bind += ["--dirs", "/var/lib/containerd", "/var/lib/kubelet", "/var/log/pods"]
        commands["000-mount-instance-storage"] = {
            "commands": [["apiclient", "ephemeral-storage", "init"], bind],
            "essential": True,
            "mode": "always",
        }
    return toml_dumps(doc)


_BOTTLEROCKET_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.\d+")


def _binds_by_default(version: str | None) -> bool:
    """Whether Bottlerocket ``version`` binds ephemeral storage to its default directories (1.46.0 and later;
    ``latest`` is; an unknown version is not assumed to)."""
    if version == "latest":
        return True
    found = _BOTTLEROCKET_VERSION.match(version or "")
    return found is not None and (int(found[1]), int(found[2])) >= (1, 46)


def bottlerocket_version(alias_version: str | None, ami_name: str | None) -> str | None:
    """A Bottlerocket AMI's version: the alias's (``bottlerocket@v1.46.0``, ``@latest``), else the ``v…`` part of
    its name (``bottlerocket-aws-k8s-1.33-x86_64-v1.46.0-431fe75a``)."""
    if alias_version:
        return alias_version
    return next((part for part in (ami_name or "").split("-") if part.startswith("v") and "." in part), None)


# ------------------------------------------------------------------------------------------ TOML out

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_ESCAPES = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r", '"': '\\"', "\\": "\\\\"}


def _toml_string(value: str) -> str:
    out = []
    for char in value:
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04X}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.match(key) else _toml_string(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, _dt.datetime | _dt.date | _dt.time):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_toml_key(str(k))} = {_toml_value(v)}" for k, v in sorted(value.items())) + "}"
    raise ValueError(f"TOML: cannot encode value of type {type(value).__name__}")


def _is_table_array(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(item, Mapping) for item in value)


def _emit_table(lines: list[str], path: list[str], table: Mapping[str, Any], *, array_item: bool = False) -> None:
    items = sorted(table.items())
    scalars = [(k, v) for k, v in items if not isinstance(v, Mapping) and not _is_table_array(v)]
    subtables = [(k, v) for k, v in items if isinstance(v, Mapping) or _is_table_array(v)]
    header = ".".join(_toml_key(part) for part in path)
    if array_item:
        lines.append(f"[[{header}]]")
    elif path and (scalars or not subtables):
        lines.append(f"[{header}]")
    for key, value in scalars:
        lines.append(f"{_toml_key(key)} = {_toml_value(value)}")
    if scalars or array_item or (path and not subtables):
        lines.append("")
    for key, value in subtables:
        if isinstance(value, Mapping):
            _emit_table(lines, [*path, key], value)
        else:
            for item in value:
                _emit_table(lines, [*path, key], item, array_item=True)


def toml_dumps(document: Mapping[str, Any]) -> str:
    """Deterministic TOML (keys sorted) that ``tomllib.loads`` reads back to ``document``."""
    lines: list[str] = []
    _emit_table(lines, [], document)
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n" if lines else ""
