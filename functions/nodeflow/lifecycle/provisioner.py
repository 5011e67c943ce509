"""Provisioning: pending pods -> NodeClaims -> one launch workflow each.

One call handles one batch of events. The events only say that something is pending; what to
provision comes from a fresh snapshot of the cluster, solved as a whole (as Karpenter does).
Re-running a batch is safe: NodeClaim names derive from the batch and their pods, pods nominated
to NodeClaims not yet initialized count as placed (``nodeflow.plan``), and an execution is named
after its NodeClaim, so it starts at most once.
"""

from __future__ import annotations

import contextvars
import functools
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nodeflow.api.core import Pod
from nodeflow.api.karpenter import NodeClaim
from nodeflow.catalog.model import CatalogData
from nodeflow.kube import errors as kerr
from nodeflow.kube.client import KubeClient
from nodeflow.kube.events import EventRecorder
from nodeflow.kube.snapshot import Snapshot, take_snapshot
from nodeflow.kube.writes import create_node_claim
from nodeflow.lifecycle.claims import node_claim_manifest, node_claim_name
from nodeflow.lifecycle.nodeclass import NodeClassResolver, reconcile_status
from nodeflow.plan import plan

__all__ = ["ProvisionDeps", "ProvisionResult", "provision"]

EVENT_WORKERS = 8


@dataclass(frozen=True)
class ProvisionDeps:
    kube: KubeClient
    catalog: CatalogData
    unavailable: Callable[[datetime], frozenset[tuple[str, str, str]]]
    start_launch: Callable[[str], bool]  # NodeClaim name -> started (False: already running / ran)
    recorder: EventRecorder
    now: Callable[[], datetime]
    timer: Callable[[], float] = time.perf_counter
    snapshot: Callable[[KubeClient], Snapshot] = take_snapshot
    # Resolves EC2NodeClasses not yet resolved at their generation (None: status is taken as found).
    resolver: NodeClassResolver | None = None
    log: Callable[[str, dict[str, Any]], None] = lambda _message, _extra: None


@dataclass
class ProvisionResult:
    batch: str
    created: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)  # proposed names that were there already
    started: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)  # NodeClaims that had no execution yet
    refused: dict[str, str] = field(default_factory=dict)  # NodePool -> why its NodeClaim could not be created
    pending_pods: int = 0
    unschedulable: int = 0
    event_errors: int = 0
    timings: dict[str, float] = field(default_factory=dict)
    pools: dict[str, str] = field(default_factory=dict)  # created NodeClaim -> its NodePool (for metrics)

    def to_json(self) -> dict[str, Any]:
        return {
            "batch": self.batch,
            "nodeClaimsCreated": self.created,
            "nodeClaimsExisting": self.existing,
            "executionsStarted": self.started,
            "executionsResumed": self.resumed,
            "nodeClaimsRefused": self.refused,
            "pendingPods": self.pending_pods,
            "unschedulablePods": self.unschedulable,
            "eventErrors": self.event_errors,
            "timings": {k: round(v, 4) for k, v in self.timings.items()},
        }


def _never_launched(claim: NodeClaim) -> bool:
    if claim.metadata.deletion_timestamp is not None:
        return False
    status = claim.status
    return status is None or (not status.provider_id and status.condition("Launched") is None)


def provision(deps: ProvisionDeps, batch: str) -> ProvisionResult:
    """Provision every pending pod of the cluster; ``batch`` is the stable id of the triggering events."""
    out = ProvisionResult(batch=batch)
    t0 = deps.timer()
    snap = deps.snapshot(deps.kube)
    out.timings["snapshot"] = deps.timer() - t0
    # A NodePool that is invalid, or whose EC2NodeClass is missing or not Ready, gets its condition and an
    # Event, and the solver skips it (reason per pod); NodePools around it keep working.
    t_status = deps.timer()
    snap = reconcile_status(deps.kube, deps.recorder, snap, deps.now(), resolver=deps.resolver, log=deps.log)
    out.timings["status"] = deps.timer() - t_status
    out.pending_pods = len(snap.pending)
    if not snap.pending:
        out.resumed = [c.name for c in snap.node_claims if _never_launched(c) and deps.start_launch(c.name)]
        return out

    t1 = deps.timer()
    result = plan(snap.provisioning_state(), deps.catalog, unavailable=deps.unavailable(deps.now()))
    out.timings["solve"] = deps.timer() - t1

    # Each NodeClaim's launch starts as soon as it exists: the first CreateFleet does not wait
    # for the whole batch to be written.
    pools = {p.name: p for p in snap.node_pools}
    known = {c.name for c in snap.node_claims}
    t2 = deps.timer()
    claims: list[tuple[str, tuple[str, ...]]] = []
    refused: list[tuple[str, tuple[str, ...]]] = []  # (NodePool, pods) whose NodeClaim was refused
    for nc in result.node_claims:
        pool = pools[nc.nodepool]
        try:
            for length in (5, 10):  # a clash of short names with a different NodeClaim: longer suffix
                name = node_claim_name(nc.nodepool, batch, nc.pods, length=length)
                try:
                    create_node_claim(deps.kube, node_claim_manifest(nc, pool, name, batch=batch))
                except kerr.AlreadyExists:
                    continue
                break
            else:
                raise kerr.Conflict(f"NodeClaim names for NodePool {nc.nodepool} of batch {batch} are taken")
        except (ValueError, kerr.Invalid, kerr.Forbidden) as exc:
            # What this NodePool makes cannot be created (refused by validation or admission): its pods wait
            # with the reason, and the other NodePools' NodeClaims are still made. Retrying cannot help.
            out.refused[nc.nodepool] = str(exc).splitlines()[0][:500]
            refused.append((nc.nodepool, nc.pods))
            continue
        claims.append((name, nc.pods))
        (out.existing if name in known else out.created).append(name)
        out.pools[name] = nc.nodepool
        if deps.start_launch(name):
            out.started.append(name)
        if "first_start" not in out.timings:
            out.timings["first_start"] = deps.timer() - t0
    proposed = {name for name, _ in claims}
    out.resumed = [
        c.name for c in snap.node_claims if c.name not in proposed and _never_launched(c) and deps.start_launch(c.name)
    ]
    out.timings["create_and_start"] = deps.timer() - t2

    # Events last, a few at a time: they are for people, the launches do not wait for them.
    t4 = deps.timer()
    pods: Mapping[str, Pod] = {p.key: p for p in snap.pending}
    calls: list[Callable[[], Any]] = []
    for name, keys in claims:
        calls.extend(functools.partial(deps.recorder.nominated, pods[k], name) for k in keys if k in pods)
    for u in result.unschedulable:
        if u.pod in pods:
            why = "; ".join(f"{pool}: {reason}" if pool else reason for pool, reason in sorted(u.reasons.items()))
            calls.append(
                functools.partial(deps.recorder.failed_scheduling, pods[u.pod], why or "no NodePool can serve it")
            )
    for pool_name, keys in refused:
        why = f"{pool_name}: its NodeClaim was refused: {out.refused[pool_name]}"
        calls.extend(functools.partial(deps.recorder.failed_scheduling, pods[k], why) for k in keys if k in pods)
    with ThreadPoolExecutor(max_workers=EVENT_WORKERS) as executor:
        for future in [executor.submit(contextvars.copy_context().run, call) for call in calls]:  # as the caller
            try:
                future.result()
            except kerr.KubeError:  # an event that cannot be written is not worth failing the batch
                out.event_errors += 1
    out.timings["events"] = deps.timer() - t4
    out.unschedulable = len(result.unschedulable)
    return out
