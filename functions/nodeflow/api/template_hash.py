"""The NodePool template hash Karpenter writes as ``karpenter.sh/nodepool-hash`` (hash version v3).

Karpenter hashes ``spec.template`` of a NodePool with the Go library hashstructure (format v2, FNV-1
64-bit, options: slices as sets, zero values ignored, nil pointers as zero values) and records the
decimal number on the NodePool and on every NodeClaim it makes. A NodeClaim is drifted when the
numbers differ (and both carry the same hash version). nodeflow computes the very same number, so a
NodeClaim made by Karpenter is not drifted under nodeflow merely because a different program made it.

What is hashed, as Go sees the template (``NodeClaimTemplate``):
- metadata labels and annotations (maps: order does not matter; an empty map differs from none);
- spec taints and startupTaints (sets: order does not matter; an empty list differs from none), a taint's
  timeAdded as the instant it names (``_go_time``: Go's binary form of the time, so a changed timeAdded is drift);
- spec nodeClassRef (kind, name, group), terminationGracePeriod and expireAfter (as nanoseconds;
  ``Never`` is the same as unset).
Requirements are not hashed (Karpenter checks them one by one). Zero values (an empty string, a
zero duration inside its holder) are left out as Go's IsZero leaves them out.

Every value is reduced to a 64-bit number: a string is FNV-1 of its bytes, an integer FNV-1 of its 8
little-endian bytes; a struct starts from the hash of its Go type name and, per non-zero field, XORs in
the ordered hash of (field name, value) then re-hashes the running value; a map XORs the ordered
hashes of its (key, value) pairs and re-hashes once; a set XORs its elements.

``nodepool_hash`` is that number for a NodePool (once per template object), ``legacy_nodepool_hash`` the one nodeflow
wrote before it computed Karpenter's (still accepted by drift, so an upgrade replaces no node).

The same machinery gives the EC2NodeClass hash the AWS provider writes as ``karpenter.k8s.aws/ec2nodeclass-hash``
(hash version ``EC2NODECLASS_HASH_VERSION``, v5): ``ec2nodeclass_hash``, see there.

Must not touch: whether a node is drifted (``nodeflow.disruption.drift_detection``); only the hash values.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from decimal import ROUND_CEILING, Decimal
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from nodeflow.api.duration import NEVER

if TYPE_CHECKING:
    from nodeflow.api.karpenter_core import NodeClaimTemplate, NodePool
    from nodeflow.api.karpenter_ec2 import EC2NodeClass
    from nodeflow.api.meta import Taint

__all__ = [
    "EC2NODECLASS_HASH_VERSION",
    "NODEPOOL_HASH_VERSION",
    "ec2nodeclass_hash",
    "ec2nodeclass_spec_hash",
    "go_duration_nanoseconds",
    "go_quantity_string",
    "legacy_nodepool_hash",
    "nodepool_hash",
    "template_hash",
]

_OFFSET = 14695981039346656037
_PRIME = 1099511628211
_MASK = (1 << 64) - 1
_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "μs": 1_000, "ms": 1_000_000, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}
_GO_EPOCH = datetime(1, 1, 1, tzinfo=UTC)  # time.Time counts its seconds from here
_COMPONENT = re.compile(r"(\d*\.?\d*)(ns|us|µs|μs|ms|s|m|h)")

Field = tuple[str, int | None]  # (Go field name, hash of its value; None when the value is zero)


def _fnv1(data: bytes) -> int:
    h = _OFFSET
    for byte in data:
        h = (h * _PRIME) & _MASK
        h ^= byte
    return h


def _string(value: str) -> int:
    return _fnv1(value.encode())


def _int64(value: int) -> int:
    return _fnv1(struct.pack("<q", value))


def _ordered(a: int, b: int) -> int:
    return _fnv1(struct.pack("<QQ", a, b))


def _finish(a: int) -> int:
    return _fnv1(struct.pack("<Q", a))


def _struct(type_name: str, fields: Iterable[Field]) -> int:
    h = _string(type_name)
    for name, value in fields:
        if value is None:
            continue
        h ^= _ordered(_string(name), value)
        h = _finish(h)
    return h


def _map(values: Mapping[str, str] | None) -> int | None:
    if values is None:
        return None
    return _map_of((_string(key), _string(value)) for key, value in values.items())


def _map_of(pairs: Iterable[tuple[int, int]]) -> int:
    """A Go map from the hashes of its (key, value) pairs."""
    h = 0
    for key, value in pairs:
        h ^= _ordered(key, value)
    return _finish(h)


def _set(items: Iterable[int] | None) -> int | None:
    if items is None:
        return None
    h = 0
    for item in items:
        h ^= item
    return h


def _nonzero_string(value: str | None) -> int | None:
    return _string(value) if value else None


def _go_time(value: datetime) -> int:
    """A ``metav1.Time`` as hashstructure hashes it: a struct ``Time`` with one (embedded, exported) field ``Time``
    of type ``time.Time``, which hashstructure does not walk (its fields are unexported) but hashes as FNV-1 of
    its ``MarshalBinary()`` bytes: version 1, seconds since 0001-01-01 UTC (int64), nanoseconds (int32), then the
    zone offset in minutes (int16), all big-endian. metav1.Time's UnmarshalJSON stores the time in the Local
    zone, so the offset is Local's (-1, UTC's marker, never appears): 0 in Karpenter's controller, whose
    container runs in UTC. The instant alone decides; a time without zone is read as UTC. (The model keeps
    microseconds: finer digits, which Kubernetes never writes, are not hashed.)"""
    at = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    since = at - _GO_EPOCH
    seconds = since.days * 86_400 + since.seconds
    binary = struct.pack(">Bqih", 1, seconds, since.microseconds * 1_000, 0)
    return _struct("Time", [("Time", _fnv1(binary))])


def _taint(taint: Taint) -> int:
    time_added = _go_time(taint.time_added) if taint.time_added is not None else None
    return _struct(
        "Taint",
        [
            ("Key", _nonzero_string(taint.key)),
            ("Value", _nonzero_string(taint.value)),
            ("Effect", _nonzero_string(taint.effect)),
            ("TimeAdded", time_added),
        ],
    )


def go_duration_nanoseconds(value: str) -> int | None:
    """A Go duration string in whole nanoseconds as ``time.ParseDuration`` gives it; None for ``Never``."""
    if value == NEVER:
        return None
    text = value
    sign = 1
    if text[:1] in ("+", "-"):
        sign = -1 if text[0] == "-" else 1
        text = text[1:]
    if text == "0":
        return 0
    total = Fraction(0)
    pos = 0
    while pos < len(text):
        match = _COMPONENT.match(text, pos)
        if match is None or match[1] in ("", "."):
            raise ValueError(f"invalid duration {value!r}")
        total += Fraction(match[1]) * _NS[match[2]]
        pos = match.end()
    if pos == 0:
        raise ValueError(f"invalid duration {value!r}")
    return sign * int(total)


def _duration(type_name: str, value: str | None) -> int | None:
    """metav1.Duration (a ``time.Duration`` field: zero is left out) or NillableDuration (a pointer to one:
    only nil, i.e. ``Never``, is left out), both with the one field ``Duration`` in nanoseconds."""
    if value is None:
        return None
    ns = go_duration_nanoseconds(value)
    if ns is None:
        return None  # Never: a nil duration, the whole NillableDuration is zero
    pointer = type_name == "NillableDuration"
    return _struct(type_name, [("Duration", _int64(ns) if ns != 0 or pointer else None)])


def template_hash(template: NodeClaimTemplate) -> str:
    """The decimal ``karpenter.sh/nodepool-hash`` of a NodePool's ``spec.template``."""
    meta = template.metadata
    labels, annotations = _map(meta.labels), _map(meta.annotations)
    object_meta = None
    if labels is not None or annotations is not None:
        object_meta = _struct("ObjectMeta", [("Labels", labels), ("Annotations", annotations)])
    spec = template.spec
    ref = spec.node_class_ref
    node_class_ref = _struct(
        "NodeClassReference",
        [
            ("Kind", _nonzero_string(ref.kind)),
            ("Name", _nonzero_string(ref.name)),
            ("Group", _nonzero_string(ref.group)),
        ],
    )
    spec_hash = _struct(
        "NodeClaimTemplateSpec",
        [
            ("Taints", _set(None if spec.taints is None else (_taint(t) for t in spec.taints))),
            ("StartupTaints", _set(None if spec.startup_taints is None else (_taint(t) for t in spec.startup_taints))),
            ("NodeClassRef", node_class_ref),
            ("TerminationGracePeriod", _duration("Duration", spec.termination_grace_period)),
            ("ExpireAfter", _duration("NillableDuration", spec.expire_after)),
        ],
    )
    return str(_struct("NodeClaimTemplate", [("ObjectMeta", object_meta), ("Spec", spec_hash)]))


