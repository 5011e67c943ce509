"""SQS: one queue per route destination (``nodeflow.ingress.routing``), each with a dead-letter queue, and the
dead-letter queues of deliveries that never reached a queue or a function.

All queues are encrypted (SSE-SQS, which EventBridge and EventBridge Scheduler can deliver to without a key
policy) and refuse non-TLS requests. A message that fails ``max_receive_count`` times moves to its route's DLQ.
``DELIVERY_DLQS``: events an EventBridge rule could not put on its target queue within the retry policy
(``infra.events``), and scheduled runs EventBridge Scheduler could not invoke (``infra.functions``). Every DLQ
alarms (``infra.monitoring``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.config import NodeflowConfig
from nodeflow.ingress.routing import AWS_ROUTES, ROUTES

__all__ = ["DELIVERY_DLQS", "QUEUES", "QueueSpec", "Queues"]


@dataclass(frozen=True, slots=True)
class QueueSpec:
    visibility_timeout_seconds: int  # >= the consuming function's timeout (checked where it is wired)
    max_receive_count: int
    retention_days: int = 4


# Route queue name -> settings. The provisioner runs one at a time (reserved concurrency 1), so SQS throttles
# its pollers and those receives count: a higher max_receive_count keeps throttled batches out of the DLQ.
QUEUES: Mapping[str, QueueSpec] = {
    "provisioning": QueueSpec(visibility_timeout_seconds=720, max_receive_count=10),
    "disruption": QueueSpec(visibility_timeout_seconds=1080, max_receive_count=5),
    "interruption": QueueSpec(visibility_timeout_seconds=360, max_receive_count=5),
}

# Delivery DLQ name -> what lands there (the alarm's description).
DELIVERY_DLQS: Mapping[str, str] = {
    "events": "events an EventBridge rule could not deliver to its queue (after its retry policy)",
    "schedules": "scheduled runs EventBridge Scheduler could not invoke (after its retry policy)",
}

_routed = {r.queue for r in ROUTES} | {r.queue for r in AWS_ROUTES}
if not _routed <= set(QUEUES):  # a route to a queue nobody creates would fail at deploy time
    raise RuntimeError(f"infra.queues: no QueueSpec for routed queues {sorted(_routed - set(QUEUES))}")


class Queues(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, config: NodeflowConfig) -> None:
        super().__init__(scope, construct_id)
        self.queues: dict[str, sqs.Queue] = {}
        self.dead_letter_queues: dict[str, sqs.Queue] = {}
        for name, spec in QUEUES.items():
            title = name.capitalize()
            dlq = sqs.Queue(
                self,
                f"{title}Dlq",
                queue_name=config.name(f"{name}-dlq", limit=80),
                encryption=sqs.QueueEncryption.SQS_MANAGED,
                enforce_ssl=True,
                retention_period=Duration.days(14),
                removal_policy=RemovalPolicy.DESTROY,
            )
            queue = sqs.Queue(
                self,
                title,
                queue_name=config.name(name, limit=80),
                encryption=sqs.QueueEncryption.SQS_MANAGED,
                enforce_ssl=True,
                visibility_timeout=Duration.seconds(spec.visibility_timeout_seconds),
                retention_period=Duration.days(spec.retention_days),
                dead_letter_queue=sqs.DeadLetterQueue(queue=dlq, max_receive_count=spec.max_receive_count),
                removal_policy=RemovalPolicy.DESTROY,
            )
            self.queues[name] = queue
            self.dead_letter_queues[name] = dlq
        self.delivery_dead_letter_queues: dict[str, sqs.Queue] = {
            name: sqs.Queue(
                self,
                f"{name.capitalize()}DeliveryDlq",
                queue_name=config.name(f"{name}-dlq", limit=80),
                encryption=sqs.QueueEncryption.SQS_MANAGED,
                enforce_ssl=True,
                retention_period=Duration.days(14),
                removal_policy=RemovalPolicy.DESTROY,
            )
            for name in DELIVERY_DLQS
        }

    def __getitem__(self, name: str) -> sqs.Queue:
        return self.queues[name]
