"""cdk-nag (AwsSolutions) and cfn-lint on the synthesized templates."""

from __future__ import annotations

import pytest

from infra.nag import REASONS
from tests.infra.conftest import Synthesized


def test_cdk_nag_aws_solutions_is_clean(synthesized: Synthesized) -> None:
    (report,) = [r for r in synthesized.validation_report()["pluginReports"] if r["pluginName"] == "AwsSolutions"]
    findings = [(v["ruleName"], [c["constructPath"] for c in v["violatingConstructs"]]) for v in report["violations"]]
    assert findings == [], synthesized.error
    assert report["conclusion"] == "success"


def test_every_acknowledged_finding_has_a_reason(synthesized: Synthesized) -> None:
    (report,) = [r for r in synthesized.validation_report()["pluginReports"] if r["pluginName"] == "AwsSolutions"]
    suppressed = report["suppressedViolations"]
    assert suppressed, "expected the acknowledged findings in the report"
    known_reasons = set(REASONS.values())
    for finding in suppressed:
        assert finding["reason"] in known_reasons, finding["ruleName"]
        assert len(finding["reason"]) > 40
    # What is acknowledged, by rule: nothing beyond these kinds.
    rules = {f["ruleName"].split("[", 1)[0] for f in suppressed}
    allowed = {"AwsSolutions-IAM4", "AwsSolutions-IAM5", "AwsSolutions-L1", "AwsSolutions-SMG4", "AwsSolutions-SQS3"}
    assert rules <= allowed
    # SQS3 ("no DLQ") only for the delivery DLQs, which are dead-letter queues themselves
    sqs3 = {
        c["constructPath"]
        for f in suppressed
        if f["ruleName"].startswith("AwsSolutions-SQS3")
        for c in f["violatingConstructs"]
    }
    assert sqs3 == {
        f"{stack}/Queues/{name}DeliveryDlq/Resource"
        for stack in ("Nodeflow-demo", "Nodeflow-prod-east", "Nodeflow-hmac")
        for name in ("Events", "Schedules")
    }


@pytest.mark.parametrize("which", ["default", "full", "hmac"])
def test_cfn_lint_is_clean(synthesized: Synthesized, which: str) -> None:
    from cfnlint.api import ManualArgs, lint_file

    path = synthesized.outdir / f"{synthesized.stack_name(which)}.template.json"
    matches = lint_file(path, ManualArgs(ignore_checks=["W3005"], regions=["us-east-1"]))
    assert [str(m) for m in matches] == []
