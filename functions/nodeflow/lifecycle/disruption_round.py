"""The disruption Lambda's work: one round of ``nodeflow.disruption.round.decide`` on a fresh snapshot, acted on.
Named after the step; the pure decisions are ``nodeflow.disruption``, the Lambda entry point
``nodeflow.handlers.disruption``.

- A cluster-wide pause (incident response) stops everything voluntary: ConfigMap
  ``nodeflow-disruption`` in the nodeflow namespace with ``paused: "true"`` (``kubectl -n nodeflow
  create configmap nodeflow-disruption --from-literal=paused=true``; delete it to resume).
  Expiration is forceful in Karpenter and is not paused.
- A running Karpenter controller holds everything still, expiration, repair and static NodePools included
  (``lifecycle/karpenter_guard.py``): ``paused`` says why, each NodePool gets the Event.
- Expired nodes (``expireAfter``) get a terminate workflow each (reason ``Expired``).
- Nodes on a capacity block that ends within 40 minutes get one too (reason ``CapacityBlockExpiring``;
  ``lifecycle/reservation_tracking.py``), as Karpenter's capacity reservation expiration controller.
- With the ``NodeRepair`` feature gate, unhealthy nodes are replaced forcefully (``lifecycle/node_repair.py``).
- Blocked candidates get their event (``DisruptionBlocked`` / ``Unconsolidatable``) naming the blocker.
- The voluntary command is re-validated after ``VALIDATION_SECONDS`` (15 s, as Karpenter): a second
  snapshot and round must propose the same nodes for the same reason, else nothing is done.
- Commands that only delete nodes (empty nodes; pods that fit elsewhere) are executed by starting
  the terminate workflow of each candidate (taint, drain, terminate), with ``DisruptionTerminating``
  events; each candidate is tainted ``karpenter.sh/disrupted`` before its workflow starts, so a
  round that runs meanwhile counts it against the budget. Commands with replacement NodeClaims go
  through ``lifecycle/replace.py``: candidates tainted, replacements created and launched, and the
  ``replace`` workflow waits for them to be initialized before terminating the candidates (or
  un-taints them if a replacement fails).

Must not touch: which command a round decides (``nodeflow.disruption.round``); what the workflows it starts do
(terminate, replace).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

from nodeflow.api import labels as wk
from nodeflow.api.duration import shift
from nodeflow.api.karpenter import NodeClaim, NodePool
from nodeflow.catalog.model import CatalogData
from nodeflow.disruption.budgets import allowed
from nodeflow.disruption.candidates import is_deleting
from nodeflow.disruption.model import Command, Evaluation, Reason, RoundResult, Settings, Snapshot
from nodeflow.disruption.round import Prepared, decide, prepare
from nodeflow.disruption.static import OVERPROVISIONED
from nodeflow.governance.decisions import Decision, disruption_records, time_key
from nodeflow.kube import errors as kerr
from nodeflow.kube.client import CONFIG_MAPS, NODE_CLAIMS, KubeClient
from nodeflow.kube.events import NORMAL, EventRecorder, ObjectRef
from nodeflow.kube.reports import Reports
from nodeflow.kube.snapshot import take_snapshot
from nodeflow.kube.status import set_node_claim_conditions
from nodeflow.kube.writes import add_taints, remove_taints
from nodeflow.lifecycle.karpenter_guard import Pause
from nodeflow.lifecycle.node_repair import RepairDeps, RepairOutcome, repair_nodes
from nodeflow.lifecycle.overlay_status import write_overlay_statuses
from nodeflow.lifecycle.provisioner import ProvisionDeps, keep_static
from nodeflow.lifecycle.replace import DISRUPTED, ReplaceDeps, start
from nodeflow.lifecycle.reservation_tracking import REASON_CAPACITY_BLOCK_EXPIRING, expiring_capacity_blocks

__all__ = [
    "PAUSE_CONFIG_MAP",
    "VALIDATION_SECONDS",
    "DisruptionDeps",
    "DisruptionOutcome",
    "mark_conditions",
    "paused",
    "pod_events",
    "record_pod_events",
    "run",
]

VALIDATION_SECONDS = 15.0
PAUSE_CONFIG_MAP = "nodeflow-disruption"


@dataclass(frozen=True)
class DisruptionDeps:
    kube: KubeClient
    catalog: CatalogData
    unavailable: Callable[[datetime], frozenset[tuple[str, str, str]]]
    start_terminate: Callable[[str, str], bool]  # (NodeClaim name, reason) -> started
    recorder: EventRecorder
    now: Callable[[], datetime]
    sleep: Callable[[float], None]
    namespace: str = "nodeflow"
    settings: Settings = field(default_factory=Settings)
    validation_seconds: float = VALIDATION_SECONDS
    start_launch: Callable[[str], bool] = lambda _name: False
    start_replace: Callable[[str, Mapping[str, Any]], bool] = lambda _name, _input: False
    timer: Callable[[], float] = time.perf_counter  # times the round's methods (metrics only)
    node_repair: bool = False  # Karpenter's NodeRepair feature gate (lifecycle/node_repair.py)
    # The decision log (``nodeflow.aws.decision_log.DecisionLog.write``; must not raise): the round's command, blocked
    # candidates and forceful terminations, written when the round is over (None: no log).
    decisions: Callable[[Sequence[Decision]], Any] | None = None
    # Where a condition, timer or Event write the API server did not take is logged (``nodeflow.kube.reports``).
    log: Callable[[str, dict[str, Any]], None] = lambda _message, _extra: None
    # Hold still while a Karpenter controller runs (``karpenter_guard.hold``: not even expiration, repair or static
    # NodePools; None: never asked, as in ``disrupt --dry-run``).
    karpenter: Callable[[Reports], Pause | None] | None = None


@dataclass
class DisruptionOutcome:
    paused: str | None = None
    expired: list[str] = field(default_factory=list)
    capacity_blocks: list[str] = field(default_factory=list)  # NodeClaims whose capacity block ends soon
    blocked: list[dict[str, Any]] = field(default_factory=list)
    command: dict[str, Any] | None = None
    executed: list[str] = field(default_factory=list)  # NodeClaims whose termination started
    replacing: dict[str, Any] | None = None  # the replace workflow's input, when the command replaces nodes
    skipped: str | None = None  # why the command was not executed
    disrupted: list[tuple[str, dict[str, str]]] = field(default_factory=list)  # (reason, NodeClaim labels)
    allowed_disruptions: list[tuple[str, str, int]] = field(default_factory=list)  # (NodePool, reason, nodes)
    consuming_budgets: list[tuple[str, str, int]] = field(default_factory=list)  # (NodePool, reason, nodes)
    pool_costs: list[tuple[str, float]] = field(default_factory=list)  # (NodePool, $/hour of its NodeClaims)
    evaluations: list[Evaluation] = field(default_factory=list)  # the first round's methods tried
    command_pools: list[str] = field(default_factory=list)  # the NodePools of the command carried out
    failed_validation: bool = False  # the validation round did not propose the command again
    scaled_down: list[str] = field(default_factory=list)  # NodeClaims of static NodePools above their replicas
    static_created: list[str] = field(default_factory=list)  # NodeClaims static NodePools lacked
    repair: RepairOutcome | None = None  # node repair's work this round (None: the NodeRepair gate is off)
    node_pools: dict[str, str] = field(default_factory=dict)  # node -> NodePool, and NodeClaim -> NodePool (below)
    claim_pools: dict[str, str] = field(default_factory=dict)  # for the decision log
    # the round's condition / Event writes, each on its own (the refused ones are logged and counted here)
    reports: Reports = field(default_factory=Reports)

    def to_json(self) -> dict[str, Any]:
        return {
            "paused": self.paused,
            "expired": self.expired,
            "capacityBlocksExpiring": self.capacity_blocks,
            "blocked": self.blocked,
            "command": self.command,
            "executed": self.executed,
            "replacing": self.replacing,
            "skipped": self.skipped,
            "scaledDown": self.scaled_down,
            "staticCreated": self.static_created,
            "repair": self.repair.to_json() if self.repair is not None else None,
            "reportErrors": self.reports.failed,
        }


POD_EVENT_KINDS = frozenset({"Pod Bound", "Pod Deleted"})


def pod_events(records: Iterable[Mapping[str, Any]]) -> dict[str, datetime]:
    """Node name -> the latest pod event on it, from the disruption queue's SQS records (the agent's
    ``Pod Bound`` / ``Pod Deleted`` events as EventBridge delivers them). Other or unreadable records
    are ignored: the queue is also a trigger."""
    out: dict[str, datetime] = {}
    for record in records:
        try:
            body = json.loads(str(record.get("body") or ""))
            if not isinstance(body, dict) or body.get("detail-type") not in POD_EVENT_KINDS:
                continue
            detail = body.get("detail") or {}
            node = str((detail.get("object") or {}).get("nodeName") or "")
            at = datetime.fromisoformat(str(detail.get("observedAt") or "").replace("Z", "+00:00"))
        except (ValueError, TypeError, AttributeError):
            continue
        if node and at.tzinfo is not None and (node not in out or at > out[node]):
            out[node] = at
    return out


def _stored_time(value: Any) -> datetime | None:
    try:
        at = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def record_pod_events(
    deps: DisruptionDeps, events: Mapping[str, datetime], reports: Reports | None = None
) -> list[str]:
    """Move each NodeClaim's ``status.lastPodEventTime`` (the consolidateAfter timer) forward to the
    latest pod event on its node; returns the NodeClaims written. Each NodeClaim on its own: a write the API
    server refuses or fails is logged and counted in ``reports``, the others are written.

    Event times are untrusted: one later than now counts as now (the time it was received), and a stored
    time later than now (or unreadable) is replaced, so no time past "now" is ever kept."""
    if not events:
        return []
    reports = reports if reports is not None else Reports(deps.log)
    now = deps.now()
    written: list[str] = []
    for claim in deps.kube.list_items(NODE_CLAIMS):
        status = claim.get("status") or {}
        at = events.get(str(status.get("nodeName") or ""))
        if at is None:
            continue
        at = min(at, now)
        current = _stored_time(status.get("lastPodEventTime")) if status.get("lastPodEventTime") else None
        if current is not None and at <= current <= now:
            continue
        stamp = at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        name = str(claim["metadata"]["name"])
        patch = {"status": {"lastPodEventTime": stamp}}
        if reports.run(
            "NodeClaim lastPodEventTime",
            f"NodeClaim/{name}",
            partial(deps.kube.patch, NODE_CLAIMS, name, patch, subresource="status"),
        ):
            written.append(name)
    return written


def paused(kube: KubeClient, namespace: str) -> str | None:
    """The pause switch: the ConfigMap's ``reason`` (or "paused") when ``paused`` is "true", else None."""
    try:
        cm = kube.get(CONFIG_MAPS, PAUSE_CONFIG_MAP, namespace)
    except kerr.NotFound:
        return None
    data: Mapping[str, str] = cm.get("data") or {}
    if str(data.get("paused", "")).strip().lower() != "true":
        return None
    return str(data.get("reason") or "paused")


