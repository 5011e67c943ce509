"""The agent's request body, validated at the webhook's edge (pydantic; errors name the field)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from nodeflow.api.errors import format_loc
from nodeflow.ingress.protocol import KINDS, MAX_EVENTS, NAMESPACED_KINDS

__all__ = ["AgentEvent", "AgentRequest", "FieldError", "RequestInvalid", "parse_request"]

_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
Kind = Literal[
    "PodUnschedulable",
    "PodBound",
    "PodDeleted",
    "NodeReady",
    "NodeNotReady",
    "NodeDeleting",
    "NodeDeleted",
    "NodePoolChanged",
    "NodePoolDeleted",
    "EC2NodeClassChanged",
    "EC2NodeClassDeleted",
    "NodeClaimChanged",
    "NodeClaimDeleting",
    "NodeClaimDeleted",
]
assert set(Kind.__args__) == set(KINDS), "Kind and protocol.KINDS must name the same kinds"  # type: ignore[attr-defined]


class ObjectRef(BaseModel):
    """The object an event is about; kind-specific fields are kept as sent (``extra="allow"``)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    name: str = Field(min_length=1, max_length=253, pattern=_NAME)
    uid: str = Field(min_length=1, max_length=128)
    namespace: str | None = Field(default=None, min_length=1, max_length=63, pattern=_NAME)
    resource_version: str | None = Field(default=None, alias="resourceVersion", max_length=64)


class AgentEvent(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    id: str = Field(min_length=16, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    kind: Kind
    time: datetime
    reason: Literal["watch", "relist", "resync"] = "watch"
    object: ObjectRef

    @model_validator(mode="after")
    def _namespace(self) -> AgentEvent:
        if self.kind in NAMESPACED_KINDS and not self.object.namespace:
            raise ValueError(f"object.namespace: required for {self.kind}")
        if self.kind == "PodUnschedulable" and not isinstance(self.object.model_extra.get("spec"), dict):  # type: ignore[union-attr]
            raise ValueError("object.spec: required for PodUnschedulable (the pod fields the solver reads)")
        return self


class AgentRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    cluster: str = Field(min_length=1, max_length=100)
    agent: str | None = Field(default=None, max_length=253)
    sent_at: datetime | None = Field(default=None, alias="sentAt")
    events: list[AgentEvent] = Field(min_length=1, max_length=MAX_EVENTS)


class FieldError(BaseModel):
    loc: str
    msg: str


class RequestInvalid(ValueError):
    """The body is not a valid agent request; ``errors`` name each field."""

    def __init__(self, errors: list[FieldError]) -> None:
        super().__init__("; ".join(f"{e.loc}: {e.msg}" for e in errors))
        self.errors = errors


def _errors(exc: ValidationError) -> list[FieldError]:
    out: list[FieldError] = []
    for err in exc.errors(include_url=False):
        loc = format_loc([p for p in err["loc"] if not (isinstance(p, str) and "[" in p)])
        msg = str(err.get("msg", ""))
        if msg.startswith("Value error, "):
            rel, sep, rest = msg[len("Value error, ") :].partition(": ")
            loc, msg = (f"{loc}.{rel}" if loc else rel, rest) if sep else (loc, rel)
        elif err.get("type") == "missing":
            msg = "required field is missing"
        elif err.get("type") == "extra_forbidden":
            msg = "unknown field"
        out.append(FieldError(loc=loc or "(body)", msg=msg))
    return out


def parse_request(body: Any) -> AgentRequest:
    """Validate a decoded JSON body; raises ``RequestInvalid`` naming every bad field."""
    if not isinstance(body, dict):
        raise RequestInvalid([FieldError(loc="(body)", msg="expected a JSON object")])
    try:
        return AgentRequest.model_validate(body)
    except ValidationError as exc:
        raise RequestInvalid(_errors(exc)) from None
