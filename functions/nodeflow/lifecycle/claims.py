"""NodeClaims from solver plans: deterministic names and the manifest Karpenter would create.

Pure: no Kubernetes or AWS calls, no clock.

Must not touch: the API server (``provisioner`` creates the NodeClaims); where pods go (``nodeflow.scheduling``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from nodeflow.api import labels as wk
from nodeflow.api.karpenter import NodePool
from nodeflow.api.quantity import format_milli
from nodeflow.api.template_hash import NODEPOOL_HASH_VERSION, nodepool_hash
from nodeflow.scheduling.requirements import Requirement, Requirements
from nodeflow.scheduling.types import NodeClaimPlan

__all__ = [
    "MAX_CLAIM_INSTANCE_TYPES",
    "batch_id",
    "node_claim_manifest",
    "node_claim_name",
    "requirement_dicts",
]

# Karpenter keeps at most 60 instance types on a NodeClaim (the CreateFleet override limit).
MAX_CLAIM_INSTANCE_TYPES = 60
_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"


def batch_id(message_ids: Iterable[str]) -> str:
    """A stable id for a batch of events: the same messages in any order give the same id."""
    digest = hashlib.sha256("\n".join(sorted(set(message_ids))).encode()).hexdigest()
    return digest[:16]


def _base36(digest: bytes, length: int) -> str:
    number = int.from_bytes(digest, "big")
    out = []
    for _ in range(length):
        number, rem = divmod(number, 36)
        out.append(_ALPHABET[rem])
    return "".join(out)


def node_claim_name(nodepool: str, batch: str, pods: Sequence[str], *, length: int = 5) -> str:
    """``<nodepool>-<suffix>`` as Karpenter names NodeClaims, the suffix derived from the batch and
    the claim's pods: a retried invocation with the same batch proposes the same names."""
    digest = hashlib.sha256("\n".join([nodepool, batch, *sorted(pods)]).encode()).digest()
    suffix = _base36(digest, length)
    return f"{nodepool[: 253 - length - 1]}-{suffix}"


def _requirement_dicts(req: Requirement) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if not req.complement:
        out.append({"key": req.key, "operator": "In" if req.values else "DoesNotExist"})
        if req.values:
            out[-1]["values"] = sorted(req.values)
    else:
        if req.values:
            out.append({"key": req.key, "operator": "NotIn", "values": sorted(req.values)})
        if req.greater_than is not None:
            out.append({"key": req.key, "operator": "Gt", "values": [str(req.greater_than)]})
        if req.less_than is not None:
            out.append({"key": req.key, "operator": "Lt", "values": [str(req.less_than)]})
        if not out:
            out.append({"key": req.key, "operator": "Exists"})
    if req.min_values is not None:
        out[0]["minValues"] = req.min_values
    return out


def requirement_dicts(reqs: Requirements) -> list[dict[str, Any]]:
    """``reqs`` as NodeSelectorRequirementWithMinValues dicts, sorted by key."""
    return [d for key in sorted(reqs) for d in _requirement_dicts(reqs[key])]


def node_claim_manifest(
    plan: NodeClaimPlan,
    pool: NodePool,
    name: str,
    *,
    batch: str,
    capacity_types: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The NodeClaim for ``plan``: the NodePool template's labels, annotations, taints, startup
    taints, expiry and node class; the plan's requirements narrowed to its cheapest instance types
    (at most 60); its requests; the nominated pods; owned by the NodePool."""
    template = pool.spec.template
    spec = template.spec
    types = list(plan.instance_types[:MAX_CLAIM_INSTANCE_TYPES])
    narrowed = plan.requirements.add(Requirements([Requirement.create(wk.LABEL_INSTANCE_TYPE, "In", types)]))
    if plan.zones:
        narrowed = narrowed.add(Requirements([Requirement.create(wk.LABEL_ZONE, "In", list(plan.zones))]))
    if capacity_types:
        narrowed = narrowed.add(Requirements([Requirement.create(wk.LABEL_CAPACITY_TYPE, "In", capacity_types)]))
    labels = {**(template.metadata.labels or {}), wk.LABEL_NODEPOOL: pool.name}
    annotations = {
        **(template.metadata.annotations or {}),
        wk.ANNOTATION_NODEPOOL_HASH: nodepool_hash(pool),
        wk.ANNOTATION_NODEPOOL_HASH_VERSION: NODEPOOL_HASH_VERSION,
        wk.ANNOTATION_NOMINATED_PODS: json.dumps(sorted(plan.pods), separators=(",", ":")),
        wk.ANNOTATION_BATCH: batch,
    }
    claim_spec: dict[str, Any] = {
        "nodeClassRef": spec.node_class_ref.model_dump(by_alias=True, exclude_none=True),
        "requirements": requirement_dicts(narrowed),
        "resources": {"requests": _requests(plan.requests)},
        "expireAfter": spec.expire_after,
    }
    if spec.taints:
        claim_spec["taints"] = [t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in spec.taints]
    if spec.startup_taints:
        claim_spec["startupTaints"] = [
            t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in spec.startup_taints
        ]
    if spec.termination_grace_period is not None:
        claim_spec["terminationGracePeriod"] = spec.termination_grace_period
    owner = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "name": pool.name,
        "uid": pool.metadata.uid or "",
        "blockOwnerDeletion": True,
    }
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": annotations,
            "finalizers": [wk.FINALIZER_TERMINATION],
            **({"ownerReferences": [owner]} if pool.metadata.uid else {}),
        },
        "spec": claim_spec,
    }


def _requests(requests: Mapping[str, int]) -> dict[str, str]:
    return {k: format_milli(v, k) for k, v in sorted(requests.items()) if v}
