"""The Lambda code asset: functions/ plus the runtime requirements, bundled without Docker.

Local bundling runs pip for the Lambda platform (arm64, CPython 3.12, binary wheels only) into the asset
directory, then copies functions/ next to the packages. boto3/botocore/s3transfer are left out: the Lambda
runtime has them. aws-lambda-powertools is installed with its ``tracer`` extra (aws-xray-sdk), which Tracer
needs when tracing is on.

Offline synth: ``python -m infra.bundling download`` fills a wheelhouse (``.venv/lambda-wheels`` unless
``NODEFLOW_LAMBDA_WHEELS`` names another) from the registry once; while it exists, bundling installs from it
with ``--no-index``, so ``cdk synth`` / ``cdk deploy`` need no network. Without it, pip uses the index.

Bytecode: the Lambda runtime cannot write ``__pycache__`` (/var/task is read-only), so a bundle without ``.pyc``
files compiles every module from source at every cold start (measured 3-4x the import time). Bundling therefore
precompiles the whole asset with a CPython 3.12 interpreter (the runtime's version: ``.pyc`` files are
version-specific) using ``compileall --invalidation-mode unchecked-hash``: the ``.pyc`` carries the source hash
and is used without checking timestamps (the asset's zip mtimes do not matter), ``PYTHONHASHSEED=0`` and one
process keep the bytes identical from run to run. The interpreter is ``NODEFLOW_LAMBDA_PYTHON`` if set, else this
one if it is 3.12, else ``python3.12`` on PATH or under pyenv (~/.pyenv/versions/3.12.*); with none, the bundle
ships sources only and one warning says so (synth never fails for it).

The in-cluster install's files (``nodeflow.install.source_files``: agent/manifests, the agent's code,
infra/cluster/controller-rbac.yaml) live outside functions/; bundling copies them into ``nodeflow/_install/`` with
the same layout, where the install function renders from them, and their digest is part of the asset's hash (so a
changed manifest is a new asset, as a changed requirement is).

Tests skip bundling (context ``aws:cdk:bundling-stacks: []``): the asset is then functions/ as is.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import jsii
from aws_cdk import aws_lambda as lambda_

__all__ = [
    "FUNCTIONS_DIR",
    "LAMBDA_ARCHITECTURE",
    "LAMBDA_RUNTIME",
    "PIP_PLATFORM_ARGS",
    "RUNTIME_PROVIDED",
    "code_asset",
    "compile_bytecode",
    "lambda_python",
    "lambda_requirements",
    "wheelhouse",
]

ROOT = Path(__file__).resolve().parent.parent
FUNCTIONS_DIR = ROOT / "functions"
REQUIREMENTS = ROOT / "requirements.txt"
LAMBDA_RUNTIME = lambda_.Runtime.PYTHON_3_12
LAMBDA_ARCHITECTURE = lambda_.Architecture.ARM_64
PIP_PLATFORM_ARGS: tuple[str, ...] = (
    "--platform",
    "manylinux2014_aarch64",
    "--implementation",
    "cp",
    "--python-version",
    "3.12",
    "--only-binary=:all:",
)
RUNTIME_PROVIDED: tuple[str, ...] = ("boto3", "botocore", "s3transfer")
EXTRAS: dict[str, str] = {"aws-lambda-powertools": "tracer"}
ASSET_EXCLUDE: tuple[str, ...] = ("**/__pycache__", "**/*.pyc", "**/.mypy_cache", "**/.pytest_cache")
RUNTIME_PYTHON_VERSION: tuple[int, int] = (3, 12)
# Where the bundled modules live in the Lambda (recorded as the .pyc files' source paths, the same every run).
TASK_ROOT = "/var/task"
COMPILEALL_ARGS: tuple[str, ...] = ("-m", "compileall", "-q", "--invalidation-mode", "unchecked-hash", "-d", TASK_ROOT)


def _project(line: str) -> str:
    """The distribution name of a requirement line (``Name[extra]==1.0`` -> ``name``)."""
    for sep in ("[", "=", "<", ">", "~", "!", ";", " "):
        line = line.split(sep, 1)[0]
    return line.strip().lower().replace("_", "-")


def lambda_requirements(text: str) -> list[str]:
    """requirements.txt lines for the Lambda package: runtime-provided packages dropped, extras added."""
    out: list[str] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name = _project(line)
        if name in RUNTIME_PROVIDED:
            continue
        extra = EXTRAS.get(name)
        if extra and "[" not in line.split("=", 1)[0]:
            head, sep, tail = line.partition("==")
            line = f"{head}[{extra}]{sep}{tail}"
        out.append(line)
    return out


def wheelhouse() -> Path:
    """Where ``download`` puts the Lambda platform's wheels (and bundling looks for them)."""
    return Path(os.environ.get("NODEFLOW_LAMBDA_WHEELS") or ROOT / ".venv" / "lambda-wheels")


