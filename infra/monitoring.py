"""CloudWatch: one dashboard and the alarms that say something needs a person.

Alarms (each notifies ``alarmTopicArn`` when given):

- a dead-letter queue holds messages (one alarm per DLQ: the route queues', and the delivery DLQs of the
  EventBridge rules and the EventBridge Scheduler schedules, ``infra.queues.DELIVERY_DLQS``);
- a workflow execution failed, timed out or was aborted (one alarm per state machine; for launch these are the
  launch failures: the CleanUp step ran and the NodeClaim was deleted);
- capacity errors: more than a fifth of the NodeClaims created in 15 minutes ended in
  InsufficientCapacityError (``CapacityErrors``, a metric filter on the CleanUp function's log, over the
  provisioner's ``NodeClaimsCreated``);
- the provisioner, gc or webhook function errors (a workflow step's errors are the workflow's to handle);
- decision log items could not be written (``DecisionLogWriteErrors`` of the provisioner, disruption and
  interruption functions), or not before the function's deadline (``DecisionLogWriteTimeouts``): the log has a
  gap, nothing else stopped;
- status or Event writes about NodePools, EC2NodeClasses and NodeClaims failed pass after pass
  (``ReportWritesFailed`` of the provisioner, disruption and gc functions, ``nodeflow.kube.reports``: a write the
  API server refused or failed; in 3 of 5 periods of 5 minutes, so a one-off conflict the next pass rewrites does
  not alarm, a write refused every pass does): conditions and Events are missing, nothing else stopped;
- the webhook answers 5xx (its store or the bus failed) or many 4xx (a misconfigured or unauthorized agent):
  the Function URL's own Url4xxCount / Url5xxCount, which include requests IAM auth refused before the handler.

Custom metrics come from the handlers' Powertools Metrics: namespace ``nodeflow``, dimensions
``service=nodeflow`` and ``cluster=<clusterName>`` (``nodeflow.handlers.common``), so clusters sharing an
account and region keep their own metrics.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from infra.config import NodeflowConfig
from infra.functions import Functions
from infra.queues import DELIVERY_DLQS, Queues
from nodeflow.lifecycle.cleanup import failure_reason

__all__ = ["METRICS_NAMESPACE", "Monitoring"]

METRICS_NAMESPACE = "nodeflow"
# The event reason CleanUp logs for a NodeClaim that found no capacity (``nodeflow.lifecycle.cleanup``).
CAPACITY_ERROR_REASON = failure_reason({"Error": "NoCapacity"})[0]
CAPACITY_ERROR_RATE_THRESHOLD = 0.2
ALARMED_FUNCTION_ERRORS = ("provisioner", "gc", "webhook", "interruption")
# The decision-log writers' metrics (``nodeflow.handlers.common.record_decision_log``) -> what the alarm says.
DECISION_LOG_ALARMS = {
    "DecisionLogWriteErrors": "could not be written to its DynamoDB table",
    "DecisionLogWriteTimeouts": (
        "were not written before the function's deadline (DynamoDB throttled the table longer than the run had "
        "time for)"
    ),
}
# Status / Event writes not done (``nodeflow.kube.reports``), per handler run: alarmed when any happened in
# REPORT_WRITES_DATAPOINTS of REPORT_WRITES_PERIODS periods (the writers run every 1-2 minutes, so a write refused
# every pass fails in every period).
REPORT_WRITES_METRIC = "ReportWritesFailed"
REPORT_WRITES_DATAPOINTS = 3
REPORT_WRITES_PERIODS = 5
_PERIOD = Duration.minutes(5)


def custom_metric(cluster: str, name: str, statistic: str = "Sum", period: Duration = _PERIOD) -> cloudwatch.Metric:
    """A handler metric of this cluster (Powertools: dimension ``service``, default dimension ``cluster``)."""
    return cloudwatch.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=name,
        dimensions_map={"service": "nodeflow", "cluster": cluster},
        statistic=statistic,
        period=period,
    )


class Monitoring(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: NodeflowConfig,
        queues: Queues,
        functions: Functions,
        machines: Mapping[str, sfn.StateMachine],
    ) -> None:
        super().__init__(scope, construct_id)
        self.config = config
        self.alarms: dict[str, cloudwatch.Alarm] = {}
        self._action: actions.SnsAction | None = None
        if config.alarm_topic_arn is not None:
            topic = sns.Topic.from_topic_arn(self, "AlarmTopic", config.alarm_topic_arn)
            self._action = actions.SnsAction(topic)

        # --- capacity errors: counted from the CleanUp step's JSON log lines ---------------------------------
        # Dimension: the function's name (Powertools logs it), which is this cluster's: clusters sharing an account
        # do not mix.
        cleanup = functions.functions["cleanup"]
        logs.MetricFilter(
            self,
            "CapacityErrorsFilter",
            log_group=cleanup.log_group,
            filter_pattern=logs.FilterPattern.string_value("$.reason", "=", CAPACITY_ERROR_REASON),
            metric_namespace=METRICS_NAMESPACE,
            metric_name="CapacityErrors",
            metric_value="1",
            dimensions={"FunctionName": "$.function_name"},
        )
        capacity_errors = self.capacity_errors = cloudwatch.Metric(
            namespace=METRICS_NAMESPACE,
            metric_name="CapacityErrors",
            dimensions_map={"FunctionName": config.name("cleanup")},
            statistic="Sum",
            period=Duration.minutes(15),
        )
        created = custom_metric(config.cluster_name, "NodeClaimsCreated", period=Duration.minutes(15))
        capacity_rate = cloudwatch.MathExpression(
            expression="IF(created > 0, errors / created, 0)",
            using_metrics={"errors": capacity_errors, "created": created},
            label="capacity errors per NodeClaim created",
            period=Duration.minutes(15),
        )
        self._alarm(
            "CapacityErrorRate",
            capacity_rate,
            threshold=CAPACITY_ERROR_RATE_THRESHOLD,
            description=(
                f"more than {CAPACITY_ERROR_RATE_THRESHOLD:.0%} of the NodeClaims created in 15 minutes ended in "
                f"{CAPACITY_ERROR_REASON}: widen the NodePools' instance types, zones or capacity types"
            ),
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        )

        # --- the decision log: items not written (the Lambdas went on; the log has a gap) ------------------------
        for name, what in DECISION_LOG_ALARMS.items():
            self._alarm(
                name,
                custom_metric(config.cluster_name, name, period=Duration.minutes(15)),
                threshold=1,
                description=(
                    f"decision log items {what} (provisioning and disruption went on; the log has a gap): see the "
                    "functions' 'decision log:' log lines"
                ),
            )

        # --- status and Events not written (the Lambdas went on; users miss conditions and Events) -------------
        self._alarm(
            REPORT_WRITES_METRIC,
            custom_metric(config.cluster_name, REPORT_WRITES_METRIC),
            threshold=1,
            evaluation_periods=REPORT_WRITES_PERIODS,
            datapoints_to_alarm=REPORT_WRITES_DATAPOINTS,
            description=(
                "status or Event writes about NodePools, EC2NodeClasses or NodeClaims were refused or failed in "
                f"{REPORT_WRITES_DATAPOINTS} of the last {REPORT_WRITES_PERIODS} periods of 5 minutes (provisioning, "
                "disruption and gc went on; conditions and Events are missing): see the provisioner, disruption and "
                "gc functions' '... not written' log lines"
            ),
        )

        # --- dead-letter queues -------------------------------------------------------------------------------
        for name, dlq in queues.dead_letter_queues.items():
            self._alarm(
                f"{name.capitalize()}DeadLetters",
                dlq.metric_approximate_number_of_messages_visible(period=_PERIOD, statistic="Maximum"),
                threshold=1,
                description=f"messages of the {name} queue failed {name} processing and wait in its DLQ",
            )
        for name, dlq in queues.delivery_dead_letter_queues.items():
            self._alarm(
                f"{name.capitalize()}DeliveryDeadLetters",
                dlq.metric_approximate_number_of_messages_visible(period=_PERIOD, statistic="Maximum"),
                threshold=1,
                description=f"{DELIVERY_DLQS[name]} wait in {config.name(f'{name}-dlq', limit=80)}",
            )

        # --- workflows ----------------------------------------------------------------------------------------
        for name, machine in machines.items():
            failed = cloudwatch.MathExpression(
                expression="FILL(failed, 0) + FILL(timedout, 0) + FILL(aborted, 0)",
                using_metrics={
                    "failed": machine.metric_failed(period=_PERIOD),
                    "timedout": machine.metric_timed_out(period=_PERIOD),
                    "aborted": machine.metric_aborted(period=_PERIOD),
                },
                label=f"{name} executions failed, timed out or aborted",
                period=_PERIOD,
            )
            self._alarm(
                f"{name.capitalize()}ExecutionsFailed",
                failed,
                threshold=1,
                description=f"{name} workflow executions failed (see the execution's events in Step Functions)",
            )

        # --- functions ----------------------------------------------------------------------------------------
        for suffix in ALARMED_FUNCTION_ERRORS:
            fn = functions.functions.get(suffix)
            if fn is not None:
                self._alarm(
                    f"{suffix.capitalize()}Errors",
                    fn.metric_errors(period=_PERIOD, statistic="Sum"),
                    threshold=1,
                    description=f"the {suffix} function failed (see its log group)",
                )
        webhook = functions.functions.get("webhook")
        if webhook is not None:
            self._alarm(
                "Webhook5xx",
                self._url_metric(webhook, "Url5xxCount"),
                threshold=5,
                description="the webhook answered 5xx: its DynamoDB table or the event bus failed; the agent retries",
            )
            self._alarm(
                "Webhook4xx",
                self._url_metric(webhook, "Url4xxCount"),
                threshold=20,
                description="the webhook refused requests: agent credentials, signature, clock, cluster name, schema",
            )

        self.dashboard = self._dashboard(config, queues, functions, machines)

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def _url_metric(fn: lambda_.Function, name: str) -> cloudwatch.Metric:
        return cloudwatch.Metric(
            namespace="AWS/Lambda",
            metric_name=name,
            dimensions_map={"FunctionName": fn.function_name, "Resource": fn.function_name},
            statistic="Sum",
            period=_PERIOD,
        )

    def _alarm(
        self,
        construct_id: str,
        metric: cloudwatch.IMetric,
        *,
        threshold: float,
        description: str,
        comparison: cloudwatch.ComparisonOperator = cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        evaluation_periods: int = 1,
        datapoints_to_alarm: int | None = None,
    ) -> cloudwatch.Alarm:
        alarm = cloudwatch.Alarm(
            self,
            construct_id,
            alarm_description=f"nodeflow {self.config.cluster_name}: {description}",
            metric=metric,
            threshold=threshold,
            evaluation_periods=evaluation_periods,
            datapoints_to_alarm=datapoints_to_alarm,
            comparison_operator=comparison,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        if self._action is not None:
            alarm.add_alarm_action(self._action)
            alarm.add_ok_action(self._action)
        self.alarms[construct_id] = alarm
        return alarm

    def _dashboard(
        self,
        config: NodeflowConfig,
        queues: Queues,
        functions: Functions,
        machines: Mapping[str, sfn.StateMachine],
    ) -> cloudwatch.Dashboard:
        metric = functools.partial(custom_metric, config.cluster_name)
        dashboard = cloudwatch.Dashboard(self, "Dashboard", dashboard_name=config.name("dashboard", limit=255))
        width = 8
        dashboard.add_widgets(
            cloudwatch.AlarmStatusWidget(title="Alarms", alarms=list(self.alarms.values()), width=24, height=4)
        )
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Provisioning",
                left=[metric("PendingPods", "Maximum"), metric("NodeClaimsCreated")],
                right=[metric("InstancesLaunched"), metric("LaunchFailures")],
                width=width,
            ),
            cloudwatch.GraphWidget(
                title="Capacity errors",
                left=[self.capacity_errors.with_(period=_PERIOD)],
                right=[metric("LeakedInstancesTerminated")],
                width=width,
            ),
            cloudwatch.GraphWidget(
                title="Termination",
                left=[metric("TerminationsStarted"), metric("NodesTerminated")],
                right=[metric("PodsEvicted"), metric("OfferingsMarkedUnavailable")],
                width=width,
            ),
            cloudwatch.GraphWidget(
                title="Webhook responses",
                left=[metric("Webhook2xx"), metric("Webhook4xx"), metric("Webhook5xx")],
                right=[metric("EventsAccepted"), metric("EventsDuplicate")],
                width=width,
            ),
        )
        dashboard.add_widgets(
            *(
                cloudwatch.GraphWidget(
                    title=f"{name} executions",
                    left=[
                        machine.metric_started(period=_PERIOD),
                        machine.metric_succeeded(period=_PERIOD),
                        machine.metric_failed(period=_PERIOD),
                        machine.metric_timed_out(period=_PERIOD),
                    ],
                    width=width,
                )
                for name, machine in machines.items()
            ),
            cloudwatch.GraphWidget(
                title="Queues (visible messages)",
                left=[
                    q.metric_approximate_number_of_messages_visible(period=_PERIOD, label=name)
                    for name, q in queues.queues.items()
                ],
                right=[
                    q.metric_approximate_number_of_messages_visible(period=_PERIOD, label=f"{name} DLQ")
                    for name, q in {**queues.dead_letter_queues, **queues.delivery_dead_letter_queues}.items()
                ],
                width=width,
            ),
            cloudwatch.GraphWidget(
                title="Oldest message age (s)",
                left=[
                    q.metric_approximate_age_of_oldest_message(period=_PERIOD, label=name)
                    for name, q in queues.queues.items()
                ],
                width=width,
            ),
        )
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Function errors",
                left=[fn.metric_errors(period=_PERIOD, label=s) for s, fn in functions.functions.items()],
                width=width,
            ),
            cloudwatch.GraphWidget(
                title="Function duration p99 (ms)",
                left=[
                    fn.metric_duration(period=_PERIOD, statistic="p99", label=s)
                    for s, fn in functions.functions.items()
                ],
                width=width,
            ),
            cloudwatch.GraphWidget(
                title="Function throttles",
                left=[fn.metric_throttles(period=_PERIOD, label=s) for s, fn in functions.functions.items()],
                width=width,
            ),
        )
        return dashboard
