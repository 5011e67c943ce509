"""Karpenter v1 kinds: karpenter.sh/v1 NodePool and NodeClaim, karpenter.k8s.aws/v1 EC2NodeClass.

Load a manifest dict with ``NodePool.model_validate(doc)``; dump it back with
``model_dump(by_alias=True, exclude_none=True)``. Errors are pydantic ``ValidationError``s;
``nodeflow.api.errors.format_validation_error`` renders them as ``"field.path: rule"`` lines.
``load_manifest`` picks the model from ``apiVersion``/``kind``.

Must not touch: any decision about the objects; no I/O.
"""

from __future__ import annotations

from typing import Any

from nodeflow.api.karpenter_common import Condition, restricted_label_error
from nodeflow.api.karpenter_core import (
    API_VERSION,
    Budget,
    ConsolidationPolicy,
    Disruption,
    DisruptionReason,
    NodeClaim,
    NodeClaimSpec,
    NodeClaimStatus,
    NodeClaimTemplate,
    NodeClaimTemplateMetadata,
    NodeClaimTemplateSpec,
    NodeClassReference,
    NodePool,
    NodePoolSpec,
    NodePoolStatus,
    NodeSelectorRequirementWithMinValues,
    RequirementOperator,
    ResourceRequirements,
    cron_error,
)
from nodeflow.api.karpenter_ec2 import (
    AMI_ALIAS_FAMILIES,
    EC2_API_VERSION,
    AMIFamily,
    AMISelectorTerm,
    BlockDevice,
    BlockDeviceMapping,
    CapacityReservationSelectorTerm,
    EC2NodeClass,
    EC2NodeClassSpec,
    EC2NodeClassStatus,
    KubeletConfiguration,
    MetadataOptions,
    SecurityGroupSelectorTerm,
    StatusAMI,
    StatusCapacityReservation,
    StatusSecurityGroup,
    StatusSubnet,
    SubnetSelectorTerm,
)
from nodeflow.api.meta import ObjectMeta, Taint

__all__ = [
    "AMI_ALIAS_FAMILIES",
    "API_VERSION",
    "EC2_API_VERSION",
    "KINDS",
    "AMIFamily",
    "AMISelectorTerm",
    "BlockDevice",
    "BlockDeviceMapping",
    "Budget",
    "CapacityReservationSelectorTerm",
    "Condition",
    "ConsolidationPolicy",
    "Disruption",
    "DisruptionReason",
    "EC2NodeClass",
    "EC2NodeClassSpec",
    "EC2NodeClassStatus",
    "KubeletConfiguration",
    "MetadataOptions",
    "NodeClaim",
    "NodeClaimSpec",
    "NodeClaimStatus",
    "NodeClaimTemplate",
    "NodeClaimTemplateMetadata",
    "NodeClaimTemplateSpec",
    "NodeClassReference",
    "NodePool",
    "NodePoolSpec",
    "NodePoolStatus",
    "NodeSelectorRequirementWithMinValues",
    "ObjectMeta",
    "RequirementOperator",
    "ResourceRequirements",
    "SecurityGroupSelectorTerm",
    "StatusAMI",
    "StatusCapacityReservation",
    "StatusSecurityGroup",
    "StatusSubnet",
    "SubnetSelectorTerm",
    "Taint",
    "cron_error",
    "load_manifest",
    "restricted_label_error",
]

KarpenterObject = NodePool | NodeClaim | EC2NodeClass

KINDS: dict[tuple[str, str], type[NodePool] | type[NodeClaim] | type[EC2NodeClass]] = {
    (API_VERSION, "NodePool"): NodePool,
    (API_VERSION, "NodeClaim"): NodeClaim,
    (EC2_API_VERSION, "EC2NodeClass"): EC2NodeClass,
}


def load_manifest(doc: dict[str, Any]) -> KarpenterObject:
    """Validate one manifest dict as the Karpenter kind its apiVersion/kind name.

    Raises ``ValueError`` for an apiVersion/kind that is not a Karpenter v1 kind, and
    pydantic's ``ValidationError`` (a ValueError) for an invalid object.
    """
    key = (str(doc.get("apiVersion", "")), str(doc.get("kind", "")))
    model = KINDS.get(key)
    if model is None:
        known = ", ".join(f"{api}/{kind}" for api, kind in KINDS)
        raise ValueError(f"apiVersion/kind {key[0]!r}/{key[1]!r} is not a Karpenter v1 kind ({known})")
    return model.model_validate(doc)
