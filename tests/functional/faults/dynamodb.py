"""DynamoDB faults moto never makes, injected into its BatchWriteItem handler (in-process moto: ``mock_aws`` or a
``ThreadedMotoServer`` in the test's process): throttling, 5xx, unprocessed items, and DynamoDB's all-or-nothing
refusal of a batch with an item over the 400 KB limit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.functional.faults.throttle import Throttle

__all__ = ["BatchWriteFaults"]


class BatchWriteFaults:
    """Faults of BatchWriteItem on ``table`` (calls on other tables pass untouched):

    - ``throttle``: the calls it hits (``throttle.left``: the next N, -1 every one) answer
      ProvisionedThroughputExceededException; ``throttle.throttled`` counts them;
    - ``refuse``: every call answers InternalServerError (500);
    - ``hold``: the items it picks come back in UnprocessedItems, the others are written;
    - ``aws_size_check``: a batch with an item over the size limit is refused whole (ValidationException) before
      any of it is written, as DynamoDB does; moto 5.2.5 checks an item as it writes it (over 405,000 bytes), so the
      items ahead of a too-big one are written and those after it not.

    ``batches``: the items of each call on ``table``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, table: str) -> None:
        from moto.core.exceptions import AWSError
        from moto.dynamodb.models.dynamo_type import DynamoType, LimitedSizeDict
        from moto.dynamodb.responses import DynamoHandler

        class ProvisionedThroughputExceededException(AWSError):
            TYPE = "ProvisionedThroughputExceededException"
            STATUS = 400

        class InternalServerError(AWSError):
            TYPE = "InternalServerError"
            STATUS = 500

        self.table = table
        self.throttle = Throttle()
        self.refuse = False
        self.aws_size_check = False
        self.hold: Callable[[dict[str, Any]], bool] | None = None
        self.batches: list[list[dict[str, Any]]] = []
        real = DynamoHandler.batch_write_item
        faults = self

        def batch_write_item(handler: Any) -> Any:
            if table not in handler.body.get("RequestItems", {}):
                return real(handler)
            items = [r["PutRequest"]["Item"] for r in handler.body["RequestItems"][table]]
            with faults.throttle.lock:
                faults.batches.append(items)
            if faults.throttle.take():
                raise ProvisionedThroughputExceededException(
                    "The level of configured provisioned throughput was exceeded"
                )
            if faults.refuse:
                raise InternalServerError("the service is unavailable")
            if faults.aws_size_check:
                for item in items:
                    checked = LimitedSizeDict()
                    for name, value in item.items():
                        checked[name] = DynamoType(value)  # moto's own check: ItemSizeTooLarge (ValidationException)
            held = [i for i in items if faults.hold is not None and faults.hold(i)]
            if held:
                handler.body["RequestItems"][table] = [{"PutRequest": {"Item": i}} for i in items if i not in held]
            out = real(handler)
            if held:
                out.result["UnprocessedItems"] = {table: [{"PutRequest": {"Item": i}} for i in held]}
            return out

        monkeypatch.setattr(DynamoHandler, "batch_write_item", batch_write_item)
