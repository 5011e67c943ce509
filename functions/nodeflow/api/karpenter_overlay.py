"""karpenter.sh/v1alpha1 NodeOverlay: price and capacity adjustments of instance types.

The model enforces what Karpenter's CRD enforces (OpenAPI patterns and CEL rules): requirement keys,
operators and values; ``priceAdjustment`` a signed absolute ("+0.5", "-1") or percentage ("+10%",
"-15%", at most "-100%") change; ``price`` an unsigned decimal; not both; ``capacity`` only extended
resources (never cpu, memory, ephemeral-storage or pods); ``weight`` 1..10000. What Karpenter checks
only when it applies an overlay (its runtime validation: qualified key names, restricted label domains)
is ``NodeOverlay.runtime_errors()``: such an overlay is accepted by the API server but not applied, and
its ValidationSucceeded condition says why.

Must not touch: which overlays match, conflict or win (``nodeflow.catalog.overlays``); no I/O.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from nodeflow.api.karpenter_common import Condition, ResourceList, StatusModel
from nodeflow.api.labels import GROUP, LABEL_HOSTNAME, LABEL_NODEPOOL, NORMALIZED_LABELS, is_restricted_label
from nodeflow.api.meta import KubeModel, ObjectMeta, is_dns1123_subdomain, label_key_error, label_value_error

__all__ = [
    "CONDITION_VALIDATION_SUCCEEDED",
    "OVERLAY_API_VERSION",
    "RESTRICTED_CAPACITY",
    "NodeOverlay",
    "NodeOverlayRequirement",
    "NodeOverlaySpec",
    "NodeOverlayStatus",
]

OVERLAY_API_VERSION = f"{GROUP}/v1alpha1"
CONDITION_VALIDATION_SUCCEEDED = "ValidationSucceeded"
RESTRICTED_CAPACITY = ("cpu", "memory", "ephemeral-storage", "pods")
MAX_OVERLAY_REQUIREMENTS = 100
MAX_OVERLAY_WEIGHT = 10000

# Karpenter's CRD patterns (ASCII digits only, whole string).
PRICE_ADJUSTMENT_PATTERN = r"^(([+-]{1}(\d*\.?\d+))|(\+{1}\d*\.?\d+%)|(^(-\d{1,2}(\.\d+)?%)$)|(-100%))$"
PRICE_PATTERN = r"^\d+(\.\d+)?$"
KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(\/))?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$"
)
VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
_PRICE_ADJUSTMENT = re.compile(PRICE_ADJUSTMENT_PATTERN, re.ASCII)
_PRICE = re.compile(PRICE_PATTERN, re.ASCII)
_KEY = re.compile(KEY_PATTERN, re.ASCII)
_VALUE = re.compile(VALUE_PATTERN, re.ASCII)
_NUMERIC_OPERATORS = frozenset({"Gt", "Lt", "Gte", "Lte"})
_KARPENTER_KEYS = frozenset({"karpenter.sh/capacity-type", LABEL_NODEPOOL})

OverlayOperator = Literal["Gte", "Lte", "In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]


def _non_negative_int(text: str) -> bool:
    try:
        return int(text.strip()) >= 0
    except ValueError:
        return False


class NodeOverlayRequirement(KubeModel):
    """A node selector requirement of a NodeOverlay (key, operator, values; no minValues)."""

    key: str = Field(max_length=316)
    operator: OverlayOperator
    values: list[str] | None = None

    @field_validator("key")
    @classmethod
    def _key(cls, key: str) -> str:
        if not _KEY.fullmatch(key):
            raise ValueError(f"{key!r} is not a valid label key ([prefix/]name: alphanumerics, '-', '_', '.')")
        if key not in _KARPENTER_KEYS and key.split("/", 1)[0].endswith(GROUP) and "/" in key:
            raise ValueError(f'label domain "{GROUP}" is restricted (label {key!r})')
        if key == LABEL_HOSTNAME:
            raise ValueError(f'label "{LABEL_HOSTNAME}" is restricted')
        return key

    @field_validator("values")
    @classmethod
    def _values(cls, values: list[str] | None) -> list[str] | None:
        for i, value in enumerate(values or []):
            if len(value) > 63 or not _VALUE.fullmatch(value):
                raise ValueError(
                    f"[{i}]: {value!r} is not a valid label value (at most 63 alphanumerics, '-', '_' or '.', "
                    "starting and ending with an alphanumeric)"
                )
        return values

    @model_validator(mode="after")
    def _operator_values(self) -> NodeOverlayRequirement:
        values = self.values or []
        if self.operator in ("In", "NotIn") and not values:
            raise ValueError(f"values: requirements with operator '{self.operator}' must have a value defined")
        if self.operator in _NUMERIC_OPERATORS and (len(values) != 1 or not _non_negative_int(values[0])):
            raise ValueError(
                f"values: requirements operator '{self.operator}' must have a single positive integer value"
            )
        return self

    def runtime_error(self) -> str | None:
        """What Karpenter's runtime validation rejects in this requirement (None when it passes)."""
        key = NORMALIZED_LABELS.get(self.key, self.key)
        problems: list[str] = []
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            problems.append(f"key {key} with operator {self.operator} must not have values")
        if key != LABEL_NODEPOOL and is_restricted_label(key):
            problems.append(f"label {key} is restricted")
        key_error = label_key_error(key)
        if key_error:
            problems.append(key_error)
        for value in self.values or []:
            value_error = label_value_error(value)
            if value_error:
                problems.append(value_error)
        return "; ".join(problems) or None


