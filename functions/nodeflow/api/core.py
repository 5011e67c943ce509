"""The parts of Kubernetes core/v1, apps/v1, batch/v1, policy/v1 and storage/v1 a scheduler needs.

Attribute names are snake_case; aliases are the exact Kubernetes camelCase names and both are
accepted on input. Unknown fields are ignored (real manifests carry images, env, probes, ...),
but every field modelled here is validated strictly, and model-level rules raise
``ValueError("<relative path>: <rule>")`` so ``nodeflow.api.errors.format_validation_error``
names the field. Quantities stay strings in the models (validated with
``nodeflow.api.quantity``); helpers such as ``Pod.effective_requests`` return integer
milli-units.

``expand_workload`` turns a Deployment, ReplicaSet, StatefulSet or Job into the pods its
controller would create: deterministic names, template labels, owner references, phase
Pending. The template is validated once; every pod shares the same ``PodSpec`` instance
(unless the StatefulSet adds per-pod claims), so expanding 100,000 pods is cheap.

Must not touch: any decision about the objects (scheduling, disruption): these are the shapes and their validation; no
I/O.
"""

from __future__ import annotations

import gc
import json
import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Annotated, Any, Literal, NamedTuple, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from nodeflow.api.meta import (
    NodeSelectorRequirement,
    ObjectMeta,
    OwnerReference,
    Taint,
    Toleration,
    check_label_value,
    check_qualified_name,
)
from nodeflow.api.quantity import QuantityError, parse_quantity, to_milli

__all__ = [
    "Affinity",
    "CSIPersistentVolumeSource",
    "Container",
    "ContainerPort",
    "CoreModel",
    "DaemonSet",
    "DaemonSetSpec",
    "Deployment",
    "DeploymentSpec",
    "EphemeralVolumeSource",
    "HostPort",
    "Job",
    "JobSpec",
    "LabelSelector",
    "LabelSelectorRequirement",
    "Namespace",
    "Node",
    "NodeAffinity",
    "NodeCondition",
    "NodeSelector",
    "NodeSelectorTerm",
    "NodeSpec",
    "NodeStatus",
    "NodeSystemInfo",
    "ObjectReference",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "PersistentVolumeClaimSpec",
    "PersistentVolumeClaimStatus",
    "PersistentVolumeClaimTemplate",
    "PersistentVolumeClaimVolumeSource",
    "PersistentVolumeSpec",
    "PersistentVolumeStatus",
    "Pod",
    "PodAffinity",
    "PodAffinityTerm",
    "PodAntiAffinity",
    "PodCondition",
    "PodDisruptionBudget",
    "PodDisruptionBudgetSpec",
    "PodDisruptionBudgetStatus",
    "PodSpec",
    "PodStatus",
    "PodTemplateSpec",
    "PreferredSchedulingTerm",
    "Quantity",
    "ReplicaSet",
    "ReplicaSetSpec",
    "ResourceList",
    "ResourceRequirements",
    "StatefulSet",
    "StatefulSetSpec",
    "StorageClass",
    "TopologySelectorLabelRequirement",
    "TopologySelectorTerm",
    "TopologySpreadConstraint",
    "Volume",
    "VolumeNodeAffinity",
    "VolumeResourceRequirements",
    "WeightedPodAffinityTerm",
    "Workload",
    "daemon_set_pod",
    "expand_workload",
    "resource_milli",
    "statefulset_claims",
    "workload_pod_count",
]

ModelT = TypeVar("ModelT", bound=BaseModel)

# Labels and annotations the controllers put on the pods they create.
LABEL_POD_TEMPLATE_HASH = "pod-template-hash"
LABEL_STATEFULSET_POD_NAME = "statefulset.kubernetes.io/pod-name"
LABEL_POD_INDEX = "apps.kubernetes.io/pod-index"
LABEL_JOB_NAME = "batch.kubernetes.io/job-name"
LABEL_JOB_NAME_LEGACY = "job-name"
LABEL_JOB_CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
LABEL_JOB_CONTROLLER_UID_LEGACY = "controller-uid"
LABEL_JOB_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"

RESOURCE_PODS = "pods"


