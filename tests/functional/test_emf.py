"""The reader of the sandbox handlers' stdout records (tests/functional/emf.py)."""

from __future__ import annotations

import json

from tests.functional.emf import json_records, metric_records


def test_records_interleaved_by_threads_are_each_read() -> None:
    """One thread's ``print`` wrote its record, another thread's whole line came before its newline (seen in a
    fresh-clone run: two records on one line failed ``json.loads(line)``)."""
    emf = {"_aws": {"CloudWatchMetrics": []}, "karpenter_pods_eviction_requests_total": [1.0]}
    log = {"level": "INFO", "message": "provisioned {not json"}
    text = json.dumps(emf) + json.dumps(log) + "\n\n" + "plain text line {\n" + json.dumps(log) + "\n"
    assert json_records(text) == [emf, log, log]
    assert metric_records(text) == [emf]
    assert metric_records(text, "karpenter_pods_eviction_requests_total") == [emf]
    assert metric_records(text, "other") == []
