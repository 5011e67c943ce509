"""Pytest fixtures for the test API server.

Use from a conftest.py::

    from tests.kubeapi.fixtures import kubeapi, kubeapi_server  # noqa: F401

or ``pytest_plugins = ["tests.kubeapi.fixtures"]`` in the root conftest.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.kubeapi.server import KubeAPIServer


@pytest.fixture(scope="session")
def kubeapi_server() -> Iterator[KubeAPIServer]:
    """One server for the whole session (started once; CRDs registered on it persist)."""
    server = KubeAPIServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def kubeapi(kubeapi_server: KubeAPIServer) -> Iterator[KubeAPIServer]:
    """The session server, emptied (objects dropped, CRDs kept, request log cleared) before and after each test."""
    kubeapi_server.reset()
    yield kubeapi_server
    kubeapi_server.reset()
