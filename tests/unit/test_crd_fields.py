"""Karpenter's API groups carry Karpenter's fields only: every field of nodeflow's karpenter.sh and
karpenter.k8s.aws CRDs (NodePool, NodeClaim, NodeOverlay, EC2NodeClass; generated from the models by
tools/gen_crds.py) is a field of Karpenter's own CRDs, and every Karpenter field is there too.

Karpenter's fields are listed in tests/unit/karpenter_fields.txt, written from aws/karpenter-provider-aws's
pkg/apis/crds at the tag the parity work follows by ``tools/upstream_fields.py`` (names only). A nodeflow
extension belongs in nodeflow's own group (nodeflow.io), not in Karpenter's.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))

import gen_crds  # noqa: E402
from upstream_fields import crd_fields  # noqa: E402

KARPENTER = (REPO / "tests" / "unit" / "karpenter_fields.txt").read_text().splitlines()
KARPENTER_GROUPS = ("karpenter.sh", "karpenter.k8s.aws")


def _nodeflow_fields() -> dict[str, list[str]]:
    """CRD file -> the ``KIND PATH`` lines of nodeflow's generated Karpenter-group CRDs."""
    out: dict[str, list[str]] = {}
    for name, text in gen_crds.render_all().items():
        crd = yaml.safe_load(text)
        if crd["spec"]["group"] in KARPENTER_GROUPS:
            out[name] = crd_fields(crd)
    return out


def test_the_karpenter_field_list_is_for_the_tag_followed() -> None:
    assert KARPENTER[0].startswith("# Karpenter's CRD fields at aws/karpenter-provider-aws v1.14.1 ")
    assert {line.split()[0] for line in KARPENTER[1:]} == {"NodePool", "NodeClaim", "NodeOverlay", "EC2NodeClass"}


def test_every_field_of_nodeflows_karpenter_crds_is_karpenters() -> None:
    known = set(KARPENTER[1:])
    crds = _nodeflow_fields()
    assert set(crds) == {
        "karpenter.sh_nodepools.yaml",
        "karpenter.sh_nodeclaims.yaml",
        "karpenter.sh_nodeoverlays.yaml",
        "karpenter.k8s.aws_ec2nodeclasses.yaml",
    }
    invented = {name: [f for f in fields if f not in known] for name, fields in crds.items()}
    assert invented == {name: [] for name in crds}, "fields Karpenter does not have (remove, or move to nodeflow.io)"


def test_every_karpenter_field_is_in_nodeflows_crds() -> None:
    ours = {f for fields in _nodeflow_fields().values() for f in fields}
    assert [f for f in KARPENTER[1:] if f not in ours] == []
