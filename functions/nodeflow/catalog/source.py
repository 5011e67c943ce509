"""The one interface behind which catalog data comes from (live AWS or the bundled snapshot).

Both ``nodeflow.catalog.aws.AwsCatalogSource`` and ``nodeflow.catalog.offline.OfflineCatalog``
implement ``CatalogSource``. Failures surface as the typed errors below; their class names are
the contract with the state machines' Retry/Catch.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from nodeflow.catalog.model import CatalogData

__all__ = [
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


def load_catalog(kind: str, region: str) -> CatalogData:
    """The catalog of ``region`` from ``kind`` "aws" (live, with the default boto3 credentials) or "offline" (the
    bundled snapshot): what the CLI's ``--catalog`` / ``--region`` mean. Raises the errors above."""
    if kind == "aws":
        import boto3

        from nodeflow.catalog.aws import AwsCatalogSource

        return AwsCatalogSource(session=boto3.Session(region_name=region)).load(region)
    from nodeflow.catalog.offline import load_offline

    return load_offline(region)
