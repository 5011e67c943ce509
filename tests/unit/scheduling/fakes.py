"""Small hand-made instance types for solver unit tests (the real catalog is tested elsewhere)."""

from __future__ import annotations

from nodeflow.api import labels as wk
from nodeflow.catalog.model import InstanceType, Offering, Overhead
from nodeflow.scheduling.requirements import Requirement, Requirements
from nodeflow.scheduling.types import NodePoolInput, PodInput

GI = 2**30 * 1000
ZONES = ("zone-a", "zone-b")


def itype(
    name: str,
    cpu: int,
    mem_gib: int,
    price: float,
    *,
    spot: float | None = None,
    zones: tuple[str, ...] = ZONES,
    arch: str = "amd64",
    pods: int = 110,
    extra: dict[str, int] | None = None,
    labels: dict[str, str] | None = None,
) -> InstanceType:
    family, size = name.split(".")
    capacity = {"cpu": cpu * 1000, "memory": mem_gib * GI, "pods": pods * 1000, **(extra or {})}
    offerings = [Offering(z, "on-demand", price) for z in zones]
    if spot is not None:
        offerings += [Offering(z, "spot", spot) for z in zones]
    # A node keeps 100m CPU and 1Gi of memory for itself.
    overhead = Overhead(kube_reserved={"cpu": 100, "memory": GI})
    allocatable = {k: v - overhead.total().get(k, 0) for k, v in capacity.items()}
    return InstanceType(
        name=name,
        labels={
            wk.LABEL_INSTANCE_TYPE: name,
            wk.LABEL_ARCH: arch,
            wk.LABEL_OS: "linux",
            wk.LABEL_INSTANCE_FAMILY: family,
            wk.LABEL_INSTANCE_CATEGORY: family[0],
            wk.LABEL_INSTANCE_SIZE: size,
            wk.LABEL_INSTANCE_CPU: str(cpu),
            **(labels or {}),
        },
        capacity=capacity,
        overhead=overhead,
        allocatable=allocatable,
        offerings=tuple(offerings),
    )


CATALOG = (
    itype("m.large", 2, 8, 0.10, spot=0.04),
    itype("m.xlarge", 4, 16, 0.20, spot=0.08),
    itype("m.2xlarge", 8, 32, 0.40, spot=0.16),
    itype("m.8xlarge", 32, 128, 1.60, spot=0.64),
    itype("c.large", 2, 4, 0.085, spot=0.035),
    itype("c.xlarge", 4, 8, 0.17, spot=0.07),
    itype("c.4xlarge", 16, 32, 0.68, spot=0.28),
    itype("r.large", 2, 16, 0.126, spot=0.05),
    itype("r.xlarge", 4, 32, 0.252, spot=0.10),
    itype("r.2xlarge", 8, 64, 0.504, spot=0.20),
    itype(
        "g.xlarge",
        4,
        16,
        0.526,
        extra={wk.RESOURCE_NVIDIA_GPU: 1000},
        labels={wk.LABEL_INSTANCE_GPU_COUNT: "1", wk.LABEL_INSTANCE_GPU_NAME: "t4"},
    ),
    itype("a.large", 2, 8, 0.08, spot=0.03, arch="arm64"),
)


def pool(name: str = "default", *requirements: Requirement, **kwargs: object) -> NodePoolInput:
    return NodePoolInput(
        name=name,
        requirements=Requirements(requirements),
        instance_types=kwargs.pop("instance_types", CATALOG),  # type: ignore[arg-type]
        **kwargs,  # type: ignore[arg-type]
    )


def pod(
    name: str,
    cpu: str = "1",
    mem: str = "1Gi",
    *,
    extra: dict[str, int] | None = None,
    requirements: tuple[Requirements, ...] = (Requirements(),),
    **kwargs: object,
) -> PodInput:
    from nodeflow.api.quantity import to_milli

    requests = {"cpu": to_milli(cpu), "memory": to_milli(mem), "pods": 1000, **(extra or {})}
    return PodInput(key=f"default/{name}", requests=requests, requirements=requirements, **kwargs)  # type: ignore[arg-type]
