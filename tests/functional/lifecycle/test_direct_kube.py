"""LocalNodeflow(direct_kube=True): the handlers reach kube-apiserver itself, not through the fault proxy (what the
burst benchmark uses: the proxy relays every byte in the benchmark's own process)."""

from __future__ import annotations

from collections.abc import Callable

from sandbox.controlplane.facade import RealKubeAPI
from sandbox.nodeflow import LocalNodeflow
from tests.functional.lifecycle.conftest import pending


def test_handlers_bypass_the_fault_proxy(make_local: Callable[..., LocalNodeflow], kube_server: RealKubeAPI) -> None:
    local = make_local(direct_kube=True)
    keys = pending(local, "web", 1, "1", "2Gi")
    kube_server.requests.clear()
    local.send_pending(keys)
    result = local.provision()["result"]
    assert len(result["nodeClaimsCreated"]) == 1
    assert kube_server.requests == []  # the provisioner listed, created and patched: none of it through the proxy
