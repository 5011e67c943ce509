"""Shared Kubernetes core/v1 and meta/v1 models: ObjectMeta, Taint, Toleration, NodeSelectorRequirement.

Used by both the Karpenter kinds (``nodeflow.api.karpenter``) and the core/v1 Pod models.
Attribute names are snake_case; aliases are the exact Kubernetes camelCase names, and
both are accepted on input. Dump with ``model_dump(by_alias=True, exclude_none=True)``
to get a manifest dict back.

Must not touch: any decision about the objects; no I/O.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

__all__ = [
    "KubeModel",
    "ListMeta",
    "NodeSelectorOperator",
    "NodeSelectorRequirement",
    "ObjectMeta",
    "OwnerReference",
    "Taint",
    "TaintEffect",
    "Toleration",
    "TolerationOperator",
    "check_label_key",
    "check_label_value",
    "check_qualified_name",
    "is_dns1123_subdomain",
    "label_key_error",
    "label_value_error",
]

TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
TolerationOperator = Literal["Exists", "Equal"]
NodeSelectorOperator = Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]

_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"^{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*$")


class KubeModel(BaseModel):
    """Base for Kubernetes spec models: camelCase aliases, unknown fields rejected, immutable."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
    )


def is_dns1123_subdomain(value: str) -> bool:
    """True for a lowercase RFC 1123 subdomain of at most 253 characters."""
    return 0 < len(value) <= 253 and _DNS1123_SUBDOMAIN.match(value) is not None


def label_key_error(key: str) -> str | None:
    """Why ``key`` is not a qualified name (``[prefix/]name``), or None when it is valid."""
    if not key:
        return "key must not be empty"
    prefix, slash, name = key.rpartition("/")
    if slash and not prefix:
        return f"key {key!r}: prefix part must be non-empty"
    if prefix and not is_dns1123_subdomain(prefix):
        return (
            f"key {key!r}: prefix part must be a lowercase RFC 1123 subdomain of at most 253 characters "
            "(e.g. 'example.com')"
        )
    if "/" in prefix:
        return f"key {key!r}: a qualified name may contain at most one '/'"
    if len(name) > 63:
        return f"key {key!r}: name part must be no more than 63 characters"
    if not _NAME.match(name):
        return (
            f"key {key!r}: name part must consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character"
        )
    return None


def label_value_error(value: str) -> str | None:
    """Why ``value`` is not a valid label value, or None when it is valid ("" is valid)."""
    if value == "":
        return None
    if len(value) > 63:
        return f"value {value!r}: must be no more than 63 characters"
    if not _NAME.match(value):
        return (
            f"value {value!r}: must be empty or consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character"
        )
    return None


def check_qualified_name(key: str) -> str:
    """Validator: raise ValueError unless ``key`` is a qualified name; return it."""
    error = label_key_error(key)
    if error:
        raise ValueError(error)
    return key


check_label_key = check_qualified_name


def check_label_value(value: str) -> str:
    """Validator: raise ValueError unless ``value`` is a valid label value; return it."""
    error = label_value_error(value)
    if error:
        raise ValueError(error)
    return value


class OwnerReference(BaseModel):
    """metav1.OwnerReference."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow", frozen=True)

    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(BaseModel):
    """metav1.ObjectMeta (the fields nodeflow reads; anything else is kept as extra)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow", frozen=True)

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: datetime | None = None
    deletion_timestamp: datetime | None = None
    deletion_grace_period_seconds: int | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    finalizers: list[str] | None = None
    owner_references: list[OwnerReference] | None = None

    def label(self, key: str, default: str | None = None) -> str | None:
        """The value of label ``key`` (``default`` when absent)."""
        return (self.labels or {}).get(key, default)

    def annotation(self, key: str, default: str | None = None) -> str | None:
        """The value of annotation ``key`` (``default`` when absent)."""
        return (self.annotations or {}).get(key, default)


class ListMeta(BaseModel):
    """metav1.ListMeta."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow", frozen=True)

    resource_version: str | None = None
    continue_: str | None = Field(default=None, alias="continue")


class Taint(KubeModel):
    """core/v1 Taint."""

    key: str
    value: str | None = None
    effect: TaintEffect
    time_added: datetime | None = None

    @field_validator("key")
    @classmethod
    def _key(cls, key: str) -> str:
        return check_qualified_name(key)

    @field_validator("value")
    @classmethod
    def _value(cls, value: str | None) -> str | None:
        # Kubernetes wants a label value; Karpenter's CRDs also accept a qualified name ("a.b/c").
        if value is None or label_value_error(value) is None or label_key_error(value) is None:
            return value
        return check_label_value(value)

    def matches(self, other: Taint) -> bool:
        """Same key and effect (Kubernetes' Taint.MatchTaint)."""
        return self.key == other.key and self.effect == other.effect


class Toleration(KubeModel):
    """core/v1 Toleration. Empty operator means Equal; empty effect matches every effect."""

    key: str | None = None
    operator: Literal["Exists", "Equal", ""] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute", ""] | None = None
    toleration_seconds: int | None = None

    @model_validator(mode="after")
    def _rules(self) -> Toleration:
        if self.key:
            check_qualified_name(self.key)
        if not self.key and self.operator != "Exists":
            raise ValueError("operator: operator must be Exists when key is empty")
        if self.operator == "Exists" and self.value:
            raise ValueError("value: value must be empty when operator is Exists")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError("effect: effect must be NoExecute when tolerationSeconds is set")
        return self

    def tolerates(self, taint: Taint) -> bool:
        """True when this toleration tolerates ``taint`` (Kubernetes' ToleratesTaint)."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return (self.value or "") == (taint.value or "")


class NodeSelectorRequirement(KubeModel):
    """core/v1 NodeSelectorRequirement (node affinity terms)."""

    key: str
    operator: NodeSelectorOperator
    values: list[str] | None = None

    @model_validator(mode="after")
    def _rules(self) -> NodeSelectorRequirement:
        check_qualified_name(self.key)
        values = self.values or []
        if self.operator in ("In", "NotIn") and not values:
            raise ValueError(f"values: operator {self.operator} requires at least one value")
        if self.operator in ("Exists", "DoesNotExist") and values:
            raise ValueError(f"values: operator {self.operator} must not have values")
        if self.operator in ("Gt", "Lt"):
            if len(values) != 1:
                raise ValueError(f"values: operator {self.operator} requires exactly one value")
            try:
                int(values[0])
            except ValueError:
                raise ValueError(
                    f"values: operator {self.operator} requires an integer value, got {values[0]!r}"
                ) from None
        return self
