"""An EC2NodeClass with Karpenter v1.14's launch settings, through the real launch workflow (moto, the
real control plane): the launch template CreateFleet used carries its network interfaces (EFA-only
included), connection tracking, CPU options, the resolved placement group and the kubelet settings and
instanceStorePolicy RAID0 in the user data; CreateFleet carries spec.context; the NodeClaim's allocatable
follows kubelet.maxPods. A placement group that does not resolve fails the launch naming
spec.placementGroupSelector. Pods requesting EFA or Nitro Enclave slots get them at launch."""

from __future__ import annotations

import base64
import copy
import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from nodeflow.catalog.offline import load_offline
from sandbox.nodeflow import LocalNodeflow
from tests.functional.lifecycle.conftest import pending
from tests.functional.placement_groups import serve_placement_groups

NIP_SLOTS = "eks.amazonaws.com/nip-slots"
EXTRA_SPEC: dict[str, Any] = {
    "placementGroupSelector": {"name": "training"},
    "networkInterfaces": [
        {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
        {"networkCardIndex": 1, "deviceIndex": 0, "interfaceType": "efa-only"},
    ],
    "connectionTracking": {"tcpEstablishedTimeout": 600},
    "cpuOptions": {"nestedVirtualization": "enabled"},
    "kubelet": {"maxPods": 42, "systemReserved": {"memory": "300Mi"}},
    "context": "ctx-0123456789",
    "instanceStorePolicy": "RAID0",
}


def _edit_node_class(local: LocalNodeflow, **spec: Any) -> None:
    rt = local.kube_server.resource_for("karpenter.k8s.aws/v1", "EC2NodeClass")
    obj = copy.deepcopy(local.kube_server.get("karpenter.k8s.aws/v1", "EC2NodeClass", "default"))
    obj["spec"].update(spec)
    local.kube_server.kube.replace(rt, "default", obj)


def _provision(local: LocalNodeflow) -> list[dict[str, Any]]:
    pending(local, "train", 1, cpu="1", memory="2Gi")
    local.send_pending(["default/train"])
    local.provision()
    return local.wait_for_executions()


def _launched(local: LocalNodeflow) -> dict[str, Any]:
    """The one NodeClaim, once launched (its instance known): for nodes that never initialize."""
    deadline = time.monotonic() + 60
    while not (claims := local.kube_server.objects("karpenter.sh/v1", "NodeClaim")) or not (
        claims[0].get("status") or {}
    ).get("providerID"):
        assert time.monotonic() < deadline, "the NodeClaim did not launch"
        time.sleep(0.1)
    [claim] = claims
    return claim


def test_launch_template_carries_the_v114_settings(
    make_local: Callable[..., LocalNodeflow], monkeypatch: pytest.MonkeyPatch
) -> None:
    serve_placement_groups(
        monkeypatch,
        [{"GroupName": "training", "GroupId": "pg-0123456789abcdef0", "Strategy": "cluster", "State": "available"}],
    )
    from moto.ec2.responses.fleets import Fleets

    contexts: list[str | None] = []
    original = Fleets.create_fleet

    def create_fleet(self: Fleets) -> Any:
        contexts.append(self._get_param("Context"))
        return original(self)

    monkeypatch.setattr(Fleets, "create_fleet", create_fleet)
    local = make_local()
    _edit_node_class(local, **EXTRA_SPEC)
    [done] = _provision(local)
    assert done["status"] == "SUCCEEDED"
    assert contexts == ["ctx-0123456789"]  # spec.context is CreateFleet's Context

    ec2 = local.clients.ec2
    [fleet] = ec2.describe_fleets()["Fleets"]
    name = fleet["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"]["LaunchTemplateName"]
    [version] = ec2.describe_launch_template_versions(LaunchTemplateName=name)["LaunchTemplateVersions"]
    data = version["LaunchTemplateData"]
    sg = local.world.security_group_id
    assert data["NetworkInterfaces"] == [
        {
            "NetworkCardIndex": 0,
            "DeviceIndex": 0,
            "InterfaceType": "interface",
            "Groups": [sg],
            "ConnectionTrackingSpecification": {"TcpEstablishedTimeout": 600},
        },
        {"NetworkCardIndex": 1, "DeviceIndex": 0, "InterfaceType": "efa-only", "Groups": [sg]},
    ]
    assert data["CpuOptions"] == {"NestedVirtualization": "enabled"}
    assert data["Placement"] == {"GroupId": "pg-0123456789abcdef0"}
    user_data = base64.b64decode(data["UserData"]).decode()
    assert "maxPods: 42" in user_data
    assert "memory: 300Mi" in user_data
    assert "localStorage:\n      strategy: RAID0" in user_data  # nodeadm stripes the instance store

    [claim] = local.kube_server.objects("karpenter.sh/v1", "NodeClaim")
    assert claim["status"]["allocatable"]["pods"] == "42"


def test_unresolvable_placement_group_fails_the_launch_naming_the_field(
    make_local: Callable[..., LocalNodeflow], monkeypatch: pytest.MonkeyPatch
) -> None:
    serve_placement_groups(monkeypatch, [])
    local = make_local()
    _edit_node_class(local, placementGroupSelector={"id": "pg-0123456789abcdef0"})
    [done] = _provision(local)
    assert done["status"] == "FAILED"
    history = local.clients.sfn.get_execution_history(executionArn=done["executionArn"])["events"]
    text = json.dumps(history, default=str)
    assert "spec.placementGroupSelector (id 'pg-0123456789abcdef0') matches no available placement group" in text
    assert local.clients.ec2.describe_fleets()["Fleets"] == []


def test_pods_requesting_efa_get_the_instance_types_efa_interfaces(make_local: Callable[..., LocalNodeflow]) -> None:
    local = make_local()
    # two types with EFA: c5n.18xlarge has 1 interface, c6in.32xlarge 2; one launch template attaches one count
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "node.kubernetes.io/instance-type",
                                "operator": "In",
                                "values": ["c5n.18xlarge", "c6in.32xlarge"],
                            }
                        ]
                    }
                ]
            }
        }
    }
    efa = {"vpc.amazonaws.com/efa": "1"}
    pending(local, "mpi", 1, cpu="1", memory="2Gi", requests=efa, limits=efa, affinity=affinity)
    local.send_pending(["default/mpi"])
    local.provision()
    claim = _launched(local)  # the simulated kubelet does not report EFA devices: the node never initializes
    assert claim["spec"]["resources"]["requests"]["vpc.amazonaws.com/efa"] == "1"
    ec2 = local.clients.ec2
    [fleet] = ec2.describe_fleets()["Fleets"]
    config = fleet["LaunchTemplateConfigs"][0]
    name = config["LaunchTemplateSpecification"]["LaunchTemplateName"]
    [version] = ec2.describe_launch_template_versions(LaunchTemplateName=name)["LaunchTemplateVersions"]
    interfaces = version["LaunchTemplateData"]["NetworkInterfaces"]
    # every fleet override has as many EFA interfaces as the template attaches (one per network card)
    infos = load_offline("us-east-1").infos  # the catalog the launch chose from
    counts = {o["InstanceType"]: infos[o["InstanceType"]].efa_max_interfaces for o in config["Overrides"]}
    assert set(counts.values()) == {len(interfaces)}
    assert set(counts) == {"c5n.18xlarge"}
    assert [(i["NetworkCardIndex"], i["DeviceIndex"], i["InterfaceType"]) for i in interfaces] == [
        (card, 0 if card == 0 else 1, "efa") for card in range(len(interfaces))
    ]
    assert all(i["Groups"] == [local.world.security_group_id] for i in interfaces)


