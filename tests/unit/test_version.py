"""One release number everywhere a user or an operator looks for it: the CLI, the package metadata, the agent
(its code, its Deployment's label; its build-info metric: tests/functional/agent/test_lifecycle.py), the decision log's records and CHANGELOG.md. The stack's
tag and output are checked on the synthesized template (tests/infra/test_app.py)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from datetime import UTC, datetime
from pathlib import Path

import nodeflow_agent
from nodeflow import __version__
from nodeflow.governance.decisions import Decision, from_item, to_item
from nodeflow.install import VERSION_LABEL, StackOutputs, manifests

ROOT = Path(__file__).resolve().parents[2]


def test_python_m_nodeflow_version_prints_the_release() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "nodeflow", "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, f"nodeflow {__version__}\n", "")


def test_the_release_is_one_number() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__)
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"] == __version__
    assert nodeflow_agent.__version__ == __version__  # the agent's code is deployed by the same stack


def test_changelog_starts_at_this_release_and_license_is_apache() -> None:
    headings = re.findall(r"^## \[?([0-9][^\] ]*)\]?", (ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)
    assert headings[0] == __version__
    license_text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in license_text
    assert "Version 2.0, January 2004" in license_text


def test_the_agent_deployment_and_its_pods_are_labelled_with_the_release() -> None:
    docs = manifests(
        StackOutputs(
            stack="Nodeflow-demo",
            region="us-east-1",
            cluster_name="demo",
            webhook_url="https://example.lambda-url.us-east-1.on.aws/",
            agent_role_arn="arn:aws:iam::111122223333:role/agent",
            pod_identity=True,
        )
    )
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    assert deployment["metadata"]["labels"][VERSION_LABEL] == __version__
    assert deployment["spec"]["template"]["metadata"]["labels"][VERSION_LABEL] == __version__
    # the selector does not name the version: an upgrade rolls the same Deployment
    assert VERSION_LABEL not in deployment["spec"]["selector"]["matchLabels"]


def test_a_decision_record_names_the_release_that_made_it() -> None:
    at = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
    record = Decision(kind="provisioning", at=at, id="run-1", run="run", summary="1 NodeClaim")
    assert record.version == __version__
    back = from_item(to_item(record))
    assert back == record
    assert back.to_json()["version"] == __version__
    old = to_item(record)  # a record written before records named their release reads back with no version
    old["body"]["S"] = old["body"]["S"].replace(f',"version":"{__version__}"', "")
    assert from_item(old).version == ""
