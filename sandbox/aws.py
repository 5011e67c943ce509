"""The moto world nodeflow runs in: network, node role, AMIs (+ public SSM parameters), table, queue, Lambdas,
state machines.

Works in-process under ``moto.mock_aws(config=MOCK_CONFIG)`` and against a ``moto.server.ThreadedMotoServer``
started in this process (see ``moto_server()``): every AWS call goes through boto3 clients from a ``Clients``
(a boto3 session, optionally an ``endpoint_url``). The few things the AWS API refuses — public SSM parameters under
``/aws/`` and an image's architecture — are written straight into moto's backends, which is why the server must run
in this process.
"""

from __future__ import annotations

import io
import json
import re
import secrets
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import boto3

from nodeflow.aws.session import new_session
from nodeflow.governance.decisions import DEFAULT_TTL_DAYS
from nodeflow.ingress.routing import AWS_ROUTES, ROUTES, event_pattern

if TYPE_CHECKING:
    from moto.core.config import DefaultConfig

__all__ = [
    "AMI_ARCHITECTURES",
    "MOCK_CONFIG",
    "ZONES",
    "AwsWorld",
    "ClientSource",
    "Clients",
    "MotoServer",
    "as_clients",
    "build_world",
    "create_decision_table",
    "create_functions",
    "create_state_machine",
    "discovery_tags",
    "moto_server",
    "register_image",
    "register_stack",
    "seed_ssm_parameter",
    "substitute",
]

DEFAULT_ACCOUNT_ID = "123456789012"  # moto's default account (moto.core.models.DEFAULT_ACCOUNT_ID)
MOCK_CONFIG: DefaultConfig = {"stepfunctions": {"execute_state_machine": True}}
ZONES = ("a", "b", "c")  # suffixes of the region: us-east-1a/b/c
# kubernetes.io/arch -> EC2 image architecture
AMI_ARCHITECTURES = {"amd64": "x86_64", "arm64": "arm64"}
AMI_FAMILIES = ("al2023", "bottlerocket", "al2")
AMI_CREATED = datetime(2025, 6, 1, tzinfo=UTC)

_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_.:-]*)\}")
_LAMBDA_CODE = b"def handler(event, context):\n    return event\n"


# =============================================================================================
# clients


class Clients:
    """boto3 clients by service name, created once each.

    ``Clients()`` uses the default credential chain (what ``mock_aws`` fakes); ``Clients.for_endpoint(url)`` talks
    to a moto server with fake credentials; ``Clients(factory=f)`` wraps any ``f(service) -> client``.
    """

    def __init__(
        self,
        session: boto3.Session | None = None,
        *,
        region: str = "us-east-1",
        endpoint_url: str | None = None,
        factory: Callable[[str], Any] | None = None,
    ) -> None:
        self.session = session
        self.region = region
        self.endpoint_url = endpoint_url
        self._factory = factory
        self._cache: dict[str, Any] = {}

    @classmethod
    def fake(cls, *, region: str = "us-east-1", endpoint_url: str | None = None) -> Clients:
        """Clients with static fake credentials (independent of the environment).

        Under ``mock_aws``: moto intercepts every client created after moto was imported, whether or not a mock
        was active then, so one ``Clients.fake()`` can serve many ``mock_aws`` contexts — and creating boto3
        clients is most of the cost of ``build_world`` (~0.5 s fresh, ~40 ms with warm clients)."""
        session = new_session(
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            aws_session_token="testing",
            region_name=region,
        )
        return cls(session, region=region, endpoint_url=endpoint_url)

    @classmethod
    def for_endpoint(cls, endpoint_url: str, *, region: str = "us-east-1") -> Clients:
        """Clients for a moto server (fake credentials)."""
        return cls.fake(region=region, endpoint_url=endpoint_url)

    def __call__(self, service: str) -> Any:
        client = self._cache.get(service)
        if client is None:
            if self._factory is not None:
                client = self._factory(service)
            else:
                if self.session is None:
                    self.session = new_session(region_name=self.region)
                session = self.session
                kwargs: dict[str, Any] = {"region_name": self.region}
                if self.endpoint_url:
                    kwargs["endpoint_url"] = self.endpoint_url
                client = session.client(service, **kwargs)
            self._cache[service] = client
        return client

    @property
    def ec2(self) -> Any:
        return self("ec2")

    @property
    def ssm(self) -> Any:
        return self("ssm")

    @property
    def iam(self) -> Any:
        return self("iam")

    @property
    def sts(self) -> Any:
        return self("sts")

    @property
    def dynamodb(self) -> Any:
        return self("dynamodb")

    @property
    def sqs(self) -> Any:
        return self("sqs")

    @property
    def lambda_(self) -> Any:
        return self("lambda")

    @property
    def sfn(self) -> Any:
        return self("stepfunctions")

    @property
    def events(self) -> Any:
        return self("events")

    @property
    def secretsmanager(self) -> Any:
        return self("secretsmanager")