@dataclass(frozen=True)
class _Round:
    result: RoundResult
    claims: dict[str, str]  # node name -> NodeClaim name
    pools: dict[str, NodePool]
    snapshot: Snapshot
    prepared: Prepared  # the round's candidates and drift, shared with ``mark_conditions``


def _round(deps: DisruptionDeps) -> _Round:
    snap = take_snapshot(deps.kube)
    if snap.node_overlays:  # their conditions, as Karpenter's overlay controller keeps them
        write_overlay_statuses(deps.kube, snap.state, deps.catalog, deps.now(), deps.unavailable(deps.now()))
    snapshot = Snapshot(state=snap.state, pdbs=snap.pdbs)
    claims = {c.status.node_name: c.name for c in snap.node_claims if c.status is not None and c.status.node_name}
    now = deps.now()
    prepared = prepare(snapshot, deps.catalog, now)
    result = decide(
        snapshot, deps.catalog, now, deps.unavailable(deps.now()), deps.settings, deps.timer, prepared=prepared
    )
    return _Round(result, claims, {p.name: p for p in snap.node_pools}, snapshot, prepared)


def mark_conditions(deps: DisruptionDeps, prepared: Prepared, reports: Reports | None = None) -> int:
    """Karpenter's NodeClaim conditions: ``Drifted`` (True with why, while it is) and ``Consolidatable``
    (consolidateAfter has passed since the node's last pod event and the policy allows consolidating it).
    Written only when they change; returns how many NodeClaims were written. Each NodeClaim on its own: a write the
    API server refuses or fails is logged and counted in ``reports``. The candidates and their drift are the
    round's (``prepared``: as of the round's time), not built again."""
    reports = reports if reports is not None else Reports(deps.log)
    now = deps.now()
    written = 0
    for c in prepared.candidates:
        if c.deleting:
            continue
        why = prepared.drift(c)
        drifted = ("True", "Drifted", why) if why else ("False", "NotDrifted", "")
        after = c.pool.spec.disruption.consolidate_after_seconds
        settled = after is not None and (c.last_pod_event is None or shift(c.last_pod_event, after) <= now)
        empty = not c.movable
        allowed = c.pool.spec.disruption.consolidation_policy != "WhenEmpty" or empty  # Balanced: as WEOU
        consolidatable = (
            ("True", "Consolidatable", "")
            if settled and allowed
            else (
                "False",
                "NotConsolidatable",
                "consolidateAfter has not passed" if not settled else "policy WhenEmpty",
            )
        )
        # a static NodePool's NodeClaims are never consolidatable (Karpenter does not mark them)
        marks = [("Drifted", *drifted)] if c.static else [("Drifted", *drifted), ("Consolidatable", *consolidatable)]
        if reports.run(
            "NodeClaim conditions",
            f"NodeClaim/{c.claim.name}",
            partial(set_node_claim_conditions, deps.kube, c.claim, marks, now=now),
        ):
            written += 1
    return written


