"""Structured logs: one JSON object per line on stdout.

Use the standard ``logging`` API; fields passed with ``extra={...}`` become keys of the JSON object::

    log = get_logger("watch")
    log.info("relisted", extra={"resource": "pods", "items": 120})
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from typing import Any, TextIO

__all__ = ["JSONFormatter", "get_logger", "setup_logging"]

# Attributes every LogRecord has; anything else on a record came from ``extra`` and is logged as a field.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, separators=(",", ":"))


def setup_logging(level: str = "info", stream: TextIO | None = None) -> None:
    """Send every ``nodeflow_agent`` logger to ``stream`` (stdout) as JSON lines."""
    handler = logging.StreamHandler(stream or sys.stdout)
    handler.setFormatter(JSONFormatter())
    root = logging.getLogger("nodeflow_agent")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
    threading.excepthook = _thread_crashed


def _thread_crashed(args: threading.ExceptHookArgs) -> None:
    """A thread died (it should not): log it as JSON; /healthz then reports the dead thread."""
    if args.exc_type is SystemExit:
        return
    get_logger("main").error(
        "thread crashed",
        exc_info=(args.exc_type, args.exc_value or args.exc_type(), args.exc_traceback),
        extra={"thread_name": args.thread.name if args.thread else None},
    )


def get_logger(name: str) -> logging.Logger:
    return logging.getLogger(f"nodeflow_agent.{name}")
