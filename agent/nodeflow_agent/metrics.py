"""Counters and gauges for ``/metrics`` (Prometheus text format 0.0.4)."""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["METRICS", "Metrics"]

Labels = tuple[tuple[str, str], ...]

#: name -> (type, help)
METRICS: dict[str, tuple[str, str]] = {
    "nodeflow_agent_watch_events_total": ("counter", "Kubernetes watch events received, by resource."),
    "nodeflow_agent_events_observed_total": ("counter", "Agent events produced from Kubernetes changes, by kind."),
    "nodeflow_agent_events_sent_total": ("counter", "Events accepted by the webhook (202)."),
    "nodeflow_agent_events_dropped_total": (
        "counter",
        "Events dropped: overflow (buffer full), rejected (webhook 400/405/415), shutdown (flush deadline).",
    ),
    "nodeflow_agent_events_coalesced_total": ("counter", "Unsent events replaced by a newer one for the object."),
    "nodeflow_agent_events_truncated_total": ("counter", "Events sent with their pod spec truncated (size)."),
    "nodeflow_agent_buffer_events": ("gauge", "Events waiting in the buffer."),
    "nodeflow_agent_buffer_bytes": ("gauge", "Encoded size of the events waiting in the buffer."),
    "nodeflow_agent_requests_total": ("counter", "Webhook requests, by HTTP status (0: no response)."),
    "nodeflow_agent_send_failures_total": ("counter", "Webhook requests that failed and will be retried."),
    "nodeflow_agent_relists_total": ("counter", "LISTs by resource and cause (start, gone, resync, full)."),
    "nodeflow_agent_full_resyncs_total": ("counter", "Full resyncs scheduled after a buffer overflow."),
    "nodeflow_agent_watch_errors_total": ("counter", "Watch or list failures (connection, HTTP), by resource."),
    "nodeflow_agent_known_objects": ("gauge", "Objects whose compact state the agent keeps, by resource."),
    "nodeflow_agent_ready": ("gauge", "1 when the agent is ready (all watchers listed, sender healthy)."),
    "nodeflow_agent_build_info": ("gauge", "Always 1; its label version is the agent's (and nodeflow's) version."),
}


def _labels(labels: dict[str, str]) -> Labels:
    return tuple(sorted(labels.items()))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[tuple[str, Labels], float] = {}
        self._gauges: dict[tuple[str, Labels], Callable[[], float]] = {}
        self._collectors: list[Callable[[], str]] = []

    def collector(self, fn: Callable[[], str]) -> None:
        """More Prometheus text, appended to ``render`` (e.g. Karpenter's cluster-state gauges)."""
        self._collectors.append(fn)

    def inc(self, name: str, value: float = 1, **labels: str) -> None:
        assert name in METRICS, name
        key = (name, _labels(labels))
        with self._lock:
            self._values[key] = self._values.get(key, 0) + value

    def set(self, name: str, value: float, **labels: str) -> None:
        assert name in METRICS, name
        with self._lock:
            self._values[(name, _labels(labels))] = value

    def gauge(self, name: str, fn: Callable[[], float], **labels: str) -> None:
        """A gauge computed when scraped."""
        assert name in METRICS, name
        with self._lock:
            self._gauges[(name, _labels(labels))] = fn

    def value(self, name: str, **labels: str) -> float:
        key = (name, _labels(labels))
        with self._lock:
            fn = self._gauges.get(key)
            if fn is None:
                return self._values.get(key, 0)
        return float(fn())

    def total(self, name: str) -> float:
        """Sum over every label set."""
        with self._lock:
            return sum(v for (n, _), v in self._values.items() if n == name)

    def render(self) -> str:
        with self._lock:
            values = dict(self._values)
            gauges = dict(self._gauges)
        for key, fn in gauges.items():
            values[key] = float(fn())
        lines: list[str] = []
        for name, (type_, help_) in METRICS.items():
            lines.append(f"# HELP {name} {help_}")
            lines.append(f"# TYPE {name} {type_}")
            samples = sorted((labels, v) for (n, labels), v in values.items() if n == name)
            if not samples and not any(n == name for n, _ in values):
                samples = [((), 0.0)]
            for labels, v in samples:
                rendered = ",".join(f'{k}="{_escape(val)}"' for k, val in labels)
                number = repr(float(v)) if v != int(v) else str(int(v))
                lines.append(f"{name}{{{rendered}}} {number}" if rendered else f"{name} {number}")
        return "\n".join(lines) + "\n" + "".join(fn() for fn in self._collectors)