def _has_wheels(path: Path) -> bool:
    return path.is_dir() and any(path.glob("*.whl"))


def pip_install_command(target: str, requirements_file: str, wheels: Path | None) -> list[str]:
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-compile", "--disable-pip-version-check"]
    command += ["--target", target, *PIP_PLATFORM_ARGS]
    if wheels is not None:
        command += ["--no-index", "--find-links", str(wheels)]
    return [*command, "-r", requirements_file]


def _prune(target: Path) -> None:
    """Drop what the runtime provides (pulled in by aws-xray-sdk) and pip's console scripts."""
    for entry in target.iterdir():
        name = _project(entry.name.split("-", 1)[0] if entry.name.endswith(".dist-info") else entry.name)
        if name in RUNTIME_PROVIDED or entry.name == "bin":
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()


def _copy_sources(output: Path) -> None:
    for item in sorted(FUNCTIONS_DIR.iterdir()):
        if item.name in ("__pycache__",) or item.suffix == ".pyc":
            continue
        dest = output / item.name
        if item.is_dir():
            shutil.copytree(item, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(item, dest)


def _copy_install_files(output: Path) -> None:
    """The in-cluster install's files under nodeflow/_install/ (``nodeflow.install.BUNDLED_ROOT``)."""
    from nodeflow.install import source_files

    dest_root = output / "nodeflow" / "_install"
    for rel in source_files(ROOT):
        dest = dest_root / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dest)


def _python_version(executable: str) -> tuple[int, int] | None:
    try:
        done = subprocess.run(
            [executable, "-c", "import sys; print(*sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    parts = done.stdout.split()
    if done.returncode != 0 or len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1])


def _candidates() -> list[str]:
    found: list[str] = []
    if sys.version_info[:2] == RUNTIME_PYTHON_VERSION:
        found.append(sys.executable)
    name = "python{}.{}".format(*RUNTIME_PYTHON_VERSION)
    on_path = shutil.which(name)
    if on_path:
        found.append(on_path)  # a pyenv shim may refuse to run it: the version check weeds that out
    pyenv_root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    version_glob = "{}.{}.*".format(*RUNTIME_PYTHON_VERSION)
    for versions in (pyenv_root / "versions", Path("/root/.pyenv/versions")):
        found += [str(p) for p in sorted(versions.glob(f"{version_glob}/bin/{name}"), reverse=True)]
    found += [f"/usr/local/bin/{name}", f"/usr/bin/{name}"]
    return list(dict.fromkeys(found))


def lambda_python() -> tuple[str | None, str]:
    """A CPython of the Lambda runtime's version to compile the bundle with: (path, how it was found) or
    (None, why not). ``NODEFLOW_LAMBDA_PYTHON`` wins when set (it must be a 3.12)."""
    wanted = "{}.{}".format(*RUNTIME_PYTHON_VERSION)
    chosen = os.environ.get("NODEFLOW_LAMBDA_PYTHON")
    if chosen:
        version = _python_version(chosen)
        if version == RUNTIME_PYTHON_VERSION:
            return chosen, "NODEFLOW_LAMBDA_PYTHON"
        got = "does not run" if version is None else "is Python {}.{}".format(*version)
        return None, f"NODEFLOW_LAMBDA_PYTHON={chosen} {got}, the runtime needs {wanted}"
    for candidate in _candidates():
        if Path(candidate).is_file() and _python_version(candidate) == RUNTIME_PYTHON_VERSION:
            return candidate, "found"
    return None, f"no Python {wanted} found (set NODEFLOW_LAMBDA_PYTHON, or put python{wanted} on PATH)"


