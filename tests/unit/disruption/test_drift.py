from __future__ import annotations

from datetime import timedelta

from nodeflow.api.karpenter import NodePool
from nodeflow.api.template_hash import legacy_nodepool_hash, nodepool_hash
from nodeflow.disruption.drift_detection import drift_reason
from nodeflow.disruption.model import Reason, Snapshot
from nodeflow.disruption.round import decide

from .builders import CATALOG, NOW, node, node_class, pod, pool, snapshot

ALL = [{"nodes": "100%"}]


def test_no_drift_when_everything_matches() -> None:
    p = pool()
    n, c = node("a", claim_annotations={"karpenter.sh/nodepool-hash": nodepool_hash(p)})
    assert drift_reason(c, p, node_class(), n.metadata.labels, catalog=CATALOG) is None


def test_nodepool_hash_drift() -> None:
    p = pool(labels={"team": "b"})
    hashed = {"karpenter.sh/nodepool-hash": nodepool_hash(pool()), "karpenter.sh/nodepool-hash-version": "v3"}
    n, c = node("a", claim_annotations=hashed)
    assert "template changed" in (drift_reason(c, p, node_class(), n.metadata.labels, catalog=CATALOG) or "")


def test_a_hash_written_by_an_earlier_nodeflow_is_not_drift_until_the_template_changes() -> None:
    """Upgrading nodeflow must not replace every node: its earlier hash (same v3 version) still matches."""
    p = pool(labels={"team": "a"})
    legacy = {"karpenter.sh/nodepool-hash": legacy_nodepool_hash(p), "karpenter.sh/nodepool-hash-version": "v3"}
    n, c = node("a", claim_annotations=legacy)
    assert drift_reason(c, p, node_class(), n.metadata.labels, catalog=CATALOG) is None
    edited = pool(labels={"team": "b"})
    assert "template changed" in (drift_reason(c, edited, node_class(), n.metadata.labels, catalog=CATALOG) or "")


def test_a_changed_time_added_of_a_template_taint_is_drift() -> None:
    """A NodeClaim made when the template's taint had another timeAdded is drifted; one of the template as it is is
    not (the earlier-nodeflow fallback has no hash of such a template, and judging does not fail on the time)."""

    def timed(at: str) -> NodePool:
        doc = pool().model_dump(by_alias=True, exclude_none=True, mode="json")
        doc["spec"]["template"]["spec"]["taints"] = [{"key": "k", "effect": "NoSchedule", "timeAdded": at}]
        return NodePool.model_validate(doc)

    current, earlier = timed("2026-01-02T00:00:00Z"), timed("2026-01-01T00:00:00Z")
    for made_from, drifted in ((current, False), (earlier, True)):
        hashed = {"karpenter.sh/nodepool-hash": nodepool_hash(made_from), "karpenter.sh/nodepool-hash-version": "v3"}
        n, c = node("a", claim_annotations=hashed)
        why = drift_reason(c, current, node_class(), n.metadata.labels, catalog=CATALOG)
        assert (why is not None and "template changed" in why) is drifted


def test_nodepool_hash_of_another_version_is_not_compared() -> None:
    n, c = node("a", claim_annotations={"karpenter.sh/nodepool-hash": "1", "karpenter.sh/nodepool-hash-version": "v1"})
    assert drift_reason(c, pool(), node_class(), n.metadata.labels, catalog=CATALOG) is None


def _class_hash(value: str, version: str | None = "v5") -> dict[str, str]:
    out = {"karpenter.k8s.aws/ec2nodeclass-hash": value}
    if version is not None:
        out["karpenter.k8s.aws/ec2nodeclass-hash-version"] = version
    return out


def test_ec2nodeclass_hash_drift() -> None:
    cls = node_class(annotations=_class_hash("2"))
    n, c = node("a", claim_annotations=_class_hash("1"))
    assert "EC2NodeClass default changed" in (drift_reason(c, pool(), cls, n.metadata.labels, catalog=CATALOG) or "")
    n, c = node("a", claim_annotations=_class_hash("2"))
    assert drift_reason(c, pool(), cls, n.metadata.labels, catalog=CATALOG) is None


def test_ec2nodeclass_hash_of_another_version_is_not_drift() -> None:
    """The AWS provider's rule: hashes of different hash versions are not compared."""
    cls = node_class(annotations=_class_hash("2", "v5"))
    n, c = node("a", claim_annotations=_class_hash("1", "v4"))
    assert drift_reason(c, pool(), cls, n.metadata.labels, catalog=CATALOG) is None


def test_ec2nodeclass_hash_without_versions_or_on_a_legacy_claim_is_not_drift() -> None:
    cls = node_class(annotations=_class_hash("2"))
    legacy_claim = node("a")
    assert drift_reason(legacy_claim[1], pool(), cls, legacy_claim[0].metadata.labels, catalog=CATALOG) is None
    n, c = node("a", claim_annotations=_class_hash("1", None))
    assert drift_reason(c, pool(), cls, n.metadata.labels, catalog=CATALOG) is None
    unversioned_class = node_class(annotations=_class_hash("2", None))
    n, c = node("a", claim_annotations=_class_hash("1"))
    assert drift_reason(c, pool(), unversioned_class, n.metadata.labels, catalog=CATALOG) is None


