"""Every Kubernetes object shown as YAML in README.md and docs/ is accepted by a real kube-apiserver with
nodeflow's CRDs: a server-side dry run (``dryRun=All``) with strict field validation, so an unknown field, a
schema violation or a failed CEL rule in an example fails here, for built-in kinds as for NodePools."""

from __future__ import annotations

from typing import Any

import pytest

from nodeflow.kube.errors import KubeError
from sandbox.controlplane.facade import RealKubeAPI
from tests.docs.examples import Example, yaml_examples

EXAMPLES = yaml_examples()


def _dry_run(kube: RealKubeAPI, obj: dict[str, Any]) -> dict[str, Any]:
    rt = kube.resource_for(obj["apiVersion"], obj["kind"])
    namespace = "default" if rt.namespaced else None  # the examples' namespaces need not exist here
    body = {**obj, "metadata": {**(obj.get("metadata") or {}), **({"namespace": namespace} if namespace else {})}}
    return kube.kube.request(
        "POST", rt.path(namespace=namespace), query=[("dryRun", "All"), ("fieldValidation", "Strict")], body=body
    )


def test_there_are_examples_of_builtin_and_custom_kinds() -> None:
    assert {"NodePool", "EC2NodeClass", "NodeflowPolicy", "Deployment"} <= {e.obj["kind"] for e in EXAMPLES}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.id)
def test_the_api_server_accepts_the_example(real_kube: RealKubeAPI, example: Example) -> None:
    stored = _dry_run(real_kube, example.obj)
    assert stored["kind"] == example.obj["kind"], example.where


def test_the_dry_run_refuses_what_a_crd_rule_refuses(real_kube: RealKubeAPI) -> None:
    (pool,) = [e for e in EXAMPLES if e.obj["kind"] == "NodePool" and e.where.startswith("docs/getting-started")]
    bad = {**pool.obj, "spec": {**pool.obj["spec"], "disruption": {"consolidateAfter": "soon"}}}
    with pytest.raises(KubeError, match="consolidateAfter"):
        _dry_run(real_kube, bad)
    unknown = {**pool.obj, "spec": {**pool.obj["spec"], "consolidateWhen": "always"}}
    with pytest.raises(KubeError, match="consolidateWhen"):
        _dry_run(real_kube, unknown)
