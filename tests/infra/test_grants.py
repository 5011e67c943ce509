"""infra/grants.py (the governance record's view of the Lambda roles) against what the synthesized stacks grant."""

from __future__ import annotations

from typing import Any

import pytest

from infra.grants import StackOptions, function_specs, lambda_grants
from tests.infra.conftest import Synthesized
from tests.infra.helpers import actions_of, as_list, function_named, ref_of, role_statements

WHICH = ["default", "full"]


def _options(synthesized: Synthesized, which: str) -> StackOptions:
    config = synthesized.stacks[which].config
    return StackOptions(
        read_cluster_from_eks=config.read_cluster_from_eks,
        aws_catalog=config.catalog_source == "aws",
        hmac=config.webhook_auth == "hmac",
        vpc=config.lambda_vpc_id is not None,
        cluster_install=config.cluster_install,
    )


def _statements(synthesized: Synthesized, which: str, suffix: str) -> tuple[list[dict[str, Any]], list[Any]]:
    res = synthesized.resources(which)
    cluster = synthesized.stacks[which].config.cluster_name
    _, fn = function_named(res, f"nodeflow-{cluster}-{suffix}")
    role_id = ref_of(fn["Properties"]["Role"]) or ""
    return role_statements(res, role_id), res[role_id]["Properties"].get("ManagedPolicyArns", [])


@pytest.mark.parametrize("which", WHICH)
def test_every_lambda_role_is_granted_exactly_the_listed_statements(synthesized: Synthesized, which: str) -> None:
    listed = {g.function: g for g in lambda_grants(_options(synthesized, which))}
    assert set(listed) == {s.suffix for s in function_specs()}
    for suffix, grants in listed.items():
        assert grants.unknown_uses == (), f"{suffix}: uses without an entry in infra/grants.py USE_GRANTS"
        stmts, managed = _statements(synthesized, which, suffix)
        synthesized_statements = sorted((st.get("Sid", ""), tuple(sorted(actions_of(st)))) for st in stmts)
        listed_statements = sorted((g.sid, tuple(sorted(g.actions))) for g in grants.grants if g.actions)
        assert listed_statements == synthesized_statements, suffix
        vpc_policy = any("AWSLambdaVPCAccessExecutionRole" in str(arn) for arn in as_list(managed))
        assert vpc_policy == any("AWSLambdaVPCAccessExecutionRole" in g.resources for g in grants.grants), suffix


def test_iam_statements_take_their_actions_from_the_table() -> None:
    from infra.grants import actions

    assert actions("TerminateOwnedInstances") == ["ec2:TerminateInstances"]
    with pytest.raises(KeyError, match="NoSuchSid"):
        actions("NoSuchSid")