ClientSource: TypeAlias = "Clients | boto3.Session | Callable[[str], Any]"


def as_clients(source: ClientSource, region: str = "us-east-1") -> Clients:
    """A ``Clients`` for a ``Clients`` (as is), a boto3 session, or a ``service -> client`` factory."""
    if isinstance(source, Clients):
        return source
    if isinstance(source, boto3.Session):
        return Clients(source, region=region)
    if callable(source):
        return Clients(region=region, factory=source)
    raise TypeError(f"expected Clients, boto3.Session or a service -> client callable, got {type(source).__name__}")


# =============================================================================================
# moto backend helpers (in-process only)


def seed_ssm_parameter(
    name: str, value: str, region: str = "us-east-1", *, account_id: str = DEFAULT_ACCOUNT_ID
) -> None:
    """Put a parameter under /aws/ straight into moto's SSM backend (the API refuses ``put_parameter`` there)."""
    from moto.ssm.models import Parameter, ssm_backends

    backend = ssm_backends[account_id][region]
    versions = backend._parameters[name]
    versions.append(
        Parameter(  # type: ignore[abstract]
            account_id=account_id,
            name=name,
            value=value,
            parameter_type="String",
            description=None,
            allowed_pattern=None,
            keyid=None,
            last_modified_date=datetime.now(UTC),
            version=len(versions) + 1,
            data_type="aws:ec2:image",
        )
    )


def register_image(
    ec2: Any,
    name: str,
    *,
    architecture: str = "x86_64",
    created: datetime = AMI_CREATED,
    description: str | None = None,
    tags: Mapping[str, str] | None = None,
    region: str = "us-east-1",
    account_id: str = DEFAULT_ACCOUNT_ID,
) -> str:
    """Register an image and set its architecture and creation date in moto's backend (the API cannot)."""
    from moto.ec2.models import ec2_backends

    image_id: str = ec2.register_image(Name=name, Description=description or name)["ImageId"]
    ami = ec2_backends[account_id][region].amis[image_id]
    ami.architecture = architecture
    ami.creation_date = created
    if tags:
        ec2.create_tags(Resources=[image_id], Tags=[{"Key": k, "Value": v} for k, v in tags.items()])
    return image_id


# =============================================================================================
# the world


