"""DynamoDB: the one table every Lambda shares (``pk``/``sk`` strings, expiry in ``ttl``), and the decision log's.

What lives there: the unavailable-offerings cache (3 minutes), the webhook's nonces and event ids. Items carry
their expiry in ``ttl`` (epoch seconds); readers check it, DynamoDB's TTL only keeps the table small. Everything
in it can be rebuilt, so the table goes with the stack.

The decision log (``nodeflow.governance.decisions``: records by day, index items by NodePool and by pod) has a table
of its own, ``<prefix>-decisions``: its items live for ``decisionLogTtlDays`` (90 by default), are written only by
the provisioner, the disruption and the interruption Lambda (BatchWriteItem) and read by ``python -m nodeflow
decisions``. Like the shared table it goes with the stack (a retained table of the same name would block deploying
the stack again).
"""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct

from infra.config import NodeflowConfig

__all__ = ["Data"]


class Data(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, config: NodeflowConfig) -> None:
        super().__init__(scope, construct_id)
        self.table = dynamodb.Table(
            self,
            "Table",
            table_name=config.prefix,
            partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name="sk", type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            time_to_live_attribute="ttl",
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.decisions = dynamodb.Table(
            self,
            "Decisions",
            table_name=config.name("decisions", limit=255),
            partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name="sk", type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            time_to_live_attribute="ttl",
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            removal_policy=RemovalPolicy.DESTROY,
        )
