"""``python -m nodeflow`` as a process (``nodeflow/__main__.py``: collector off, no interpreter teardown) prints,
reports and exits exactly as ``sys.exit(main())`` did, and still runs the ``atexit`` hooks."""

from __future__ import annotations

import os
import subprocess
import sys
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


def _cluster(root: Path, bad: bool = False) -> Path:
    root.mkdir()
    (root / "pool.yaml").write_text(POOL)
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"web-{i}", "namespace": "shop", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": "1"}}}]},
        }
        for i in range(30)
    ]
    if bad:
        pods[3]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    (root / "pods.yaml").write_text(yaml.safe_dump_all(pods, sort_keys=False))
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
