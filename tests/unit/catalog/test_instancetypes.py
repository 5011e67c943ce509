"""Resolution of instance type facts into scheduler InstanceTypes, against hand-computed values."""

from __future__ import annotations

import pytest

from nodeflow.api import labels as L
from nodeflow.catalog.instancetypes import (
    NodeClassSettings,
    eni_limited_pods,
    kube_reserved_cpu_milli,
    name_labels,
    resolve_instance_type,
    resolve_instance_types,
)
from nodeflow.catalog.model import CatalogData, Device, InstanceType, InstanceTypeInfo
from nodeflow.catalog.offline import load_offline

MI = 2**20 * 1000  # one MiB in milli-units
GI = 2**30 * 1000
DEFAULT = NodeClassSettings()


@pytest.fixture(scope="module")
def data() -> CatalogData:
    return load_offline("us-east-1")


def resolve(data: CatalogData, name: str, settings: NodeClassSettings = DEFAULT) -> InstanceType:
    it = resolve_instance_type(data, name, settings)
    assert it is not None, name
    return it


# -- concrete types, default AL2023 node class -----------------------------------------------------
def test_m5_large(data: CatalogData) -> None:
    it = resolve(data, "m5.large")
    # 8192 MiB - ceil(8192 x 0.075) = 8192 - 615; pods = 3 ENIs x (10 - 1) + 2
    assert it.capacity == {"cpu": 2000, "memory": 7577 * MI, "ephemeral-storage": 20 * GI, "pods": 29_000}
    assert it.overhead.kube_reserved == {"cpu": 70, "memory": (11 * 29 + 255) * MI, "ephemeral-storage": GI}
    assert it.overhead.system_reserved == {}
    assert it.overhead.eviction_threshold == {"memory": 100 * MI, "ephemeral-storage": 2 * GI}
    assert it.allocatable == {
        "cpu": 1930,
        "memory": (7577 - 574 - 100) * MI,
        "ephemeral-storage": 17 * GI,
        "pods": 29_000,
    }
    assert it.labels == {
        L.LABEL_INSTANCE_TYPE: "m5.large",
        L.LABEL_ARCH: "amd64",
        L.LABEL_OS: "linux",
        L.LABEL_REGION: "us-east-1",
        L.LABEL_INSTANCE_CATEGORY: "m",
        L.LABEL_INSTANCE_FAMILY: "m5",
        L.LABEL_INSTANCE_GENERATION: "5",
        L.LABEL_INSTANCE_SIZE: "large",
        L.LABEL_INSTANCE_CPU: "2",
        L.LABEL_INSTANCE_CPU_MANUFACTURER: "intel",
        L.LABEL_INSTANCE_CPU_SUSTAINED_CLOCK: "3100",
        L.LABEL_INSTANCE_MEMORY: "8192",
        L.LABEL_INSTANCE_HYPERVISOR: "nitro",
        L.LABEL_INSTANCE_ENCRYPTION_IN_TRANSIT: "false",
        L.LABEL_INSTANCE_NETWORK_BANDWIDTH: "750",
        L.LABEL_INSTANCE_EBS_BANDWIDTH: "4750",
        L.LABEL_INSTANCE_CAPABILITY_FLEX: "false",
    }


def test_m5_large_offerings(data: CatalogData) -> None:
    it = resolve(data, "m5.large")
    zones = data.offerings["m5.large"]
    assert len(it.offerings) == 2 * len(zones)
    assert [(o.zone, o.capacity_type) for o in it.offerings] == sorted(
        (z, c) for z in zones for c in ("on-demand", "spot")
    )
    for offering in it.offerings:
        assert offering.available
        assert offering.zone_id == data.zones[offering.zone]
        if offering.capacity_type == "on-demand":
            assert offering.price == pytest.approx(0.096)
        else:
            assert offering.price == data.spot_prices[("m5.large", offering.zone)] < 0.096


def test_graviton_loses_64_mib(data: CatalogData) -> None:
    it = resolve(data, "m6g.large")
    # (8192 - 64) - ceil(8128 x 0.075) = 8128 - 610
    assert it.capacity["memory"] == 7518 * MI
    assert it.allocatable["memory"] == (7518 - 574 - 100) * MI
    assert it.labels[L.LABEL_ARCH] == "arm64"
    assert it.labels[L.LABEL_INSTANCE_CPU_MANUFACTURER] == "aws"


