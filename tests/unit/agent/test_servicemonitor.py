"""The ServiceMonitor selects the agent's metrics Service, whose port reaches the container's /metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

MANIFESTS = Path(__file__).resolve().parents[3] / "agent" / "manifests"


def load(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def kind(name: str) -> dict[str, Any]:
    [doc] = [d for f in sorted(MANIFESTS.glob("*.yaml")) for d in load(f) if d["kind"] == name]
    return doc


def test_servicemonitor_selects_the_agent_service_and_its_metrics_port() -> None:
    [monitor] = load(MANIFESTS / "monitoring" / "servicemonitor.yaml")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["kind"] == "ServiceMonitor"
    service, deployment, policy = kind("Service"), kind("Deployment"), kind("NetworkPolicy")
    spec = monitor["spec"]
    # the Service's namespace is watched and its labels match the selector
    assert service["metadata"]["namespace"] in spec["namespaceSelector"]["matchNames"]
    assert monitor["metadata"]["namespace"] == service["metadata"]["namespace"]
    selector = spec["selector"]
    assert set(selector) == {"matchLabels"}
    assert selector["matchLabels"].items() <= service["metadata"]["labels"].items()
    # each endpoint names a port of the Service, which targets the container port serving /metrics
    ports = {p["name"]: p for p in service["spec"]["ports"]}
    [endpoint] = spec["endpoints"]
    assert endpoint["path"] == "/metrics"
    assert endpoint["scheme"] == "http"
    port = ports[endpoint["port"]]
    pod = deployment["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    [container] = pod["spec"]["containers"]
    container_ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert container_ports[port["targetPort"]] == 8080
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["HEALTH_PORT"] == "8080"
    # the NetworkPolicy admits the scrape
    assert 8080 in [p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]]
    # Prometheus durations
    for field in ("interval", "scrapeTimeout"):
        assert endpoint[field][:-1].isdigit()
        assert endpoint[field][-1] == "s"
    assert int(endpoint["scrapeTimeout"][:-1]) <= int(endpoint["interval"][:-1])


def test_servicemonitor_is_not_applied_with_the_base_manifests() -> None:
    """``kubectl apply -f agent/manifests/`` must work without the Prometheus Operator's CRDs."""
    kinds = {d["kind"] for f in MANIFESTS.glob("*.yaml") for d in load(f)}
    assert "ServiceMonitor" not in kinds
