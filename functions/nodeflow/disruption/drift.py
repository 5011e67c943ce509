"""Drift: why a node no longer matches its NodePool or EC2NodeClass (None when it still does).

In order, the first that applies:
1. NodePool template hash: the NodeClaim's karpenter.sh/nodepool-hash annotation differs from the
   hash of the NodePool now (``nodeflow.lifecycle.claims.nodepool_hash``; only compared when the
   hash versions agree or the NodeClaim has no version annotation).
2. EC2NodeClass hash: the NodeClaim's karpenter.k8s.aws/ec2nodeclass-hash annotation differs from the
   EC2NodeClass's (only when both have one).
3. AMI: the NodeClaim's status.imageID is not among the EC2NodeClass's status.amis.
4. Subnet / security groups: the instance's subnet (annotation nodeflow.io/subnet-id) is not among
   status.subnets, or its security groups (nodeflow.io/security-group-ids) differ from
   status.securityGroups (only judged when known on both sides).
5. Requirements: a node label the NodePool's requirements (or template labels) no longer allow (e.g.
   the pool dropped the node's instance type, zone or capacity type), or a NodeClaim requirement
   that no longer intersects the NodePool's.
"""

from __future__ import annotations

from collections.abc import Mapping

from nodeflow.api import labels as wk
from nodeflow.api.karpenter import EC2NodeClass, NodeClaim, NodePool
from nodeflow.disruption.model import ANNOTATION_EC2NODECLASS_HASH, ANNOTATION_SECURITY_GROUP_IDS, ANNOTATION_SUBNET_ID
from nodeflow.lifecycle.claims import NODEPOOL_HASH_VERSION, nodepool_hash
from nodeflow.scheduling.requirements import Requirement, Requirements

__all__ = ["drift_reason"]


def drift_reason(
    claim: NodeClaim, pool: NodePool, node_class: EC2NodeClass | None, node_labels: Mapping[str, str] | None = None
) -> str | None:
    annotations = claim.metadata.annotations or {}
    recorded = annotations.get(wk.ANNOTATION_NODEPOOL_HASH)
    version = annotations.get(wk.ANNOTATION_NODEPOOL_HASH_VERSION)
    if recorded is not None and version in (None, NODEPOOL_HASH_VERSION) and recorded != nodepool_hash(pool):
        return f"NodePool {pool.name} template changed (nodepool-hash {recorded} != {nodepool_hash(pool)})"
    if node_class is not None:
        class_hash = (node_class.metadata.annotations or {}).get(ANNOTATION_EC2NODECLASS_HASH)
        claim_hash = annotations.get(ANNOTATION_EC2NODECLASS_HASH)
        if class_hash is not None and claim_hash is not None and class_hash != claim_hash:
            return f"EC2NodeClass {node_class.name} changed (ec2nodeclass-hash {claim_hash} != {class_hash})"
        status = node_class.status
        image = claim.status.image_id if claim.status is not None else None
        if status is not None and status.amis and image and image not in {a.id for a in status.amis}:
            return f"AMI {image} is no longer resolved by EC2NodeClass {node_class.name}"
        subnet = annotations.get(ANNOTATION_SUBNET_ID)
        if status is not None and status.subnets and subnet and subnet not in {s.id for s in status.subnets}:
            return f"subnet {subnet} is no longer resolved by EC2NodeClass {node_class.name}"
        groups = annotations.get(ANNOTATION_SECURITY_GROUP_IDS)
        if status is not None and status.security_groups and groups:
            have = {g.strip() for g in groups.split(",") if g.strip()}
            want = {g.id for g in status.security_groups}
            if have != want:
                return f"security groups {sorted(have)} differ from EC2NodeClass {node_class.name}'s {sorted(want)}"
    pool_reqs = Requirements(
        Requirement.create(r.key, r.operator, r.values or ()) for r in pool.spec.template.spec.requirements
    ).add(Requirements.from_labels(pool.spec.template.metadata.labels or {}))
    for key, value in sorted((node_labels or {}).items()):
        req = pool_reqs.get(key)
        if req is not None and not req.has(value):
            return f"label {key}={value} is no longer allowed by NodePool {pool.name} ({req.describe()})"
    claim_reqs = Requirements(Requirement.create(r.key, r.operator, r.values or ()) for r in claim.spec.requirements)
    conflict = pool_reqs.intersects(claim_reqs)
    if conflict is not None:
        return f"NodeClaim requirement no longer allowed by NodePool {pool.name}: {conflict}"
    return None
