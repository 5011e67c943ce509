"""Lambda: the terminate workflow's Taint step (delete the NodeClaim and Node, taint and label the Node).

Must not touch: what the Taint step does (``nodeflow.lifecycle.termination.taint``); this reads the workflow state and
calls it.
"""

from __future__ import annotations

from typing import Any

from nodeflow.handlers.common import TerminationInput, logger, parse, termination_step, tracer
from nodeflow.handlers.runtime import runtime
from nodeflow.lifecycle.termination import TerminationDeps, taint


def deps() -> TerminationDeps:
    """What every terminate-workflow step needs (shared by the four handlers)."""
    rt = runtime()
    return TerminationDeps(
        kube=rt.kube,
        ec2_client=lambda: rt.client("ec2"),
        recorder=rt.recorder,
        now=rt.now,
        cluster_name=rt.settings.cluster_name,
    )


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@termination_step
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    step = parse(TerminationInput, event)
    result = taint(deps(), step.node_claim, step.reason)
    logger.info("terminating", extra=result)
    return result
