"""Seen-before records in DynamoDB: request nonces (replay protection) and event ids
(de-duplication), each with a TTL. Items:

    pk = "nonce",    sk = <nonce>,    ttl = expiry (epoch s)
    pk = "event-id", sk = <event id>, state = "pending" | "done", lease = epoch s, ttl = expiry

An event id is *claimed* before its event is published (``pending``, with a short lease) and
*confirmed* after (``done``); if publishing fails the claim is *released*. A claim whose lease ran
out (the webhook died between claim and publish) can be taken again, so a crash never turns a
retry into a silently dropped "duplicate". Expiry is checked in the conditions (TTL deletion is
eventual). The clock is passed in by the caller.

Must not touch: whether a request is authentic or an event is routed (``nodeflow.ingress``); only the seen-before
records.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from nodeflow.aws.errors import Throttled, aws_errors

__all__ = ["EVENT_PARTITION", "NONCE_PARTITION", "SeenRecords", "batch_write"]

NONCE_PARTITION = "nonce"
EVENT_PARTITION = "event-id"
_TRANSACTION_MAX = 100
_CLAIMABLE = "attribute_not_exists(pk) OR #ttl < :now OR (#state = :pending AND #lease < :now)"


@dataclass(frozen=True)
class SeenRecords:
    dynamodb: Any  # boto3 client
    table_name: str

    def claim_nonce(self, nonce: str, now: float, ttl_seconds: int) -> bool:
        """Record ``nonce``; False when it was seen within its TTL (a replay)."""
        try:
            with aws_errors():
                self.dynamodb.put_item(
                    TableName=self.table_name,
                    Item={
                        "pk": {"S": NONCE_PARTITION},
                        "sk": {"S": nonce},
                        "ttl": {"N": str(int(now) + ttl_seconds)},
                    },
                    ConditionExpression="attribute_not_exists(pk) OR #ttl < :now",
                    ExpressionAttributeNames={"#ttl": "ttl"},
                    ExpressionAttributeValues={":now": {"N": str(int(now))}},
                )
        except Exception as exc:
            if getattr(exc, "code", "") == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def claim_events(self, ids: Sequence[str], now: float, *, lease_seconds: int, ttl_seconds: int) -> list[str]:
        """Claim the ids not seen before (in order, without repeats); the others are duplicates."""
        unique = list(dict.fromkeys(ids))
        claimed: list[str] = []
        for i in range(0, len(unique), _TRANSACTION_MAX):
            claimed.extend(self._claim_chunk(unique[i : i + _TRANSACTION_MAX], now, lease_seconds, ttl_seconds))
        return claimed

    def _claim_chunk(self, ids: list[str], now: float, lease_seconds: int, ttl_seconds: int) -> list[str]:
        todo = list(ids)
        for _ in range(6):
            if not todo:
                return []
            try:
                with aws_errors():
                    self.dynamodb.transact_write_items(
                        TransactItems=[self._claim_item(i, now, lease_seconds, ttl_seconds) for i in todo]
                    )
                return todo
            except Exception as exc:
                reasons = _cancellation_reasons(exc)
                if reasons is None:
                    raise
                # Drop the ids someone already holds; retry the rest (conflicts with a concurrent
                # transaction on the same id cancel everything and are retried too).
                todo = [i for i, r in zip(todo, reasons, strict=False) if r != "ConditionalCheckFailed"]
        raise Throttled("event-id claims kept conflicting with concurrent requests", code="TransactionConflict")

    def _claim_item(self, event_id: str, now: float, lease_seconds: int, ttl_seconds: int) -> dict[str, Any]:
        return {
            "Put": {
                "TableName": self.table_name,
                "Item": {
                    "pk": {"S": EVENT_PARTITION},
                    "sk": {"S": event_id},
                    "state": {"S": "pending"},
                    "lease": {"N": str(int(now) + lease_seconds)},
                    "ttl": {"N": str(int(now) + ttl_seconds)},
                },
                "ConditionExpression": _CLAIMABLE,
                "ExpressionAttributeNames": {"#ttl": "ttl", "#state": "state", "#lease": "lease"},
                "ExpressionAttributeValues": {":now": {"N": str(int(now))}, ":pending": {"S": "pending"}},
            }
        }

    def confirm_events(self, ids: Iterable[str], now: float, ttl_seconds: int) -> None:
        """Mark claimed ids published (kept until ``now`` + TTL)."""
        expires = str(int(now) + ttl_seconds)
        self._batch(
            {
                "PutRequest": {
                    "Item": {
                        "pk": {"S": EVENT_PARTITION},
                        "sk": {"S": i},
                        "state": {"S": "done"},
                        "ttl": {"N": expires},
                    }
                }
            }
            for i in ids
        )

    def release_events(self, ids: Iterable[str]) -> None:
        """Forget claims whose events were not published (the sender's retry must get through)."""
        self._batch({"DeleteRequest": {"Key": {"pk": {"S": EVENT_PARTITION}, "sk": {"S": i}}}} for i in ids)

    def _batch(self, requests: Iterable[dict[str, Any]]) -> None:
        batch_write(self.dynamodb, self.table_name, list(requests))


def batch_write(dynamodb: Any, table_name: str, requests: list[dict[str, Any]]) -> None:
    """BatchWriteItem in chunks of 25, re-sending unprocessed items (8 attempts per chunk)."""
    for i in range(0, len(requests), 25):
        pending: dict[str, Any] = {table_name: requests[i : i + 25]}
        for _ in range(8):
            with aws_errors():
                out = dynamodb.batch_write_item(RequestItems=pending)
            pending = out.get("UnprocessedItems") or {}
            if not pending:
                break
        else:
            raise Throttled("DynamoDB left items unprocessed after 8 attempts", code="ProvisionedThroughputExceeded")


def _cancellation_reasons(exc: Exception) -> list[str] | None:
    """Per-item codes of a cancelled transaction, or None when ``exc`` is something else."""
    from botocore.exceptions import ClientError

    cause = exc.__cause__ if not isinstance(exc, ClientError) else exc
    if not isinstance(cause, ClientError):
        return None
    if cause.response.get("Error", {}).get("Code") != "TransactionCanceledException":
        return None
    return [str(r.get("Code", "None")) for r in cause.response.get("CancellationReasons") or []]
