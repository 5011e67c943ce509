"""nodeflow running locally: the moto account (VPC, table, queue, Lambdas, the real launch state
machine), the Kubernetes control plane, the handlers dispatched in-process, simulated kubelets.

Used by the functional tests of the provisioning path, the benchmarks and ``make demo``. Handlers read their
settings from the environment exactly as in Lambda; ``LocalNodeflow`` sets it (and restores it).

The cluster is a real control plane (``kube_server``: a ``sandbox.controlplane.facade.RealKubeAPI``, its controllers
running): the simulated kubelets of ``sandbox.kwok`` register the Nodes and run the pods; the real kube-scheduler
binds pods, the real controllers run ReplicaSets, PDB status, garbage collection and node lifecycle. Handlers reach
the API server through the facade's fault proxy; with ``rbac`` they authenticate with a token that may only
impersonate, and each invocation impersonates its function's groups against the install's ClusterRoles.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandbox.aws import AwsWorld, Clients, as_clients, build_world, create_functions, create_state_machine
from sandbox.esm import SqsEventSource
from sandbox.faults import Ec2Faults
from sandbox.function_url import Caller, FunctionUrlServer
from sandbox.kwok import SimulatedKubelets
from sandbox.motocost import cheaper_moto
from sandbox.stepfunctions import (
    LambdaDispatch,
    execution_trace,
    scale_waits,
    stretch_task_timeouts,
    wait_for_execution,
)

__all__ = ["FUNCTIONS", "LAUNCH_ASL", "TERMINATE_ASL", "LocalNodeflow", "stopped_executions_stay_aborted"]

LOG = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parent.parent
LAUNCH_ASL = ROOT / "statemachines" / "launch.asl.json"

# Lambda function name suffix -> handler module (each exposes ``handler``).
FUNCTIONS: Mapping[str, str] = {
    "provisioner": "nodeflow.handlers.provisioner",
    "launch": "nodeflow.handlers.launch",
    "register": "nodeflow.handlers.register",
    "initialize": "nodeflow.handlers.initialize",
    "cleanup": "nodeflow.handlers.cleanup",
    "gc": "nodeflow.handlers.gc",
    "webhook": "nodeflow.handlers.webhook",
    "taint": "nodeflow.handlers.taint",
    "drain": "nodeflow.handlers.drain",
    "terminate": "nodeflow.handlers.terminate",
    "finalize": "nodeflow.handlers.finalize",
    "interruption": "nodeflow.handlers.interruption",
    "disruption": "nodeflow.handlers.disruption",
    "replace": "nodeflow.handlers.replace",
}
# The agent's IAM identity in the sandbox (what IRSA / Pod Identity would hand it).
AGENT_ACCESS_KEY = "AKIASANDBOXAGENT0001"
AGENT_SECRET_KEY = "sandbox-agent-secret-key"
# ASL placeholder -> function suffix.
LAUNCH_SUBSTITUTIONS: Mapping[str, str] = {
    "LaunchFunctionArn": "launch",
    "RegisterFunctionArn": "register",
    "InitializeFunctionArn": "initialize",
    "CleanupFunctionArn": "cleanup",
}
TERMINATE_ASL = ROOT / "statemachines" / "terminate.asl.json"
REPLACE_ASL = ROOT / "statemachines" / "replace.asl.json"
REPLACE_SUBSTITUTIONS: Mapping[str, str] = {"ReplaceFunctionArn": "replace"}
TERMINATE_SUBSTITUTIONS: Mapping[str, str] = {
    "TaintFunctionArn": "taint",
    "DrainFunctionArn": "drain",
    "TerminateFunctionArn": "terminate",
    "RemoveFinalizerFunctionArn": "finalize",
}


@dataclass(frozen=True)
class _Acting:
    """A handler invocation's Kubernetes identity: its function's name and groups (infra.cluster_rbac)."""

    name: str
    groups: tuple[str, ...]


@contextmanager
def stopped_executions_stay_aborted() -> Iterator[None]:
    """Make moto's Step Functions engine end a stopped execution ABORTED, as AWS does, whatever state it was in.

    The engine evaluates a Task in a frame on its own thread and skips every step of a frame that is no longer
    running; a StopExecution that lands after the frame opened and before the Task's resource was evaluated leaves
    its stack empty, the Task raises ``IndexError('pop from empty list')``, and ``Environment.set_error`` (which,
    unlike ``set_stop`` and ``set_ended``, overwrites any state) turns the stopped program into a FAILED execution.
    Here an error reported after the stop is dropped: the stop caused it. Restored on exit."""
    from moto.stepfunctions.parser.asl.eval.environment import Environment
    from moto.stepfunctions.parser.asl.eval.program_state import ProgramStopped

    original = Environment.__dict__["set_error"]

    def set_error(self: Any, error: Any) -> None:
        with self._state_mutex:
            if isinstance(self._program_state, ProgramStopped):
                return
            original(self, error)

    Environment.set_error = set_error  # type: ignore[method-assign]
    try:
        yield
    finally:
        Environment.set_error = original  # type: ignore[method-assign]


def _handler(module: str) -> Callable[[Any, Any], Any]:
    return importlib.import_module(module).handler  # type: ignore[no-any-return]


@dataclass
class LocalNodeflow:
    """Start with ``start()`` inside ``mock_aws(config={"stepfunctions": {"execute_state_machine": True}})``
    (or against a ThreadedMotoServer through ``clients``); stop with ``stop()``."""

    clients: Clients | Any
    kube_server: Any  # sandbox.controlplane.facade.RealKubeAPI
    cluster_name: str = "demo"
    region: str = "us-east-1"
    wait_scale: float = 0.001
    env: Mapping[str, str] = field(default_factory=dict)  # extra / overriding handler settings
    kubelet_register_after: float = 0.0
    kubelet_ready_after: float = 0.0
    kubelet_skip: Callable[[str], bool] | None = None
    kubelet_interval: float = 0.1  # how often the simulated kubelets look at EC2
    # seconds a deleted pod's containers take to exit on SIGTERM (None: its whole grace period)
    container_stop_seconds: float | None = 1.0
    endpoint_url: str | None = None  # moto server mode: handlers reach AWS here
    rbac: bool = True  # the API server enforces the RBAC manifests; handlers act as their functions' groups
    # handlers and the agent reach kube-apiserver itself, not through the fault proxy (no faults, no request log):
    # the proxy relays every byte in this process, which a burst of thousands of pods cannot spare
    direct_kube: bool = False
    # Task TimeoutSeconds stretched this many times (sandbox.stepfunctions.stretch_task_timeouts): every handler
    # shares this process, so at a burst of hundreds of launches a task's wall time is mostly waiting for its turn
    task_timeout_scale: float = 1.0

    world: AwsWorld = field(init=False)
    dispatch: LambdaDispatch = field(init=False)
    kubelet: SimulatedKubelets = field(init=False)
    faults: Ec2Faults = field(init=False)
    launch_arn: str = field(init=False)
    terminate_arn: str = field(init=False)
    replace_arn: str = field(init=False)
    webhook_auth: str = "iam"  # "iam" (Function URL AWS_IAM + SigV4) | "hmac" (Function URL NONE + HMAC)
    function_url: FunctionUrlServer | None = field(default=None, init=False)
    event_source: SqsEventSource | None = field(default=None, init=False)
    interruption_source: SqsEventSource | None = field(default=None, init=False)
    agent_role_arn: str = field(default="", init=False)
    _saved_env: dict[str, str | None] = field(default_factory=dict, init=False)
    _engine_threads_before: set[Any] = field(default_factory=set, init=False)
    _scaler: Any = field(default=None, init=False)
    _aborts: Any = field(default=None, init=False)
    _transactions: Any = field(default=None, init=False)
    _timeouts: Any = field(default=None, init=False)
    _stopped: bool = field(default=False, init=False)
    _tmp: Any = field(default=None, init=False)

    def function_name(self, suffix: str) -> str:
        return f"nodeflow-{self.cluster_name}-{suffix}"

    def _write_kubeconfig(self, path: Path) -> str:
        """The handlers' kubeconfig: through the fault proxy, or with ``direct_kube`` to kube-apiserver itself."""
        if not self.direct_kube:
            return str(self.kube_server.write_kubeconfig(path, **self._handler_token()))
        config = self.kube_server.kubeconfig(**self._handler_token())
        plane = self.kube_server.plane
        config["clusters"][0]["cluster"] = {"server": plane.url, "certificate-authority": str(plane.ca_file)}
        path.write_text(json.dumps(config, indent=2) + "\n")
        return str(path)

    def _handler_token(self) -> dict[str, str]:
        """The token of the handlers' kubeconfig: with RBAC, one that may only impersonate."""
        return {"token": self.kube_server.impersonator_token} if self.rbac else {}

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> LocalNodeflow:
        from moto.stepfunctions.parser.utils import TMP_THREADS

        from nodeflow.handlers import runtime

        self._stopped = False
        self._engine_threads_before = set(TMP_THREADS)  # the Step Functions engine's threads started before this
        self.clients = as_clients(self.clients, self.region)
        self.world = build_world(self.clients, cluster_name=self.cluster_name, region=self.region)
        self._tmp = tempfile.TemporaryDirectory(prefix="nodeflow-local-")
        kubeconfig = self._write_kubeconfig(Path(self._tmp.name) / "kubeconfig")
        arns = create_functions(self.world, self.clients, [self.function_name(s) for s in FUNCTIONS])
        self.launch_arn = create_state_machine(
            self.world,
            self.clients,
            f"nodeflow-{self.cluster_name}-launch",
            LAUNCH_ASL,
            {key: arns[self.function_name(suffix)] for key, suffix in LAUNCH_SUBSTITUTIONS.items()},
        )
        self.terminate_arn = create_state_machine(
            self.world,
            self.clients,
            f"nodeflow-{self.cluster_name}-terminate",
            TERMINATE_ASL,
            {key: arns[self.function_name(suffix)] for key, suffix in TERMINATE_SUBSTITUTIONS.items()},
        )
        self.replace_arn = create_state_machine(
            self.world,
            self.clients,
            f"nodeflow-{self.cluster_name}-replace",
            REPLACE_ASL,
            {key: arns[self.function_name(suffix)] for key, suffix in REPLACE_SUBSTITUTIONS.items()},
        )
        self.agent_role_arn = self.clients.iam.create_role(
            RoleName=f"nodeflow-{self.cluster_name}-agent", AssumeRolePolicyDocument=json.dumps({"Statement": []})
        )["Role"]["Arn"]
        settings = {
            "CLUSTER_NAME": self.cluster_name,
            "EVENT_BUS_NAME": self.world.bus_name,
            "WEBHOOK_AUTH": self.webhook_auth,
            "WEBHOOK_HMAC_SECRET_ARN": self.world.hmac_secret_arn,
            "AGENT_PRINCIPAL_ARNS": self.agent_role_arn,
            "AWS_REGION": self.region,
            "AWS_DEFAULT_REGION": self.region,
            "TABLE_NAME": self.world.table_name,
            "DECISION_TABLE_NAME": self.world.decision_table_name,  # the decision log, written as when deployed
            "LAUNCH_STATE_MACHINE_ARN": self.launch_arn,
            "TERMINATE_STATE_MACHINE_ARN": self.terminate_arn,
            "REPLACE_STATE_MACHINE_ARN": self.replace_arn,
            "DISRUPTION_VALIDATION_SECONDS": "0",  # tests and the demo do not wait 15 s (override in env)
            "PROVISIONING_QUEUE_URL": self.world.queue_url,
            "KUBECONFIG": str(kubeconfig),
            "CATALOG_SOURCE": "offline",
            "KUBERNETES_VERSION": self.world.kubernetes_version,
            "POWERTOOLS_METRICS_NAMESPACE": "nodeflow",
            "POWERTOOLS_LOG_LEVEL": os.environ.get("POWERTOOLS_LOG_LEVEL", "WARNING"),
            "POWERTOOLS_TRACE_DISABLED": "true",
            **({"AWS_ENDPOINT_URL": self.endpoint_url} if self.endpoint_url else {}),
            **dict(self.env),
        }
        for key, value in settings.items():
            self._saved_env.setdefault(key, os.environ.get(key))
            os.environ[key] = value
        runtime.reset()

        self.dispatch = LambdaDispatch({self.function_name(s): _handler(m) for s, m in FUNCTIONS.items()}).install()
        if self.rbac:
            self._enforce_rbac()
        self._scaler = scale_waits(self.wait_scale)
        self._scaler.__enter__()
        self._aborts = stopped_executions_stay_aborted()
        self._aborts.__enter__()
        self._transactions = cheaper_moto()
        self._transactions.__enter__()
        self._timeouts = stretch_task_timeouts(self.task_timeout_scale)
        self._timeouts.__enter__()
        self.faults = Ec2Faults({sid: zone for zone, sid in self.world.subnets.items()}).install()
        self._start_kubelets()
        return self

    def _start_kubelets(self) -> None:
        """The simulated kubelets, as the kubelets' identity, straight to the API server (not
        through the proxy: their traffic is not the code under test's). Their Leases outlive the node lifecycle
        controller's grace period twice over."""
        from sandbox.controlplane import KUBELET

        plane = self.kube_server.plane
        grace = plane.node_monitor_grace_period
        self.kubelet = SimulatedKubelets(
            plane.kube(KUBELET),
            self.clients.ec2,
            self.cluster_name,
            register_after=self.kubelet_register_after,
            ready_after=self.kubelet_ready_after,
            skip=self.kubelet_skip,
            instance_interval=self.kubelet_interval,
            container_stop_seconds=self.container_stop_seconds,
            lease_duration=40 if grace is None else max(1, int(grace / 2)),
        ).start()

    def stop(self) -> None:
        """Stop everything: first the workflow executions still running (they would go on calling the handlers,
        and the API server, after this test); then, with RBAC on, fail (``PermissionError``) if the API server
        denied a request, or (``RuntimeError``) if an execution's thread did not end."""
        from nodeflow.handlers import runtime

        if self._stopped:
            return
        self._stopped = True
        stuck = self.stop_executions()
        denied = self._release_rbac() if self.rbac else []
        for step in (
            lambda: self.event_source.stop() if self.event_source else None,
            lambda: self.interruption_source.stop() if self.interruption_source else None,
            lambda: self.function_url.stop() if self.function_url else None,
            lambda: self.kubelet.stop(),
            lambda: self.faults.uninstall(),
            lambda: self._scaler.__exit__(None, None, None),
            lambda: self._aborts.__exit__(None, None, None),
            lambda: self._transactions.__exit__(None, None, None),
            lambda: self._timeouts.__exit__(None, None, None),
            lambda: self.dispatch.uninstall(),
        ):
            try:
                step()
            except Exception:
                continue
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved_env.clear()
        runtime.reset()
        if self._tmp is not None:
            self._tmp.cleanup()
        if stuck:
            raise RuntimeError(f"Step Functions engine threads still running after stop(): {stuck}")
        if denied:
            raise PermissionError(
                "the API server denied requests (infra/cluster/controller-rbac.yaml, infra/cluster_rbac.py):\n  "
                + "\n  ".join(dict.fromkeys(d.describe() for d in denied))
            )

    def stop_executions(self, timeout: float = 30.0) -> list[str]:
        """Stop (StopExecution) every running execution of the three workflows, then wait for the engine's threads
        started since ``start()`` to end: a Task already running finishes its handler call (with the dispatch,
        environment and RBAC still in place), no later state starts. Returns the names of the threads still
        alive after ``timeout`` seconds (none normally)."""
        from moto.stepfunctions.parser.utils import TMP_THREADS

        for arn in (getattr(self, name, "") for name in ("launch_arn", "terminate_arn", "replace_arn")):
            if not arn:
                continue
            try:
                pages = self.clients.sfn.get_paginator("list_executions").paginate(
                    stateMachineArn=arn, statusFilter="RUNNING"
                )
                for e in (e for page in pages for e in page.get("executions", [])):
                    self.clients.sfn.stop_execution(executionArn=e["executionArn"])
            except Exception:  # the account is gone (mock left): its threads are still joined below
                LOG.warning("could not stop the executions of %s", arn, exc_info=True)
        deadline = time.monotonic() + timeout
        threads = [t for t in list(TMP_THREADS) if t not in self._engine_threads_before]
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self._engine_threads_before = set(TMP_THREADS)
        return [t.name for t in threads if t.is_alive()]

    def _enforce_rbac(self) -> None:
        """The API server enforces infra/cluster/controller-rbac.yaml and the agent's RBAC; each handler invocation
        impersonates its function's groups (infra/cluster_rbac.py). The handlers' own token may only impersonate,
        so a request made outside an invocation's context (e.g. from a thread it started) is denied too."""
        from contextlib import nullcontext

        import yaml

        from infra.cluster_rbac import FUNCTION_GROUPS
        from sandbox.controlplane.impersonation import ClientImpersonation, acting_as

        account = yaml.safe_load((ROOT / "agent" / "manifests" / "10-serviceaccount.yaml").read_text())["metadata"]
        # the install's ClusterRoles are applied (RealKubeAPI.start); the agent gets a bound token
        self.kube_server.enable_rbac()
        agent_token = self.kube_server.service_account_token(account["namespace"], account["name"])
        (Path(self._tmp.name) / "agent-token").write_text(agent_token)
        ClientImpersonation.install()
        users = {self.function_name(s): _Acting(self.function_name(s), g) for s, g in FUNCTION_GROUPS.items()}
        self.dispatch.invocation_context = lambda name: acting_as(users[name]) if name in users else nullcontext()

    def _release_rbac(self) -> list[Any]:
        from sandbox.controlplane.impersonation import ClientImpersonation

        denied: list[Any] = self.kube_server.denied()
        self.kube_server.disable_rbac()  # first: a handler still running must not be denied once it stops impersonating
        ClientImpersonation.uninstall()
        return denied

    def __enter__(self) -> LocalNodeflow:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ ingress

    def start_webhook(self) -> FunctionUrlServer:
        """Serve the webhook function at a Function URL on 127.0.0.1 (AWS_IAM in iam mode)."""
        account = self.world.account_id
        caller = Caller(
            AGENT_SECRET_KEY, f"arn:aws:sts::{account}:assumed-role/nodeflow-{self.cluster_name}-agent/agent", account
        )
        self.function_url = FunctionUrlServer(
            lambda event: self.invoke("webhook", event),
            auth_type="AWS_IAM" if self.webhook_auth == "iam" else "NONE",
            region=self.region,
            credentials={AGENT_ACCESS_KEY: caller},
        ).start()
        return self.function_url

    def start_event_source(
        self, *, window_seconds: float | None = None, batch_size: int | None = None
    ) -> SqsEventSource:
        """The provisioner's SQS event-source mapping (the routing module's batching unless overridden)."""
        from nodeflow.ingress.routing import PROVISIONING_BATCH_SIZE, PROVISIONING_BATCH_WINDOW_SECONDS

        arn = f"arn:aws:sqs:{self.region}:{self.world.account_id}:nodeflow-{self.cluster_name}-provisioning"
        self.event_source = SqsEventSource(
            self.clients.sqs,
            self.world.queue_url,
            arn,
            lambda event: self.invoke("provisioner", event),
            batch_size=batch_size or PROVISIONING_BATCH_SIZE,
            window_seconds=PROVISIONING_BATCH_WINDOW_SECONDS if window_seconds is None else window_seconds,
        ).start()
        return self.event_source

    def start_interruption_source(self, *, batch_size: int = 10) -> SqsEventSource:
        """The interruption function's SQS event-source mapping (no batching window; partial batch responses)."""
        arn = f"arn:aws:sqs:{self.region}:{self.world.account_id}:nodeflow-{self.cluster_name}-interruption"
        self.interruption_source = SqsEventSource(
            self.clients.sqs,
            self.world.interruption_queue_url,
            arn,
            lambda event: self.invoke("interruption", event),
            batch_size=batch_size,
            window_seconds=0.0,
        ).start()
        return self.interruption_source

    def agent_env(self, *, hmac_secret_file: str | None = None, **extra: str) -> dict[str, str]:
        """Environment for the agent process pointed at this sandbox (after ``start_webhook``)."""
        assert self.function_url is not None, "start_webhook() first"
        env = {
            "WEBHOOK_URL": self.function_url.url,
            "CLUSTER_NAME": self.cluster_name,
            "KUBE_API_URL": self.kube_server.plane.url if self.direct_kube else self.kube_server.url,
            "AWS_REGION": self.region,
        }
        if self.direct_kube:
            env["KUBE_CA_FILE"] = str(self.kube_server.plane.ca_file)
        if self.rbac:  # the agent's ServiceAccount token (its RBAC: agent/manifests/20-rbac.yaml)
            env["KUBE_TOKEN_FILE"] = str(Path(self._tmp.name) / "agent-token")
        if self.webhook_auth == "iam":
            env.update(AUTH_MODE="iam", AWS_ACCESS_KEY_ID=AGENT_ACCESS_KEY, AWS_SECRET_ACCESS_KEY=AGENT_SECRET_KEY)
        else:
            if hmac_secret_file is None:
                raise ValueError("hmac_secret_file: required in hmac mode (write world.hmac_secret to it)")
            env.update(AUTH_MODE="hmac", HMAC_SECRET_FILE=hmac_secret_file)
        env.update(extra)
        return env

    def queue_messages(self, queue: str = "provisioning") -> list[dict[str, Any]]:
        """Every message now on a route's queue, left in place, for assertions (each is received once,
        hidden while the rest are read, then made visible again)."""
        url = self.world.queue_urls()[queue]
        seen: dict[str, dict[str, Any]] = {}
        while True:
            out = self.clients.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=30)
            batch = [m for m in out.get("Messages", []) if m["MessageId"] not in seen]
            if not batch:
                break
            seen.update({m["MessageId"]: m for m in batch})
        for m in seen.values():
            self.clients.sqs.change_message_visibility(
                QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0
            )
        return list(seen.values())

    # ------------------------------------------------------------------ the cluster

    def apply(self, objects: Iterable[Mapping[str, Any]]) -> None:
        for obj in objects:
            self.kube_server.create(dict(obj))

    # ------------------------------------------------------------------ events and invocations

    def send_pending(self, pods: Iterable[str], *, event_id: str | None = None) -> str:
        """Put one pending-pod event (EventBridge envelope) on the provisioning queue; returns its id."""
        eid = event_id or str(uuid.uuid4())
        body = {
            "version": "0",
            "id": eid,
            "source": "nodeflow.agent",
            "detail-type": "Pod Unschedulable",
            "detail": {"cluster": self.cluster_name, "eventId": eid, "kind": "PodUnschedulable", "pods": list(pods)},
        }
        self.clients.sqs.send_message(QueueUrl=self.world.queue_url, MessageBody=json.dumps(body))
        return eid

    def receive_batch(self, max_messages: int = 10, wait: float = 0.0) -> list[dict[str, Any]]:
        """What the SQS event-source mapping would hand the provisioner (Lambda's record shape)."""
        out = self.clients.sqs.receive_message(
            QueueUrl=self.world.queue_url,
            MaxNumberOfMessages=max_messages,
            WaitTimeSeconds=int(wait),
            AttributeNames=["All"],
        )
        arn = f"arn:aws:sqs:{self.region}:{self.world.account_id}:nodeflow-{self.cluster_name}-provisioning"
        return [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": m.get("Attributes", {}),
                "eventSource": "aws:sqs",
                "eventSourceARN": arn,
            }
            for m in out.get("Messages", [])
        ]

    def invoke(self, suffix: str, event: Mapping[str, Any]) -> dict[str, Any]:
        """Invoke a function through the Lambda API (counted in ``dispatch``); raises on a function error."""
        out = self.clients.lambda_.invoke(FunctionName=self.function_name(suffix), Payload=json.dumps(dict(event)))
        payload = json.loads(out["Payload"].read() or b"null")
        if out.get("FunctionError"):
            raise RuntimeError(f"{self.function_name(suffix)} failed: {payload}")
        return payload if isinstance(payload, dict) else {"value": payload}

    def provision(self, records: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """Run the provisioner on ``records`` (default: one batch from the queue), then delete them."""
        batch = self.receive_batch() if records is None else records
        result = self.invoke("provisioner", {"Records": batch})
        for r in batch:
            if r.get("receiptHandle"):
                self.clients.sqs.delete_message(QueueUrl=self.world.queue_url, ReceiptHandle=r["receiptHandle"])
        return result

    def send_aws_event(self, event: Mapping[str, Any]) -> None:
        """Put an AWS-style event (an EventBridge envelope, e.g. an AWS sample event) on the account's default
        bus, as EC2 or AWS Health would: the rules of ``nodeflow.ingress.routing.AWS_ROUTES`` take it to the
        interruption queue when their patterns match. (moto, unlike AWS, accepts an ``aws.*`` Source from
        PutEvents.)"""
        entry: dict[str, Any] = {
            "Source": event["source"],
            "DetailType": event["detail-type"],
            "Detail": json.dumps(event.get("detail") or {}),
            "Resources": [str(r) for r in event.get("resources") or []],
        }
        out = self.clients.events.put_events(Entries=[entry])
        if out.get("FailedEntryCount"):
            raise RuntimeError(f"put_events refused the event: {out['Entries']}")

    def drain_interruption_queue(self, *, max_messages: int = 10) -> dict[str, Any]:
        """Receive what is on the interruption queue and invoke the interruption function with it as an SQS
        event, then delete every message it did not list in ``batchItemFailures`` (the event-source mapping
        with ReportBatchItemFailures; a function error deletes nothing). The function's response, plus
        ``"records"``: the SQS records it was given."""
        url = self.world.interruption_queue_url
        arn = f"arn:aws:sqs:{self.region}:{self.world.account_id}:nodeflow-{self.cluster_name}-interruption"
        out = self.clients.sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=max_messages, AttributeNames=["All"], VisibilityTimeout=30
        )
        messages = out.get("Messages", [])
        records = [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": m.get("Attributes", {}),
                "messageAttributes": {},
                "eventSource": "aws:sqs",
                "eventSourceARN": arn,
                "awsRegion": self.region,
            }
            for m in messages
        ]
        if not records:
            return {"batchItemFailures": [], "records": []}
        try:
            result = self.invoke("interruption", {"Records": records})
        except RuntimeError:
            for m in messages:  # a failed invocation: the messages come back after their visibility timeout
                self.clients.sqs.change_message_visibility(
                    QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0
                )
            raise
        failed = {str(f.get("itemIdentifier")) for f in result.get("batchItemFailures", [])}
        for m in messages:
            if m["MessageId"] in failed:
                # visible again at once (the real mapping leaves it for the visibility timeout)
                self.clients.sqs.change_message_visibility(
                    QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0
                )
            else:
                self.clients.sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
        return {**result, "records": records}

    def collect_garbage(self) -> dict[str, Any]:
        return self.invoke("gc", {"source": "aws.scheduler", "detail-type": "Scheduled Event"})

    # ------------------------------------------------------------------ executions

    def executions(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"stateMachineArn": self.launch_arn}
            if token:
                kwargs["nextToken"] = token
            page = self.clients.sfn.list_executions(**kwargs)
            out.extend(page.get("executions", []))
            token = page.get("nextToken")
            if not token:
                return out

    def wait_for_executions(self, timeout: float = 60.0) -> list[dict[str, Any]]:
        """Wait until every launch execution has finished; their final descriptions, by name."""
        deadline = time.monotonic() + timeout
        done: list[dict[str, Any]] = []
        for e in self.executions():
            left = max(0.1, deadline - time.monotonic())
            done.append(wait_for_execution(self.clients.sfn, e["executionArn"], timeout=left))
        return sorted(done, key=lambda d: d["name"])

    def terminate(self, claim_name: str, reason: str = "Test") -> str:
        """Start the terminate workflow for a NodeClaim as the other functions do (a second start while one
        runs is a no-op); returns the execution's ARN."""
        from nodeflow.aws.sfn import start_workflow

        payload = {"nodeClaim": claim_name, "reason": reason}
        _, name = start_workflow(self.clients.sfn, self.terminate_arn, claim_name, payload)
        return f"{self.terminate_arn.replace(':stateMachine:', ':execution:', 1)}:{name}"

    def terminate_executions(self) -> list[dict[str, Any]]:
        """Every execution of the terminate workflow."""
        out: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {"stateMachineArn": self.terminate_arn}
        while True:
            page = self.clients.sfn.list_executions(**kwargs)
            out.extend(page.get("executions", []))
            if not page.get("nextToken"):
                return out
            kwargs["nextToken"] = page["nextToken"]

    def wait_for_terminations(self, timeout: float = 60.0) -> list[dict[str, Any]]:
        """Wait until every terminate execution has finished; their final descriptions, by name."""
        deadline = time.monotonic() + timeout
        done = [
            wait_for_execution(self.clients.sfn, e["executionArn"], timeout=max(0.1, deadline - time.monotonic()))
            for e in self.terminate_executions()
        ]
        return sorted(done, key=lambda d: d["name"])

    def trace(self, execution_arn: str) -> Any:
        return execution_trace(self.clients.sfn, execution_arn)

    def run_instance(self, tags: Mapping[str, str], instance_type: str = "m5.large") -> str:
        """An instance launched outside nodeflow's launch path (a leak, a duplicate), with ``tags``; its id."""
        out = self.clients.ec2.run_instances(
            ImageId=self.world.amis["amd64"],
            MinCount=1,
            MaxCount=1,
            InstanceType=instance_type,
            TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}],
        )
        return str(out["Instances"][0]["InstanceId"])

    def instances(self, states: Iterable[str] = ("pending", "running")) -> list[dict[str, Any]]:
        """EC2 instances tagged for the cluster in ``states``."""
        out = self.clients.ec2.describe_instances(
            Filters=[
                {"Name": f"tag:kubernetes.io/cluster/{self.cluster_name}", "Values": ["owned"]},
                {"Name": "instance-state-name", "Values": list(states)},
            ]
        )
        return [i for r in out.get("Reservations", []) for i in r.get("Instances", [])]
