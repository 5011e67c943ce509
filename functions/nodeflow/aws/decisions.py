"""The decision log in DynamoDB (layout: ``nodeflow.governance.decisions``): the writer the provisioner and the
disruption Lambda hand their records to, and the reader of ``python -m nodeflow decisions``.

Writing never fails the caller: it runs after the NodeClaims are created and their launches started, in chunks
of 25 (BatchWriteItem) on a few threads, re-sending unprocessed items with a short backoff; what still cannot be
written is logged and counted (``failed``; the handlers publish it as the ``DecisionLogWriteErrors`` metric).
"""

from __future__ import annotations

import hashlib
import itertools
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from nodeflow.aws.errors import Throttled, aws_errors
from nodeflow.governance.decisions import (
    DEFAULT_TTL_DAYS,
    Decision,
    day_partitions,
    from_item,
    index_items,
    nodepool_partitions,
    pod_partition,
    time_key,
    to_item,
)

__all__ = ["BATCH", "DecisionLog", "read_decisions"]

BATCH = 25  # BatchWriteItem's limit
GET_BATCH = 100  # BatchGetItem's limit
WORKERS = 8
# A burst (a provisioner run for 20,000 pods writes ~16,000 WCU) is spread over SHARDS partition keys of at most
# 1,000 WCU a second each: throttled items are sent again for about 3.5 s (0.05, 0.1, ... 0.8, then 1 s apart).
ATTEMPTS = 8
FIRST_DELAY = 0.05
MAX_DELAY = 1.0
READ_WORKERS = 8  # partitions queried at once (a day's records are SHARDS partitions)
READ_MARGIN = 200  # records read past a ``limit`` (records of one time sorted by id; filtered by time and TTL)


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


@dataclass
class DecisionLog:
    """Writes decision records to table ``table_name`` (``dynamodb``: a boto3 client). ``written`` / ``failed``
    count items (records and their index items) over the object's life (one per invocation in the handlers)."""

    dynamodb: Any
    table_name: str
    ttl_days: int = DEFAULT_TTL_DAYS
    workers: int = WORKERS
    log: Callable[[str, dict[str, Any]], None] = _noop
    sleep: Callable[[float], None] = time.sleep
    written: int = 0
    failed: int = 0
    # Record keys this container wrote already (kept across invocations by the runtime): a record with the same key
    # (a blocked candidate's, per hour) is not written again. Bounded: cleared past ``MAX_REMEMBERED`` keys.
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
                self.remembered.update(_key(d) for d in fresh)
            decisions = fresh
        try:
            requests = [
                {"PutRequest": {"Item": item}}
                for d in decisions
                for item in (to_item(d, self.ttl_days), *index_items(d, self.ttl_days))
            ]
        except Exception as exc:  # a record that cannot be stored is a bug, not a reason to fail a launch
            self.log("decision log: records not written", {"error": str(exc)[:500], "records": len(decisions)})
            with self._lock:
                self.failed += len(decisions)
            return 0
        chunks = [requests[i : i + BATCH] for i in range(0, len(requests), BATCH)]
        if len(chunks) <= 1 or self.workers <= 1:
            done = sum(self._chunk(c) for c in chunks)
        else:
            with ThreadPoolExecutor(max_workers=min(self.workers, len(chunks))) as pool:
                done = sum(pool.map(self._chunk, chunks))
        return done

    __call__ = write  # the provisioner's and the disruption round's ``decisions`` hook

    def _chunk(self, chunk: list[dict[str, Any]]) -> int:
        pending: dict[str, Any] = {self.table_name: chunk}
        delay = FIRST_DELAY
        try:
            for attempt in range(ATTEMPTS):
                try:
                    with aws_errors():
                        out = self.dynamodb.batch_write_item(RequestItems=pending)
                    pending = out.get("UnprocessedItems") or {}
                except Throttled:  # every item of the batch throttled (botocore's own retries used up): again
                    if attempt == ATTEMPTS - 1:
                        raise
                if not pending:
                    break
                if attempt < ATTEMPTS - 1:
                    self.sleep(delay)
                    delay = min(delay * 2, MAX_DELAY)
        except Exception as exc:
            self.log(
                "decision log: a batch was not written",
                {"error": f"{type(exc).__name__}: {str(exc)[:400]}", "items": len(chunk), "table": self.table_name},
            )
            with self._lock:
                self.failed += len(chunk)
            return 0
        left = len(pending.get(self.table_name, ())) if pending else 0
        if left:
            self.log("decision log: items left unprocessed", {"items": left, "table": self.table_name})
        with self._lock:
            self.written += len(chunk) - left
            self.failed += left
        return len(chunk) - left


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
        refs = sorted((i for i in newest(pks) if _live(i, now)), key=lambda i: i["sk"]["S"], reverse=True)[:cap]
        keys = list(dict.fromkeys((i["ref"]["S"], i["sk"]["S"]) for i in refs if "ref" in i))
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
