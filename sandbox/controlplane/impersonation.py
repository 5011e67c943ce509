"""Requests "as" someone: the official ``kubernetes`` client sends ``Impersonate-User`` / ``Impersonate-Group``
(what ``kubectl --as --as-group`` sends) for code running inside ``acting_as(user)``: how the sandbox runs each
Lambda handler with its function's Kubernetes groups (``LocalNodeflow``), against the real API server's
impersonation and RBAC. ``user`` is anything with a ``name`` and ``groups`` (``Acting`` is the plain one).

The identity is a context variable: it follows the code, not the thread. A thread started inside the block
(``threading.Thread``, a ``ThreadPoolExecutor`` worker) does not have it unless the work is run with
``contextvars.copy_context().run``; its requests then go out with no impersonation, as whoever the client's own
token says. That is the point: with a token that may do nothing but impersonate, an unattributed request fails
instead of borrowing someone's rights.

``ClientImpersonation.install()`` wraps ``kubernetes.client.rest.RESTClientObject.request`` (every client in the
process; counted, so nested installs are fine); ``uninstall()`` restores it.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["Acting", "ClientImpersonation", "User", "acting_as"]


class User(Protocol):
    """Who to impersonate."""

    @property
    def name(self) -> str: ...

    @property
    def groups(self) -> tuple[str, ...]: ...


@dataclass(frozen=True)
class Acting:
    """A ``User``: the name and groups a request impersonates (``kubectl --as NAME --as-group GROUP...``)."""

    name: str
    groups: tuple[str, ...] = ()


_ACTING: contextvars.ContextVar[User | None] = contextvars.ContextVar("acting_as", default=None)


@contextmanager
def acting_as(user: User) -> Iterator[None]:
    """Kubernetes requests made by this code (this context) impersonate ``user`` (its name and groups)."""
    token = _ACTING.set(user)
    try:
        yield
    finally:
        _ACTING.reset(token)


class ClientImpersonation:
    _lock = threading.Lock()
    _installs = 0
    _original: Any = None

    @classmethod
    def install(cls) -> None:
        from kubernetes.client import rest

        with cls._lock:
            cls._installs += 1
            if cls._installs > 1:
                return
            original = rest.RESTClientObject.__dict__["request"]
            cls._original = original

            def request(self: Any, method: str, url: str, headers: Any = None, *args: Any, **kwargs: Any) -> Any:
                user = _ACTING.get()
                if user is not None:
                    from urllib3 import HTTPHeaderDict

                    headers = HTTPHeaderDict(dict(headers or {}))
                    headers["Impersonate-User"] = user.name
                    for group in user.groups:  # one header per group, as kubectl --as-group sends them
                        headers.add("Impersonate-Group", group)
                return original(self, method, url, headers, *args, **kwargs)

            request.__nodeflow_impersonation__ = True  # type: ignore[attr-defined]
            rest.RESTClientObject.request = request  # type: ignore[method-assign]

    @classmethod
    def uninstall(cls) -> None:
        from kubernetes.client import rest

        with cls._lock:
            if cls._installs == 0:
                return
            cls._installs -= 1
            if cls._installs == 0:
                rest.RESTClientObject.request = cls._original  # type: ignore[method-assign]
                cls._original = None
