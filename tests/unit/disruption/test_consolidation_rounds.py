"""Consolidation applied round after round (benchmarks/disruption.py's loop) ends near a fresh plan of the same pods
at more than one cluster size: the packed replacement (every candidate's pods on one node, as Karpenter's scheduler
packs them) is taken only when it costs no more than PACKED_SLACK times the nodes sized for cost, else a few hundred
pods went on one 48xlarge, a dead end no later round leaves (it never replaces one node by several)."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from benchmarks import disruption as bench


@pytest.mark.parametrize(("nodes", "pods"), [(100, 1000)])
def test_rounds_of_consolidation_end_near_a_fresh_plan(nodes: int, pods: int) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert (
            bench.main(["--nodes", str(nodes), "--pods", str(pods), "--rounds", "80", "--repeat", "1", "--json"]) == 0
        )
    rows = {r["metric"]: r["value"] for r in json.loads(out.getvalue().splitlines()[-1])}
    # one packed 48xlarge for all 1,000 pods ended at 1.601x (20.32 vs 12.70 $/h)
    assert rows["after / from scratch"] <= 1.10, out.getvalue()
