"""A cluster as Karpenter v1.14 leaves it, built on the real control plane and moto, for nodeflow to adopt.

What Karpenter (kubernetes-sigs/karpenter and aws/karpenter-provider-aws v1.14.1) writes, and so what is written here:

- the EC2NodeClass with its finalizer ``karpenter.k8s.aws/termination``, its hash annotations
  (``karpenter.k8s.aws/ec2nodeclass-hash``, ``-hash-version`` v5; the number nodeflow computes, pinned against the
  provider's golden values in tests/unit/api/test_ec2nodeclass_hash.py) and its resolved status (subnets, security
  groups, AMIs, the instance profile Karpenter created, every condition True);
- the NodePool with ``karpenter.sh/nodepool-hash`` and ``-hash-version`` v3 (``nodepool_hash``, pinned by
  tests/unit/api/test_nodepool_hash.py) and Ready status;
- per node: a launch template named ``karpenter.k8s.aws/<number>`` and tagged as ``utils.GetTags`` tags it
  (``kubernetes.io/cluster/NAME: owned``, ``karpenter.sh/nodepool``, ``eks:eks-cluster-name``,
  ``karpenter.k8s.aws/ec2nodeclass``); an instance launched from it with the same tags plus those the tagging
  controller adds once the node registered (``Name``, ``karpenter.sh/nodeclaim``); a NodeClaim named
  ``<nodepool>-<5 letters>`` owned by the NodePool, with Karpenter's labels, annotations (both hashes and versions,
  ``karpenter.k8s.aws/tagged``), finalizer ``karpenter.sh/termination`` and status (providerID, nodeName, imageID,
  capacity, allocatable, conditions Launched / Registered / Initialized / Ready / ConsistentStateFound True);
- the Node its kubelet registered (the simulated kubelet registers it, with ``karpenter.sh/unregistered``), then
  what Karpenter's registration and initialization do to it: labels ``karpenter.sh/registered`` and
  ``karpenter.sh/initialized``, finalizer ``karpenter.sh/termination``, an owner reference to the NodeClaim, the
  unregistered taint removed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from nodeflow.api.karpenter import EC2NodeClass, NodePool
from nodeflow.api.template_hash import (
    EC2NODECLASS_HASH_VERSION,
    NODEPOOL_HASH_VERSION,
    ec2nodeclass_hash,
    nodepool_hash,
)
from nodeflow.handlers.runtime import runtime
from nodeflow.kube.client import NODE_CLAIMS, NODES, KubeClient
from sandbox.controlplane.facade import wait_for
from sandbox.nodeflow import LocalNodeflow

POOL = "default"
CLASS = "default"
INSTANCE_PROFILE = "demo_8473647254178262416"  # Karpenter names it <cluster>_<hash>


@dataclass(frozen=True)
class Adopted:
    """One node Karpenter made: its NodeClaim, instance and Node."""

    claim: str
    instance_id: str
    node: str
    launch_template: str


def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def node_class(local: LocalNodeflow) -> dict[str, Any]:
    world = local.world
    obj: dict[str, Any] = {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": CLASS, "finalizers": ["karpenter.k8s.aws/termination"]},
        "spec": {
            "role": world.node_role_name,
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": local.cluster_name}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": local.cluster_name}}],
        },
    }
    # the CA bundle the cluster's nodes get (Karpenter: DescribeCluster's; nodeflow: its settings or connection)
    ca = runtime().cluster_info().ca_bundle
    obj["metadata"]["annotations"] = {
        "karpenter.k8s.aws/ec2nodeclass-hash": ec2nodeclass_hash(EC2NodeClass.model_validate(obj), ca),
        "karpenter.k8s.aws/ec2nodeclass-hash-version": EC2NODECLASS_HASH_VERSION,
    }
    now = _stamp(datetime.now(UTC))
    ready = ["AMIsReady", "SubnetsReady", "SecurityGroupsReady", "InstanceProfileReady", "ValidationSucceeded", "Ready"]
    obj["status"] = {
        "subnets": [{"id": sid, "zone": zone} for zone, sid in sorted(world.subnets.items())],
        "securityGroups": [{"id": world.security_group_id, "name": f"{local.cluster_name}-nodes"}],
        "amis": [
            {
                "id": image,
                "name": f"al2023-{arch}",
                "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": [arch]}],
            }
            for arch, image in sorted(world.amis.items())
        ],
        "instanceProfile": INSTANCE_PROFILE,
        "conditions": [
            {
                "type": t,
                "status": "True",
                "reason": t,
                "message": "",
                "lastTransitionTime": now,
                "observedGeneration": 1,
            }
            for t in ready
        ],
    }
    return obj


def node_pool(consolidate_after: str = "0s") -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": POOL},
        "spec": {
            "template": {
                "metadata": {"labels": {"team": "web"}},
                "spec": {
                    "requirements": [
                        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                        {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["m"]},
                    ],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": CLASS},
                    "expireAfter": "720h",
                },
            },
            "disruption": {
                "consolidationPolicy": "WhenEmpty",
                "consolidateAfter": consolidate_after,
                "budgets": [{"nodes": "100%"}],
            },
        },
    }
    obj["metadata"]["annotations"] = {
        "karpenter.sh/nodepool-hash": nodepool_hash(NodePool.model_validate(obj)),
        "karpenter.sh/nodepool-hash-version": NODEPOOL_HASH_VERSION,
    }
    return obj


def install_karpenter_objects(local: LocalNodeflow) -> None:
    """Karpenter's instance profile, EC2NodeClass and NodePool (with their status)."""
    created_class = local.kube_server.create(node_class(local))
    iam = local.clients.iam
    iam.create_instance_profile(
        InstanceProfileName=INSTANCE_PROFILE,
        Path=f"/karpenter/{local.region}/{local.cluster_name}/{created_class['metadata']['uid']}/",
        Tags=[
            {"Key": f"kubernetes.io/cluster/{local.cluster_name}", "Value": "owned"},
            {"Key": "eks:eks-cluster-name", "Value": local.cluster_name},
            {"Key": "karpenter.k8s.aws/ec2nodeclass", "Value": CLASS},
            {"Key": "topology.kubernetes.io/region", "Value": local.region},
        ],
    )
    iam.add_role_to_instance_profile(InstanceProfileName=INSTANCE_PROFILE, RoleName=local.world.node_role_name)
    pool = node_pool()
    created = local.kube_server.create(pool, keep_status=False)
    now = _stamp(datetime.now(UTC))
    local.kube_server.patch(
        "karpenter.sh/v1",
        "NodePool",
        POOL,
        {
            "status": {
                "conditions": [
                    {"type": t, "status": "True", "reason": t, "message": "", "lastTransitionTime": now}
                    for t in ("ValidationSucceeded", "NodeClassReady", "Ready")
                ],
            }
        },
        subresource="status",
    )
    assert created["metadata"]["annotations"]["karpenter.sh/nodepool-hash"]