def test_pods_requesting_nitro_enclave_slots_launch_with_enclaves_enabled(
    make_local: Callable[..., LocalNodeflow],
) -> None:
    """Nitro Enclave slots come from a NodeOverlay's capacity (as with Karpenter); the NodeClaim requests them, and
    its launch template enables Nitro Enclaves (Karpenter's AWS provider: EnclaveOptions from the requests)."""
    local = make_local()
    overlay = {
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": "enclaves"},
        "spec": {
            "requirements": [{"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["m"]}],
            "capacity": {NIP_SLOTS: "4"},
        },
    }
    local.apply([overlay])
    pending(local, "enclave", 1, cpu="1", memory="2Gi", requests={NIP_SLOTS: "1"}, limits={NIP_SLOTS: "1"})
    local.send_pending(["default/enclave"])
    local.provision()
    claim = _launched(local)  # the simulated kubelet does not report enclave slots: the node never initializes
    assert claim["spec"]["resources"]["requests"][NIP_SLOTS] == "1"
    ec2 = local.clients.ec2
    [fleet] = ec2.describe_fleets()["Fleets"]
    name = fleet["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"]["LaunchTemplateName"]
    [version] = ec2.describe_launch_template_versions(LaunchTemplateName=name)["LaunchTemplateVersions"]
    assert version["LaunchTemplateData"]["EnclaveOptions"] == {"Enabled": True}
