"""Every example in README.md and docs/ is true: each runnable shell example (a ```console block after
``<!-- runnable -->``) prints what the page shows, every other shell block is run on the real control plane
(``<!-- runnable: cluster -->``, tests/realk8s/test_docs_cluster_examples.py) or says in its first line why no test
runs it (``# needs an AWS account; not run by the tests``), and each YAML example of a nodeflow or Karpenter kind is valid
against the CRD the stack installs and loads as nodeflow reads it (the real API server's dry run of every example,
built-in kinds included, is tests/realk8s/test_docs_examples.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nodeflow.api.manifests import load_manifests
from tests.docs.examples import NOT_RUN, ROOT, Block, Example, blocks, files, normalize, yaml_examples
from tests.unit.test_crds import validate
from tools import gen_docs

CRDS = {
    (f"{crd['spec']['group']}/{v['name']}", crd["spec"]["names"]["kind"]): v["schema"]["openAPIV3Schema"]
    for crd in (yaml.safe_load(p.read_text()) for p in sorted((ROOT / "agent/manifests/crds").glob("*.yaml")))
    for v in crd["spec"]["versions"]
}
EXAMPLES = yaml_examples()
CRD_EXAMPLES = [e for e in EXAMPLES if (e.obj["apiVersion"], e.obj["kind"]) in CRDS]
RUNNABLE = [
    (path.relative_to(ROOT).as_posix(), command, shown)
    for path in files()
    for match in gen_docs.RUNNABLE.finditer(path.read_text())
    for command, shown in gen_docs.commands(match.group(2))
]
EXCERPTS = [
    (path.relative_to(ROOT).as_posix(), command, shown)
    for path in files()
    for match in gen_docs.EXCERPT.finditer(path.read_text())
    for command, shown in gen_docs.commands(match.group(2))
]


def test_the_docs_have_examples_of_each_kind() -> None:
    kinds = {e.obj["kind"] for e in CRD_EXAMPLES}
    assert {"NodePool", "EC2NodeClass", "NodeflowPolicy"} <= kinds
    assert len(RUNNABLE) >= 5
    assert EXCERPTS


@pytest.mark.parametrize("example", CRD_EXAMPLES, ids=lambda e: e.id)
def test_a_yaml_example_is_valid_against_its_crd(example: Example) -> None:
    schema = CRDS[(example.obj["apiVersion"], example.obj["kind"])]
    assert validate(schema, example.obj) == [], example.where


@pytest.mark.parametrize("example", CRD_EXAMPLES, ids=lambda e: e.id)
def test_a_yaml_example_loads_as_nodeflow_reads_it(example: Example, tmp_path: Path) -> None:
    path = tmp_path / "example.yaml"
    path.write_text(yaml.safe_dump(example.obj))
    load_manifests([path])  # raises ManifestError naming the field


def test_the_crd_check_refuses_a_bad_example() -> None:
    (pool,) = [e for e in CRD_EXAMPLES if e.obj["kind"] == "NodePool" and e.where.startswith("docs/getting-started")]
    bad = {**pool.obj, "spec": {**pool.obj["spec"], "disruption": {"consolidationPolicy": "Sometimes"}}}
    assert validate(CRDS[("karpenter.sh/v1", "NodePool")], bad)


@pytest.mark.parametrize(("where", "command", "shown"), RUNNABLE, ids=[f"{w}:{c}" for w, c, _ in RUNNABLE])
def test_a_runnable_example_prints_what_the_page_shows(where: str, command: str, shown: str) -> None:
    assert gen_docs.run(command) == shown, f"{where}: `{command}` prints something else: run `make docs-reference`"


def _in_order(shown: list[str], printed: list[str]) -> list[str]:
    """The shown lines not found in ``printed`` after the previous one (empty: all there, in order)."""
    rest = iter(printed)
    return [line for line in shown if not any(line == out for out in rest)]


@pytest.mark.parametrize(("where", "command", "shown"), EXCERPTS, ids=[f"{w}:{c}" for w, c, _ in EXCERPTS])
def test_an_excerpt_shows_lines_of_the_output_in_order(where: str, command: str, shown: str) -> None:
    lines = [line.rstrip() for line in shown.splitlines() if line.strip() != "..."]
    assert lines
    assert _in_order(lines, [line.rstrip() for line in gen_docs.run(command).splitlines()]) == [], where


def test_an_excerpt_check_notices_a_line_out_of_order() -> None:
    assert _in_order(["a", "c"], ["a", "b", "c"]) == []
    assert _in_order(["c", "a"], ["a", "b", "c"]) == ["a"]
    assert _in_order(["x"], ["a"]) == ["x"]


SHELL_BLOCKS = [b for b in blocks() if b.is_shell]


@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=lambda b: b.where)
def test_a_shell_block_is_run_by_a_test_or_says_why_not(block: Block) -> None:
    if block.kind is not None:
        assert block.language == "console", f"{block.where}: a runnable block is a ```console block"
        assert block.text.startswith("$ "), f"{block.where}: a runnable block starts with a `$ ` command"
        if block.kind == "cluster":
            normalize("", block.options.get("normalized", ""))  # names only known rules
            assert set(block.options) <= {"after", "normalized"}, block.where
        return
    assert NOT_RUN.match(block.text), (
        f"{block.where}: a shell block no test runs: mark it <!-- runnable --> (offline) or <!-- runnable: cluster "
        "--> (tests/realk8s/test_docs_cluster_examples.py), or start it with `# <why>; not run by the tests`"
    )
    assert not any(line.startswith("$ ") for line in block.text.splitlines()), (
        f"{block.where}: output shown after a `$ ` command that no test runs"
    )


def test_the_shell_block_check_sees_each_kind_of_block() -> None:
    kinds = {b.kind for b in SHELL_BLOCKS}
    assert {None, "offline", "excerpt", "cluster"} <= kinds
    assert not [b.where for b in blocks() if b.language == "" and b.is_shell]  # every shell block is labelled
    assert Block("x:1", "", None, "make demo\n").is_shell
    assert Block("x:1", "text", None, "$ kubectl get pods\n").is_shell
    assert not Block("x:1", "text", None, "usage: python -m nodeflow plan\n").is_shell


def test_normalizing_touches_only_what_the_rule_names() -> None:
    table = "$ kubectl get x\nNAME   READY   AGE\na      True    5s\nb      False   12m\n"
    want = "$ kubectl get x\nNAME   READY   AGE\na      True    <age>\nb      False   <age>\n"
    assert normalize(table, "AGE") == want
    assert normalize(table, "") == table
    line = "2026-03-01 12:00:00  provisioning  5 records since 2026-03-01T11:05:00Z (table t-12:00:00)\n"
    assert normalize(line, "times") == "<time>  provisioning  5 records since <time> (table t-12:00:00)\n"
    with pytest.raises(ValueError, match="unknown normalization"):
        normalize(table, "everything")