class NodeOverlaySpec(KubeModel):
    """``spec`` of a NodeOverlay."""

    requirements: list[NodeOverlayRequirement] = Field(max_length=MAX_OVERLAY_REQUIREMENTS)
    price_adjustment: str | None = None
    price: str | None = None
    capacity: ResourceList | None = None
    weight: int | None = Field(default=None, ge=1, le=MAX_OVERLAY_WEIGHT)

    @field_validator("price_adjustment")
    @classmethod
    def _price_adjustment(cls, value: str | None) -> str | None:
        if value is not None and not _PRICE_ADJUSTMENT.fullmatch(value):
            raise ValueError(
                f"{value!r} must be a signed price change: an absolute amount (e.g. +0.5, -1.25) or a percentage "
                "(e.g. +10%, -15%; no lower than -100%)"
            )
        return value

    @field_validator("price")
    @classmethod
    def _price(cls, value: str | None) -> str | None:
        if value is not None and not _PRICE.fullmatch(value):
            raise ValueError(f"{value!r} must be an unsigned decimal price per hour (e.g. 0.5, 12)")
        return value

    @field_validator("capacity")
    @classmethod
    def _capacity(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        for name in value or {}:
            if name in RESTRICTED_CAPACITY:
                raise ValueError(
                    f"[{name}]: invalid resource restricted: capacity adds extended resources only, not "
                    f"{', '.join(RESTRICTED_CAPACITY)}"
                )
        return value

    @model_validator(mode="after")
    def _one_price(self) -> NodeOverlaySpec:
        if self.price is not None and self.price_adjustment is not None:
            raise ValueError("price: cannot set both 'price' and 'priceAdjustment'")
        return self


class NodeOverlayStatus(StatusModel):
    """``status`` of a NodeOverlay (written by the controller)."""

    conditions: list[Condition] | None = None


class NodeOverlay(KubeModel):
    """karpenter.sh/v1alpha1 NodeOverlay."""

    api_version: Literal["karpenter.sh/v1alpha1"] = "karpenter.sh/v1alpha1"
    kind: Literal["NodeOverlay"] = "NodeOverlay"
    metadata: ObjectMeta
    spec: NodeOverlaySpec
    status: NodeOverlayStatus | None = None

    @model_validator(mode="after")
    def _name(self) -> NodeOverlay:
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

    @property
    def weight(self) -> int:
        """Precedence; an unset weight counts as 0."""
        return self.spec.weight or 0

    def runtime_errors(self) -> list[str]:
        """Karpenter's runtime validation of the overlay ("field: problem" lines; empty when it passes)."""
        errors = [
            f"spec.requirements[{i}]: {error}"
            for i, requirement in enumerate(self.spec.requirements)
            if (error := requirement.runtime_error()) is not None
        ]
        errors += [
            f"spec.capacity[{name}]: invalid capacity, {name} is restricted"
            for name in self.spec.capacity or {}
            if name in RESTRICTED_CAPACITY
        ]
        return errors