class CoreModel(BaseModel):
    """Base of the core models: camelCase aliases, unknown fields ignored, immutable."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        frozen=True,
    )


# --------------------------------------------------------------------------------------------
# Quantities and resource lists


def _quantity(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"quantity must be a string or a number, got {type(value).__name__}")
    try:
        parsed = parse_quantity(value)
    except QuantityError as exc:
        raise ValueError(str(exc)) from None
    if parsed < 0:
        raise ValueError(f"quantity {value!r} must be greater than or equal to 0")
    return value.strip() if isinstance(value, str) else str(value)


Quantity = Annotated[str, BeforeValidator(_quantity)]
"""A non-negative Kubernetes quantity, kept as its string (numbers are accepted and stringified)."""

ResourceList = dict[str, Quantity]
"""core/v1 ResourceList: resource name -> quantity string."""


def resource_milli(resources: Mapping[str, str]) -> dict[str, int]:
    """A ResourceList in integer milli-units (rounded up, like Kubernetes)."""
    return {name: to_milli(value) for name, value in resources.items()}


def _add_into(total: dict[str, int], more: Mapping[str, int]) -> None:
    for name, value in more.items():
        total[name] = total.get(name, 0) + value


def _max_into(total: dict[str, int], other: Mapping[str, int]) -> None:
    for name, value in other.items():
        if value > total.get(name, 0):
            total[name] = value
        else:
            total.setdefault(name, value)


# --------------------------------------------------------------------------------------------
# Selectors and affinity


def _check_key(key: str) -> str:
    return check_qualified_name(key)


class LabelSelectorRequirement(CoreModel):
    """meta/v1 LabelSelectorRequirement."""

    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: tuple[str, ...] = ()

    @field_validator("key")
    @classmethod
    def _key(cls, key: str) -> str:
        return _check_key(key)

    @model_validator(mode="after")
    def _rules(self) -> LabelSelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"values: operator {self.operator} requires at least one value")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"values: operator {self.operator} must not have values")
        return self

    def matches(self, labels: Mapping[str, str]) -> bool:
        """True when ``labels`` satisfy this requirement."""
        if self.operator == "In":
            return labels.get(self.key) in self.values
        if self.operator == "NotIn":
            return labels.get(self.key) not in self.values
        if self.operator == "Exists":
            return self.key in labels
        return self.key not in labels


class LabelSelector(CoreModel):
    """meta/v1 LabelSelector. An empty selector matches everything."""

    match_labels: dict[str, str] = Field(default_factory=dict)
    match_expressions: tuple[LabelSelectorRequirement, ...] = ()

    @field_validator("match_labels")
    @classmethod
    def _labels(cls, labels: dict[str, str]) -> dict[str, str]:
        for key, value in labels.items():
            _check_key(key)
            check_label_value(value)
        return labels

    @property
    def empty(self) -> bool:
        """True when the selector has no terms (and so matches every object)."""
        return not self.match_labels and not self.match_expressions

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        """True when ``labels`` satisfy every term."""
        labels = labels or {}
        for key, value in self.match_labels.items():
            if labels.get(key) != value:
                return False
        return all(requirement.matches(labels) for requirement in self.match_expressions)


class NodeSelectorTerm(CoreModel):
    """core/v1 NodeSelectorTerm: the requirements are ANDed."""

    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()

    @model_validator(mode="after")
    def _fields(self) -> NodeSelectorTerm:
        for index, requirement in enumerate(self.match_fields):
            if requirement.key != "metadata.name":
                raise ValueError(f"matchFields[{index}].key: only metadata.name is supported, got {requirement.key!r}")
            if requirement.operator not in ("In", "NotIn"):
                raise ValueError(f"matchFields[{index}].operator: must be In or NotIn for metadata.name")
        return self


class NodeSelector(CoreModel):
    """core/v1 NodeSelector: the terms are ORed."""

    node_selector_terms: tuple[NodeSelectorTerm, ...]

    @model_validator(mode="after")
    def _not_empty(self) -> NodeSelector:
        if not self.node_selector_terms:
            raise ValueError("nodeSelectorTerms: must have at least one term")
        return self


class PreferredSchedulingTerm(CoreModel):
    """core/v1 PreferredSchedulingTerm."""

    weight: int = Field(ge=1, le=100)
    preference: NodeSelectorTerm


class NodeAffinity(CoreModel):
    """core/v1 NodeAffinity."""

    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    preferred_during_scheduling_ignored_during_execution: tuple[PreferredSchedulingTerm, ...] = ()

    @property
    def required(self) -> NodeSelector | None:
        """requiredDuringSchedulingIgnoredDuringExecution."""
        return self.required_during_scheduling_ignored_during_execution

    @property
    def preferred(self) -> tuple[PreferredSchedulingTerm, ...]:
        """preferredDuringSchedulingIgnoredDuringExecution."""
        return self.preferred_during_scheduling_ignored_during_execution


class PodAffinityTerm(CoreModel):
    """core/v1 PodAffinityTerm."""

    label_selector: LabelSelector | None = None
    namespaces: tuple[str, ...] = ()
    namespace_selector: LabelSelector | None = None
    topology_key: str
    match_label_keys: tuple[str, ...] = ()
    mismatch_label_keys: tuple[str, ...] = ()

    @field_validator("topology_key")
    @classmethod
    def _topology_key(cls, key: str) -> str:
        if not key:
            raise ValueError("topologyKey must not be empty")
        return _check_key(key)

    @model_validator(mode="after")
    def _rules(self) -> PodAffinityTerm:
        overlap = set(self.match_label_keys) & set(self.mismatch_label_keys)
        if overlap:
            raise ValueError(
                f"matchLabelKeys: keys {sorted(overlap)} must not be in both matchLabelKeys and mismatchLabelKeys"
            )
        if (self.match_label_keys or self.mismatch_label_keys) and self.label_selector is None:
            raise ValueError("labelSelector: required when matchLabelKeys or mismatchLabelKeys is set")
        return self


class WeightedPodAffinityTerm(CoreModel):
    """core/v1 WeightedPodAffinityTerm."""

    weight: int = Field(ge=1, le=100)
    pod_affinity_term: PodAffinityTerm


class PodAffinity(CoreModel):
    """core/v1 PodAffinity."""

    required_during_scheduling_ignored_during_execution: tuple[PodAffinityTerm, ...] = ()
    preferred_during_scheduling_ignored_during_execution: tuple[WeightedPodAffinityTerm, ...] = ()

    @property
    def required(self) -> tuple[PodAffinityTerm, ...]:
        """requiredDuringSchedulingIgnoredDuringExecution."""
        return self.required_during_scheduling_ignored_during_execution

    @property
    def preferred(self) -> tuple[WeightedPodAffinityTerm, ...]:
        """preferredDuringSchedulingIgnoredDuringExecution."""
        return self.preferred_during_scheduling_ignored_during_execution


class PodAntiAffinity(PodAffinity):
    """core/v1 PodAntiAffinity (same shape as PodAffinity)."""


class Affinity(CoreModel):
    """core/v1 Affinity."""

    node_affinity: NodeAffinity | None = None
    pod_affinity: PodAffinity | None = None
    pod_anti_affinity: PodAntiAffinity | None = None


class TopologySpreadConstraint(CoreModel):
    """core/v1 TopologySpreadConstraint."""

    max_skew: int = Field(ge=1)
    topology_key: str
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"]
    label_selector: LabelSelector | None = None
    min_domains: int | None = Field(default=None, ge=1)
    node_affinity_policy: Literal["Honor", "Ignore"] | None = None
    node_taints_policy: Literal["Honor", "Ignore"] | None = None
    match_label_keys: tuple[str, ...] = ()

    @field_validator("topology_key")
    @classmethod
    def _topology_key(cls, key: str) -> str:
        if not key:
            raise ValueError("topologyKey must not be empty")
        return _check_key(key)

    @model_validator(mode="after")
    def _rules(self) -> TopologySpreadConstraint:
        if self.min_domains is not None and self.when_unsatisfiable != "DoNotSchedule":
            raise ValueError("minDomains: may only be set when whenUnsatisfiable is DoNotSchedule")
        if self.match_label_keys and self.label_selector is None:
            raise ValueError("labelSelector: required when matchLabelKeys is set")
        return self

    @property
    def honors_node_affinity(self) -> bool:
        """nodeAffinityPolicy, defaulted (Honor)."""
        return self.node_affinity_policy != "Ignore"

    @property
    def honors_node_taints(self) -> bool:
        """nodeTaintsPolicy, defaulted (Ignore)."""
        return self.node_taints_policy == "Honor"


# --------------------------------------------------------------------------------------------
# Containers, volumes, pods


class ContainerPort(CoreModel):
    """core/v1 ContainerPort."""

    name: str | None = None
    container_port: int = Field(ge=1, le=65535)
    host_port: int | None = Field(default=None, ge=0, le=65535)
    protocol: Literal["TCP", "UDP", "SCTP"] = "TCP"
    host_ip: str | None = Field(default=None, alias="hostIP")


class ResourceRequirements(CoreModel):
    """core/v1 ResourceRequirements (requests must not exceed limits)."""

    requests: ResourceList = Field(default_factory=dict)
    limits: ResourceList = Field(default_factory=dict)

    @model_validator(mode="after")
    def _requests_within_limits(self) -> ResourceRequirements:
        for name, limit in self.limits.items():
            request = self.requests.get(name)
            if request is not None and parse_quantity(request) > parse_quantity(limit):
                path = f"requests.{name}" if name.isidentifier() else f"requests[{name}]"
                raise ValueError(f"{path}: must be less than or equal to the {name} limit of {limit}")
        return self

    def effective_requests(self) -> dict[str, int]:
        """Requests in milli-units, with limits standing in for missing requests (Kubernetes defaulting)."""
        requests = resource_milli(self.requests)
        for name, value in self.limits.items():
            if name not in requests:
                requests[name] = to_milli(value)
        return requests


class Container(CoreModel):
    """core/v1 Container (scheduling-relevant fields only)."""

    name: str
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)
    ports: tuple[ContainerPort, ...] = ()
    restart_policy: Literal["Always"] | None = None

    @property
    def is_sidecar(self) -> bool:
        """True for a restartable init container (restartPolicy Always)."""
        return self.restart_policy == "Always"


class PersistentVolumeClaimVolumeSource(CoreModel):
    """core/v1 PersistentVolumeClaimVolumeSource."""

    claim_name: str = Field(min_length=1)
    read_only: bool = False


class VolumeResourceRequirements(CoreModel):
    """core/v1 VolumeResourceRequirements."""

    requests: ResourceList = Field(default_factory=dict)
    limits: ResourceList = Field(default_factory=dict)


class PersistentVolumeClaimSpec(CoreModel):
    """core/v1 PersistentVolumeClaimSpec."""

    access_modes: tuple[str, ...] = ()
    storage_class_name: str | None = None
    volume_name: str | None = None
    volume_mode: Literal["Filesystem", "Block"] | None = None
    resources: VolumeResourceRequirements = Field(default_factory=VolumeResourceRequirements)


class PersistentVolumeClaimTemplate(CoreModel):
    """core/v1 PersistentVolumeClaimTemplate (of an ephemeral volume)."""

    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PersistentVolumeClaimSpec


class EphemeralVolumeSource(CoreModel):
    """core/v1 EphemeralVolumeSource."""

    volume_claim_template: PersistentVolumeClaimTemplate


class Volume(CoreModel):
    """core/v1 Volume: only the claim-backed sources matter to scheduling; others are ignored."""

    name: str = Field(min_length=1)
    persistent_volume_claim: PersistentVolumeClaimVolumeSource | None = None
    ephemeral: EphemeralVolumeSource | None = None


class HostPort(NamedTuple):
    """A host port a pod binds; host_ip "0.0.0.0" stands for every address."""

    host_ip: str
    protocol: str
    port: int


_REQUESTS_CACHE = "__nodeflow_effective_requests__"


class PodSpec(CoreModel):
    """core/v1 PodSpec (scheduling-relevant fields only)."""

    node_name: str | None = None
    node_selector: dict[str, str] = Field(default_factory=dict)
    affinity: Affinity | None = None
    tolerations: tuple[Toleration, ...] = ()
    topology_spread_constraints: tuple[TopologySpreadConstraint, ...] = ()
    containers: tuple[Container, ...] = ()
    init_containers: tuple[Container, ...] = ()
    overhead: ResourceList = Field(default_factory=dict)
    volumes: tuple[Volume, ...] = ()
    host_network: bool = False
    priority_class_name: str | None = None
    priority: int | None = None
    scheduler_name: str = "default-scheduler"
    preemption_policy: Literal["PreemptLowerPriority", "Never"] | None = None
    termination_grace_period_seconds: int | None = Field(default=None, ge=0)

    @field_validator("node_selector")
    @classmethod
    def _node_selector(cls, selector: dict[str, str]) -> dict[str, str]:
        for key, value in selector.items():
            _check_key(key)
            check_label_value(value)
        return selector

    @model_validator(mode="after")
    def _containers(self) -> PodSpec:
        seen: set[str] = set()
        for field, containers in (("initContainers", self.init_containers), ("containers", self.containers)):
            for index, container in enumerate(containers):
                if container.name in seen:
                    raise ValueError(f"{field}[{index}].name: duplicate container name {container.name!r}")
                seen.add(container.name)
        for index, container in enumerate(self.containers):
            if container.restart_policy is not None:
                raise ValueError(f"containers[{index}].restartPolicy: only init containers may set restartPolicy")
        return self

    def effective_requests(self) -> dict[str, int]:
        """The pod's requests in milli-units, computed as Kubernetes' PodRequests does.

        max(sum of containers + sum of sidecars, for each init container its request plus the
        sidecars started before it), per resource, plus the pod overhead. Limits stand in for
        missing requests. Always includes ``pods`` = 1000 (one pod).
        """
        # The cache lives in __dict__ under a non-field key: pydantic ignores it for equality,
        # hashing and dumps. It records the objects it was computed from, so a copy with other
        # containers (model_copy(update=...)) recomputes instead of reusing a stale value.
        cache = self.__dict__.get(_REQUESTS_CACHE)
        if (
            cache is not None
            and cache[0] is self.containers
            and cache[1] is self.init_containers
            and cache[2] is self.overhead
        ):
            return dict(cache[3])
        requests: dict[str, int] = {}
        for container in self.containers:
            _add_into(requests, container.resources.effective_requests())
        sidecars: dict[str, int] = {}
        init_peak: dict[str, int] = {}
        for container in self.init_containers:
            container_requests = container.resources.effective_requests()
            if container.is_sidecar:
                _add_into(requests, container_requests)
                _add_into(sidecars, container_requests)
                current = dict(sidecars)
            else:
                current = dict(container_requests)
                _add_into(current, sidecars)
            _max_into(init_peak, current)
        _max_into(requests, init_peak)
        _add_into(requests, resource_milli(self.overhead))
        requests[RESOURCE_PODS] = 1000
        self.__dict__[_REQUESTS_CACHE] = (self.containers, self.init_containers, self.overhead, requests)
        return dict(requests)

    def host_ports(self) -> list[HostPort]:
        """Distinct host ports of the containers and init containers, in declaration order.

        An empty hostIP means every address ("0.0.0.0"); with hostNetwork a port without an
        explicit hostPort binds its containerPort on the host (Kubernetes defaulting).
        """
        out: list[HostPort] = []
        seen: set[HostPort] = set()
        for container in (*self.init_containers, *self.containers):
            for port in container.ports:
                number = port.host_port or (port.container_port if self.host_network else 0)
                if not number:
                    continue
                entry = HostPort(port.host_ip or "0.0.0.0", port.protocol, number)
                if entry not in seen:
                    seen.add(entry)
                    out.append(entry)
        return out

    def claim_names(self, pod_name: str) -> list[str]:
        """Names of the PersistentVolumeClaims the pod uses (ephemeral ones are "<pod>-<volume>")."""
        names: list[str] = []
        for volume in self.volumes:
            if volume.persistent_volume_claim is not None:
                names.append(volume.persistent_volume_claim.claim_name)
            elif volume.ephemeral is not None:
                names.append(f"{pod_name}-{volume.name}")
        return names


class PodCondition(CoreModel):
    """core/v1 PodCondition."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str | None = None
    message: str | None = None


