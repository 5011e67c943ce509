"""The decision log in DynamoDB (layout: ``nodeflow.governance.decisions``): the writer the provisioner and the
disruption Lambda hand their records to, and the reader of ``python -m nodeflow decisions``.

Writing never fails the caller and never holds it past its deadline: it runs after the NodeClaims are created and
their launches started, in chunks of 25 (BatchWriteItem) on a few threads, each chunk sent as soon as its items are
rendered (the network waits overlap the rendering of the rest), re-sending throttled and unprocessed
items with a short backoff until ``time_left`` (the handlers: the Lambda's remaining time less a margin) runs out.
A batch DynamoDB refuses as invalid (one item too big, say) is sent again item by item, so only the bad item is
lost. What is not written is logged and counted: ``failed`` (refused, or still throttled after the retries) and
``late`` (the deadline came first); the handlers publish them as the ``DecisionLogWriteErrors`` and
``DecisionLogWriteTimeouts`` metrics (both alarmed).

Must not touch: what a record says (``nodeflow.governance.decisions``); the caller's outcome (writing never fails it).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from nodeflow.aws.errors import AwsUnavailable, InvalidRequest, Throttled, aws_errors
from nodeflow.governance.decisions import (
    DEFAULT_TTL_DAYS,
    MAX_TTL_DAYS,
    Decision,
    PoolRef,
    day_partitions,
    from_item,
    item_count,
    nodepool_partitions,
    pod_partition,
    pointer_refs,
    pool_pointers,
    stored,
    time_key,
)

__all__ = ["BATCH", "DecisionLog", "encode_batch_writes", "read_decisions"]

BATCH = 25  # BatchWriteItem's limit
GET_BATCH = 100  # BatchGetItem's limit
WORKERS = 8
# A burst (a provisioner run for 20,000 pods writes ~16,000 WCU) is spread over SHARDS partition keys of at most
# 1,000 WCU a second each: throttled items are sent again for about 3.5 s (0.05, 0.1, ... 0.8, then 1 s apart),
# never past the writer's deadline.
ATTEMPTS = 8
FIRST_DELAY = 0.05
MAX_DELAY = 1.0
READ_WORKERS = 8  # partitions queried at once (a day's records are SHARDS partitions)
READ_MARGIN = 200  # records read past a ``limit`` (records of one time sorted by id; filtered by time and TTL)
SAMPLES = 5  # errors quoted in a write's log line


MAX_REMEMBERED = 20_000


def _noop(_message: str, _extra: dict[str, Any]) -> None:
    return None


def _key(d: Decision) -> str:
    """What ``remembered`` holds: the record's key, and its pods' digest (an hour's unschedulable group that a pod
    joined is written again, so the new pod gets its index item)."""
    key = f"{d.at.date().isoformat()}#{d.sk}"
    if d.pods:
        key += "#" + hashlib.sha256("\n".join(d.pods).encode()).hexdigest()[:16]
    return key


def _item_key(request: Mapping[str, Any]) -> tuple[str, str]:
    item = request["PutRequest"]["Item"]
    return item["pk"]["S"], item["sk"]["S"]


@dataclass
class _Write:
    """One ``write`` call's tally (its workers add to it under the log's lock)."""

    written: int = 0
    failed: int = 0
    late: int = 0
    errors: list[str] = field(default_factory=list)


@dataclass
class DecisionLog:
    """Writes decision records to table ``table_name`` (``dynamodb``: a boto3 client). ``written`` / ``failed`` /
    ``late`` count items (records and their index items) over the object's life (one per invocation in the
    handlers). ``time_left``: the seconds the writes may still take (None: no deadline); when it reaches 0, what is
    not written yet is counted ``late`` and the write returns."""

    dynamodb: Any
    table_name: str
    ttl_days: int = DEFAULT_TTL_DAYS
    workers: int = WORKERS
    log: Callable[[str, dict[str, Any]], None] = _noop
    sleep: Callable[[float], None] = time.sleep
    time_left: Callable[[], float] | None = None
    written: int = 0
    failed: int = 0
    late: int = 0
    # Record keys this container wrote already (kept across invocations by the runtime): a record with the same key
    # (a blocked candidate's, per hour) is not written again. A key is remembered once every item of its record is
    # written (a record that failed is tried again by the next run). Bounded: cleared past ``MAX_REMEMBERED`` keys.
    remembered: set[str] | None = None
    skipped: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def write(self, decisions: Sequence[Decision]) -> int:
        """Write ``decisions`` with their NodePool and pod index items; returns the items written. Never raises."""
        if self.remembered is not None:
            with self._lock:
                if len(self.remembered) > MAX_REMEMBERED:
                    self.remembered.clear()
                fresh = [d for d in decisions if _key(d) not in self.remembered]
                self.skipped += len(decisions) - len(fresh)
            decisions = fresh
        tally = _Write()
        if self._out_of_time():  # no time to build them either: counted as the items they would have made
            tally.late = item_count(decisions)
            tally.errors.append("the deadline came before the write")
            broken = set(range(len(decisions)))
        else:
            broken = self._write_all(decisions, tally)
        if self.remembered is not None:
            with self._lock:
                self.remembered.update(_key(d) for n, d in enumerate(decisions) if n not in broken)
        with self._lock:
            self.written += tally.written
            self.failed += tally.failed
            self.late += tally.late
        if tally.failed or tally.late:
            self.log(
                "decision log: items not written",
                {
                    "table": self.table_name,
                    "written": tally.written,
                    "failed": tally.failed,
                    "late": tally.late,  # the deadline came first
                    "records": len(broken),
                    "errors": tally.errors[:SAMPLES],
                },
            )
        return tally.written

    def _write_all(self, decisions: Sequence[Decision], tally: _Write) -> set[int]:
        """Build the items of ``decisions`` and write them in chunks of BATCH, each chunk sent as soon as it is built
        (the first BatchWriteItem does not wait for the last record to be rendered), the NodePool pointers (one item
        names many records) last; the records (indexes) not written whole."""
        owners: list[Sequence[int]] = []  # the records (indexes into ``decisions``) of each request
        broken: set[int] = set()

        def rendered_items() -> Iterator[tuple[Sequence[int], dict[str, Any]]]:
            """(the records it belongs to, item) in the order written."""
            refs: list[PoolRef] = []
            rendered: list[int] = []  # the record of each of ``refs``
            for n, d in enumerate(decisions):
                try:  # a record that cannot be stored is a bug, not a reason to fail a launch or the other records
                    made, ref = stored(d, self.ttl_days)
                except Exception as exc:
                    broken.add(n)
                    self._count(tally, failed=1, error=f"record {d.id}: {type(exc).__name__}: {str(exc)[:300]}")
                    continue
                refs.append(ref)
                rendered.append(n)
                mine = (n,)
                for item in made:
                    yield mine, item
            for item, named in pool_pointers(refs):
                yield [rendered[i] for i in named], item

        def chunks() -> Iterator[tuple[list[int], list[dict[str, Any]]]]:
            """(positions, requests) of BATCH requests at a time, as the records' items are built."""
            chunk: list[dict[str, Any]] = []
            for mine, item in rendered_items():
                owners.append(mine)
                chunk.append({"PutRequest": {"Item": item}})
                if len(chunk) == BATCH:
                    yield list(range(len(owners) - BATCH, len(owners))), chunk
                    chunk = []
            if chunk:
                yield list(range(len(owners) - len(chunk), len(owners))), chunk

        def send(positions: list[int], chunk: list[dict[str, Any]]) -> set[int]:
            return {positions[i] for i in self._send(chunk, tally)}

        built = chunks()
        first = next(built, None)
        second = next(built, None) if first is not None else None
        unwritten: set[int] = set()
        if first is None:
            pass
        elif second is None or self.workers <= 1:  # one batch (a disruption round's few records): no threads
            for positions, chunk in itertools.chain((first,), () if second is None else (second,), built):
                unwritten |= send(positions, chunk)
        else:
            with ThreadPoolExecutor(max_workers=self.workers) as pool:
                futures = [pool.submit(send, *c) for c in itertools.chain((first, second), built)]
                for future in futures:
                    unwritten |= future.result()
        return broken | {n for p in unwritten for n in owners[p]}

    __call__ = write  # the provisioner's and the disruption round's ``decisions`` hook

    def _out_of_time(self) -> bool:
        return self.time_left is not None and self.time_left() <= 0

    def _send(self, chunk: list[dict[str, Any]], tally: _Write) -> set[int]:
        """Write ``chunk`` (at most BATCH requests); returns the positions of the items not written (counted in
        ``tally``). Throttled and unprocessed items are sent again; a batch refused as invalid item by item."""
        pending = list(range(len(chunk)))
        delay = FIRST_DELAY
        error = ""
        for attempt in range(ATTEMPTS):
            if self._out_of_time():
                self._count(tally, late=len(pending), error=f"the deadline came ({error or 'before a first try'})")
                return set(pending)
            try:
                with aws_errors():
                    out = self.dynamodb.batch_write_item(RequestItems={self.table_name: [chunk[p] for p in pending]})
            except InvalidRequest as exc:  # one bad item refuses the batch: each alone, only the bad one lost
                if len(pending) > 1:
                    return {pending[i] for i in self._each([chunk[p] for p in pending], tally)}
                self._count(tally, failed=1, error=f"item {'/'.join(_item_key(chunk[pending[0]]))}: {exc}")
                return set(pending)
            except (Throttled, AwsUnavailable) as exc:  # the whole batch throttled (or 5xx): again, after a pause
                error = f"{type(exc).__name__}: {str(exc)[:300]}"
            except Exception as exc:  # denied, no table, ...: retrying cannot help
                self._count(tally, failed=len(pending), error=f"{type(exc).__name__}: {str(exc)[:300]}")
                return set(pending)
            else:
                left = {_item_key(r) for r in (out.get("UnprocessedItems") or {}).get(self.table_name, ())}
                self._count(tally, written=len(pending) - len(left))
                pending = [p for p in pending if _item_key(chunk[p]) in left]
                error = "unprocessed items (throttled)"
            if not pending:
                return set()
            if attempt < ATTEMPTS - 1:
                pause = delay if self.time_left is None else min(delay, max(0.0, self.time_left()))
                if pause > 0:
                    self.sleep(pause)
                delay = min(delay * 2, MAX_DELAY)
        self._count(tally, failed=len(pending), error=f"after {ATTEMPTS} attempts: {error}")
        return set(pending)

    def _each(self, chunk: list[dict[str, Any]], tally: _Write) -> set[int]:
        """The items of a refused batch one at a time; the positions not written."""
        return {n for n, request in enumerate(chunk) if self._send([request], tally)}

    def _count(self, tally: _Write, *, written: int = 0, failed: int = 0, late: int = 0, error: str = "") -> None:
        with self._lock:
            tally.written += written
            tally.failed += failed
            tally.late += late
            if error and len(tally.errors) < SAMPLES:
                tally.errors.append(error[:500])


