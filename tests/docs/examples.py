"""The examples a reader copies: YAML code blocks of README.md and docs/ (their Kubernetes objects), shared by the
offline check (tests/docs/test_examples.py) and the real API server's dry run (tests/realk8s/test_docs_examples.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
YAML_BLOCK = re.compile(r"^```ya?ml\n(.*?)^```", re.DOTALL | re.MULTILINE)


@dataclass(frozen=True)
class Example:
    where: str  # file:line of the block
    index: int  # the document's index in the block
    obj: dict[str, Any]

    @property
    def id(self) -> str:
        meta = self.obj.get("metadata") or {}
        return f"{self.where}#{self.index}:{self.obj.get('kind')}/{meta.get('name')}"


def files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def yaml_examples() -> list[Example]:
    """Every Kubernetes object (a mapping with apiVersion and kind) in a YAML code block."""
    out = []
    for path in files():
        text = path.read_text()
        for match in YAML_BLOCK.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            where = f"{path.relative_to(ROOT).as_posix()}:{line}"
            for i, doc in enumerate(yaml.safe_load_all(match.group(1))):
                if isinstance(doc, dict) and "apiVersion" in doc and "kind" in doc:
                    out.append(Example(where, i, doc))
    return out
