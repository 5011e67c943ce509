"""The nodeflow stack. Empty for now; later issues add one construct module per concern."""

from aws_cdk import Stack
from constructs import Construct


class NodeflowStack(Stack):
    def __init__(self, scope: Construct, construct_id: str, **kwargs: object) -> None:
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
