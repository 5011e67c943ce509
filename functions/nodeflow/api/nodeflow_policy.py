"""nodeflow.io/v1alpha1 NodeflowPolicy: who may create which capacity, how much it may cost, and when
provisioning or voluntary disruption is paused. Cluster-scoped; written by a platform team and reviewed in Git.

A policy has five optional parts (``spec``):

- ``nodePoolAccess``: NodePools only some namespaces (by name and/or ``namespaceSelector``) may create
  capacity in;
- ``resourceAccess``: extended resources (e.g. ``nvidia.com/gpu``) only some namespaces may request;
- ``costCeilings``: $/hour ceilings for the whole cluster, per NodePool and per namespace;
- ``limits``: cpu / memory / nodes (any resource) limits shared by a group of NodePools;
- ``pauses``: windows (cron, UTC, and a duration) in which provisioning and/or voluntary disruption stop.

How several policies combine (the most restrictive wins) is ``nodeflow.governance.policy``'s; the model only
checks that each policy is well formed, naming the field of any problem.

Must not touch: what a policy allows or refuses (``nodeflow.governance.policy``); no I/O.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Literal

from pydantic import Field, field_validator, model_validator

from nodeflow.api.core import LabelSelector
from nodeflow.api.karpenter_common import ResourceList
from nodeflow.api.karpenter_core import cron_error
from nodeflow.api.meta import KubeModel, ObjectMeta, is_dns1123_subdomain, label_key_error
from nodeflow.api.pool_names import EVERY

__all__ = [
    "POLICY_API_VERSION",
    "POLICY_GROUP",
    "POLICY_KIND",
    "CostCeiling",
    "CostCeilings",
    "GroupLimit",
    "NamedCostCeiling",
    "NodePoolAccess",
    "NodeflowPolicy",
    "NodeflowPolicySpec",
    "PauseWindow",
    "ResourceAccess",
    "pause_duration",
]

POLICY_GROUP = "nodeflow.io"
POLICY_API_VERSION = f"{POLICY_GROUP}/v1alpha1"
POLICY_KIND = "NodeflowPolicy"
# Resources every pod requests: access to them is not something a policy can restrict.
BASE_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage", "pods"})
PRICE_PATTERN = r"^\d+(\.\d+)?$"
# A pause window's duration: hours and/or minutes ("90m", "60h", "1h30m"), as a budget's, at most MAX_PAUSE. The
# pattern caps the digits (6 of hours, 7 of minutes) so that the CRD's CEL rule can parse any admitted value as a Go
# duration (at most 2562047h) and compare it with MAX_PAUSE.
PAUSE_DURATION_PATTERN = r"^([0-9]{1,6}h|[0-9]{1,7}m|[0-9]{1,6}h[0-9]{1,7}m)$"
# The longest pause window: 366 days (a leap year). A window is open for its duration after each time its schedule
# fires, so nodeflow looks back at most this far for the opening (the cost of judging a window does not grow with
# it); every schedule that fires at all fires within a year, bar a leap-day one.
MAX_PAUSE_HOURS = 8784
MAX_PAUSE = timedelta(hours=MAX_PAUSE_HOURS)
_PRICE = re.compile(PRICE_PATTERN, re.ASCII)
_PAUSE_DURATION = re.compile(PAUSE_DURATION_PATTERN, re.ASCII)
_HOURS_MINUTES = re.compile(r"(?:([0-9]+)h)?(?:([0-9]+)m)?", re.ASCII)
MAX_ITEMS = 100


def pause_duration(text: str) -> timedelta:
    """A pause window's ``duration`` ("90m", "60h", "1h30m"); raises ValueError (naming the value) when it is not
    hours and/or minutes or is longer than MAX_PAUSE."""
    match = _HOURS_MINUTES.fullmatch(text)
    if not text or match is None:
        raise ValueError(f"{text!r} must be a duration of hours and/or minutes (e.g. 90m, 60h, 1h30m)")
    minutes = int(match[1] or 0) * 60 + int(match[2] or 0)
    if minutes > MAX_PAUSE_HOURS * 60:
        raise ValueError(f"{text!r} is longer than {MAX_PAUSE_HOURS}h (366 days), the longest pause window")
    if not _PAUSE_DURATION.fullmatch(text):  # leading zeros only
        raise ValueError(f"{text!r} must be written with at most 6 digits of hours and 7 of minutes")
    return timedelta(minutes=minutes)


def _names(kind: str, values: list[str]) -> list[str]:
    """``values`` when each is a valid object name (RFC 1123 subdomain) or ``*`` (every one) and none repeats."""
    seen: set[str] = set()
    for i, value in enumerate(values):
        if not is_dns1123_subdomain(value) and value != EVERY:
            raise ValueError(f"[{i}]: {value!r} is not a valid {kind} name (a lowercase RFC 1123 subdomain)")
        if value in seen:
            raise ValueError(f"[{i}]: {kind} {value!r} is listed twice")
        seen.add(value)
    return values


class _NamespaceMatch(KubeModel):
    """Namespaces by name and/or by a selector on their labels (a namespace matching either is included)."""

    namespaces: list[str] | None = Field(
        default=None, max_length=MAX_ITEMS, description="Namespace names this rule admits ('*': every namespace)."
    )
    namespace_selector: LabelSelector | None = Field(
        default=None, description="Admits every namespace whose labels match (an empty selector matches all)."
    )

    @field_validator("namespaces")
    @classmethod
    def _namespaces(cls, values: list[str] | None) -> list[str] | None:
        return None if values is None else _names("namespace", values)

    def admits(self, namespace: str, labels: dict[str, str] | None) -> bool:
        """True when ``namespace`` (with its ``labels``) is one this rule names or selects."""
        if self.namespaces and (namespace in self.namespaces or EVERY in self.namespaces):
            return True
        return self.namespace_selector is not None and self.namespace_selector.matches(labels or {})

    def describe(self) -> str:
        """The admitted namespaces in words ("ml-prod, namespaces with team=ml")."""
        parts = list(self.namespaces or ())
        selector = self.namespace_selector
        if selector is not None:
            terms = [f"{k}={v}" for k, v in sorted(selector.match_labels.items())]
            terms += [
                f"{e.key} {e.operator}" + (f" ({', '.join(e.values)})" if e.values else "")
                for e in selector.match_expressions
            ]
            parts.append(f"namespaces with {', '.join(terms)}" if terms else "every namespace")
        return ", ".join(parts) or "no namespace"


def _one_of(rule: _NamespaceMatch) -> None:
    if rule.namespaces is None and rule.namespace_selector is None:
        raise ValueError("namespaces: set 'namespaces' and/or 'namespaceSelector' (who this rule admits)")


class NodePoolAccess(_NamespaceMatch):
    """The namespaces that may create capacity in some NodePools."""

    node_pools: list[str] = Field(
        min_length=1,
        max_length=MAX_ITEMS,
        description=(
            "NodePool names only the admitted namespaces may use ('*': every NodePool, so a namespace this rule "
            "does not admit may create capacity in none)."
        ),
    )

    @field_validator("node_pools")
    @classmethod
    def _node_pools(cls, values: list[str]) -> list[str]:
        return _names("NodePool", values)

    @model_validator(mode="after")
    def _who(self) -> NodePoolAccess:
        _one_of(self)
        return self


class ResourceAccess(_NamespaceMatch):
    """The namespaces that may request some extended resources (pods of other namespaces get no capacity)."""

    resources: list[str] = Field(
        min_length=1, max_length=MAX_ITEMS, description="Extended resource names, e.g. nvidia.com/gpu."
    )

    @field_validator("resources")
    @classmethod
    def _resources(cls, values: list[str]) -> list[str]:
        for i, name in enumerate(values):
            if name == EVERY:
                raise ValueError(f"[{i}]: '*' is not allowed here: name each extended resource (e.g. nvidia.com/gpu)")
            if name in BASE_RESOURCES:
                raise ValueError(f"[{i}]: {name!r} is requested by every pod; only extended resources can be governed")
            error = label_key_error(name)
            if error:
                raise ValueError(f"[{i}]: {name!r} is not a resource name: {error}")
        if len(set(values)) != len(values):
            raise ValueError("a resource is listed twice")
        return values

    @model_validator(mode="after")
    def _who(self) -> ResourceAccess:
        _one_of(self)
        return self


class CostCeiling(KubeModel):
    """A ceiling on what running nodes cost, in $/hour."""

    max_price_per_hour: str = Field(description='Dollars per hour, an unsigned decimal (e.g. "40", "12.5").')

    @field_validator("max_price_per_hour", mode="before")
    @classmethod
    def _price(cls, value: object) -> str:
        if isinstance(value, bool) or not isinstance(value, str | int | float) or not _PRICE.fullmatch(str(value)):
            raise ValueError(f"{value!r} must be an unsigned decimal price per hour (e.g. 40, 12.5)")
        return str(value)

    @property
    def per_hour(self) -> float:
        return float(self.max_price_per_hour)


class NamedCostCeiling(CostCeiling):
    """A ceiling for one NodePool or one namespace."""

    name: str = Field(description="The NodePool or namespace name ('*' is not allowed: see costCeilings.cluster).")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if value == EVERY:
            raise ValueError(
                "'*' is not allowed here: a ceiling is for one NodePool or namespace "
                "(costCeilings.cluster caps all of them together)"
            )
        if not is_dns1123_subdomain(value):
            raise ValueError(f"{value!r} is not a valid name (a lowercase RFC 1123 subdomain)")
        return value


def _unique(items: list[NamedCostCeiling] | None, what: str) -> list[NamedCostCeiling] | None:
    names = [c.name for c in items or ()]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ValueError(f"[{i}]: {what} {name!r} has two ceilings in this policy")
    return items


class CostCeilings(KubeModel):
    """$/hour ceilings: new NodeClaims that would cross one are not created."""

    cluster: CostCeiling | None = Field(default=None, description="The whole cluster's nodes.")
    node_pools: list[NamedCostCeiling] | None = Field(
        default=None, max_length=MAX_ITEMS, description="Per NodePool: its nodes."
    )
    namespaces: list[NamedCostCeiling] | None = Field(
        default=None,
        max_length=MAX_ITEMS,
        description="Per namespace: its share of the nodes its pods run on (by CPU requests).",
    )

    @field_validator("node_pools")
    @classmethod
    def _pools(cls, items: list[NamedCostCeiling] | None) -> list[NamedCostCeiling] | None:
        return _unique(items, "NodePool")

    @field_validator("namespaces")
    @classmethod
    def _namespaces(cls, items: list[NamedCostCeiling] | None) -> list[NamedCostCeiling] | None:
        return _unique(items, "namespace")


class GroupLimit(KubeModel):
    """Limits shared by a group of NodePools (as a NodePool's spec.limits, summed over the group)."""

    name: str = Field(description="The group's name, used in messages.")
    node_pools: list[str] = Field(
        min_length=1,
        max_length=MAX_ITEMS,
        description="The NodePools of the group ('*': every NodePool, so every NodePool's nodes count against it).",
    )
    resources: ResourceList = Field(description='Resource limits, e.g. cpu: "1000", memory: 4000Gi, nodes: "50".')

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not is_dns1123_subdomain(value):
            raise ValueError(f"{value!r} is not a valid name (a lowercase RFC 1123 subdomain)")
        return value

    @field_validator("node_pools")
    @classmethod
    def _node_pools(cls, values: list[str]) -> list[str]:
        return _names("NodePool", values)

    @field_validator("resources")
    @classmethod
    def _resources(cls, value: dict[str, str]) -> dict[str, str]:
        if not value:
            raise ValueError("set at least one limit (e.g. cpu, memory, nodes)")
        return value


class PauseWindow(KubeModel):
    """A recurring window (UTC) in which provisioning and/or voluntary disruption are paused."""

    name: str = Field(description="The window's name, used in messages.")
    schedule: str = Field(description="When the window opens: cron (5 fields, UTC) or an @macro such as @daily.")
    duration: str = Field(
        description=(
            "How long it stays open after each time the schedule fires: hours and/or minutes (e.g. 90m, 60h, "
            f"1h30m), at most {MAX_PAUSE_HOURS}h (366 days, a leap year: nodeflow looks back that far for the "
            "opening)."
        )
    )
    provisioning: bool = Field(default=False, description="No new NodeClaims while open (static top-ups included).")
    disruption: bool = Field(
        default=False,
        description=(
            "No voluntary disruption while open (emptiness, consolidation, drift, static scale-down); "
            "expiration, interruption, node repair and capacity-block expiry go on."
        ),
    )
    node_pools: list[str] | None = Field(
        default=None, max_length=MAX_ITEMS, description="The NodePools paused ('*' or unset: every NodePool)."
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not is_dns1123_subdomain(value):
            raise ValueError(f"{value!r} is not a valid name (a lowercase RFC 1123 subdomain)")
        return value

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, value: str) -> str:
        error = cron_error(value)
        if error:
            raise ValueError(error)
        return value

    @field_validator("duration")
    @classmethod
    def _duration(cls, value: str) -> str:
        pause_duration(value)
        return value

    @field_validator("node_pools")
    @classmethod
    def _node_pools(cls, values: list[str] | None) -> list[str] | None:
        return None if values is None else _names("NodePool", values)

    @model_validator(mode="after")
    def _pauses_something(self) -> PauseWindow:
        if not self.provisioning and not self.disruption:
            raise ValueError("provisioning: a window must pause provisioning and/or disruption (set either true)")
        return self


class NodeflowPolicySpec(KubeModel):
    """``spec`` of a NodeflowPolicy (every part optional)."""

    node_pool_access: list[NodePoolAccess] | None = Field(default=None, max_length=MAX_ITEMS)
    resource_access: list[ResourceAccess] | None = Field(default=None, max_length=MAX_ITEMS)
    cost_ceilings: CostCeilings | None = None
    limits: list[GroupLimit] | None = Field(default=None, max_length=MAX_ITEMS)
    pauses: list[PauseWindow] | None = Field(default=None, max_length=MAX_ITEMS)

    @field_validator("limits")
    @classmethod
    def _limit_names(cls, items: list[GroupLimit] | None) -> list[GroupLimit] | None:
        names = [g.name for g in items or ()]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise ValueError(f"[{i}].name: group {name!r} is defined twice")
        return items

    @field_validator("pauses")
    @classmethod
    def _pause_names(cls, items: list[PauseWindow] | None) -> list[PauseWindow] | None:
        names = [w.name for w in items or ()]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise ValueError(f"[{i}].name: window {name!r} is defined twice")
        return items


class NodeflowPolicy(KubeModel):
    """nodeflow.io/v1alpha1 NodeflowPolicy (cluster-scoped)."""

    api_version: Literal["nodeflow.io/v1alpha1"] = "nodeflow.io/v1alpha1"
    kind: Literal["NodeflowPolicy"] = "NodeflowPolicy"
    metadata: ObjectMeta
    spec: NodeflowPolicySpec = Field(default_factory=NodeflowPolicySpec)

    @model_validator(mode="after")
    def _name(self) -> NodeflowPolicy:
        name = self.metadata.name
        if name is None:
            if not self.metadata.generate_name:
                raise ValueError("metadata.name: name is required")
        elif not is_dns1123_subdomain(name):
            raise ValueError(
                f"metadata.name: {name!r} must be a lowercase RFC 1123 subdomain "
                "(lowercase alphanumerics, '-' and '.', at most 253 characters)"
            )
        return self

    @property
    def name(self) -> str:
        return self.metadata.name or ""