# --- EC2NodeClass (karpenter.k8s.aws/ec2nodeclass-hash) ------------------------------------------------------------

EC2NODECLASS_HASH_VERSION = "v5"

# The Go types of EC2NodeClassSpec as hashstructure walks them. A type is one of
#   "string" | "int32" | "int64" | "bool" | "quantity" (a resource.Quantity hashed as its canonical String())
#   | "duration" (metav1.Duration) | ("ptr", T) | ("slice", T) | ("map", T) (string keys)
#   | ("struct", GoTypeName, ((jsonName, GoFieldName, T | None), ...))   (None: tagged hash:"ignore")
# Struct fields are listed in Go declaration order: the order matters to the hash.
_GoType = Any
_PSTR: _GoType = ("ptr", "string")
_PI32: _GoType = ("ptr", "int32")
_PI64: _GoType = ("ptr", "int64")
_PBOOL: _GoType = ("ptr", "bool")
_SMAP: _GoType = ("map", "string")

_KUBELET: _GoType = (
    "struct",
    "KubeletConfiguration",
    (
        ("clusterDNS", "ClusterDNS", ("slice", "string")),
        ("maxPods", "MaxPods", _PI32),
        ("podsPerCore", "PodsPerCore", _PI32),
        ("systemReserved", "SystemReserved", _SMAP),
        ("kubeReserved", "KubeReserved", _SMAP),
        ("evictionHard", "EvictionHard", _SMAP),
        ("evictionSoft", "EvictionSoft", _SMAP),
        ("evictionSoftGracePeriod", "EvictionSoftGracePeriod", ("map", "duration")),
        ("evictionMaxPodGracePeriod", "EvictionMaxPodGracePeriod", _PI32),
        ("imageGCHighThresholdPercent", "ImageGCHighThresholdPercent", _PI32),
        ("imageGCLowThresholdPercent", "ImageGCLowThresholdPercent", _PI32),
        ("cpuCFSQuota", "CPUCFSQuota", _PBOOL),
    ),
)
_BLOCK_DEVICE: _GoType = (
    "struct",
    "BlockDevice",
    (
        ("deleteOnTermination", "DeleteOnTermination", _PBOOL),
        ("encrypted", "Encrypted", _PBOOL),
        ("iops", "IOPS", _PI64),
        ("kmsKeyID", "KMSKeyID", _PSTR),
        ("snapshotID", "SnapshotID", _PSTR),
        ("throughput", "Throughput", _PI64),
        ("volumeInitializationRate", "VolumeInitializationRate", _PI32),
        ("volumeSize", "VolumeSize", ("ptr", "quantity")),
        ("volumeType", "VolumeType", _PSTR),
    ),
)
_BLOCK_DEVICE_MAPPING: _GoType = (
    "struct",
    "BlockDeviceMapping",
    (
        ("deviceName", "DeviceName", _PSTR),
        ("ebs", "EBS", ("ptr", _BLOCK_DEVICE)),
        ("rootVolume", "RootVolume", "bool"),
    ),
)
_NETWORK_INTERFACE: _GoType = (
    "struct",
    "NetworkInterface",
    (
        ("networkCardIndex", "NetworkCardIndex", "int32"),
        ("deviceIndex", "DeviceIndex", "int32"),
        ("interfaceType", "InterfaceType", "string"),
    ),
)
_EC2NODECLASS_SPEC: _GoType = (
    "struct",
    "EC2NodeClassSpec",
    (
        # what the selector terms select is judged by drift from status (subnets, groups, AMIs), not the hash
        ("subnetSelectorTerms", "SubnetSelectorTerms", None),
        ("securityGroupSelectorTerms", "SecurityGroupSelectorTerms", None),
        ("capacityReservationSelectorTerms", "CapacityReservationSelectorTerms", None),
        (
            "placementGroupSelector",
            "PlacementGroupSelector",
            ("ptr", ("struct", "PlacementGroupSelector", (("name", "Name", _PSTR), ("id", "ID", _PSTR)))),
        ),
        ("associatePublicIPAddress", "AssociatePublicIPAddress", _PBOOL),
        ("ipPrefixCount", "IPPrefixCount", None),
        ("amiSelectorTerms", "AMISelectorTerms", None),
        ("amiFamily", "AMIFamily", None),  # hashed as the resolved family instead (next to the spec)
        ("userData", "UserData", _PSTR),
        ("role", "Role", "string"),
        ("instanceProfile", "InstanceProfile", _PSTR),
        ("tags", "Tags", _SMAP),
        ("kubelet", "Kubelet", ("ptr", _KUBELET)),
        ("blockDeviceMappings", "BlockDeviceMappings", ("slice", ("ptr", _BLOCK_DEVICE_MAPPING))),
        ("instanceStorePolicy", "InstanceStorePolicy", _PSTR),
        ("networkInterfaces", "NetworkInterfaces", ("slice", ("ptr", _NETWORK_INTERFACE))),
        ("detailedMonitoring", "DetailedMonitoring", _PBOOL),
        (
            "metadataOptions",
            "MetadataOptions",
            (
                "ptr",
                (
                    "struct",
                    "MetadataOptions",
                    (
                        ("httpEndpoint", "HTTPEndpoint", _PSTR),
                        ("httpProtocolIPv6", "HTTPProtocolIPv6", _PSTR),
                        ("httpPutResponseHopLimit", "HTTPPutResponseHopLimit", _PI64),
                        ("httpTokens", "HTTPTokens", _PSTR),
                    ),
                ),
            ),
        ),
        (
            "connectionTracking",
            "ConnectionTracking",
            (
                "ptr",
                (
                    "struct",
                    "ConnectionTracking",
                    (
                        ("tcpEstablishedTimeout", "TCPEstablishedTimeout", _PI32),
                        ("udpStreamTimeout", "UDPStreamTimeout", _PI32),
                        ("udpTimeout", "UDPTimeout", _PI32),
                    ),
                ),
            ),
        ),
        ("context", "Context", _PSTR),
        (
            "cpuOptions",
            "CPUOptions",
            ("ptr", ("struct", "CPUOptions", (("nestedVirtualization", "NestedVirtualization", _PSTR),))),
        ),
    ),
)

