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