def compile_bytecode(output_dir: str, python: str) -> subprocess.CompletedProcess[str]:
    """Precompile every module of ``output_dir`` into its ``__pycache__`` (``cpython-312`` tags) with ``python``.

    Unchecked-hash .pyc files: the runtime loads them without looking at the source's mtime. One process and a
    fixed hash seed (set literals are marshalled in iteration order) make the bytes the same on every run."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONHASHSEED"] = "0"
    return subprocess.run([python, *COMPILEALL_ARGS, output_dir], env=env, capture_output=True, text=True, check=False)


def _precompile(output_dir: str) -> None:
    python, how = lambda_python()
    if python is None:
        print(
            f"nodeflow: WARNING: the Lambda bundle ships no .pyc files (cold starts compile every module): {how}",
            file=sys.stderr,
        )
        return
    done = compile_bytecode(output_dir, python)
    if done.returncode != 0:  # a module that does not compile stays source-only; the rest keep their .pyc
        tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
        print(f"nodeflow: WARNING: compileall with {python} left some modules uncompiled: {tail}", file=sys.stderr)


def bundle(output_dir: str, requirements: Sequence[str]) -> None:
    """pip-install ``requirements`` for the Lambda platform into ``output_dir``, add functions/, then precompile
    it for the runtime's Python when one is available (see the module docstring)."""
    wheels = wheelhouse()
    with tempfile.TemporaryDirectory(prefix="nodeflow-bundle-") as tmp:
        req_file = Path(tmp, "requirements.txt")
        req_file.write_text("\n".join(requirements) + "\n")
        command = pip_install_command(output_dir, str(req_file), wheels if _has_wheels(wheels) else None)
        print(f"nodeflow: bundling the Lambda code: {' '.join(command[1:])}", file=sys.stderr)
        done = subprocess.run(command, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        hint = (
            f" (installing from the wheelhouse {wheels}: refresh it with `python -m infra.bundling download`)"
            if _has_wheels(wheels)
            else " (offline? fill the wheelhouse once with `python -m infra.bundling download`)"
        )
        raise RuntimeError(f"nodeflow: pip failed to bundle the Lambda dependencies{hint}:\n{done.stderr[-4000:]}")
    out = Path(output_dir)
    _prune(out)
    _copy_sources(out)
    _copy_install_files(out)
    _precompile(output_dir)


@jsii.implements(cdk.ILocalBundling)
class LocalPipBundling:
    """``ILocalBundling``: bundle with this machine's pip (no Docker)."""

    def __init__(self, requirements: Sequence[str]) -> None:
        self.requirements = list(requirements)

    def try_bundle(self, output_dir: str, options: Any = None, **_kwargs: Any) -> bool:
        bundle(output_dir, self.requirements)
        return True


def code_asset() -> lambda_.Code:
    """The one code asset every function shares (handler ``nodeflow.handlers.<module>.handler``)."""
    from nodeflow.install import source_digest

    requirements = lambda_requirements(REQUIREMENTS.read_text())
    digest = hashlib.sha256("\n".join([*requirements, *PIP_PLATFORM_ARGS]).encode()).hexdigest()[:16]
    # The Docker command mirrors the local one and, being part of the asset hash, makes the hash change with
    # the requirements, pip's platform arguments and the install files (the source hash covers functions/ only).
    # Local bundling always runs (try_bundle returns True), so the command is never run for the install files.
    docker_command = [
        "bash",
        "-c",
        "pip install --no-compile -t /asset-output "
        + " ".join(PIP_PLATFORM_ARGS)
        + " "
        + " ".join(f"'{r}'" for r in requirements)
        + " && cp -r /asset-input/. /asset-output/"
        + " && PYTHONHASHSEED=0 python "
        + " ".join(COMPILEALL_ARGS)
        + " /asset-output"
        + f" # requirements {digest} install files {source_digest(ROOT)}",
    ]
    return lambda_.Code.from_asset(
        str(FUNCTIONS_DIR),
        exclude=list(ASSET_EXCLUDE),
        bundling=cdk.BundlingOptions(
            image=LAMBDA_RUNTIME.bundling_image,
            command=docker_command,
            local=LocalPipBundling(requirements),
        ),
    )


def download(dest: Path) -> None:
    """Fill the wheelhouse with every wheel the Lambda package needs (run once, online)."""
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="nodeflow-wheels-") as tmp:
        req_file = Path(tmp, "requirements.txt")
        req_file.write_text("\n".join(lambda_requirements(REQUIREMENTS.read_text())) + "\n")
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check"]
        command += ["-d", str(dest), *PIP_PLATFORM_ARGS, "-r", str(req_file)]
        subprocess.run(command, check=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.bundling", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    dl = sub.add_parser("download", help="fill the wheelhouse for offline synth")
    dl.add_argument("--dest", type=Path, default=None, help="default: $NODEFLOW_LAMBDA_WHEELS or .venv/lambda-wheels")
    b = sub.add_parser("bundle", help="bundle the Lambda package into a directory (what cdk synth does)")
    b.add_argument("output", type=Path)
    args = parser.parse_args(argv)
    if args.command == "download":
        download(args.dest or wheelhouse())
    else:
        args.output.mkdir(parents=True, exist_ok=True)
        bundle(str(args.output), lambda_requirements(REQUIREMENTS.read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
