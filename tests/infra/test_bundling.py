"""The Lambda asset's local bundling (pip for arm64/CPython 3.12, no Docker), without the network: pip is faked."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
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
    monkeypatch.setattr(bundling, "lambda_python", lambda: (None, "not under test here"))  # no compileall
    out = tmp_path / "asset"
    out.mkdir()
    assert bundling.LocalPipBundling(["pydantic==2"]).try_bundle(str(out), None) is True
    (cmd,) = calls
    assert "--no-index" in cmd
    assert str(wheels) in cmd
    assert sorted(p.name for p in out.iterdir()) == ["nodeflow", "pydantic"]
    assert (out / "nodeflow" / "handlers" / "provisioner.py").is_file()
    assert not list(out.rglob("__pycache__"))
    # The in-cluster install's files, where the install function renders from them (nodeflow.install.BUNDLED_ROOT),
    # the same ones the template's SourceDigest was computed from.
    from nodeflow.install import source_digest, source_files

    bundled = out / "nodeflow" / "_install"
    assert source_files(bundled) == source_files(ROOT)
    assert source_digest(bundled) == source_digest(ROOT)
    assert (bundled / "agent" / "manifests" / "crds" / "karpenter.sh_nodepools.yaml").is_file()


def test_a_pip_failure_says_how_to_fix_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEFLOW_LAMBDA_WHEELS", str(tmp_path / "none"))
    monkeypatch.setattr(
        bundling.subprocess, "run", lambda cmd, **_: subprocess.CompletedProcess(cmd, 1, "", "No matching distribution")
    )
    with pytest.raises(
        RuntimeError, match=r"offline\? fill the wheelhouse once with `python -m infra.bundling download`"
    ):
        bundling.bundle(str(tmp_path), ["x==1"])


# Precompiled bytecode: the Lambda's /var/task is read-only, so without .pyc files in the asset every cold start
# compiles every module from source. These run the real compileall with a Python 3.12 (the runtime's version).
PY312, PY312_HOW = bundling.lambda_python()
needs_312 = pytest.mark.skipif(PY312 is None, reason=f"no Python 3.12 to precompile with: {PY312_HOW}")


def _fake_pip(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """pip is faked (no network): it installs one pure-Python package; every other command really runs."""
    if cmd[1:4] != ["-m", "pip", "install"]:
        return _REAL_RUN(cmd, **kwargs)
    pkg = Path(cmd[cmd.index("--target") + 1]) / "somedep"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("VALUE = {'a', 'b', 'c'}\n")
    return subprocess.CompletedProcess(cmd, 0, "", "")


_REAL_RUN = subprocess.run


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@needs_312
def test_the_bundle_ships_cpython_312_bytecode_for_every_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NODEFLOW_LAMBDA_WHEELS", str(tmp_path / "none"))
    monkeypatch.setattr(bundling.subprocess, "run", _fake_pip)
    out = tmp_path / "asset"
    out.mkdir()
    assert bundling.LocalPipBundling(["somedep==1"]).try_bundle(str(out), None) is True
    sources = sorted(out.rglob("*.py"))
    assert any(p.parts[-3:] == ("nodeflow", "handlers", "provisioner.py") for p in sources)
    missing = [p for p in sources if not (p.parent / "__pycache__" / f"{p.stem}.cpython-312.pyc").is_file()]
    assert not missing, f"modules without a cpython-312 .pyc: {missing[:5]}"
    pycs = list(out.rglob("*.pyc"))
    assert all(p.name.endswith(".cpython-312.pyc") for p in pycs)
    # unchecked-hash .pyc (PEP 552 flags word = 0b01): the runtime never compares it with the source's mtime
    assert {int.from_bytes(p.read_bytes()[4:8], "little") for p in pycs} == {0b01}


@needs_312
def test_precompiled_bytecode_is_the_same_on_every_run(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(ROOT / "functions", src, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (src / "sets.py").write_text("S = frozenset({'x', 'y', 'zz', 'w'})\n\ndef f(v):\n    return v in {'p', 'q', 'r'}\n")
    trees = []
    for n in (1, 2):
        copy = tmp_path / f"asset{n}"
        shutil.copytree(src, copy)
        done = bundling.compile_bytecode(str(copy), str(PY312))
        assert done.returncode == 0, done.stdout + done.stderr
        trees.append(_tree(copy))
    assert any(name.endswith(".pyc") for name in trees[0])
    assert trees[0] == trees[1]


@needs_312
def test_python_312_imports_the_bundled_modules_from_their_pyc_not_from_source(tmp_path: Path) -> None:
    asset = tmp_path / "asset"
    shutil.copytree(ROOT / "functions", asset, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    assert bundling.compile_bytecode(str(asset), str(PY312)).returncode == 0
    for source in asset.rglob("*.py"):  # the asset's mtimes do not match the .pyc: unchecked-hash ignores them
        os.utime(source, (1_000_000_000, 1_000_000_000))
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(asset), "PYTHONDONTWRITEBYTECODE": "1"}
    # modules that need only the standard library (the asset here has no third-party packages)
    code = "import nodeflow.api.quantity, nodeflow.api.duration, nodeflow.api.labels"
    done = _REAL_RUN([str(PY312), "-v", "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = [line for line in done.stderr.splitlines() if "code object from" in line and str(asset) in line]
    assert len(loaded) >= 4, loaded
    from_source = [line for line in loaded if not line.rstrip("'").endswith(".cpython-312.pyc")]
    assert not from_source, from_source
    assert not list(asset.rglob("__pycache__/*.cpython-312.pyc.*")), "nothing written next to the asset"


def test_without_python_312_the_bundle_ships_sources_and_warns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("NODEFLOW_LAMBDA_WHEELS", str(tmp_path / "none"))
    monkeypatch.setenv("NODEFLOW_LAMBDA_PYTHON", sys.executable)  # this venv's Python is not the runtime's
    monkeypatch.setattr(bundling.subprocess, "run", _fake_pip)
    if sys.version_info[:2] == (3, 12):
        pytest.skip("this interpreter is a 3.12: it would be used")
    out = tmp_path / "asset"
    out.mkdir()
    assert bundling.LocalPipBundling(["somedep==1"]).try_bundle(str(out), None) is True
    assert (out / "nodeflow" / "handlers" / "provisioner.py").is_file()
    assert not list(out.rglob("*.pyc"))
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if "WARNING" in line]
    assert len(warnings) == 1
    assert "ships no .pyc files" in warnings[0]
    assert f"NODEFLOW_LAMBDA_PYTHON={sys.executable} is Python 3.11, the runtime needs 3.12" in warnings[0]
