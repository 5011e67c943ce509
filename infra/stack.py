"""The nodeflow stack: one per cluster, wiring the constructs of infra/ (one module per concern).

config     CDK context -> NodeflowConfig (fails synth naming the key)
data       the DynamoDB table
queues     provisioning / disruption / interruption queues, each with a DLQ; the events and schedules DLQs
events     the nodeflow bus, the routing rules (and the AWS interruption rules on the default bus)
iam        permissions by capability, the node role, the agent's role
functions  the Lambdas, their roles, triggers (SQS, schedule, Function URL), EKS access entries
workflows  the state machines from statemachines/*.asl.json
monitoring the dashboard and alarms
install    the cluster check and the in-cluster install (custom resources), the installer's access entry
nag        cdk-nag AwsSolutions checks and the acknowledged findings, each with its reason
"""

from __future__ import annotations

from typing import Any

from aws_cdk import App, CfnOutput, Stack, Tags
from constructs import Construct

from infra.bundling import code_asset
from infra.config import NodeflowConfig
from infra.data import Data
from infra.events import Events
from infra.functions import Functions
from infra.iam import AgentRole, NodeRole, Permissions, node_access_entry
from infra.install import ClusterInstall
from infra.monitoring import Monitoring
from infra.nag import acknowledge_findings, add_checks
from infra.queues import Queues
from infra.workflows import Workflows
from nodeflow import __version__

__all__ = ["VERSION_TAG", "NodeflowStack", "build"]

#: The tag naming the nodeflow release a stack was deployed from (also the output ``Version``).
VERSION_TAG = "nodeflow:version"


class NodeflowStack(Stack):
    def __init__(self, scope: Construct, construct_id: str, *, config: NodeflowConfig, **kwargs: Any) -> None:
        super().__init__(
            scope, construct_id, description=f"nodeflow: just-in-time nodes for {config.cluster_name}", **kwargs
        )
        self.config = config
        Tags.of(self).add(VERSION_TAG, __version__)  # on the stack and every resource that takes tags
        self.data = Data(self, "Data", config=config)
        self.queues = Queues(self, "Queues", config=config)
        self.events = Events(self, "Events", config=config, queues=self.queues)
        self.node_role = NodeRole(self, "NodeRole", config=config)
        if self.node_role.created and config.eks_access_entries:
            node_access_entry(self.node_role, "AccessEntry", config, self.node_role.role)
        self.agent = AgentRole(self, "Agent", config=config)
        self.functions = Functions(
            self,
            "Functions",
            config=config,
            code=code_asset(),
            data=self.data,
            queues=self.queues,
            events=self.events,
            permissions=Permissions(self, config, self.node_role.role.role_arn),
            agent=self.agent,
        )
        self.workflows = Workflows(self, "Workflows", config=config, functions=self.functions)
        self.functions.connect_workflows(self.workflows.machines, self.workflows.invokes)
        self.monitoring = Monitoring(
            self,
            "Monitoring",
            config=config,
            queues=self.queues,
            functions=self.functions,
            machines=self.workflows.machines,
        )
        self._outputs()
        self.install = ClusterInstall(
            self,
            "Install",
            config=config,
            functions=self.functions,
            agent_role_arn=self.agent.role_arn,
            pod_identity=self.agent.created,
        )
        self.install.depend_on_the_rest()
        acknowledge_findings(self)

    def _outputs(self) -> None:
        CfnOutput(self, "Version", value=__version__, description="the nodeflow release this stack was deployed from")
        CfnOutput(self, "ClusterName", value=self.config.cluster_name)
        CfnOutput(self, "TableName", value=self.data.table.table_name)
        CfnOutput(
            self,
            "DecisionTableName",
            value=self.data.decisions.table_name,
            description="the decision log (python -m nodeflow decisions --stack STACK)",
        )
        CfnOutput(
            self,
            "DecisionLogTtlDays",
            value=str(self.config.decision_log_ttl_days),
            description="the days the decision log keeps a record (decisions --since reads no further back)",
        )
        CfnOutput(self, "EventBusName", value=self.events.bus.event_bus_name)
        for name, queue in self.queues.queues.items():
            CfnOutput(self, f"{name.capitalize()}QueueUrl", value=queue.queue_url)
        for name, machine in self.workflows.machines.items():
            CfnOutput(self, f"{name.capitalize()}StateMachineArn", value=machine.state_machine_arn)
        CfnOutput(self, "NodeRoleName", value=self.node_role.role.role_name, description="EC2NodeClass spec.role")
        if self.node_role.instance_profile is not None:
            CfnOutput(
                self,
                "NodeInstanceProfileName",
                value=self.node_role.instance_profile.ref,
                description="EC2NodeClass spec.instanceProfile (instead of spec.role)",
            )
        CfnOutput(self, "AgentRoleArn", value=self.agent.role_arn, description="the agent's IAM role")
        if self.functions.secret is not None:
            CfnOutput(self, "WebhookHmacSecretArn", value=self.functions.secret.secret_arn)


def build(app: App) -> NodeflowStack:
    """The app ``cdk synth`` runs: the stack for the cluster the context names, checked by cdk-nag."""
    config = NodeflowConfig.from_node(app.node)
    stack = NodeflowStack(app, config.stack_name, config=config)
    add_checks(app)
    return stack