def test_p4d_gpu_and_efa(data: CatalogData) -> None:
    it = resolve(data, "p4d.24xlarge")
    pods = 15 * 49 + 2  # 737, the EKS eni-max-pods value
    memory = 1179648 - 88474  # ceil(1179648 x 0.075) = 88474
    assert it.capacity == {
        "cpu": 96_000,
        "memory": memory * MI,
        "ephemeral-storage": 20 * GI,
        "pods": pods * 1000,
        "nvidia.com/gpu": 8000,
        "vpc.amazonaws.com/efa": 4000,
    }
    # 60 + 10 + 10 + 92000 x 0.25 %
    assert it.overhead.kube_reserved["cpu"] == 310
    assert it.overhead.kube_reserved["memory"] == (11 * pods + 255) * MI
    assert it.allocatable["memory"] == (memory - (11 * pods + 255) - 100) * MI
    assert it.allocatable["nvidia.com/gpu"] == 8000
    assert {k: v for k, v in it.labels.items() if "gpu" in k or "nvme" in k} == {
        L.LABEL_INSTANCE_GPU_NAME: "a100",
        L.LABEL_INSTANCE_GPU_MANUFACTURER: "nvidia",
        L.LABEL_INSTANCE_GPU_COUNT: "8",
        L.LABEL_INSTANCE_GPU_MEMORY: "40960",
        L.LABEL_INSTANCE_LOCAL_NVME: "8000",
    }
    assert it.labels[L.LABEL_INSTANCE_NETWORK_BANDWIDTH] == "400000"


def test_g5_xlarge(data: CatalogData) -> None:
    it = resolve(data, "g5.xlarge")
    assert it.capacity["memory"] == (16384 - 1229) * MI
    assert it.capacity["pods"] == (4 * 14 + 2) * 1000
    assert it.capacity["nvidia.com/gpu"] == 1000
    assert it.overhead.kube_reserved["cpu"] == 80
    assert it.labels[L.LABEL_INSTANCE_GPU_NAME] == "a10g"
    assert it.labels[L.LABEL_INSTANCE_LOCAL_NVME] == "250"


def test_inf2_neuron(data: CatalogData) -> None:
    it = resolve(data, "inf2.xlarge")
    assert it.capacity["aws.amazon.com/neuron"] == 1000
    assert it.capacity["aws.amazon.com/neuroncore"] == 2000
    assert "nvidia.com/gpu" not in it.capacity
    assert it.labels[L.LABEL_INSTANCE_CATEGORY] == "inf"
    assert it.labels[L.LABEL_INSTANCE_GENERATION] == "2"
    assert it.labels[L.LABEL_INSTANCE_ACCELERATOR_NAME] == "inferentia2"
    assert it.labels[L.LABEL_INSTANCE_ACCELERATOR_MANUFACTURER] == "aws"
    assert it.labels[L.LABEL_INSTANCE_ACCELERATOR_COUNT] == "1"
    assert L.LABEL_INSTANCE_GPU_NAME not in it.labels


def test_trn1_neuron_and_efa(data: CatalogData) -> None:
    it = resolve(data, "trn1.32xlarge")
    assert it.capacity["aws.amazon.com/neuron"] == 16_000
    assert it.capacity["aws.amazon.com/neuroncore"] == 32_000
    assert it.capacity["vpc.amazonaws.com/efa"] == 8000
    assert it.labels[L.LABEL_INSTANCE_ACCELERATOR_NAME] == "trainium"
    assert it.labels[L.LABEL_INSTANCE_CATEGORY] == "trn"


def test_efa_single_interface(data: CatalogData) -> None:
    assert resolve(data, "c5n.18xlarge").capacity["vpc.amazonaws.com/efa"] == 1000


def test_bare_metal_and_flex_labels(data: CatalogData) -> None:
    metal = resolve(data, "m7g.metal")
    assert metal.labels[L.LABEL_INSTANCE_HYPERVISOR] == ""
    assert metal.labels[L.LABEL_INSTANCE_SIZE] == "metal"
    flex = resolve(data, "c7i-flex.large")
    assert flex.labels[L.LABEL_INSTANCE_CAPABILITY_FLEX] == "true"
    assert flex.labels[L.LABEL_INSTANCE_FAMILY] == "c7i-flex"
    assert flex.labels[L.LABEL_INSTANCE_GENERATION] == "7"