_INT_FORMATS = {"int32": "<i", "int64": "<q", "bool": "<b"}
_DECIMAL_SUFFIXES = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_BINARY_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def go_quantity_string(text: str) -> str:
    """A Kubernetes quantity in its canonical form, as Go's ``resource.Quantity.String()`` prints it after
    parsing ``text``: ``2000M`` -> ``2G``, ``1024Mi`` -> ``1Gi``, ``1.5Gi`` -> ``1536Mi``, ``1500M`` -> ``1500M``."""
    from nodeflow.api.quantity import parse_quantity

    stripped = text.strip()
    value = parse_quantity(stripped).quantize(Decimal("1e-9"), rounding=ROUND_CEILING)  # Go keeps nano precision
    if value == 0:
        return "0"
    binary = stripped.endswith("i")
    exponent_form = not binary and re.search(r"[eE][+-]?\d+$", stripped) is not None
    if binary and abs(value) >= 1024 and value == value.to_integral_value():
        number, power = int(value), 0
        while power < len(_BINARY_SUFFIXES) - 1 and number % 1024 == 0:
            number, power = number // 1024, power + 1
        return f"{number}{_BINARY_SUFFIXES[power]}"
    sign, digits, exp = value.normalize().as_tuple()
    assert isinstance(exp, int)
    mantissa = int("".join(map(str, digits))) * (-1 if sign else 1)
    shift = exp % 3  # lower the exponent to a multiple of three
    mantissa, exp = mantissa * 10**shift, exp - shift
    if exponent_form:
        return f"{mantissa}e{exp}" if exp else str(mantissa)
    while exp > 18:
        mantissa, exp = mantissa * 1000, exp - 3
    return f"{mantissa}{_DECIMAL_SUFFIXES[exp]}"


