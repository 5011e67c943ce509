"""nodeflow.aws.session: sessions share the parsed service models, not their credentials."""

from __future__ import annotations

from typing import Any

import botocore.loaders
import pytest

from nodeflow.aws.session import new_session


def test_a_second_session_reads_no_model_file_again(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[str] = []
    real = botocore.loaders.JSONFileLoader.load_file

    def counting(self: Any, file_path: str, *args: Any, **kwargs: Any) -> Any:
        reads.append(file_path)
        return real(self, file_path, *args, **kwargs)

    monkeypatch.setattr(botocore.loaders.JSONFileLoader, "load_file", counting)
    new_session(region_name="eu-west-1").client("stepfunctions")
    second = len(reads)
    new_session().client("stepfunctions", region_name="us-west-2")
    assert len(reads) == second, reads[second:]  # Step Functions' model was read once, by the sessions before


def test_sessions_keep_their_own_credentials_and_region() -> None:
    a = new_session(aws_access_key_id="AKIAA", aws_secret_access_key="a", region_name="us-east-1")
    b = new_session(aws_access_key_id="AKIAB", aws_secret_access_key="b", region_name="eu-west-1")
    assert a.get_credentials().access_key == "AKIAA"
    assert b.get_credentials().access_key == "AKIAB"
    assert (a.region_name, b.region_name) == ("us-east-1", "eu-west-1")
