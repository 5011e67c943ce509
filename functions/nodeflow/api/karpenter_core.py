"""karpenter.sh/v1 NodePool and NodeClaim.

Defaults are the ones Karpenter's CRDs apply (expireAfter 720h, consolidationPolicy
WhenEmptyOrUnderutilized, consolidateAfter 0s, budgets [{nodes: 10%}]); validation mirrors
the CRDs' OpenAPI and CEL rules plus NodePool runtime validation (restricted labels,
duplicate taints).

Must not touch: any decision about the objects (scheduling, disruption, hashing: ``template_hash``); no I/O.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from nodeflow.api.duration import parse_duration
from nodeflow.api.karpenter_common import (
    Condition,
    DurationOrNever,
    DurationString,
    ResourceList,
    StatusModel,
    restricted_label_error,
)
from nodeflow.api.labels import GROUP
from nodeflow.api.meta import (
    KubeModel,
    ObjectMeta,
    Taint,
    is_dns1123_subdomain,
    label_key_error,
    label_value_error,
)

__all__ = [
    "API_VERSION",
    "Budget",
    "ConsolidationPolicy",
    "Disruption",
    "DisruptionReason",
    "NodeClaim",
    "NodeClaimSpec",
    "NodeClaimStatus",
    "NodeClaimTemplate",
    "NodeClaimTemplateMetadata",
    "NodeClaimTemplateSpec",
    "NodeClassReference",
    "NodePool",
    "NodePoolSpec",
    "NodePoolStatus",
    "NodeSelectorRequirementWithMinValues",
    "RequirementOperator",
    "ResourceRequirements",
]

API_VERSION = f"{GROUP}/v1"

RequirementOperator = Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte"]
ConsolidationPolicy = Literal["WhenEmpty", "WhenEmptyOrUnderutilized", "Balanced"]
DisruptionReason = Literal["Underutilized", "Empty", "Drifted"]

MAX_REQUIREMENTS = 100
MAX_BUDGETS = 50
MAX_TEMPLATE_LABELS = 100
_NUMERIC_OPERATORS = frozenset({"Gt", "Lt", "Gte", "Lte"})

_BUDGET_NODES = re.compile(r"^((100|[0-9]{1,2})%|[0-9]+)$")
_BUDGET_DURATION = re.compile(r"^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$")
_CRON_MACRO = re.compile(r"^@(annually|yearly|monthly|weekly|daily|midnight|hourly)$")
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_WEEKDAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_CRON_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}),
    ("month", 1, 12, {m: i + 1 for i, m in enumerate(_MONTHS)}),
    ("day of week", 0, 6, {d: i for i, d in enumerate(_WEEKDAYS)}),
)


# ---------------------------------------------------------------------------------------------
# Requirements, taints, references


class NodeSelectorRequirementWithMinValues(KubeModel):
    """A node selector requirement plus ``minValues`` (the flexibility Karpenter must keep)."""

    key: str = Field(max_length=316)
    operator: RequirementOperator
    values: list[str] | None = None
    min_values: int | None = Field(default=None, ge=1, le=50)

    @model_validator(mode="after")
    def _rules(self) -> NodeSelectorRequirementWithMinValues:
        error = label_key_error(self.key)
        if error:
            raise ValueError(f"key: {error}")
        values = self.values or []
        op = self.operator
        if op == "In" and not values:
            raise ValueError("values: operator In requires at least one value")
        if op in ("Exists", "DoesNotExist") and values:
            raise ValueError(f"values: operator {op} must not have values")
        if op in _NUMERIC_OPERATORS and (len(values) != 1 or not values[0].isdigit()):
            raise ValueError(f"values: operator {op} requires exactly one value, a non-negative integer")
        for i, value in enumerate(values):
            error = label_value_error(value)
            if error:
                raise ValueError(f"values[{i}]: {error}")
        if self.min_values is not None:
            if op == "DoesNotExist":
                raise ValueError("minValues: minValues cannot be used with operator DoesNotExist")
            if op == "In" and len(values) < self.min_values:
                raise ValueError(
                    f"minValues: requirements with 'minValues' ({self.min_values}) must have at least "
                    f"that many values specified in the 'values' field (got {len(values)})"
                )
        return self


class NodeClassReference(KubeModel):
    """Reference to the provider's node class (group, kind and name are all required)."""

    group: str
    kind: str
    name: str

    @field_validator("group")
    @classmethod
    def _group(cls, value: str) -> str:
        if not value:
            raise ValueError("group may not be empty")
        if "/" in value:
            raise ValueError(f"group {value!r} must not contain '/' (use the API group, e.g. karpenter.k8s.aws)")
        return value

    @field_validator("kind")
    @classmethod
    def _kind(cls, value: str) -> str:
        if not value:
            raise ValueError("kind may not be empty")
        return value

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not value:
            raise ValueError("name may not be empty")
        return value


