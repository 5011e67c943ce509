"""Interruption tests: the moto account and the real control plane (``make_local`` from the lifecycle tests, with
``kube_server`` the real API server behind its fault proxy),
AWS sample events put on the default bus, Karpenter's rules taking them to the interruption queue, the
interruption function invoked with what is on it.

The terminate workflow is a stand-in here (a long Wait, then Succeed), whatever ``LocalNodeflow`` wires:
these tests are about which executions start and with what input, not about what terminating does."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from nodeflow.api import labels as wk
from nodeflow.aws.offerings import UnavailableOfferings
from nodeflow.interruption.messages import instance_id_from_provider_id
from sandbox.controlplane.facade import RealKubeAPI
from sandbox.nodeflow import LocalNodeflow
from tests.functional.lifecycle.conftest import make_local
from tests.realk8s.launched import launch_workload

__all__ = ["STAND_IN", "Launched", "Sandbox", "kube_server", "make_local", "sandbox"]

# Waits 3600 s x the sandbox's wait scale (0.001): the execution is still RUNNING while a test looks at it.
STAND_IN = {
    "Comment": "stand-in for the terminate workflow",
    "StartAt": "Terminate",
    "States": {"Terminate": {"Type": "Wait", "Seconds": 3600, "Next": "Terminated"}, "Terminated": {"Type": "Succeed"}},
}


@dataclass(frozen=True)
class Launched:
    """A NodeClaim the provisioner created and the launch workflow brought up."""

    name: str
    uid: str
    instance_id: str
    instance_type: str
    zone: str
    capacity_type: str
    node_name: str


@dataclass
class Sandbox:
    local: LocalNodeflow
    terminate_arn: str

    @property
    def kube_server(self) -> Any:
        return self.local.kube_server

    def launch(self, app: str = "web") -> Launched:
        """One pending pod (a ReplicaSet's) -> one NodeClaim, launched, registered and initialized; the pod runs
        on its node."""
        (claim,) = launch_workload(self.local, app, 1, "1", "1Gi")
        labels = claim["metadata"]["labels"]
        instance_id = instance_id_from_provider_id(claim["status"]["providerID"])
        assert instance_id is not None
        return Launched(
            name=claim["metadata"]["name"],
            uid=claim["metadata"]["uid"],
            instance_id=instance_id,
            instance_type=labels[wk.LABEL_INSTANCE_TYPE],
            zone=labels[wk.LABEL_ZONE],
            capacity_type=labels[wk.LABEL_CAPACITY_TYPE],
            node_name=claim["status"]["nodeName"],
        )

    # --- the interruption queue ----------------------------------------------------------------

    def queued(self, timeout: float = 5.0) -> int:
        """How many messages are on the interruption queue (waits for EventBridge's delivery up to ``timeout``
        when there are none; moto delivers synchronously, so this returns at once in practice)."""
        sqs = self.local.clients.sqs
        url = self.local.world.interruption_queue_url
        deadline = time.monotonic() + timeout
        while True:
            attrs = sqs.get_queue_attributes(
                QueueUrl=url,
                AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
            )["Attributes"]
            count = int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])
            if count or time.monotonic() >= deadline:
                return count
            time.sleep(0.02)

    def dead_letters(self) -> int:
        attrs = self.local.clients.sqs.get_queue_attributes(
            QueueUrl=self.local.world.interruption_dlq_url, AttributeNames=["ApproximateNumberOfMessages"]
        )["Attributes"]
        return int(attrs["ApproximateNumberOfMessages"])

    def send_raw(self, body: str) -> str:
        """A body straight onto the interruption queue (what no rule would deliver)."""
        out = self.local.clients.sqs.send_message(QueueUrl=self.local.world.interruption_queue_url, MessageBody=body)
        return str(out["MessageId"])

    # --- what happened -------------------------------------------------------------------------

    def terminations(self) -> list[dict[str, Any]]:
        """Executions of the terminate workflow: name and input, by name."""
        sfn = self.local.clients.sfn
        out = []
        for e in sfn.list_executions(stateMachineArn=self.terminate_arn)["executions"]:
            desc = sfn.describe_execution(executionArn=e["executionArn"])
            out.append({"name": desc["name"], "input": json.loads(desc["input"]), "status": desc["status"]})
        return sorted(out, key=lambda d: d["name"])

    def events(self, reason: str) -> list[dict[str, Any]]:
        return [e for e in self.kube_server.objects("v1", "Event", "default") if e.get("reason") == reason]

    def unavailable(self) -> frozenset[tuple[str, str, str]]:
        table = UnavailableOfferings(self.local.clients.dynamodb, self.local.world.table_name)
        return table.current(datetime.now(UTC))

    def stop_terminations(self) -> None:
        sfn = self.local.clients.sfn
        for e in sfn.list_executions(stateMachineArn=self.terminate_arn, statusFilter="RUNNING")["executions"]:
            sfn.stop_execution(executionArn=e["executionArn"])


@pytest.fixture
def kube_server(real_kube: RealKubeAPI) -> RealKubeAPI:
    return real_kube


@pytest.fixture
def sandbox(make_local: Callable[..., LocalNodeflow]) -> Iterator[Sandbox]:
    import boto3

    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    iam = boto3.client("iam", region_name="us-east-1")
    role = iam.create_role(
        RoleName="nodeflow-demo-terminate-stand-in",
        AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []}),
    )["Role"]["Arn"]
    arn = sfn.create_state_machine(
        name="nodeflow-demo-terminate-stand-in", definition=json.dumps(STAND_IN), roleArn=role
    )["stateMachineArn"]
    box = Sandbox(make_local(env={"TERMINATE_STATE_MACHINE_ARN": arn}), arn)
    try:
        yield box
    finally:
        box.stop_terminations()
