"""The state machines: every statemachines/*.asl.json deployed with every placeholder substituted, every Lambda a
Task calls granted to the machine's role, tracing and logging on."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from infra.config import ConfigError, NodeflowConfig
from infra.functions import FUNCTIONS
from infra.workflows import PLACEHOLDER, STATEMACHINES, WORKFLOWS, Workflows, task_resources
from tests.infra.conftest import Synthesized
from tests.infra.helpers import actions_of, as_list, ref_of, role_statements

WHICH = ["default", "full"]


def _machines(synthesized: Synthesized, which: str) -> dict[str, dict[str, Any]]:
    return {
        m["Properties"]["StateMachineName"].rsplit("-", 1)[1]: m["Properties"]
        for m in synthesized.resources(which, "AWS::StepFunctions::StateMachine").values()
    }


def test_every_definition_file_is_a_workflow() -> None:
    assert {p.resolve() for p in STATEMACHINES.glob("*.asl.json")} == {w.definition.resolve() for w in WORKFLOWS}


def test_workflow_tables_match_the_sandbox() -> None:
    """The placeholder -> function tables are the sandbox's (``sandbox/nodeflow.py``): one wiring, two worlds."""
    import sandbox.nodeflow as local

    for spec in WORKFLOWS:
        table = getattr(local, f"{spec.name.upper()}_SUBSTITUTIONS")
        assert dict(spec.functions) == dict(table)
        assert {f"nodeflow.handlers.{s.replace('-', '_')}" for s in spec.functions.values()} <= set(
            local.FUNCTIONS.values()
        )


@pytest.mark.parametrize("which", WHICH)
def test_every_placeholder_is_substituted_with_a_function(synthesized: Synthesized, which: str) -> None:
    res = synthesized.resources(which)
    machines = _machines(synthesized, which)
    assert set(machines) == {w.name for w in WORKFLOWS}
    for spec in WORKFLOWS:
        m = machines[spec.name]
        definition = m["DefinitionString"]
        assert isinstance(definition, str)  # from_string: the definition is in the template, not in S3
        placeholders = {p.group(1) for p in PLACEHOLDER.finditer(definition)}
        assert placeholders == set(PLACEHOLDER.findall(spec.definition.read_text()))
        assert placeholders <= set(m["DefinitionSubstitutions"]), "unsubstituted placeholders"
        for key in placeholders:
            target = ref_of(m["DefinitionSubstitutions"][key])
            assert res[target or ""]["Type"] == "AWS::Lambda::Function"
            assert res[target or ""]["Properties"]["FunctionName"].endswith("-" + spec.functions[key])
        assert json.loads(definition) == json.loads(spec.definition.read_text())


@pytest.mark.parametrize("which", WHICH)
def test_every_lambda_a_machine_calls_is_granted_to_it_and_nothing_more(synthesized: Synthesized, which: str) -> None:
    res = synthesized.resources(which)
    for spec in WORKFLOWS:
        m = _machines(synthesized, which)[spec.name]
        called = {
            ref_of(m["DefinitionSubstitutions"][target])
            for _, _, target in task_resources(json.loads(m["DefinitionString"]))
            if target is not None
        }
        assert called
        invokable: set[str | None] = set()
        for st in role_statements(res, ref_of(m["RoleArn"]) or ""):
            acts = actions_of(st)
            if any(a.startswith("lambda:") for a in acts):
                assert acts == ["lambda:InvokeFunction"]
                invokable |= {ref_of(r) for r in as_list(st["Resource"])}
        assert invokable == called
        assert m["TracingConfiguration"] == {"Enabled": True}
        logging = m["LoggingConfiguration"]
        assert logging["Level"] == "ALL"
        assert logging["IncludeExecutionData"] is True
        (dest,) = logging["Destinations"]
        log_group = res[ref_of(dest["CloudWatchLogsLogGroup"]["LogGroupArn"]) or ""]["Properties"]
        assert log_group["LogGroupName"].startswith("/aws/vendedlogs/states/nodeflow-")


def test_each_step_times_out_before_its_state_does() -> None:
    timeouts = {s.suffix: s.timeout_seconds for s in FUNCTIONS}
    for spec in WORKFLOWS:
        definition = json.loads(spec.definition.read_text())
        states = dict(definition["States"])
        for name, _, target in task_resources(definition):
            assert target is not None
            limit = states[name].get("TimeoutSeconds")
            if limit is not None:
                assert timeouts[spec.functions[target]] < limit, f"{spec.name}.{name}"


