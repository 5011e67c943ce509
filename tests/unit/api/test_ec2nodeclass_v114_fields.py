"""EC2NodeClass fields of Karpenter v1.14 (windows2025 alias, placementGroupSelector, networkInterfaces,
connectionTracking, cpuOptions): accepted when valid, refused with an error naming the field otherwise."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from nodeflow.api.karpenter_ec2 import EC2NodeClass

BASE: dict[str, Any] = {
    "apiVersion": "karpenter.k8s.aws/v1",
    "kind": "EC2NodeClass",
    "metadata": {"name": "gpu"},
    "spec": {
        "role": "KarpenterNodeRole",
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
    },
}


def _with(**spec: Any) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    doc["spec"].update(spec)
    return doc


def _errors(doc: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ValidationError) as info:
        EC2NodeClass.model_validate(doc)
    return [(".".join(str(p) for p in e["loc"]), e["msg"]) for e in info.value.errors()]


def test_all_new_fields_accepted() -> None:
    nc = EC2NodeClass.model_validate(
        _with(
            placementGroupSelector={"id": "pg-0123456789abcdef0"},
            networkInterfaces=[
                {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
                {"networkCardIndex": 1, "deviceIndex": 0, "interfaceType": "efa-only"},
            ],
            connectionTracking={"tcpEstablishedTimeout": 3600, "udpStreamTimeout": 120, "udpTimeout": 30},
            cpuOptions={"nestedVirtualization": "enabled"},
        )
    )
    spec = nc.spec
    assert spec.placement_group_selector is not None
    assert spec.placement_group_selector.id == "pg-0123456789abcdef0"
    assert [(n.network_card_index, n.interface_type) for n in spec.network_interfaces or []] == [
        (0, "interface"),
        (1, "efa-only"),
    ]
    assert spec.connection_tracking is not None
    assert spec.connection_tracking.udp_stream_timeout == 120
    assert spec.cpu_options is not None
    assert spec.cpu_options.nested_virtualization == "enabled"
    dumped = nc.model_dump(by_alias=True, exclude_none=True)["spec"]
    assert dumped["cpuOptions"] == {"nestedVirtualization": "enabled"}
    assert dumped["connectionTracking"]["tcpEstablishedTimeout"] == 3600


def test_windows2025_alias_implies_its_family() -> None:
    nc = EC2NodeClass.model_validate(_with(amiSelectorTerms=[{"alias": "windows2025@latest"}]))
    assert nc.resolved_ami_family == "Windows2025"
    assert (
        EC2NodeClass.model_validate(
            _with(amiSelectorTerms=[{"alias": "windows2025@latest"}], amiFamily="Windows2025")
        ).resolved_ami_family
        == "Windows2025"
    )


@pytest.mark.parametrize(
    ("spec", "loc", "text"),
    [
        ({"amiSelectorTerms": [{"alias": "windows2025@v1"}]}, "spec.amiSelectorTerms.0.alias", "only specify version"),
        (
            {"amiSelectorTerms": [{"alias": "windows2025@latest"}], "amiFamily": "Windows2022"},
            "spec",
            "amiFamily must be 'Windows2025' or 'Custom'",
        ),
        ({"placementGroupSelector": {}}, "spec.placementGroupSelector", "expected at least one, got none"),
        (
            {"placementGroupSelector": {"name": "a", "id": "pg-0123"}},
            "spec.placementGroupSelector",
            "'name' and 'id' are mutually exclusive",
        ),
        ({"placementGroupSelector": {"id": "placement-1"}}, "spec.placementGroupSelector.id", "not a valid id"),
        ({"placementGroupSelector": {"name": ""}}, "spec.placementGroupSelector.name", "at least 1 character"),
        (
            {"networkInterfaces": [{"networkCardIndex": 1, "deviceIndex": 0, "interfaceType": "interface"}]},
            "spec.networkInterfaces",
            "must include a primary interface",
        ),
        (
            {
                "networkInterfaces": [
                    {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
                    {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "efa-only"},
                ]
            },
            "spec.networkInterfaces",
            "[1]: networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs",
        ),
        (
            {
                "networkInterfaces": [
                    {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
                    {"networkCardIndex": 1, "deviceIndex": 0, "interfaceType": "efa-only"},
                    {"networkCardIndex": 1, "deviceIndex": 1, "interfaceType": "efa-only"},
                ]
            },
            "spec.networkInterfaces",
            "[2]: networkInterfaces can have at most one efa-only device per network card",
        ),
        (
            {"networkInterfaces": [{"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "efa"}]},
            "spec.networkInterfaces.0.interfaceType",
            "'interface' or 'efa-only'",
        ),
        (
            {"networkInterfaces": [{"networkCardIndex": -1, "deviceIndex": 0, "interfaceType": "interface"}]},
            "spec.networkInterfaces.0.networkCardIndex",
            "greater than or equal to 0",
        ),
        ({"connectionTracking": {}}, "spec.connectionTracking", "at least one of tcpEstablishedTimeout"),
        ({"connectionTracking": {"udpTimeout": 61}}, "spec.connectionTracking.udpTimeout", "less than or equal to 60"),
        (
            {"connectionTracking": {"tcpEstablishedTimeout": 59}},
            "spec.connectionTracking.tcpEstablishedTimeout",
            "greater than or equal to 60",
        ),
        (
            {"cpuOptions": {"nestedVirtualization": "on"}},
            "spec.cpuOptions.nestedVirtualization",
            "'enabled' or 'disabled'",
        ),
    ],
)
def test_bad_values_name_the_field(spec: dict[str, Any], loc: str, text: str) -> None:
    errors = _errors(_with(**spec))
    assert any(where == loc and text in msg for where, msg in errors), errors
