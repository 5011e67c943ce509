"""moto's costs that AWS does not have, taken out of the one process the sandbox runs everything in.

At a burst of thousands of pods every handler, the Step Functions engine and the simulated kubelets share one
interpreter lock, so a moto call whose cost grows with what the account holds slows every launch workflow down
(issue 27: launch tasks passed their timeouts). What this changes, and only while ``cheap_transactions()`` is
entered:

- DynamoDB ``TransactWriteItems``: moto deep-copies every table the transaction names, once per item, to roll back
  on a cancellation, so a transaction costs O(items x table size) (the webhook's de-duplication claims up to 100
  events per transaction in a table that holds every event seen). Here only the items the transaction touches are
  saved and, when it raises, put back (or deleted when they did not exist): the same all-or-nothing answer for an
  O(items) cost. The answer (``TransactionCanceledException`` with its reasons) is moto's own.

And while ``cheap_sends()`` is entered:

- SQS ``SendMessage`` to a standard queue: moto builds every queue attribute to read ``ContentBasedDeduplication``
  (which only FIFO queues have), and ``ApproximateNumberOfMessages`` and its siblings walk every message, so a send
  costs O(queue depth) (every pod event the webhook puts on the bus ends in one). Inside a send to a standard queue
  the queue's attributes read as empty, which is what that lookup found anyway; FIFO queues are left alone.

And while ``serial_ec2()`` is entered:

- EC2 requests are answered one at a time. moto's EC2 backend is not thread-safe: a CreateFleet tagging its
  instances while another thread's request iterates the same tags dict raises ``RuntimeError: dictionary changed
  size during iteration`` inside moto, which the Launch step takes for its own failure and CleanUp follows (seen
  in the 500-pod mix of benchmarks/fidelity.py). Every request runs under the interpreter lock anyway; the lock
  only keeps two from interleaving.

``cheaper_moto()`` enters all three.
"""

from __future__ import annotations

import copy
import threading
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["cheap_sends", "cheap_transactions", "cheaper_moto", "serial_ec2"]

_local = threading.local()


class _CopyInTransaction(types.ModuleType):
    """Stands in for ``copy`` in moto's DynamoDB backend: inside a transaction a Table is not copied."""

    def __init__(self, table_type: type) -> None:
        super().__init__("copy")
        self.table_type = table_type

    def deepcopy(self, value: Any, memo: Any = None) -> Any:
        if getattr(_local, "transaction", False) and isinstance(value, self.table_type):
            return value  # the items it touches are saved instead (cheap_transactions)
        return copy.deepcopy(value, memo)

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)


@contextmanager
def _replaced(*changes: tuple[Any, str, Any]) -> Iterator[None]:
    """Each ``(owner, name, value)``: ``owner.name`` is ``value`` inside the block, its own entry again after."""
    saved = [(owner, name, owner.__dict__[name]) for owner, name, _ in changes]
    for owner, name, value in changes:
        setattr(owner, name, value)
    try:
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)


def _touched(backend: Any, transact_items: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any], Any]]:
    """(table, key, a copy of the item or None) for every item the transaction names that can be found."""
    saved: list[tuple[str, dict[str, Any], Any]] = []
    for entry in transact_items:
        for op in entry.values():
            name = str(op.get("TableName") or "") if isinstance(op, dict) else ""
            table = backend.tables.get(name) if name else None
            if table is None:
                continue
            attrs = op.get("Item") if "Item" in op else op.get("Key")
            if not isinstance(attrs, dict):
                continue
            key = {k: attrs[k] for k in (table.hash_key_attr, table.range_key_attr) if k is not None and k in attrs}
            try:
                item = backend.get_item(name, key)
            except Exception:  # an invalid key: moto rejects the transaction before writing anything
                continue
            saved.append((name, key, copy.deepcopy(item)))
    return saved


def _restore(backend: Any, saved: list[tuple[str, dict[str, Any], Any]]) -> None:
    for name, key, item in reversed(saved):
        if item is None:
            if backend.get_item(name, key) is not None:
                backend.delete_item(name, key)
        else:
            backend.put_item(name, item.to_json()["Attributes"])


@contextmanager
def cheap_transactions() -> Iterator[None]:
    """DynamoDB transactions that save the items they touch, not whole tables (see the module). Restored on exit."""
    from moto.dynamodb import models
    from moto.dynamodb.models.table import Table

    backend_type = models.DynamoDBBackend
    original = backend_type.__dict__["transact_write_items"]

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> Any:
        saved = _touched(self, transact_items)
        _local.transaction = True
        try:
            return original(self, transact_items)
        except Exception:
            _local.transaction = False
            _restore(self, saved)
            raise
        finally:
            _local.transaction = False

    with _replaced(
        (backend_type, "transact_write_items", transact_write_items), (models, "copy", _CopyInTransaction(Table))
    ):
        yield


@contextmanager
def cheap_sends() -> Iterator[None]:
    """SQS sends to a standard queue that do not build the queue's attributes (see the module). Restored on exit."""
    from moto.sqs import models

    queue_type = models.Queue
    backend_type = models.SQSBackend
    original_attributes = queue_type.__dict__["attributes"]
    original_send = backend_type.__dict__["send_message"]

    def attributes(self: Any) -> dict[str, Any]:
        if getattr(_local, "sending", False) and not self.fifo_queue:
            return {}  # a standard queue has no ContentBasedDeduplication, the one attribute a send reads
        return original_attributes.fget(self)  # type: ignore[no-any-return]

    def send_message(self: Any, *args: Any, **kwargs: Any) -> Any:
        outer = getattr(_local, "sending", False)
        _local.sending = True
        try:
            return original_send(self, *args, **kwargs)
        finally:
            _local.sending = outer

    with _replaced((queue_type, "attributes", property(attributes)), (backend_type, "send_message", send_message)):
        yield


_EC2_LOCK = threading.RLock()


@contextmanager
def serial_ec2() -> Iterator[None]:
    """moto answers one EC2 request at a time (see the module). Restored on exit."""
    from moto.ec2.responses import EC2Response

    own = EC2Response.__dict__.get("call_action")
    inherited = EC2Response.call_action

    def call_action(self: Any) -> Any:
        with _EC2_LOCK:
            return inherited(self)

    EC2Response.call_action = call_action  # type: ignore[method-assign]
    try:
        yield
    finally:
        if own is None:
            del EC2Response.call_action
        else:
            EC2Response.call_action = own  # type: ignore[method-assign]


@contextmanager
def cheaper_moto() -> Iterator[None]:
    """``cheap_transactions()``, ``cheap_sends()`` and ``serial_ec2()``."""
    with cheap_transactions(), cheap_sends(), serial_ec2():
        yield
