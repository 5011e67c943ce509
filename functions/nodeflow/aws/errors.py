"""Typed AWS errors, mapped from botocore errors in exactly one place.

The exception *class names* are the contract with the Step Functions Retry/Catch rules
(``"ErrorEquals": ["Throttled"]``); never rename them. Every adapter in ``nodeflow.aws``
raises only these (``AwsError`` subclasses), never a raw ``botocore`` exception.

``map_error`` turns a ``ClientError`` (or a botocore connection error) into one of them;
``aws_errors()`` is the context manager adapters wrap their calls in.

Must not touch: what a step does about an error (the steps and the state machines' Retry/Catch decide).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

# botocore.exceptions is imported where an error is mapped, not here: importing it costs a handler's cold start
# ~0.05 s, and only a failed call needs it (a botocore exception cannot exist before botocore is loaded).

__all__ = [
    "ACCESS_DENIED_CODES",
    "ALREADY_EXISTS_CODES",
    "INSUFFICIENT_CAPACITY_CODES",
    "NOT_FOUND_CODES",
    "THROTTLING_CODES",
    "UNAVAILABLE_CODES",
    "AccessDenied",
    "AlreadyExists",
    "AwsError",
    "AwsUnavailable",
    "InsufficientCapacity",
    "InvalidRequest",
    "NotFound",
    "Offering",
    "Throttled",
    "aws_errors",
    "client_error_code",
    "error_class_for",
    "is_insufficient_capacity_code",
    "map_error",
]


@dataclass(frozen=True, order=True)
class Offering:
    """An (instance type, zone, capacity type) triple; any part may be unknown (None)."""

    instance_type: str | None = None
    zone: str | None = None
    capacity_type: str | None = None


class AwsError(Exception):
    """Base of every typed AWS error. ``code`` is the AWS error code ('' when not from AWS)."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "",
        operation: str | None = None,
        status: int | None = None,
        offerings: tuple[Offering, ...] = (),
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.operation = operation
        self.status = status
        # Offerings found unavailable alongside this error (fleet errors); may be empty.
        self.offerings = offerings

    def __str__(self) -> str:
        prefix = f"{self.code}: " if self.code else ""
        where = f" ({self.operation})" if self.operation else ""
        return f"{prefix}{self.message}{where}"

    def __reduce__(self) -> tuple[Any, ...]:  # keep pickling (multiprocessing, logging) working
        return (_rebuild, (type(self), self.message, self.code, self.operation, self.status, self.offerings))


def _rebuild(
    cls: type[AwsError],
    message: str,
    code: str,
    operation: str | None,
    status: int | None,
    offerings: tuple[Offering, ...],
) -> AwsError:
    return cls(message, code=code, operation=operation, status=status, offerings=offerings)


class InsufficientCapacity(AwsError):
    """No capacity for the requested offering(s). ``offerings`` lists every one that failed."""

    @property
    def instance_type(self) -> str | None:
        return self.offerings[0].instance_type if len(self.offerings) == 1 else None

    @property
    def zone(self) -> str | None:
        return self.offerings[0].zone if len(self.offerings) == 1 else None

    @property
    def capacity_type(self) -> str | None:
        return self.offerings[0].capacity_type if len(self.offerings) == 1 else None


class Throttled(AwsError):
    """The API rate limit was hit: retry with backoff."""


class NotFound(AwsError):
    """The resource does not exist (or no longer exists)."""


class AlreadyExists(AwsError):
    """The resource already exists (a create lost a race): usually treated as success."""


class AccessDenied(AwsError):
    """Missing IAM permission or bad credentials: do not retry."""


class InvalidRequest(AwsError):
    """The request was rejected as malformed or invalid: do not retry."""


class AwsUnavailable(AwsError):
    """AWS answered 5xx or could not be reached: retry."""


# ------------------------------------------------------------------------------------------
# The table. Codes are compared exactly; suffix rules below catch the families.

