"""install-manifests reads what the synthesized stack really outputs: the output names, the HMAC secret output
(hmac mode) and the EKS Pod Identity association (agent role made by the stack), through moto's CloudFormation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeflow.install import read_stack, render
from tests.infra.conftest import Synthesized

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:moto.cloudformation.parsing")


def _as_deployed(template: dict[str, Any]) -> str:
    """The synthesized template's outputs (values made literal, as CloudFormation resolves them) and its Pod
    Identity associations (moto keeps them in the template it returns), on a resource moto deploys."""
    kept = {k: r for k, r in template["Resources"].items() if r["Type"] == "AWS::EKS::PodIdentityAssociation"}
    outputs = {
        key: {"Value": "https://abc.lambda-url.us-east-1.on.aws/" if key == "WebhookUrl" else f"value-of-{key}"}
        for key in template["Outputs"]
    }
    return json.dumps({"Resources": {"Queue": {"Type": "AWS::SQS::Queue"}, **kept}, "Outputs": outputs})


@pytest.mark.parametrize(("which", "pod_identity", "auth"), [("default", True, "iam"), ("full", False, "hmac")])
def test_install_manifests_reads_the_synthesized_outputs(
    synthesized: Synthesized,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    which: str,
    pod_identity: bool,
    auth: str,
) -> None:
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(key, value)
    import boto3
    from moto import mock_aws

    with mock_aws():
        cfn = boto3.client("cloudformation", region_name="us-east-1")
        name = synthesized.stack_name(which)
        cfn.create_stack(StackName=name, TemplateBody=_as_deployed(synthesized.template(which)))
        outputs = read_stack(cfn, name, "us-east-1")
    assert outputs.cluster_name == "value-of-ClusterName"
    assert outputs.agent_role_arn == "value-of-AgentRoleArn"
    assert (outputs.pod_identity, outputs.auth_mode) == (pod_identity, auth)
    render(outputs, tmp_path / "out")
    account = yaml.safe_load((tmp_path / "out" / "agent" / "10-serviceaccount.yaml").read_text())
    annotation = (account["metadata"].get("annotations") or {}).get("eks.amazonaws.com/role-arn")
    assert annotation == (None if pod_identity else "value-of-AgentRoleArn")
