"""Step Functions: the state machines, loaded from ``statemachines/*.asl.json`` (the files the functional tests
execute) with ``definition_substitutions``, X-Ray tracing and logging at level ALL.

Placeholders: each ``WorkflowSpec`` maps its ``${...FunctionArn}`` placeholders to function suffixes (the same
table the sandbox uses); the other names a definition may use are in ``Workflows.values`` (``${ClusterName}``).
A placeholder without a value fails synth naming the file and the placeholder, and so does a Task whose resource
is not a Lambda function of the table (its permissions would not be known here). Every function a Task calls
(directly, or through ``arn:aws:states:::lambda:invoke``) is granted to the state machine's role, nothing else.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aws_cdk import RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from infra.config import ConfigError, NodeflowConfig
from infra.functions import LOG_RETENTION, Functions

__all__ = ["PLACEHOLDER", "WORKFLOWS", "WorkflowSpec", "Workflows", "task_resources"]

ROOT = Path(__file__).resolve().parent.parent
STATEMACHINES = ROOT / "statemachines"
PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_.:-]*)\}")
_LAMBDA_INVOKE = "arn:aws:states:::lambda:invoke"


@dataclass(frozen=True, slots=True)
class WorkflowSpec:
    name: str  # state machine nodeflow-<cluster>-<name>; <NAME>_STATE_MACHINE_ARN for the functions that start it
    definition: Path
    functions: Mapping[str, str]  # placeholder -> function suffix (infra.functions.FUNCTIONS)


WORKFLOWS: tuple[WorkflowSpec, ...] = (
    WorkflowSpec(
        "launch",
        STATEMACHINES / "launch.asl.json",
        {
            "LaunchFunctionArn": "launch",
            "RegisterFunctionArn": "register",
            "InitializeFunctionArn": "initialize",
            "CleanupFunctionArn": "cleanup",
        },
    ),
    WorkflowSpec("replace", STATEMACHINES / "replace.asl.json", {"ReplaceFunctionArn": "replace"}),
    WorkflowSpec(
        "terminate",
        STATEMACHINES / "terminate.asl.json",
        {
            "TaintFunctionArn": "taint",
            "DrainFunctionArn": "drain",
            "TerminateFunctionArn": "terminate",
            "RemoveFinalizerFunctionArn": "finalize",
        },
    ),
)


def _states(states: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every state, including those of Parallel branches and Map iterators."""
    for name, state in states.items():
        yield name, state
        for branch in state.get("Branches", []) or []:
            yield from _states(branch.get("States", {}))
        for key in ("Iterator", "ItemProcessor"):
            inner = state.get(key)
            if isinstance(inner, Mapping):
                yield from _states(inner.get("States", {}))


def task_resources(definition: Mapping[str, Any]) -> list[tuple[str, str, str | None]]:
    """(state name, Resource, the invoked function's placeholder or None) for every Task state."""
    out: list[tuple[str, str, str | None]] = []
    for name, state in _states(definition.get("States", {})):
        if state.get("Type") != "Task":
            continue
        resource = str(state.get("Resource", ""))
        target: str | None = None
        direct = PLACEHOLDER.fullmatch(resource)
        if direct:
            target = direct.group(1)
        elif resource.startswith(_LAMBDA_INVOKE):
            params = state.get("Parameters") or state.get("Arguments") or {}
            m = PLACEHOLDER.match(str(params.get("FunctionName", "")))
            target = m.group(1) if m else None
        out.append((name, resource, target))
    return out


class Workflows(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: NodeflowConfig,
        functions: Functions,
        values: Mapping[str, str] | None = None,
        specs: tuple[WorkflowSpec, ...] = WORKFLOWS,
    ) -> None:
        super().__init__(scope, construct_id)
        self.values: dict[str, str] = {"ClusterName": config.cluster_name, **dict(values or {})}
        self.machines: dict[str, sfn.StateMachine] = {}
        self.invokes: dict[str, list[str]] = {}  # workflow -> function suffixes it calls
        for spec in specs:
            self._machine(config, functions, spec)

    def _machine(self, config: NodeflowConfig, functions: Functions, spec: WorkflowSpec) -> None:
        text = spec.definition.read_text()
        source = spec.definition.relative_to(ROOT) if spec.definition.is_relative_to(ROOT) else spec.definition
        try:
            definition = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"{source}: not valid JSON: {exc}") from None

        substitutions: dict[str, str] = {}
        missing: list[str] = []
        for key in sorted({m.group(1) for m in PLACEHOLDER.finditer(text)}):
            suffix = spec.functions.get(key)
            if suffix is not None and suffix in functions.functions:
                substitutions[key] = functions.functions[suffix].function_arn
            elif key in self.values:
                substitutions[key] = self.values[key]
            else:
                missing.append(key)
        if missing:
            raise ConfigError(
                f"{source}: no substitution for "
                + ", ".join(f"${{{k}}}" for k in missing)
                + " (map it to a function in infra/workflows.py WORKFLOWS)"
            )

        called: list[str] = []
        for state, resource, target in task_resources(definition):
            suffix = spec.functions.get(target) if target else None
            if suffix is None:
                raise ConfigError(
                    f"{source}: state {state!r} calls {resource!r}; only Lambda tasks on a function of "
                    "WORKFLOWS are wired (add the task's permissions in infra/workflows.py)"
                )
            if suffix not in called:
                called.append(suffix)

        cid = "".join(p.capitalize() for p in spec.name.split("-"))
        name = config.name(spec.name, limit=80)
        log_group = logs.LogGroup(
            self,
            f"{cid}Logs",
            log_group_name=f"/aws/vendedlogs/states/{name}",
            retention=LOG_RETENTION,
            removal_policy=RemovalPolicy.DESTROY,
        )
        machine = sfn.StateMachine(
            self,
            cid,
            state_machine_name=name,
            state_machine_type=sfn.StateMachineType.STANDARD,
            definition_body=sfn.DefinitionBody.from_string(text),
            definition_substitutions=substitutions,
            tracing_enabled=True,
            logs=sfn.LogOptions(destination=log_group, level=sfn.LogLevel.ALL, include_execution_data=True),
        )
        # The tasks call the unqualified ARNs: grant exactly those (grant_invoke would add every version, ':*').
        if called:
            machine.add_to_role_policy(
                iam.PolicyStatement(
                    sid="InvokeSteps",
                    actions=["lambda:InvokeFunction"],
                    resources=[functions.functions[suffix].function_arn for suffix in called],
                )
            )
        self.machines[spec.name] = machine
        self.invokes[spec.name] = called
