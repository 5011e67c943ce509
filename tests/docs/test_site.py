"""The documentation site: its generated reference pages are current, and it builds with ``mkdocs build
--strict`` (a broken link, a missing anchor, a page outside the nav fails it)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tools import gen_docs

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def test_the_generated_reference_pages_are_current() -> None:
    assert gen_docs.stale() == [], "run `make docs-reference` and commit the pages"


def test_a_change_in_the_code_makes_its_page_stale(tmp_path: Path) -> None:
    gen_docs.write(tmp_path)
    assert gen_docs.stale(tmp_path) == []
    page = tmp_path / "reference" / "settings.md"
    page.write_text(page.read_text().replace("`decisionLogTtlDays`", "`decisionLogDays`"))
    assert gen_docs.stale(tmp_path) == ["reference/settings.md"]


def test_the_cli_page_has_every_command() -> None:
    page = (DOCS / "reference" / "cli.md").read_text()
    for command in ("plan", "explain", "disrupt", "governance", "install-manifests", "decisions", "doctor"):
        assert f"## `{command}`" in page


def test_no_table_cell_of_the_reference_splits_on_a_pipe_in_code() -> None:
    """GitHub splits a table cell at any unescaped pipe, also inside a code span (Python-Markdown does not, and shows
    an escaping backslash there): a value with a pipe (a regex, a CEL rule with ||) is an HTML code element with the
    pipe as an entity, and every table row has as many cells as its header."""
    for page in sorted((DOCS / "reference").glob("*.md")):
        header = 0
        for n, line in enumerate(page.read_text().splitlines(), 1):
            spans = re.findall(r"`([^`]*)`", line)
            assert not any("|" in s for s in spans), f"{page.name}:{n}: a pipe in a code span: {line[:120]}"
            if not line.startswith("|"):
                header = 0
                continue
            cells = len(re.split(r"(?<!\\)\|", line)) - 2
            if header == 0:
                header = cells
            assert cells == header, f"{page.name}:{n}: {cells} cells, the header has {header}"


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "reference" / "crds" / "index.html").exists()


USER_FACING = [
    ROOT / "README.md",
    ROOT / "CHANGELOG.md",
    *(ROOT / "agent").glob("*.md"),
    *DOCS.rglob("*.md"),
    *(ROOT / "examples").rglob("*.yaml"),
]


@pytest.mark.parametrize("path", sorted(p.relative_to(ROOT).as_posix() for p in USER_FACING))
def test_no_internal_work_item_or_outside_path(path: str) -> None:
    """What a user reads names no internal work item ("issue 19", a work branch such as "i27-reg") and no file
    outside the repository."""
    text = (ROOT / path).read_text()
    assert not re.search(r"\b[Ii]ssues? \d+\b", text), path
    assert not re.search(r"\bbranch i\d+-|\bi\d\d-[a-z]+\d*\b", text), path
    assert "../shared" not in text, path
    assert "DESIGN.md" not in text, path
