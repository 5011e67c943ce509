"""How the Register step finds a NodeClaim's Node on the real API server without listing every Node on each poll
(``nodeflow.lifecycle.registration.find_registering_node``): a GET of the name the instance's kubelet registers
under (its private DNS name, from the Launch step's result), a LIST of every Node only when no name is known, once a
minute otherwise (a Node named otherwise: a hostname override), and on the last look before the registration TTL."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from nodeflow.kube import client as kc
from nodeflow.kube.client import KubeClient
from nodeflow.lifecycle.errors import RegistrationTimeout
from nodeflow.lifecycle.registration import FULL_LIST_EVERY_SECONDS, StepDeps, register
from sandbox.nodeflow import LocalNodeflow
from tests.functional.lifecycle.conftest import pending

if TYPE_CHECKING:
    from sandbox.controlplane.facade import RealKubeAPI

PROVIDER = "aws:///us-east-1a/i-0123456789abcdef0"
LAUNCHED = datetime(2026, 11, 21, 12, tzinfo=UTC)
NODES_PATH = "/api/v1/nodes"


def _claim(kube: KubeClient, name: str = "default-abcde") -> None:
    claim = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [],
        },
    }
    kube.create(kc.NODE_CLAIMS, claim)
    kube.patch(kc.NODE_CLAIMS, name, {"status": {"providerID": PROVIDER}}, subresource="status")


def _node(kube: KubeClient, name: str, provider: str = PROVIDER) -> None:
    kube.create(
        kc.NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": {"providerID": provider}}
    )


def _at(seconds: float) -> Callable[[], datetime]:
    return lambda: LAUNCHED + timedelta(seconds=seconds)


def _node_lists(server: RealKubeAPI) -> int:
    """LISTs of every Node (no selector) since the proxy's log was cleared."""
    return sum(1 for e in server.exchanges if e.method == "GET" and e.path == NODES_PATH and "Selector" not in e.query)


def _register(kube: KubeClient, seconds: float, **kw: Any) -> dict[str, Any]:
    return register(StepDeps(kube, _at(seconds)), "default-abcde", LAUNCHED.isoformat(), **kw)


def test_a_node_under_its_expected_name_is_found_by_one_get(kube_server: RealKubeAPI) -> None:
    kube = KubeClient(kube_server.api_client())
    _claim(kube)
    _node(kube, "ip-10-0-0-9.ec2.internal", "aws:///us-east-1a/i-0fffffffffffffff0")  # another instance's Node
    kube_server.proxy.clear()

    # not there yet: a GET that misses, no LIST of every Node (the poll before a minute has passed)
    out = _register(kube, 50, node_name="ip-10-0-0-1.ec2.internal")
    assert out == {"registered": False, "elapsedSeconds": 50}
    assert _node_lists(kube_server) == 0
    assert kube_server.count("GET", f"{NODES_PATH}/ip-10-0-0-1.ec2.internal") == 1

    _node(kube, "ip-10-0-0-1.ec2.internal")
    out = _register(kube, 55, node_name="ip-10-0-0-1.ec2.internal")
    assert out["registered"] is True
    assert out["node"] == "ip-10-0-0-1.ec2.internal"
    assert _node_lists(kube_server) == 0


def test_a_node_under_the_expected_name_of_another_instance_is_not_taken(kube_server: RealKubeAPI) -> None:
    """The name is a hint: the Node found under it must carry the NodeClaim's providerID."""
    kube = KubeClient(kube_server.api_client())
    _claim(kube)
    _node(kube, "ip-10-0-0-1.ec2.internal", "aws:///us-east-1a/i-0fffffffffffffff0")
    out = _register(kube, 70, node_name="ip-10-0-0-1.ec2.internal")
    assert out == {"registered": False, "elapsedSeconds": 70, "listedAt": 70}
    labels = kube.get(kc.NODES, "ip-10-0-0-1.ec2.internal")["metadata"].get("labels") or {}
    assert "karpenter.sh/registered" not in labels