class PodStatus(CoreModel):
    """core/v1 PodStatus (scheduling-relevant fields only)."""

    phase: Literal["Pending", "Running", "Succeeded", "Failed", "Unknown"] | None = None
    conditions: tuple[PodCondition, ...] = ()
    nominated_node_name: str | None = None
    start_time: datetime | None = None  # when the kubelet started the pod (do-not-disrupt durations count from it)

    def condition(self, type_: str) -> PodCondition | None:
        """The condition of type ``type_``, if present."""
        for condition in self.conditions:
            if condition.type == type_:
                return condition
        return None


class Pod(CoreModel):
    """core/v1 Pod."""

    api_version: Literal["v1"] = "v1"
    kind: Literal["Pod"] = "Pod"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PodSpec = Field(default_factory=PodSpec)
    status: PodStatus = Field(default_factory=PodStatus)

    @property
    def name(self) -> str:
        return self.metadata.name or ""

    @property
    def namespace(self) -> str:
        """The namespace ("default" when unset)."""
        return self.metadata.namespace or "default"

    @property
    def key(self) -> str:
        """ "namespace/name" (namespace defaults to "default")."""
        return f"{self.metadata.namespace or 'default'}/{self.metadata.name or ''}"

    @property
    def labels(self) -> dict[str, str]:
        return self.metadata.labels or {}

    def effective_requests(self) -> dict[str, int]:
        """See ``PodSpec.effective_requests``: milli-units, ``pods`` = 1000 included."""
        return self.spec.effective_requests()

    def host_ports(self) -> list[HostPort]:
        """See ``PodSpec.host_ports``: (hostIP, protocol, port) triples."""
        return self.spec.host_ports()

    def claim_names(self) -> list[str]:
        """Names of the PersistentVolumeClaims the pod mounts (ephemeral ones included)."""
        return self.spec.claim_names(self.name)

    def owner(self) -> OwnerReference | None:
        """The controller owner reference (or the first one), if any."""
        owners = self.metadata.owner_references or []
        for owner in owners:
            if owner.controller:
                return owner
        return owners[0] if owners else None


