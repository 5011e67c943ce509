"""The time flags of the commands (``--now`` of plan / explain / disrupt / governance / decisions, ``--since`` of
decisions): what a value may be, and the error that names the flag and the value when it is not.

Pure: the current time is passed in. A time is RFC 3339 (``2026-11-21T12:00:00Z``; without an offset: UTC) from
the year 1000 to 8999, a thousand years inside what Python's datetime can hold either way for the arithmetic the
commands do on it (pause windows, budgets, TTLs: year 1 or 9999 was an OverflowError traceback). A duration
(``--since``) is whole units, ``30m``, ``1h30m``, ``2d``, ``1w``: positive, and not reaching back before EARLIEST.

Must not touch: what the time is used for (the commands decide); the clock (the caller passes it).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

__all__ = ["EARLIEST", "LATEST", "TimeFlagError", "parse_duration", "parse_since", "parse_time"]

EARLIEST = datetime(1000, 1, 1, tzinfo=UTC)  # the earliest Karpenter's own tests judge budgets at
LATEST = datetime(9000, 1, 1, tzinfo=UTC)  # exclusive
EXAMPLE = "2026-11-21T12:00:00Z"

_DURATION = re.compile(r"(\d+)([smhdw])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_SPAN = f"from {EARLIEST:%Y-%m-%d} to {LATEST - timedelta(days=1):%Y-%m-%d}"


class TimeFlagError(ValueError):
    """A time flag's value is not usable (the message names the flag and the value, and says why)."""


def parse_time(flag: str, text: str) -> datetime:
    """An RFC 3339 time (no offset: UTC) from EARLIEST to LATEST, in UTC."""
    raw = text.strip()
    try:
        at = datetime.fromisoformat(raw.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise TimeFlagError(f"{flag}: {text!r} is not an RFC 3339 time (e.g. {EXAMPLE})") from None
    try:
        at = at.astimezone(UTC) if at.tzinfo is not None else at.replace(tzinfo=UTC)
    except OverflowError:  # 0001-01-01T00:00:00+01:00
        raise TimeFlagError(f"{flag}: {text!r} is out of range ({_SPAN})") from None
    if not EARLIEST <= at < LATEST:
        raise TimeFlagError(f"{flag}: {text!r} is out of range ({_SPAN})")
    return at


def parse_duration(flag: str, text: str) -> timedelta:
    """``30m``, ``1h30m``, ``2d``, ``1w``: positive, whole units, at most the span from EARLIEST to LATEST."""
    raw = text.strip()
    if raw.startswith("-"):
        raise TimeFlagError(f"{flag}: {text!r} is negative (give how far back, e.g. 30m, 1h, 2d)")
    if not raw or _DURATION.sub("", raw) != "":
        raise TimeFlagError(f"{flag}: {text!r} is not a duration like 30m, 1h, 2d (or an RFC 3339 time)")
    parts = _DURATION.findall(raw)
    if any(len(n) > 12 for n, _ in parts):  # more than LATEST - EARLIEST in any unit (and int() stays cheap)
        raise TimeFlagError(f"{flag}: {text!r} is too long (it reaches back before {EARLIEST:%Y-%m-%d})")
    seconds = sum(int(n) * _UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise TimeFlagError(f"{flag}: {text!r} is not a duration like 30m, 1h, 2d (it must be positive)")
    if seconds > (LATEST - EARLIEST).total_seconds():
        raise TimeFlagError(f"{flag}: {text!r} is too long (it reaches back before {EARLIEST:%Y-%m-%d})")
    return timedelta(seconds=seconds)


def parse_since(flag: str, text: str, now: datetime) -> datetime:
    """A duration before ``now``, or an RFC 3339 time (a digit first); not after ``now``, not before EARLIEST."""
    raw = text.strip()
    if raw[:1].isdigit() and ("T" in raw or "t" in raw or "-" in raw[1:]):
        at = parse_time(flag, raw)
    else:
        at = now - parse_duration(flag, raw)
        if at < EARLIEST:
            raise TimeFlagError(f"{flag}: {text!r} is too long (it reaches back before {EARLIEST:%Y-%m-%d})")
    if at > now:
        raise TimeFlagError(f"{flag}: {text!r} is in the future (after {now.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ})")
    return at
