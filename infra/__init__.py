"""The nodeflow CDK app's constructs, one module per concern (app.py wires them through ``stack.py``)."""

import os

# Node 20 prints an end-of-life banner on every jsii call unless told not to; set it before aws_cdk is imported.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
