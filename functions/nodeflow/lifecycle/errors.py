"""The errors the workflows name in Retry and Catch. Their class names are the contract: a
Lambda that raises one reports it as ``errorType``, which Step Functions matches exactly.

``as_workflow_error`` maps the adapters' typed errors onto them in one place.

Must not touch: when a step fails; only the names the workflows match and the mapping from the adapters' errors.
"""

from __future__ import annotations

from nodeflow.aws import errors as aws
from nodeflow.kube import errors as kube

__all__ = [
    "InitializationTimeout",
    "LaunchFailed",
    "NoCapacity",
    "NodeClaimGone",
    "NodeClassNotReady",
    "RegistrationTimeout",
    "TerminationFailed",
    "Transient",
    "WorkflowError",
    "as_termination_error",
    "as_workflow_error",
]


class WorkflowError(Exception):
    """Base of the errors the state machines know by name."""


class Transient(WorkflowError):
    """Throttling, a 5xx or a connection failure: the state retries with backoff."""


class NoCapacity(WorkflowError):
    """Every offering the NodeClaim allows is out of capacity (now marked unavailable)."""


class NodeClassNotReady(WorkflowError):
    """The EC2NodeClass did not resolve (no subnets, security groups or AMIs matched)."""


class LaunchFailed(WorkflowError):
    """A launch error retrying cannot fix (invalid request, access denied, ...)."""


class NodeClaimGone(WorkflowError):
    """The NodeClaim was deleted while its workflow ran."""


class RegistrationTimeout(WorkflowError):
    """No node registered for the NodeClaim within the registration TTL."""


class InitializationTimeout(WorkflowError):
    """The node registered but did not become initialized within the TTL."""


class TerminationFailed(WorkflowError):
    """A terminate-workflow error retrying cannot fix (access denied, invalid request, ...). The node keeps its
    finalizer and the disrupted taint, so a later start of the workflow picks it up again."""


def as_workflow_error(exc: BaseException) -> BaseException:
    """The workflow error for an adapter error (others are returned unchanged)."""
    if isinstance(exc, WorkflowError):
        return exc
    if isinstance(exc, aws.Throttled | aws.AwsUnavailable):
        return Transient(f"{type(exc).__name__}: {exc}")
    if isinstance(exc, aws.InsufficientCapacity):
        return NoCapacity(str(exc))
    if isinstance(exc, aws.AwsError):
        return LaunchFailed(f"{type(exc).__name__}: {exc}")
    if isinstance(exc, kube.Unavailable | kube.TooManyRequests | kube.Conflict):
        return Transient(f"Kubernetes {type(exc).__name__}: {exc}")
    return exc


def as_termination_error(exc: BaseException) -> BaseException:
    """``as_workflow_error`` for the terminate workflow: AWS errors retrying cannot fix are ``TerminationFailed``."""
    mapped = as_workflow_error(exc)
    if isinstance(mapped, LaunchFailed | NoCapacity) and not isinstance(exc, WorkflowError):
        return TerminationFailed(str(mapped))
    return mapped
