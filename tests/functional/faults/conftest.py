"""The fault matrix reuses the lifecycle fixtures (moto with the real workflows, the test API server)."""

from __future__ import annotations

from tests.functional.lifecycle.conftest import local, make_local

__all__ = ["local", "make_local"]
