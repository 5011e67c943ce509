"""Fixtures shared by the functional tests: fake AWS credentials for moto, one test Kubernetes API server with
Karpenter's CRDs per session (tests reset it before use), the real control plane (one per worker, started by the
first test that asks for ``real_kube``; a directory migrated to it overrides ``kube_server`` with ``real_kube``:
tests/realk8s/README.md), and the metrics the handlers publish."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from tests.realk8s.fixtures import control_plane, real_kube, real_kube_server  # noqa: F401 (the real control plane)

if TYPE_CHECKING:
    from tests.kubeapi import KubeAPIServer


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "MOTO_EC2_LOAD_DEFAULT_AMIS": "false",
        "POWERTOOLS_METRICS_DISABLED": "true",
    }.items():
        monkeypatch.setenv(key, value)


@pytest.fixture(scope="session")
def kube_server() -> Iterator[KubeAPIServer]:
    from tests.kubeapi import KubeAPIServer
    from tests.kubeapi.crds import karpenter_crds

    server = KubeAPIServer().start()
    for crd in karpenter_crds():
        server.register_crd(crd)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def published(monkeypatch: pytest.MonkeyPatch) -> dict[str, float]:
    """The handlers' Powertools metrics as they add them (name -> the latest value); POWERTOOLS_METRICS_DISABLED
    keeps them from being printed."""
    from nodeflow.handlers.common import metrics

    seen: dict[str, float] = {}
    real = metrics.add_metric

    def add_metric(name: str, unit: Any, value: float, **kw: Any) -> None:
        seen[name] = value
        real(name=name, unit=unit, value=value, **kw)

    monkeypatch.setattr(metrics, "add_metric", add_metric)
    return seen
