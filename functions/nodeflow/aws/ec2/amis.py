"""AMIs: the images an EC2NodeClass's ``amiSelectorTerms`` select, through SSM for aliases and SSM parameters.

It decides the SSM parameter names of an alias (``al2023@latest``, ``bottlerocket@v1.20.1``, Windows), the
DescribeImages query of a term, and which image wins per architecture (the newest). It must not judge
deprecation (no clock here: ``deprecation_time`` is reported) nor render user data (``nodeflow.aws.userdata``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nodeflow.api.karpenter_ec2 import AMISelectorTerm
from nodeflow.aws.ec2.paging import paginate
from nodeflow.aws.ec2.tags import tag_filters
from nodeflow.aws.errors import InvalidRequest, aws_errors

__all__ = ["WINDOWS2025_MIN_MINOR", "AMIImage", "alias_ssm_parameters", "resolve_amis"]

# EC2's architecture names -> kubernetes.io/arch
_ARCH = {"x86_64": "amd64", "arm64": "arm64", "x86_64_mac": "amd64", "arm64_mac": "arm64"}


@dataclass(frozen=True)
class AMIImage:
    id: str
    name: str | None
    architecture: str  # kubernetes.io/arch value: amd64 / arm64
    creation_date: str | None = None
    deprecation_time: str | None = None  # reported, not judged (no clock here)


WINDOWS2025_MIN_MINOR = 35  # EKS publishes Windows Server 2025 AMIs from Kubernetes 1.35 on


def _minor(kubernetes_version: str) -> int:
    try:
        return int(kubernetes_version.split(".")[1])
    except (IndexError, ValueError):
        return 10**6  # not "major.minor": do not refuse on a version we cannot read


def alias_ssm_parameters(alias: str, kubernetes_version: str) -> dict[str, str]:
    """SSM parameter name -> kubernetes.io/arch for an AMI alias ("al2023@latest", "bottlerocket@v1.20.1")."""
    family, _, version = alias.partition("@")
    latest = version == "latest"
    k8s = kubernetes_version
    if family == "al2023":
        return {
            f"/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2023/{arch}/standard/"
            + ("recommended" if latest else f"amazon-eks-node-al2023-{arch}-standard-{k8s}-{version}")
            + "/image_id": _ARCH[arch]
            for arch in ("x86_64", "arm64")
        }
    if family == "al2":
        x86 = "recommended" if latest else f"amazon-eks-node-{k8s}-{version}"
        arm = "recommended" if latest else f"amazon-eks-arm64-node-{k8s}-{version}"
        return {
            f"/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2/{x86}/image_id": "amd64",
            f"/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2-arm64/{arm}/image_id": "arm64",
        }
    if family == "bottlerocket":
        ver = "latest" if latest else version.lstrip("v")
        return {
            f"/aws/service/bottlerocket/aws-k8s-{k8s}/{arch}/{ver}/image_id": _ARCH[arch]
            for arch in ("x86_64", "arm64")
        }
    if family in ("windows2019", "windows2022", "windows2025"):
        year = family.removeprefix("windows")
        if year == "2025" and _minor(k8s) < WINDOWS2025_MIN_MINOR:
            raise InvalidRequest(
                f"AMI alias {alias!r}: Windows Server 2025 requires Kubernetes 1.{WINDOWS2025_MIN_MINOR} or newer, "
                f"the cluster runs {k8s}"
            )
        return {
            f"/aws/service/ami-windows-latest/Windows_Server-{year}-English-Core-EKS_Optimized-{k8s}/image_id": "amd64"
        }
    raise InvalidRequest(f"unsupported AMI alias {alias!r}")


def resolve_amis(
    ec2: Any, ssm: Any, terms: Sequence[AMISelectorTerm], kubernetes_version: str | None
) -> tuple[AMIImage, ...]:
    """The images ``terms`` select, one per architecture (sorted): an alias needs ``kubernetes_version``."""
    candidates: list[AMIImage] = []
    for term in terms:
        if term.alias:
            if not kubernetes_version:
                raise InvalidRequest(f"AMI alias {term.alias!r} needs the cluster's Kubernetes version")
            candidates.extend(_amis_from_ssm(ec2, ssm, alias_ssm_parameters(term.alias, kubernetes_version)))
        elif term.ssm_parameter:
            candidates.extend(_amis_from_ssm(ec2, ssm, {term.ssm_parameter: ""}))
        else:
            candidates.extend(_describe_images(ec2, **_image_query(term)))
    # Newest creation date wins per architecture (ties: highest id, for determinism).
    best: dict[str, AMIImage] = {}
    for ami in candidates:
        cur = best.get(ami.architecture)
        if cur is None or (ami.creation_date or "", ami.id) > (cur.creation_date or "", cur.id):
            best[ami.architecture] = ami
    return tuple(best[arch] for arch in sorted(best))


def _image_query(term: AMISelectorTerm) -> dict[str, Any]:
    filters: list[dict[str, Any]] = [{"Name": "state", "Values": ["available"]}]
    query: dict[str, Any] = {}
    if term.id:
        filters.append({"Name": "image-id", "Values": [term.id]})
    if term.name:
        filters.append({"Name": "name", "Values": [term.name]})
    filters.extend(tag_filters(term.tags))
    if term.owner:
        query["Owners"] = [term.owner]
    elif term.name and not term.id:
        # Karpenter: a name without an owner means images of this account or Amazon's.
        query["Owners"] = ["self", "amazon"]
    query["Filters"] = filters
    return query


def _describe_images(ec2: Any, **query: Any) -> list[AMIImage]:
    images = []
    for img in paginate(ec2, "describe_images", "Images", **query):
        arch = _ARCH.get(img.get("Architecture", ""))
        if arch is None:
            continue
        images.append(
            AMIImage(
                id=img["ImageId"],
                name=img.get("Name"),
                architecture=arch,
                creation_date=img.get("CreationDate"),
                deprecation_time=img.get("DeprecationTime"),
            )
        )
    return images


def _amis_from_ssm(ec2: Any, ssm: Any, parameters: Mapping[str, str]) -> list[AMIImage]:
    """Read image ids from SSM (missing parameters skipped), then describe them."""
    ids: dict[str, str] = {}
    names = list(parameters)
    for i in range(0, len(names), 10):
        with aws_errors():
            out = ssm.get_parameters(Names=names[i : i + 10])
        for p in out.get("Parameters", []):
            ids[p["Value"]] = parameters.get(p["Name"], "")
    if not ids:
        return []
    described = {a.id: a for a in _describe_images(ec2, ImageIds=sorted(ids))} if ids else {}
    result = []
    for image_id, arch in ids.items():
        ami = described.get(image_id)
        if ami is None:
            if not arch:
                continue  # unknown architecture and not describable: unusable
            ami = AMIImage(id=image_id, name=None, architecture=arch)
        result.append(ami)
    return result