class PodTemplateSpec(CoreModel):
    """core/v1 PodTemplateSpec."""

    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PodSpec


# --------------------------------------------------------------------------------------------
# Nodes


class NodeCondition(CoreModel):
    """core/v1 NodeCondition."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str | None = None
    message: str | None = None
    last_transition_time: datetime | None = None  # since when it has had this status (node repair counts from it)


class NodeSystemInfo(CoreModel):
    """core/v1 NodeSystemInfo."""

    machine_id: str | None = Field(default=None, alias="machineID")
    system_uuid: str | None = Field(default=None, alias="systemUUID")
    boot_id: str | None = Field(default=None, alias="bootID")
    kernel_version: str | None = None
    os_image: str | None = None
    container_runtime_version: str | None = None
    kubelet_version: str | None = None
    kube_proxy_version: str | None = None
    operating_system: str | None = None
    architecture: str | None = None


class NodeSpec(CoreModel):
    """core/v1 NodeSpec."""

    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    provider_id: str | None = Field(default=None, alias="providerID")


class NodeStatus(CoreModel):
    """core/v1 NodeStatus (scheduling-relevant fields only)."""

    capacity: ResourceList = Field(default_factory=dict)
    allocatable: ResourceList = Field(default_factory=dict)
    conditions: tuple[NodeCondition, ...] = ()
    node_info: NodeSystemInfo | None = None


class Node(CoreModel):
    """core/v1 Node."""

    api_version: Literal["v1"] = "v1"
    kind: Literal["Node"] = "Node"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: NodeSpec = Field(default_factory=NodeSpec)
    status: NodeStatus = Field(default_factory=NodeStatus)

    @property
    def name(self) -> str:
        return self.metadata.name or ""

    @property
    def labels(self) -> dict[str, str]:
        return self.metadata.labels or {}

    def allocatable_milli(self) -> dict[str, int]:
        """status.allocatable (capacity when allocatable is empty) in milli-units."""
        return resource_milli(self.status.allocatable or self.status.capacity)

    def capacity_milli(self) -> dict[str, int]:
        """status.capacity in milli-units."""
        return resource_milli(self.status.capacity)

    @property
    def ready(self) -> bool:
        """True when the Ready condition is True."""
        return any(c.type == "Ready" and c.status == "True" for c in self.status.conditions)


# --------------------------------------------------------------------------------------------
# Namespaces

LABEL_NAMESPACE_NAME = "kubernetes.io/metadata.name"
"""The label the API server puts on every namespace: its own name."""


class Namespace(CoreModel):
    """core/v1 Namespace (metadata only: its labels are what namespaceSelectors match)."""

    api_version: Literal["v1"] = "v1"
    kind: Literal["Namespace"] = "Namespace"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)

    @property
    def name(self) -> str:
        return self.metadata.name or ""

    @property
    def labels(self) -> dict[str, str]:
        """The labels, including the implicit ``kubernetes.io/metadata.name=<name>``."""
        return {**(self.metadata.labels or {}), LABEL_NAMESPACE_NAME: self.name}


# --------------------------------------------------------------------------------------------
# Storage


class ObjectReference(CoreModel):
    """core/v1 ObjectReference (as used by a PersistentVolume's claimRef)."""

    kind: str | None = None
    namespace: str | None = None
    name: str | None = None
    uid: str | None = None
    api_version: str | None = None


class PersistentVolumeClaimStatus(CoreModel):
    """core/v1 PersistentVolumeClaimStatus."""

    phase: Literal["Pending", "Bound", "Lost"] | None = None


class PersistentVolumeClaim(CoreModel):
    """core/v1 PersistentVolumeClaim."""

    api_version: Literal["v1"] = "v1"
    kind: Literal["PersistentVolumeClaim"] = "PersistentVolumeClaim"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PersistentVolumeClaimSpec = Field(default_factory=PersistentVolumeClaimSpec)
    status: PersistentVolumeClaimStatus = Field(default_factory=PersistentVolumeClaimStatus)

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace or 'default'}/{self.metadata.name or ''}"