@dataclass
class AwsWorld:
    region: str
    cluster_name: str
    vpc_id: str
    subnets: dict[str, str]  # zone -> subnet id
    security_group_id: str
    node_role_name: str
    amis: dict[str, str]  # kubernetes.io/arch ("amd64", "arm64") -> image id
    table_name: str
    queue_url: str
    lambda_role_arn: str
    function_arns: dict[str, str] = field(default_factory=dict)  # function name -> arn
    state_machine_arns: dict[str, str] = field(default_factory=dict)  # state machine name -> arn
    account_id: str = DEFAULT_ACCOUNT_ID
    kubernetes_version: str = "1.33"
    dlq_url: str = ""
    state_machine_role_arn: str = ""
    ssm_parameters: dict[str, str] = field(default_factory=dict)  # seeded public parameter -> image id
    bus_name: str = ""
    disruption_queue_url: str = ""
    disruption_dlq_url: str = ""
    interruption_queue_url: str = ""
    interruption_dlq_url: str = ""
    hmac_secret_arn: str = ""
    hmac_secret: str = ""
    rule_names: list[str] = field(default_factory=list)
    decision_table_name: str = ""  # the decision log (nodeflow.governance.decisions)

    def queue_urls(self) -> dict[str, str]:
        """Route queue name (``nodeflow.ingress.routing.Route.queue``) -> queue URL."""
        return {
            "provisioning": self.queue_url,
            "disruption": self.disruption_queue_url,
            "interruption": self.interruption_queue_url,
        }

    @property
    def zones(self) -> list[str]:
        return sorted(self.subnets)


def discovery_tags(cluster_name: str) -> list[dict[str, str]]:
    return [{"Key": "karpenter.sh/discovery", "Value": cluster_name}]


def _trust(service: str) -> str:
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}],
        }
    )


def _ami_name(arch: str, kubernetes_version: str) -> str:
    ec2_arch = AMI_ARCHITECTURES[arch]
    return f"sandbox-eks-node-{kubernetes_version}-{ec2_arch}-v20250601"


