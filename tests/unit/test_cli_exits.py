"""The exit codes of the catalog commands: one mechanism (``nodeflow.cli_exits``), documented in every command's
``--help`` and so in docs/reference/cli.md."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest

from nodeflow import cli, cli_exits
from nodeflow.catalog import source
from nodeflow.catalog.source import CatalogError

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo"
CATALOG_COMMANDS = [
    ("plan",),
    ("explain", "default/web"),
    ("disrupt", "--dry-run"),
    ("governance",),
]


@pytest.mark.parametrize("command", ["plan", "explain", "disrupt", "governance"])
def test_every_catalog_command_documents_its_exit_codes(command: str) -> None:
    (action,) = [a for a in cli._parser()._actions if isinstance(a, argparse._SubParsersAction)]
    shown = " ".join(action.choices[command].format_help().split())
    assert " ".join(cli_exits.EXIT_CODES.split()) in shown


@pytest.mark.parametrize("command", CATALOG_COMMANDS, ids=lambda c: c[0])
def test_a_catalog_that_cannot_be_loaded_exits_the_same_for_every_command(
    command: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """plan, explain, disrupt and governance had two copies of the handling (EXIT_CATALOG, EXIT_UNAVAILABLE)."""

    def unavailable(name: str, region: str | None) -> object:
        raise CatalogError("pricing:GetProducts: ThrottlingException")

    monkeypatch.setattr(source, "load_catalog", unavailable)
    out, err = io.StringIO(), io.StringIO()
    code = cli.main([*command, "-f", str(DEMO)], out, err)
    assert code == cli_exits.EXIT_UNAVAILABLE == 1
    assert out.getvalue() == ""
    assert (
        err.getvalue() == "error: the offline catalog could not be loaded: pricing:GetProducts: ThrottlingException\n"
    )


@pytest.mark.parametrize("command", CATALOG_COMMANDS, ids=lambda c: c[0])
def test_manifests_with_problems_exit_the_same_for_every_command(command: tuple[str, ...], tmp_path: Path) -> None:
    """Every problem listed, naming file, document, object and field; nothing written to stdout; EXIT_INPUT."""
    bad = tmp_path / "pool.yaml"
    bad.write_text(
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata:\n  name: default\nspec:\n  template:\n    spec:\n"
        "      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n"
        "      requirements: [{key: kubernetes.io/arch, operator: Maybe, values: [amd64]}]\n"
    )
    out, err = io.StringIO(), io.StringIO()
    code = cli.main([*command, "-f", str(bad)], out, err)
    assert code == cli_exits.EXIT_INPUT
    assert out.getvalue() == ""
    made = "record" if command[0] == "governance" else "plan"
    lines = err.getvalue().splitlines()
    assert lines[0] == f"error: 1 problem(s) in the manifests; no {made} made:"
    assert lines[1].startswith(f"  {bad}: document 0 (NodePool/default): spec.template.spec.requirements[0].operator")
