"""Drift detection: why a node no longer matches its NodePool or EC2NodeClass (None when it still does). Pure.
The drift method that replaces drifted nodes is ``nodeflow.disruption.drift``.

In Karpenter's order, the first that applies:
1. NodePool template hash: the NodeClaim's karpenter.sh/nodepool-hash annotation differs from the
   NodePool's hash now (``nodeflow.api.template_hash.nodepool_hash``, the number Karpenter computes).
   Compared only when the NodeClaim carries both the hash and its karpenter.sh/nodepool-hash-version
   and that version is the NodePool's (``NODEPOOL_HASH_VERSION``): a hash of another version means
   nothing. nodeflow computes the NodePool's hash itself (Karpenter's annotation on the NodePool may
   be stale once Karpenter no longer runs), so that annotation is not read.
2. Requirements: every NodePool requirement must be met by the NodeClaim's labels (with the node's
   labels and, when the catalog knows the instance type, the type's well-known labels): a label the
   requirement no longer allows, or a label the node lacks for a requirement other than NotIn /
   DoesNotExist (e.g. a new requirement on a custom label); template labels count as requirements.
   A NodeClaim requirement that no longer intersects the NodePool's is drift too.
3. Instance type not found (checked once the NodeClaim is more than an hour old, as Karpenter does):
   no instance-type label, a type the catalog no longer sells, or no offering of it (available or
   not) in the node's zone with its capacity type (a ``reserved`` node: on-demand, what it runs as once its
   capacity reservation is gone).
4. EC2NodeClass hash: the NodeClaim's karpenter.k8s.aws/ec2nodeclass-hash annotation differs from the
   EC2NodeClass's. Judged only when both carry the hash and its karpenter.k8s.aws/ec2nodeclass-hash-version
   and the versions are equal: a NodeClaim without them (made before nodeflow wrote them) or of another hash
   version is not drifted by the hash (``nodeflow.lifecycle.nodeclass`` re-writes such a NodeClaim's hash when
   the class's hash version changes, as the AWS provider does).
5. AMI: the NodeClaim's status.imageID is not among the EC2NodeClass's status.amis.
6. Subnet / security groups: the instance's subnet (annotation nodeflow.io/subnet-id) is not among
   status.subnets, or its security groups (nodeflow.io/security-group-ids) differ from
   status.securityGroups (only judged when known on both sides).

Must not touch: what is done about a drifted node (``drift``, ``static_drift``); the clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from functools import lru_cache

from nodeflow.api import labels as wk
from nodeflow.api.karpenter import EC2NodeClass, NodeClaim, NodePool
from nodeflow.api.template_hash import NODEPOOL_HASH_VERSION, legacy_nodepool_hash, nodepool_hash
from nodeflow.catalog.instancetypes import known_type
from nodeflow.catalog.model import CatalogData, Offering
from nodeflow.disruption.model import ANNOTATION_EC2NODECLASS_HASH, ANNOTATION_SECURITY_GROUP_IDS, ANNOTATION_SUBNET_ID
from nodeflow.scheduling.requirements import Requirement, Requirements

__all__ = ["INSTANCE_TYPE_CHECK_AFTER", "drift_reason"]


INSTANCE_TYPE_CHECK_AFTER = timedelta(hours=1)
_ABSENT_OK = frozenset({"NotIn", "DoesNotExist"})


def drift_reason(
    claim: NodeClaim,
    pool: NodePool,
    node_class: EC2NodeClass | None,
    node_labels: Mapping[str, str] | None = None,
    *,
    catalog: CatalogData | None = None,
    now: datetime | None = None,
) -> str | None:
    """Why ``claim`` (on a node with ``node_labels``) drifted from ``pool`` / ``node_class``, or None.
    The instance-type rule needs ``catalog`` and ``now``."""
    annotations = claim.metadata.annotations or {}
    recorded = annotations.get(wk.ANNOTATION_NODEPOOL_HASH)
    version = annotations.get(wk.ANNOTATION_NODEPOOL_HASH_VERSION)
    if recorded is not None and version == NODEPOOL_HASH_VERSION:
        facts_of_pool = _pool_facts(pool)
        current = facts_of_pool.hash
        # a hash written by nodeflow before 2026-11 (same version) describes the same template
        if recorded not in (current, facts_of_pool.legacy_hash):
            return f"NodePool {pool.name} template changed (nodepool-hash {recorded} != {current})"
    labels = {**(node_labels or {}), **(claim.metadata.labels or {})}
    facts = (
        known_type(catalog, labels[wk.LABEL_INSTANCE_TYPE]) if catalog and wk.LABEL_INSTANCE_TYPE in labels else None
    )
    if facts is not None:
        labels = {**facts[0], **labels}
    why = _requirements_drift(claim, pool, labels)
    if why is not None:
        return why
    if catalog is not None and now is not None:
        why = _instance_type_drift(claim, labels, facts, now)
        if why is not None:
            return why
    return _node_class_drift(claim, node_class, annotations)


def _requirements_drift(claim: NodeClaim, pool: NodePool, labels: Mapping[str, str]) -> str | None:
    spec_reqs = pool.spec.template.spec.requirements
    for r in spec_reqs:
        if r.key not in labels and r.operator not in _ABSENT_OK:
            return f"NodePool {pool.name} requires label {r.key} ({r.operator}), which the node does not have"
    pool_reqs = _pool_facts(pool).requirements
    for key, value in sorted(labels.items()):
        req = pool_reqs.get(key)
        if req is not None and not req.has(value):
            return f"label {key}={value} is no longer allowed by NodePool {pool.name} ({req.describe()})"
    claim_reqs = _claim_requirements(tuple((r.key, r.operator, tuple(r.values or ())) for r in claim.spec.requirements))
    conflict = pool_reqs.intersects(claim_reqs)
    if conflict is not None:
        return f"NodeClaim requirement no longer allowed by NodePool {pool.name}: {conflict}"
    return None


class _PoolFacts:
    """What drift reads of a NodePool, the same for each of its nodes: computed once per NodePool object."""

    __slots__ = ("_hash", "_legacy", "_legacy_done", "pool", "requirements")

    def __init__(self, pool: NodePool) -> None:
        self.pool = pool
        spec_reqs = pool.spec.template.spec.requirements
        self.requirements = Requirements(Requirement.create(r.key, r.operator, r.values or ()) for r in spec_reqs).add(
            Requirements.from_labels(pool.spec.template.metadata.labels or {})
        )
        self._hash: str | None = None
        self._legacy: str | None = None
        self._legacy_done = False

    @property
    def hash(self) -> str:
        if self._hash is None:
            self._hash = nodepool_hash(self.pool)
        return self._hash

    @property
    def legacy_hash(self) -> str | None:
        """The hash an earlier nodeflow wrote for this template (``legacy_nodepool_hash``), None when none could."""
        if not self._legacy_done:
            self._legacy, self._legacy_done = legacy_nodepool_hash(self.pool), True
        return self._legacy


_POOL_FACTS: dict[int, _PoolFacts] = {}  # id(NodePool) -> its facts (the object kept: an id is never reused meanwhile)
_POOL_FACTS_KEPT = 64


def _pool_facts(pool: NodePool) -> _PoolFacts:
    """``pool``'s facts (NodePools are frozen models: the same object always gives the same facts)."""
    hit = _POOL_FACTS.get(id(pool))
    if hit is not None and hit.pool is pool:
        return hit
    if len(_POOL_FACTS) >= _POOL_FACTS_KEPT:  # each round brings new NodePool objects: forget the old ones
        _POOL_FACTS.clear()
    facts = _PoolFacts(pool)
    _POOL_FACTS[id(pool)] = facts
    return facts