class VolumeNodeAffinity(CoreModel):
    """core/v1 VolumeNodeAffinity."""

    required: NodeSelector | None = None


class CSIPersistentVolumeSource(CoreModel):
    """core/v1 CSIPersistentVolumeSource (driver matters for volume limits)."""

    driver: str = Field(min_length=1)
    volume_handle: str | None = None


class PersistentVolumeSpec(CoreModel):
    """core/v1 PersistentVolumeSpec (scheduling-relevant fields only)."""

    capacity: ResourceList = Field(default_factory=dict)
    access_modes: tuple[str, ...] = ()
    storage_class_name: str | None = None
    claim_ref: ObjectReference | None = None
    node_affinity: VolumeNodeAffinity | None = None
    csi: CSIPersistentVolumeSource | None = None
    volume_mode: Literal["Filesystem", "Block"] | None = None
    # Node-local sources: their hostname affinity names the node the data is on (see nodeflow.constraints).
    local: dict[str, Any] | None = None
    host_path: dict[str, Any] | None = None


class PersistentVolumeStatus(CoreModel):
    """core/v1 PersistentVolumeStatus."""

    phase: Literal["Pending", "Available", "Bound", "Released", "Failed"] | None = None


class PersistentVolume(CoreModel):
    """core/v1 PersistentVolume."""

    api_version: Literal["v1"] = "v1"
    kind: Literal["PersistentVolume"] = "PersistentVolume"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PersistentVolumeSpec = Field(default_factory=PersistentVolumeSpec)
    status: PersistentVolumeStatus = Field(default_factory=PersistentVolumeStatus)


class TopologySelectorLabelRequirement(CoreModel):
    """core/v1 TopologySelectorLabelRequirement."""

    key: str
    values: tuple[str, ...]

    @field_validator("key")
    @classmethod
    def _key(cls, key: str) -> str:
        return _check_key(key)

    @model_validator(mode="after")
    def _not_empty(self) -> TopologySelectorLabelRequirement:
        if not self.values:
            raise ValueError("values: must have at least one value")
        return self


class TopologySelectorTerm(CoreModel):
    """core/v1 TopologySelectorTerm."""

    match_label_expressions: tuple[TopologySelectorLabelRequirement, ...] = ()


class StorageClass(CoreModel):
    """storage.k8s.io/v1 StorageClass (top-level fields, no spec)."""

    api_version: Literal["storage.k8s.io/v1"] = "storage.k8s.io/v1"
    kind: Literal["StorageClass"] = "StorageClass"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    provisioner: str = Field(min_length=1)
    parameters: dict[str, str] = Field(default_factory=dict)
    reclaim_policy: Literal["Delete", "Retain", "Recycle"] | None = None
    volume_binding_mode: Literal["Immediate", "WaitForFirstConsumer"] = "Immediate"
    allowed_topologies: tuple[TopologySelectorTerm, ...] = ()
    allow_volume_expansion: bool | None = None


# --------------------------------------------------------------------------------------------
# Disruption budgets


def _int_or_percent(value: int | str | None) -> int | str | None:
    if value is None or isinstance(value, int):
        if isinstance(value, int) and value < 0:
            raise ValueError(f"{value} must be greater than or equal to 0")
        return value
    if not value.endswith("%"):
        raise ValueError(f"{value!r} must be an integer or a percentage such as '50%'")
    try:
        percent = int(value[:-1])
    except ValueError:
        raise ValueError(f"{value!r} must be an integer or a percentage such as '50%'") from None
    if not 0 <= percent <= 100:
        raise ValueError(f"{value!r} must be a percentage between 0% and 100%")
    return value


