"""Expiration: the nodes whose NodeClaim outlived its ``spec.expireAfter`` (Karpenter's NodeClaim expiration
controller). Pure.

Forceful, so no disruption method: no budget, no blocker, no replacement simulation, never paused by a
NodeflowPolicy. Every candidate not being deleted whose NodeClaim was created at least expireAfter ago (Go duration
arithmetic, ``nodeflow.api.duration.shift``) is expired, the earliest first; the round leaves expired nodes out of
every voluntary method, and the disruption Lambda starts one terminate workflow each (reason Expired).

Must not touch: budgets, blockers or replacements (expiration is forceful); the clock (``now`` is an input).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from nodeflow.api.duration import shift
from nodeflow.disruption.candidates import Candidate, _aware
from nodeflow.disruption.model import Expiration

__all__ = ["expirations"]


def expirations(candidates: Sequence[Candidate], now: datetime) -> list[Expiration]:
    """The expired candidates at ``now``, by expiry time then node name."""
    out: list[Expiration] = []
    for c in candidates:
        seconds = c.claim.spec.expire_after_seconds
        created = c.claim.metadata.creation_timestamp
        if seconds is None or created is None or c.deleting:
            continue
        at = shift(_aware(created), seconds)
        if at <= now:
            out.append(Expiration(c.name, c.claim.name, at))
    return sorted(out, key=lambda e: (e.expired_at, e.node))