def _is_zero(value: Any, go_type: _GoType) -> bool:
    """Go's ``reflect.Value.IsZero`` for a field's JSON value (a pointer, slice or map is zero only when nil)."""
    if value is None:
        return True
    if isinstance(go_type, tuple):
        if go_type[0] == "struct":
            return all(_is_zero(value.get(j), t) for j, _n, t in go_type[2] if t is not None)
        return False
    if go_type == "duration":
        return go_duration_nanoseconds(value) == 0
    return not value


def _go_value(value: Any, go_type: _GoType) -> int:
    if isinstance(go_type, tuple):
        kind = go_type[0]
        if kind == "ptr":  # nil pointers never get here (zero fields are left out; ZeroNil elsewhere)
            return _go_value(value, go_type[1])
        if kind == "slice":  # slices as sets
            return _set(_go_value(v, go_type[1]) for v in value) or 0
        if kind == "map":
            return _map_of((_string(str(k)), _go_value(v, go_type[1])) for k, v in value.items())
        return _go_struct(value, go_type[1], go_type[2])
    if go_type == "string":
        return _string(value)
    if go_type == "quantity":
        return _string(go_quantity_string(str(value)))
    if go_type == "duration":
        ns = go_duration_nanoseconds(value) or 0
        return _struct("Duration", [("Duration", _int64(ns) if ns else None)])
    return _fnv1(struct.pack(_INT_FORMATS[go_type], int(value)))