class PodDisruptionBudgetSpec(CoreModel):
    """policy/v1 PodDisruptionBudgetSpec."""

    min_available: int | str | None = None
    max_unavailable: int | str | None = None
    selector: LabelSelector | None = None
    unhealthy_pod_eviction_policy: Literal["IfHealthyBudget", "AlwaysAllow"] | None = None

    @field_validator("min_available", "max_unavailable", mode="after")
    @classmethod
    def _amount(cls, value: int | str | None) -> int | str | None:
        return _int_or_percent(value)

    @model_validator(mode="after")
    def _one_of(self) -> PodDisruptionBudgetSpec:
        if self.min_available is not None and self.max_unavailable is not None:
            raise ValueError("maxUnavailable: minAvailable and maxUnavailable cannot both be set")
        return self


class PodDisruptionBudgetStatus(CoreModel):
    """policy/v1 PodDisruptionBudgetStatus."""

    current_healthy: int = 0
    desired_healthy: int = 0
    disruptions_allowed: int = 0
    expected_pods: int = 0


class PodDisruptionBudget(CoreModel):
    """policy/v1 PodDisruptionBudget."""

    api_version: Literal["policy/v1"] = "policy/v1"
    kind: Literal["PodDisruptionBudget"] = "PodDisruptionBudget"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PodDisruptionBudgetSpec = Field(default_factory=PodDisruptionBudgetSpec)
    status: PodDisruptionBudgetStatus = Field(default_factory=PodDisruptionBudgetStatus)


# --------------------------------------------------------------------------------------------
# Workloads


def _selector_matches_template(selector: LabelSelector | None, template: PodTemplateSpec) -> None:
    if selector is None:
        return
    if selector.empty:
        raise ValueError("selector: empty selector is invalid (it would match every pod)")
    if not selector.matches(template.metadata.labels):
        raise ValueError("template.metadata.labels: selector does not match template labels")


class DeploymentSpec(CoreModel):
    """apps/v1 DeploymentSpec (scheduling-relevant fields only)."""

    replicas: int = Field(default=1, ge=0)
    selector: LabelSelector | None = None
    template: PodTemplateSpec

    @model_validator(mode="after")
    def _selector(self) -> DeploymentSpec:
        _selector_matches_template(self.selector, self.template)
        return self


class Deployment(CoreModel):
    """apps/v1 Deployment."""

    api_version: Literal["apps/v1"] = "apps/v1"
    kind: Literal["Deployment"] = "Deployment"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: DeploymentSpec


class ReplicaSetSpec(DeploymentSpec):
    """apps/v1 ReplicaSetSpec."""


class ReplicaSet(CoreModel):
    """apps/v1 ReplicaSet."""

    api_version: Literal["apps/v1"] = "apps/v1"
    kind: Literal["ReplicaSet"] = "ReplicaSet"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: ReplicaSetSpec


class StatefulSetSpec(CoreModel):
    """apps/v1 StatefulSetSpec (scheduling-relevant fields only)."""

    replicas: int = Field(default=1, ge=0)
    selector: LabelSelector | None = None
    template: PodTemplateSpec
    service_name: str | None = None
    volume_claim_templates: tuple[PersistentVolumeClaim, ...] = ()

    @model_validator(mode="after")
    def _rules(self) -> StatefulSetSpec:
        for index, template in enumerate(self.volume_claim_templates):
            if not template.metadata.name:
                raise ValueError(f"volumeClaimTemplates[{index}].metadata.name: required field is missing")
        _selector_matches_template(self.selector, self.template)
        return self


class StatefulSet(CoreModel):
    """apps/v1 StatefulSet."""

    api_version: Literal["apps/v1"] = "apps/v1"
    kind: Literal["StatefulSet"] = "StatefulSet"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: StatefulSetSpec


class DaemonSetSpec(CoreModel):
    """apps/v1 DaemonSetSpec."""

    selector: LabelSelector | None = None
    template: PodTemplateSpec

    @model_validator(mode="after")
    def _selector(self) -> DaemonSetSpec:
        _selector_matches_template(self.selector, self.template)
        return self


class DaemonSet(CoreModel):
    """apps/v1 DaemonSet."""

    api_version: Literal["apps/v1"] = "apps/v1"
    kind: Literal["DaemonSet"] = "DaemonSet"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: DaemonSetSpec


class JobSpec(CoreModel):
    """batch/v1 JobSpec (scheduling-relevant fields only)."""

    parallelism: int = Field(default=1, ge=0)
    completions: int | None = Field(default=None, ge=0)
    completion_mode: Literal["NonIndexed", "Indexed"] = "NonIndexed"
    template: PodTemplateSpec


class Job(CoreModel):
    """batch/v1 Job."""

    api_version: Literal["batch/v1"] = "batch/v1"
    kind: Literal["Job"] = "Job"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: JobSpec


Workload = Deployment | ReplicaSet | StatefulSet | Job
"""The kinds ``expand_workload`` turns into pods (besides Pod itself)."""


# --------------------------------------------------------------------------------------------
# Workload expansion

# The alphabet of Kubernetes' rand.SafeEncodeString (no vowels, no look-alikes).
_ALPHANUMS = "bcdfghjklmnpqrstvwxz2456789"
_SUFFIX_LEN = 5
_SUFFIX_SPACE = len(_ALPHANUMS) ** _SUFFIX_LEN  # 27**5 = 3**15
_SUFFIX_STRIDE = 7_368_787  # not a multiple of 3, so i -> i*stride is a bijection mod 27**5
_UID_NAMESPACE = uuid.UUID("5d0c5a4e-6f1b-4f8e-9b9a-2f4c6e0d7a11")


def _fnv32a(data: str) -> int:
    value = 0x811C9DC5
    for byte in data.encode():
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value


