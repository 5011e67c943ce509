"""Starting workflow executions, idempotently (the execution name is the NodeClaim's name)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from nodeflow.aws.errors import aws_errors

__all__ = ["start_execution", "start_workflow"]


def start_execution(sfn: Any, state_machine_arn: str, name: str, payload: Mapping[str, Any]) -> bool:
    """Start execution ``name``; False when one of that name exists already (running or done)."""
    with aws_errors():
        try:
            sfn.start_execution(stateMachineArn=state_machine_arn, name=name, input=json.dumps(dict(payload)))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ExecutionAlreadyExists":
                return False
            raise
    return True


_ENDED = frozenset({"FAILED", "TIMED_OUT", "ABORTED"})


def _status(sfn: Any, execution_arn: str) -> str | None:
    """The execution's status; None when there is no execution of that ARN."""
    with aws_errors():
        try:
            return str(sfn.describe_execution(executionArn=execution_arn)["status"])
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ExecutionDoesNotExist":
                return None
            raise


def start_workflow(
    sfn: Any, state_machine_arn: str, name: str, payload: Mapping[str, Any], *, attempts: int = 5
) -> tuple[bool, str]:
    """Start the workflow for ``name`` unless one is running or succeeded; returns (started, execution name).

    The first execution is named ``name``; an execution name stays taken after the run ends, so when the
    last one failed, timed out or was aborted the next is ``name-2``, ``name-3``, ... (a retry after a
    failure is possible, a second start while one runs or after success is a no-op).

    Each name is looked up before it is started: StartExecution answers a start with the name and input of
    a *running* execution with that execution (no error), which would read as a new start.
    """
    arn_base = state_machine_arn.replace(":stateMachine:", ":execution:", 1)
    for i in range(1, attempts + 1):
        candidate = name if i == 1 else f"{name}-{i}"
        status = _status(sfn, f"{arn_base}:{candidate}")
        if status is None:
            if start_execution(sfn, state_machine_arn, candidate, payload):
                return True, candidate
            status = _status(sfn, f"{arn_base}:{candidate}") or "RUNNING"  # another caller started it just now
        if status not in _ENDED:
            return False, candidate  # running, pending or succeeded: nothing to do
    return False, f"{name}-{attempts}"
