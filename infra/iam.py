"""IAM: the permission vocabulary the functions are granted from, the node role and the agent's role.

Least privilege, modelled on Karpenter's controller policy:

- EC2 writes (CreateFleet, RunInstances, CreateLaunchTemplate, CreateTags) only create resources that carry the
  cluster's ownership tags in the request (``kubernetes.io/cluster/<name>: owned``, ``eks:eks-cluster-name``,
  ``karpenter.sh/nodepool``), tags only at creation (``ec2:CreateAction``), and use only launch templates that
  carry them; TerminateInstances only for instances that carry them, DeleteLaunchTemplate only for templates that
  carry them and an EC2NodeClass's tag. Subnets, security groups, images and
  snapshots are read-only inputs and are not tag-conditioned (an EC2NodeClass may select any).
- iam:PassRole only for the node role, only to EC2; instance profiles only under the cluster's name prefix and
  with the cluster's tags (``nodeflow.aws.ec2.instance_profiles.instance_profile_name``).
- ssm only for the public AMI parameters (``/aws/service/...``), pricing:GetProducts, ec2:Describe* in the
  stack's region, eks:DescribeCluster only for the cluster.
- DynamoDB per partition (``dynamodb:LeadingKeys``): the offerings cache, the webhook's nonces and event ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from aws_cdk import Aws, Stack
from aws_cdk import aws_eks as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from infra.config import NodeflowConfig
from infra.grants import actions
from nodeflow.aws.ec2.instance_profiles import instance_profile_name
from nodeflow.aws.ec2.tags import TAG_EKS_CLUSTER, TAG_NODECLASS, TAG_NODEPOOL

__all__ = [
    "AGENT_SERVICE_ACCOUNT",
    "DESCRIBE_ACTIONS",
    "AgentRole",
    "NodeRole",
    "Permissions",
    "access_entry",
]

ROOT = Path(__file__).resolve().parent.parent
NODE_ROLE_MANAGED_POLICIES = (
    "AmazonEKSWorkerNodePolicy",
    "AmazonEKS_CNI_Policy",
    "AmazonEC2ContainerRegistryPullOnly",
    "AmazonSSMManagedInstanceCore",
)
# Every statement's actions come from infra/grants.py (by Sid), the table the governance record lists.
CATALOG_DESCRIBE_ACTIONS = tuple(actions("CatalogDescribe"))
NODECLASS_DESCRIBE_ACTIONS = tuple(actions("NodeClassDescribe"))
FLEET_DESCRIBE_ACTIONS = tuple(actions("FleetDescribe"))
LAUNCH_DESCRIBE_ACTIONS = tuple(sorted({*NODECLASS_DESCRIBE_ACTIONS, *FLEET_DESCRIBE_ACTIONS}))
DESCRIBE_ACTIONS = tuple(sorted({*CATALOG_DESCRIBE_ACTIONS, *LAUNCH_DESCRIBE_ACTIONS}))


def _agent_service_account() -> tuple[str, str]:
    """(namespace, name) of the agent's ServiceAccount, read from its manifest so they cannot drift."""
    doc = yaml.safe_load((ROOT / "agent" / "manifests" / "10-serviceaccount.yaml").read_text())
    return doc["metadata"]["namespace"], doc["metadata"]["name"]


AGENT_SERVICE_ACCOUNT = _agent_service_account()


def cluster_arn(scope: Construct, cluster_name: str) -> str:
    return Stack.of(scope).format_arn(service="eks", resource="cluster", resource_name=cluster_name)


def _ec2(resource: str, *, account: str | None = None) -> str:
    """``arn:<partition>:ec2:<region>:<account>:<resource>/*`` (this account unless told)."""
    acct = Aws.ACCOUNT_ID if account is None else account
    return f"arn:{Aws.PARTITION}:ec2:{Aws.REGION}:{acct}:{resource}/*"


