"""sandbox.motocost: DynamoDB transactions that save the items they touch, not whole tables, with moto's answers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from sandbox.motocost import cheap_sends, cheap_transactions, serial_ec2

TABLE = "seen"


@pytest.fixture
def table(aws_env: None) -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(
            TableName=TABLE,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        for i in range(50):
            client.put_item(TableName=TABLE, Item={"pk": {"S": f"old-{i}"}, "v": {"N": str(i)}})
        yield client


def _put_new(pk: str) -> dict[str, Any]:
    return {
        "Put": {
            "TableName": TABLE,
            "Item": {"pk": {"S": pk}, "v": {"N": "1"}},
            "ConditionExpression": "attribute_not_exists(pk)",
        }
    }


def _update(pk: str, value: int) -> dict[str, Any]:
    return {
        "Update": {
            "TableName": TABLE,
            "Key": {"pk": {"S": pk}},
            "UpdateExpression": "SET v = :v",
            "ExpressionAttributeValues": {":v": {"N": str(value)}},
        }
    }


def _backend() -> Any:
    from moto.dynamodb.models import dynamodb_backends

    return dynamodb_backends["123456789012"]["us-east-1"]


def test_a_cancelled_transaction_changes_nothing_and_keeps_the_table(table: Any) -> None:
    """All or nothing as in moto: a new item and an update made before the failing condition are undone; and the
    table is not replaced by a deep copy (without the fix moto rolls back by swapping in a copy of the table)."""
    before = _backend().tables[TABLE]
    with cheap_transactions(), pytest.raises(ClientError) as caught:
        table.transact_write_items(TransactItems=[_put_new("new-1"), _update("old-3", 99), _put_new("old-7")])
    assert caught.value.response["Error"]["Code"] == "TransactionCanceledException"
    reasons = [r["Code"] for r in caught.value.response["CancellationReasons"]]
    assert reasons == ["None", "None", "ConditionalCheckFailed"]
    assert "Item" not in table.get_item(TableName=TABLE, Key={"pk": {"S": "new-1"}})
    assert table.get_item(TableName=TABLE, Key={"pk": {"S": "old-3"}})["Item"]["v"] == {"N": "3"}
    assert table.scan(TableName=TABLE)["Count"] == 50
    assert _backend().tables[TABLE] is before


def test_a_transaction_that_succeeds_writes_every_item_without_copying_the_table(
    table: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from moto.dynamodb import models
    from moto.dynamodb.models.table import Table

    copied: list[str] = []
    real = vars(models)["copy"].deepcopy
    with cheap_transactions():
        inner = vars(models)["copy"].deepcopy

        def counting(value: Any, memo: Any = None) -> Any:
            out = inner(value, memo)
            if isinstance(value, Table) and out is not value:
                copied.append(value.name)
            return out

        monkeypatch.setattr(vars(models)["copy"], "deepcopy", counting)
        table.transact_write_items(TransactItems=[_put_new("new-2"), _update("old-4", 40)])
        monkeypatch.undo()
    assert table.get_item(TableName=TABLE, Key={"pk": {"S": "new-2"}})["Item"]["v"] == {"N": "1"}
    assert table.get_item(TableName=TABLE, Key={"pk": {"S": "old-4"}})["Item"]["v"] == {"N": "40"}
    assert copied == []
    assert vars(models)["copy"].deepcopy is real  # restored on exit


@pytest.fixture
def sqs(aws_env: None) -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("sqs", region_name="us-east-1")


def test_a_send_to_a_standard_queue_does_not_count_its_messages(sqs: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the fix every send builds the queue's attributes, which counts every message on it."""
    from moto.sqs import models

    counted: list[int] = []
    real = models.Queue.__dict__["approximate_number_of_messages"]

    def counting(self: Any) -> int:
        counted.append(1)
        return int(real.fget(self))

    monkeypatch.setattr(models.Queue, "approximate_number_of_messages", property(counting))
    url = sqs.create_queue(QueueName="events")["QueueUrl"]
    with cheap_sends():
        for i in range(5):
            sqs.send_message(QueueUrl=url, MessageBody=f"event {i}")
        assert counted == []
        depth = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
    assert depth["Attributes"]["ApproximateNumberOfMessages"] == "5"


def test_a_fifo_queue_still_deduplicates_by_content(sqs: Any) -> None:
    url = sqs.create_queue(
        QueueName="events.fifo", Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    )["QueueUrl"]
    with cheap_sends():
        for _ in range(2):
            sqs.send_message(QueueUrl=url, MessageBody="same", MessageGroupId="g")
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
    assert [m["Body"] for m in got["Messages"]] == ["same"]


def test_ec2_requests_do_not_interleave(aws_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two threads' DescribeTags: without serial_ec2 the second starts while the first is inside moto (the tags
    dict a concurrent CreateFleet changes is iterated there)."""
    import threading
    import time

    from moto.ec2.models import EC2Backend

    seen: list[str] = []
    real = EC2Backend.describe_tags

    def slow(self: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append("in")
        time.sleep(0.2)
        seen.append("out")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(EC2Backend, "describe_tags", slow)
    with mock_aws(), serial_ec2():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        threads = [threading.Thread(target=ec2.describe_tags) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert seen == ["in", "out", "in", "out"]
