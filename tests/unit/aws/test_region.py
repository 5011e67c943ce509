"""One region rule for every command that talks to AWS (``nodeflow.aws.region``): --region, AWS_REGION,
AWS_DEFAULT_REGION, the profile's region in the AWS config file, in that order."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeflow.aws.region import NoRegion, aws_session, region_from_env, resolve_region


@pytest.mark.parametrize(
    ("flag", "env", "profile", "want"),
    [
        ("ap-south-1", {"AWS_REGION": "eu-west-1", "AWS_DEFAULT_REGION": "us-west-2"}, "sa-east-1", "ap-south-1"),
        (None, {"AWS_REGION": "eu-west-1", "AWS_DEFAULT_REGION": "us-west-2"}, "sa-east-1", "eu-west-1"),
        (None, {"AWS_REGION": " ", "AWS_DEFAULT_REGION": "us-west-2"}, "sa-east-1", "us-west-2"),
        (None, {}, "sa-east-1", "sa-east-1"),
        ("", {}, None, None),
    ],
)
def test_the_rule(flag: str | None, env: dict[str, str], profile: str | None, want: str | None) -> None:
    assert resolve_region(flag, env, profile) == want


def test_the_environment_alone_as_the_lambda_runtime_reads_it() -> None:
    assert region_from_env({"AWS_REGION": "eu-west-1", "AWS_DEFAULT_REGION": "us-west-2"}) == "eu-west-1"
    assert region_from_env({"AWS_DEFAULT_REGION": "us-west-2"}) == "us-west-2"
    assert region_from_env({}) is None


def test_sessions_follow_the_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config"
    config.write_text("[default]\nregion = sa-east-1\n[profile other]\nregion = ca-central-1\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    for key in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    assert aws_session().region_name == "sa-east-1"
    assert aws_session(profile="other").region_name == "ca-central-1"
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")
    assert aws_session(profile="other").region_name == "us-west-2"
    monkeypatch.setenv("AWS_REGION", "eu-west-1")  # what boto3.Session() alone ignores
    assert aws_session(profile="other").region_name == "eu-west-1"
    assert aws_session("ap-south-1").region_name == "ap-south-1"
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    for key in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(key)
    with pytest.raises(NoRegion, match="--region: no region given"):
        aws_session()