class Permissions:
    """Policy statements by capability (``infra.functions`` grants each function the ones its spec names)."""

    def __init__(self, scope: Construct, config: NodeflowConfig, node_role_arn: str) -> None:
        self.scope = scope
        self.config = config
        self.node_role_arn = node_role_arn
        cluster = config.cluster_name
        self._owned_request = {
            "StringEquals": {
                f"aws:RequestTag/kubernetes.io/cluster/{cluster}": "owned",
                f"aws:RequestTag/{TAG_EKS_CLUSTER}": cluster,
            },
            "StringLike": {f"aws:RequestTag/{TAG_NODEPOOL}": "*"},
        }
        self._owned_resource = {
            "StringEquals": {f"aws:ResourceTag/kubernetes.io/cluster/{cluster}": "owned"},
            "StringLike": {f"aws:ResourceTag/{TAG_NODEPOOL}": "*"},
        }

    def _region(self) -> dict[str, Any]:
        return {"StringEquals": {"aws:RequestedRegion": Aws.REGION}}

    def cluster_read(self) -> list[iam.PolicyStatement]:
        """eks:DescribeCluster: the API endpoint and CA, when the context did not give them."""
        return self.describe_cluster() if self.config.read_cluster_from_eks else []

    def describe_cluster(self) -> list[iam.PolicyStatement]:
        """eks:DescribeCluster on this cluster only."""
        return [
            iam.PolicyStatement(
                sid="DescribeCluster",
                actions=actions("DescribeCluster"),
                resources=[cluster_arn(self.scope, self.config.cluster_name)],
            )
        ]

    def catalog(self) -> list[iam.PolicyStatement]:
        """Instance types, offerings, zones and spot prices (ec2:Describe*), on-demand prices (Pricing API)."""
        if self.config.catalog_source == "offline":
            return []
        return [
            iam.PolicyStatement(
                sid="CatalogDescribe",
                actions=actions("CatalogDescribe"),
                resources=["*"],
                conditions=self._region(),
            ),
            iam.PolicyStatement(sid="CatalogPrices", actions=actions("CatalogPrices"), resources=["*"]),
        ]

    def pass_node_role(self) -> iam.PolicyStatement:
        """iam:PassRole for the node role, to EC2 only: launching with its instance profile, and adding it to one."""
        return iam.PolicyStatement(
            sid="PassNodeRole",
            actions=actions("PassNodeRole"),
            resources=[self.node_role_arn],
            conditions={"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
        )

    def nodeclass(self) -> list[iam.PolicyStatement]:
        """Resolve EC2NodeClasses (subnets, security groups, AMIs incl. the public SSM parameters of aliases) and
        the instance profile for spec.role (get, create with the cluster's tags, add the role). With
        ``pass_node_role`` (adding a role to a profile passes it)."""
        cluster = self.config.cluster_name
        profile_prefix = instance_profile_name(cluster, "").rsplit("_", 1)[0]
        profiles = f"arn:{Aws.PARTITION}:iam::{Aws.ACCOUNT_ID}:instance-profile/{profile_prefix}_*"
        return [
            iam.PolicyStatement(
                sid="NodeClassDescribe",
                actions=actions("NodeClassDescribe"),
                resources=["*"],
                conditions=self._region(),
            ),
            iam.PolicyStatement(
                sid="AmiParameters",
                actions=actions("AmiParameters"),
                resources=[f"arn:{Aws.PARTITION}:ssm:{Aws.REGION}::parameter/aws/service/*"],
            ),
            # ... and those Karpenter created for the cluster's classes (path /karpenter/<region>/<cluster>/<uid>/):
            # an adopted class keeps its profile while it holds the role (nodeflow.aws.ec2.instance_profiles)
            iam.PolicyStatement(
                sid="ReadInstanceProfiles",
                actions=actions("ReadInstanceProfiles"),
                resources=[
                    profiles,
                    f"arn:{Aws.PARTITION}:iam::{Aws.ACCOUNT_ID}:instance-profile/karpenter/*/{cluster}/*",
                ],
            ),
            iam.PolicyStatement(
                sid="CreateInstanceProfiles",
                actions=actions("CreateInstanceProfiles"),
                resources=[profiles],
                conditions={
                    "StringEquals": {
                        f"aws:RequestTag/kubernetes.io/cluster/{cluster}": "owned",
                        f"aws:RequestTag/{TAG_EKS_CLUSTER}": cluster,
                    },
                    "StringLike": {f"aws:RequestTag/{TAG_NODECLASS}": "*"},
                },
            ),
            iam.PolicyStatement(
                sid="ManageInstanceProfileRoles",
                actions=actions("ManageInstanceProfileRoles"),
                resources=[profiles],
                conditions={
                    "StringEquals": {f"aws:ResourceTag/kubernetes.io/cluster/{cluster}": "owned"},
                    "StringLike": {f"aws:ResourceTag/{TAG_NODECLASS}": "*"},
                },
            ),
        ]

    def fleet(self) -> list[iam.PolicyStatement]:
        """Keep launch templates and launch with CreateFleet / RunInstances, only with the cluster's tags. With
        ``pass_node_role`` (the instance profile's role)."""
        created = [
            _ec2("fleet"),
            _ec2("instance"),
            _ec2("volume"),
            _ec2("network-interface"),
            _ec2("launch-template"),
            _ec2("spot-instances-request"),
        ]
        return [
            iam.PolicyStatement(
                sid="FleetDescribe",
                actions=actions("FleetDescribe"),
                resources=["*"],
                conditions=self._region(),
            ),
            # Inputs an EC2NodeClass selects: any subnet or security group (shared VPCs: any account), images.
            iam.PolicyStatement(
                sid="LaunchFromSelectedInputs",
                actions=actions("LaunchFromSelectedInputs"),
                resources=[
                    f"arn:{Aws.PARTITION}:ec2:{Aws.REGION}::image/*",
                    f"arn:{Aws.PARTITION}:ec2:{Aws.REGION}::snapshot/*",
                    _ec2("subnet", account="*"),
                    _ec2("security-group", account="*"),
                ],
            ),
            iam.PolicyStatement(
                sid="LaunchFromOwnedTemplates",
                actions=actions("LaunchFromOwnedTemplates"),
                resources=[_ec2("launch-template")],
                conditions=self._owned_resource,
            ),
            iam.PolicyStatement(
                sid="CreateOwnedResources",
                actions=actions("CreateOwnedResources"),
                resources=created,
                conditions=self._owned_request,
            ),
            iam.PolicyStatement(
                sid="TagOnCreate",
                actions=actions("TagOnCreate"),
                resources=created,
                conditions={
                    **self._owned_request,
                    "StringEquals": {
                        **self._owned_request["StringEquals"],
                        "ec2:CreateAction": ["RunInstances", "CreateFleet", "CreateLaunchTemplate"],
                    },
                },
            ),
        ]

    def launch_dry_run(self) -> list[iam.PolicyStatement]:
        """EC2NodeClass validation (``nodeflow.aws.ec2.validation``) for functions that resolve
        classes without launching (provisioner, gc): IAM evaluates a DryRun call as the real one, so the same
        launch statements as ``fleet``, with DescribeLaunchTemplates (the class's template for CreateFleet)."""
        return [
            iam.PolicyStatement(
                sid="DryRunDescribe",
                actions=actions("DryRunDescribe"),
                resources=["*"],
                conditions=self._region(),
            ),
            *(s for s in self.fleet() if s.sid != "FleetDescribe"),
        ]

    def describe_instances(self) -> list[iam.PolicyStatement]:
        """Find the cluster's instances (by their tags) and their states."""
        return [
            iam.PolicyStatement(
                sid="DescribeInstances",
                actions=actions("DescribeInstances"),
                resources=["*"],
                conditions=self._region(),
            )
        ]

    def describe_instance_status(self) -> list[iam.PolicyStatement]:
        """Poll EC2 status checks and scheduled events (DescribeInstanceStatus supports no resource-level scoping)."""
        return [
            iam.PolicyStatement(
                sid="DescribeInstanceStatus",
                actions=actions("DescribeInstanceStatus"),
                resources=["*"],
                conditions=self._region(),
            )
        ]

    def terminate(self) -> list[iam.PolicyStatement]:
        """Find the cluster's instances and terminate those nodeflow launched (by their tags)."""
        return [
            *self.describe_instances(),
            iam.PolicyStatement(
                sid="TerminateOwnedInstances",
                actions=actions("TerminateOwnedInstances"),
                resources=[_ec2("instance")],
                conditions=self._owned_resource,
            ),
        ]

    def delete_launch_templates(self) -> list[iam.PolicyStatement]:
        """List the cluster's launch templates and delete those a provisioner of the cluster made (by their tags:
        the cluster's ownership tags, a NodePool's and an EC2NodeClass's, as ``nodeflow.aws.ec2.launch_templates``
        selects them). A template of another cluster, or one without these tags, cannot be deleted."""
        cluster = self.config.cluster_name
        return [
            iam.PolicyStatement(
                sid="DescribeLaunchTemplates",
                actions=actions("DescribeLaunchTemplates"),
                resources=["*"],
                conditions=self._region(),
            ),
            iam.PolicyStatement(
                sid="DeleteOwnedLaunchTemplates",
                actions=actions("DeleteOwnedLaunchTemplates"),
                resources=[_ec2("launch-template")],
                conditions={
                    "StringEquals": {
                        f"aws:ResourceTag/kubernetes.io/cluster/{cluster}": "owned",
                        f"aws:ResourceTag/{TAG_EKS_CLUSTER}": cluster,
                    },
                    "StringLike": {f"aws:ResourceTag/{TAG_NODEPOOL}": "*", f"aws:ResourceTag/{TAG_NODECLASS}": "*"},
                },
            ),
        ]


class NodeRole(Construct):
    """The role nodes run with (EC2NodeClass ``spec.role``): created with an instance profile, or imported."""

    def __init__(self, scope: Construct, construct_id: str, *, config: NodeflowConfig) -> None:
        super().__init__(scope, construct_id)
        self.created = config.create_node_role
        self.instance_profile: iam.CfnInstanceProfile | None = None
        if config.create_node_role:
            role = iam.Role(
                self,
                "Role",
                role_name=config.node_role_name,
                assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
                description=f"nodeflow {config.cluster_name}: nodes (EC2NodeClass spec.role)",
                managed_policies=[
                    iam.ManagedPolicy.from_aws_managed_policy_name(p) for p in NODE_ROLE_MANAGED_POLICIES
                ],
            )
            self.instance_profile = iam.CfnInstanceProfile(self, "InstanceProfile", roles=[role.role_name])
            self.role: iam.IRole = role
        else:
            self.role = iam.Role.from_role_name(self, "Role", config.node_role_name)


class AgentRole(Construct):
    """The in-cluster agent's identity: the role given by ``agentRoleArn``, else one for EKS Pod Identity with
    its association (namespace and service account from ``agent/manifests``)."""

    def __init__(self, scope: Construct, construct_id: str, *, config: NodeflowConfig) -> None:
        super().__init__(scope, construct_id)
        self.created = config.agent_role_arn is None
        if config.agent_role_arn is not None:
            self.role_arn = config.agent_role_arn
            return
        account = Stack.of(self).account
        role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal(
                "pods.eks.amazonaws.com",
                conditions={
                    "StringEquals": {"aws:SourceAccount": account},
                    "ArnEquals": {"aws:SourceArn": cluster_arn(self, config.cluster_name)},
                },
            ).with_session_tags(),
            description=f"nodeflow {config.cluster_name}: the in-cluster agent (EKS Pod Identity)",
        )
        namespace, service_account = AGENT_SERVICE_ACCOUNT
        eks.CfnPodIdentityAssociation(
            self,
            "PodIdentity",
            cluster_name=config.cluster_name,
            namespace=namespace,
            service_account=service_account,
            role_arn=role.role_arn,
        )
        self.role_arn = role.role_arn


def access_entry(
    scope: Construct, construct_id: str, config: NodeflowConfig, role: iam.IRole, groups: Sequence[str]
) -> eks.CfnAccessEntry:
    """Map a Lambda role into the cluster as a member of ``groups`` (``infra.cluster_rbac.FUNCTION_GROUPS``;
    infra/cluster/controller-rbac.yaml binds each). No access policy: RBAC alone decides."""
    if not groups:
        raise ValueError(f"infra.iam: access entry {construct_id} needs at least one Kubernetes group")
    return eks.CfnAccessEntry(
        scope,
        construct_id,
        cluster_name=config.cluster_name,
        principal_arn=role.role_arn,
        type="STANDARD",
        kubernetes_groups=list(groups),
    )


def node_access_entry(scope: Construct, construct_id: str, config: NodeflowConfig, role: iam.IRole) -> None:
    """Let nodes with the created node role join the cluster (EKS access entry of type EC2_LINUX)."""
    eks.CfnAccessEntry(
        scope, construct_id, cluster_name=config.cluster_name, principal_arn=role.role_arn, type="EC2_LINUX"
    )
