"""The Lambda code asset: functions/ plus the runtime requirements, bundled without Docker.

Local bundling runs pip for the Lambda platform (arm64, CPython 3.12, binary wheels only) into the asset
directory, then copies functions/ next to the packages. boto3/botocore/s3transfer are left out: the Lambda
runtime has them. aws-lambda-powertools is installed with its ``tracer`` extra (aws-xray-sdk), which Tracer
needs when tracing is on.

Offline synth: ``python -m infra.bundling download`` fills a wheelhouse (``.venv/lambda-wheels`` unless
``NODEFLOW_LAMBDA_WHEELS`` names another) from the registry once; while it exists, bundling installs from it
with ``--no-index``, so ``cdk synth`` / ``cdk deploy`` need no network. Without it, pip uses the index.

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


def bundle(output_dir: str, requirements: Sequence[str]) -> None:
    """pip-install ``requirements`` for the Lambda platform into ``output_dir``, then add functions/."""
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
    requirements = lambda_requirements(REQUIREMENTS.read_text())
    digest = hashlib.sha256("\n".join([*requirements, *PIP_PLATFORM_ARGS]).encode()).hexdigest()[:16]
    # The Docker command mirrors the local one and, being part of the asset hash, makes the hash change with
    # the requirements and pip's platform arguments (the source hash covers functions/ only).
    docker_command = [
        "bash",
        "-c",
        "pip install --no-compile -t /asset-output "
        + " ".join(PIP_PLATFORM_ARGS)
        + " "
        + " ".join(f"'{r}'" for r in requirements)
        + " && cp -r /asset-input/. /asset-output/"
        + f" # requirements {digest}",
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
