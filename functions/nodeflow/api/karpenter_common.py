"""Field types and checks shared by the karpenter.sh and karpenter.k8s.aws models.

Validators raise ``ValueError`` whose message states the rule; when the rule is about a
sub-field the message starts with its relative path (``"values: ..."``), which
``nodeflow.api.errors.format_validation_error`` appends to the error location.

Must not touch: any decision about the objects; no I/O.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic.alias_generators import to_camel

from nodeflow.api.duration import DurationError, parse_duration
from nodeflow.api.labels import (
    LABEL_EC2NODECLASS,
    NORMALIZED_LABELS,
    RESTRICTED_LABEL_DOMAINS,
    RESTRICTED_LABELS,
    is_restricted_label,
    label_domain,
)
from nodeflow.api.quantity import QuantityError, parse_quantity

__all__ = [
    "Condition",
    "DurationOrNever",
    "DurationString",
    "Quantity",
    "ResourceList",
    "StatusModel",
    "check_duration",
    "check_quantity",
    "restricted_label_error",
]

# Karpenter's CRD patterns for durations.
_DURATION_OR_NEVER = re.compile(r"^(([0-9]+(s|m|h))+|Never)$")
_DURATION = re.compile(r"^([0-9]+(s|m|h))+$")


def check_quantity(value: Any) -> str:
    """BeforeValidator: a Kubernetes quantity (int/float accepted), kept as a string."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"must be a resource quantity (e.g. 500m, 4Gi, 1000), got {value!r}")
    text = value if isinstance(value, str) else str(value)
    try:
        parse_quantity(text)
    except QuantityError as exc:
        raise ValueError(f"{text!r} is not a valid resource quantity (e.g. 500m, 4Gi, 1000)") from exc
    return text


def _check_duration_or_never(value: Any) -> str:
    if not isinstance(value, str) or not _DURATION_OR_NEVER.match(value):
        raise ValueError(
            f"{value!r} is not a valid duration: must be a Go duration of whole s/m/h units "
            "(e.g. 30s, 10m, 720h, 1h30m) or 'Never'"
        )
    return value


def check_duration(value: Any) -> str:
    """BeforeValidator: a duration of whole s/m/h units (no 'Never')."""
    if not isinstance(value, str) or not _DURATION.match(value):
        raise ValueError(
            f"{value!r} is not a valid duration: must be a Go duration of whole s/m/h units (e.g. 30s, 10m, 1h30m)"
        )
    return value


def _check_go_duration(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be a duration string (e.g. 1m30s), got {value!r}")
    try:
        seconds = parse_duration(value)
    except DurationError as exc:
        raise ValueError(str(exc)) from exc
    if seconds is None:
        raise ValueError("'Never' is not allowed here")
    return value


Quantity = Annotated[str, BeforeValidator(check_quantity)]
ResourceList = dict[str, Quantity]
DurationOrNever = Annotated[str, BeforeValidator(_check_duration_or_never)]
DurationString = Annotated[str, BeforeValidator(check_duration)]
GoDuration = Annotated[str, BeforeValidator(_check_go_duration)]


def restricted_label_error(key: str) -> str | None:
    """Why a NodePool may not use ``key`` in labels or requirements (None when allowed).

    Mirrors Karpenter's CEL rules / IsRestrictedLabel: the restricted domains (karpenter.sh,
    karpenter.k8s.aws) are rejected except for the well-known labels; karpenter.sh/nodepool
    and kubernetes.io/hostname are always rejected.
    """
    if key in RESTRICTED_LABELS:
        return f'label "{key}" is restricted'
    normalized = NORMALIZED_LABELS.get(key, key)
    # The EC2NodeClass label is allowed by the provider's CRD rules.
    if normalized == LABEL_EC2NODECLASS or not is_restricted_label(normalized):
        return None
    domain = label_domain(normalized)
    for restricted in sorted(RESTRICTED_LABEL_DOMAINS, key=len, reverse=True):
        if domain == restricted or domain.endswith("." + restricted):
            return f'label domain "{restricted}" is restricted (label "{key}" is not a well-known label)'
    return f'label "{key}" is restricted'


class StatusModel(BaseModel):
    """Base for status sub-objects: written by controllers, so unknown fields are kept."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow", frozen=True)


class Condition(StatusModel):
    """A status condition (operatorpkg status.Condition / metav1.Condition)."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str | None = None
    message: str | None = None
    last_transition_time: datetime | None = None
    observed_generation: int | None = Field(default=None, ge=0)
