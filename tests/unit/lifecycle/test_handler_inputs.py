"""What handlers answer to bad input: errors that name the field or variable."""

from __future__ import annotations

import pytest

from nodeflow.disruption.model import REPLACE_BAR_K
from nodeflow.handlers.common import InvalidInput, StepInput, parse
from nodeflow.handlers.runtime import Settings, SettingsError

BASE = {"CLUSTER_NAME": "demo", "AWS_REGION": "us-east-1"}


def test_step_input_accepts_the_workflow_state() -> None:
    step = parse(
        StepInput,
        {
            "nodeClaim": "default-abcde",
            "launch": {"instanceId": "i-0abc", "providerID": "aws:///us-east-1a/i-0abc", "launchedAt": "x"},
            "error": {"Error": "NoCapacity", "Cause": "..."},
            "registration": {"registered": False},  # other state is ignored
        },
    )
    assert step.node_claim == "default-abcde"
    assert step.launch is not None
    assert step.launch.instance_id == "i-0abc"


@pytest.mark.parametrize(
    ("event", "field"),
    [
        ({}, "nodeClaim"),
        ({"nodeClaim": ""}, "nodeClaim"),
        ({"nodeClaim": "Not_A_Name"}, "nodeClaim"),
        ({"nodeClaim": "ok", "launch": {"instanceId": "x", "providerID": "p"}}, "instanceId"),
        ({"nodeClaim": "ok", "launch": {"instanceId": "i-0abc"}}, "providerID"),
    ],
)
def test_bad_step_input_names_the_field(event: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInput, match=field):
        parse(StepInput, event)


def test_settings_defaults() -> None:
    s = Settings.from_env(BASE)
    assert (s.registration_ttl_seconds, s.initialization_ttl_seconds, s.gc_grace_seconds) == (900, 900, 30)
    assert s.catalog_source == "aws"
    assert (s.webhook_auth, s.agent_principal_arns, s.dedup_ttl_seconds) == ("iam", (), 3600)
    assert s.consolidation_replace_bar_k == REPLACE_BAR_K == 4.5  # the disruption core's default
    assert Settings.from_env({**BASE, "CONSOLIDATION_REPLACE_BAR_K": "0"}).consolidation_replace_bar_k == 0.0
    roles = "arn:aws:iam::1:role/a, arn:aws:iam::1:role/b"
    assert Settings.from_env({**BASE, "AGENT_PRINCIPAL_ARNS": roles}).agent_principal_arns == (
        "arn:aws:iam::1:role/a",
        "arn:aws:iam::1:role/b",
    )


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({"AWS_REGION": "us-east-1"}, "CLUSTER_NAME"),
        ({"CLUSTER_NAME": "demo"}, "AWS_REGION"),
        ({**BASE, "CATALOG_SOURCE": "s3"}, "CATALOG_SOURCE"),
        ({**BASE, "KUBERNETES_VERSION": "v1.33"}, "KUBERNETES_VERSION"),
        ({**BASE, "REGISTRATION_TTL_SECONDS": "15m"}, "REGISTRATION_TTL_SECONDS"),
        ({**BASE, "GC_GRACE_SECONDS": "-1"}, "GC_GRACE_SECONDS"),
        ({**BASE, "WEBHOOK_AUTH": "none"}, "WEBHOOK_AUTH"),
        ({**BASE, "AGENT_PRINCIPAL_ARNS": "nodeflow-agent"}, "AGENT_PRINCIPAL_ARNS"),
        ({**BASE, "DEDUP_TTL_SECONDS": "1h"}, "DEDUP_TTL_SECONDS"),
        ({**BASE, "CONSOLIDATION_REPLACE_BAR_K": "-1"}, "CONSOLIDATION_REPLACE_BAR_K"),
        ({**BASE, "CONSOLIDATION_REPLACE_BAR_K": "strict"}, "CONSOLIDATION_REPLACE_BAR_K"),
        ({**BASE, "CONSOLIDATION_REPLACE_BAR_K": "inf"}, "CONSOLIDATION_REPLACE_BAR_K"),
    ],
)
def test_bad_settings_name_the_variable(env: dict[str, str], name: str) -> None:
    with pytest.raises(SettingsError, match=name):
        Settings.from_env(env)


def test_required_fields_are_checked_per_function() -> None:
    with pytest.raises(SettingsError, match="LAUNCH_STATE_MACHINE_ARN"):
        Settings.from_env(BASE).require("launch_state_machine_arn")