# -- node class settings ---------------------------------------------------------------------------
def test_pods_per_core_caps_pods(data: CatalogData) -> None:
    it = resolve(data, "m5.large", NodeClassSettings(pods_per_core=10))
    assert it.capacity["pods"] == 20_000
    assert it.overhead.kube_reserved["memory"] == (11 * 20 + 255) * MI
    # podsPerCore above the ENI limit changes nothing.
    assert resolve(data, "m5.large", NodeClassSettings(pods_per_core=50)).capacity["pods"] == 29_000
    # Bottlerocket ignores podsPerCore.
    bottlerocket = NodeClassSettings(ami_family="Bottlerocket", pods_per_core=10)
    assert resolve(data, "m5.large", bottlerocket).capacity["pods"] == 29_000


def test_max_pods_overrides_eni_limit(data: CatalogData) -> None:
    it = resolve(data, "m5.large", NodeClassSettings(max_pods=110))
    assert it.capacity["pods"] == 110_000
    assert it.overhead.kube_reserved["memory"] == (11 * 110 + 255) * MI
    both = resolve(data, "m5.large", NodeClassSettings(max_pods=110, pods_per_core=4))
    assert both.capacity["pods"] == 8000


def test_reserved_enis(data: CatalogData) -> None:
    assert resolve(data, "m5.large", NodeClassSettings(reserved_enis=1)).capacity["pods"] == 20_000
    assert resolve(data, "m5.large", NodeClassSettings(reserved_enis=3)).capacity["pods"] == 0


def test_kube_and_system_reserved_overrides(data: CatalogData) -> None:
    settings = NodeClassSettings.create(
        kube_reserved={"cpu": "200m", "memory": "1Gi"}, system_reserved={"cpu": "100m", "memory": "100Mi"}
    )
    it = resolve(data, "m5.large", settings)
    assert it.overhead.kube_reserved == {"cpu": 200, "memory": 1024 * MI, "ephemeral-storage": GI}
    assert it.overhead.system_reserved == {"cpu": 100, "memory": 100 * MI}
    assert it.allocatable["cpu"] == 1700
    assert it.allocatable["memory"] == (7577 - 1024 - 100 - 100) * MI


def test_allocatable_never_negative(data: CatalogData) -> None:
    it = resolve(data, "t3.micro", NodeClassSettings.create(kube_reserved={"memory": "100Gi"}))
    assert it.allocatable["memory"] == 0


def test_raid0_uses_instance_store(data: CatalogData) -> None:
    raid0 = NodeClassSettings(instance_store_policy="RAID0")
    it = resolve(data, "m5d.large", raid0)
    assert it.capacity["ephemeral-storage"] == 75 * 10**9 * 1000  # 75 GB, decimal like EC2
    assert it.overhead.eviction_threshold["ephemeral-storage"] == 75 * 10**8 * 1000
    assert it.allocatable["ephemeral-storage"] == 75 * 10**12 - GI - 75 * 10**11
    # No instance store: the root volume.
    assert resolve(data, "m5.large", raid0).capacity["ephemeral-storage"] == 20 * GI


def test_root_volume_size(data: CatalogData) -> None:
    it = resolve(data, "m5.large", NodeClassSettings(root_volume_bytes=100 * 2**30))
    assert it.capacity["ephemeral-storage"] == 100 * GI
    assert it.overhead.eviction_threshold["ephemeral-storage"] == 10 * GI


def test_eviction_hard_and_soft_take_the_max(data: CatalogData) -> None:
    settings = NodeClassSettings.create(
        eviction_hard={"memory.available": "500Mi", "nodefs.available": "15%"},
        eviction_soft={"memory.available": "1Gi"},
    )
    it = resolve(data, "m5.large", settings)
    assert it.overhead.eviction_threshold == {
        "memory": 1024 * MI,
        "ephemeral-storage": 20 * 2**30 * 15 // 100 * 1000,
    }
    bottlerocket = NodeClassSettings.create(
        ami_family="Bottlerocket",
        eviction_hard={"memory.available": "500Mi"},
        eviction_soft={"memory.available": "1Gi"},
    )
    assert resolve(data, "m5.large", bottlerocket).overhead.eviction_threshold["memory"] == 500 * MI


