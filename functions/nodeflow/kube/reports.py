"""Per-object reports: what nodeflow writes about one object (its status, its conditions, its Events) stands alone.

nodeflow reports on many objects in one pass: every NodePool's status and the Warning Event of one that turned not
Ready, every EC2NodeClass's status and hash, every NodeClaim's Drifted / Consolidatable conditions and
consolidateAfter timer, the Events garbage collection records, the invalid NodeflowPolicies' Events. The API server
may refuse one object's write (422: an object stored before a CRD rule; 403), fail it (5xx, no answer) or answer a
conflict (409). Then that object's report is lost for this pass, and nothing else: ``Reports.run`` runs one
object's write, and on a ``KubeError`` logs it (what, which object, the error), counts it and returns None; the
caller goes on with the next object. An object gone meanwhile (404) has nothing left to report on: neither logged
nor counted. ``Reports.failed`` is the pass's count, for the caller's metric (``ReportWritesFailed``); the next pass
writes again what changed.

Reports are for people: one never fails the work around it (provisioning, a disruption round, garbage collection).

Must not touch: what is written (the steps decide); only that one object's failure stays its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from nodeflow.kube.errors import KubeError, NotFound

__all__ = ["ReportFailure", "Reports"]

T = TypeVar("T")

MAX_ERROR = 300  # characters of an error kept in the log line and the failure


@dataclass(frozen=True, slots=True)
class ReportFailure:
    """One write that did not happen: ``what`` ("NodePool status"), ``name`` (the object: "NodePool/default")."""

    what: str
    name: str
    error: str


class Reports:
    """The writes of one pass, each on its own (see the module). Safe to share between threads."""

    def __init__(self, log: Callable[[str, dict[str, Any]], None] = lambda _m, _e: None) -> None:
        self.log = log
        self.failures: list[ReportFailure] = []
        self._lock = threading.Lock()

    def run(self, what: str, name: str, write: Callable[[], T]) -> T | None:
        """``write()``'s result, or None when the API server did not take it (logged and counted unless 404)."""
        try:
            return write()
        except NotFound:
            return None
        except KubeError as exc:
            self.failed_with(what, name, exc)
            return None

    def failed_with(self, what: str, name: str, exc: BaseException) -> None:
        """Log and count a write of ``name`` that ``exc`` stopped."""
        failure = ReportFailure(what, name, f"{type(exc).__name__}: {str(exc)[:MAX_ERROR]}")
        with self._lock:
            self.failures.append(failure)
        self.log(f"{what} not written", {"object": name, "error": failure.error})

    @property
    def failed(self) -> int:
        """How many writes of this pass did not happen."""
        with self._lock:
            return len(self.failures)