def test_ami_drift() -> None:
    n, c = node("a", image="ami-old")
    assert "AMI ami-old" in (drift_reason(c, pool(), node_class(), n.metadata.labels, catalog=CATALOG) or "")


def test_subnet_and_security_group_drift() -> None:
    n, c = node("a", claim_annotations={"nodeflow.io/subnet-id": "subnet-z"})
    assert "subnet subnet-z" in (drift_reason(c, pool(), node_class(), n.metadata.labels, catalog=CATALOG) or "")
    n, c = node("a", claim_annotations={"nodeflow.io/subnet-id": "subnet-a", "nodeflow.io/security-group-ids": "sg-2"})
    assert "security groups" in (drift_reason(c, pool(), node_class(), n.metadata.labels, catalog=CATALOG) or "")


def test_requirement_drift() -> None:
    n, c = node("a", "m5.2xlarge")
    p = pool(extra=[{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.xlarge"]}])
    assert "m5.2xlarge" in (drift_reason(c, p, node_class(), n.metadata.labels, catalog=CATALOG) or "")
    spot_only = pool(capacity=("spot",))
    assert drift_reason(c, spot_only, node_class(), n.metadata.labels, catalog=CATALOG) is not None


def test_drifted_node_is_replaced() -> None:
    s = snapshot(
        [node("old", "m5.large", image="ami-old")], [pod("p", "old", "1500m", "6Gi")], pools=[pool(budgets=ALL)]
    )
    command = decide(s, CATALOG, NOW).command
    assert command is not None
    assert command.reason is Reason.DRIFTED
    assert command.method == "drift"
    assert command.candidates == ("old",)
    assert len(command.replacements) == 1
    assert command.moves[0].replacement == 0


def test_drifted_empty_node_is_deleted_when_pods_fit_elsewhere() -> None:
    s = snapshot(
        [node("old", image="ami-old"), node("new")],
        [pod("p", "old"), pod("q", "new")],
        pools=[pool(budgets=ALL, after="Never")],
    )
    command = decide(s, CATALOG, NOW).command
    assert command is not None
    assert command.reason is Reason.DRIFTED
    assert command.replacements == ()
    assert command.moves[0].node == "new"


def test_drift_moves_pods_onto_a_node_inside_its_consolidate_after_window() -> None:
    """Karpenter's drift simulation is not a consolidation simulation (drift.go passes no IsConsolidationSimulation
    to SimulateScheduling): a node whose last pod event is within consolidateAfter still takes a drifted node's pods,
    so the drifted node is deleted, not replaced. Consolidation, in the same cluster, still holds that node."""
    nodes = [node("old", "m5.large", image="ami-old"), node("busy")]
    pods = [pod("p", "old"), pod("q", "busy")]
    state = snapshot(nodes, pods, pools=[pool(budgets=ALL, after="1h")]).state
    recent = Snapshot(state, last_pod_events={"busy": NOW - timedelta(minutes=5)})
    command = decide(recent, CATALOG, NOW).command
    assert command is not None
    assert (command.reason, command.candidates, command.replacements) == (Reason.DRIFTED, ("old",), ())
    assert [(m.pod, m.node) for m in command.moves] == [("default/p", "busy")]


def test_consolidation_still_keeps_pods_off_a_node_inside_its_consolidate_after_window() -> None:
    """The same two nodes with nothing drifted: consolidation may not move ``small``'s pod onto ``busy`` while
    busy's consolidateAfter runs (and ``small`` has no cheaper replacement), then may once it has passed."""
    nodes = [node("small", "m5.large"), node("busy")]
    pods = [pod("p", "small"), pod("q", "busy", "6")]  # busy (m5.2xlarge) has room for p, none to spare
    only = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large", "m5.2xlarge"]}]
    state = snapshot(nodes, pods, pools=[pool(budgets=ALL, after="1h", extra=only)]).state
    events = {"small": NOW - timedelta(hours=2)}
    held = decide(Snapshot(state, last_pod_events={**events, "busy": NOW - timedelta(minutes=5)}), CATALOG, NOW)
    assert held.command is None
    settled = decide(Snapshot(state, last_pod_events={**events, "busy": NOW - timedelta(hours=2)}), CATALOG, NOW)
    assert settled.command is not None
    assert (settled.command.reason, settled.command.candidates) == (Reason.UNDERUTILIZED, ("small",))
    assert settled.command.replacements == ()


def test_drift_one_at_a_time_under_a_budget_of_one() -> None:
    nodes = [node(f"old{i}", "m5.large", image="ami-old") for i in range(3)]
    pods = [pod(f"p{i}", f"old{i}", "1500m", "6Gi") for i in range(3)]
    result = decide(snapshot(nodes, pods, pools=[pool(budgets=[{"nodes": "1"}], after="Never")]), CATALOG, NOW)
    assert result.command is not None
    assert len(result.command.candidates) == 1
    assert len([b for b in result.blocked if "budget" in b.message]) == 2
