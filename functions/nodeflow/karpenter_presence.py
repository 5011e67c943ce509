"""Is a Karpenter controller running in this cluster? Pure: Kubernetes objects (as the API returns them) and the
time in, a verdict with its evidence out.

nodeflow and Karpenter's controller must not act on the same NodeClaims (DESIGN.md), so ``python -m nodeflow doctor``
reports one, and nodeflow's own controllers may hold still while one runs. Two independent signs, either enough:

- a Deployment with Karpenter's chart labels (``app.kubernetes.io/name: karpenter``; ``DEPLOYMENT_SELECTOR``) that
  has ready replicas;
- Karpenter's leader-election Lease (``karpenter-leader-election``, in the namespace the controller runs in: the
  controller-runtime default of upstream's ``--leader-election-name``; ``LEASE_NAME``) with a holder, renewed within
  its ``leaseDurationSeconds``. A controller that stops cleanly releases it (``LeaderElectionReleaseOnCancel``: no
  holder); one that died stops renewing it, and the Lease counts as held only until its duration has passed.

The Lease catches a controller whatever its Deployment is called or labelled; the Deployment catches one that runs
with leader election disabled.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "DEPLOYMENT_SELECTOR",
    "LEASE_NAME",
    "KarpenterController",
    "karpenter_controller",
]

DEPLOYMENT_SELECTOR = "app.kubernetes.io/name=karpenter"  # the chart's selector label (charts/karpenter/_helpers.tpl)
LEASE_NAME = "karpenter-leader-election"  # upstream pkg/operator/options: --leader-election-name's default
DEFAULT_LEASE_SECONDS = 15  # controller-runtime's LeaseDuration when the Lease does not say


@dataclass(frozen=True, slots=True)
class KarpenterController:
    """Whether a Karpenter controller runs (``running``), and what says so or not, one line each (``evidence``)."""

    running: bool
    evidence: tuple[str, ...]
    deployment: str | None = None  # NAMESPACE/NAME of a Deployment with ready replicas
    lease: str | None = None  # NAMESPACE/NAME of a held Lease


def _parse(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _where(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _ready(deployment: Mapping[str, Any]) -> int:
    ready = (deployment.get("status") or {}).get("readyReplicas") or 0
    return ready if isinstance(ready, int) else 0


def _held(lease: Mapping[str, Any], now: datetime) -> tuple[bool, str]:
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity") or ""
    renewed = _parse(spec.get("renewTime")) or _parse(spec.get("acquireTime"))
    seconds = spec.get("leaseDurationSeconds")
    duration = seconds if isinstance(seconds, int) and seconds > 0 else DEFAULT_LEASE_SECONDS
    if not holder:
        return False, f"Lease {_where(lease)} has no holder (released)"
    if renewed is None:
        return False, f"Lease {_where(lease)} held by {holder} but never renewed"
    age = (now - renewed).total_seconds()
    if now - renewed > timedelta(seconds=duration):
        return False, f"Lease {_where(lease)} held by {holder}, last renewed {age:.0f}s ago (expired after {duration}s)"
    return True, f"Lease {_where(lease)} held by {holder}, renewed {max(age, 0):.0f}s ago"


def karpenter_controller(
    deployments: Iterable[Mapping[str, Any]], leases: Iterable[Mapping[str, Any]], now: datetime
) -> KarpenterController:
    """Judge ``deployments`` (those ``DEPLOYMENT_SELECTOR`` selects, any namespace) and ``leases`` (those named
    ``LEASE_NAME``, any namespace; other Leases are ignored) at ``now``."""
    evidence: list[str] = []
    running_deployment: str | None = None
    for d in sorted(deployments, key=_where):
        ready = _ready(d)
        wanted = (d.get("spec") or {}).get("replicas")
        evidence.append(f"Deployment {_where(d)}: {ready}/{wanted if wanted is not None else 1} ready")
        if ready > 0 and running_deployment is None:
            running_deployment = _where(d)
    held_lease: str | None = None
    for lease in sorted(leases, key=_where):
        if (lease.get("metadata") or {}).get("name") != LEASE_NAME:
            continue
        held, line = _held(lease, now)
        evidence.append(line)
        if held and held_lease is None:
            held_lease = _where(lease)
    if not evidence:
        evidence.append(f"no Deployment labelled {DEPLOYMENT_SELECTOR}, no Lease {LEASE_NAME}")
    return KarpenterController(
        running=running_deployment is not None or held_lease is not None,
        evidence=tuple(evidence),
        deployment=running_deployment,
        lease=held_lease,
    )
