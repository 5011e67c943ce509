"""Instance profiles: the one nodeflow makes for an EC2NodeClass with ``spec.role``, and its name.

It decides the profile's name (``instance_profile_name``, which the stack's IAM policy matches: ``infra/iam.py``),
that the class's role is its only role, and that a profile Karpenter made for an adopted class is kept while it
holds the role. It must not create or change roles, nor touch a profile it did not name (other than reading it).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from nodeflow.aws.ec2.tags import TAG_NODECLASS, cluster_tags
from nodeflow.aws.errors import AccessDenied, AlreadyExists, InvalidRequest, NotFound, aws_errors

__all__ = ["ensure_instance_profile", "instance_profile_name"]


def instance_profile_name(cluster_name: str, node_class_name: str) -> str:
    """Deterministic instance profile name for (cluster, node class); at most 128 characters."""
    digest = hashlib.sha256(f"{cluster_name}/{node_class_name}".encode()).hexdigest()[:16]
    safe = re.sub(r"[^\w+=,.@-]", "-", cluster_name)[:100]
    return f"{safe}_{digest}"


def _holds(iam: Any, profile: str, role_name: str) -> bool:
    """Whether instance profile ``profile`` exists and its (first) role is ``role_name``; False when it cannot be
    read (gone, or not readable: nodeflow may read only its own and Karpenter's, ``infra/iam.py``)."""
    try:
        with aws_errors():
            roles = iam.get_instance_profile(InstanceProfileName=profile)["InstanceProfile"].get("Roles") or []
    except (NotFound, AccessDenied, InvalidRequest):
        return False
    return bool(roles) and roles[0].get("RoleName") == role_name


def ensure_instance_profile(
    iam: Any, cluster_name: str, node_class_name: str, role: str, current: str | None = None
) -> str:
    """Create (if missing) the node class's instance profile and make ``role`` its only role. Idempotent.

    ``current`` (the class's ``status.instanceProfile``) is kept while it holds ``role``, as Karpenter keeps it: the
    profile Karpenter created for a class nodeflow adopts (``<cluster>_<number>``, under the path
    ``/karpenter/<region>/<cluster>/<uid>/``) goes on being used, no second profile is made."""
    role_name = role.rsplit("/", 1)[-1]  # accept a role ARN too
    name = instance_profile_name(cluster_name, node_class_name)
    if current and current != name and _holds(iam, current, role_name):
        return current
    profile = _get_or_create(iam, name, cluster_name, node_class_name)
    roles = [r["RoleName"] for r in profile.get("Roles", [])]
    if roles != [role_name]:
        _make_only_role(iam, name, roles, role_name)
    return name


def _get_or_create(iam: Any, name: str, cluster_name: str, node_class_name: str) -> dict[str, Any]:
    """The instance profile ``name`` (GetInstanceProfile), created with the cluster's and the class's tags when
    missing; a concurrent creation is read back."""
    try:
        with aws_errors():
            profile: dict[str, Any] = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
            return profile
    except NotFound:
        pass
    tags = [{"Key": k, "Value": v} for k, v in {**cluster_tags(cluster_name), TAG_NODECLASS: node_class_name}.items()]
    try:
        with aws_errors():
            profile = iam.create_instance_profile(InstanceProfileName=name, Tags=tags)["InstanceProfile"]
    except AlreadyExists:
        with aws_errors():
            profile = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
    return profile


def _make_only_role(iam: Any, name: str, roles: list[str], role_name: str) -> None:
    """Remove every role of profile ``name`` but ``role_name``, then add ``role_name`` when it was not there. A
    LimitExceeded answer is fine when a concurrent caller added the same role first."""
    for other in roles:
        if other != role_name:
            try:
                with aws_errors():
                    iam.remove_role_from_instance_profile(InstanceProfileName=name, RoleName=other)
            except NotFound:
                pass
    if role_name in roles:
        return
    try:
        with aws_errors():
            iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=role_name)
    except InvalidRequest as exc:
        if exc.code != "LimitExceeded":
            raise
        with aws_errors():
            now = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"].get("Roles", [])
        if [r["RoleName"] for r in now] != [role_name]:
            raise