INSUFFICIENT_CAPACITY_CODES = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientCapacity",
        "InsufficientHostCapacity",
        "InsufficientReservedInstanceCapacity",
        "InsufficientCapacityOnOutpost",
        "MaxSpotInstanceCountExceeded",
        "UnfulfillableCapacity",
        "VcpuLimitExceeded",
        "InsufficientFreeAddressesInSubnet",
        "SpotMaxPriceTooLow",
        "ReservationCapacityExceeded",
        "Unsupported",  # instance type not offered in that zone
    }
)
THROTTLING_CODES = frozenset(
    {
        "RequestLimitExceeded",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "TooManyRequestsException",
        "RequestThrottled",
        "RequestThrottledException",
        "SlowDown",
        "EC2ThrottledException",
        "PriorRequestNotComplete",
        "TransactionInProgressException",
        "BandwidthLimitExceeded",
        "ProvisionedThroughputExceededException",  # DynamoDB: a partition key's or table's write/read rate
    }
)
NOT_FOUND_CODES = frozenset(
    {
        "InvalidInstanceID.NotFound",
        "InvalidLaunchTemplateName.NotFoundException",
        "InvalidLaunchTemplateId.NotFound",
        "InvalidLaunchTemplateId.VersionNotFound",
        "InvalidAMIID.NotFound",
        "InvalidAMIID.Unavailable",
        "InvalidSubnetID.NotFound",
        "InvalidGroup.NotFound",
        "InvalidFleetId.NotFound",
        "NoSuchEntity",
        "ParameterNotFound",
        "ParameterVersionNotFound",
        "ResourceNotFoundException",
    }
)
ALREADY_EXISTS_CODES = frozenset(
    {
        "InvalidLaunchTemplateName.AlreadyExistsException",
        "EntityAlreadyExists",
        "ParameterAlreadyExists",
        "IdempotentParameterMismatch",
        "ResourceAlreadyExistsException",
    }
)
ACCESS_DENIED_CODES = frozenset(
    {
        "AccessDenied",
        "AccessDeniedException",
        "UnauthorizedOperation",
        "AuthFailure",
        "Blocked",
        "OptInRequired",
        "UnrecognizedClientException",
        "InvalidClientTokenId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "ExpiredTokenException",
        "RequestExpired",
    }
)
UNAVAILABLE_CODES = frozenset(
    {
        "InternalError",
        "InternalFailure",
        "InternalServerError",
        "InternalServiceError",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "Unavailable",
        "ServiceFailure",
    }
)


def is_insufficient_capacity_code(code: str) -> bool:
    return code in INSUFFICIENT_CAPACITY_CODES


def error_class_for(code: str, status: int | None = None) -> type[AwsError]:
    """The typed error for an AWS error code (and HTTP status, used when the code is unknown)."""
    if code in INSUFFICIENT_CAPACITY_CODES:
        return InsufficientCapacity
    if code in THROTTLING_CODES:
        return Throttled
    if code in NOT_FOUND_CODES or code.endswith((".NotFound", "NotFoundException", ".Malformed.NotFound")):
        return NotFound
    if code in ALREADY_EXISTS_CODES or code.endswith((".Duplicate", "AlreadyExistsException", ".AlreadyExists")):
        return AlreadyExists
    if code in ACCESS_DENIED_CODES:
        return AccessDenied
    if code in UNAVAILABLE_CODES:
        return AwsUnavailable
    if status is not None:
        if status == 429:
            return Throttled
        if status == 403:
            return AccessDenied
        if status == 404:
            return NotFound
        if status >= 500:
            return AwsUnavailable
    return InvalidRequest


def _connection_errors() -> tuple[type[Exception], ...]:
    from botocore.exceptions import (
        ConnectionClosedError,
        ConnectionError,
        EndpointConnectionError,
        HTTPClientError,
        ReadTimeoutError,
    )

    return (EndpointConnectionError, ConnectionClosedError, ReadTimeoutError, ConnectionError, HTTPClientError)


def client_error_code(exc: BaseException) -> str | None:
    """The error code of a botocore ``ClientError`` (``"ExecutionAlreadyExists"``, ...); None for anything else."""
    from botocore.exceptions import ClientError

    if not isinstance(exc, ClientError):
        return None
    return str(exc.response.get("Error", {}).get("Code") or "")


def map_error(
    exc: BaseException,
    *,
    instance_type: str | None = None,
    zone: str | None = None,
    capacity_type: str | None = None,
) -> AwsError:
    """The typed error for a botocore exception (an ``AwsError`` is returned unchanged).

    ``instance_type``/``zone``/``capacity_type`` describe the offering the call was about; they
    are attached to ``InsufficientCapacity`` errors.
    """
    from botocore.exceptions import BotoCoreError, ClientError

    if isinstance(exc, AwsError):
        return exc
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {}) or {}
        code = str(error.get("Code", "") or "")
        message = str(error.get("Message", "") or code or str(exc))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        cls = error_class_for(code, status)
        offerings: tuple[Offering, ...] = ()
        if cls is InsufficientCapacity:
            offerings = (Offering(instance_type, zone, capacity_type),)
        return cls(message, code=code, operation=exc.operation_name, status=status, offerings=offerings)
    if isinstance(exc, _connection_errors()):
        return AwsUnavailable(str(exc), code=type(exc).__name__)
    if isinstance(exc, BotoCoreError):
        # Parameter validation, missing credentials, ...: not worth a retry.
        return InvalidRequest(str(exc), code=type(exc).__name__)
    raise TypeError(f"not an AWS error: {exc!r}")


@contextmanager
def aws_errors(
    *,
    instance_type: str | None = None,
    zone: str | None = None,
    capacity_type: str | None = None,
) -> Iterator[None]:
    """Re-raise botocore errors raised inside the block as typed ``AwsError``s."""
    try:
        yield
    except Exception as exc:
        from botocore.exceptions import BotoCoreError, ClientError

        if not isinstance(exc, (ClientError, BotoCoreError)):
            raise
        raise map_error(exc, instance_type=instance_type, zone=zone, capacity_type=capacity_type) from exc
