"""The CDK app synthesizes (an empty stack for now; later issues add the constructs)."""

from __future__ import annotations

import os

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

import aws_cdk as cdk
from aws_cdk.assertions import Template

from infra.stack import NodeflowStack


def test_stack_synthesizes() -> None:
    app = cdk.App(context={"aws:cdk:bundling-stacks": []})
    stack = NodeflowStack(app, "Nodeflow")
    template = Template.from_stack(stack).to_json()
    # The default synthesizer's bootstrap check is there, so `cdk deploy` works after `cdk bootstrap`.
    assert "BootstrapVersion" in template["Parameters"]
    assert app.synth().get_stack_by_name("Nodeflow").template == template
