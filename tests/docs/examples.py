"""The examples a reader copies, from the fenced code blocks of README.md and docs/: the Kubernetes objects of the
YAML blocks and the shell blocks with their runnable markers, shared by the offline checks
(tests/docs/test_examples.py), the real API server's dry run (tests/realk8s/test_docs_examples.py) and the cluster
examples' run (tests/realk8s/test_docs_cluster_examples.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]


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
    return [
        Example(block.where, i, doc)
        for block in blocks()
        if block.language in ("yaml", "yml")
        for i, doc in enumerate(yaml.safe_load_all(block.text))
        if isinstance(doc, dict) and "apiVersion" in doc and "kind" in doc
    ]


# ---------------------------------------------------------------------------------------------- shell blocks

FENCE = re.compile(r"^```(\S*)\n(.*?)^```\n", re.DOTALL | re.MULTILINE)
#: what a shell block's fence says it is
SHELL = frozenset({"sh", "bash", "shell", "console"})
#: the words that start a command line (an unlabelled block starting so is a shell block without its label)
COMMANDS = frozenset({"make", "python", ".venv/bin/python", "kubectl", "aws", "npx", "cdk", "git", "helm"})
#: the line before a runnable ```console block: offline (tests/docs/test_examples.py: ``<!-- runnable -->``, ``<!--
#: runnable: excerpt -->``) or on the real control plane (tests/realk8s/test_docs_cluster_examples.py: ``<!--
#: runnable: cluster[; after: provisioning PATH][; normalized: RULE, ...] -->``)
MARKER = re.compile(r"<!-- runnable(?:: (?P<kind>excerpt|cluster)(?P<options>(?:; [^>]*?)*))? -->\n$")
#: the first line of a shell block that no test runs, saying why (an AWS account, a deployed stack, its length)
NOT_RUN = re.compile(r"^# (?P<why>.+); not run by the (?:docs )?tests\n")


@dataclass(frozen=True)
class Block:
    """A fenced code block: where it is, its fence's language, the runnable marker before it (``None``: none) and
    its text."""

    where: str  # file:line of the fence
    language: str
    marker: re.Match[str] | None
    text: str

    @property
    def kind(self) -> str | None:
        """``offline``, ``excerpt`` or ``cluster`` for a runnable block, else ``None``."""
        return (self.marker.group("kind") or "offline") if self.marker else None

    @property
    def options(self) -> dict[str, str]:
        """A cluster block's ``; key: value`` options (``after``, ``normalized``)."""
        raw = self.marker.group("options") if self.marker else ""
        pairs = [part.partition(":") for part in (raw or "").split(";") if part.strip()]
        return {key.strip(): value.strip() for key, _, value in pairs}

    @property
    def is_shell(self) -> bool:
        """Commands a reader runs: a shell-labelled fence, a ``$ `` prompt, or an unlabelled block whose first word
        is a command (reference text such as ``--help`` output and usage synopses is labelled ``text``)."""
        if self.language in SHELL or any(line.startswith("$ ") for line in self.text.splitlines()):
            return True
        words = self.text.split(maxsplit=1)
        return self.language == "" and bool(words) and words[0] in COMMANDS


def blocks() -> list[Block]:
    """Every fenced code block of README.md and docs/."""
    out = []
    for path in files():
        text = path.read_text()
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            before = text[: match.start()]
            marker = MARKER.search(before[before.rfind("\n", 0, len(before) - 1) + 1 :])
            where = f"{path.relative_to(ROOT).as_posix()}:{line}"
            out.append(Block(where, match.group(1), marker, match.group(2)))
    return out


#: the normalizations a cluster block may name (``normalized: AGE, times``), for what no command can fix; each
#: replaces only what it names by a placeholder
NORMALIZE = {
    "AGE": "kubectl's AGE column: the last word of each row under a header that starts with NAME and ends with AGE",
    "times": "a time as the CLI prints it (2026-03-01 12:00:00, 2026-03-01T12:00:00Z)",
}
_TIME = re.compile(r"\b\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:\.\d+)?Z?\b")


def normalize(text: str, rules: str) -> str:
    """``text`` with what the named rules cover replaced by a placeholder (an unknown rule is an error)."""
    names = [name.strip() for name in rules.split(",") if name.strip()]
    unknown = [name for name in names if name not in NORMALIZE]
    if unknown:
        raise ValueError(f"unknown normalization {unknown}: one of {sorted(NORMALIZE)}")
    lines = text.splitlines(keepends=True)
    if "AGE" in names:
        in_table = False
        for i, line in enumerate(lines):
            words = line.split()
            if words and words[-1] == "AGE" and line.startswith("NAME"):
                in_table = True
            elif in_table and words:
                lines[i] = re.sub(r"\S+(\s*)$", r"<age>\1", line)
            else:
                in_table = False
    out = "".join(lines)
    if "times" in names:
        out = _TIME.sub("<time>", out)
    return out
