"""The Lambda asset's local bundling (pip for arm64/CPython 3.12, no Docker), without the network: pip is faked."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from infra import bundling

ROOT = Path(__file__).resolve().parents[2]


def test_requirements_leave_out_what_the_runtime_has_and_add_the_tracer() -> None:
    reqs = bundling.lambda_requirements((ROOT / "requirements.txt").read_text())
    names = [bundling._project(r) for r in reqs]
    assert "boto3" not in names
    assert "botocore" not in names
    (powertools,) = [r for r in reqs if r.startswith("aws-lambda-powertools")]
    assert powertools.startswith("aws-lambda-powertools[tracer]==")
    assert all("==" in r for r in reqs), "runtime requirements are pinned"
    assert bundling.lambda_requirements("# c\nboto3==1\nfoo_bar[x]==2  # pinned\n\n") == ["foo_bar[x]==2"]


def test_pip_installs_binary_wheels_for_the_lambda_platform() -> None:
    cmd = bundling.pip_install_command("/out", "/r.txt", None)
    assert cmd[1:4] == ["-m", "pip", "install"]
    joined = " ".join(cmd)
    assert "--target /out" in joined
    assert "--platform manylinux2014_aarch64 --implementation cp --python-version 3.12 --only-binary=:all:" in joined
    assert "--no-index" not in cmd
    offline = bundling.pip_install_command("/out", "/r.txt", Path("/wheels"))
    assert offline[-4:] == ["--find-links", "/wheels", "-r", "/r.txt"]
    assert "--no-index" in offline
    assert bundling.LAMBDA_RUNTIME.name == "python3.12"
    assert bundling.LAMBDA_ARCHITECTURE.name == "arm64"


def test_bundle_prunes_runtime_packages_and_adds_the_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "pydantic-2-py3-none-any.whl").write_bytes(b"")
    monkeypatch.setenv("NODEFLOW_LAMBDA_WHEELS", str(wheels))
    calls: list[list[str]] = []

    def fake_pip(cmd: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        target = Path(cmd[cmd.index("--target") + 1])
        for name in ("pydantic", "botocore", "botocore-1.0.dist-info", "boto3", "s3transfer", "bin"):
            (target / name).mkdir(parents=True)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(bundling.subprocess, "run", fake_pip)
    out = tmp_path / "asset"
    out.mkdir()
    assert bundling.LocalPipBundling(["pydantic==2"]).try_bundle(str(out), None) is True
    (cmd,) = calls
    assert "--no-index" in cmd
    assert str(wheels) in cmd
    assert sorted(p.name for p in out.iterdir()) == ["nodeflow", "pydantic"]
    assert (out / "nodeflow" / "handlers" / "provisioner.py").is_file()
    assert not list(out.rglob("__pycache__"))


def test_a_pip_failure_says_how_to_fix_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEFLOW_LAMBDA_WHEELS", str(tmp_path / "none"))
    monkeypatch.setattr(
        bundling.subprocess, "run", lambda cmd, **_: subprocess.CompletedProcess(cmd, 1, "", "No matching distribution")
    )
    with pytest.raises(
        RuntimeError, match=r"offline\? fill the wheelhouse once with `python -m infra.bundling download`"
    ):
        bundling.bundle(str(tmp_path), ["x==1"])