def _same(a: Command, b: Command | None) -> bool:
    return b is not None and a.reason == b.reason and set(a.candidates) == set(b.candidates)


def run(deps: DisruptionDeps) -> DisruptionOutcome:
    out = DisruptionOutcome(reports=Reports(deps.log))
    try:
        return _run(deps, out)
    finally:
        if deps.decisions is not None:
            _log_decisions(deps, out)


def _log_decisions(deps: DisruptionDeps, out: DisruptionOutcome) -> None:
    """The round's records to the decision log; never raises (the log is for people)."""
    assert deps.decisions is not None
    with contextlib.suppress(Exception):
        at = deps.now()
        run_id = "d" + time_key(at).replace("-", "").replace(":", "").replace(".", "").rstrip("Z")
        deps.decisions(
            disruption_records(
                run_id,
                at,
                command=out.command,
                executed=out.executed,
                replacing=out.replacing is not None,
                skipped=out.skipped,
                blocked=out.blocked,
                expired=out.expired,
                scaled_down=out.scaled_down,
                capacity_blocks=out.capacity_blocks,
                node_pools=out.node_pools,
                claim_pools=out.claim_pools,
            )
        )


def _run(deps: DisruptionDeps, out: DisruptionOutcome) -> DisruptionOutcome:
    """The round's steps: a first round looked at (``_observe``), what no budget or pause holds back done
    (``_forceful``), then, unless paused, the blocked candidates reported and the round's command re-validated after
    ``validation_seconds`` and carried out (``_carry_out``)."""
    if deps.karpenter is not None and (pause := deps.karpenter(out.reports)) is not None:
        out.paused = pause.why
        return out
    first = _round(deps)
    _observe(deps, first, out)
    _forceful(deps, first, out)
    out.paused = paused(deps.kube, deps.namespace)
    if out.paused is not None:
        return out
    for b in first.result.blocked:
        event = partial(deps.recorder.record, ObjectRef("Node", b.node), NORMAL, b.kind.value, b.message)
        out.reports.run("Node event", f"Node/{b.node}", event)
        out.blocked.append(b.to_json())
    command = first.result.command
    if command is None:
        return out
    if any(first.claims.get(node) in out.capacity_blocks for node in command.candidates):
        out.skipped = "a candidate's capacity block is ending: it is being terminated; the next round decides again"
        return out
    out.command = command.to_json()
    deps.sleep(deps.validation_seconds)
    again = _round(deps)
    out.failed_validation = not _same(command, again.result.command)
    if out.failed_validation or paused(deps.kube, deps.namespace) is not None:
        out.skipped = "the cluster changed during the validation wait; the next round decides again"
        return out
    _carry_out(deps, again.result.command or command, again, out)
    return out


