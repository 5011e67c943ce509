"""The one interface behind which catalog data comes from (live AWS or the bundled snapshot).

Both ``nodeflow.catalog.aws.AwsCatalogSource`` and ``nodeflow.catalog.offline.OfflineCatalog``
implement ``CatalogSource``. Failures surface as the typed errors below; their class names are
the contract with the state machines' Retry/Catch.

Must not touch: how the data is used (``instancetypes``, the solver).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from nodeflow.catalog.model import CatalogData

__all__ = [
    "OFFLINE_DEFAULT_REGION",
    "AccessDenied",
    "CatalogError",
    "CatalogSource",
    "CatalogUnavailable",
    "RegionNotAvailable",
    "Throttled",
    "load_catalog",
]


@runtime_checkable
class CatalogSource(Protocol):
    """Loads the catalog (instance types, zones, offerings, prices) of one region."""

    def load(self, region: str) -> CatalogData: ...


class CatalogError(Exception):
    """Base class of every catalog failure."""


class CatalogUnavailable(CatalogError):
    """The source could not be read (AWS unreachable, a 5xx, an unexpected AWS error). Retryable."""


class Throttled(CatalogError):
    """AWS throttled a catalog call. Retry with backoff."""


class AccessDenied(CatalogError):
    """The caller lacks a permission the catalog needs (ec2:Describe*, pricing:GetProducts)."""


class RegionNotAvailable(CatalogError):
    """The source has no data for the region asked for."""

    def __init__(self, region: str, available: tuple[str, ...]) -> None:
        self.region = region
        self.available = available
        names = ", ".join(available) or "none"
        super().__init__(f"no catalog data for region {region!r}; available: {names}")


OFFLINE_DEFAULT_REGION = "us-east-1"


def load_catalog(kind: str, region: str | None) -> CatalogData:
    """The catalog from ``kind`` "aws" (live, with the SDK's credentials, in ``region`` or else the region
    ``nodeflow.aws.region`` resolves: AWS_REGION, AWS_DEFAULT_REGION, the profile's; ``NoRegion`` when there is
    none) or "offline" (the bundled snapshot of ``region``, default us-east-1: an offline plan does not depend on
    the shell's AWS settings): what the CLI's ``--catalog`` / ``--region`` mean. Raises the errors above."""
    if kind == "aws":
        from nodeflow.aws.region import aws_session
        from nodeflow.catalog.aws import AwsCatalogSource

        session = aws_session(region)
        return AwsCatalogSource(session=session).load(session.region_name)
    from nodeflow.catalog.offline import load_offline

    return load_offline(region or OFFLINE_DEFAULT_REGION)
