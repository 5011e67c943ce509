"""One synth per test run: the app with three stacks, the default one (only clusterName given), one with every
context key set and a small hmac one, checked by cdk-nag, bundling skipped. Tests read the cloud assembly's JSON
files."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CONTEXT: Mapping[str, Any] = {"clusterName": "demo"}
FULL_CONTEXT: Mapping[str, Any] = {
    "clusterName": "prod_east",
    "clusterEndpoint": "https://0123456789ABCDEF0123456789ABCDEF.gr7.us-east-1.eks.amazonaws.com",
    "clusterCa": base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").decode(),
    "kubernetesVersion": "1.33",
    "clusterDns": "10.100.0.10",
    "lambdaVpcId": "vpc-0123456789abcdef0",
    "lambdaSubnetIds": "subnet-0123456789abcdef0, subnet-0fedcba9876543210",
    "interruption": "false",
    "agentRoleArn": "arn:aws:iam::111122223333:role/prod-nodeflow-agent",
    "nodeRoleName": "prod-east-nodes",
    "createNodeRole": False,
    "eksAccessEntries": "false",
    "webhookAuth": "hmac",
    "webhookConcurrency": "3",
    "catalogSource": "offline",
    "alarmTopicArn": "arn:aws:sns:us-east-1:111122223333:nodeflow-alarms",
    "featureGates": "NodeRepair=true",
    "consolidationReplaceBarK": "0",
}
# hmac mode with the in-cluster install: the installer copies the agent's secret into the cluster.
HMAC_CONTEXT: Mapping[str, Any] = {"clusterName": "hmac", "webhookAuth": "hmac", "installWaitSeconds": "0"}


@dataclass
class Synthesized:
    outdir: Path
    stacks: dict[str, Any]  # "default" | "full" | "hmac" -> NodeflowStack
    error: str | None  # synth failure (cdk-nag findings), else None
    _templates: dict[str, dict[str, Any]] = field(default_factory=dict)

    def stack_name(self, which: str) -> str:
        return str(self.stacks[which].stack_name)

    def template(self, which: str = "default") -> dict[str, Any]:
        if which not in self._templates:
            path = self.outdir / f"{self.stack_name(which)}.template.json"
            self._templates[which] = json.loads(path.read_text())
        return self._templates[which]

    def resources(self, which: str = "default", type_: str | None = None) -> dict[str, dict[str, Any]]:
        res = self.template(which)["Resources"]
        return {k: v for k, v in res.items() if type_ is None or v["Type"] == type_}

    def assets(self, which: str = "default") -> dict[str, Any]:
        return json.loads((self.outdir / f"{self.stack_name(which)}.assets.json").read_text())  # type: ignore[no-any-return]

    def validation_report(self) -> dict[str, Any]:
        return json.loads((self.outdir / "validation-report.json").read_text())  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    import aws_cdk as cdk

    from infra.config import NodeflowConfig
    from infra.nag import add_checks
    from infra.stack import NodeflowStack

    outdir = tmp_path_factory.mktemp("cdk.out")
    # cdk.json's context (feature flags, ...) as the CLI passes it, and no bundling.
    context = json.loads((ROOT / "cdk.json").read_text()).get("context", {})
    app = cdk.App(outdir=str(outdir), context={**context, "aws:cdk:bundling-stacks": []})
    stacks = {}
    for which, context in (("default", DEFAULT_CONTEXT), ("full", FULL_CONTEXT), ("hmac", HMAC_CONTEXT)):
        config = NodeflowConfig.from_mapping(context)
        stacks[which] = NodeflowStack(app, config.stack_name, config=config)
    add_checks(app)
    error: str | None = None
    try:
        app.synth()
    except Exception as exc:  # cdk-nag findings fail synth; the report is still written
        error = str(exc)
    return Synthesized(outdir=outdir, stacks=stacks, error=error)
