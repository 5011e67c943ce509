"""The in-cluster side of ``cdk deploy`` / ``cdk destroy``: two CloudFormation custom resources served by the
``install`` function (``nodeflow.handlers.install``), and the EKS access entry the installer works through.

- ``ClusterCheck`` (``Custom::NodeflowClusterCheck``): the cluster exists and, when the stack creates EKS access
  entries, its authentication mode allows them. Every access entry of the stack depends on it, so a CONFIG_MAP
  cluster fails the deploy here, with the command that fixes it, not on the first access entry with EKS's error.
  (Synth cannot know the mode without credentials; the check reads it at deploy time.)
- ``InstallerAccessEntry`` (clusterInstall): the install function's role in the cluster, with the
  AmazonEKSClusterAdminPolicy access policy. Whoever installs CRDs, ClusterRoles and ClusterRoleBindings can grant
  itself anything (RBAC's escalate and bind), so a narrower grant would not be narrower in effect; and before the
  first install there is no RBAC in the cluster to bind a group to, so only an access policy can let it in, and the
  only one that covers CRDs and cluster RBAC is the cluster admin one. What limits it is on the AWS side: the role
  is assumable only by Lambda, its function has no trigger (only CloudFormation invokes it, on deploy and destroy),
  and its IAM allows nothing but eks:DescribeCluster, its logs, traces and the HMAC secret.
- ``InCluster`` (``Custom::NodeflowInstall``, clusterInstall): applies ``nodeflow.install.manifests`` (what
  ``install-manifests`` writes for GitOps) with the stack's values; its ``SourceDigest`` changes whenever the
  install files do, so a deploy with new manifests runs an Update (upgrade: apply, wait, prune). It depends on
  every other resource of the stack: it runs after all of them on create, and on ``cdk destroy`` it is deleted
  first, so its refusal (NodeClaims still managed) stops the destroy before anything else is gone.
"""

from __future__ import annotations

from aws_cdk import CfnOutput, CustomResource, Stack
from aws_cdk import aws_eks as eks
from constructs import Construct

from infra.cluster_rbac import ACCESS_POLICIES
from infra.config import NodeflowConfig
from infra.functions import Functions
from nodeflow.install import source_digest

__all__ = ["CHECK_TYPE", "CLUSTER_ADMIN_POLICY", "INSTALL_TYPE", "ClusterInstall"]

CHECK_TYPE = "Custom::NodeflowClusterCheck"
INSTALL_TYPE = "Custom::NodeflowInstall"
CLUSTER_ADMIN_POLICY = ACCESS_POLICIES["install"][0]


class ClusterInstall(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: NodeflowConfig,
        functions: Functions,
        agent_role_arn: str,
        pod_identity: bool,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        function = functions.functions["install"]
        self.check = CustomResource(
            self,
            "ClusterCheck",
            service_token=function.function_arn,
            resource_type=CHECK_TYPE,
            properties={"ClusterName": config.cluster_name, "AccessEntries": config.eks_access_entries},
        )
        self.access_entry: eks.CfnAccessEntry | None = None
        self.resource: CustomResource | None = None
        if config.cluster_install:
            self.access_entry = eks.CfnAccessEntry(
                self,
                "InstallerAccessEntry",
                cluster_name=config.cluster_name,
                principal_arn=functions.roles["install"].role_arn,
                type="STANDARD",
                access_policies=[
                    eks.CfnAccessEntry.AccessPolicyProperty(
                        policy_arn=f"arn:{stack.partition}:eks::aws:cluster-access-policy/{CLUSTER_ADMIN_POLICY}",
                        access_scope=eks.CfnAccessEntry.AccessScopeProperty(type="cluster"),
                    )
                ],
            )
            if functions.secret is not None:
                functions.secret.grant_read(functions.roles["install"])
            properties: dict[str, object] = {
                "ClusterName": config.cluster_name,
                "WebhookUrl": functions.url.url if functions.url is not None else "",
                "AgentRoleArn": agent_role_arn,
                "PodIdentity": pod_identity,
                "SourceDigest": source_digest(),
                "AgentReadySeconds": config.install_wait_seconds,
            }
            if functions.secret is not None:
                properties["HmacSecretArn"] = functions.secret.secret_arn
            self.resource = CustomResource(
                self,
                "InCluster",
                service_token=function.function_arn,
                resource_type=INSTALL_TYPE,
                properties=properties,
            )
            self.resource.node.add_dependency(self.access_entry)
        # Every access entry waits for the check (a CONFIG_MAP cluster fails there, saying what to run).
        for construct in stack.node.find_all():
            if isinstance(construct, eks.CfnAccessEntry):
                construct.node.add_dependency(self.check)

    def depend_on_the_rest(self) -> None:
        """Make the install depend on every other resource of the stack (call once they all exist)."""
        if self.resource is None:
            return
        for child in Stack.of(self).node.children:
            if child is not self and not isinstance(child, CfnOutput):
                self.resource.node.add_dependency(child)
