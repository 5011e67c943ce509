"""Moving a cluster from Karpenter v1 to nodeflow (docs/migration/from-karpenter.md), on the real control plane."""

from __future__ import annotations

import pytest

from sandbox.controlplane.facade import RealKubeAPI


@pytest.fixture
def kube_server(real_kube: RealKubeAPI) -> RealKubeAPI:
    return real_kube