class _BatchWriteEncoder:
    """A client's serializer (botocore's JSON protocol one) whose BatchWriteItem bodies are ``json.dumps`` of the
    parameters, in C: for DynamoDB's attribute values that is byte for byte what botocore's serializer makes after
    walking every value in Python (~230,000 nested structures for a 20,000-pod run's 1,193 calls, ~0.25 s of CPU).
    A value ``json`` cannot write (bytes of a ``B`` attribute, which botocore base64-encodes) goes to botocore's.
    Everything else of the request (method, path, headers) is botocore's own, from the same call without items."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def serialize_to_request(self, parameters: Any, operation_model: Any) -> Any:
        if operation_model.name != "BatchWriteItem":
            return self._inner.serialize_to_request(parameters, operation_model)
        try:
            body = json.dumps(parameters).encode()
        except (TypeError, ValueError):
            return self._inner.serialize_to_request(parameters, operation_model)
        request = self._inner.serialize_to_request({"RequestItems": {}}, operation_model)
        request["body"] = body
        return request

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def encode_batch_writes(dynamodb: Any) -> Any:
    """``dynamodb`` (a boto3 client) with its BatchWriteItem bodies written by ``json`` (``_BatchWriteEncoder``);
    a client whose serializer is not botocore's JSON one is returned as it is."""
    inner = getattr(dynamodb, "_serializer", None)
    if type(inner).__name__ == "JSONSerializer":
        dynamodb._serializer = _BatchWriteEncoder(inner)
    return dynamodb