def _observe(deps: DisruptionDeps, first: _Round, out: DisruptionOutcome) -> None:
    """What the metrics and the decision log read of the first round (pools of nodes and NodeClaims, budgets, costs,
    evaluations), and the NodeClaims' disruption conditions marked."""
    for n in first.snapshot.state.nodes:
        out.node_pools[n.metadata.name or ""] = (n.metadata.labels or {}).get(wk.LABEL_NODEPOOL, "")
    for c in first.snapshot.state.node_claims:
        out.claim_pools[c.name] = (c.metadata.labels or {}).get(wk.LABEL_NODEPOOL, "")
    out.allowed_disruptions, out.consuming_budgets = budget_gauges(first.snapshot, deps.now())
    out.pool_costs = pool_costs(first.snapshot, deps.catalog)
    out.evaluations = list(first.result.evaluations)
    mark_conditions(deps, first.prepared, out.reports)


def _forceful(deps: DisruptionDeps, first: _Round, out: DisruptionOutcome) -> None:
    """What neither budgets nor the pause hold back: capacity blocks ending, expired NodeClaims, static NodePools
    scaled down and kept at their count, and (feature gate) node repair."""
    state = first.snapshot.state  # capacity blocks ending: forceful as expiration (no budget, not paused)
    for ending, _ in expiring_capacity_blocks(state.node_claims, state.node_classes, deps.now()):
        if deps.start_terminate(ending, REASON_CAPACITY_BLOCK_EXPIRING):
            out.capacity_blocks.append(ending)
    labels = _labels(first) if first.result.expirations else {}
    for e in first.result.expirations:
        if deps.start_terminate(e.node_claim, "Expired"):
            out.expired.append(e.node_claim)
            out.disrupted.append(("Expired", labels.get(e.node_claim, {})))
    # Static NodePools (spec.replicas), as Karpenter's static controllers: neither budgets nor the pause apply.
    for s in first.result.scale_downs:
        if deps.start_terminate(s.node_claim, OVERPROVISIONED):
            out.scaled_down.append(s.node_claim)
    provision = ProvisionDeps(
        kube=deps.kube,
        catalog=deps.catalog,
        unavailable=deps.unavailable,
        start_launch=deps.start_launch,
        recorder=deps.recorder,
        now=deps.now,
        sleep=deps.sleep,
    )
    out.static_created = keep_static(provision, first.snapshot.state)  # the periodic run keeps the count
    if deps.node_repair:  # forceful, like expiration: neither budgets nor the pause apply
        repair = RepairDeps(deps.kube, deps.recorder, deps.start_terminate, deps.now)
        out.repair = repair_nodes(repair, first.snapshot.state.nodes, first.snapshot.state.node_claims)
        out.disrupted += out.repair.disrupted


