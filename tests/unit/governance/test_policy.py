"""NodeflowPolicy: the model's validation (errors name the field) and the pure evaluation of several policies
(most restrictive wins), pause windows against a given time, and spend attribution."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from nodeflow.api.errors import format_validation_error
from nodeflow.api.nodeflow_policy import NodeflowPolicy
from nodeflow.api.pool_names import PoolNames
from nodeflow.governance.policy import Governance, NodeCost, namespace_shares, spend_of


def policy(name: str, **spec: Any) -> NodeflowPolicy:
    return NodeflowPolicy.model_validate(
        {"apiVersion": "nodeflow.io/v1alpha1", "kind": "NodeflowPolicy", "metadata": {"name": name}, "spec": spec}
    )


def error_of(name: str, **spec: Any) -> str:
    with pytest.raises(ValidationError) as info:
        policy(name, **spec)
    return "\n".join(format_validation_error(info.value))


ML = {"team": "ml"}


# -- the model --------------------------------------------------------------------------------------------


def test_full_policy_parses_with_camel_case_fields() -> None:
    p = policy(
        "everything",
        nodePoolAccess=[{"nodePools": ["gpu"], "namespaces": ["ml-prod"], "namespaceSelector": {"matchLabels": ML}}],
        resourceAccess=[{"resources": ["nvidia.com/gpu"], "namespaceSelector": {"matchLabels": ML}}],
        costCeilings={
            "cluster": {"maxPricePerHour": 40},
            "nodePools": [{"name": "gpu", "maxPricePerHour": "20.5"}],
            "namespaces": [{"name": "ml-exp", "maxPricePerHour": "5"}],
        },
        limits=[{"name": "batch", "nodePools": ["a", "b"], "resources": {"cpu": "100", "nodes": 5}}],
        pauses=[{"name": "freeze", "schedule": "0 18 * * 5", "duration": "60h", "provisioning": True}],
    )
    assert p.spec.cost_ceilings is not None
    assert p.spec.cost_ceilings.cluster is not None
    assert p.spec.cost_ceilings.cluster.per_hour == 40.0
    assert p.spec.cost_ceilings.node_pools is not None
    assert p.spec.cost_ceilings.node_pools[0].per_hour == 20.5


@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [
        ({"nodePoolAccess": [{"nodePools": ["gpu"]}]}, "spec.nodePoolAccess[0].namespaces", "namespaceSelector"),
        ({"nodePoolAccess": [{"nodePools": [], "namespaces": ["a"]}]}, "spec.nodePoolAccess[0].nodePools", ""),
        ({"nodePoolAccess": [{"nodePools": ["GPU"], "namespaces": ["a"]}]}, "nodePools", "'GPU'"),
        ({"resourceAccess": [{"resources": ["cpu"], "namespaces": ["a"]}]}, "spec.resourceAccess[0].resources", "cpu"),
        ({"costCeilings": {"cluster": {"maxPricePerHour": "-1"}}}, "maxPricePerHour", "'-1'"),
        ({"costCeilings": {"cluster": {"maxPricePerHour": "ten"}}}, "maxPricePerHour", "'ten'"),
        (
            {"costCeilings": {"nodePools": [{"name": "a", "maxPricePerHour": "1"}] * 2}},
            "spec.costCeilings.nodePools",
            "two ceilings",
        ),
        ({"limits": [{"name": "g", "nodePools": ["a"], "resources": {}}]}, "spec.limits[0].resources", "at least"),
        ({"limits": [{"name": "g", "nodePools": ["a"], "resources": {"cpu": "lots"}}]}, "resources", "lots"),
        (
            {"pauses": [{"name": "w", "schedule": "0 25 * * *", "duration": "1h", "disruption": True}]},
            "spec.pauses[0].schedule",
            "hour",
        ),
        (
            {"pauses": [{"name": "w", "schedule": "@daily", "duration": "2d", "disruption": True}]},
            "spec.pauses[0].duration",
            "'2d'",
        ),
        ({"pauses": [{"name": "w", "schedule": "@daily", "duration": "1h"}]}, "spec.pauses[0]", "pause"),
        ({"unknown": 1}, "spec.unknown", ""),
        # "*" where it cannot mean every one: refused, naming the field
        (
            {"costCeilings": {"nodePools": [{"name": "*", "maxPricePerHour": "1"}]}},
            "spec.costCeilings.nodePools[0].name",
            "costCeilings.cluster",
        ),
        (
            {"costCeilings": {"namespaces": [{"name": "*", "maxPricePerHour": "1"}]}},
            "spec.costCeilings.namespaces[0].name",
            "'*' is not allowed",
        ),
        ({"resourceAccess": [{"resources": ["*"], "namespaces": ["a"]}]}, "spec.resourceAccess[0].resources", "'*'"),
        ({"limits": [{"name": "*", "nodePools": ["a"], "resources": {"cpu": "1"}}]}, "spec.limits[0].name", "'*'"),
        (
            {"pauses": [{"name": "*", "schedule": "@daily", "duration": "1h", "provisioning": True}]},
            "spec.pauses[0].name",
            "'*'",
        ),
        # durations past the longest window (8784h, 366 days), the reviewer's among them
        *(
            (
                {"pauses": [{"name": "w", "schedule": "0 0 30 2 *", "duration": d, "provisioning": True}]},
                "spec.pauses[0].duration",
                words,
            )
            for d, words in (
                ("99999999999h", "longer than 8784h"),
                ("20000000h", "longer than 8784h"),
                ("8785h", "longer than 8784h"),
                ("8784h1m", "longer than 8784h"),
                ("527041m", "longer than 8784h"),
            )
        ),
    ],
)
def test_bad_policies_name_the_field(spec: dict[str, Any], field: str, words: str) -> None:
    message = error_of("p", **spec)
    assert field in message, message
    assert words in message, message


def test_the_longest_pause_window_is_8784h() -> None:
    for duration in ("8784h", "8783h60m", "527040m", "1h30m", "0m"):
        policy("p", pauses=[{"name": "w", "schedule": "@daily", "duration": duration, "provisioning": True}])


def test_bad_name_and_api_version() -> None:
    with pytest.raises(ValidationError, match=r"metadata\.name"):
        NodeflowPolicy.model_validate({"metadata": {"name": "Not_Valid"}})
    with pytest.raises(ValidationError, match=r"apiVersion|api_version"):
        NodeflowPolicy.model_validate({"apiVersion": "nodeflow.io/v1", "metadata": {"name": "a"}})


# -- access ---------------------------------------------------------------------------------------------


def test_pool_access_by_name_or_selector_and_unnamed_pools_open() -> None:
    gov = Governance.from_policies(
        [policy("gpu-access", nodePoolAccess=[{"nodePools": ["gpu"], "namespaceSelector": {"matchLabels": ML}}])]
    )
    assert gov.pool_denial("ml-prod", ML, "gpu") is None
    assert gov.pool_denial("ml-exp", {}, "gpu") == "namespace ml-exp may not use NodePool gpu: policy gpu-access"
    assert gov.pool_denial("ml-exp", {}, "default") is None
    by_name = Governance.from_policies([policy("p", nodePoolAccess=[{"nodePools": ["gpu"], "namespaces": ["a"]}])])
    assert by_name.pool_denial("a", {}, "gpu") is None
    assert by_name.pool_denial("b", ML, "gpu") is not None


def test_rules_of_one_policy_are_alternatives_policies_combine_most_restrictive() -> None:
    one = policy(
        "one",
        nodePoolAccess=[
            {"nodePools": ["gpu"], "namespaces": ["a"]},
            {"nodePools": ["gpu", "big"], "namespaceSelector": {"matchLabels": ML}},
        ],
    )
    assert Governance.from_policies([one]).pool_denial("b", ML, "gpu") is None  # the second rule admits it
    two = policy("two", nodePoolAccess=[{"nodePools": ["gpu"], "namespaces": ["a"]}])
    gov = Governance.from_policies([one, two])
    assert gov.pool_denial("b", ML, "gpu") == "namespace b may not use NodePool gpu: policy two"
    assert gov.pool_denial("a", {}, "gpu") is None
    assert gov.pool_denial("b", ML, "big") is None  # only policy one names big
    assert gov.pools_for("b", ML) == {"big": None, "gpu": "namespace b may not use NodePool gpu: policy two"}


def test_resource_access() -> None:
    gov = Governance.from_policies(
        [
            policy(
                "gpu-access",
                resourceAccess=[{"resources": ["nvidia.com/gpu"], "namespaceSelector": {"matchLabels": ML}}],
            )
        ]
    )
    assert gov.resource_denial("ml", ML, "nvidia.com/gpu") is None
    assert (
        gov.request_denial("web", {}, ["cpu", "memory", "nvidia.com/gpu"])
        == "namespace web may not request nvidia.com/gpu: policy gpu-access"
    )
    assert gov.request_denial("web", {}, ["cpu", "aws.amazon.com/neuron"]) is None


def test_empty_selector_admits_every_namespace() -> None:
    gov = Governance.from_policies([policy("p", nodePoolAccess=[{"nodePools": ["x"], "namespaceSelector": {}}])])
    assert gov.pool_denial("any", {}, "x") is None


def test_no_policies_is_empty() -> None:
    assert Governance.from_policies([]).empty
    assert not Governance.from_policies([policy("p", costCeilings={"cluster": {"maxPricePerHour": "1"}})]).empty


# -- ceilings and limits ----------------------------------------------------------------------------------


def test_ceilings_and_group_limits_are_collected_from_every_policy() -> None:
    gov = Governance.from_policies(
        [
            policy("a", costCeilings={"cluster": {"maxPricePerHour": "40"}}),
            policy(
                "b",
                costCeilings={
                    "cluster": {"maxPricePerHour": "30"},
                    "nodePools": [{"name": "gpu", "maxPricePerHour": "9"}],
                },
                limits=[{"name": "batch", "nodePools": ["x", "y"], "resources": {"cpu": "1500m", "nodes": "3"}}],
            ),
        ]
    )
    assert sorted(c.max_per_hour for c in gov.ceilings_for("cluster")) == [30.0, 40.0]
    assert [c.describe() for c in gov.ceilings_for("nodePool", "gpu")] == [
        "the $/hour ceiling of NodePool gpu ($9.00/hour)"
    ]
    (group,) = gov.group_limits
    assert (group.policy, group.name, group.nodepools) == ("b", "batch", PoolNames.of(["x", "y"]))
    assert group.limits == {"cpu": 1500, "nodes": 3000}


def test_spend_is_shared_by_cpu_requests() -> None:
    assert namespace_shares([("a", 500), ("b", 1500), ("a", 0)]) == {"a": 0.25, "b": 0.75}
    assert namespace_shares([("a", 0), ("b", 0)]) == {"a": 0.5, "b": 0.5}
    spend = spend_of([NodeCost("p", 2.0, (("a", 1000), ("b", 1000))), NodeCost("q", 1.0), NodeCost(None, 0.5)])
    assert spend.cluster == 3.5
    assert spend.by_pool == {"p": 2.0, "q": 1.0}
    assert spend.by_namespace == {"a": 1.0, "b": 1.0}
    assert spend.plus(NodeCost("q", 0.25, (("a", 1),))).by_namespace["a"] == 1.25


# -- pause windows ----------------------------------------------------------------------------------------


FREEZE = {"name": "freeze", "schedule": "0 18 * * 5", "duration": "60h", "disruption": True, "nodePools": ["gpu"]}


@pytest.mark.parametrize(
    ("now", "paused"),
    [
        (datetime(2026, 11, 27, 17, 59, tzinfo=UTC), False),  # Friday, before it opens
        (datetime(2026, 11, 27, 18, 0, tzinfo=UTC), True),  # opens at 18:00 UTC
        (datetime(2026, 11, 30, 5, 59, tzinfo=UTC), True),
        (datetime(2026, 11, 30, 6, 0, tzinfo=UTC), False),  # 60 h later it is closed
    ],
)
def test_disruption_window_open_and_closed(now: datetime, paused: bool) -> None:
    gov = Governance.from_policies([policy("change-freeze", pauses=[FREEZE])])
    why = gov.disruption_pause("gpu", now)
    assert (why is not None) == paused
    if paused:
        assert why == (
            "disruption paused for NodePool gpu by policy change-freeze: window freeze (0 18 * * 5 for 60h) "
            "until 2026-11-30T06:00:00Z"
        )
    assert gov.provisioning_pause("gpu", now) is None  # the window pauses disruption only
    assert gov.disruption_pause("default", now) is None  # and only for gpu


def test_window_is_utc_whatever_the_offset_and_every_pool_when_unset() -> None:
    from datetime import timedelta, timezone

    gov = Governance.from_policies(
        [policy("p", pauses=[{"name": "nightly", "schedule": "@daily", "duration": "1h30m", "provisioning": True}])]
    )
    plus_two = timezone(timedelta(hours=2))
    assert gov.provisioning_pause("any", datetime(2026, 11, 25, 3, 0, tzinfo=plus_two)) is not None  # 01:00 UTC
    assert gov.provisioning_pause("any", datetime(2026, 11, 25, 1, 29, tzinfo=UTC)) is not None
    assert gov.provisioning_pause("any", datetime(2026, 11, 25, 1, 30, tzinfo=UTC)) is None


# -- "*": every NodePool --------------------------------------------------------------------------------------


def test_a_star_access_rule_names_every_nodepool() -> None:
    star = policy("ml", nodePoolAccess=[{"nodePools": ["*"], "namespaces": ["ml-prod"]}])
    gov = Governance.from_policies([star])
    for pool in ("default", "gpu", "created-tomorrow"):
        assert gov.pool_denial("ml-prod", {}, pool) is None
        assert gov.pool_denial("web", {}, pool) == f"namespace web may not use NodePool {pool}: policy ml"
    # with the policy's own rule for one NodePool, and another policy's rule for it
    mixed = policy(
        "ml",
        nodePoolAccess=[
            {"nodePools": ["*"], "namespaces": ["ml-prod"]},
            {"nodePools": ["default"], "namespaces": ["web"]},
        ],
    )
    other = policy("web", nodePoolAccess=[{"nodePools": ["gpu"], "namespaceSelector": {"matchLabels": ML}}])
    gov = Governance.from_policies([mixed, other])
    assert gov.pool_denial("web", {}, "default") is None  # ml's own rule for default admits it
    assert gov.pool_denial("web", {}, "gpu") == "namespace web may not use NodePool gpu: policy ml"
    assert gov.pool_denial("ml-prod", {}, "gpu") == "namespace ml-prod may not use NodePool gpu: policy web"
    assert gov.pool_denial("ml-prod", ML, "gpu") is None
    assert gov.pool_denial("ml-prod", {}, "other") is None
    assert gov.pool_denial("web", ML, "other") == "namespace web may not use NodePool other: policy ml"


def test_a_star_window_pauses_every_nodepool_for_provisioning_and_disruption() -> None:
    now = datetime(2026, 11, 25, 5, 30, tzinfo=UTC)
    window = {"name": "all", "schedule": "* * * * *", "duration": "1h", "nodePools": ["*"]}
    gov = Governance.from_policies([policy("p", pauses=[{**window, "provisioning": True, "disruption": True}])])
    for pool in ("default", "gpu"):
        assert gov.provisioning_pause(pool, now) == (
            f"provisioning paused for NodePool {pool} by policy p: window all (* * * * * for 1h) "
            "until 2026-11-25T06:30:00Z"
        )
        assert gov.disruption_pause(pool, now) is not None


def test_a_star_group_holds_every_nodepool() -> None:
    gov = Governance.from_policies([policy("p", limits=[{"name": "g", "nodePools": ["*"], "resources": {"nodes": 0}}])])
    (group,) = gov.group_limits
    assert "gpu" in group.nodepools
    assert "anything" in group.nodepools
    assert None not in group.nodepools  # a node of no NodePool is in no group
    assert group.nodepools.describe() == "every NodePool"
    assert group.nodepools.to_json() is None
    assert PoolNames.of(["b", "a"]).describe() == "a, b"


# -- the cost of judging windows ------------------------------------------------------------------------------


def test_each_window_is_judged_once_per_time_whatever_the_number_of_nodepools(monkeypatch: pytest.MonkeyPatch) -> None:
    from nodeflow.governance.policy import Window

    never = [
        {"name": f"w{i}", "schedule": "0 0 30 2 *", "duration": "8784h", "provisioning": True, "disruption": True}
        for i in range(100)
    ]
    gov = Governance.from_policies([policy("p", pauses=never)])
    judged: list[str] = []
    open_until = Window.open_until

    def counting(self: Window, now: datetime) -> datetime | None:
        judged.append(self.name)
        return open_until(self, now)

    monkeypatch.setattr(Window, "open_until", counting)
    now = datetime(2026, 11, 25, 5, 30, tzinfo=UTC)
    for i in range(50):
        assert gov.provisioning_pause(f"pool-{i}", now) is None
        assert gov.disruption_pause(f"pool-{i}", now) is None
    assert len(judged) == 100
    gov.provisioning_pause("pool-0", datetime(2026, 11, 25, 5, 31, tzinfo=UTC))  # another time: judged again
    assert len(judged) == 200
