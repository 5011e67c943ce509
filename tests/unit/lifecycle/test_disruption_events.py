"""The disruption queue's records -> the latest pod event per node (the consolidateAfter timers)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from nodeflow.lifecycle.disruption_round import pod_events


def _record(detail_type: str, node: str | None, at: str) -> dict[str, Any]:
    obj: dict[str, Any] = {"namespace": "default", "name": "p", "uid": "u"}
    if node is not None:
        obj["nodeName"] = node
    return {"body": json.dumps({"detail-type": detail_type, "detail": {"observedAt": at, "object": obj}})}


def test_latest_event_per_node_from_bound_and_deleted_pods() -> None:
    records = [
        _record("Pod Bound", "n1", "2026-11-21T10:00:00Z"),
        _record("Pod Deleted", "n1", "2026-11-21T10:05:00Z"),
        _record("Pod Deleted", "n1", "2026-11-21T10:01:00Z"),
        _record("Pod Bound", "n2", "2026-11-21T09:00:00+00:00"),
    ]
    assert pod_events(records) == {
        "n1": datetime(2026, 11, 21, 10, 5, tzinfo=UTC),
        "n2": datetime(2026, 11, 21, 9, 0, tzinfo=UTC),
    }


def test_other_and_unreadable_records_are_ignored() -> None:
    records = [
        _record("Node Ready", "n1", "2026-11-21T10:00:00Z"),
        _record("Pod Deleted", None, "2026-11-21T10:00:00Z"),  # an unbound pod
        _record("Pod Deleted", "n1", "yesterday"),
        _record("Pod Deleted", "n1", "2026-11-21T10:00:00"),  # no zone: not trusted
        {"body": "not json"},
        {"body": json.dumps(["a", "list"])},
        {},
    ]
    assert pod_events(records) == {}
