"""Starting workflow executions, idempotently (the execution name is the NodeClaim's name).

A *workflow* (e.g. "the terminate workflow of NodeClaim X") is one run or more, and each run is a chain of
executions that continue one another:

- Runs: the first is named ``X``; an execution name stays taken after the run ends, so after a run failed,
  timed out or was aborted the next is ``X-2``, ``X-3``, ... (``run_name``).
- Chains: a long execution (a drain held for days) hands over to a new execution of the same state machine
  before its history grows too long (``nodeflow.lifecycle.termination``); generation g >= 2 of run ``R`` is
  ``R_c<g>`` (``chain_name``). ``_`` never occurs in Kubernetes names, so these never collide with a run.
  Only generation g starts generation g + 1, so if g exists, every earlier one exists too.
- Every name is kept to Step Functions' limits (1-80 characters of ``[A-Za-z0-9._-]``, ``execution_name``): a
  longer name, or one with other characters, becomes its first 71 valid characters + ``_`` + 8 hex of its
  SHA-256, the same every time. Names that fit are used unchanged.

``start_workflow`` treats a chain as one workflow: a start while its latest execution runs, or after the
latest one succeeded, is a no-op; after the latest one failed, the next run starts.

Must not touch: when a workflow is due (the lifecycle steps decide) or what it does (statemachines/).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from nodeflow.aws.errors import aws_errors, client_error_code

__all__ = [
    "EXECUTION_NAME_PATTERN",
    "MAX_EXECUTION_NAME",
    "chain_name",
    "execution_name",
    "launch_status",
    "run_name",
    "start_execution",
    "start_launch",
    "start_workflow",
]

MAX_EXECUTION_NAME = 80
EXECUTION_NAME_PATTERN = r"^[A-Za-z0-9._-]{1,80}$"
_FITS = re.compile(EXECUTION_NAME_PATTERN)
_INVALID = re.compile(r"[^A-Za-z0-9._-]")
_DIGEST = 8


def execution_name(text: str) -> str:
    """``text`` if it is a valid execution name, else a valid one derived from it (deterministic)."""
    if _FITS.match(text):
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:_DIGEST]
    return f"{_INVALID.sub('-', text)[: MAX_EXECUTION_NAME - _DIGEST - 1]}_{digest}"


def run_name(name: str, run: int = 1) -> str:
    """The first execution of run ``run`` (1: ``name``, then ``name-2``, ``name-3``, ...)."""
    return execution_name(name if run <= 1 else f"{name}-{run}")


def chain_name(root: str, generation: int = 1) -> str:
    """Generation ``generation`` of the chain that starts with execution ``root`` (1: ``root`` itself)."""
    return execution_name(root if generation <= 1 else f"{root}_c{generation}")


def start_execution(sfn: Any, state_machine_arn: str, name: str, payload: Mapping[str, Any]) -> bool:
    """Start execution ``name``; False when one of that name exists already (running or done)."""
    with aws_errors():
        try:
            sfn.start_execution(stateMachineArn=state_machine_arn, name=name, input=json.dumps(dict(payload)))
        except Exception as exc:
            if client_error_code(exc) == "ExecutionAlreadyExists":
                return False
            raise
    return True


_ENDED = frozenset({"SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"})
_FAILED = frozenset({"FAILED", "TIMED_OUT", "ABORTED"})


def _status(sfn: Any, execution_arn: str) -> str | None:
    """The execution's status; None when there is no execution of that ARN."""
    with aws_errors():
        try:
            return str(sfn.describe_execution(executionArn=execution_arn)["status"])
        except Exception as exc:
            if client_error_code(exc) == "ExecutionDoesNotExist":
                return None
            raise


def _latest(sfn: Any, arn_base: str, root: str) -> tuple[str, str] | None:
    """(name, status) of the latest execution of the chain that starts with ``root``; None if ``root`` does
    not exist. Generations exist from 1 up to some g, so g is found in O(log g) lookups (doubling, then
    halving)."""
    seen: dict[int, tuple[int, str | None]] = {}  # generation -> (order of the lookup, status)

    def probe(g: int) -> str | None:
        status = _status(sfn, f"{arn_base}:{chain_name(root, g)}")
        seen[g] = (len(seen), status)
        return status

    if probe(1) is None:
        return None
    low, high = 1, 2
    while probe(high) is not None:
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        if probe(middle) is None:
            high = middle
        else:
            low = middle
    # An ended execution starts no successor, but ``low`` may have handed over between the lookup that found
    # low + 1 missing and the one that found ``low`` ended: then look at low + 1 again (and follow on).
    while True:
        order, status = seen[low]
        next_order, next_status = seen[low + 1]
        if next_status is not None:
            low += 1
            if low + 1 not in seen:
                probe(low + 1)
        elif status in _ENDED and next_order < order:
            probe(low + 1)
        else:
            return chain_name(root, low), str(status)


def start_launch(sfn: Any, state_machine_arn: str, node_claim: str) -> bool:
    """Start the launch workflow of ``node_claim`` (one execution, named after it); False if it exists."""
    return start_execution(sfn, state_machine_arn, execution_name(node_claim), {"nodeClaim": node_claim})


def launch_status(sfn: Any, state_machine_arn: str, node_claim: str) -> str | None:
    """The status of ``node_claim``'s launch execution (RUNNING, SUCCEEDED, FAILED, ...); None if none exists."""
    arn_base = state_machine_arn.replace(":stateMachine:", ":execution:", 1)
    return _status(sfn, f"{arn_base}:{execution_name(node_claim)}")


def start_workflow(
    sfn: Any, state_machine_arn: str, name: str, payload: Mapping[str, Any], *, attempts: int = 5
) -> tuple[bool, str]:
    """Start the workflow for ``name`` unless one is running or succeeded; returns (started, execution name).

    The latest execution of each run (following its chain of continued executions) decides: running, pending
    or succeeded, nothing to do (its name is returned); failed, timed out or aborted, the next run starts as
    ``name-2``, ``name-3``, ... up to ``attempts`` runs.

    Each name is looked up before it is started: StartExecution answers a start with the name and input of
    a *running* execution with that execution (no error), which would read as a new start.
    """
    arn_base = state_machine_arn.replace(":stateMachine:", ":execution:", 1)
    last = run_name(name, attempts)
    for i in range(1, attempts + 1):
        root = run_name(name, i)
        latest = _latest(sfn, arn_base, root)
        if latest is None:
            if start_execution(sfn, state_machine_arn, root, payload):
                return True, root
            latest = _latest(sfn, arn_base, root) or (root, "RUNNING")  # another caller started it just now
        execution, status = latest
        if status not in _FAILED:
            return False, execution  # running, pending or succeeded: nothing to do
        last = execution
    return False, last
