"""Launch templates in EC2: made once per configuration (``ensure_launch_template``), listed by ownership and
deleted by the garbage collection (``nodeflow.lifecycle.launch_template_gc`` decides which).

It decides which templates are the cluster's (named as nodeflow or Karpenter name theirs, with the cluster's,
a NodePool's and an EC2NodeClass's tags): nothing else is ever listed, so nothing else is ever deleted. It must not
decide what a template holds (``nodeflow.aws.ec2.launch_template_data``) nor when one is unused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nodeflow.aws.ec2.launch_template_data import (
    LAUNCH_TEMPLATE_PREFIX,
    LaunchTemplateSpec,
    launch_template_data,
    launch_template_name,
)
from nodeflow.aws.ec2.paging import paginate
from nodeflow.aws.ec2.tags import TAG_NODECLASS, TAG_NODEPOOL, cluster_tags, tag_list
from nodeflow.aws.errors import AlreadyExists, NotFound, aws_errors

__all__ = [
    "LaunchTemplate",
    "delete_launch_template",
    "ensure_launch_template",
    "is_launch_template_not_found",
    "list_launch_templates",
]

# The names of the templates a provisioner of the cluster made: nodeflow's, and Karpenter's (left from before nodeflow)
OWNED_LAUNCH_TEMPLATE_PREFIXES = (LAUNCH_TEMPLATE_PREFIX, "karpenter.k8s.aws/")
LAUNCH_TEMPLATE_NOT_FOUND_CODES = frozenset(
    {"InvalidLaunchTemplateName.NotFoundException", "InvalidLaunchTemplateId.NotFound"}
)


def ensure_launch_template(ec2: Any, spec: LaunchTemplateSpec) -> str:
    """Return the name of the launch template for ``spec``, creating it if missing (race-safe)."""
    name = launch_template_name(spec)
    with aws_errors():
        found = ec2.describe_launch_templates(Filters=[{"Name": "launch-template-name", "Values": [name]}])
    if found.get("LaunchTemplates"):
        return name
    tags = tag_list(spec.all_tags)
    try:
        with aws_errors():
            ec2.create_launch_template(
                LaunchTemplateName=name,
                LaunchTemplateData=launch_template_data(spec),
                TagSpecifications=[{"ResourceType": "launch-template", "Tags": tags}],
            )
    except AlreadyExists:
        pass  # another launch created it first: same name means same configuration
    return name


def is_launch_template_not_found(exc: BaseException) -> bool:
    """Whether ``exc`` says a launch template the call named does not exist (any more)."""
    return isinstance(exc, NotFound) and exc.code in LAUNCH_TEMPLATE_NOT_FOUND_CODES


@dataclass(frozen=True)
class LaunchTemplate:
    """A launch template a provisioner of the cluster made (``list_launch_templates``)."""

    id: str
    name: str
    node_class: str  # its karpenter.k8s.aws/ec2nodeclass tag
    created: datetime | None


def _owned_template(template: Mapping[str, Any], cluster_name: str) -> LaunchTemplate | None:
    """``template`` (a DescribeLaunchTemplates item) when a provisioner of ``cluster_name`` made it: named as nodeflow
    or Karpenter name theirs, and tagged with the cluster (``cluster_tags``), a NodePool and an EC2NodeClass."""
    tags = {str(t.get("Key")): str(t.get("Value")) for t in template.get("Tags") or []}
    name = str(template.get("LaunchTemplateName") or "")
    owned = (
        name.startswith(OWNED_LAUNCH_TEMPLATE_PREFIXES)
        and all(tags.get(k) == v for k, v in cluster_tags(cluster_name).items())
        and TAG_NODEPOOL in tags
        and TAG_NODECLASS in tags
    )
    if not owned or not template.get("LaunchTemplateId"):
        return None
    return LaunchTemplate(str(template["LaunchTemplateId"]), name, tags[TAG_NODECLASS], template.get("CreateTime"))


def list_launch_templates(ec2: Any, cluster_name: str) -> list[LaunchTemplate]:
    """The launch templates a provisioner of ``cluster_name`` made (``_owned_template``), by name. Nothing else is
    returned: a template of another cluster, or one without the ownership tags, is never a candidate for deletion."""
    filters = [{"Name": f"tag:{k}", "Values": [v]} for k, v in cluster_tags(cluster_name).items()]
    found = (
        _owned_template(t, cluster_name)
        for t in paginate(ec2, "describe_launch_templates", "LaunchTemplates", Filters=filters)
    )
    return sorted((t for t in found if t is not None), key=lambda t: t.name)


def delete_launch_template(ec2: Any, template: LaunchTemplate) -> bool:
    """Delete ``template`` (by id); False when it was gone already."""
    try:
        with aws_errors():
            ec2.delete_launch_template(LaunchTemplateId=template.id)
    except NotFound:
        return False
    return True
