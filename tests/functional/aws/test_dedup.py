"""Seen-before records (nonces, event ids) in moto DynamoDB: expiry checked in the conditions,
claims with leases, release, and chunks over the 100-item transaction limit."""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from nodeflow.aws.dedup import SeenRecords

NOW = 1_790_000_000.0


@pytest.fixture
def seen(aws_env: None) -> Iterator[SeenRecords]:
    with mock_aws():
        ddb = boto3.client("dynamodb", region_name="us-east-1")
        ddb.create_table(
            TableName="t",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        yield SeenRecords(ddb, "t")


def test_nonce_is_a_replay_until_it_expires(seen: SeenRecords) -> None:
    assert seen.claim_nonce("n1", NOW, 600)
    assert not seen.claim_nonce("n1", NOW + 599, 600)
    assert seen.claim_nonce("n1", NOW + 601, 600)  # expired (TTL deletion is eventual)
    assert seen.claim_nonce("n2", NOW, 600)


def test_event_claims_confirm_release_and_lease(seen: SeenRecords) -> None:
    claim = {"lease_seconds": 60, "ttl_seconds": 3600}
    assert seen.claim_events(["a", "b", "a"], NOW, **claim) == ["a", "b"]
    assert seen.claim_events(["a", "c"], NOW + 1, **claim) == ["c"]  # a is pending, its lease holds
    seen.confirm_events(["a"], NOW + 2, 3600)
    seen.release_events(["b"])
    assert seen.claim_events(["a", "b"], NOW + 3, **claim) == ["b"]  # released: the retry gets through
    # c was claimed and never confirmed (the webhook died): after its lease another claim wins
    assert seen.claim_events(["c"], NOW + 30, **claim) == []
    assert seen.claim_events(["c"], NOW + 62, **claim) == ["c"]
    # a confirmed id stays a duplicate until its TTL
    assert seen.claim_events(["a"], NOW + 3000, **claim) == []
    assert seen.claim_events(["a"], NOW + 3603, **claim) == ["a"]


def test_more_ids_than_one_transaction_holds(seen: SeenRecords) -> None:
    ids = [f"id-{i:04d}" for i in range(250)]
    assert seen.claim_events(ids[:120], NOW, lease_seconds=60, ttl_seconds=3600) == ids[:120]
    assert seen.claim_events(ids, NOW, lease_seconds=60, ttl_seconds=3600) == ids[120:]
