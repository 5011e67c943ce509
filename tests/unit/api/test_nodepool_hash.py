"""The NodePool template hash (karpenter.sh/nodepool-hash, version v3) of templates whose taints carry timeAdded.

Karpenter v1.14.1 hashes ``spec.template`` with hashstructure v2.0.2 (pkg/apis/v1/nodepool.go ``NodePool.Hash``:
FormatV2, SlicesAsSets, IgnoreZeroValue, ZeroNil). A taint's timeAdded is a ``*metav1.Time``: a struct ``Time``
whose one exported (embedded) field ``Time`` is a ``time.Time``, which hashstructure's ``visit`` hashes as FNV-1
of ``MarshalBinary()``; metav1.Time's UnmarshalJSON keeps the time in the Local zone (UTC in Karpenter's
container), so the zone bytes are offset 0 minutes, not UTC's -1 marker.

The expected numbers were derived by hand-following that algorithm: no Go toolchain was available to run upstream's
code, so a throwaway script (not in the repository) walked each template as Go values generically, the way
hashstructure's ``visit`` does, written from hashstructure.go and Go's time.Time.MarshalBinary rather than from
nodeflow's ``template_hash``. The machinery both share (FNV-1, structs, maps, slices as sets, integers) is pinned
against the AWS provider's own golden values in test_ec2nodeclass_hash.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from nodeflow.api.karpenter import NodePool
from nodeflow.api.template_hash import legacy_nodepool_hash, nodepool_hash

REF = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
DEDICATED = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


def pool(
    taints: list[dict[str, Any]] | None = None, startup: list[dict[str, Any]] | None = None, **spec: Any
) -> NodePool:
    template_spec: dict[str, Any] = {
        "nodeClassRef": REF,
        "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}],
        "expireAfter": "720h",
        **spec,
    }
    if taints is not None:
        template_spec["taints"] = taints
    if startup is not None:
        template_spec["startupTaints"] = startup
    return NodePool.model_validate(
        {
            "metadata": {"name": "p"},
            "spec": {"template": {"metadata": {"labels": {"team": "ml"}}, "spec": template_spec}},
        }
    )


def timed(at: str, taint: dict[str, Any] = DEDICATED) -> dict[str, Any]:
    return {**taint, "timeAdded": at}


CASES = [
    ("no taint", pool(), "1646390540465697376"),
    ("taint without timeAdded", pool([DEDICATED]), "4344729236088038686"),
    ("taint with timeAdded", pool([timed("2024-01-01T00:00:00Z")]), "16789921391319937019"),
    ("the same instant at +02:00", pool([timed("2024-01-01T02:00:00+02:00")]), "16789921391319937019"),
    ("one second later", pool([timed("2024-01-01T00:00:01Z")]), "1845340477162819310"),
    ("half a second later", pool([timed("2024-01-01T00:00:00.5Z")]), "10207231939645745109"),
    (
        "two taints, one timed",
        pool([timed("2025-06-30T12:34:56Z"), {"key": "spot", "effect": "NoExecute"}]),
        "17186108796383500619",
    ),
    (
        "timed startup taint",
        pool(None, [timed("2024-01-01T00:00:00Z", {"key": "cni", "effect": "NoSchedule"})]),
        "5400306664531848839",
    ),
    (
        "timed, with terminationGracePeriod and expireAfter Never",
        pool([timed("2024-01-01T00:00:00Z")], terminationGracePeriod="1h", expireAfter="Never"),
        "11414900644580328516",
    ),
]


@pytest.mark.parametrize(("case", "node_pool", "expected"), CASES, ids=[c[0] for c in CASES])
def test_karpenters_number(case: str, node_pool: NodePool, expected: str) -> None:
    assert nodepool_hash(node_pool) == expected


def test_a_changed_time_added_is_a_changed_template() -> None:
    assert nodepool_hash(pool([timed("2024-01-01T00:00:00Z")])) != nodepool_hash(pool([timed("2024-01-02T00:00:00Z")]))


def test_no_legacy_hash_of_a_timed_template() -> None:
    """nodeflow's earlier formula could not serialize a taint's time, so no NodeClaim carries one of it."""
    assert legacy_nodepool_hash(pool([timed("2024-01-01T00:00:00Z")])) is None
    assert legacy_nodepool_hash(pool(None, [timed("2024-01-01T00:00:00Z")])) is None
    assert legacy_nodepool_hash(pool([DEDICATED])) is not None
