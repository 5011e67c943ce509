"""Powertools objects and the glue every handler shares: typed inputs, error mapping, deps.

Must not touch: what any step decides, AWS or Kubernetes beyond building the clients (``runtime``).
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from aws_lambda_powertools import Logger, Metrics
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nodeflow.api.errors import format_validation_error
from nodeflow.lifecycle.errors import as_termination_error, as_workflow_error

if TYPE_CHECKING:
    from aws_lambda_powertools import Tracer

__all__ = [
    "DECISION_LOG_MARGIN_SECONDS",
    "InvalidInput",
    "LaunchOutput",
    "LazyTracer",
    "StepInput",
    "TaintOutput",
    "TerminationInput",
    "decision_log_time",
    "log_warning",
    "logger",
    "metrics",
    "parse",
    "record_decision_log",
    "termination_step",
    "tracer",
    "workflow_step",
]


M = TypeVar("M", bound=BaseModel)
F = TypeVar("F", bound=Callable[..., Any])


class LazyTracer:
    """Powertools' ``Tracer``, built on first use. Building one imports the X-Ray SDK and botocore and, in Lambda,
    patches the libraries it traces (about half of a handler's import time): a handler module builds it on its
    first invocation instead, before the handler body runs, so every call is traced as before.
    ``capture_lambda_handler`` (used bare, as a decorator) and every other attribute go to the real tracer."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._tracer: Tracer | None = None
        self._lock = threading.Lock()

    @property
    def built(self) -> bool:
        return self._tracer is not None

    def get(self) -> Tracer:
        with self._lock:
            if self._tracer is None:
                from aws_lambda_powertools import Tracer

                self._tracer = Tracer(**self._options)
            return self._tracer

    def capture_lambda_handler(self, fn: F) -> F:
        traced: Callable[..., Any] | None = None

        @functools.wraps(fn)
        def wrapper(event: Any, context: Any, **kwargs: Any) -> Any:
            nonlocal traced
            if traced is None:
                traced = self.get().capture_lambda_handler(fn)
            return traced(event, context, **kwargs)

        return wrapper  # type: ignore[return-value]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.get(), name)


logger = Logger(service="nodeflow")
tracer = LazyTracer(service="nodeflow")
metrics = Metrics(namespace="nodeflow", service="nodeflow")
if _cluster := os.environ.get("CLUSTER_NAME", "").strip():  # clusters sharing an account keep their own metrics
    metrics.set_default_dimensions(cluster=_cluster)


class InvalidInput(ValueError):
    """The event does not have the expected shape (the message names the fields)."""


class LaunchOutput(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    instance_id: str = Field(alias="instanceId", pattern=r"^i-[0-9a-f]+$")
    provider_id: str = Field(alias="providerID")
    instance_type: str | None = Field(default=None, alias="instanceType")
    zone: str | None = None
    capacity_type: str | None = Field(default=None, alias="capacityType")
    launched_at: str | None = Field(default=None, alias="launchedAt")
    private_dns_name: str | None = Field(default=None, alias="privateDnsName", max_length=253)


class RegistrationOutput(BaseModel):
    """What the previous Register poll returned (kept in the execution's state as ``registration``)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    listed_at: int | None = Field(default=None, alias="listedAt", ge=0)


class StepInput(BaseModel):
    """What the launch workflow passes to each step (the execution's state)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    node_claim: str = Field(
        alias="nodeClaim", min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
    )
    launch: LaunchOutput | None = None
    registration: RegistrationOutput | None = None
    error: dict[str, Any] | None = None


class TaintOutput(BaseModel):
    """What the terminate workflow's Taint step found (kept in the execution's state as ``taint``)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    node: str | None = Field(default=None, max_length=253)
    provider_id: str | None = Field(default=None, alias="providerID", max_length=512)


class DrainOutput(BaseModel):
    """The previous Drain pass, as far as the next pass needs it. Neither count has an upper bound (a drain may
    be held for weeks, and the count survives the hand-over to the next execution); the code clamps what its
    arithmetic uses."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    held_passes: int = Field(default=0, alias="heldPasses", ge=0, strict=True)  # held passes in a row
    passes: int = Field(default=0, ge=0, strict=True)  # Drain passes of this execution so far


class TerminationInput(BaseModel):
    """What the terminate workflow passes to each step (the execution's state). An execution that continues
    another one also gets ``workflow`` (the chain's first execution) and ``generation`` (2, 3, ...)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    node_claim: str = Field(
        alias="nodeClaim", min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
    )
    reason: str | None = Field(default=None, max_length=256)
    taint: TaintOutput | None = None
    drain: DrainOutput | None = None
    workflow: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._-]{1,80}$")
    generation: int = Field(default=1, ge=1, strict=True)


def parse(model: type[M], event: Any) -> M:
    try:
        return model.model_validate(event)
    except ValidationError as exc:
        raise InvalidInput("; ".join(format_validation_error(exc))) from None


def workflow_step(fn: F) -> F:
    """Re-raise adapter errors as the workflow errors the state machine names (Retry/Catch)."""
    return _mapping_errors(fn, as_workflow_error)


def termination_step(fn: F) -> F:
    """``workflow_step`` for the terminate workflow (AWS errors retrying cannot fix: ``TerminationFailed``)."""
    return _mapping_errors(fn, as_termination_error)


def _mapping_errors(fn: F, mapper: Callable[[BaseException], BaseException]) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            mapped = mapper(exc)
            if mapped is exc:
                raise
            logger.warning("step failed", extra={"error": type(mapped).__name__, "cause": str(exc)})
            raise mapped from exc

    return wrapper  # type: ignore[return-value]


def log_warning(message: str, extra: dict[str, Any]) -> None:
    logger.warning(message, extra=extra)


# What an invocation keeps of its remaining time when the decision log's writes stop: the rest of the run (metrics,
# the result's log line) and a DynamoDB call in flight (``Runtime.decision_client``: it gives up within 4 s).
DECISION_LOG_MARGIN_SECONDS = 5.0


def decision_log_time(context: Any, margin: float = DECISION_LOG_MARGIN_SECONDS) -> Callable[[], float] | None:
    """The decision log's ``time_left``: the seconds until ``margin`` before the invocation times out, by the Lambda
    context's own clock (``get_remaining_time_in_millis``); None for a context without one (no deadline)."""
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if not callable(remaining):
        return None
    return lambda: float(remaining()) / 1000 - margin


def record_decision_log(writer: Any) -> None:
    """The metrics of an invocation's decision-log writer (``nodeflow.aws.decision_log.DecisionLog``; None: not
    configured): items written, items that could not be written (``DecisionLogWriteErrors``) and items the deadline
    left unwritten (``DecisionLogWriteTimeouts``); both alarmed."""
    from nodeflow.aws.decision_log import DecisionLog

    if isinstance(writer, DecisionLog):
        metrics.add_metric(name="DecisionLogItemsWritten", unit="Count", value=writer.written)
        metrics.add_metric(name="DecisionLogWriteErrors", unit="Count", value=writer.failed)
        metrics.add_metric(name="DecisionLogWriteTimeouts", unit="Count", value=writer.late)
