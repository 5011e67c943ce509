"""Starting workflow executions, idempotently (the execution name is the NodeClaim's name)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from nodeflow.aws.errors import aws_errors

__all__ = ["start_execution"]


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
