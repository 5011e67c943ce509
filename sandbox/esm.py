"""An SQS event-source mapping like Lambda's, for one queue and one function, in a thread.

It long-polls the queue; the first message opens a batch, which closes after
``window_seconds`` (``MaximumBatchingWindowInSeconds``) or at ``batch_size`` messages; then the
function is invoked with the records and, when it succeeds, the messages are deleted (except those
it lists in ``batchItemFailures``). A failed invocation leaves them for SQS to deliver again. One
batch at a time (the provisioner runs with a concurrency of one).

``batches`` records each invocation: the messages' SentTimestamps, when the batch opened and when
the function was invoked, for latency figures.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BatchRecord", "SqsEventSource", "unschedulable_pods"]


@dataclass(frozen=True)
class BatchRecord:
    records: list[dict[str, Any]]
    sent_at: list[float]  # epoch seconds of each message's SentTimestamp
    opened_at: float  # epoch seconds when the first message was received
    invoked_at: float  # epoch seconds when the function was invoked
    ok: bool
    result: Any = None


def unschedulable_pods(batches: list[BatchRecord]) -> dict[str, tuple[float, float]]:
    """Pod name -> (SentTimestamp, invoked_at) of the first batch that carried its Pod Unschedulable event."""
    out: dict[str, tuple[float, float]] = {}
    for b in batches:
        for record, sent in zip(b.records, b.sent_at, strict=False):
            body = json.loads(record["body"])
            if body.get("detail-type") == "Pod Unschedulable":
                out.setdefault(body["detail"]["object"]["name"], (sent, b.invoked_at))
    return out


@dataclass
class SqsEventSource:
    sqs: Any  # boto3 client
    queue_url: str
    queue_arn: str
    invoke: Callable[[dict[str, Any]], Any]
    batch_size: int = 10
    window_seconds: float = 1.0
    poll_seconds: float = 0.05
    batches: list[BatchRecord] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def start(self) -> SqsEventSource:
        self._thread = threading.Thread(target=self._run, name="sqs-event-source", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> SqsEventSource:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def snapshot(self) -> list[BatchRecord]:
        with self._lock:
            return list(self.batches)

    def wait_for(self, predicate: Callable[[list[BatchRecord]], bool], timeout: float = 30.0) -> list[BatchRecord]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            batches = self.snapshot()
            if predicate(batches):
                return batches
            time.sleep(0.02)
        raise TimeoutError(f"event source: condition not met in {timeout}s (batches: {len(self.snapshot())})")

    # ------------------------------------------------------------------ the loop

    def _receive(self, count: int) -> list[dict[str, Any]]:
        out = self.sqs.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=max(1, min(10, count)),
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        return list(out.get("Messages", []))

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._poll_once()
            except Exception as exc:  # keep polling, as the real mapping does
                self.errors.append(f"{type(exc).__name__}: {exc}")
                time.sleep(self.poll_seconds)

    def _poll_once(self) -> None:
        messages = self._receive(self.batch_size)
        if not messages:
            time.sleep(self.poll_seconds)
            return
        opened = time.time()
        while len(messages) < self.batch_size and time.time() - opened < self.window_seconds:
            more = self._receive(self.batch_size - len(messages))
            if more:
                messages.extend(more)
            else:
                time.sleep(min(self.poll_seconds, max(0.0, self.window_seconds - (time.time() - opened))))
        records = [self._record(m) for m in messages]
        invoked = time.time()
        ok, result = True, None
        try:
            result = self.invoke({"Records": records})
        except Exception as exc:
            ok, result = False, f"{type(exc).__name__}: {exc}"
        if ok:
            listed = result.get("batchItemFailures", []) if isinstance(result, dict) else []
            failures = {str(f.get("itemIdentifier")) for f in listed if isinstance(f, dict)}
            for m in messages:
                if m["MessageId"] not in failures:
                    self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=m["ReceiptHandle"])
        sent = [int(m.get("Attributes", {}).get("SentTimestamp", "0")) / 1000 for m in messages]
        with self._lock:
            self.batches.append(BatchRecord(records, sent, opened, invoked, ok, result))

    def _record(self, m: dict[str, Any]) -> dict[str, Any]:
        return {
            "messageId": m["MessageId"],
            "receiptHandle": m["ReceiptHandle"],
            "body": m["Body"],
            "attributes": m.get("Attributes", {}),
            "messageAttributes": m.get("MessageAttributes", {}),
            "md5OfBody": m.get("MD5OfBody", ""),
            "eventSource": "aws:sqs",
            "eventSourceARN": self.queue_arn,
            "awsRegion": self.queue_arn.split(":")[3] if self.queue_arn.count(":") >= 5 else "",
        }
