"""An invalid NodeflowPolicy fails safe: it stands in as a provisioning pause of what it governs, never as nothing."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from nodeflow.api.nodeflow_policy import NodeflowPolicy
from nodeflow.governance.invalid import INVALID_WINDOW, governed_pools, stand_in
from nodeflow.governance.policy import Governance

NOW = datetime(2026, 11, 25, 5, 30, tzinfo=UTC)


def raw(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "nodeflow.io/v1alpha1",
        "kind": "NodeflowPolicy",
        "metadata": {"name": "gpu-access"},
        "spec": spec,
    }


@pytest.mark.parametrize(
    ("spec", "pools"),
    [
        # names NodePools only: those
        ({"nodePoolAccess": [{"nodePools": ["gpu"], "namespaceSelector": {"matchLabels": {"-bad": "x"}}}]}, {"gpu"}),
        ({"costCeilings": {"nodePools": [{"name": "gpu", "maxPricePerHour": "ten"}]}}, {"gpu"}),
        ({"limits": [{"name": "g", "nodePools": ["a", "b"], "resources": {}}]}, {"a", "b"}),
        ({"pauses": [{"name": "w", "schedule": "99 * * * *", "duration": "1h", "nodePools": ["gpu"]}]}, {"gpu"}),
        # cluster-wide parts, or names it cannot trust: every NodePool
        ({"resourceAccess": [{"resources": ["nvidia.com/gpu"]}]}, None),
        ({"costCeilings": {"cluster": {"maxPricePerHour": "x"}}}, None),
        ({"costCeilings": {"namespaces": [{"name": "a", "maxPricePerHour": "x"}]}}, None),
        ({"pauses": [{"name": "w", "schedule": "99 * * * *", "duration": "1h", "provisioning": True}]}, None),
        ({"nodePoolAccess": [{"nodePools": ["GPU"], "namespaces": ["a"]}]}, None),
        ({"nodePoolAccess": "gpu"}, None),
        ({"nodePoolAcess": [{"nodePools": ["gpu"], "namespaces": ["a"]}]}, None),  # a misspelt part
        ({"nodePoolAccess": [{"nodePools": ["gpu"]}], "extra": 1}, None),
        # "*" is every NodePool
        ({"limits": [{"name": "g", "nodePools": ["*"], "resources": {}}]}, None),
        ({"pauses": [{"name": "w", "schedule": "0 0 * * *", "duration": "9000h", "nodePools": ["gpu", "*"]}]}, None),
    ],
)
def test_the_nodepools_an_invalid_policy_governs(spec: dict[str, Any], pools: set[str] | None) -> None:
    assert governed_pools(raw(**spec)) == (None if pools is None else frozenset(pools))


def test_its_stand_in_pauses_provisioning_there_always_naming_the_policy() -> None:
    policy = stand_in(raw(nodePoolAccess=[{"nodePools": ["gpu"], "namespaceSelector": {"matchLabels": {"-x": "y"}}}]))
    assert policy is not None
    assert policy.name == "gpu-access"
    gov = Governance.from_policies([policy])
    why = gov.provisioning_pause("gpu", NOW)
    assert why is not None
    assert why.startswith(f"provisioning paused for NodePool gpu by policy gpu-access: window {INVALID_WINDOW} ")
    assert gov.provisioning_pause("general", NOW) is None  # what it does not govern keeps working
    assert gov.disruption_pause("gpu", NOW) is None  # disruption is not paused by it
    for later in (datetime(2026, 11, 25, 23, 59, tzinfo=UTC), datetime(2027, 3, 1, 0, 0, tzinfo=UTC)):
        assert gov.provisioning_pause("gpu", later) is not None  # always open


def test_a_cluster_wide_invalid_policy_pauses_every_nodepool() -> None:
    policy = stand_in(raw(resourceAccess=[{"resources": ["cpu"], "namespaces": ["ml"]}]))
    assert policy is not None
    gov = Governance.from_policies([policy])
    assert gov.provisioning_pause("anything", NOW) is not None


def test_an_empty_invalid_policy_governs_nothing() -> None:
    assert stand_in({"metadata": {"name": "x"}}) is None
    assert stand_in({"metadata": {"name": "x"}, "spec": {}}) is not None  # {} is not "about nothing" for sure


@pytest.mark.parametrize("duration", ["99999999999h", "20000000h"])
def test_a_window_too_long_to_evaluate_fails_safe_only_for_its_nodepools(duration: str) -> None:
    """The reviewer's durations (an OverflowError in Governance.from_policies, "date value out of range" in
    latest_fire, for every NodePool): the model refuses them naming the field, and the policy stands in as a pause of
    the NodePools it names (disruption too, as the window pauses disruption); the others are not affected."""
    window = {"name": "w", "schedule": "0 0 30 2 *", "duration": duration, "provisioning": True, "disruption": True}
    doc = raw(pauses=[{**window, "nodePools": ["gpu"]}])
    with pytest.raises(ValidationError, match=r"pauses\.0\.duration") as info:
        NodeflowPolicy.model_validate(doc)
    assert "longer than 8784h" in str(info.value)
    policy = stand_in(doc)
    assert policy is not None
    ok = {**window, "duration": "1h", "schedule": "* * * * *", "nodePools": ["batch"]}
    valid = NodeflowPolicy.model_validate({**raw(pauses=[ok]), "metadata": {"name": "ok"}})
    gov = Governance.from_policies([policy, valid])
    assert gov.provisioning_pause("gpu", NOW) is not None
    assert gov.provisioning_pause("general", NOW) is None
    assert gov.disruption_pause("gpu", NOW) is not None  # the window meant to pause disruption: fail safe
    assert gov.disruption_pause("general", NOW) is None
    assert gov.provisioning_pause("batch", NOW) is not None  # the valid policy still applies
    # without nodePools the policy may be about every NodePool: every one is paused
    every = stand_in(raw(pauses=[window]))
    assert every is not None
    assert Governance.from_policies([every]).provisioning_pause("general", NOW) is not None


@pytest.mark.parametrize(
    ("pauses", "paused"),
    [
        ([{"name": "w", "schedule": "99 * * * *", "duration": "1h", "disruption": True, "nodePools": ["gpu"]}], True),
        ([{"name": "w", "schedule": "99 * * * *", "duration": "1h", "disruption": "yes", "nodePools": ["gpu"]}], True),
        (
            [{"name": "w", "schedule": "99 * * * *", "duration": "1h", "provisioning": True, "nodePools": ["gpu"]}],
            False,
        ),
        (
            [{"name": "w", "schedule": "99 * * * *", "duration": "1h", "disruption": False, "nodePools": ["gpu"]}],
            False,
        ),
        ("every night", True),  # unreadable windows: they may have meant it
        (["w"], True),
    ],
)
def test_an_invalid_window_that_may_pause_disruption_pauses_it_in_its_nodepools(pauses: Any, paused: bool) -> None:
    """An invalid policy whose pause window meant to stop disruption must not silently let the disruption round go
    on: its stand-in pauses disruption too, where it pauses provisioning, and nowhere else."""
    policy = stand_in(raw(pauses=pauses, nodePoolAccess=[{"nodePools": ["gpu"], "namespaces": ["ml"]}]))
    assert policy is not None
    gov = Governance.from_policies([policy])
    assert (gov.disruption_pause("gpu", NOW) is not None) is paused
    assert gov.provisioning_pause("gpu", NOW) is not None
    if isinstance(pauses, list) and all(isinstance(w, dict) for w in pauses):
        assert gov.disruption_pause("general", NOW) is None
