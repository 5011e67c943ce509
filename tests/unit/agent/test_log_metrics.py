"""JSON logs and the Prometheus text of /metrics."""

from __future__ import annotations

import io
import json
import logging
import threading

from nodeflow_agent.log import get_logger, setup_logging
from nodeflow_agent.metrics import Metrics


def test_logs_are_one_json_object_per_line() -> None:
    stream = io.StringIO()
    setup_logging("info", stream)
    try:
        log = get_logger("test")
        log.info("relisted", extra={"resource": "pods", "items": 3})
        log.debug("not shown")
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            log.exception("failed")
        thread = threading.Thread(target=lambda: 1 / 0, name="doomed")
        thread.start()
        thread.join()
    finally:
        logging.getLogger("nodeflow_agent").handlers.clear()
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [entry["msg"] for entry in lines] == ["relisted", "failed", "thread crashed"]
    first = lines[0]
    assert first["level"] == "info"
    assert first["logger"] == "nodeflow_agent.test"
    assert (first["resource"], first["items"]) == ("pods", 3)
    assert first["time"].endswith("Z")
    assert "RuntimeError: boom" in lines[1]["error"]
    assert lines[2]["thread_name"] == "doomed"
    assert "ZeroDivisionError" in lines[2]["error"]


def test_metrics_render_prometheus_text() -> None:
    metrics = Metrics()
    metrics.inc("nodeflow_agent_events_sent_total", 5)
    metrics.inc("nodeflow_agent_relists_total", resource="pods", cause="start")
    metrics.inc("nodeflow_agent_relists_total", resource="pods", cause="start")
    size = {"n": 7}
    metrics.gauge("nodeflow_agent_buffer_events", lambda: size["n"])
    metrics.set("nodeflow_agent_ready", 1)
    text = metrics.render()
    assert "# TYPE nodeflow_agent_events_sent_total counter\nnodeflow_agent_events_sent_total 5\n" in text
    assert 'nodeflow_agent_relists_total{cause="start",resource="pods"} 2\n' in text
    assert "nodeflow_agent_buffer_events 7\n" in text
    assert "nodeflow_agent_send_failures_total 0\n" in text  # declared metrics are always exposed
    size["n"] = 9
    assert metrics.value("nodeflow_agent_buffer_events") == 9
    assert metrics.total("nodeflow_agent_relists_total") == 2
    assert text.endswith("\n")
