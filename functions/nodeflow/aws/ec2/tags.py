"""The tags that say who owns an EC2 or IAM resource, and selector tags as Describe* filters.

It decides which tags mark a resource as the cluster's (``cluster_tags``) and how a selector term's tags become
filters (``tag_filters``). It must not call AWS: the resource modules of this package do.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "TAG_EKS_CLUSTER",
    "TAG_LAUNCH_TEMPLATE_ID",
    "TAG_NODECLAIM",
    "TAG_NODECLASS",
    "TAG_NODEPOOL",
    "cluster_tags",
    "tag_filters",
    "tag_list",
]

TAG_NODEPOOL = "karpenter.sh/nodepool"
TAG_NODECLAIM = "karpenter.sh/nodeclaim"
TAG_NODECLASS = "karpenter.k8s.aws/ec2nodeclass"
TAG_EKS_CLUSTER = "eks:eks-cluster-name"
TAG_LAUNCH_TEMPLATE_ID = "aws:ec2launchtemplate:id"  # EC2 tags every instance launched from a template with it


def cluster_tags(cluster_name: str) -> dict[str, str]:
    """The tags that mark a resource as owned by the cluster."""
    return {f"kubernetes.io/cluster/{cluster_name}": "owned", TAG_EKS_CLUSTER: cluster_name}


def tag_filters(tags: Mapping[str, str] | None) -> list[dict[str, Any]]:
    """DescribeSubnets / DescribeSecurityGroups / ... filters for a selector term's tags (value "*": the key only)."""
    filters = []
    for key, value in (tags or {}).items():
        if value == "*":
            filters.append({"Name": "tag-key", "Values": [key]})
        else:
            filters.append({"Name": f"tag:{key}", "Values": [value]})
    return filters


def tag_list(tags: Mapping[str, str]) -> list[dict[str, str]]:
    """``tags`` as a TagSpecifications ``Tags`` list, sorted by key (the same tags always read the same)."""
    return [{"Key": k, "Value": v} for k, v in sorted(tags.items())]
