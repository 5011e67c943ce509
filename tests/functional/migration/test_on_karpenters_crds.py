"""The adoption scenario (test_adoption.py) on a cluster whose CRDs are Karpenter's own v1.14.1 ones, as the install
keeps them (test_crds.py), not nodeflow's generated copies: whatever nodeflow writes (status, conditions, annotations)
must be taken as written by Karpenter's schemas (a field they do not know is pruned by the API server, a rule they have
refuses the write).

Karpenter's CRDs are read from a git clone of aws/karpenter-provider-aws (``NODEFLOW_KARPENTER_AWS_REPO``, default the
mirror this repository was developed against) at tag v1.14.1, ``pkg/apis/crds``; without one the test is skipped. A
control plane of the module's own (the shared one has nodeflow's CRDs).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.controlplane import ControlPlane
from sandbox.controlplane.facade import RealKubeAPI
from sandbox.controlplane.launcher import CRD_DIR
from tests.functional.migration.test_adoption import (
    test_nothing_karpenter_made_is_replaced_and_adopted_nodes_are_disrupted_as_nodeflows_own as adoption,
)
from tests.realk8s.fixtures import NODE_MONITOR_GRACE_PERIOD, NODE_MONITOR_PERIOD

REPO = Path(os.environ.get("NODEFLOW_KARPENTER_AWS_REPO", "/work/.mirror/aws+karpenter-provider-aws/repo"))
TAG = "v1.14.1"
KARPENTER_CRDS = (
    "karpenter.k8s.aws_ec2nodeclasses.yaml",
    "karpenter.sh_nodeclaims.yaml",
    "karpenter.sh_nodeoverlays.yaml",
    "karpenter.sh_nodepools.yaml",
)


def _karpenter_crds(into: Path) -> list[Path]:
    out = []
    for name in KARPENTER_CRDS:
        try:
            text = subprocess.run(
                ["git", "-C", str(REPO), "show", f"{TAG}:pkg/apis/crds/{name}"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        except (OSError, subprocess.CalledProcessError):
            pytest.skip(f"Karpenter's CRDs: no git clone of aws/karpenter-provider-aws with {TAG} at {REPO}")
        path = into / name
        path.write_text(text)
        out.append(path)
    return out


@pytest.fixture(scope="module")
def karpenters_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealKubeAPI]:
    crds = [*_karpenter_crds(tmp_path_factory.mktemp("karpenter-crds")), CRD_DIR / "nodeflow.io_nodeflowpolicies.yaml"]
    with ControlPlane(
        controllers=True,
        crds=crds,
        node_monitor_grace_period=NODE_MONITOR_GRACE_PERIOD,
        node_monitor_period=NODE_MONITOR_PERIOD,
    ) as plane:
        facade = RealKubeAPI(plane).start()
        try:
            yield facade
        finally:
            facade.stop()


@pytest.fixture
def real_kube(karpenters_cluster: RealKubeAPI) -> RealKubeAPI:
    karpenters_cluster.reset()
    return karpenters_cluster


test_adoption_on_karpenters_crds = adoption
