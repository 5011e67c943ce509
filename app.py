"""CDK entry point: the nodeflow stack for the cluster the context names (``cdk synth -c clusterName=demo``).

Only wiring: the constructs are in infra/ (``infra.stack.build``). A missing or malformed context value stops
synth with one line naming the key.
"""

import os
import sys

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

import aws_cdk as cdk

from infra.config import ConfigError
from infra.stack import build

app = cdk.App()
try:
    build(app)
except ConfigError as exc:
    sys.exit(f"nodeflow: {exc}")
app.synth()