def _query(dynamodb: Any, table: str, pk: str, since: str) -> Iterable[Mapping[str, Any]]:
    kwargs: dict[str, Any] = {
        "TableName": table,
        "KeyConditionExpression": "pk = :pk AND sk >= :since",
        "ExpressionAttributeValues": {":pk": {"S": pk}, ":since": {"S": since}},
        "ScanIndexForward": False,
    }
    while True:
        with aws_errors():
            page = dynamodb.query(**kwargs)
        yield from page.get("Items", [])
        last = page.get("LastEvaluatedKey")
        if not last:
            return
        kwargs["ExclusiveStartKey"] = last


def _get(dynamodb: Any, table: str, keys: Sequence[tuple[str, str]]) -> list[Mapping[str, Any]]:
    out: list[Mapping[str, Any]] = []
    for i in range(0, len(keys), GET_BATCH):
        pending: dict[str, Any] = {
            table: {"Keys": [{"pk": {"S": pk}, "sk": {"S": sk}} for pk, sk in keys[i : i + GET_BATCH]]}
        }
        for _ in range(ATTEMPTS):
            with aws_errors():
                page = dynamodb.batch_get_item(RequestItems=pending)
            out.extend(page.get("Responses", {}).get(table, []))
            pending = page.get("UnprocessedKeys") or {}
            if not pending:
                break
    return out