def _carry_out(deps: DisruptionDeps, command: Command, again: _Round, out: DisruptionOutcome) -> None:
    """The validated command: its replacements started first (the replace workflow), or its candidates tainted and
    terminated."""
    pools = {n.metadata.name: (n.metadata.labels or {}).get(wk.LABEL_NODEPOOL, "") for n in again.snapshot.state.nodes}
    out.command_pools = sorted({pools.get(node, "") for node in command.candidates})
    if command.replacements:
        replace = ReplaceDeps(
            kube=deps.kube,
            recorder=deps.recorder,
            now=deps.now,
            start_terminate=deps.start_terminate,
            start_launch=deps.start_launch,
            start_replace=deps.start_replace,
        )
        out.replacing = start(replace, command, again.claims, again.pools)
        return
    labels = _labels(again)
    for node in command.candidates:
        claim = again.claims.get(node)
        if claim is None:
            continue
        # Marked before its workflow starts (as Karpenter taints before it orchestrates): the next round
        # counts the node against the budget even if the workflow has not run its first step yet.
        try:
            add_taints(deps.kube, node, [DISRUPTED])
        except kerr.NotFound:  # gone meanwhile: nothing to disrupt
            continue
        try:
            started = deps.start_terminate(claim, command.reason.value)
        except Exception:
            with contextlib.suppress(kerr.KubeError):  # not started: the node stays schedulable
                remove_taints(deps.kube, node, [DISRUPTED])
            raise
        why = f"Disrupting Node: {command.reason.value}"
        event = partial(deps.recorder.record, ObjectRef("Node", node), NORMAL, "DisruptionTerminating", why)
        out.reports.run("Node event", f"Node/{node}", event)
        if started:
            out.executed.append(claim)
            out.disrupted.append((command.reason.value, labels.get(claim, {})))