def _check_taint_lists(taints: list[Taint] | None, startup: list[Taint] | None) -> None:
    """Karpenter rejects duplicate key/effect pairs across taints and startupTaints."""
    seen: set[tuple[str, str]] = set()
    for field, items in (("taints", taints or []), ("startupTaints", startup or [])):
        for i, taint in enumerate(items):
            pair = (taint.key, taint.effect)
            if pair in seen:
                raise ValueError(f"{field}[{i}]: duplicate taint Key/Effect pair {taint.key}={taint.effect}")
            seen.add(pair)


def _duration_seconds(value: str | None, saturate: bool = False) -> float | None:
    return None if value is None else parse_duration(value, saturate)


def _in_go_range(value: str | None) -> str | None:
    """``value`` (a duration the field's pattern admitted) when Go can hold it (at most 2562047h): Karpenter could not
    read a longer one, and nodeflow refuses the NodePool (its ValidationSucceeded condition names the field)."""
    _duration_seconds(value)
    return value


# ---------------------------------------------------------------------------------------------
# NodePool


class NodeClaimTemplateMetadata(KubeModel):
    """``spec.template.metadata``: labels and annotations put on the NodeClaims and nodes."""

    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None

    @field_validator("labels")
    @classmethod
    def _labels(cls, labels: dict[str, str] | None) -> dict[str, str] | None:
        if labels is None:
            return None
        if len(labels) > MAX_TEMPLATE_LABELS:
            raise ValueError(f"at most {MAX_TEMPLATE_LABELS} labels are allowed, got {len(labels)}")
        for key, value in labels.items():
            error = label_key_error(key) or restricted_label_error(key) or label_value_error(value)
            if error:
                raise ValueError(f"[{key}]: {error}")
        return labels


class NodeClaimTemplateSpec(KubeModel):
    """``spec.template.spec`` of a NodePool."""

    taints: list[Taint] | None = None
    startup_taints: list[Taint] | None = None
    requirements: list[NodeSelectorRequirementWithMinValues] = Field(max_length=MAX_REQUIREMENTS)
    node_class_ref: NodeClassReference
    termination_grace_period: DurationString | None = None
    expire_after: DurationOrNever = "720h"

    @field_validator("requirements")
    @classmethod
    def _restricted(
        cls, requirements: list[NodeSelectorRequirementWithMinValues]
    ) -> list[NodeSelectorRequirementWithMinValues]:
        for i, requirement in enumerate(requirements):
            error = restricted_label_error(requirement.key)
            if error:
                raise ValueError(f"[{i}].key: {error}")
        return requirements

    @field_validator("termination_grace_period", "expire_after")
    @classmethod
    def _go_range(cls, value: str | None) -> str | None:
        return _in_go_range(value)

    @model_validator(mode="after")
    def _taints(self) -> NodeClaimTemplateSpec:
        _check_taint_lists(self.taints, self.startup_taints)
        return self

    @property
    def expire_after_seconds(self) -> float | None:
        """``expireAfter`` in seconds; None means Never."""
        return parse_duration(self.expire_after)

    @property
    def termination_grace_period_seconds(self) -> float | None:
        """``terminationGracePeriod`` in seconds; None when unset (wait indefinitely)."""
        return _duration_seconds(self.termination_grace_period)


class NodeClaimTemplate(KubeModel):
    """``spec.template`` of a NodePool."""

    metadata: NodeClaimTemplateMetadata = Field(default_factory=NodeClaimTemplateMetadata)
    spec: NodeClaimTemplateSpec


def _budget_nodes(value: Any) -> Any:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


