"""Configuration: a missing or malformed context value fails synth with a message naming the key."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from infra.config import CONTEXT_KEYS, ConfigError, NodeflowConfig

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("context", "key"),
    [
        ({}, "clusterName"),
        ({"clusterName": ""}, "clusterName"),
        ({"clusterName": "-bad"}, "clusterName"),
        ({"clusterName": "x" * 101}, "clusterName"),
        ({"clusterName": 7}, "clusterName"),
        ({"clusterName": "c", "clusterEndpoint": "http://insecure"}, "clusterEndpoint"),
        ({"clusterName": "c", "clusterEndpoint": "https://k8s.example.com"}, "clusterCa"),
        ({"clusterName": "c", "clusterCa": "TUlJQg=="}, "clusterEndpoint"),
        ({"clusterName": "c", "clusterEndpoint": "https://k8s.example.com", "clusterCa": "not base64!"}, "clusterCa"),
        ({"clusterName": "c", "kubernetesVersion": "v1.33"}, "kubernetesVersion"),
        ({"clusterName": "c", "clusterDns": "10.0.0.300"}, "clusterDns"),
        ({"clusterName": "c", "lambdaVpcId": "vpc-123"}, "lambdaVpcId"),
        ({"clusterName": "c", "lambdaVpcId": "vpc-12345678"}, "lambdaSubnetIds"),
        ({"clusterName": "c", "lambdaSubnetIds": "subnet-12345678"}, "lambdaVpcId"),
        ({"clusterName": "c", "lambdaVpcId": "vpc-12345678", "lambdaSubnetIds": "subnet-1,x"}, "lambdaSubnetIds"),
        ({"clusterName": "c", "lambdaVpcId": "vpc-12345678", "lambdaSubnetIds": {"a": 1}}, "lambdaSubnetIds"),
        (
            {"clusterName": "c", "lambdaVpcId": "vpc-12345678", "lambdaSubnetIds": ["subnet-12345678"] * 2},
            "lambdaSubnetIds",
        ),
        ({"clusterName": "c", "interruption": "maybe"}, "interruption"),
        ({"clusterName": "c", "agentRoleArn": "role/agent"}, "agentRoleArn"),
        ({"clusterName": "c", "agentRoleArn": "arn:aws:iam::123:user/agent"}, "agentRoleArn"),
        ({"clusterName": "c", "nodeRoleName": "has space"}, "nodeRoleName"),
        ({"clusterName": "c" * 50}, "nodeRoleName"),  # KarpenterNodeRole-<50 chars> is over IAM's 64
        ({"clusterName": "c", "createNodeRole": "nope"}, "createNodeRole"),
        ({"clusterName": "c", "eksAccessEntries": 2}, "eksAccessEntries"),
        ({"clusterName": "c", "webhookAuth": "basic"}, "webhookAuth"),
        ({"clusterName": "c", "webhookConcurrency": "0"}, "webhookConcurrency"),
        ({"clusterName": "c", "webhookConcurrency": 1001}, "webhookConcurrency"),
        ({"clusterName": "c", "webhookConcurrency": "ten"}, "webhookConcurrency"),
        ({"clusterName": "c", "webhookConcurrency": "-5"}, "webhookConcurrency"),
        ({"clusterName": "c", "webhookConcurrency": 2.5}, "webhookConcurrency"),
        ({"clusterName": "c", "webhookConcurrency": True}, "webhookConcurrency"),
        ({"clusterName": "c", "catalogSource": "s3"}, "catalogSource"),
        ({"clusterName": "c", "alarmTopicArn": "arn:aws:sqs:us-east-1:123456789012:q"}, "alarmTopicArn"),
        ({"clusterName": "c", "featureGates": "NodeRepair"}, "featureGates"),
        ({"clusterName": "c", "featureGates": "NodeRepair=yes"}, "featureGates"),
        ({"clusterName": "c", "featureGates": "NodeRepair=true;StaticCapacity=true"}, "featureGates"),
        ({"clusterName": "c", "consolidationReplaceBarK": "-1"}, "consolidationReplaceBarK"),
        ({"clusterName": "c", "consolidationReplaceBarK": 101}, "consolidationReplaceBarK"),
        ({"clusterName": "c", "consolidationReplaceBarK": "strict"}, "consolidationReplaceBarK"),
        ({"clusterName": "c", "consolidationReplaceBarK": True}, "consolidationReplaceBarK"),
    ],
)
def test_bad_context_names_the_key(context: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError, match=rf"^context {key}: "):
        NodeflowConfig.from_mapping(context)


def test_defaults_with_only_the_cluster_name() -> None:
    config = NodeflowConfig.from_mapping({"clusterName": "demo"})
    assert config == NodeflowConfig(cluster_name="demo", node_role_name="KarpenterNodeRole-demo")
    assert config.read_cluster_from_eks
    assert (config.interruption, config.create_node_role, config.eks_access_entries) == (True, True, True)
    assert (config.webhook_auth, config.catalog_source) == ("iam", "aws")
    assert config.webhook_concurrency == 10
    assert config.stack_name == "Nodeflow-demo"


def test_cli_strings_and_json_values_read_alike() -> None:
    from_cli = NodeflowConfig.from_mapping(
        {
            "clusterName": "c",
            "interruption": "False",
            "lambdaVpcId": "vpc-12345678",
            "lambdaSubnetIds": "subnet-12345678, subnet-87654321",
        }
    )
    from_json = NodeflowConfig.from_mapping(
        {
            "clusterName": "c",
            "interruption": False,
            "lambdaVpcId": "vpc-12345678",
            "lambdaSubnetIds": ["subnet-12345678", "subnet-87654321"],
        }
    )
    assert from_cli == from_json
    assert from_cli.lambda_subnet_ids == ("subnet-12345678", "subnet-87654321")


def test_a_resource_name_over_the_limit_names_the_cluster() -> None:
    config = NodeflowConfig.from_mapping({"clusterName": "c" * 60, "nodeRoleName": "nodes"})
    with pytest.raises(ConfigError, match=r"^context clusterName: too long for the resource name"):
        config.name("provisioner")


def test_context_is_read_from_the_construct_tree() -> None:
    import aws_cdk as cdk

    app = cdk.App(context={"clusterName": "tree", "webhookAuth": "hmac"})
    config = NodeflowConfig.from_node(app.node)
    assert (config.cluster_name, config.webhook_auth) == ("tree", "hmac")
    assert set(CONTEXT_KEYS) >= {"clusterName", "clusterEndpoint", "clusterCa", "lambdaVpcId", "lambdaSubnetIds"}


def test_app_py_without_a_cluster_name_exits_naming_the_key(tmp_path: Path) -> None:
    """What `cdk synth` shows: app.py runs with the CLI's context (here: none) and stops before synth."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CDK_")}
    env["CDK_OUTDIR"] = str(tmp_path)
    env["CDK_CONTEXT_JSON"] = "{}"
    done = subprocess.run(
        [sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "nodeflow: context clusterName: required (the EKS cluster's name), e.g. -c clusterName=demo"
    )
    assert list(tmp_path.iterdir()) == []


def test_webhook_concurrency_from_the_cli_or_cdk_json() -> None:
    assert NodeflowConfig.from_mapping({"clusterName": "c", "webhookConcurrency": "25"}).webhook_concurrency == 25
    assert NodeflowConfig.from_mapping({"clusterName": "c", "webhookConcurrency": 1}).webhook_concurrency == 1
    assert NodeflowConfig.from_mapping({"clusterName": "c", "webhookConcurrency": ""}).webhook_concurrency == 10
    with pytest.raises(ConfigError, match=r"^context webhookConcurrency: expected a whole number from 1 to 1000"):
        NodeflowConfig.from_mapping({"clusterName": "c", "webhookConcurrency": "0"})


def test_the_replace_bar_is_unset_by_default_and_read_as_a_number() -> None:
    assert NodeflowConfig.from_mapping({"clusterName": "c"}).replace_bar_k is None
    assert NodeflowConfig.from_mapping({"clusterName": "c", "consolidationReplaceBarK": "0"}).replace_bar_k == 0.0
    assert NodeflowConfig.from_mapping({"clusterName": "c", "consolidationReplaceBarK": 2.5}).replace_bar_k == 2.5
