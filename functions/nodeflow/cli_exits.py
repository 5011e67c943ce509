"""What every ``python -m nodeflow`` command exits with, and the catalog loading the catalog commands share.

Decides the exit codes (``EXIT_OK``, ``EXIT_UNAVAILABLE``, ``EXIT_INPUT``), the text that documents them in each
command's ``--help`` (``EXIT_CODES``, hence in docs/reference/cli.md), and how a catalog that cannot be loaded is
reported (``load_catalog_or_exit``: one message and one code for plan, explain, disrupt and governance), and how
manifests with problems are (``load_manifests_or_exit``: every problem, one code).

Must not touch: what a command does once it has its catalog, AWS beyond what ``nodeflow.catalog.source`` asks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from nodeflow.api.manifests import Manifests
    from nodeflow.catalog.model import CatalogData

__all__ = ["EXIT_CODES", "EXIT_INPUT", "EXIT_OK", "EXIT_UNAVAILABLE", "load_catalog_or_exit", "load_manifests_or_exit"]

EXIT_OK = 0
# What the command needs from outside could not be had: the catalog (EC2, the Pricing API), the stack, the decision
# log. ``doctor`` exits with it when a check failed.
EXIT_UNAVAILABLE = 1
# Bad input: manifests, region, --now, an unknown pod or stack; the message names the file, field or value.
EXIT_INPUT = 2

# (two lines: the raw-text formatters of disrupt and governance do not wrap it)
EXIT_CODES = (
    f"exit codes: {EXIT_OK} done; {EXIT_INPUT} bad input (manifests, region, --now, pod, kubeconfig: the\n"
    f"message names the file, field or value); {EXIT_UNAVAILABLE} the catalog (or the cluster) could not be had"
)


def load_catalog_or_exit(name: str, region: str | None, err: TextIO) -> CatalogData | int:
    """The ``--catalog`` catalog in ``--region``, or the exit code after saying on ``err`` why it cannot be had:
    ``EXIT_INPUT`` for a region it does not cover or no region / profile at all, ``EXIT_UNAVAILABLE`` when it could
    not be loaded (EC2 or the Pricing API refused or failed)."""
    from botocore.exceptions import BotoCoreError

    from nodeflow.aws.region import NoRegion
    from nodeflow.catalog.source import CatalogError, RegionNotAvailable, load_catalog

    try:
        return load_catalog(name, region)
    except RegionNotAvailable as exc:
        print(f"error: --region: {exc}", file=err)
        return EXIT_INPUT
    except (NoRegion, BotoCoreError) as exc:  # BotoCoreError: AWS_PROFILE names no profile
        print(f"error: {exc}", file=err)
        return EXIT_INPUT
    except CatalogError as exc:
        print(f"error: the {name} catalog could not be loaded: {exc}", file=err)
        return EXIT_UNAVAILABLE


def load_manifests_or_exit(paths: Sequence[str | Path], err: TextIO, made: str) -> Manifests | int:
    """The manifests in ``paths``, or ``EXIT_INPUT`` after listing every problem on ``err`` (each names the file,
    document, object and field); ``made``: what the command does not make then ("plan", "record")."""
    from nodeflow.api.manifests import ManifestError, load_manifests

    try:
        return load_manifests(paths)
    except ManifestError as exc:
        print(f"error: {len(exc.problems)} problem(s) in the manifests; no {made} made:", file=err)
        for problem in exc.problems:
            print(f"  {problem}", file=err)
        return EXIT_INPUT