class Budget(KubeModel):
    """A disruption budget: at most ``nodes`` disrupted at once, optionally on a schedule."""

    reasons: list[DisruptionReason] | None = Field(default=None, max_length=50)
    nodes: Annotated[str, BeforeValidator(_budget_nodes)] = "10%"
    schedule: str | None = None
    duration: str | None = None

    @field_validator("nodes")
    @classmethod
    def _nodes(cls, value: str) -> str:
        if not _BUDGET_NODES.match(value):
            raise ValueError(f"{value!r} must be a non-negative integer or a percentage 0%-100% (e.g. 5, 10%)")
        return value

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, value: str | None) -> str | None:
        if value is None:
            return None
        error = cron_error(value)
        if error:
            raise ValueError(error)
        return value

    @field_validator("duration")
    @classmethod
    def _duration(cls, value: str | None) -> str | None:
        if value is not None and not _BUDGET_DURATION.match(value):
            raise ValueError(f"{value!r} must be a duration of hours and/or minutes only (e.g. 10m, 8h, 1h30m)")
        return _in_go_range(value)

    @model_validator(mode="after")
    def _together(self) -> Budget:
        if (self.schedule is None) != (self.duration is None):
            missing = "duration" if self.duration is None else "schedule"
            raise ValueError(f"{missing}: 'schedule' must be set with 'duration'")
        return self

    @property
    def duration_seconds(self) -> float | None:
        return _duration_seconds(self.duration)

    def allowed_disruptions(self, num_nodes: int) -> int:
        """How many of ``num_nodes`` this budget allows to be disrupted (percentages round up)."""
        if self.nodes.endswith("%"):
            return math.ceil(int(self.nodes[:-1]) * num_nodes / 100)
        return int(self.nodes)

    def applies_to(self, reason: str) -> bool:
        """True when the budget covers disruption ``reason`` (all reasons when unset)."""
        return self.reasons is None or reason in self.reasons


def cron_error(schedule: str) -> str | None:
    """Why ``schedule`` is not a standard cron expression (5 fields or @macro), or None."""
    if _CRON_MACRO.match(schedule):
        return None
    fields = schedule.split()
    if len(fields) != 5:
        return (
            f"schedule {schedule!r} must be a cron expression with 5 fields "
            "(minute hour day-of-month month day-of-week) or one of @yearly, @annually, @monthly, "
            "@weekly, @daily, @midnight, @hourly"
        )
    for text, (name, low, high, names) in zip(fields, _CRON_FIELDS, strict=True):
        for part in text.split(","):
            error = _cron_part_error(part, low, high, names, allow_question=name.startswith("day"))
            if error:
                return f"schedule {schedule!r}: invalid {name} field {text!r}: {error}"
    return None


def _cron_part_error(part: str, low: int, high: int, names: dict[str, int], *, allow_question: bool) -> str | None:
    rng, slash, step = part.partition("/")
    if slash and (not step.isdigit() or int(step) == 0):
        return f"invalid step {step!r}"
    if rng in ("*",) or (allow_question and rng == "?"):
        return None

    def number(token: str) -> int | None:
        if token.isdigit():
            return int(token)
        return names.get(token.upper())

    start_text, dash, end_text = rng.partition("-")
    start = number(start_text)
    end = number(end_text) if dash else start
    if start is None or end is None:
        return f"{rng!r} is not a number or name"
    if not low <= start <= high or not low <= end <= high:
        return f"{rng!r} is out of range {low}-{high}"
    if start > end:
        return f"{rng!r}: beginning of range is after the end"
    return None


def _default_budgets() -> list[Budget]:
    return [Budget(nodes="10%")]


class Disruption(KubeModel):
    """``spec.disruption`` of a NodePool."""

    consolidate_after: DurationOrNever = "0s"
    consolidation_policy: ConsolidationPolicy = "WhenEmptyOrUnderutilized"
    budgets: list[Budget] = Field(default_factory=_default_budgets, max_length=MAX_BUDGETS)

    @field_validator("consolidate_after")
    @classmethod
    def _go_range(cls, value: str) -> str:
        _in_go_range(value)
        return value

    @property
    def consolidate_after_seconds(self) -> float | None:
        """``consolidateAfter`` in seconds; None means Never (no consolidation)."""
        return parse_duration(self.consolidate_after)


class NodePoolSpec(KubeModel):
    """``spec`` of a NodePool."""

    template: NodeClaimTemplate
    disruption: Disruption = Field(default_factory=Disruption)
    limits: ResourceList | None = None
    weight: int | None = Field(default=None, ge=1, le=100)
    replicas: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _static(self) -> NodePoolSpec:
        if self.replicas is not None:
            if self.limits and set(self.limits) != {"nodes"}:
                raise ValueError("limits: only 'limits.nodes' is supported on static NodePools (replicas set)")
            if self.weight is not None:
                raise ValueError("weight: 'weight' is not supported on static NodePools (replicas set)")
        return self


