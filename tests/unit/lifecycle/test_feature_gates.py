"""FEATURE_GATES as Karpenter reads it: the NodeRepair gate (off by default) in the handlers' settings."""

from __future__ import annotations

import pytest

from nodeflow.handlers.runtime import Settings, SettingsError, feature_gates

BASE = {"CLUSTER_NAME": "demo", "AWS_REGION": "us-east-1"}


def test_node_repair_is_off_by_default() -> None:
    assert Settings.from_env(BASE).node_repair is False
    assert Settings.from_env({**BASE, "FEATURE_GATES": "SpotToSpotConsolidation=true"}).node_repair is False


@pytest.mark.parametrize(
    "value", ["NodeRepair=true", "NodeRepair=True", " NodeRepair=1 ,ReservedCapacity=false", "NodeRepair=t"]
)
def test_node_repair_on(value: str) -> None:
    assert Settings.from_env({**BASE, "FEATURE_GATES": value}).node_repair is True


def test_gates_parse_every_pair() -> None:
    assert feature_gates({"FEATURE_GATES": "NodeRepair=false,StaticCapacity=true,"}) == {
        "NodeRepair": False,
        "StaticCapacity": True,
    }
    assert feature_gates({}) == {}


@pytest.mark.parametrize("value", ["NodeRepair", "NodeRepair=yes", "=true", "NodeRepair=true;NodeOverlay=true"])
def test_bad_gates_name_the_variable(value: str) -> None:
    with pytest.raises(SettingsError, match=r"^FEATURE_GATES: .*NodeRepair=true"):
        Settings.from_env({**BASE, "FEATURE_GATES": value})