def test_eviction_percentages(data: CatalogData) -> None:
    it = resolve(data, "m5.large", NodeClassSettings.create(eviction_hard={"memory.available": "5%"}))
    # ceil(7577 MiB x 5 %) in bytes
    assert it.overhead.eviction_threshold["memory"] == -(-7577 * 2**20 * 5 // 100) * 1000
    off = resolve(data, "m5.large", NodeClassSettings.create(eviction_hard={"nodefs.available": "100%"}))
    assert off.overhead.eviction_threshold["ephemeral-storage"] == 0


def test_vm_memory_overhead_percent(data: CatalogData) -> None:
    it = resolve(data, "m5.large", NodeClassSettings(vm_memory_overhead_percent=0.0))
    assert it.capacity["memory"] == 8192 * MI


def test_windows_family(data: CatalogData) -> None:
    windows = NodeClassSettings(ami_family="Windows2022")
    it = resolve(data, "m5.large", windows)
    assert it.labels[L.LABEL_OS] == "windows"
    assert it.labels[L.LABEL_WINDOWS_BUILD] == "10.0.20348"
    assert it.capacity["pods"] == 110_000
    assert it.capacity["ephemeral-storage"] == 50 * GI
    assert it.capacity[L.RESOURCE_PRIVATE_IPV4] == 9000
    assert resolve_instance_type(data, "m6g.large", windows) is None  # no arm64 Windows
    names = {i.name for i in resolve_instance_types(data, windows)}
    assert names
    assert all(data.infos[n].architecture == "amd64" for n in names)


def test_unavailable_offerings(data: CatalogData) -> None:
    unavailable = frozenset({("m5.large", "us-east-1a", "spot")})
    it = resolve_instance_type(data, "m5.large", DEFAULT, unavailable)
    assert it is not None
    flags = {(o.zone, o.capacity_type): o.available for o in it.offerings}
    assert flags.pop(("us-east-1a", "spot")) is False
    assert all(flags.values())
    # The cached default resolution is untouched.
    assert all(o.available for o in resolve(data, "m5.large").offerings)


def test_every_type_is_consistent(data: CatalogData) -> None:
    types = resolve_instance_types(data, DEFAULT)
    assert len(types) >= 600
    assert [t.name for t in types] == sorted(t.name for t in types)
    for it in types:
        assert it.offerings
        assert set(it.allocatable) == set(it.capacity)
        assert all(v >= 0 for v in it.allocatable.values())
        assert it.labels[L.LABEL_OS] == "linux"
        keys = [(o.zone, o.capacity_type) for o in it.offerings]
        assert keys == sorted(set(keys))


def test_results_are_cached(data: CatalogData) -> None:
    first = resolve_instance_types(data, NodeClassSettings(max_pods=58))
    second = resolve_instance_types(data, NodeClassSettings(max_pods=58))
    assert first is not second
    assert all(a is b for a, b in zip(first, second, strict=True))


# -- hand-built facts ------------------------------------------------------------------------------
def catalog_of(info: InstanceTypeInfo) -> CatalogData:
    return CatalogData(
        region="us-west-2",
        infos={info.name: info},
        zones={"us-west-2a": "usw2-az1"},
        offerings={info.name: ("us-west-2a",)},
        on_demand_prices={info.name: 1.0},
        spot_prices={},
    )


def test_amd_and_habana_gpus() -> None:
    info = InstanceTypeInfo(
        name="x9z.mixed",
        vcpus=8,
        memory_mib=32768,
        architecture="amd64",
        supported_architectures=("x86_64",),
        gpus=(Device("Radeon Pro V520", "AMD", 2, 8192), Device("Gaudi HL-205", "Habana", 4, 32768)),
        max_enis=4,
        ipv4_per_eni=15,
        usage_classes=("on-demand",),
        supported_os=("linux", "windows"),
    )
    it = resolve(catalog_of(info), "x9z.mixed")
    assert it.capacity["amd.com/gpu"] == 2000
    assert it.capacity["habana.ai/gaudi"] == 4000
    assert L.LABEL_INSTANCE_GPU_NAME not in it.labels  # Karpenter labels only single-GPU-kind types
    assert [(o.zone, o.capacity_type, o.zone_id) for o in it.offerings] == [("us-west-2a", "on-demand", "usw2-az1")]


def test_gpu_name_is_kebab_case() -> None:
    info = InstanceTypeInfo(
        name="g6e.xlarge",
        vcpus=4,
        memory_mib=32768,
        architecture="amd64",
        supported_architectures=("x86_64",),
        gpus=(Device("L40S Tensor Core", "NVIDIA", 1, 46068),),
        usage_classes=("on-demand", "spot"),
    )
    it = resolve(catalog_of(info), "g6e.xlarge")
    assert it.labels[L.LABEL_INSTANCE_GPU_NAME] == "l40s-tensor-core"
    assert it.offerings[0].capacity_type == "on-demand"
    assert len(it.offerings) == 1  # no spot price known -> no spot offering


def test_type_without_offerings_is_left_out() -> None:
    info = InstanceTypeInfo(name="m5.large", vcpus=2, memory_mib=8192, architecture="amd64")
    data = catalog_of(info)
    assert resolve_instance_types(data, DEFAULT) == []  # no usage classes -> nothing to buy


# -- pure helpers ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "category", "family", "generation", "size"),
    [
        ("g4dn.xlarge", "g", "g4dn", "4", "xlarge"),
        ("u-6tb1.metal", "u", "u-6tb1", "1", "metal"),
        ("u7i-12tb.224xlarge", "u", "u7i-12tb", "7", "224xlarge"),
        ("mac2.metal", "mac", "mac2", "2", "metal"),
        ("mac2-m2pro.metal", "mac", "mac2-m2pro", "2", "metal"),
        ("inf2.xlarge", "inf", "inf2", "2", "xlarge"),
        ("trn1n.32xlarge", "trn", "trn1n", "1", "32xlarge"),
        ("c7i-flex.large", "c", "c7i-flex", "7", "large"),
        ("r9g.metal-48xl", "r", "r9g", "9", "metal-48xl"),
        ("x2iezn.12xlarge", "x", "x2iezn", "2", "12xlarge"),
    ],
)
def test_name_labels(name: str, category: str, family: str, generation: str, size: str) -> None:
    assert name_labels(name) == {
        L.LABEL_INSTANCE_CATEGORY: category,
        L.LABEL_INSTANCE_FAMILY: family,
        L.LABEL_INSTANCE_GENERATION: generation,
        L.LABEL_INSTANCE_SIZE: size,
    }


