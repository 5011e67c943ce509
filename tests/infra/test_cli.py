"""The pinned CDK CLI (package.json) reads the cloud assembly this app writes (no network, no bundling)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.infra.conftest import Synthesized

ROOT = Path(__file__).resolve().parents[2]
CDK = ROOT / "node_modules" / ".bin" / "cdk"


def test_cdk_json_runs_the_venv_python_with_telemetry_and_notices_off() -> None:
    settings = json.loads((ROOT / "cdk.json").read_text())
    assert settings["app"] == ".venv/bin/python app.py"
    assert settings["context"]["cli-telemetry"] is False
    assert settings["notices"] is False
    package = json.loads((ROOT / "package.json").read_text())
    version = package["devDependencies"]["aws-cdk"]
    assert version[0].isdigit(), "pin the CLI exactly"
    lock = json.loads((ROOT / "package-lock.json").read_text())
    assert lock["packages"]["node_modules/aws-cdk"]["version"] == version


@pytest.mark.skipif(not CDK.exists(), reason="the pinned CDK CLI is not installed (npm ci)")
def test_the_pinned_cli_reads_the_assembly(synthesized: Synthesized) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CDK_")}
    done = subprocess.run(
        [str(CDK), "ls", "--app", str(synthesized.outdir), "--no-notices"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split()) == sorted(synthesized.stack_name(w) for w in synthesized.stacks)