def build_world(
    clients_or_session: ClientSource,
    *,
    cluster_name: str = "demo",
    region: str = "us-east-1",
    kubernetes_version: str = "1.33",
) -> AwsWorld:
    """Create everything nodeflow expects to find in the account (no Lambdas or state machines yet)."""
    from nodeflow.aws.ec2.amis import alias_ssm_parameters

    clients = as_clients(clients_or_session, region)
    ec2, iam = clients.ec2, clients.iam
    account_id: str = clients.sts.get_caller_identity()["Account"]
    tags = discovery_tags(cluster_name)

    # network
    vpc_id: str = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    ec2.create_tags(Resources=[vpc_id], Tags=[{"Key": "Name", "Value": f"{cluster_name}-vpc"}])
    subnets: dict[str, str] = {}
    for i, suffix in enumerate(ZONES):
        zone = f"{region}{suffix}"
        subnet_id: str = ec2.create_subnet(VpcId=vpc_id, CidrBlock=f"10.0.{i * 32}.0/19", AvailabilityZone=zone)[
            "Subnet"
        ]["SubnetId"]
        ec2.create_tags(Resources=[subnet_id], Tags=[*tags, {"Key": "Name", "Value": f"{cluster_name}-{zone}"}])
        subnets[zone] = subnet_id
    sg_id: str = ec2.create_security_group(
        GroupName=f"{cluster_name}-nodes", Description=f"{cluster_name} nodes", VpcId=vpc_id
    )["GroupId"]
    ec2.create_tags(Resources=[sg_id], Tags=tags)

    # node role
    node_role = f"KarpenterNodeRole-{cluster_name}"
    iam.create_role(RoleName=node_role, AssumeRolePolicyDocument=_trust("ec2.amazonaws.com"))

    # images and the public parameters that name them
    amis = {
        arch: register_image(
            ec2,
            _ami_name(arch, kubernetes_version),
            architecture=ec2_arch,
            region=region,
            account_id=account_id,
        )
        for arch, ec2_arch in AMI_ARCHITECTURES.items()
    }
    parameters: dict[str, str] = {}
    for family in AMI_FAMILIES:
        for name, arch in alias_ssm_parameters(f"{family}@latest", kubernetes_version).items():
            parameters[name] = amis[arch]
    for name, image_id in parameters.items():
        seed_ssm_parameter(name, image_id, region, account_id=account_id)

    # state
    table_name = f"nodeflow-{cluster_name}"
    ddb = clients.dynamodb
    ddb.create_table(
        TableName=table_name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    ddb.update_time_to_live(TableName=table_name, TimeToLiveSpecification={"Enabled": True, "AttributeName": "ttl"})
    decision_table = create_decision_table(clients, f"nodeflow-{cluster_name}-decisions")

    queue_url, dlq_url = _queue_with_dlq(clients, f"nodeflow-{cluster_name}-provisioning")
    disruption_url, disruption_dlq = _queue_with_dlq(clients, f"nodeflow-{cluster_name}-disruption")
    interruption_url, interruption_dlq = _queue_with_dlq(clients, f"nodeflow-{cluster_name}-interruption")

    # ingress: the bus, its rules to the queues, the webhook's HMAC secret
    bus_name = f"nodeflow-{cluster_name}"
    clients.events.create_event_bus(Name=bus_name)
    queues = {"provisioning": queue_url, "disruption": disruption_url, "interruption": interruption_url}
    rule_names = [
        _route(
            clients,
            bus_name,
            cluster_name,
            route.name,
            event_pattern(cluster_name, route.detail_types),
            queues[route.queue],
        )
        for route in ROUTES
    ]
    rule_names += [
        _route(clients, "default", cluster_name, route.name, dict(route.pattern), queues[route.queue])
        for route in AWS_ROUTES
    ]
    hmac_secret = secrets.token_hex(32)
    secret_arn: str = clients.secretsmanager.create_secret(
        Name=f"nodeflow-{cluster_name}-webhook-hmac", SecretString=hmac_secret
    )["ARN"]

    # roles for the serverless side
    lambda_role_arn: str = iam.create_role(
        RoleName=f"nodeflow-{cluster_name}-lambda", AssumeRolePolicyDocument=_trust("lambda.amazonaws.com")
    )["Role"]["Arn"]
    sfn_role_arn: str = iam.create_role(
        RoleName=f"nodeflow-{cluster_name}-states", AssumeRolePolicyDocument=_trust("states.amazonaws.com")
    )["Role"]["Arn"]

    return AwsWorld(
        region=region,
        cluster_name=cluster_name,
        vpc_id=vpc_id,
        subnets=subnets,
        security_group_id=sg_id,
        node_role_name=node_role,
        amis=amis,
        table_name=table_name,
        queue_url=queue_url,
        lambda_role_arn=lambda_role_arn,
        account_id=account_id,
        kubernetes_version=kubernetes_version,
        dlq_url=dlq_url,
        state_machine_role_arn=sfn_role_arn,
        ssm_parameters=parameters,
        bus_name=bus_name,
        disruption_queue_url=disruption_url,
        disruption_dlq_url=disruption_dlq,
        interruption_queue_url=interruption_url,
        interruption_dlq_url=interruption_dlq,
        hmac_secret_arn=secret_arn,
        hmac_secret=hmac_secret,
        rule_names=rule_names,
        decision_table_name=decision_table,
    )


def create_decision_table(clients_or_session: ClientSource, name: str, region: str = "us-east-1") -> str:
    """The decision log's table as infra/data.py makes it (pk/sk strings, TTL on ``ttl``); returns its name."""
    ddb = as_clients(clients_or_session, region).dynamodb
    ddb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    ddb.update_time_to_live(TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": "ttl"})
    return name


def register_stack(clients_or_session: ClientSource, world: AwsWorld) -> str:
    """A CloudFormation stack ``Nodeflow-<cluster>`` with the outputs of infra/stack.py that name what the sandbox
    made (ClusterName, TableName, DecisionTableName, DecisionLogTtlDays, EventBusName), so commands that take
    ``--stack`` (``python -m nodeflow decisions``) find them as in a deployed account. Its one resource is a
    parameter naming the stack (the sandbox's resources are made directly, not by CloudFormation). Returns the
    stack's name. Moto's CloudFormation costs ~2 s to import the first time: the demo calls this, the functional
    tests only when they need it."""
    cfn = as_clients(clients_or_session, world.region)("cloudformation")
    name = "Nodeflow-" + world.cluster_name.replace("_", "-")
    outputs = {
        "ClusterName": world.cluster_name,
        "TableName": world.table_name,
        "DecisionTableName": world.decision_table_name,
        # the sandbox's functions stamp the default TTL (no DECISION_LOG_TTL_DAYS), as a stack without the context
        "DecisionLogTtlDays": str(DEFAULT_TTL_DAYS) if world.decision_table_name else "",
        "EventBusName": world.bus_name,
    }
    template = {
        "Description": f"nodeflow sandbox: {world.cluster_name} (the outputs of the CDK stack)",
        "Resources": {
            "Sandbox": {
                "Type": "AWS::SSM::Parameter",
                "Properties": {"Name": f"/nodeflow/{world.cluster_name}/stack", "Type": "String", "Value": name},
            }
        },
        "Outputs": {k: {"Value": v} for k, v in outputs.items() if v},
    }
    cfn.create_stack(StackName=name, TemplateBody=json.dumps(template))
    return name


def register_decision_log_stack(
    clients_or_session: ClientSource, cluster_name: str, decision_table: str, region: str = "us-east-1"
) -> str:
    """``register_stack`` for a world that is only a decision log (its table made by ``create_decision_table``):
    what ``python -m nodeflow decisions --stack`` reads. Returns the stack's name."""
    world = AwsWorld(
        region=region,
        cluster_name=cluster_name,
        vpc_id="",
        subnets={},
        security_group_id="",
        node_role_name="",
        amis={},
        table_name=f"nodeflow-{cluster_name}",
        queue_url="",
        lambda_role_arn="",
        decision_table_name=decision_table,
    )
    return register_stack(clients_or_session, world)


def _queue_with_dlq(clients: Clients, name: str) -> tuple[str, str]:
    sqs = clients.sqs
    dlq_url: str = sqs.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
    dlq_arn: str = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    url: str = sqs.create_queue(
        QueueName=name,
        Attributes={
            "VisibilityTimeout": "60",
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "5"}),
        },
    )["QueueUrl"]
    return url, dlq_url