def _live(item: Mapping[str, Any], now: datetime) -> bool:
    """Not expired (DynamoDB's TTL deletes only eventually)."""
    ttl = item.get("ttl", {}).get("N")
    return ttl is None or int(ttl) > int(now.timestamp())


def read_decisions(
    dynamodb: Any,
    table: str,
    *,
    since: datetime,
    now: datetime,
    pod: str | None = None,
    nodepool: str | None = None,
    limit: int | None = None,
) -> list[Decision]:
    """The records since ``since``, newest first (records of the same run: the run's first): those naming ``pod``
    (namespace/name) and/or ``nodepool`` when given, else all. ``now`` decides what has expired (DynamoDB's TTL
    deletes only eventually); records stamped a little after it (a writer's clock ahead) are still found.
    Raises ``AwsError`` (the table cannot be read) or ``DecisionError`` (an item is not a record)."""
    # nothing older than the longest TTL is live: a far ``since`` (the CLI clamps it to the stack's TTL) reads no more
    since = max(since, now - timedelta(days=MAX_TTL_DAYS + 1))
    # a blocked candidate's record is keyed by its hour (its time is later): keys from the hour of ``since``
    lo = time_key(since.astimezone(UTC).replace(minute=0, second=0, microsecond=0))
    # newest first from every partition: reading stops a margin past ``limit`` (a busy NodePool's 90 days are big)
    cap = None if limit is None else limit + READ_MARGIN
    records: list[Mapping[str, Any]]

    def newest(partitions: Sequence[str]) -> list[Mapping[str, Any]]:
        """Each partition's newest items (up to ``cap`` each), read in parallel."""

        def read(pk: str) -> list[Mapping[str, Any]]:
            return list(itertools.islice(_query(dynamodb, table, pk, lo), cap))

        if len(partitions) == 1:
            return read(partitions[0])
        with ThreadPoolExecutor(max_workers=min(READ_WORKERS, len(partitions))) as pool:
            return [item for items in pool.map(read, partitions) for item in items]

    if pod is not None or nodepool is not None:
        pks = [pod_partition(pod)] if pod is not None else nodepool_partitions(nodepool or "")
        named = sorted(
            (ref for i in newest(pks) if _live(i, now) for ref in pointer_refs(i)), key=lambda r: r[1], reverse=True
        )
        keys = list(dict.fromkeys(named))[:cap]
        records = _get(dynamodb, table, keys)
    else:
        records = []
        for shards in day_partitions(since, now + timedelta(days=1)):  # a day's shards together, newest day first
            records.extend(newest(shards))
            if cap is not None and len(records) >= cap:
                break
    decisions = [d for d in (from_item(i) for i in records if _live(i, now)) if d.at >= since]
    if pod is not None and nodepool is not None:
        decisions = [d for d in decisions if nodepool in d.node_pools]
    decisions.sort(key=lambda d: d.id)  # a run's records in their order (the run record first) ...
    decisions.sort(key=lambda d: d.time, reverse=True)  # ... newest run first
    return decisions[:limit] if limit is not None else decisions
