"""Lambda: the replace workflow's steps (``action``: check | terminate | rollback) for a disruption
command that replaces nodes; the workflow's state is passed as ``replace``.

Must not touch: what each replace step does (``nodeflow.lifecycle.replace``); this reads the workflow state and calls
it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from nodeflow.aws.sfn import start_workflow
from nodeflow.handlers.common import logger, metrics, parse, tracer, workflow_step
from nodeflow.handlers.karpenter_metrics import record_disruptions, record_queue_failure
from nodeflow.handlers.runtime import runtime
from nodeflow.lifecycle.replace import ReplaceDeps, check, rollback, terminate_candidates


class Candidate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    node: str = Field(min_length=1, max_length=253)
    node_claim: str | None = Field(default=None, alias="nodeClaim", max_length=253)


class ReplaceState(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    reason: str = Field(min_length=1, max_length=64)
    candidates: list[Candidate] = Field(min_length=1)
    replacements: list[str] = Field(min_length=1)
    deadline: str


class ReplaceStep(BaseModel):
    model_config = ConfigDict(extra="ignore")

    action: Literal["check", "terminate", "rollback"]
    replace: ReplaceState


def deps() -> ReplaceDeps:
    rt = runtime()
    s = rt.settings.require("terminate_state_machine_arn")
    sfn, arn = rt.client("stepfunctions"), s.terminate_state_machine_arn or ""
    return ReplaceDeps(
        kube=rt.kube,
        recorder=rt.recorder,
        now=rt.now,
        start_terminate=lambda claim, reason: start_workflow(sfn, arn, claim, {"nodeClaim": claim, "reason": reason})[
            0
        ],
    )


ACTIONS = {"check": check, "terminate": terminate_candidates, "rollback": rollback}


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@workflow_step
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    step = parse(ReplaceStep, event)
    result = ACTIONS[step.action](deps(), step.replace.model_dump(by_alias=True))
    record_disruptions((step.replace.reason, labels) for labels in result.pop("disrupted", []))  # not in the state
    if step.action == "rollback":
        record_queue_failure(step.replace.reason, result.pop("failedLaunches", 0))
    logger.info("replace step", extra={"action": step.action, **result})
    return result
