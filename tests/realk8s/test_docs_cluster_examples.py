"""Every ``<!-- runnable: cluster -->`` console block of README.md and docs/ prints, on the real control plane, what
the page shows. Its ``$`` commands run in order, as a reader types them, from the repository root: ``kubectl`` is
the control plane's (its server's version), else the machine's; ``python`` is this interpreter with this checkout;
``KUBECONFIG`` is the cluster admin's and the AWS SDK reaches a moto server (``AWS_ENDPOINT_URL``). Each command
must exit 0.

Options of the marker (``<!-- runnable: cluster; after: ...; normalized: ... -->``):

- ``after: provisioning PATH``: first the manifests under PATH are created in the cluster (with their status;
  pending pods held from kube-scheduler) and the provisioner runs once on them, with the real clock, writing its
  decision log to the table of the moto stack ``Nodeflow-shop`` (what ``python -m nodeflow decisions --stack
  Nodeflow-shop`` reads).
- ``normalized: RULE, ...``: only what the named rules of ``tests.docs.examples.NORMALIZE`` cover (kubectl's AGE
  column, times) is replaced by a placeholder, in the page's text and in the output alike.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from sandbox.aws import MotoServer, create_decision_table, moto_server, register_decision_log_stack
from sandbox.controlplane import ControlPlane
from sandbox.controlplane.binaries import find_binaries
from sandbox.controlplane.facade import RealKubeAPI
from tests.docs.examples import ROOT, Block, blocks, normalize
from tests.realk8s.workloads import held

BLOCKS = [b for b in blocks() if b.kind == "cluster"]
REGION = "us-east-1"
CLUSTER = "shop"  # the stack Nodeflow-shop
DECISION_TABLE = f"nodeflow-{CLUSTER}-decisions"
BATCH = "0123456789abcdef"  # the provisioner run's batch id: its NodeClaims' names derive from it and their pods


def _kubectl() -> str:
    found = find_binaries().kubectl or shutil.which("kubectl")
    assert found, "no kubectl: neither with the control plane's binaries nor on PATH"
    return str(found)


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    with moto_server() as server:
        yield server


def _seed(kube: RealKubeAPI, path: Path) -> None:
    """The manifests under ``path``, namespaces first, with their status; a pod not bound to a node is held."""
    files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
    docs = [d for f in files for d in yaml.safe_load_all(f.read_text()) if d]
    for doc in sorted(docs, key=lambda d: d["kind"] != "Namespace"):
        pending = doc["kind"] == "Pod" and not doc["spec"].get("nodeName")
        kube.create(held(doc) if pending else doc)


def _provision(kube: RealKubeAPI, moto: MotoServer) -> None:
    """One provisioner run on the cluster, its decision log written to the moto stack's table."""
    from nodeflow.aws.decision_log import DecisionLog
    from nodeflow.catalog.offline import load_offline
    from nodeflow.kube.client import KubeClient
    from nodeflow.kube.events import EventRecorder
    from nodeflow.lifecycle.provisioner import ProvisionDeps, provision

    clients = moto.clients(REGION)
    create_decision_table(clients, DECISION_TABLE, REGION)
    register_decision_log_stack(clients, CLUSTER, DECISION_TABLE, REGION)
    problems: list[tuple[str, dict[str, Any]]] = []
    log = DecisionLog(clients.dynamodb, DECISION_TABLE, log=lambda m, e: problems.append((m, e)))
    client = KubeClient(kube.api_client())
    try:
        provision(
            ProvisionDeps(
                kube=client,
                catalog=load_offline(REGION),
                unavailable=lambda _now: frozenset(),
                start_launch=lambda _name: True,
                recorder=EventRecorder(client),
                now=lambda: datetime.now(UTC),
                decisions=log,
            ),
            BATCH,
        )
    finally:
        client.api_client.close()  # type: ignore[no-untyped-call]
    assert (problems, log.failed, log.late) == ([], 0, 0)


def _run(command: str, env: dict[str, str]) -> str:
    argv = shlex.split(command, comments=True)  # a `# ...` after the command is the page's note to the reader
    argv[0] = {"kubectl": _kubectl(), "python": sys.executable}.get(argv[0], argv[0])
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, f"`{command}` exited {done.returncode}: {done.stderr}"
    return done.stdout


def _commands(text: str) -> list[str]:
    return [line[2:].rstrip("\n") for line in text.splitlines(keepends=True) if line.startswith("$ ")]


def test_the_docs_have_cluster_examples() -> None:
    assert any("kubectl" in b.text for b in BLOCKS)
    assert any("after" in b.options for b in BLOCKS)


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.where)
def test_a_cluster_example_prints_what_the_page_shows(
    block: Block, real_kube: RealKubeAPI, control_plane: ControlPlane, moto: MotoServer
) -> None:
    moto.reset()
    after = block.options.get("after", "")
    if after:
        what, _, path = after.partition(" ")
        assert what == "provisioning", f"{block.where}: after: provisioning PATH"
        _seed(real_kube, ROOT / path)
        _provision(real_kube, moto)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and k != "KUBECONFIG"}
    env.update(
        PYTHONPATH=os.pathsep.join(str(ROOT / p) for p in ("functions", ".", "agent")),
        COLUMNS="100",
        KUBECONFIG=str(control_plane.kubeconfig),
        AWS_ENDPOINT_URL=moto.url,
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION=REGION,
        AWS_CONFIG_FILE="/nonexistent",
        AWS_SHARED_CREDENTIALS_FILE="/nonexistent",
    )
    printed = "".join(f"$ {command}\n{_run(command, env)}" for command in _commands(block.text))
    rules = block.options.get("normalized", "")
    assert normalize(printed, rules) == normalize(block.text, rules), f"{block.where} prints:\n{printed}"
