"""The decision log's writer, cheaply (issue 31: the log costs at most 10 % of a 20,000-pod provisioner run): its
batches go out while later records are still being rendered, and its DynamoDB client skips botocore's
per-attribute parameter validation. A fake DynamoDB client records the calls (moto: tests/functional)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from nodeflow.aws.decision_log import BATCH, DecisionLog
from nodeflow.governance.decisions import NODECLAIM, Decision, index_items, to_item

AT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _record(n: int) -> Decision:
    pods = tuple(f"team-{n}/web-{i}" for i in range(BATCH))  # a record and its pointers: more than one batch
    return Decision(NODECLAIM, AT, f"run-{n:04d}", "run", f"NodeClaim {n}", ("default",), pods, len(pods))


class _Table:
    """BatchWriteItem that writes everything; ``sent`` is set by the first call."""

    def __init__(self) -> None:
        self.sent = threading.Event()
        self.items: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def batch_write_item(self, RequestItems: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
        with self.lock:
            for requests in RequestItems.values():
                self.items += [r["PutRequest"]["Item"] for r in requests]
        self.sent.set()
        return {"UnprocessedItems": {}}


class _Records(list[Decision]):
    """The run's records, handed out one by one; the last only once a batch was sent (or after ``wait`` seconds)."""

    def __init__(self, records: list[Decision], sent: threading.Event, wait: float) -> None:
        super().__init__(records)
        self.sent, self.wait = sent, wait
        self.sent_before_last: bool | None = None

    def __iter__(self) -> Iterator[Decision]:
        for n, record in enumerate(list.__iter__(self)):
            if n == len(self) - 1:
                self.sent_before_last = self.sent.wait(self.wait)
            yield record


def test_batches_are_sent_while_later_records_are_still_being_rendered() -> None:
    """Rendering a 20,000-pod run's ~30,000 items took seconds before the first BatchWriteItem left; now each batch
    goes out as soon as it is built, so the network waits overlap the rendering. Fails when every item is built
    first (the last record is then handed out after ``wait`` without a batch sent)."""
    table = _Table()
    records = _Records([_record(n) for n in range(4)], table.sent, wait=5.0)
    writer = DecisionLog(table, "decisions", workers=2)

    assert writer.write(records) == 4 * (BATCH + 2)
    assert records.sent_before_last is True
    expected = [item for d in records for item in (to_item(d), *index_items(d))]
    key = lambda item: (item["pk"]["S"], item["sk"]["S"])  # noqa: E731
    assert sorted(table.items, key=key) == sorted(expected, key=key)  # the same items, written once each


def test_one_batch_is_sent_on_the_callers_thread() -> None:
    """A disruption round's few records: no thread pool."""
    seen: list[str] = []

    class Table(_Table):
        def batch_write_item(self, RequestItems: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
            seen.append(threading.current_thread().name)
            return super().batch_write_item(RequestItems)

    record = Decision(NODECLAIM, AT, "run-0001", "run", "NodeClaim", ("default",), ("a/b",), 1)
    assert DecisionLog(Table(), "decisions").write([record]) == 3
    assert seen == [threading.current_thread().name]


class _Sent(Exception):
    """The request reached the network (stopped there: no network in unit tests)."""


def _stop(**_kwargs: Any) -> None:
    raise _Sent


def test_the_decision_logs_client_skips_botocores_parameter_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore validates every attribute of every item on the client: 0.6 s of the 3.7 s of CPU the log took in a
    20,000-pod run (benchmarks/decision_log.py). The items are the log's own, and an item DynamoDB refuses is still
    reported and sent alone. Here an attribute botocore would refuse (a number given as an int) gets to the send."""
    from nodeflow.handlers.runtime import Runtime, Settings

    for name, value in {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    rt = Runtime(Settings(cluster_name="shop", region="us-east-1", decision_table_name="shop-decisions"))
    client = rt.decision_client()
    client.meta.events.register("before-send.dynamodb.BatchWriteItem", _stop)
    item = {"pk": {"S": "a"}, "sk": {"S": "b"}, "ttl": {"N": 5}}
    with pytest.raises(_Sent):
        client.batch_write_item(RequestItems={"shop-decisions": [{"PutRequest": {"Item": item}}]})
