"""One disruption invocation builds the candidates once per round: the NodeClaim conditions (Drifted,
Consolidatable) reuse the first round's candidates and drift instead of building them a third time."""

from __future__ import annotations

from typing import Any

import pytest

from nodeflow.disruption import candidates as candidates_mod
from nodeflow.disruption import round as round_mod
from nodeflow.lifecycle import disruption_round as lifecycle
from sandbox.nodeflow import LocalNodeflow
from tests.functional.disruption.test_disruption_lambda import AWAY_FROM_WEB, _later, _launch, _scale_down, _settle


def test_one_invocation_builds_the_candidates_once_per_round(
    local: LocalNodeflow, monkeypatch: pytest.MonkeyPatch
) -> None:
    _launch(local, "web", 2)
    empty = _launch(local, "batch", 2, affinity=AWAY_FROM_WEB)
    _scale_down(local, "batch")
    _later(5)
    built: list[int] = []
    real = candidates_mod.build_candidates

    def counting(*args: Any) -> Any:
        built.append(1)
        return real(*args)

    monkeypatch.setattr(round_mod, "build_candidates", counting)
    monkeypatch.setattr(lifecycle, "build_candidates", counting, raising=False)  # where conditions built them
    result = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    assert result["executed"] == [empty["metadata"]["name"]]  # a command, validated by a second round
    assert len(built) == 2  # was 3: the first round, the conditions, the validation round
    claim = local.kube_server.get("karpenter.sh/v1", "NodeClaim", empty["metadata"]["name"])
    conditions = {c["type"]: c["status"] for c in claim["status"]["conditions"]}
    assert conditions["Consolidatable"] == "True"  # the conditions are still written
    assert conditions["Drifted"] == "False"
    _settle(local)