@lru_cache(maxsize=4096)
def _claim_requirements(reqs: tuple[tuple[str, str, tuple[str, ...]], ...]) -> Requirements:
    """A NodeClaim's requirements (NodeClaims of one shape share them; ``Requirements`` is immutable)."""
    return Requirements(Requirement.create(key, op, values) for key, op, values in reqs)


def _instance_type_drift(
    claim: NodeClaim,
    labels: Mapping[str, str],
    facts: tuple[Mapping[str, str], tuple[Offering, ...]] | None,
    now: datetime,
) -> str | None:
    created = claim.metadata.creation_timestamp
    if created is None or now - _aware(created) <= INSTANCE_TYPE_CHECK_AFTER:
        return None
    name = labels.get(wk.LABEL_INSTANCE_TYPE)
    if name is None:
        return "the node has no instance-type label"
    if facts is None:
        return f"instance type {name} is no longer offered"
    zone, capacity_type = labels.get(wk.LABEL_ZONE), labels.get(wk.LABEL_CAPACITY_TYPE)
    if capacity_type == wk.CAPACITY_TYPE_RESERVED:
        capacity_type = wk.CAPACITY_TYPE_ON_DEMAND
    if not any(
        (zone is None or o.zone == zone) and (capacity_type is None or o.capacity_type == capacity_type)
        for o in facts[1]
    ):
        return f"instance type {name} has no {capacity_type or ''} offering in {zone or 'any zone'} any more"
    return None


def _aware(t: datetime) -> datetime:
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def _node_class_drift(claim: NodeClaim, node_class: EC2NodeClass | None, annotations: Mapping[str, str]) -> str | None:
    if node_class is None:
        return None
    class_annotations = node_class.metadata.annotations or {}
    class_hash = class_annotations.get(ANNOTATION_EC2NODECLASS_HASH)
    claim_hash = annotations.get(ANNOTATION_EC2NODECLASS_HASH)
    class_version = class_annotations.get(wk.ANNOTATION_EC2NODECLASS_HASH_VERSION)
    claim_version = annotations.get(wk.ANNOTATION_EC2NODECLASS_HASH_VERSION)
    if (
        class_hash is not None
        and claim_hash is not None
        and class_version is not None
        and class_version == claim_version
        and class_hash != claim_hash
    ):
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
    return None
