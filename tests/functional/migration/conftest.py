"""Moving a cluster from Karpenter v1 to nodeflow (docs/migration/from-karpenter.md), on the real control plane."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandbox.aws import MOCK_CONFIG, Clients
from sandbox.controlplane.facade import RealKubeAPI
from sandbox.nodeflow import LocalNodeflow


@pytest.fixture
def kube_server(real_kube: RealKubeAPI) -> RealKubeAPI:
    return real_kube


@pytest.fixture
def local(aws_env: None, real_kube: RealKubeAPI, shared_clients: Clients) -> Iterator[LocalNodeflow]:
    """nodeflow installed (its functions and workflows in moto, its RBAC on the cluster), nothing applied yet."""
    from moto import mock_aws

    with mock_aws(config=MOCK_CONFIG):
        started = LocalNodeflow(shared_clients, real_kube).start()
        try:
            yield started
        finally:
            started.stop()