def _route(
    clients: Clients, bus_name: str, cluster_name: str, route: str, pattern: dict[str, Any], queue_url: str
) -> str:
    """One EventBridge rule on ``bus_name`` with the queue as its target (what the CDK stack creates)."""
    name = f"nodeflow-{cluster_name}-{route}"
    clients.events.put_rule(Name=name, EventBusName=bus_name, EventPattern=json.dumps(pattern), State="ENABLED")
    arn = clients.sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    clients.events.put_targets(Rule=name, EventBusName=bus_name, Targets=[{"Id": "queue", "Arn": arn}])
    return name


def _lambda_zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        info = zipfile.ZipInfo("index.py", date_time=(2025, 1, 1, 0, 0, 0))
        zf.writestr(info, _LAMBDA_CODE)
    return buf.getvalue()


def create_functions(
    world: AwsWorld,
    clients: ClientSource,
    names: Iterable[str],
    *,
    environment: Mapping[str, str] | None = None,
    timeout: int = 60,
    memory_size: int = 512,
) -> dict[str, str]:
    """Create one placeholder Lambda function per name (code never runs: see ``sandbox.stepfunctions``).

    Returns name -> arn for these names (also merged into ``world.function_arns``)."""
    lam = as_clients(clients, world.region).lambda_
    created: dict[str, str] = {}
    code = _lambda_zip()
    for name in names:
        kwargs: dict[str, Any] = {
            "FunctionName": name,
            "Runtime": "python3.12",
            "Role": world.lambda_role_arn,
            "Handler": "index.handler",
            "Code": {"ZipFile": code},
            "Timeout": timeout,
            "MemorySize": memory_size,
            "Publish": False,
        }
        if environment:
            kwargs["Environment"] = {"Variables": dict(environment)}
        arn: str = lam.create_function(**kwargs)["FunctionArn"]
        created[name] = arn
    world.function_arns.update(created)
    return created