def _inferred_type(value: Any) -> _GoType:
    """The Go type of a spec field this table does not know yet (a field newer than the table): pointers to
    scalars, maps of strings, structs of the same inference, slices as sets."""
    if isinstance(value, bool):
        return _PBOOL
    if isinstance(value, int):
        return _PI64
    if isinstance(value, list):
        return ("slice", _inferred_type(value[0]) if value else "string")
    if isinstance(value, dict):
        if all(isinstance(v, str) for v in value.values()):
            return _SMAP
        return ("ptr", ("struct", "", ()))
    return _PSTR


def _go_struct(value: Mapping[str, Any], type_name: str, fields: tuple[Any, ...]) -> int:
    known = {j for j, _n, _t in fields}
    # fields newer than the table are hashed after the known ones, named as Go names them (capitalised)
    extra = tuple((j, j[:1].upper() + j[1:], _inferred_type(v)) for j, v in value.items() if j not in known)
    hashed: list[Field] = []
    for json_name, go_name, go_type in (*fields, *extra):
        if go_type is None or _is_zero(value.get(json_name), go_type):
            continue
        hashed.append((go_name, _go_value(value[json_name], go_type)))
    return _struct(type_name, hashed)


def ec2nodeclass_spec_hash(spec: Mapping[str, Any], ami_family: str, ca_bundle: str | None) -> str:
    """The decimal ``karpenter.k8s.aws/ec2nodeclass-hash`` of an EC2NodeClass ``spec`` (its JSON form, with the
    API server's defaults), given its resolved AMI family and the cluster CA bundle (base64) nodes get.

    As the AWS provider computes it (hash version v5): hashstructure of the three values (spec, amiFamily,
    caBundle) as a set, with slices as sets, zero values left out and nil pointers as zero values. The
    selector terms, ipPrefixCount and amiFamily of the spec are not hashed (tagged ``hash:"ignore"``): what they
    select is judged from status; the family is hashed as resolved (an alias's family when amiFamily is unset),
    so setting amiFamily to what the alias already implies does not drift nodes."""
    spec_hash = _go_value(spec, _EC2NODECLASS_SPEC)
    return str(spec_hash ^ _string(ami_family) ^ _string(ca_bundle or ""))


