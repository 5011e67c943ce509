"""Putting events on an EventBridge bus: PutEvents takes at most 10 entries and 256 KB per call, and
may fail single entries (FailedEntryCount) while accepting the rest; those are retried.

Must not touch: which events go on the bus or where they are routed (``nodeflow.ingress.routing``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nodeflow.aws.errors import AwsError, aws_errors

__all__ = ["BusEntry", "entry_size", "put_entries"]

MAX_ENTRIES = 10
MAX_REQUEST_BYTES = 256 * 1024
_ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class BusEntry:
    source: str
    detail_type: str
    detail: dict[str, Any]
    time: datetime | None = None
    key: str = ""  # the caller's handle (e.g. the event id), returned for failed entries

    def request(self, bus_name: str) -> dict[str, Any]:
        out: dict[str, Any] = {
            "Source": self.source,
            "DetailType": self.detail_type,
            "Detail": json.dumps(self.detail, separators=(",", ":"), default=str),
            "EventBusName": bus_name,
        }
        if self.time is not None:
            out["Time"] = self.time
        return out


def entry_size(entry: dict[str, Any]) -> int:
    """PutEvents entry size as EventBridge counts it (Time counts 14 bytes)."""
    size = 14 if entry.get("Time") is not None else 0
    for field in ("Source", "DetailType", "Detail"):
        size += len(str(entry.get(field, "")).encode())
    return size + sum(len(r.encode()) for r in entry.get("Resources", []))


def _chunks(requests: list[tuple[str, dict[str, Any]]]) -> list[list[tuple[str, dict[str, Any]]]]:
    out: list[list[tuple[str, dict[str, Any]]]] = []
    current: list[tuple[str, dict[str, Any]]] = []
    size = 0
    for key, req in requests:
        n = entry_size(req)
        if current and (len(current) == MAX_ENTRIES or size + n > MAX_REQUEST_BYTES):
            out.append(current)
            current, size = [], 0
        current.append((key, req))
        size += n
    if current:
        out.append(current)
    return out


def put_entries(events: Any, bus_name: str, entries: Sequence[BusEntry]) -> list[tuple[str, str]]:
    """Put ``entries``; returns ``(key, error)`` for those still failing after retries (never raises
    for AWS errors, so the caller knows exactly which entries are not on the bus)."""
    todo = [(e.key, e.request(bus_name)) for e in entries]
    failed: list[tuple[str, str]] = []
    for _ in range(_ATTEMPTS):
        retry: list[tuple[str, dict[str, Any]]] = []
        failed = []
        for chunk in _chunks(todo):
            try:
                with aws_errors():
                    out = events.put_events(Entries=[req for _, req in chunk])
            except AwsError as exc:  # the whole call failed: every entry of the chunk is retried
                retry.extend(chunk)
                failed.extend((key, f"{exc.code or type(exc).__name__}: {exc.message}") for key, _ in chunk)
                continue
            if not out.get("FailedEntryCount"):
                continue
            for (key, req), result in zip(chunk, out.get("Entries", []), strict=False):
                if result.get("ErrorCode"):
                    retry.append((key, req))
                    failed.append((key, f"{result['ErrorCode']}: {result.get('ErrorMessage', '')}"))
        if not retry:
            return []
        todo = retry
    return failed