def test_a_placeholder_without_a_value_fails_synth(tmp_path: Path) -> None:
    import aws_cdk as cdk

    from infra.workflows import WorkflowSpec

    asl = tmp_path / "broken.asl.json"
    asl.write_text(
        json.dumps(
            {
                "StartAt": "A",
                "States": {
                    "A": {"Type": "Task", "Resource": "${LaunchFunctionArn}", "Next": "B"},
                    "B": {"Type": "Pass", "Result": "${Typo}", "End": True},
                },
            }
        )
    )
    stack = cdk.Stack(cdk.App())
    functions = SimpleNamespace(functions={"launch": SimpleNamespace(function_arn="arn:launch")})
    spec = WorkflowSpec("broken", asl, {"LaunchFunctionArn": "launch"})
    with pytest.raises(ConfigError, match=r"broken.asl.json: no substitution for \$\{Typo\}"):
        Workflows(stack, "W", config=NodeflowConfig(cluster_name="x"), functions=functions, specs=(spec,))  # type: ignore[arg-type]


def test_a_task_outside_the_table_fails_synth(tmp_path: Path) -> None:
    import aws_cdk as cdk

    from infra.workflows import WorkflowSpec

    asl = tmp_path / "sdk.asl.json"
    asl.write_text(
        json.dumps(
            {
                "StartAt": "A",
                "States": {
                    "A": {"Type": "Task", "Resource": "arn:aws:states:::aws-sdk:ec2:terminateInstances", "End": True}
                },
            }
        )
    )
    stack = cdk.Stack(cdk.App())
    functions = SimpleNamespace(functions={})
    spec = WorkflowSpec("sdk", asl, {})
    with pytest.raises(ConfigError, match="state 'A' calls 'arn:aws:states:::aws-sdk:ec2:terminateInstances'"):
        Workflows(stack, "W", config=NodeflowConfig(cluster_name="x"), functions=functions, specs=(spec,))  # type: ignore[arg-type]


@pytest.mark.parametrize("which", WHICH)
def test_functions_that_start_a_workflow_get_its_arn_and_start_execution(synthesized: Synthesized, which: str) -> None:
    res = synthesized.resources(which)
    machine_ids = {
        m["Properties"]["StateMachineName"].rsplit("-", 1)[1]: lid
        for lid, m in synthesized.resources(which, "AWS::StepFunctions::StateMachine").items()
    }
    cluster = synthesized.stacks[which].config.cluster_name
    for spec in FUNCTIONS:
        fn = next(
            r
            for r in res.values()
            if r["Type"] == "AWS::Lambda::Function"
            and r["Properties"]["FunctionName"] == f"nodeflow-{cluster}-{spec.suffix}"
        )
        env = fn["Properties"]["Environment"]["Variables"]
        starts = {u.split(":", 1)[1] for u in spec.uses if u.startswith("start:")}
        granted = [
            st
            for st in role_statements(res, ref_of(fn["Properties"]["Role"]) or "")
            if "states:StartExecution" in actions_of(st)
        ]
        stack = synthesized.stacks[which]
        own = {w for w in starts if spec.suffix in stack.workflows.invokes[w]}  # a step starting its own workflow
        for workflow in starts - own:
            assert ref_of(env[f"{workflow.upper()}_STATE_MACHINE_ARN"]) == machine_ids[workflow]
        for workflow in own:
            # by name, not by reference: the machine references this function (a reference would be a cycle)
            arn = env[f"{workflow.upper()}_STATE_MACHINE_ARN"]
            assert arn["Fn::Join"][1][-1] == f":stateMachine:nodeflow-{cluster}-{workflow}", arn
        # StartExecution on exactly the machines it starts, nothing else
        resources = [r for st in granted for r in as_list(st["Resource"])]
        assert sorted(ref_of(r) or "" for r in resources if ref_of(r)) == sorted(machine_ids[w] for w in starts - own)
        assert [r for r in resources if not ref_of(r)] == [env[f"{w.upper()}_STATE_MACHINE_ARN"] for w in sorted(own)]
        watched = {u.split(":", 1)[1] for u in spec.uses if u.startswith("watch:")} - starts
        for workflow in watched:  # watched only (gc): the ARN by name, no StartExecution
            arn = env[f"{workflow.upper()}_STATE_MACHINE_ARN"]
            assert arn["Fn::Join"][1][-1] == f":stateMachine:nodeflow-{cluster}-{workflow}", arn
        assert {k for k in env if k.endswith("_STATE_MACHINE_ARN")} == {
            f"{w.upper()}_STATE_MACHINE_ARN" for w in starts | watched
        }
