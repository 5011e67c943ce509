"""The unavailable-offerings cache in DynamoDB (Karpenter's ICE cache, shared by every Lambda).

An offering (instance type, zone, capacity type) that EC2 answered with a capacity error is
unavailable for ``UNAVAILABLE_TTL_SECONDS`` (3 minutes). Items live under one partition:

    pk = "unavailable-offering", sk = "<type>/<zone>/<capacity type>", ttl = expiry (epoch s)

DynamoDB TTL deletes expired items only eventually (up to days later), so expiry is checked
on read; TTL merely keeps the table small. The clock is passed in by the caller.

Must not touch: which offering a NodeClaim launches into (the solver and ``nodeflow.lifecycle.launch``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nodeflow.aws.dedup import batch_write
from nodeflow.aws.errors import Offering, aws_errors

__all__ = ["PARTITION", "UNAVAILABLE_TTL_SECONDS", "UnavailableOfferings"]

PARTITION = "unavailable-offering"
UNAVAILABLE_TTL_SECONDS = 180


def _sk(instance_type: str, zone: str, capacity_type: str) -> str:
    return f"{instance_type}/{zone}/{capacity_type}"


@dataclass(frozen=True)
class UnavailableOfferings:
    """Read and mark unavailable offerings in table ``table_name`` (``dynamodb`` is a boto3 client)."""

    dynamodb: Any
    table_name: str
    ttl_seconds: int = UNAVAILABLE_TTL_SECONDS

    def mark(self, offerings: Iterable[Offering], now: datetime, reason: str = "") -> int:
        """Mark fully known offerings unavailable until ``now`` + TTL; returns how many were written."""
        expires = int(now.timestamp()) + self.ttl_seconds
        keys = sorted(
            {
                (o.instance_type, o.zone, o.capacity_type)
                for o in offerings
                if o.instance_type and o.zone and o.capacity_type
            }
        )
        requests = [
            {
                "PutRequest": {
                    "Item": {
                        "pk": {"S": PARTITION},
                        "sk": {"S": _sk(t, z, c)},
                        "instanceType": {"S": t},
                        "zone": {"S": z},
                        "capacityType": {"S": c},
                        "reason": {"S": reason[:512] or "capacity error"},
                        "ttl": {"N": str(expires)},
                    }
                }
            }
            for t, z, c in keys
            if t and z and c
        ]
        batch_write(self.dynamodb, self.table_name, requests)
        return len(requests)

    def current(self, now: datetime) -> frozenset[tuple[str, str, str]]:
        """The (instance type, zone, capacity type) offerings unavailable at ``now``."""
        cutoff = int(now.timestamp())
        out: set[tuple[str, str, str]] = set()
        kwargs: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": PARTITION}},
            "ConsistentRead": True,
        }
        while True:
            with aws_errors():
                page = self.dynamodb.query(**kwargs)
            for item in page.get("Items", []):
                if int(item.get("ttl", {}).get("N", "0")) <= cutoff:
                    continue  # expired; TTL deletion is eventual
                out.add((item["instanceType"]["S"], item["zone"]["S"], item["capacityType"]["S"]))
            last = page.get("LastEvaluatedKey")
            if not last:
                return frozenset(out)
            kwargs["ExclusiveStartKey"] = last
