"""CDK entry point: wires the nodeflow stack (infra/ holds the constructs)."""

import os

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

import aws_cdk as cdk

from infra.stack import NodeflowStack

app = cdk.App()
NodeflowStack(app, "Nodeflow")
app.synth()
