"""A consolidation candidate is priced as the NodeOverlays price its instance type in its NodePool (as the
replacements it is compared with are), as Karpenter's overlaid instance types price both."""

from __future__ import annotations

import dataclasses

import pytest

from nodeflow.api.karpenter_overlay import NodeOverlay
from nodeflow.disruption.candidates import build_candidates
from nodeflow.disruption.model import Snapshot

from .builders import CATALOG, NOW, node, pod, snapshot


def overlay(name: str, pool: str, **spec: str) -> NodeOverlay:
    return NodeOverlay.model_validate(
        {
            "apiVersion": "karpenter.sh/v1alpha1",
            "kind": "NodeOverlay",
            "metadata": {"name": name},
            "spec": {"requirements": [{"key": "karpenter.sh/nodepool", "operator": "In", "values": [pool]}], **spec},
        }
    )


def with_overlays(s: Snapshot, *overlays: NodeOverlay) -> Snapshot:
    return dataclasses.replace(s, state=dataclasses.replace(s.state, node_overlays=overlays))


def test_candidate_price_follows_the_overlays_of_its_nodepool() -> None:
    base = snapshot([node("a", "m5.xlarge"), node("s", "m5.xlarge", capacity="spot")], [pod("app", "a")])
    catalog_price = CATALOG.on_demand_prices["m5.xlarge"]
    spot_price = CATALOG.spot_prices[("m5.xlarge", "us-east-1a")]
    assert {c.name: c.price for c in build_candidates(base, CATALOG, NOW)} == {"a": catalog_price, "s": spot_price}

    dearer = with_overlays(base, overlay("plus-half", "general", priceAdjustment="+50%"))
    prices = {c.name: c.price for c in build_candidates(dearer, CATALOG, NOW)}
    assert prices["a"] == pytest.approx(catalog_price * 1.5)
    assert prices["s"] == pytest.approx(spot_price * 1.5)

    fixed = with_overlays(base, overlay("fixed", "general", price="0.001"))
    assert {c.name: c.price for c in build_candidates(fixed, CATALOG, NOW)} == {"a": 0.001, "s": 0.001}

    elsewhere = with_overlays(base, overlay("other-pool", "gpu", price="0.001"))
    assert {c.name: c.price for c in build_candidates(elsewhere, CATALOG, NOW)} == {"a": catalog_price, "s": spot_price}