def substitute(text: str, substitutions: Mapping[str, str], *, source: str = "definition") -> str:
    """Replace every ``${Key}``; raise ValueError naming the placeholders left without a value."""
    missing = sorted({m.group(1) for m in _PLACEHOLDER.finditer(text) if m.group(1) not in substitutions})
    if missing:
        raise ValueError(f"{source}: no substitution for " + ", ".join(f"${{{k}}}" for k in missing))
    return _PLACEHOLDER.sub(lambda m: str(substitutions[m.group(1)]), text)


def create_state_machine(
    world: AwsWorld,
    clients: ClientSource,
    name: str,
    asl_path: str | Path,
    substitutions: Mapping[str, str],
) -> str:
    """Create a STANDARD state machine from an ASL file with ``${Key}`` placeholders; return its ARN."""
    path = Path(asl_path)
    definition = substitute(path.read_text(), substitutions, source=str(path))
    try:
        json.loads(definition)
    except ValueError as exc:
        raise ValueError(f"{path}: not valid JSON after substitution: {exc}") from exc
    sfn = as_clients(clients, world.region).sfn
    arn: str = sfn.create_state_machine(
        name=name,
        definition=definition,
        roleArn=world.state_machine_role_arn or world.lambda_role_arn,
        type="STANDARD",
    )["stateMachineArn"]
    world.state_machine_arns[name] = arn
    return arn


# =============================================================================================
# server mode


@dataclass
class MotoServer:
    url: str
    port: int
    server: Any  # moto.server.ThreadedMotoServer

    def clients(self, region: str = "us-east-1") -> Clients:
        return Clients.for_endpoint(self.url, region=region)

    def reset(self) -> None:
        """Drop every resource in every backend (POST /moto-api/reset)."""
        _post_json(f"{self.url}/moto-api/reset", None)


def _post_json(url: str, body: Any) -> Any:
    import urllib.request

    data = json.dumps(body).encode() if body is not None else b""
    request = urllib.request.Request(url, data=data, method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        raw = response.read()
    return json.loads(raw) if raw else None


@contextmanager
def moto_server(config: Mapping[str, Any] | None = None, *, quiet: bool = True) -> Iterator[MotoServer]:
    """A ``ThreadedMotoServer`` on 127.0.0.1:<free port>, configured like ``mock_aws(config=MOCK_CONFIG)``.

    Sets ``MOTO_PORT`` (the Step Functions engine calls the server back on localhost:MOTO_PORT) and restores it,
    moto's user config and its backends (reset) on exit. ``quiet``: no werkzeug line per request.
    Stopping takes ~0.5 s (werkzeug's serve_forever polls for shutdown every 0.5 s)."""
    import logging
    import os

    from moto.core.config import default_user_config
    from moto.server import ThreadedMotoServer

    saved_config = json.loads(json.dumps(default_user_config))
    saved_port = os.environ.get("MOTO_PORT")
    werkzeug_log = logging.getLogger("werkzeug")
    saved_level = werkzeug_log.level
    if quiet:
        werkzeug_log.setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        _host, port = server.get_host_and_port()
        url = f"http://127.0.0.1:{port}"
        os.environ["MOTO_PORT"] = str(port)
        _post_json(f"{url}/moto-api/config", dict(config if config is not None else MOCK_CONFIG))
        handle = MotoServer(url=url, port=port, server=server)
        try:
            yield handle
        finally:
            handle.reset()
    finally:
        server.stop()
        if saved_port is None:
            os.environ.pop("MOTO_PORT", None)
        else:
            os.environ["MOTO_PORT"] = saved_port
        config_dict = cast(dict[str, Any], default_user_config)
        config_dict.clear()
        config_dict.update(saved_config)
        werkzeug_log.setLevel(saved_level)
