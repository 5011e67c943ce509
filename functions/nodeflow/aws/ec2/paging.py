"""Reading every page of a Describe* call, and cutting id lists to the size a call accepts.

It decides nothing about the resources read; every failure surfaces typed (``nodeflow.aws.errors``).

Must not touch: what the resources read mean; only the paging and the batch sizes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from nodeflow.aws.errors import aws_errors

__all__ = ["chunks", "paginate"]


def paginate(client: Any, operation: str, key: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
    """Every item under ``key`` of every page ``operation`` answers (boto3's paginator), errors typed."""
    with aws_errors():
        for page in client.get_paginator(operation).paginate(**kwargs):
            yield from page.get(key, [])


def chunks(items: Sequence[str], size: int) -> Iterator[list[str]]:
    """``items`` in lists of at most ``size``, in order."""
    for i in range(0, len(items), size):
        yield list(items[i : i + size])
