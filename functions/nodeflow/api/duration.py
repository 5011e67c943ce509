"""Go durations as Karpenter writes them ("720h", "30s", "1h30m", "Never").

Must not touch: what a duration is used for (expiry, grace periods: their deciders); the clock.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

__all__ = ["MAX_SECONDS", "NEVER", "DurationError", "format_duration", "parse_duration", "shift"]

NEVER = "Never"
# Go's time.Duration is int64 nanoseconds (about 292 years); ParseDuration refuses anything longer.
MAX_SECONDS = (2**63 - 1) / 1e9

_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "\u00b5s": 1e-6,  # micro sign
    "\u03bcs": 1e-6,  # greek mu
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_COMPONENT = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")


class DurationError(ValueError):
    """A string that is not a Go duration."""


def parse_duration(value: str, saturate: bool = False) -> float | None:
    """Parse a Go duration into seconds; ``"Never"`` gives None.

    Accepts what Go's ``time.ParseDuration`` accepts: an optional sign and a sequence of
    decimal numbers with a unit (ns, us, µs, ms, s, m, h), e.g. "300ms", "1.5h", "2h45m";
    "0" alone is zero. Beyond Go's range (MAX_SECONDS) it raises, or with ``saturate`` gives
    MAX_SECONDS (for a value read from an object nodeflow must evaluate anyway: a NodeClaim).
    """
    if not isinstance(value, str):
        raise DurationError(f"duration must be a string, not {value!r}")
    if value == NEVER:
        return None
    text = value
    sign = 1.0
    if text[:1] in ("+", "-"):
        sign = -1.0 if text[0] == "-" else 1.0
        text = text[1:]
    if text == "0":
        return 0.0
    if not text:
        raise DurationError(f"invalid duration {value!r}")
    total = 0.0
    pos = 0
    while pos < len(text):
        match = _COMPONENT.match(text, pos)
        if match is None:
            raise DurationError(f"invalid duration {value!r} (expected e.g. 30s, 10m, 720h, 1h30m or Never)")
        total += float(match[1]) * _UNITS[match[2]]
        pos = match.end()
    if total > MAX_SECONDS and saturate:
        total = MAX_SECONDS
    if total > MAX_SECONDS:
        raise DurationError(f"invalid duration {value!r}: out of range (at most 2562047h, as in Go)")
    return sign * total


def shift(when: datetime, seconds: float) -> datetime:
    """``when`` + ``seconds``, saturating at the ends of the calendar instead of raising OverflowError
    (a deadline past year 9999 is "never"; one before year 1 is "always")."""
    try:
        return when + timedelta(seconds=seconds)
    except OverflowError:
        edge = datetime.max if seconds > 0 else datetime.min
        return edge.replace(tzinfo=when.tzinfo)


def format_duration(seconds: float | None) -> str:
    """Format seconds the way Go's Duration.String() does for whole seconds ("1h30m0s"); None is Never."""
    if seconds is None:
        return NEVER
    whole = round(seconds)
    if whole == 0:
        return "0s"
    sign = "-" if whole < 0 else ""
    whole = abs(whole)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{sign}{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{sign}{minutes}m{secs}s"
    return f"{sign}{secs}s"