def test_a_node_named_otherwise_is_found_by_the_periodic_list(kube_server: RealKubeAPI) -> None:
    """A hostname override: the Node is found by providerID among all Nodes, a minute after the launch (then a
    minute after the previous LIST), as every poll found it before."""
    kube = KubeClient(kube_server.api_client())
    _claim(kube)
    _node(kube, "custom-name")
    kube_server.proxy.clear()
    hint = "ip-10-0-0-1.ec2.internal"

    assert _register(kube, FULL_LIST_EVERY_SECONDS - 1, node_name=hint)["registered"] is False
    assert _node_lists(kube_server) == 0
    # a LIST a minute ago: not again yet
    out = _register(kube, FULL_LIST_EVERY_SECONDS + 30, node_name=hint, listed_at=FULL_LIST_EVERY_SECONDS)
    assert out == {"registered": False, "elapsedSeconds": FULL_LIST_EVERY_SECONDS + 30, "listedAt": 60}
    assert _node_lists(kube_server) == 0

    out = _register(kube, FULL_LIST_EVERY_SECONDS, node_name=hint)
    assert out["registered"] is True
    assert out["node"] == "custom-name"
    assert _node_lists(kube_server) == 1


def test_without_an_expected_name_every_poll_lists(kube_server: RealKubeAPI) -> None:
    """An execution started before the Launch step reported the name (or an instance EC2 described without one)."""
    kube = KubeClient(kube_server.api_client())
    _claim(kube)
    kube_server.proxy.clear()
    assert _register(kube, 5) == {"registered": False, "elapsedSeconds": 5, "listedAt": 5}
    assert _node_lists(kube_server) == 1
    _node(kube, "custom-name")
    assert _register(kube, 6)["node"] == "custom-name"


def test_the_last_look_before_the_ttl_lists_every_node(kube_server: RealKubeAPI) -> None:
    kube = KubeClient(kube_server.api_client())
    _claim(kube)
    ttl = StepDeps(kube, _at(0)).registration_ttl_seconds
    kube_server.proxy.clear()
    with pytest.raises(RegistrationTimeout):
        _register(kube, ttl + 1, node_name="ip-10-0-0-1.ec2.internal", listed_at=ttl)
    assert _node_lists(kube_server) == 1

    _node(kube, "custom-name")
    out = _register(kube, ttl + 2, node_name="ip-10-0-0-1.ec2.internal", listed_at=ttl + 1)
    assert out["node"] == "custom-name"


def test_the_launch_workflow_polls_without_listing_every_node(make_local: Callable[..., LocalNodeflow]) -> None:
    """Through the real launch workflow: the Launch step's result carries the instance's private DNS name, the
    Register step GETs it on every poll (the Nodes appear a while after the launch) and never LISTs every Node."""
    local = make_local(kubelet_register_after=1.5)
    pending(local, "web", 3, cpu="3", memory="4Gi")
    local.kube_server.proxy.clear()
    local.send_pending(["default/web"])
    created = local.provision()["result"]["nodeClaimsCreated"]
    assert len(created) >= 2
    assert all(d["status"] == "SUCCEEDED" for d in local.wait_for_executions())

    register = [e for e in local.kube_server.exchanges if e.impersonated == local.function_name("register")]
    polls = [e for e in register if e.method == "GET" and e.path.startswith("/apis/karpenter.sh/v1/nodeclaims/")]
    node_gets = [e for e in register if e.method == "GET" and e.path.startswith(f"{NODES_PATH}/")]
    assert len(polls) > len(created)  # some polls came before the Nodes
    assert [e for e in node_gets if e.status == 404]
    full = [e.describe() for e in register if e.method == "GET" and e.path == NODES_PATH and "Selector" not in e.query]
    assert full == []  # (the NodePool recount's LIST of its own Nodes, by label, is once per registration)
