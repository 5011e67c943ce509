"""The field paths of Karpenter's own CRDs, for ``tests/unit/test_crd_fields.py`` (Karpenter's API groups carry
Karpenter's fields only: every field nodeflow's karpenter.sh / karpenter.k8s.aws CRDs define must be one of these).

    .venv/bin/python tools/upstream_fields.py PROVIDER_GIT_DIR [--tag v1.14.1]

reads ``pkg/apis/crds/*.yaml`` of the aws/karpenter-provider-aws git directory at the tag (its copies of the
karpenter.sh CRDs and its EC2NodeClass) with ``git show`` and writes ``tests/unit/karpenter_fields.txt``: a
header naming the tag, then one line per field, ``KIND PATH`` (``NodePool spec.disruption.budgets[].nodes``;
``[]`` an array's items, ``{}`` a map's values). Only names are recorded, nothing of the CRDs' text.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "unit" / "karpenter_fields.txt"
CRDS = (
    "karpenter.sh_nodepools.yaml",
    "karpenter.sh_nodeclaims.yaml",
    "karpenter.sh_nodeoverlays.yaml",
    "karpenter.k8s.aws_ec2nodeclasses.yaml",
)


def field_paths(schema: dict[str, Any], prefix: str) -> Iterator[str]:
    """Every property path under ``schema`` (an OpenAPI v3 schema at ``prefix``), parents before children."""
    for name, sub in sorted((schema.get("properties") or {}).items()):
        yield f"{prefix}.{name}"
        yield from field_paths(sub, f"{prefix}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from field_paths(schema["items"], f"{prefix}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from field_paths(schema["additionalProperties"], f"{prefix}{{}}")


def crd_fields(crd: dict[str, Any]) -> list[str]:
    """``KIND PATH`` lines of every version of ``crd``: spec and status (metadata is Kubernetes')."""
    kind = crd["spec"]["names"]["kind"]
    out: set[str] = set()
    for version in crd["spec"]["versions"]:
        properties = version["schema"]["openAPIV3Schema"].get("properties") or {}
        for top in ("spec", "status"):
            if top in properties:
                out.add(f"{kind} {top}")
                out.update(f"{kind} {path}" for path in field_paths(properties[top], top))
    return sorted(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("git_dir", help="a git directory of aws/karpenter-provider-aws")
    parser.add_argument("--tag", default="v1.14.1")
    args = parser.parse_args(argv)
    lines = [f"# Karpenter's CRD fields at aws/karpenter-provider-aws {args.tag} (tools/upstream_fields.py)"]
    for name in CRDS:
        text = subprocess.run(
            ["git", "-C", args.git_dir, "show", f"{args.tag}:pkg/apis/crds/{name}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        lines += crd_fields(yaml.safe_load(text))
    OUT.write_text("\n".join(lines) + "\n")
    print(f"wrote {OUT} ({len(lines) - 1} fields)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
