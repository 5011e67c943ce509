"""``python -m nodeflow`` as a process (``nodeflow/__main__.py``: collector off, no interpreter teardown) prints,
reports and exits exactly as ``sys.exit(main())`` did, and still runs the ``atexit`` hooks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS = ROOT / "functions"

POOL = """\
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m]}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
"""

# The entry point as it was: what ``python -m nodeflow`` must still do, byte for byte.
REFERENCE = "import sys\nfrom nodeflow.cli import main\nsys.exit(main())\n"

HOOK = "import atexit, os\natexit.register(lambda: open(os.environ['NODEFLOW_TEST_ATEXIT'], 'w').write('ran'))\n"


def _cluster(root: Path, bad: bool = False, pods: int = 30) -> Path:
    root.mkdir()
    (root / "pool.yaml").write_text(POOL)
    manifests = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"web-{i}", "namespace": "shop", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": "1"}}}]},
        }
        for i in range(pods)
    ]
    if bad:
        manifests[3]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    (root / "pods.yaml").write_text(yaml.safe_dump_all(manifests, sort_keys=False))
    return root


def _run(args: list[str], tmp_path: Path, reference: bool) -> tuple[int, str, str, bool]:
    hooks = tmp_path / "hooks"
    hooks.mkdir(exist_ok=True)
    (hooks / "sitecustomize.py").write_text(HOOK)
    marker = tmp_path / ("atexit-reference" if reference else "atexit-module")
    marker.unlink(missing_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(FUNCTIONS), str(hooks)]),
        "NODEFLOW_TEST_ATEXIT": str(marker),
    }
    command = [sys.executable, "-c", REFERENCE, *args] if reference else [sys.executable, "-m", "nodeflow", *args]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False, timeout=300)
    return done.returncode, done.stdout, done.stderr, marker.exists()


@pytest.mark.parametrize(
    ("args", "bad", "code"),
    [
        (["plan", "-f", "{root}"], False, 0),
        (["plan", "-f", "{root}", "-o", "json"], False, 0),
        (["plan", "-f", "{root}"], True, 2),
        (["plan", "-f", "{root}/missing.yaml"], False, 2),
    ],
)
def test_the_process_prints_and_exits_as_before(tmp_path: Path, args: list[str], bad: bool, code: int) -> None:
    root = _cluster(tmp_path / "cluster", bad=bad)
    argv = [arg.format(root=root) for arg in args]
    module = _run(argv, tmp_path, reference=False)
    reference = _run(argv, tmp_path, reference=True)
    assert module == reference
    assert module[0] == code
    assert module[3], "the atexit hooks ran"
    if code == 0:
        assert "web" in module[1] or "general" in module[1]


EXAMPLES = ROOT / "examples"
CLOSED_EARLY = [
    ["plan", "-f", "{demo}"],
    ["plan", "-f", "{demo}", "-o", "json"],
    ["explain", "-f", "{demo}", "ml/notebook"],
    ["disrupt", "--dry-run", "-f", "{disruption}", "--now", "2026-11-21T12:00:00Z"],
    ["disrupt", "--dry-run", "-f", "{disruption}", "-o", "json", "--now", "2026-11-21T12:00:00Z"],
    ["governance", "-f", "{governance}", "--now", "2026-11-21T12:00:00Z"],
]


def _closed_early(args: list[str], read: int, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run ``python -m nodeflow ARGS`` with stdout a pipe of one page whose reader takes ``read`` bytes (none: it
    is closed before the process starts) and then closes it, as ``| head`` does; the exit code and stderr."""
    import fcntl

    argv = [
        a.format(demo=EXAMPLES / "demo", disruption=EXAMPLES / "disruption", governance=EXAMPLES / "governance")
        for a in args
    ]
    env = {**os.environ, **(env or {}), "PYTHONPATH": str(FUNCTIONS)}
    reader, writer = os.pipe()
    fcntl.fcntl(writer, fcntl.F_SETPIPE_SZ, 4096)  # a small pipe: the output cannot all fit before the close
    if not read:
        os.close(reader)
    with subprocess.Popen(
        [sys.executable, "-m", "nodeflow", *argv], stdout=writer, stderr=subprocess.PIPE, env=env, text=True
    ) as proc:
        os.close(writer)
        if read:
            assert len(os.read(reader, read)) > 0
            os.close(reader)
        _, stderr = proc.communicate(timeout=120)
    return proc.returncode, stderr


def _assert_ended_quietly(code: int, stderr: str) -> None:
    for noise in ("Traceback", "Exception ignored", "BrokenPipeError"):
        assert noise not in stderr, stderr
    assert code == 141, stderr


@pytest.mark.parametrize(
    "args", CLOSED_EARLY, ids=["plan", "plan-json", "explain", "disrupt", "disrupt-json", "governance"]
)
def test_a_closed_stdout_ends_every_command_quietly(args: list[str]) -> None:
    """stdout closed before the command writes: no traceback, no "Exception ignored" at shutdown, status 141."""
    code, stderr = _closed_early(args, read=0)
    _assert_ended_quietly(code, stderr)


def test_a_reader_that_stops_after_the_first_bytes_ends_plan_quietly(tmp_path: Path) -> None:
    """``plan -o json | head -c 100`` over 300 pods: the write fails while the command runs, not at the flush (the
    output, ~19 KB, is larger than the 4 KB pipe, so the command is still writing when the reader goes; over 30 pods
    it was 2.8 KB, written whole before the reader closed whenever the reader was slower, and the command exited 0)."""
    root = _cluster(tmp_path / "cluster", pods=300)
    code, stderr = _closed_early(["plan", "-f", str(root), "-o", "json"], read=100)
    _assert_ended_quietly(code, stderr)


@pytest.fixture
def aws_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """A moto server (127.0.0.1) with a stack whose outputs install-manifests and decisions read (an empty log):
    the environment a ``python -m nodeflow`` child process reaches it with."""
    import boto3
    from moto.server import ThreadedMotoServer

    from sandbox.aws import create_decision_table
    from tests.functional.test_install_manifests import template

    creds = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing"}
    for key, value in creds.items():
        monkeypatch.setenv(key, value)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{server.get_host_and_port()[1]}"
        body = json.loads(template())
        body["Outputs"]["DecisionTableName"] = {"Value": "decisions"}
        cfn = boto3.client("cloudformation", region_name="eu-west-1", endpoint_url=endpoint)
        cfn.create_stack(StackName="Nodeflow-shop", TemplateBody=json.dumps(body))
        create_decision_table(lambda s: boto3.client(s, region_name="eu-west-1", endpoint_url=endpoint), "decisions")
        yield {
            **creds,
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_DEFAULT_REGION": "eu-west-1",
            "AWS_CONFIG_FILE": "/nonexistent",
        }
    finally:
        server.stop()


@pytest.mark.filterwarnings("ignore::UserWarning:moto.cloudformation.parsing")
def test_a_closed_stdout_ends_the_aws_commands_quietly(aws_server: dict[str, str], tmp_path: Path) -> None:
    for args in (
        ["install-manifests", "--stack", "Nodeflow-shop", "-o", str(tmp_path / "install")],
        ["decisions", "--stack", "Nodeflow-shop"],
    ):
        code, stderr = _closed_early(args, read=0, env=aws_server)
        _assert_ended_quietly(code, stderr)
