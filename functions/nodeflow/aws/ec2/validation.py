"""Authorization dry runs: the EC2NodeClass ``ValidationSucceeded`` condition, as Karpenter's nodeclass
validation asks it (CreateLaunchTemplate, CreateFleet, RunInstances, each with ``DryRun=True``).

It decides which calls are asked, with which parameters and tags (those a launch would send, so an IAM policy
conditioned on request tags sees what it would see), and how EC2's answer reads: allowed, denied (and why:
a permissions boundary, a service control policy, no policy, the AMI), or inconclusive (raised typed). It must
not create anything, nor write the condition (``nodeflow.lifecycle.nodeclass`` does, and caches the outcome).

Must not touch: what a class resolves to (``node_class``) or whether it is Ready (``nodeflow.lifecycle.nodeclass``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nodeflow.aws.ec2.launch_template_data import LAUNCH_TEMPLATE_PREFIX
from nodeflow.aws.ec2.node_class import ResolvedNodeClass
from nodeflow.aws.ec2.tags import TAG_NODECLASS, TAG_NODEPOOL, cluster_tags, tag_list
from nodeflow.aws.errors import AccessDenied, AwsError, InvalidRequest, aws_errors, map_error

__all__ = ["DRY_RUN_CHECKS", "AuthorizationDenied", "dry_run_launch_authorization"]

# The calls a launch makes, in the order Karpenter's validation checks them, with its condition reasons.
DRY_RUN_CHECKS: tuple[tuple[str, str], ...] = (
    ("CreateLaunchTemplate", "CreateLaunchTemplateAuthCheckFailed"),
    ("CreateFleet", "CreateFleetAuthCheckFailed"),
    ("RunInstances", "RunInstancesAuthCheckFailed"),
)
_DRY_RUN_INSTANCE_TYPE = {"amd64": "m5.large", "arm64": "m6g.large"}  # any type of the AMI's architecture


@dataclass(frozen=True)
class AuthorizationDenied:
    """EC2 answered a dry run of ``operation`` with an authorization error (``code``: UnauthorizedOperation, ...)."""

    operation: str
    reason: str  # the condition reason, e.g. CreateFleetAuthCheckFailed
    code: str
    why: str  # why, in one line: a permissions boundary, a service control policy, no identity-based policy

    @property
    def message(self) -> str:
        return f"not authorized to call ec2:{self.operation} (dry run answered {self.code}): {self.why}"


@dataclass(frozen=True)
class _Probe:
    """What every dry run of one class sends: an image, an instance type of its architecture, the class's security
    groups and instance profile, and the tags a launch would put on what it creates."""

    image_id: str
    instance_type: str
    groups: list[str]
    profile: dict[str, str] | None
    tags: list[dict[str, str]]

    def tag_specifications(self, *resource_types: str) -> list[dict[str, Any]]:
        return [{"ResourceType": rt, "Tags": self.tags} for rt in resource_types]

    def with_profile(self, params: dict[str, Any]) -> dict[str, Any]:
        if self.profile:
            params["IamInstanceProfile"] = self.profile
        return params


def dry_run_launch_authorization(
    ec2: Any, resolved: ResolvedNodeClass, cluster_name: str, tags: Mapping[str, str] | None = None
) -> AuthorizationDenied | None:
    """Whether the calls a launch makes for ``resolved``'s class are authorized, asked with DryRun=True as Karpenter's
    EC2NodeClass validation asks them: CreateLaunchTemplate, then CreateFleet (on-demand, instant), then RunInstances
    in each subnet (the first that is allowed is enough; otherwise the first subnet's answer counts), each with the
    class's tags and the cluster's ownership tags as a launch sends them (an IAM policy conditioned on request tags
    sees what it would see). CreateFleet names one of the class's launch templates (the first by name that carries the
    class's and the cluster's tags); before the class's first launch there is none, and only CreateLaunchTemplate
    and RunInstances are asked. Returns the first denial, or None. An answer that is not an authorization one
    (throttling, EC2 unavailable, ...) is raised typed: the check is inconclusive. Nothing is created."""
    probe = _probe(resolved, cluster_name, tags)
    denied = _dry_run_create_launch_template(ec2, resolved, probe)
    if denied is not None:
        return denied
    template = _class_launch_template(ec2, resolved, cluster_name)
    if template is not None:  # CreateFleet launches from a template: before the class's first launch there is none
        denied = _dry_run_create_fleet(ec2, resolved, probe, template)
        if denied is not None:
            return denied
    return _dry_run_run_instances(ec2, resolved, probe)


def _probe(resolved: ResolvedNodeClass, cluster_name: str, tags: Mapping[str, str] | None) -> _Probe:
    ami = resolved.amis[0]
    all_tags = {**dict(tags or {}), **cluster_tags(cluster_name), TAG_NODEPOOL: "", TAG_NODECLASS: resolved.name}
    return _Probe(
        image_id=ami.id,
        instance_type=_DRY_RUN_INSTANCE_TYPE.get(ami.architecture, "m5.large"),
        groups=[g.id for g in resolved.security_groups],
        profile={"Name": resolved.instance_profile} if resolved.instance_profile else None,
        tags=tag_list(all_tags),
    )


def _dry_run_create_launch_template(ec2: Any, resolved: ResolvedNodeClass, probe: _Probe) -> AuthorizationDenied | None:
    operation, reason = DRY_RUN_CHECKS[0]
    data = probe.with_profile(
        {"ImageId": probe.image_id, "InstanceType": probe.instance_type, "SecurityGroupIds": probe.groups}
    )
    return _dry_run(
        ec2.create_launch_template,
        operation,
        reason,
        LaunchTemplateName=LAUNCH_TEMPLATE_PREFIX + "validation-" + resolved.name,
        LaunchTemplateData=data,
        TagSpecifications=probe.tag_specifications("launch-template"),
    )


def _class_launch_template(ec2: Any, resolved: ResolvedNodeClass, cluster_name: str) -> str | None:
    """The first (by name) launch template tagged with the class and the cluster, or None before its first launch."""
    with aws_errors():
        found = ec2.describe_launch_templates(
            Filters=[
                {"Name": f"tag:{TAG_NODECLASS}", "Values": [resolved.name]},
                {"Name": f"tag:kubernetes.io/cluster/{cluster_name}", "Values": ["owned"]},
            ]
        ).get("LaunchTemplates", [])
    return min(str(t["LaunchTemplateName"]) for t in found) if found else None


def _dry_run_create_fleet(
    ec2: Any, resolved: ResolvedNodeClass, probe: _Probe, template: str
) -> AuthorizationDenied | None:
    operation, reason = DRY_RUN_CHECKS[1]
    return _dry_run(
        ec2.create_fleet,
        operation,
        reason,
        Type="instant",
        TargetCapacitySpecification={"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "on-demand"},
        OnDemandOptions={"AllocationStrategy": "lowest-price"},
        LaunchTemplateConfigs=[
            {
                "LaunchTemplateSpecification": {"LaunchTemplateName": template, "Version": "$Latest"},
                "Overrides": [{"InstanceType": probe.instance_type, "SubnetId": s.id} for s in resolved.subnets[:1]],
            }
        ],
        TagSpecifications=probe.tag_specifications("instance", "volume", "fleet"),
    )


def _dry_run_run_instances(ec2: Any, resolved: ResolvedNodeClass, probe: _Probe) -> AuthorizationDenied | None:
    """RunInstances dry runs, subnet by subnet: None at the first allowed; else the first subnet's answer."""
    operation, reason = DRY_RUN_CHECKS[2]
    first: AuthorizationDenied | AwsError | None = None
    for subnet in resolved.subnets:
        params = probe.with_profile(
            {
                "ImageId": probe.image_id,
                "InstanceType": probe.instance_type,
                "MinCount": 1,
                "MaxCount": 1,
                "SubnetId": subnet.id,
                "SecurityGroupIds": probe.groups,
                "TagSpecifications": probe.tag_specifications("instance", "volume"),
            }
        )
        try:
            denied = _dry_run(ec2.run_instances, operation, reason, **params)
        except AwsError as exc:
            first = first or exc
            continue
        if denied is None:
            return None
        first = first or denied
    if isinstance(first, AwsError):
        raise first
    return first


def _dry_run(call: Callable[..., Any], operation: str, reason: str, **params: Any) -> AuthorizationDenied | None:
    """None when EC2 answers DryRunOperation (the call would have been allowed); the denial when it answers an
    authorization error; any other error is raised typed (``nodeflow.aws.errors``): the check is inconclusive."""
    from botocore.exceptions import ClientError

    try:
        call(DryRun=True, **params)
    except ClientError as exc:
        error = exc.response.get("Error", {}) or {}
        code = str(error.get("Code", "") or "")
        if code == "DryRunOperation":
            return None
        typed = map_error(exc)
        if isinstance(typed, AccessDenied):
            return AuthorizationDenied(operation, reason, code, _denial_why(str(error.get("Message", ""))))
        raise typed from exc
    raise InvalidRequest(f"ec2:{operation} with DryRun=True did not answer DryRunOperation", code="DryRunIgnored")


def _denial_why(message: str) -> str:
    if "explicit deny in a permissions boundary" in message:
        return "denied by a permissions boundary"
    if "explicit deny in a service control policy" in message:
        return "denied by a service control policy"
    if "Not authorized for images" in message:
        return "not authorized for the AMI"
    return "no identity-based policy allows it"