class NodePoolStatus(StatusModel):
    """``status`` of a NodePool (written by the controller)."""

    resources: ResourceList | None = None
    conditions: list[Condition] | None = None
    node_class_observed_generation: int | None = None
    nodes: int | None = None


class NodePool(KubeModel):
    """karpenter.sh/v1 NodePool."""

    api_version: Literal["karpenter.sh/v1"] = "karpenter.sh/v1"
    kind: Literal["NodePool"] = "NodePool"
    metadata: ObjectMeta
    spec: NodePoolSpec
    status: NodePoolStatus | None = None

    @model_validator(mode="after")
    def _name(self) -> NodePool:
        _check_name(self.metadata, require=True)
        if len(self.name) > 63:  # every node carries it as a label value
            raise ValueError(
                f"metadata.name: {len(self.name)} characters; a NodePool's name is the value of the "
                "karpenter.sh/nodepool label on its nodes, so at most 63"
            )
        return self

    @property
    def name(self) -> str:
        return self.metadata.name or ""

    @property
    def weight(self) -> int:
        """Scheduling priority; an unset weight counts as 0."""
        return self.spec.weight or 0

    @property
    def labels(self) -> dict[str, str]:
        """The template labels (copied onto every node of this NodePool)."""
        return dict(self.spec.template.metadata.labels or {})


def _check_name(metadata: ObjectMeta, *, require: bool) -> None:
    if metadata.name is None:
        if require or not metadata.generate_name:
            raise ValueError("metadata.name: name is required")
        return
    if not is_dns1123_subdomain(metadata.name):
        raise ValueError(
            f"metadata.name: {metadata.name!r} must be a lowercase RFC 1123 subdomain "
            "(lowercase alphanumerics, '-' and '.', at most 253 characters)"
        )


# ---------------------------------------------------------------------------------------------
# NodeClaim


class ResourceRequirements(KubeModel):
    """``spec.resources`` of a NodeClaim (requests only)."""

    requests: ResourceList | None = None


class NodeClaimSpec(KubeModel):
    """``spec`` of a NodeClaim."""

    taints: list[Taint] | None = None
    startup_taints: list[Taint] | None = None
    requirements: list[NodeSelectorRequirementWithMinValues] = Field(max_length=MAX_REQUIREMENTS)
    resources: ResourceRequirements | None = None
    node_class_ref: NodeClassReference
    termination_grace_period: DurationString | None = None
    expire_after: DurationOrNever = "720h"

    @model_validator(mode="after")
    def _taints(self) -> NodeClaimSpec:
        _check_taint_lists(self.taints, self.startup_taints)
        return self

    # A NodeClaim is read whatever its durations (dropping it would orphan its instance): one longer than Go can hold
    # (a NodeClaim made before its NodePool was refused for it) counts as the longest Go can.
    @property
    def expire_after_seconds(self) -> float | None:
        return parse_duration(self.expire_after, saturate=True)

    @property
    def termination_grace_period_seconds(self) -> float | None:
        return _duration_seconds(self.termination_grace_period, saturate=True)


class NodeClaimStatus(StatusModel):
    """``status`` of a NodeClaim (written by the controller)."""

    node_name: str | None = None
    provider_id: str | None = Field(default=None, alias="providerID")
    image_id: str | None = Field(default=None, alias="imageID")
    capacity: ResourceList | None = None
    allocatable: ResourceList | None = None
    conditions: list[Condition] | None = None
    last_pod_event_time: datetime | None = None

    def condition(self, type_: str) -> Condition | None:
        """The condition of type ``type_``, if present."""
        return next((c for c in self.conditions or [] if c.type == type_), None)


class NodeClaim(KubeModel):
    """karpenter.sh/v1 NodeClaim."""

    api_version: Literal["karpenter.sh/v1"] = "karpenter.sh/v1"
    kind: Literal["NodeClaim"] = "NodeClaim"
    metadata: ObjectMeta
    spec: NodeClaimSpec
    status: NodeClaimStatus | None = None

    @model_validator(mode="after")
    def _name(self) -> NodeClaim:
        _check_name(self.metadata, require=False)
        return self

    @property
    def name(self) -> str:
        return self.metadata.name or ""
