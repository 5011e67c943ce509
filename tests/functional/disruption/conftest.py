"""Disruption Lambda tests reuse the lifecycle fixtures (moto with the real workflows) on the real control plane
(kube-scheduler, the ReplicaSet and disruption controllers, simulated kubelets)."""

from __future__ import annotations

import pytest

from sandbox.controlplane.facade import RealKubeAPI
from tests.functional.lifecycle.conftest import local, make_local

__all__ = ["kube_server", "local", "make_local"]


@pytest.fixture
def kube_server(real_kube: RealKubeAPI) -> RealKubeAPI:
    return real_kube
