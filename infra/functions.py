"""Lambda: every function, its role, log group, environment, permissions and trigger, from one table.

``FUNCTIONS`` lists one ``FunctionSpec`` per handler module in ``functions/nodeflow/handlers`` (a test fails
when a handler has no spec or a spec no handler). A spec names what the function *uses*; each use adds the
environment variables the handler reads (``nodeflow.handlers.runtime.Settings``) and the IAM statements it
needs, nothing else:

    kube              the Kubernetes API: an EKS access entry of its own, in the function's Kubernetes groups
                      (``infra.cluster_rbac.FUNCTION_GROUPS``, bound by infra/cluster/controller-rbac.yaml),
                      eks:DescribeCluster unless clusterEndpoint/clusterCa are given; CLUSTER_ENDPOINT,
                      CLUSTER_CA_DATA, KUBERNETES_VERSION
    catalog           instance types and prices (ec2:Describe*, pricing); CATALOG_SOURCE
    offerings:read    the unavailable-offerings cache (Query on its partition); TABLE_NAME
    offerings:write   ... and marking offerings (BatchWriteItem on its partition); TABLE_NAME
    nodeclass         resolve EC2NodeClasses: subnets, security groups, AMIs (incl. the public SSM parameters of
                      aliases), the instance profile for spec.role (get, create, add the role: PassRole, node role)
    fleet             launch templates, CreateFleet/RunInstances with the cluster's tags, PassRole (node role);
                      CLUSTER_DNS
    ec2:read          DescribeInstances (the cluster's instances and their states)
    ec2:terminate     DescribeInstances, TerminateInstances (owned instances)
    ec2:status        DescribeInstanceStatus (failed status checks and scheduled events, polled every minute)
    requeue           sqs:SendMessage to the provisioning queue; PROVISIONING_QUEUE_URL
    dedup             the webhook's nonces and event ids (PutItem, BatchWriteItem on those partitions); TABLE_NAME
    publish           events:PutEvents on the nodeflow bus; EVENT_BUS_NAME
    decisions         write the decision log (BatchWriteItem on its table); DECISION_TABLE_NAME, DECISION_LOG_TTL_DAYS
    webhook           WEBHOOK_AUTH, AGENT_PRINCIPAL_ARNS, and in hmac mode the secret (WEBHOOK_HMAC_SECRET_ARN)
    install           the custom resources' function (infra/install.py): eks:DescribeCluster (the cluster check),
                      CLUSTER_ENDPOINT, CLUSTER_CA_DATA; its cluster access (an EKS access entry) and the HMAC
                      secret's read are granted by infra/install.py when the stack installs in the cluster
    start:<workflow>  states:StartExecution on that state machine; <WORKFLOW>_STATE_MACHINE_ARN
    watch:<workflow>  states:DescribeExecution on its executions (``start_workflow`` retries after a failure; gc
                      looks for launches that ended without cleaning up); <WORKFLOW>_STATE_MACHINE_ARN

A step of a workflow that starts that same workflow (the drain hands a long drain over to a new terminate
execution) gets its ARN built from the state machine's name: a reference would make the state machine (which
references the function) and the function depend on each other.

Triggers: ``queue`` (an SQS event source on a route queue, with ReportBatchItemFailures), ``schedule``
(EventBridge Scheduler: a retry policy within the schedule's period, then the ``schedules`` delivery DLQ; an
asynchronous invocation that was not run within the period is dropped, not replayed after the next run),
``url`` (the Function URL; AWS_IAM in iam mode, with a resource policy for the agent's role; reserved
concurrency ``webhookConcurrency``, so a flood of requests cannot take the account's concurrency).

Every function: Python 3.12 on arm64, X-Ray active, Powertools settings, its own role and log group (no managed
policies, except Lambda's ENI policy in a VPC), optionally in the configured VPC.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aws_cdk import ArnFormat, CfnOutput, Duration, RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_scheduler_targets as scheduler_targets
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from infra.bundling import LAMBDA_ARCHITECTURE, LAMBDA_RUNTIME
from infra.cluster_rbac import FUNCTION_GROUPS, groups_of
from infra.config import ConfigError, NodeflowConfig
from infra.data import Data
from infra.events import Events
from infra.iam import AgentRole, Permissions, access_entry
from infra.queues import QUEUES, Queues
from nodeflow.aws.dedup import EVENT_PARTITION, NONCE_PARTITION
from nodeflow.aws.offerings import PARTITION as OFFERINGS_PARTITION
from nodeflow.ingress.routing import PROVISIONING_BATCH_SIZE, PROVISIONING_BATCH_WINDOW_SECONDS

__all__ = ["FUNCTIONS", "LOG_RETENTION", "POWERTOOLS_ENVIRONMENT", "FunctionSpec", "Functions", "QueueTrigger"]

LOG_RETENTION = logs.RetentionDays.ONE_MONTH
SCHEDULE_RETRY_ATTEMPTS = 3
POWERTOOLS_ENVIRONMENT: Mapping[str, str] = {
    "POWERTOOLS_SERVICE_NAME": "nodeflow",
    "POWERTOOLS_METRICS_NAMESPACE": "nodeflow",
    "POWERTOOLS_LOG_LEVEL": "INFO",
    "POWERTOOLS_TRACER_CAPTURE_RESPONSE": "false",  # results can be large (a provisioner batch, a NodeClaim)
}
USES = frozenset(
    {
        "kube",
        "catalog",
        "offerings:read",
        "offerings:write",
        "nodeclass",
        "fleet",
        "ec2:read",
        "ec2:terminate",
        "ec2:status",
        "ec2:launch-templates",
        "requeue",
        "dedup",
        "publish",
        "webhook",
        "decisions",
        "install",
    }
)


@dataclass(frozen=True, slots=True)
class QueueTrigger:
    """An SQS event source on route queue ``queue`` (``infra.queues.QUEUES``)."""

    queue: str
    batch_size: int = 10
    max_batching_window_seconds: int = 0
    report_batch_item_failures: bool = True


@dataclass(frozen=True, slots=True)
class FunctionSpec:
    module: str  # nodeflow.handlers.<module>; the function is nodeflow-<cluster>-<module with '-' for '_'>
    description: str
    timeout_seconds: int  # below the calling state's TimeoutSeconds (tests check)
    memory_mb: int = 512
    uses: tuple[str, ...] = ()
    queue: QueueTrigger | None = None
    schedule_minutes: int | None = None
    url: bool = False
    reserved_concurrency: int | None = None

    @property
    def suffix(self) -> str:
        return self.module.replace("_", "-")


FUNCTIONS: tuple[FunctionSpec, ...] = (
    FunctionSpec(
        "provisioner",
        "Provision pending pods: snapshot, solve, create NodeClaims, start one launch execution each",
        timeout_seconds=120,
        memory_mb=2048,  # the solver is CPU-bound; memory buys CPU
        # requeue: a delayed message on its own queue for pods a pause window holds (run again when it closes)
        uses=("kube", "catalog", "offerings:read", "nodeclass", "start:launch", "decisions", "requeue"),
        queue=QueueTrigger(
            "provisioning",
            batch_size=PROVISIONING_BATCH_SIZE,
            max_batching_window_seconds=PROVISIONING_BATCH_WINDOW_SECONDS,
        ),
        reserved_concurrency=1,  # one solve at a time: a second one would provision the same pods
    ),
    FunctionSpec(
        "launch",
        "Launch step: CreateFleet for one NodeClaim, capacity fallbacks, NodeClaim status",
        timeout_seconds=240,
        memory_mb=1024,
        uses=("kube", "catalog", "offerings:write", "nodeclass", "fleet"),
    ),
    FunctionSpec("register", "Register step: sync the Node with its NodeClaim", timeout_seconds=50, uses=("kube",)),
    FunctionSpec("initialize", "Initialize step: wait for a ready node", timeout_seconds=50, uses=("kube",)),
    FunctionSpec(
        "cleanup",
        "CleanUp step: terminate a failed NodeClaim's instances, delete it, requeue its pods",
        timeout_seconds=100,
        uses=("kube", "ec2:terminate", "requeue"),
    ),
    FunctionSpec(
        "gc",
        "Garbage collection: leaked instances and NodeClaims whose instance is gone, EC2NodeClass readiness, "
        "unused launch templates",
        timeout_seconds=110,
        uses=("kube", "ec2:terminate", "requeue", "nodeclass", "ec2:launch-templates", "watch:launch"),
        schedule_minutes=2,
    ),
    # The terminate workflow (statemachines/terminate.asl.json): one execution per node.
    FunctionSpec(
        "taint", "Taint step: delete the NodeClaim and Node, taint the Node", timeout_seconds=50, uses=("kube",)
    ),
    FunctionSpec(
        "drain",
        "Drain step: evict pods group by group within PodDisruptionBudgets, wait for volumes",
        timeout_seconds=100,
        uses=("kube", "ec2:read", "start:terminate", "watch:terminate"),  # a long drain continues in a new execution
    ),
    FunctionSpec(
        "terminate",
        "Terminate step: TerminateInstances for the NodeClaim, done once the instance shuts down",
        timeout_seconds=50,
        uses=("kube", "ec2:terminate"),
    ),
    FunctionSpec(
        "finalize",
        "RemoveFinalizer step: the Node, then the NodeClaim, go away",
        timeout_seconds=50,
        uses=("kube",),
    ),
    FunctionSpec(
        "interruption",
        "Interruption: spot, rebalance, state-change and health events, NodeClaim/Node deletions, EC2 status "
        "checks (polled) -> terminate",
        timeout_seconds=60,
        uses=("kube", "offerings:write", "start:terminate", "watch:terminate", "ec2:status", "decisions"),
        queue=QueueTrigger("interruption"),
        schedule_minutes=1,  # DescribeInstanceStatus, as Karpenter's instance status controller polls it
    ),
    FunctionSpec(
        "disruption",
        "Disruption: one round (expiration, emptiness, drift, consolidation) -> terminate workflows",
        timeout_seconds=180,  # two snapshots and rounds around the 15 s validation wait
        memory_mb=2048,  # the consolidation simulation is CPU-bound
        uses=(
            "kube",
            "catalog",
            "offerings:read",
            "start:terminate",
            "watch:terminate",
            "start:launch",
            "start:replace",
            "watch:replace",
            "decisions",
        ),
        queue=QueueTrigger("disruption"),
        schedule_minutes=1,
        reserved_concurrency=1,  # one round at a time
    ),
    FunctionSpec(
        "replace",
        "Replace workflow steps: wait for replacement NodeClaims, terminate the candidates, or roll back",
        timeout_seconds=50,
        uses=("kube", "start:terminate", "watch:terminate"),
    ),
    FunctionSpec(
        "install",
        "cdk deploy/destroy in the cluster: check it, apply namespace, CRDs, RBAC and agent, remove them",
        timeout_seconds=900,  # the agent's rollout is waited for up to installWaitSeconds (<= 600)
        uses=("install",),
    ),
    FunctionSpec(
        "webhook",
        "Ingress: accept the agent's signed events and put them on the bus",
        timeout_seconds=30,
        uses=("dedup", "publish", "webhook"),
        url=True,
    ),
)


def _check_specs(specs: tuple[FunctionSpec, ...]) -> None:
    for spec in specs:
        for use in spec.uses:
            if use not in USES and not use.startswith(("start:", "watch:")):
                raise ValueError(f"infra.functions: {spec.module} uses unknown {use!r} (known: {sorted(USES)})")
        if spec.queue is not None and spec.queue.queue not in QUEUES:
            raise ValueError(f"infra.functions: {spec.module} is triggered by unknown queue {spec.queue.queue!r}")
        if ("kube" in spec.uses) != (spec.suffix in FUNCTION_GROUPS):
            raise ValueError(
                f"infra.functions: {spec.suffix} uses 'kube' only with Kubernetes groups in "
                "infra/cluster_rbac.py FUNCTION_GROUPS, and groups only with 'kube'"
            )
    unknown = sorted(set(FUNCTION_GROUPS) - {s.suffix for s in specs})
    if unknown:
        raise ValueError(f"infra.cluster_rbac: FUNCTION_GROUPS names functions that do not exist: {unknown}")


_check_specs(FUNCTIONS)


class Functions(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: NodeflowConfig,
        code: lambda_.Code,
        data: Data,
        queues: Queues,
        events: Events,
        permissions: Permissions,
        agent: AgentRole,
        specs: tuple[FunctionSpec, ...] = FUNCTIONS,
    ) -> None:
        super().__init__(scope, construct_id)
        self.config = config
        self.specs = {s.suffix: s for s in specs}
        self.functions: dict[str, lambda_.Function] = {}
        self.roles: dict[str, iam.Role] = {}
        self.url: lambda_.FunctionUrl | None = None
        self.secret: secretsmanager.Secret | None = None
        self.schedules: dict[str, scheduler.Schedule] = {}
        self._vpc_placement = self._vpc(config)
        if config.webhook_auth == "hmac":
            self.secret = secretsmanager.Secret(
                self,
                "WebhookHmacSecret",
                secret_name=config.name("webhook-hmac", limit=512),
                description=f"nodeflow {config.cluster_name}: HMAC secrets the agent signs with (one per line)",
                generate_secret_string=secretsmanager.SecretStringGenerator(
                    password_length=64, exclude_punctuation=True
                ),
                removal_policy=RemovalPolicy.DESTROY,
            )
        for spec in specs:
            self._function(spec, code, data, queues, events, permissions, agent)

    # ------------------------------------------------------------------ building

    def _vpc(self, config: NodeflowConfig) -> dict[str, object]:
        if config.lambda_vpc_id is None:
            return {}
        vpc = ec2.Vpc.from_vpc_attributes(
            self, "LambdaVpc", vpc_id=config.lambda_vpc_id, availability_zones=Stack.of(self).availability_zones
        )
        subnets = [
            ec2.Subnet.from_subnet_id(self, f"LambdaSubnet{i}", s) for i, s in enumerate(config.lambda_subnet_ids)
        ]
        group = ec2.SecurityGroup(
            self,
            "LambdaSecurityGroup",
            vpc=vpc,
            description=f"nodeflow {config.cluster_name}: Lambdas (outbound only: AWS APIs, the API server)",
            allow_all_outbound=True,
        )
        return {"vpc": vpc, "vpc_subnets": ec2.SubnetSelection(subnets=subnets), "security_groups": [group]}

    def _function(
        self,
        spec: FunctionSpec,
        code: lambda_.Code,
        data: Data,
        queues: Queues,
        events: Events,
        permissions: Permissions,
        agent: AgentRole,
    ) -> None:
        config = self.config
        cid = "".join(p.capitalize() for p in spec.suffix.split("-"))
        name = config.name(spec.suffix)
        role = iam.Role(
            self,
            f"{cid}Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"nodeflow {config.cluster_name}: {spec.suffix} function",
        )
        if self._vpc_placement:
            # In a VPC, Lambda creates the function's network interfaces with this role.
            role.add_managed_policy(
                iam.ManagedPolicy.from_aws_managed_policy_name("service-role/AWSLambdaVPCAccessExecutionRole")
            )
        log_group = logs.LogGroup(
            self,
            f"{cid}Logs",
            log_group_name=f"/aws/lambda/{name}",
            retention=LOG_RETENTION,
            removal_policy=RemovalPolicy.DESTROY,
        )
        environment = {"CLUSTER_NAME": config.cluster_name, **POWERTOOLS_ENVIRONMENT}
        if config.feature_gates is not None:
            environment["FEATURE_GATES"] = config.feature_gates  # Karpenter's gates (NodeRepair)
        if config.replace_bar_k is not None:
            environment["CONSOLIDATION_REPLACE_BAR_K"] = f"{config.replace_bar_k:g}"  # nodeflow's replace bar
        statements: list[iam.PolicyStatement] = []
        table = data.table
        uses = set(spec.uses)
        if "install" in uses:
            statements += permissions.describe_cluster()
        if uses & {"kube", "install"}:
            if "kube" in uses:
                statements += permissions.cluster_read()
            if config.cluster_endpoint is not None and config.cluster_ca is not None:
                environment["CLUSTER_ENDPOINT"] = config.cluster_endpoint
                environment["CLUSTER_CA_DATA"] = config.cluster_ca
            if config.kubernetes_version is not None and "kube" in uses:
                environment["KUBERNETES_VERSION"] = config.kubernetes_version
        if "catalog" in uses:
            environment["CATALOG_SOURCE"] = config.catalog_source
            statements += permissions.catalog()
        if uses & {"offerings:read", "offerings:write", "dedup"}:
            environment["TABLE_NAME"] = table.table_name
        if "offerings:read" in uses or "offerings:write" in uses:
            actions = ["dynamodb:Query"] + (["dynamodb:BatchWriteItem"] if "offerings:write" in uses else [])
            statements.append(_partition_statement("Offerings", actions, table.table_arn, [OFFERINGS_PARTITION]))
        if "dedup" in uses:
            statements.append(
                _partition_statement(
                    "SeenRecords",
                    ["dynamodb:PutItem", "dynamodb:BatchWriteItem"],
                    table.table_arn,
                    [NONCE_PARTITION, EVENT_PARTITION],
                )
            )
        if "decisions" in uses:
            environment["DECISION_TABLE_NAME"] = data.decisions.table_name
            environment["DECISION_LOG_TTL_DAYS"] = str(config.decision_log_ttl_days)
            statements.append(
                iam.PolicyStatement(
                    sid="DecisionLog", actions=["dynamodb:BatchWriteItem"], resources=[data.decisions.table_arn]
                )
            )
        if "nodeclass" in uses:
            statements += permissions.nodeclass()
            if "fleet" not in uses:  # validation's dry runs of the launch calls
                statements += permissions.launch_dry_run()
        if "fleet" in uses:
            statements += permissions.fleet()
            if config.cluster_dns is not None:
                environment["CLUSTER_DNS"] = config.cluster_dns
        if uses & {"nodeclass", "fleet"}:
            statements.append(permissions.pass_node_role())
        if "ec2:terminate" in uses:
            statements += permissions.terminate()
        elif "ec2:read" in uses:
            statements += permissions.describe_instances()
        if "ec2:status" in uses:
            statements += permissions.describe_instance_status()
        if "ec2:launch-templates" in uses:
            statements += permissions.delete_launch_templates()
        if "requeue" in uses:
            environment["PROVISIONING_QUEUE_URL"] = queues["provisioning"].queue_url
            queues["provisioning"].grant_send_messages(role)
        if "publish" in uses:
            environment["EVENT_BUS_NAME"] = events.bus.event_bus_name
            events.bus.grant_put_events_to(role)
        if "webhook" in uses:
            environment["WEBHOOK_AUTH"] = config.webhook_auth
            environment["AGENT_PRINCIPAL_ARNS"] = agent.role_arn
            if self.secret is not None:
                environment["WEBHOOK_HMAC_SECRET_ARN"] = self.secret.secret_arn
                self.secret.grant_read(role)
        for statement in statements:
            role.add_to_policy(statement)

        fn = lambda_.Function(
            self,
            cid,
            function_name=name,
            description=f"nodeflow {config.cluster_name}: {spec.description}",
            code=code,
            handler=f"nodeflow.handlers.{spec.module}.handler",
            runtime=LAMBDA_RUNTIME,
            architecture=LAMBDA_ARCHITECTURE,
            timeout=Duration.seconds(spec.timeout_seconds),
            memory_size=spec.memory_mb,
            role=role,
            log_group=log_group,
            tracing=lambda_.Tracing.ACTIVE,
            environment=environment,
            # The Function URL's function: the configured cap (in hmac mode anyone can call the URL).
            reserved_concurrent_executions=config.webhook_concurrency if spec.url else spec.reserved_concurrency,
            **self._vpc_placement,  # type: ignore[arg-type]
        )
        log_group.grant_write(role)
        self.functions[spec.suffix] = fn
        self.roles[spec.suffix] = role
        if "kube" in uses and config.eks_access_entries:
            access_entry(self, f"{cid}AccessEntry", config, role, groups_of(spec.suffix))

        if spec.queue is not None:
            queue = queues[spec.queue.queue]
            visibility = QUEUES[spec.queue.queue].visibility_timeout_seconds
            if visibility < spec.timeout_seconds:
                raise ValueError(
                    f"infra: queue {spec.queue.queue} visibility timeout {visibility}s is below the "
                    f"{spec.suffix} function's timeout {spec.timeout_seconds}s"
                )
            fn.add_event_source(
                sources.SqsEventSource(
                    queue,
                    batch_size=spec.queue.batch_size,
                    max_batching_window=Duration.seconds(spec.queue.max_batching_window_seconds)
                    if spec.queue.max_batching_window_seconds
                    else None,
                    report_batch_item_failures=spec.queue.report_batch_item_failures,
                )
            )
        if spec.schedule_minutes is not None:
            period = Duration.minutes(spec.schedule_minutes)
            # Lambda's own queue for asynchronous invocations (throttled, or failed) keeps an event no longer than
            # the period and does not retry it: the next scheduled run comes instead.
            fn.configure_async_invoke(max_event_age=period, retry_attempts=0)
            self.schedules[spec.suffix] = scheduler.Schedule(
                self,
                f"{cid}Schedule",
                schedule_name=config.name(spec.suffix),
                description=f"nodeflow {config.cluster_name}: run {spec.suffix} every {spec.schedule_minutes} minutes",
                schedule=scheduler.ScheduleExpression.rate(Duration.minutes(spec.schedule_minutes)),
                target=scheduler_targets.LambdaInvoke(
                    fn,
                    input=scheduler.ScheduleTargetInput.from_object(
                        {"source": "aws.scheduler", "detail-type": "Scheduled Event", "detail": {}}
                    ),
                    # Scheduler retries an invocation it could not make (throttled, Lambda unavailable) within the
                    # period; then the event goes to the DLQ, which alarms (the schedule is not running).
                    retry_attempts=SCHEDULE_RETRY_ATTEMPTS,
                    max_event_age=period,
                    dead_letter_queue=queues.delivery_dead_letter_queues["schedules"],
                ),
            )
        if spec.url:
            self._url(fn, agent)

    def _url(self, fn: lambda_.Function, agent: AgentRole) -> None:
        config = self.config
        iam_auth = config.webhook_auth == "iam"
        auth = lambda_.FunctionUrlAuthType.AWS_IAM if iam_auth else lambda_.FunctionUrlAuthType.NONE
        self.url = fn.add_function_url(auth_type=auth)
        if iam_auth:
            # The resource policy for the agent's role (AWS_IAM auth: requests signed by that role). A Function URL
            # call needs both lambda:InvokeFunctionUrl and lambda:InvokeFunction (via the URL only).
            agent_principal = iam.ArnPrincipal(agent.role_arn)
            fn.add_permission(
                "AgentInvokeUrl",
                principal=agent_principal,
                action="lambda:InvokeFunctionUrl",
                function_url_auth_type=lambda_.FunctionUrlAuthType.AWS_IAM,
            )
            fn.add_permission(
                "AgentInvokeViaUrl",
                principal=agent_principal,
                action="lambda:InvokeFunction",
                invoked_via_function_url=True,
            )
        CfnOutput(Stack.of(self), "WebhookUrl", value=self.url.url, description="the agent's WEBHOOK_URL")

    # ------------------------------------------------------------------ workflows

    def _machine_arn_by_name(self, workflow: str) -> str:
        """The state machine's ARN built from its known name: no CloudFormation reference, so a function the
        machine calls (or one created before it) can have it without a dependency cycle."""
        return Stack.of(self).format_arn(
            service="states",
            resource="stateMachine",
            resource_name=self.config.name(workflow, limit=80),
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )

    def connect_workflows(
        self, machines: Mapping[str, sfn.StateMachine], steps: Mapping[str, Sequence[str]] | None = None
    ) -> None:
        """Give the functions that use ``start:<workflow>`` / ``watch:<workflow>`` its ARN and permission.
        ``steps``: workflow -> the functions its tasks call (``Workflows.invokes``); such a function gets the ARN
        of its own workflow built from the state machine's name (a reference would be a dependency cycle)."""
        steps = steps or {}
        for suffix, spec in self.specs.items():
            fn = self.functions[suffix]
            for use in spec.uses:
                kind, _, workflow = use.partition(":")
                if kind not in ("start", "watch"):
                    continue
                machine = machines.get(workflow)
                if machine is None:
                    raise ConfigError(f"infra: {suffix} uses {use!r} but there is no {workflow!r} workflow")
                if kind == "start" and suffix in steps.get(workflow, ()):
                    arn = self._machine_arn_by_name(workflow)
                    fn.add_environment(f"{workflow.upper()}_STATE_MACHINE_ARN", arn)
                    self.roles[suffix].add_to_policy(
                        iam.PolicyStatement(
                            sid=f"Continue{workflow.capitalize()}", actions=["states:StartExecution"], resources=[arn]
                        )
                    )
                elif kind == "start":
                    fn.add_environment(f"{workflow.upper()}_STATE_MACHINE_ARN", machine.state_machine_arn)
                    machine.grant_start_execution(fn)
                else:
                    if f"start:{workflow}" not in spec.uses:  # the ARN, built from the name (no dependency)
                        fn.add_environment(f"{workflow.upper()}_STATE_MACHINE_ARN", self._machine_arn_by_name(workflow))
                    # Execution names are the NodeClaims' (known at run time): every execution of this machine.
                    executions = Stack.of(self).format_arn(
                        service="states",
                        resource="execution",
                        resource_name=f"{self.config.name(workflow, limit=80)}:*",
                        arn_format=ArnFormat.COLON_RESOURCE_NAME,
                    )
                    self.roles[suffix].add_to_policy(
                        iam.PolicyStatement(
                            sid=f"Watch{workflow.capitalize()}",
                            actions=["states:DescribeExecution"],
                            resources=[executions],
                        )
                    )


def _partition_statement(sid: str, actions: list[str], table_arn: str, partitions: list[str]) -> iam.PolicyStatement:
    """DynamoDB actions on the table, only for items whose partition key is one of ``partitions``."""
    return iam.PolicyStatement(
        sid=sid,
        actions=actions,
        resources=[table_arn],
        conditions={"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": partitions}},
    )
