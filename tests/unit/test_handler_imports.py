"""Handler modules stay cheap to import (issue 18 target 4), checked without timing anything: a fresh interpreter
with the Lambda's environment imports them, and the heavy libraries a handler does not need at import must not
be in ``sys.modules`` afterwards. ``benchmarks/imports.py`` measures the seconds."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from benchmarks.imports import FUNCTIONS, ROOT, handler_modules, lambda_environment
from nodeflow.handlers.common import LazyTracer

# Loaded on first use (first invocation, first client, first failed call), never by importing a handler:
# the Kubernetes client, boto3's sessions and clients, the X-Ray SDK (Powertools' Tracer), botocore's
# exceptions and clients.
NEVER_AT_IMPORT = ("kubernetes", "boto3", "aws_xray_sdk", "botocore.exceptions", "botocore.client", "urllib3")
# The launch workflow's steps but Launch, the terminate and replace workflows' steps, the interruption handler and
# the webhook do not plan: no solver, no manifest loading (CleanUp imports the planner when it requeues a failed
# NodeClaim's pods, not before).
LIGHT_HANDLERS = (
    "cleanup",
    "drain",
    "finalize",
    "initialize",
    "interruption",
    "register",
    "replace",
    "taint",
    "terminate",
    "webhook",
)
NOT_FOR_LIGHT = ("nodeflow.plan", "nodeflow.scheduling.solver", "yaml")

_PROBE = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module("nodeflow.handlers." + name)
common = sys.modules["nodeflow.handlers.common"]
print(json.dumps({"modules": sorted(sys.modules), "tracer_built": common.tracer.built}))
"""


def _import_in_fresh_interpreter(handlers: list[str], functions: Path = FUNCTIONS) -> dict[str, Any]:
    env = lambda_environment(handlers[0], functions=functions)
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *handlers],
        env=env,
        cwd=tempfile.gettempdir(),  # not a directory with nodeflow in it: PYTHONPATH decides
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def _loaded(modules: list[str], roots: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == r or m.startswith(r + ".") for r in roots))


def test_the_handler_list_matches_the_functions() -> None:
    """The benchmark's handlers (modules defining ``handler``) are the Lambdas tests/infra/test_app.py knows."""
    source = (ROOT / "tests" / "infra" / "test_app.py").read_text()
    (line,) = [ln for ln in source.splitlines() if ln.startswith("NOT_HANDLERS = ")]
    not_handlers = ast.literal_eval(line.split("=", 1)[1].split("#", 1)[0].strip())
    handlers = {p.stem for p in (FUNCTIONS / "nodeflow" / "handlers").glob("*.py")} - not_handlers
    assert set(handler_modules()) == handlers


def test_no_handler_imports_the_kubernetes_client_boto3_or_the_tracer() -> None:
    out = _import_in_fresh_interpreter(handler_modules())
    assert _loaded(out["modules"], NEVER_AT_IMPORT) == []
    assert out["tracer_built"] is False  # built by the first invocation


def test_workflow_steps_and_the_webhook_do_not_import_the_planner() -> None:
    out = _import_in_fresh_interpreter(list(LIGHT_HANDLERS))
    assert _loaded(out["modules"], NOT_FOR_LIGHT) == []


def test_lazy_tracer_is_built_by_the_first_call_and_traces_every_call() -> None:
    tracer = LazyTracer(service="nodeflow")
    calls: list[tuple[Any, Any]] = []

    @tracer.capture_lambda_handler
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        """The docstring."""
        calls.append((event, context))
        if event.get("fail"):
            raise RuntimeError("boom")
        return {"ok": event["n"]}

    assert handler.__name__ == "handler"
    assert handler.__doc__ == "The docstring."
    assert tracer.built is False
    assert handler({"n": 1}, "ctx") == {"ok": 1}
    assert tracer.built is True
    real = tracer.get()
    assert handler({"n": 2}, None) == {"ok": 2}
    assert tracer.get() is real  # one Tracer for the life of the container
    with pytest.raises(RuntimeError, match=r"^boom$"):
        handler({"fail": True}, None)
    assert [c[0] for c in calls] == [{"n": 1}, {"n": 2}, {"fail": True}]
    assert tracer.service == "nodeflow"  # other attributes come from the real Tracer
