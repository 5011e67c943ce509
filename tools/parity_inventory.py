"""List the It() specs of Karpenter's test suites that tests/parity mirrors (tests/parity/upstream_its.json).

Run: ``.venv/bin/python tools/parity_inventory.py [--repo PATH] [--ref v1.14.1]`` with a clone of
kubernetes-sigs/karpenter (the default path is where the session tools put one). Only titles and
nesting are recorded (Describe / Context / When / It and DescribeTable / Entry), never test bodies.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from pathlib import Path

FILES = (
    "pkg/controllers/provisioning/scheduling/topology_test.go",
    "pkg/controllers/provisioning/scheduling/suite_test.go",
    "pkg/controllers/provisioning/scheduling/instance_selection_test.go",
    "pkg/controllers/disruption/emptiness_test.go",
    "pkg/controllers/disruption/consolidation_test.go",
    "pkg/controllers/disruption/drift_test.go",
    "pkg/controllers/disruption/suite_test.go",
    "pkg/controllers/nodeclaim/disruption/consolidation_test.go",
    "pkg/controllers/nodeclaim/disruption/drift_test.go",
    "pkg/apis/v1/nodepool_budgets_test.go",
    "pkg/utils/pod/suite_test.go",
    "pkg/utils/pdb/suite_test.go",
)
OUT = Path(__file__).resolve().parents[1] / "tests" / "parity" / "upstream_its.json"
_CONTAINER = re.compile(r'\b(Describe|Context|When|DescribeTable|FDescribe|FContext)\(\s*"((?:[^"\\]|\\.)*)"')
_SPEC = re.compile(r'\b(It|FIt|Entry|FEntry)\(\s*"((?:[^"\\]|\\.)*)"')


def _depth_delta(line: str) -> int:
    code = re.sub(r'"(?:[^"\\]|\\.)*"|`[^`]*`', '""', line.split("//", 1)[0])
    return code.count("{") + code.count("(") - code.count("}") - code.count(")")


def specs(text: str) -> list[str]:
    """Every spec as "Outer / Inner / it title" (tables: "Table / entry title"; a repeated title gets " [2]"...)."""
    stack: list[tuple[str, int]] = []
    depth = 0
    out: list[str] = []
    seen: dict[str, int] = {}
    for line in text.splitlines():
        while stack and depth <= stack[-1][1]:
            stack.pop()
        m = _CONTAINER.search(line)
        s = _SPEC.search(line)
        if s and (not m or s.start() < m.start()):
            name = " / ".join([*(n for n, _ in stack), s.group(2)])
            seen[name] = seen.get(name, 0) + 1
            out.append(name if seen[name] == 1 else f"{name} [{seen[name]}]")
        elif m:
            stack.append((m.group(2), depth))
        depth += _depth_delta(line)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", default="/work/.mirror/kubernetes-sigs+karpenter/repo")
    parser.add_argument("--ref", default="v1.14.1")
    args = parser.parse_args()
    inventory: dict[str, list[str]] = {}
    for path in FILES:
        text = subprocess.run(
            ["git", "-C", args.repo, "show", f"{args.ref}:{path}"], capture_output=True, text=True, check=True
        ).stdout
        inventory[path] = specs(text)
    OUT.write_text(json.dumps({"ref": args.ref, "specs": inventory}, indent=1) + "\n")
    print(f"{OUT}: {sum(map(len, inventory.values()))} specs in {len(inventory)} files")


if __name__ == "__main__":
    main()
