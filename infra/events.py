"""EventBridge: the nodeflow bus the webhook publishes to, and the rules that route to the queues.

The rules come from ``nodeflow.ingress.routing`` (the same module the sandbox builds its moto rules from), so
the deployed routing and the tested routing cannot drift: ``ROUTES`` on the bus ``nodeflow-<cluster>``, and,
with interruption handling on, ``AWS_ROUTES`` (spot interruption, rebalance, instance state change, AWS Health
scheduled change) on the account's default bus. Each SQS target adds the queue policy that lets this rule,
and only this rule (``aws:SourceArn``), send to the queue.

Failure handling: every target has an explicit retry policy (``TARGET_RETRY_ATTEMPTS`` attempts with
EventBridge's backoff, for at most ``TARGET_MAX_EVENT_AGE_SECONDS``) and the ``events`` delivery dead-letter queue
(``infra.queues``), whose queue policy lets exactly these rules send to it. An event there was never seen by
nodeflow (the DLQ alarms): a pending pod is picked up by the next batch anyway, a lost interruption is not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.config import NodeflowConfig
from infra.queues import Queues
from nodeflow.ingress.routing import AWS_ROUTES, ROUTES, event_pattern

__all__ = ["TARGET_MAX_EVENT_AGE_SECONDS", "TARGET_RETRY_ATTEMPTS", "Events"]

# A delivery to SQS fails only while the queue or its policy is broken or SQS is unavailable: retry for up to an
# hour (an interruption warning is stale by then anyway), then keep the event in the DLQ for a person.
TARGET_RETRY_ATTEMPTS = 20
TARGET_MAX_EVENT_AGE_SECONDS = 3600


_PATTERN_FIELDS = {"source": "source", "detail-type": "detail_type", "detail": "detail", "account": "account"}


def to_event_pattern(pattern: Mapping[str, Any]) -> events.EventPattern:
    """The routing module's JSON pattern as an ``EventPattern`` (which renders the same JSON)."""
    unknown = sorted(set(pattern) - set(_PATTERN_FIELDS))
    if unknown:
        raise ValueError(f"infra.events: pattern fields {unknown} have no EventPattern field; add them here")
    return events.EventPattern(**{_PATTERN_FIELDS[k]: v for k, v in pattern.items()})


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.replace("_", "-").split("-"))


class Events(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, config: NodeflowConfig, queues: Queues) -> None:
        super().__init__(scope, construct_id)
        self.bus = events.EventBus(self, "Bus", event_bus_name=config.prefix)
        self.dead_letter_queue = queues.delivery_dead_letter_queues["events"]
        self.rules: dict[str, events.Rule] = {}
        for route in ROUTES:
            pattern = event_pattern(config.cluster_name, route.detail_types)
            self.rules[route.name] = self._rule(
                _camel(route.name), route.name, self.bus, pattern, queues[route.queue], config
            )
        if config.interruption:
            default_bus = events.EventBus.from_event_bus_name(self, "DefaultBus", "default")
            for aws_route in AWS_ROUTES:
                self.rules[aws_route.name] = self._rule(
                    "Aws" + _camel(aws_route.name),
                    aws_route.name,
                    default_bus,
                    dict(aws_route.pattern),
                    queues[aws_route.queue],
                    config,
                )

    def _rule(
        self,
        construct_id: str,
        route: str,
        bus: events.IEventBus,
        pattern: Mapping[str, Any],
        queue: sqs.IQueue,
        config: NodeflowConfig,
    ) -> events.Rule:
        return events.Rule(
            self,
            construct_id,
            event_bus=bus,
            event_pattern=to_event_pattern(pattern),
            description=f"nodeflow {config.cluster_name}: route {route}",
            targets=[
                targets.SqsQueue(
                    queue,
                    dead_letter_queue=self.dead_letter_queue,
                    retry_attempts=TARGET_RETRY_ATTEMPTS,
                    max_event_age=Duration.seconds(TARGET_MAX_EVENT_AGE_SECONDS),
                )
            ],
        )