def ec2nodeclass_hash(node_class: EC2NodeClass, ca_bundle: str | None) -> str:
    """``ec2nodeclass_spec_hash`` of an EC2NodeClass model: its whole spec (every field, new ones included)."""
    spec = node_class.spec.model_dump(by_alias=True, exclude_none=True, mode="json")
    return ec2nodeclass_spec_hash(spec, node_class.resolved_ami_family, ca_bundle)


NODEPOOL_HASH_VERSION = "v3"


def nodepool_hash(pool: NodePool) -> str:
    """The NodePool's ``karpenter.sh/nodepool-hash`` as Karpenter computes it (version ``NODEPOOL_HASH_VERSION``):
    every field of the template but its requirements (``template_hash``)."""
    template = pool.spec.template
    hit = _HASHES.get(id(template))
    if hit is not None and hit[0] is template:  # models are frozen: one hash per template object
        return hit[1]
    value = template_hash(template)
    if len(_HASHES) >= 256:
        _HASHES.clear()
    _HASHES[id(template)] = (template, value)
    return value


# Drift compares every NodeClaim with its NodePool's hash (0.2 ms each): computed once per NodePool object.
_HASHES: dict[int, tuple[object, str]] = {}


def legacy_nodepool_hash(pool: NodePool) -> str | None:
    """The ``karpenter.sh/nodepool-hash`` nodeflow wrote before it computed Karpenter's number (same version
    annotation, ``v3``): a NodeClaim recorded with it is not drifted while the fields it covered (labels,
    annotations, taints, startup taints, nodeClassRef) are unchanged, so an upgrade replaces no node.
    None for a template with a taint's timeAdded: that formula could not serialize the time (nodeflow then made no
    NodeClaim of such a NodePool), so no NodeClaim carries it."""
    template = pool.spec.template
    spec = template.spec
    if any(t.time_added is not None for t in (*(spec.taints or ()), *(spec.startup_taints or ()))):
        return None
    doc = {
        "labels": dict(sorted((template.metadata.labels or {}).items())),
        "annotations": dict(sorted((template.metadata.annotations or {}).items())),
        "taints": sorted(
            (t.model_dump(by_alias=True, exclude_none=True) for t in spec.taints or ()), key=lambda d: json.dumps(d)
        ),
        "startupTaints": sorted(
            (t.model_dump(by_alias=True, exclude_none=True) for t in spec.startup_taints or ()),
            key=lambda d: json.dumps(d),
        ),
        "nodeClassRef": spec.node_class_ref.model_dump(by_alias=True, exclude_none=True),
    }
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return str(int(hashlib.sha256(canonical.encode()).hexdigest()[:15], 16))
