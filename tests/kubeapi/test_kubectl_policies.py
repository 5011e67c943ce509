"""The real kubectl and the NodeflowPolicy CRD, against the test API server: ``apply -f`` of a policy, ``get``
with its printer columns (and the ``nfp`` short name), ``explain`` from the CRD's descriptions, and the CRD's
rules refusing a bad policy with their message."""

from __future__ import annotations

from datetime import timedelta

from tests.kubeapi import KubeAPIServer
from tests.kubeapi.test_kubectl import START, Clock, clock, kube, kubeconfig, kubectl, rows, server

__all__ = ["clock", "kube", "kubeconfig", "server"]

POLICY = """\
apiVersion: nodeflow.io/v1alpha1
kind: NodeflowPolicy
metadata:
  name: gpu-access
spec:
  nodePoolAccess:
    - nodePools: [gpu]
      namespaces: [ml-prod]
      namespaceSelector:
        matchLabels: {team: ml}
  resourceAccess:
    - resources: [nvidia.com/gpu]
      namespaceSelector: {matchLabels: {team: ml}}
  costCeilings:
    cluster: {maxPricePerHour: "40"}
    nodePools: [{name: gpu, maxPricePerHour: "20"}]
    namespaces: [{name: ml-exp, maxPricePerHour: 5}]
  limits:
    - name: batch-group
      nodePools: [batch-a, batch-b]
      resources: {cpu: "1000", memory: 4000Gi, nodes: "50"}
  pauses:
    - name: quarter-end-freeze
      schedule: "0 18 * * 5"
      duration: 60h
      provisioning: true
      disruption: true
      nodePools: [gpu]
"""

BAD = """\
apiVersion: nodeflow.io/v1alpha1
kind: NodeflowPolicy
metadata:
  name: open-door
spec:
  nodePoolAccess:
    - nodePools: [gpu]
  pauses:
    - name: nothing
      schedule: "@daily"
      duration: 1d
"""


def test_kubectl_apply_and_get_a_policy(kube: KubeAPIServer, kubeconfig: str, clock: Clock) -> None:
    assert "nodeflowpolicy.nodeflow.io/gpu-access created" in kubectl(kubeconfig, "apply", "-f", "-", stdin=POLICY)
    clock.now = START + timedelta(minutes=3)
    assert rows(kubectl(kubeconfig, "get", "nodeflowpolicies")) == [
        ["NAME", "NODEPOOLS", "RESOURCES", "CLUSTER$/H", "PAUSES", "AGE"],
        ["gpu-access", '["gpu"]', '["nvidia.com/gpu"]', "40", "quarter-end-freeze", "3m"],
    ]
    wide = rows(kubectl(kubeconfig, "get", "nfp", "-o", "wide"))
    assert wide[0][-3:] == ["LIMITS", "NODEPOOL$/H", "NAMESPACE$/H"]
    assert wide[1][-3] == "batch-group"
    stored = kube.get("nodeflow.io/v1alpha1", "NodeflowPolicy", "gpu-access")
    assert stored["spec"]["pauses"][0]["provisioning"] is True
    assert stored["spec"]["costCeilings"]["namespaces"] == [{"name": "ml-exp", "maxPricePerHour": 5}]
    # unchanged on a second apply (the policy lives in Git and is applied again and again)
    assert "nodeflowpolicy.nodeflow.io/gpu-access unchanged" in kubectl(kubeconfig, "apply", "-f", "-", stdin=POLICY)


def test_kubectl_refuses_a_bad_policy_naming_the_fields(kube: KubeAPIServer, kubeconfig: str) -> None:
    out = kubectl(kubeconfig, "apply", "-f", "-", stdin=BAD, check=False)
    assert 'The NodeflowPolicy "open-door" is invalid' in out, out
    assert "spec.pauses[0].duration" in out, out
    assert kube.objects("nodeflow.io/v1alpha1", "NodeflowPolicy") == []
    fixed = BAD.replace("duration: 1d", "duration: 24h\n      provisioning: true")
    out = kubectl(kubeconfig, "apply", "-f", "-", stdin=fixed, check=False)
    assert "set 'namespaces' and/or 'namespaceSelector' (who this rule admits)" in out, out
    assert kube.objects("nodeflow.io/v1alpha1", "NodeflowPolicy") == []


def test_kubectl_explain_reads_the_policy_descriptions(kube: KubeAPIServer, kubeconfig: str) -> None:
    out = kubectl(kubeconfig, "explain", "nodeflowpolicy.spec")
    assert "GROUP:      nodeflow.io" in out
    assert "nodePoolAccess\t<[]Object>" in out
    assert "most restrictive" in out
    out = kubectl(kubeconfig, "explain", "nfp.spec.pauses.disruption")
    assert "expiration, interruption, node repair and capacity-block expiry" in out
