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
from nodeflow.governance.decisions import NODECLAIM, Decision, write_items

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

    assert writer.write(records) == 4 * (BATCH + 1) + 1  # records, pods, one NodePool pointer for all four
    assert records.sent_before_last is True
    expected = write_items(records)
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


def test_a_writes_nodepool_pointers_are_one_item_per_nodepool_not_one_per_record() -> None:
    """A 20,000-pod run's 4,900 NodeClaim records each had a NodePool pointer item of their own (a sixth of its
    ~30,000 items and BatchWriteItem calls); now one item names every record of the write naming that NodePool
    (POOL_REFS at most). Here 100 records of one pod each: 201 items in 9 calls (300 in 12 before)."""
    from nodeflow.governance.decisions import pointer_refs

    calls: list[int] = []

    class Table(_Table):
        def batch_write_item(self, RequestItems: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
            calls.append(sum(map(len, RequestItems.values())))
            return super().batch_write_item(RequestItems)

    table = Table()
    pools = [("default",)] * 99 + [("default", "gpu")]
    records = [
        Decision(NODECLAIM, AT, f"run-{n:04d}", "run", "NodeClaim", p, (f"a/p-{n}",), 1) for n, p in enumerate(pools)
    ]
    assert DecisionLog(table, "decisions").write(records) == 100 + 100 + 2
    assert len(calls) == 9
    pointers = [i for i in table.items if i["pk"]["S"].startswith("NODEPOOL#")]
    assert sorted(i["pk"]["S"].split("#")[1] for i in pointers) == ["default", "gpu"]
    record_keys = {(i["pk"]["S"], i["sk"]["S"]) for i in table.items if i["pk"]["S"].startswith("DECISION#")}
    named = {i["pk"]["S"].split("#")[1]: set(pointer_refs(i)) for i in pointers}
    assert named["default"] == record_keys
    assert len(named["gpu"]) == 1
    assert named["gpu"] < record_keys


def test_a_nodepool_pointer_not_written_leaves_the_records_it_names_to_be_written_again() -> None:
    """One pointer item names many records: when it is not written, none of them is remembered as written (the next
    run writes them again, so --nodepool finds them), and the records of the other NodePool are."""

    class Table(_Table):
        def batch_write_item(self, RequestItems: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
            requests = RequestItems["decisions"]
            refused = [r for r in requests if r["PutRequest"]["Item"]["pk"]["S"].startswith("NODEPOOL#a#")]
            super().batch_write_item({"decisions": [r for r in requests if r not in refused]})
            return {"UnprocessedItems": {"decisions": refused} if refused else {}}

    records = [
        Decision(
            NODECLAIM, AT, f"run-{n:04d}", "run", f"NodeClaim {n}", (pool,), tuple(f"t/p{n}-{i}" for i in range(24)), 24
        )
        for n, pool in enumerate("aabb")
    ]
    remembered: set[str] = set()
    writer = DecisionLog(Table(), "decisions", remembered=remembered, sleep=lambda _s: None)
    assert writer.write(records) == 4 * 25 + 1
    assert writer.failed == 1
    again = [d.id for d in records if DecisionLog(_Table(), "decisions", remembered=set(remembered)).write([d]) > 0]
    assert again == ["run-0000", "run-0001"]


def _body(client: Any, item: dict[str, Any]) -> bytes:
    """The body ``client`` sends for a BatchWriteItem of ``item`` (stopped before the network)."""
    seen: list[bytes] = []

    def stop(request: Any, **_kwargs: Any) -> None:
        seen.append(request.body)
        raise _Sent

    client.meta.events.register("before-send.dynamodb.BatchWriteItem", stop)
    with pytest.raises(_Sent):
        client.batch_write_item(RequestItems={"shop-decisions": [{"PutRequest": {"Item": item}}]})
    client.meta.events.unregister("before-send.dynamodb.BatchWriteItem", stop)
    return seen[0]


def test_the_decision_logs_batch_writes_are_json_encoded_not_walked_by_botocore(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """botocore's serializer walked every attribute of every item in Python (~0.25 s of CPU for a 20,000-pod run's
    ~1,000 calls); the log's client writes the body with ``json`` in C: the same bytes as botocore's for every kind of
    attribute value, and botocore's own serializer still for what ``json`` cannot write (a ``B`` value's bytes)."""
    import boto3
    import botocore.serialize
    from botocore.config import Config

    from nodeflow.handlers.runtime import Runtime, Settings

    for name, value in {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    rt = Runtime(Settings(cluster_name="shop", region="us-east-1", decision_table_name="shop-decisions"))
    ours = rt.decision_client()
    plain = boto3.client("dynamodb", region_name="us-east-1", config=Config(parameter_validation=False))
    item = {
        "pk": {"S": "DECISION#2026-03-01#07"},
        "sk": {"S": "2026-03-01T12:00:00.000Z#run-0001"},
        "body": {"S": '{"summary":"caf\u00e9 \u2713 \\"q\\"\\n","pods":["a/b"]}'},
        "ttl": {"N": "1780000000"},
        "flag": {"BOOL": True},
        "none": {"NULL": True},
        "list": {"L": [{"S": "x"}, {"N": "1.5"}, {"M": {"k": {"SS": ["a", "b"]}}}]},
    }
    walked: list[str] = []
    real = botocore.serialize.JSONSerializer._serialize_type_structure

    def counted(self: Any, serialized: Any, value: Any, shape: Any, key: Any) -> None:
        walked.append(shape.name)
        real(self, serialized, value, shape, key)

    monkeypatch.setattr(botocore.serialize.JSONSerializer, "_serialize_type_structure", counted)
    expected = _body(plain, item)
    assert len(walked) > 10
    walked.clear()
    assert _body(ours, item) == expected
    assert walked == ["BatchWriteItemInput"]  # the request without its items: botocore's method, path and headers
    blob = {"pk": {"S": "a"}, "sk": {"S": "b"}, "data": {"B": b"\x00\xff"}}
    assert _body(ours, blob) == _body(plain, blob)  # base64, by botocore's serializer
