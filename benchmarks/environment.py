"""Environment variables set for the length of a benchmark run and restored after (the benchmarks run the handlers
in-process, which read their settings from the environment)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping

# What a benchmark running the handlers against moto in-process sets: fake credentials, no default AMIs loaded,
# no Powertools metrics or chatter.
OFFLINE_AWS: Mapping[str, str] = {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_SESSION_TOKEN": "bench",
    "AWS_DEFAULT_REGION": "us-east-1",
    "MOTO_EC2_LOAD_DEFAULT_AMIS": "false",
    "POWERTOOLS_METRICS_DISABLED": "true",
    "POWERTOOLS_LOG_LEVEL": "ERROR",
}


def offline_aws() -> None:
    """``OFFLINE_AWS`` in ``os.environ`` for the rest of the process, and Powertools' empty-metrics warning off."""
    import warnings

    os.environ.update(OFFLINE_AWS)
    warnings.filterwarnings("ignore", message="No application metrics to publish")


@contextlib.contextmanager
def environment(values: Mapping[str, str]) -> Iterator[None]:
    """``values`` in ``os.environ`` inside the block; each variable back to its old value (or unset) after."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
