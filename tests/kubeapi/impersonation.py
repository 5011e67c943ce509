"""Requests "as" someone: moved to ``sandbox.controlplane.impersonation`` (the sandbox runs handlers with it
against the real API server); re-exported for tests/kubeapi's own tests."""

from sandbox.controlplane.impersonation import ClientImpersonation, acting_as, current

__all__ = ["ClientImpersonation", "acting_as", "current"]