def _labels(r: _Round) -> dict[str, dict[str, str]]:
    """NodeClaim name -> its labels (for the disruption metrics)."""
    return {c.name: dict(c.metadata.labels or {}) for c in r.snapshot.state.node_claims}


def budget_gauges(snapshot: Snapshot, now: datetime) -> tuple[list[tuple[str, str, int]], list[tuple[str, str, int]]]:
    """Per NodePool and disruption reason, for the metrics: (NodePool, reason, how many of its nodes its budgets let
    be disrupting at once now), and (NodePool, reason, how many of its nodes use up budget now: being deleted or
    disrupted, or not Ready). As Karpenter counts a pool's nodes: initialized ones, not those whose instance is
    already terminating (nodes being disrupted are not subtracted from the allowed count)."""
    nodes = {n.metadata.name: n for n in snapshot.state.nodes}
    counts: dict[str, int] = {}
    consuming: dict[str, int] = {}
    for claim in snapshot.state.node_claims:
        status = claim.status
        node = nodes.get(status.node_name or "") if status is not None else None
        if node is None or status is None:
            continue
        initialized = (node.metadata.labels or {}).get(wk.LABEL_INITIALIZED) == "true" or _true(claim, "Initialized")
        if initialized and not _true(claim, "InstanceTerminating"):
            pool = (node.metadata.labels or {}).get(wk.LABEL_NODEPOOL, "")
            counts[pool] = counts.get(pool, 0) + 1
            ready = next((c.status for c in node.status.conditions if c.type == "Ready"), None)
            if is_deleting(node, claim) or ready not in (None, "True"):
                consuming[pool] = consuming.get(pool, 0) + 1
    pools = sorted(snapshot.state.node_pools, key=lambda p: p.name)
    allowed_now = [
        (pool.name, reason.value, allowed(pool.spec.disruption.budgets, reason.value, counts.get(pool.name, 0), 0, now))
        for pool in pools
        for reason in Reason
    ]
    return allowed_now, [(pool.name, reason.value, consuming.get(pool.name, 0)) for pool in pools for reason in Reason]


def pool_costs(snapshot: Snapshot, catalog: CatalogData) -> list[tuple[str, float]]:
    """Per NodePool, the summed $/hour of its NodeClaims' offerings (instance type, zone and capacity type labels,
    priced from the catalog), as Karpenter's ``karpenter_nodepools_cost_total`` gauge; NodeClaims not launched
    yet (no instance-type label) or whose offering has no price count nothing. Every NodePool is listed."""
    totals = {pool.name: 0.0 for pool in snapshot.state.node_pools}
    for claim in snapshot.state.node_claims:
        labels = claim.metadata.labels or {}
        pool = labels.get(wk.LABEL_NODEPOOL)
        if pool is None or wk.LABEL_INSTANCE_TYPE not in labels:
            continue
        it, zone = labels[wk.LABEL_INSTANCE_TYPE], labels.get(wk.LABEL_ZONE, "")
        if labels.get(wk.LABEL_CAPACITY_TYPE) == wk.CAPACITY_TYPE_SPOT:
            price = catalog.spot_prices.get((it, zone))
        else:
            price = catalog.on_demand_prices.get(it)
        totals[pool] = totals.get(pool, 0.0) + (price or 0.0)
    return sorted(totals.items())


def _true(claim: NodeClaim, kind: str) -> bool:
    cond = claim.status.condition(kind) if claim.status is not None else None
    return cond is not None and cond.status == "True"