def _safe_encode(text: str) -> str:
    return "".join(_ALPHANUMS[ord(char) % len(_ALPHANUMS)] for char in text)


_PAIRS = [x + y for y in _ALPHANUMS for x in _ALPHANUMS]  # index v -> base-27 digits, low first


def _suffixes(seed: str, count: int) -> list[str]:
    """``count`` distinct, deterministic, random-looking 5-character suffixes for ``seed``.

    Index i maps to (offset + i * stride) mod 27**5, a bijection, so suffixes never repeat
    within one owner.
    """
    offset = _fnv32a(seed) % _SUFFIX_SPACE
    pairs = _PAIRS
    alphanums = _ALPHANUMS
    out: list[str] = []
    append = out.append
    value = offset
    for index in range(count):
        suffix = pairs[value % 729] + pairs[(value // 729) % 729] + alphanums[value // 531441]
        if index >= _SUFFIX_SPACE:  # pragma: no cover - more than 14 million replicas
            suffix += str(index // _SUFFIX_SPACE)
        append(suffix)
        value = (value + _SUFFIX_STRIDE) % _SUFFIX_SPACE
    return out


def _template_hash(template: PodTemplateSpec) -> str:
    """A stable pod-template-hash, in the style of the Deployment controller's (FNV-32a, safe-encoded)."""
    data = json.dumps(
        template.model_dump(mode="json", by_alias=True, exclude_none=True),
        sort_keys=True,
        separators=(",", ":"),
    )
    return _safe_encode(str(_fnv32a(data)))


def _uid(kind: str, namespace: str, name: str) -> str:
    return str(uuid.uuid5(_UID_NAMESPACE, f"{kind}/{namespace}/{name}"))


_new_object = object.__new__
_set = object.__setattr__


def _clone(model: ModelT, fields_set: set[str], **changes: Any) -> ModelT:
    """A shallow copy of a validated model with ``changes`` applied, without re-validation.

    Equivalent to ``model.model_copy(update=changes)`` for already-valid values, but cheaper;
    ``fields_set`` is shared between clones (nobody mutates it).
    """
    clone: ModelT = _new_object(model.__class__)
    values = model.__dict__.copy()
    values.update(changes)
    _set(clone, "__dict__", values)
    _set(clone, "__pydantic_fields_set__", fields_set)
    _set(clone, "__pydantic_extra__", model.__pydantic_extra__)
    _set(clone, "__pydantic_private__", model.__pydantic_private__)
    return clone


def _expand(
    *,
    template: PodTemplateSpec,
    namespace: str,
    names: Iterable[str],
    owner: OwnerReference,
    extra_labels: Mapping[str, str],
    per_pod_labels: Iterable[Mapping[str, str]] | None = None,
    per_pod_specs: Iterable[PodSpec] | None = None,
) -> list[Pod]:
    labels = {**(template.metadata.labels or {}), **extra_labels}
    base_meta = ObjectMeta(
        name="placeholder",
        namespace=namespace,
        labels=labels,
        annotations=dict(template.metadata.annotations) if template.metadata.annotations else None,
        owner_references=[owner],
    )
    base_pod = Pod(metadata=base_meta, spec=template.spec, status=PodStatus(phase="Pending"))
    meta_fields = set(base_meta.__pydantic_fields_set__)
    pod_fields = set(base_pod.__pydantic_fields_set__)
    names = list(names)
    label_iter = iter(per_pod_labels) if per_pod_labels is not None else None
    spec_iter = iter(per_pod_specs) if per_pod_specs is not None else None
    pods: list[Pod] = []
    append = pods.append
    # Hundreds of thousands of acyclic objects: cyclic GC passes would only double the time.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        if label_iter is None and spec_iter is None:
            for name in names:
                append(_clone(base_pod, pod_fields, metadata=_clone(base_meta, meta_fields, name=name)))
            return pods
        for name in names:
            meta_changes: dict[str, Any] = {"name": name}
            if label_iter is not None:
                meta_changes["labels"] = {**labels, **next(label_iter)}
            metadata = _clone(base_meta, meta_fields, **meta_changes)
            spec = next(spec_iter) if spec_iter is not None else base_pod.spec
            append(_clone(base_pod, pod_fields, metadata=metadata, spec=spec))
        return pods
    finally:
        if gc_was_enabled:
            gc.enable()


def workload_pod_count(obj: Pod | Workload) -> int:
    """How many pods ``expand_workload`` returns for ``obj`` (without building them)."""
    if isinstance(obj, Pod):
        return 1
    if isinstance(obj, Job):
        spec = obj.spec
        return spec.parallelism if spec.completions is None else min(spec.parallelism, spec.completions)
    return obj.spec.replicas


def statefulset_claims(sts: StatefulSet) -> list[PersistentVolumeClaim]:
    """The PersistentVolumeClaims the StatefulSet controller creates: "<template>-<sts>-<ordinal>"."""
    namespace = sts.metadata.namespace or "default"
    name = sts.metadata.name or ""
    claims: list[PersistentVolumeClaim] = []
    for ordinal in range(sts.spec.replicas):
        pod_name = f"{name}-{ordinal}"
        for template in sts.spec.volume_claim_templates:
            labels = {**(sts.spec.template.metadata.labels or {}), **(template.metadata.labels or {})}
            metadata = template.metadata.model_copy(
                update={
                    "name": f"{template.metadata.name}-{pod_name}",
                    "namespace": namespace,
                    "labels": labels or None,
                }
            )
            claims.append(template.model_copy(update={"metadata": metadata, "status": PersistentVolumeClaimStatus()}))
    return claims


def _statefulset_specs(sts: StatefulSet, pod_names: list[str]) -> list[PodSpec] | None:
    templates = sts.spec.volume_claim_templates
    if not templates:
        return None
    spec = sts.spec.template.spec
    claimed = {template.metadata.name for template in templates}
    kept = tuple(volume for volume in spec.volumes if volume.name not in claimed)
    specs: list[PodSpec] = []
    fields_set = set(spec.__pydantic_fields_set__) | {"volumes"}
    for pod_name in pod_names:
        claims = tuple(
            Volume(
                name=template.metadata.name or "",
                persistent_volume_claim=PersistentVolumeClaimVolumeSource(
                    claim_name=f"{template.metadata.name}-{pod_name}"
                ),
            )
            for template in templates
        )
        specs.append(_clone(spec, fields_set, volumes=kept + claims))
    return specs


def daemon_set_pod(ds: DaemonSet) -> Pod:
    """The pod a DaemonSet would run on one node (for daemon overhead), phase Pending."""
    namespace = ds.metadata.namespace or "default"
    name = ds.metadata.name or ""
    owner = OwnerReference(
        api_version="apps/v1",
        kind="DaemonSet",
        name=name,
        uid=ds.metadata.uid or _uid("DaemonSet", namespace, name),
        controller=True,
        block_owner_deletion=True,
    )
    return _expand(
        template=ds.spec.template,
        namespace=namespace,
        names=[f"{name}-{_suffixes(f'DaemonSet/{namespace}/{name}', 1)[0]}"],
        owner=owner,
        extra_labels={},
    )[0]


def expand_workload(obj: Pod | Workload) -> list[Pod]:
    """The pods the workload's controller would create, deterministically.

    - Pod: itself.
    - Deployment: ``<name>-<pod-template-hash>-<5 chars>``, owned by the ReplicaSet
      ``<name>-<pod-template-hash>``, labelled ``pod-template-hash``.
    - ReplicaSet: ``<name>-<5 chars>``.
    - StatefulSet: ``<name>-<ordinal>``, with the pod-name / pod-index labels and one
      claim volume ``<template>-<pod>`` per volumeClaimTemplate.
    - Job: ``<name>-<5 chars>`` (Indexed: ``<name>-<index>-<5 chars>``), min(parallelism,
      completions) pods, with the job-name labels.

    DaemonSets are not expanded (their pods follow nodes): use ``daemon_set_pod``.
    """
    if isinstance(obj, Pod):
        return [obj]
    if isinstance(obj, DaemonSet):
        raise TypeError("DaemonSet pods follow nodes and are not expanded; use daemon_set_pod()")
    namespace = obj.metadata.namespace or "default"
    name = obj.metadata.name or ""
    count = workload_pod_count(obj)
    if isinstance(obj, Deployment):
        return _deployment_pods(obj, namespace, name, count)
    uid = obj.metadata.uid or _uid(obj.kind, namespace, name)
    api_version = "batch/v1" if isinstance(obj, Job) else "apps/v1"
    owner = OwnerReference(
        api_version=api_version, kind=obj.kind, name=name, uid=uid, controller=True, block_owner_deletion=True
    )
    if isinstance(obj, ReplicaSet):
        return _expand(
            template=obj.spec.template,
            namespace=namespace,
            names=[f"{name}-{s}" for s in _suffixes(f"ReplicaSet/{namespace}/{name}", count)],
            owner=owner,
            extra_labels={},
        )
    if isinstance(obj, StatefulSet):
        return _statefulset_pods(obj, namespace, name, count, owner)
    return _job_pods(obj, namespace, name, count, owner, uid)


def _deployment_pods(obj: Deployment, namespace: str, name: str, count: int) -> list[Pod]:
    """A Deployment's pods: ``<name>-<pod-template-hash>-<5 chars>``, owned by its ReplicaSet."""
    template_hash = _template_hash(obj.spec.template)
    rs_name = f"{name}-{template_hash}"
    owner = OwnerReference(
        api_version="apps/v1",
        kind="ReplicaSet",
        name=rs_name,
        uid=_uid("ReplicaSet", namespace, rs_name),
        controller=True,
        block_owner_deletion=True,
    )
    return _expand(
        template=obj.spec.template,
        namespace=namespace,
        names=[f"{rs_name}-{s}" for s in _suffixes(f"ReplicaSet/{namespace}/{rs_name}", count)],
        owner=owner,
        extra_labels={LABEL_POD_TEMPLATE_HASH: template_hash},
    )


def _statefulset_pods(obj: StatefulSet, namespace: str, name: str, count: int, owner: OwnerReference) -> list[Pod]:
    """A StatefulSet's pods: ``<name>-<ordinal>``, with their pod-name / pod-index labels and claims."""
    names = [f"{name}-{ordinal}" for ordinal in range(count)]
    return _expand(
        template=obj.spec.template,
        namespace=namespace,
        names=names,
        owner=owner,
        extra_labels={},
        per_pod_labels=(
            {LABEL_STATEFULSET_POD_NAME: pod_name, LABEL_POD_INDEX: str(ordinal)}
            for ordinal, pod_name in enumerate(names)
        ),
        per_pod_specs=_statefulset_specs(obj, names),
    )


def _job_pods(obj: Job, namespace: str, name: str, count: int, owner: OwnerReference, uid: str) -> list[Pod]:
    """A Job's pods: ``<name>-<5 chars>`` (Indexed: ``<name>-<index>-<5 chars>``), with the job-name labels."""
    suffixes = _suffixes(f"Job/{namespace}/{name}", count)
    job_labels = {
        LABEL_JOB_NAME: name,
        LABEL_JOB_NAME_LEGACY: name,
        LABEL_JOB_CONTROLLER_UID: uid,
        LABEL_JOB_CONTROLLER_UID_LEGACY: uid,
    }
    if obj.spec.completion_mode == "Indexed":
        return _expand(
            template=obj.spec.template,
            namespace=namespace,
            names=[f"{name}-{index}-{suffix}" for index, suffix in enumerate(suffixes)],
            owner=owner,
            extra_labels=job_labels,
            per_pod_labels=({LABEL_JOB_COMPLETION_INDEX: str(index)} for index in range(count)),
        )
    return _expand(
        template=obj.spec.template,
        namespace=namespace,
        names=[f"{name}-{suffix}" for suffix in suffixes],
        owner=owner,
        extra_labels=job_labels,
    )
