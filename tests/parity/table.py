"""Write tests/parity/README.md: every upstream spec -> its nodeflow test, or why there is none.

Run: ``.venv/bin/python -m tests.parity.table`` (tests/parity/test_table.py checks the file is current).
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from tests.parity.upstream import inventory

HERE = Path(__file__).parent
README = HERE / "README.md"

INTRO = """\
# Karpenter parity suite

Each file here mirrors one of Karpenter's own test files ({ref}): every `It()` (or table `Entry`)
that `plan`, `explain` or `disrupt --dry-run` can express has a test here with our own manifests
and assertions (tests/parity/harness.py builds the objects and runs the real CLI in-process). The
tables below are generated from the tests (`.venv/bin/python -m tests.parity.table`;
`test_table.py` fails when this file is out of date or a spec is unaccounted for). The spec list
itself comes from `tools/parity_inventory.py`.

Status: **passes** (the test asserts upstream's decision and the suite is green), **differs**
(the test asserts a deliberate difference, with the reason), **not expressible** (the spec is
about something the offline commands do not decide or show, with the reason).

Summary: {passes} pass, {differs} differ, {absent} not expressible, {missing} missing, of {total}.
"""


@dataclass
class FileRows:
    module: str
    mirrored: dict[str, list[tuple[str, str | None]]] = field(default_factory=dict)  # spec -> [(test, differs)]
    not_expressible: dict[str, str] = field(default_factory=dict)


def _modules() -> list[ModuleType]:
    out = []
    for info in pkgutil.iter_modules([str(HERE)]):
        if info.name.startswith("test_"):
            out.append(importlib.import_module(f"tests.parity.{info.name}"))
    return out


def collect() -> tuple[str, dict[str, list[str]], dict[str, FileRows], list[str]]:
    """(ref, inventory, rows by upstream file, problems)."""
    ref, specs = inventory()
    rows: dict[str, FileRows] = {}
    problems: list[str] = []
    for module in _modules():
        upstream = getattr(module, "UPSTREAM", None)
        if upstream is None:
            continue
        if upstream not in specs:
            problems.append(f"{module.__name__}: UPSTREAM {upstream!r} is not in the inventory")
            continue
        file_rows = rows.setdefault(upstream, FileRows(module.__name__.rsplit(".", 1)[-1]))
        known = set(specs[upstream])
        for name, obj in vars(module).items():
            for spec in getattr(obj, "__upstream__", ()):
                if spec not in known:
                    problems.append(f"{module.__name__}.{name}: {spec!r} is not a spec of {upstream}")
                    continue
                xfail = next((m for m in getattr(obj, "pytestmark", ()) if m.name == "xfail"), None)
                differs = obj.__differs__
                if xfail is not None:  # a known failure is not parity: say so in the table
                    differs = f"FAILS (xfail): {xfail.kwargs.get('reason', '')}"
                file_rows.mirrored.setdefault(spec, []).append((name, differs))
        for spec, why in getattr(module, "NOT_EXPRESSIBLE", {}).items():
            if spec not in known:
                problems.append(f"{module.__name__}.NOT_EXPRESSIBLE: {spec!r} is not a spec of {upstream}")
            elif spec in file_rows.mirrored:
                problems.append(f"{module.__name__}: {spec!r} is both mirrored and not expressible")
            file_rows.not_expressible[spec] = why
    return ref, specs, rows, problems


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render() -> tuple[str, list[str]]:
    """(README text, specs no test accounts for)."""
    ref, specs, rows, _ = collect()
    counts = {"passes": 0, "differs": 0, "absent": 0, "missing": 0}
    body: list[str] = []
    missing: list[str] = []
    for upstream, names in specs.items():
        file_rows = rows.get(upstream)
        title = f"`{upstream}`" + (f" → `{file_rows.module}.py`" if file_rows else "")
        body += ["", f"## {title}", "", "| upstream spec | nodeflow test | status |", "|---|---|---|"]
        for spec in names:
            tests = file_rows.mirrored.get(spec, []) if file_rows else []
            why = file_rows.not_expressible.get(spec) if file_rows else None
            if tests:
                differs = [d for _, d in tests if d]
                status = f"differs: {differs[0]}" if differs else "passes"
                counts["differs" if differs else "passes"] += 1
                cell = ", ".join(f"`{t}`" for t, _ in tests)
            elif why is not None:
                status, cell = f"not expressible: {why}", "—"
                counts["absent"] += 1
            else:
                status, cell = "**missing**", "—"
                counts["missing"] += 1
                missing.append(f"{upstream}: {spec}")
            body.append(f"| {_cell(spec)} | {cell} | {_cell(status)} |")
    intro = INTRO.format(ref=ref, total=sum(map(len, specs.values())), **counts)
    return intro + "\n".join(body) + "\n", missing


def main() -> None:
    text, missing = render()
    README.write_text(text)
    print(f"{README}: {len(missing)} spec(s) missing")


if __name__ == "__main__":
    main()