@pytest.mark.parametrize(
    ("cpu_milli", "reserved"),
    [(500, 30), (1000, 60), (2000, 70), (4000, 80), (8000, 90), (96_000, 310), (192_000, 550)],
)
def test_kube_reserved_cpu_tiers(cpu_milli: int, reserved: int) -> None:
    assert kube_reserved_cpu_milli(cpu_milli) == reserved


def test_eni_limited_pods_formula(data: CatalogData) -> None:
    assert eni_limited_pods(data.infos["t3.micro"]) == 2 * 1 + 2
    assert eni_limited_pods(data.infos["m5.large"], reserved_enis=2) == 1 * 9 + 2


def test_settings_validation() -> None:
    with pytest.raises(ValueError, match="amiFamily"):
        NodeClassSettings(ami_family="Ubuntu")
    with pytest.raises(ValueError, match="instanceStorePolicy"):
        NodeClassSettings(instance_store_policy="RAID1")
    with pytest.raises(ValueError, match=r"kube_reserved\[cpu\]"):
        NodeClassSettings.create(kube_reserved={"cpu": "lots"})
    with pytest.raises(ValueError, match="percentage"):
        NodeClassSettings.create(eviction_hard={"memory.available": "x%"})
    a = NodeClassSettings.create(kube_reserved={"memory": "1Gi", "cpu": "1"})
    b = NodeClassSettings(kube_reserved=(("memory", "1Gi"), ("cpu", "1")))
    assert a == b
    assert hash(a) == hash(b)
    assert a.kube_reserved == (("cpu", "1"), ("memory", "1Gi"))
