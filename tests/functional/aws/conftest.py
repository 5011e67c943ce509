"""Moto-backed AWS world for the EC2 adapter tests: a VPC with tagged subnets in 3 AZs,
security groups, an IAM role, images (with controlled architecture and creation date) and
the public SSM AMI parameters, seeded through moto's backend (put_parameter refuses /aws/).
The backend helpers are shared with the sandbox (``sandbox.aws``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from moto import mock_aws

from sandbox.aws import register_image, seed_ssm_parameter

REGION = "us-east-1"
CLUSTER = "demo"
K8S = "1.31"
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")

__all__ = ["CLUSTER", "K8S", "REGION", "ZONES", "World", "seed_ssm_parameter", "world"]


@dataclass
class World:
    ec2: Any
    ssm: Any
    iam: Any
    vpc_id: str
    subnets: dict[str, str]  # zone -> tagged subnet id
    other_subnet: str  # untagged, us-east-1a
    sg_tagged: str
    sg_named: str
    role: str
    images: dict[str, str] = field(default_factory=dict)  # label -> ami id

    def image(
        self, label: str, *, arch: str = "x86_64", created: str = "2024-01-01", tags: dict[str, str] | None = None
    ) -> str:
        image_id = register_image(
            self.ec2,
            f"{label}-image",
            description=label,
            architecture=arch,
            created=datetime.fromisoformat(created).replace(tzinfo=UTC),
            tags=tags,
            region=REGION,
        )
        self.images[label] = image_id
        return image_id


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> Any:
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "MOTO_EC2_LOAD_DEFAULT_AMIS": "false",
    }.items():
        monkeypatch.setenv(key, value)
    with mock_aws():
        ec2 = boto3.client("ec2", region_name=REGION)
        ssm = boto3.client("ssm", region_name=REGION)
        iam = boto3.client("iam", region_name=REGION)
        vpc_id = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        subnets = {}
        for i, zone in enumerate(ZONES):
            sid = ec2.create_subnet(VpcId=vpc_id, CidrBlock=f"10.0.{i}.0/24", AvailabilityZone=zone)["Subnet"][
                "SubnetId"
            ]
            ec2.create_tags(
                Resources=[sid],
                Tags=[{"Key": "karpenter.sh/discovery", "Value": CLUSTER}, {"Key": "tier", "Value": "private"}],
            )
            subnets[zone] = sid
        other = ec2.create_subnet(VpcId=vpc_id, CidrBlock="10.0.100.0/22", AvailabilityZone="us-east-1a")["Subnet"][
            "SubnetId"
        ]
        ec2.create_tags(Resources=[other], Tags=[{"Key": "tier", "Value": "public"}])
        sg_tagged = ec2.create_security_group(GroupName="nodes", Description="nodes", VpcId=vpc_id)["GroupId"]
        ec2.create_tags(Resources=[sg_tagged], Tags=[{"Key": "karpenter.sh/discovery", "Value": CLUSTER}])
        sg_named = ec2.create_security_group(GroupName="extra-sg", Description="extra", VpcId=vpc_id)["GroupId"]
        iam.create_role(
            RoleName="KarpenterNodeRole-demo",
            AssumeRolePolicyDocument=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}
                    ],
                }
            ),
        )
        yield World(
            ec2=ec2,
            ssm=ssm,
            iam=iam,
            vpc_id=vpc_id,
            subnets=subnets,
            other_subnet=other,
            sg_tagged=sg_tagged,
            sg_named=sg_named,
            role="KarpenterNodeRole-demo",
        )