def _tags(local: LocalNodeflow) -> dict[str, str]:
    """``utils.GetTags`` of the provider: what the launch template, the instance and its volumes carry."""
    return {
        f"kubernetes.io/cluster/{local.cluster_name}": "owned",
        "karpenter.sh/nodepool": POOL,
        "eks:eks-cluster-name": local.cluster_name,
        "karpenter.k8s.aws/ec2nodeclass": CLASS,
    }


def _tag_list(tags: dict[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in sorted(tags.items())]


def launch_node(
    local: LocalNodeflow, suffix: str, instance_type: str = "m5.large", zone: str = "us-east-1a"
) -> Adopted:
    """One node as Karpenter launched, registered and initialized it (see the module docstring)."""
    ec2 = local.clients.ec2
    claim_name = f"{POOL}-{suffix}"
    tags = _tags(local)
    template = f"karpenter.k8s.aws/{abs(hash((suffix, instance_type))) % 10**19}"
    ec2.create_launch_template(
        LaunchTemplateName=template,
        LaunchTemplateData={
            "ImageId": local.world.amis["amd64"],
            "IamInstanceProfile": {"Name": INSTANCE_PROFILE},
            "SecurityGroupIds": [local.world.security_group_id],
            "MetadataOptions": {"HttpEndpoint": "enabled", "HttpTokens": "required", "HttpPutResponseHopLimit": 1},
            "TagSpecifications": [
                {"ResourceType": kind, "Tags": _tag_list(tags)} for kind in ("instance", "volume", "network-interface")
            ],
        },
        TagSpecifications=[{"ResourceType": "launch-template", "Tags": _tag_list(tags)}],
    )
    inst = ec2.run_instances(
        LaunchTemplate={"LaunchTemplateName": template, "Version": "$Latest"},
        InstanceType=instance_type,
        MinCount=1,
        MaxCount=1,
        SubnetId=local.world.subnets[zone],
        TagSpecifications=[{"ResourceType": "instance", "Tags": _tag_list(tags)}],
    )["Instances"][0]
    iid = inst["InstanceId"]
    node_name = inst.get("PrivateDnsName") or iid
    ec2.create_tags(Resources=[iid], Tags=_tag_list({"Name": node_name, "karpenter.sh/nodeclaim": claim_name}))

    pool = local.kube_server.get("karpenter.sh/v1", "NodePool", POOL)
    node_class_obj = local.kube_server.get("karpenter.k8s.aws/v1", "EC2NodeClass", CLASS)
    launched = datetime.now(UTC)
    info = local.clients.ec2.describe_instance_types(InstanceTypes=[instance_type])["InstanceTypes"][0]
    cpu = str(info["VCpuInfo"]["DefaultVCpus"])
    memory = f"{info['MemoryInfo']['SizeInMiB']}Mi"
    labels = {
        "karpenter.sh/nodepool": POOL,
        "team": "web",
        "node.kubernetes.io/instance-type": instance_type,
        "karpenter.sh/capacity-type": "on-demand",
        "topology.kubernetes.io/zone": zone,
        "topology.kubernetes.io/region": local.region,
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "karpenter.k8s.aws/instance-category": instance_type[0],
        "karpenter.k8s.aws/instance-family": instance_type.split(".")[0],
        "karpenter.k8s.aws/instance-size": instance_type.split(".")[1],
        "karpenter.k8s.aws/instance-cpu": cpu,
    }
    claim = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": claim_name,
            "labels": labels,
            "annotations": {
                "karpenter.sh/nodepool-hash": pool["metadata"]["annotations"]["karpenter.sh/nodepool-hash"],
                "karpenter.sh/nodepool-hash-version": NODEPOOL_HASH_VERSION,
                "karpenter.k8s.aws/ec2nodeclass-hash": node_class_obj["metadata"]["annotations"][
                    "karpenter.k8s.aws/ec2nodeclass-hash"
                ],
                "karpenter.k8s.aws/ec2nodeclass-hash-version": EC2NODECLASS_HASH_VERSION,
                "karpenter.k8s.aws/tagged": "true",
                "compatibility.karpenter.k8s.aws/cluster-name-tagged": "true",
            },
            "finalizers": ["karpenter.sh/termination"],
            "ownerReferences": [
                {
                    "apiVersion": "karpenter.sh/v1",
                    "kind": "NodePool",
                    "name": POOL,
                    "uid": pool["metadata"]["uid"],
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": CLASS},
            "requirements": [
                *pool["spec"]["template"]["spec"]["requirements"],
                {"key": "karpenter.sh/nodepool", "operator": "In", "values": [POOL]},
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [instance_type]},
            ],
            "resources": {"requests": {"cpu": "100m", "pods": "1"}},
            "expireAfter": "720h",
        },
        "status": {
            "providerID": f"aws:///{zone}/{iid}",
            "imageID": local.world.amis["amd64"],
            "capacity": {"cpu": cpu, "memory": memory, "pods": "29", "ephemeral-storage": "20Gi"},
            "allocatable": {"cpu": f"{int(cpu) * 1000 - 80}m", "memory": memory, "pods": "29"},
            "conditions": [
                {"type": "Launched", "status": "True", "reason": "Launched", "lastTransitionTime": _stamp(launched)},
            ],
        },
    }
    local.kube_server.create(claim)
    # The kubelet registers the Node (simulated); then Karpenter's registration and initialization.
    admin = KubeClient(local.kube_server.api_client())
    node = wait_for(f"Node of {claim_name}", lambda: _node_of(admin, f"aws:///{zone}/{iid}"), 30)
    name = node["metadata"]["name"]
    claim_uid = local.kube_server.get("karpenter.sh/v1", "NodeClaim", claim_name)["metadata"]["uid"]

    def register() -> bool:
        current = admin.get(NODES, name)
        taints = [t for t in current["spec"].get("taints") or [] if t.get("key") != "karpenter.sh/unregistered"]
        patch = {
            "metadata": {
                "labels": {**labels, "karpenter.sh/registered": "true", "karpenter.sh/initialized": "true"},
                "finalizers": ["karpenter.sh/termination"],
                "ownerReferences": [
                    {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": claim_name, "uid": claim_uid}
                ],
                "resourceVersion": current["metadata"]["resourceVersion"],
            },
            "spec": {"taints": taints},
        }
        try:
            admin.patch(NODES, name, patch)
        except Exception:  # a 409: the kubelet or the node lifecycle controller wrote it meanwhile
            return False
        return True

    wait_for(f"Node {name} registered", register, 30)
    wait_for(f"Node {name} Ready", lambda: _ready(admin, name), 30)
    now = _stamp(datetime.now(UTC))
    conditions = [
        {"type": t, "status": "True", "reason": t, "message": "", "lastTransitionTime": now}
        for t in ("Launched", "Registered", "Initialized", "ConsistentStateFound", "Ready")
    ]
    admin.patch(NODE_CLAIMS, claim_name, {"status": {"nodeName": name, "conditions": conditions}}, subresource="status")
    admin.api_client.close()  # type: ignore[no-untyped-call]
    return Adopted(claim_name, iid, name, template)


def _node_of(kube: KubeClient, provider: str) -> dict[str, Any] | None:
    return next((n for n in kube.list_items(NODES) if n["spec"].get("providerID") == provider), None)


def _ready(kube: KubeClient, name: str) -> bool:
    node = kube.get(NODES, name)
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions") or [])
    return ready and not any(t.get("key") == "node.kubernetes.io/not-ready" for t in node["spec"].get("taints") or [])


def karpenter_deployment(namespace: str, replicas: int = 1) -> dict[str, Any]:
    """Karpenter's controller Deployment as its chart names and labels it (release ``karpenter``)."""
    selector = {"app.kubernetes.io/name": "karpenter", "app.kubernetes.io/instance": "karpenter"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "karpenter",
            "namespace": namespace,
            "labels": {**selector, "app.kubernetes.io/managed-by": "Helm", "app.kubernetes.io/version": "1.14.1"},
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": selector},
                "spec": {
                    "containers": [
                        {
                            "name": "controller",
                            "image": "public.ecr.aws/karpenter/controller:1.14.1",
                            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                        }
                    ]
                },
            },
        },
    }


def interrupt(local: LocalNodeflow, instance_id: str, detail_type: str, **detail: str) -> dict[str, Any]:
    """EC2's event ``detail_type`` about ``instance_id`` through the default bus to the interruption queue, and the
    interruption function's one message outcome (asserting the batch was acknowledged)."""
    local.send_aws_event(
        {
            "source": "aws.ec2",
            "detail-type": detail_type,
            "resources": [f"arn:aws:ec2:{local.region}:{local.world.account_id}:instance/{instance_id}"],
            "detail": {"instance-id": instance_id, **detail},
        }
    )
    handled = local.drain_interruption_queue()
    assert handled["batchItemFailures"] == []
    [message] = handled["result"]["messages"]
    return dict(message)
