"""Provisioning: pending pods -> NodeClaims -> one launch workflow each.

One call handles one batch of events. The events only say that something is pending; what to
provision comes from a fresh snapshot of the cluster, solved as a whole (as Karpenter does).
Re-running a batch is safe: NodeClaim names derive from the batch and their pods, pods nominated
to NodeClaims not yet initialized count as placed (``nodeflow.plan``), and an execution is named
after its NodeClaim, so it starts at most once.

Must not touch: where pods go (``nodeflow.plan``, ``nodeflow.scheduling``); how an instance launches (the launch
workflow).
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import math
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from nodeflow.api import labels as wk
from nodeflow.api.core import Pod
from nodeflow.api.karpenter import EC2NodeClass, NodeClaim, NodePool
from nodeflow.aws import errors as aws_errors
from nodeflow.catalog.model import CatalogData
from nodeflow.catalog.overlays import OverlayResult
from nodeflow.catalog.reservations import CapacityReservation
from nodeflow.cluster import ClusterState
from nodeflow.governance.decisions import ClaimOutcome, Decision, provisioning_records
from nodeflow.kube import errors as kerr
from nodeflow.kube.client import KubeClient
from nodeflow.kube.events import EventRecorder
from nodeflow.kube.reports import Reports
from nodeflow.kube.snapshot import Snapshot, take_snapshot
from nodeflow.kube.writes import create_node_claim
from nodeflow.lifecycle.claims import MAX_CLAIM_INSTANCE_TYPES, batch_id, node_claim_manifest, node_claim_name
from nodeflow.lifecycle.karpenter_guard import RETRY_SECONDS as KARPENTER_RETRY_SECONDS
from nodeflow.lifecycle.karpenter_guard import Pause
from nodeflow.lifecycle.nodeclass import NodeClassResolver, reconcile_status
from nodeflow.lifecycle.overlay_status import claim_annotations, write_overlay_statuses
from nodeflow.lifecycle.policy_status import report_policies
from nodeflow.lifecycle.reservation_tracking import available_after_launches
from nodeflow.plan import build_input, plan
from nodeflow.scheduling.static_capacity import is_static
from nodeflow.scheduling.types import NodeClaimPlan, SchedulingResult

__all__ = [
    "PauseRetry",
    "PendingRetry",
    "ProvisionDeps",
    "ProvisionResult",
    "keep_static",
    "pause_retry",
    "pending_retry",
    "provision",
    "retry_attempt",
]

EVENT_WORKERS = 8
# NodeClaim creates (each followed by its StartExecution) in flight at once: well under the API server's
# default --max-mutating-requests-inflight (200) and the clients' connection pools (botocore: 10).
CLAIM_WORKERS = 8

# Karpenter's Nominated events share one token bucket (5 a second, a burst of 10) and are dropped, not queued, when
# it is empty: of a burst of thousands of pods only the first few, then 5 a second, get one (``kubectl describe pod``
# shows it on those). They are sent as each NodeClaim's launch starts, like Karpenter's after each create. The
# bucket lives for one provisioner call (Karpenter's for the process). FailedScheduling events are not limited.
NOMINATED_BURST = 10
NOMINATED_PER_SECOND = 5.0
# Events never hold the provisioner (Karpenter's recorder writes them in the background and drops what it cannot):
# once one Nominated write takes this long or fails, the API server is starved or refusing (a write takes tens of
# milliseconds normally, up to a second or two on a loaded test machine), and the rest of the run's Nominated events
# are dropped rather than keeping the launch workers, and the run's return, waiting on it.
NOMINATED_SLOW_SECONDS = 5.0

# Pods a NodeflowPolicy provisioning pause holds: the provisioner asks to be run again when the window closes (a
# delayed message on its own queue). SQS delays a message 15 minutes at most: a longer window is re-armed by the
# run that message starts, while the window stays open. The message names at most RETRY_POD_NAMES of the pods.
RETRY_MAX_DELAY_SECONDS = 900
RETRY_POD_NAMES = 1000

# Pods the plan placed (on a NodeClaim it created, one in flight, or a node with room) may still not be bound:
# kube-scheduler places pods by its own scores as the nodes come up, so another pod can take the room planned for
# one (docs/benchmarks/fidelity.md). Karpenter requeues every provisionable pod every 10 s for this reason; here the
# run that leaves such pods pending asks for a run of its own PENDING_RETRY_SECONDS later (a delayed message on its
# queue, one at a time), which plans whatever is still pending. A chain of retries that creates no NodeClaim stops
# after PENDING_RETRY_ATTEMPTS (the agent's resync still re-sends pending pods); one that creates any starts again.
PENDING_RETRY_SECONDS = 15
PENDING_RETRY_ATTEMPTS = 20
PENDING_RETRY_TYPE = "Pending Pods Retry"

T = TypeVar("T")
R = TypeVar("R")


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
    # The capacity reservations the classes select, live (``reservation_tracking.live_reservations``; None: none).
    reservations: Callable[[Sequence[EC2NodeClass], datetime], tuple[CapacityReservation, ...]] | None = None
    # Backoff of NodeClaim creates answered 429 and of throttled StartExecutions (attempts per call, longest wait).
    kube_attempts: int = 8
    start_attempts: int = 8
    max_backoff: float = 5.0
    sleep: Callable[[float], None] = time.sleep
    jitter: Callable[[], float] = random.random
    # The decision log (``nodeflow.aws.decision_log.DecisionLog.write``; must not raise): the run's records, written
    # after its NodeClaims are created and launched (None: no log).
    decisions: Callable[[Sequence[Decision]], Any] | None = None
    # Schedules the run that provisions the pods a pause window holds when it closes (``PauseRetry``), or the pods
    # placed but not bound yet (``PendingRetry``); True: a message was sent, False: a retry was pending already.
    # None: no retry (the agent's resync re-sends the pending pods).
    retry: Callable[[PauseRetry | PendingRetry], bool] | None = None
    # Hold still while a Karpenter controller runs (``karpenter_guard.hold``; None: never asked, as in ``plan``).
    karpenter: Callable[[Reports], Pause | None] | None = None


@dataclass(frozen=True, slots=True)
class PauseRetry:
    """A provisioner run to come when the earliest provisioning pause holding pending pods closes: ``delay_seconds``
    from now (until ``until``, at most RETRY_MAX_DELAY_SECONDS), for ``pods`` (the first RETRY_POD_NAMES of
    ``held``)."""

    until: datetime
    delay_seconds: int
    pods: tuple[str, ...]
    held: int

    def message(self) -> dict[str, Any]:
        """The provisioning queue's message (an envelope like the other events there; any body triggers a run)."""
        until = self.until.strftime("%Y-%m-%dT%H:%M:%SZ")
        return {
            "id": f"pause-retry-{until}",
            "source": "nodeflow",
            "detail-type": "Provisioning Pause Ends",
            "detail": {"until": until, "pods": list(self.pods), "heldPods": self.held},
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "until": self.until.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "delaySeconds": self.delay_seconds,
            "heldPods": self.held,
        }


@dataclass(frozen=True, slots=True)
class PendingRetry:
    """A provisioner run ``delay_seconds`` from now for the pending pods a run placed but kube-scheduler has not bound
    yet (``pods``: the first RETRY_POD_NAMES of ``placed``); ``attempt``: how many such runs in a row created no
    NodeClaim, this one included."""

    delay_seconds: int
    pods: tuple[str, ...]
    placed: int
    attempt: int

    def message(self) -> dict[str, Any]:
        """The provisioning queue's message (any body triggers a run; the attempt is read back by the handler)."""
        return {
            "id": f"pending-retry-{self.attempt}-{self.pods[0] if self.pods else ''}",
            "source": "nodeflow",
            "detail-type": PENDING_RETRY_TYPE,
            "detail": {"attempt": self.attempt, "pods": list(self.pods), "placedPods": self.placed},
        }

    def to_json(self) -> dict[str, Any]:
        return {"delaySeconds": self.delay_seconds, "placedPods": self.placed, "attempt": self.attempt}


def retry_attempt(bodies: Sequence[Mapping[str, Any]]) -> int:
    """The attempt of a batch: the highest ``PendingRetry`` attempt among its messages' bodies, 0 when it has none
    (pods the agent sent start a chain afresh only when no retry message is in the batch)."""
    attempts = [
        b["detail"].get("attempt")
        for b in bodies
        if b.get("detail-type") == PENDING_RETRY_TYPE and isinstance(b.get("detail"), dict)
    ]
    # anything but a whole number counts as no attempt: a garbled message is still a trigger, never a failed batch
    return max((a for a in attempts if isinstance(a, int) and not isinstance(a, bool) and a > 0), default=0)


def pending_retry(pending: Sequence[str], result: SchedulingResult, attempt: int, created: bool) -> PendingRetry | None:
    """The run to come for the ``pending`` pods ``result`` placed (every pending pod it did not report
    unschedulable); None when it placed none, or when ``attempt`` runs in a row created no NodeClaim and this one
    did not either (``created``)."""
    unplaced = {u.pod for u in result.unschedulable}
    placed = sorted(k for k in pending if k not in unplaced)
    if not placed:
        return None
    next_attempt = 1 if created else attempt + 1
    if next_attempt > PENDING_RETRY_ATTEMPTS:
        return None
    return PendingRetry(PENDING_RETRY_SECONDS, tuple(placed[:RETRY_POD_NAMES]), len(placed), next_attempt)


def pause_retry(state: ClusterState, result: SchedulingResult, now: datetime) -> PauseRetry | None:
    """The retry for the pending pods of ``result`` a provisioning pause of ``state``'s NodeflowPolicies holds at
    ``now`` (a NodePool's reason for the pod is its pause), due when the earliest such NodePool's windows close;
    None when no pod is held by a pause. An invalid policy's fail-safe pause has no end (it lifts when the policy
    is fixed): its NodePools are left out."""
    if not state.policies or not result.unschedulable:
        return None
    from nodeflow.governance.invalid import INVALID_WINDOW  # only with policies (cold imports stay small)
    from nodeflow.governance.policy import Governance

    gov = Governance.from_policies(state.policies)
    paused: dict[str, tuple[str, datetime]] = {}  # NodePool -> (its pause reason, when its open windows close)
    for pool in state.node_pools:
        why = gov.provisioning_pause(pool.name, now) if gov.windows else None
        if why is None:
            continue
        open_ = [(w, until) for w, until in gov.open_windows(now) if w.provisioning and w.covers(pool.name)]
        ends = [until for _, until in open_]
        if ends and not any(w.name == INVALID_WINDOW for w, _ in open_):
            paused[pool.name] = (why, max(ends))
    held: dict[str, datetime] = {}
    for u in result.unschedulable:
        ends = [paused[pool][1] for pool, why in u.reasons.items() if pool in paused and why == paused[pool][0]]
        if ends:
            held[u.pod] = min(ends)
    if not held:
        return None
    until = min(held.values())
    delay = min(RETRY_MAX_DELAY_SECONDS, math.ceil((until - now).total_seconds()) + 1)  # +1: past the close
    pods = sorted(held)
    return PauseRetry(until, max(1, delay), tuple(pods[:RETRY_POD_NAMES]), len(pods))


@dataclass
class ProvisionResult:
    batch: str
    created: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)  # proposed names that were there already
    started: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)  # NodeClaims that had no execution yet
    deferred: list[str] = field(default_factory=list)  # NodeClaims whose execution could not be started (throttled)
    refused: dict[str, str] = field(default_factory=dict)  # NodePool -> why its NodeClaim could not be created
    pending_pods: int = 0
    unschedulable: int = 0
    event_errors: int = 0
    report_errors: int = 0  # status / condition / Event writes of NodePools, classes, policies the API server refused
    nominated: int = 0  # Nominated events sent
    nominations_dropped: int = 0  # Nominated events the rate limit dropped (as Karpenter does)
    timings: dict[str, float] = field(default_factory=dict)
    pools: dict[str, str] = field(default_factory=dict)  # created NodeClaim -> its NodePool (for metrics)
    retry: PauseRetry | PendingRetry | None = None  # the run scheduled for pods a pause holds, or placed and pending
    retry_sent: bool = False  # False: one was pending already (or it could not be sent)
    karpenter: Pause | None = None  # a Karpenter controller runs: nothing was done

    def to_json(self) -> dict[str, Any]:
        return {
            "batch": self.batch,
            "nodeClaimsCreated": self.created,
            "nodeClaimsExisting": self.existing,
            "executionsStarted": self.started,
            "executionsResumed": self.resumed,
            "executionsDeferred": self.deferred,
            "nodeClaimsRefused": self.refused,
            "pendingPods": self.pending_pods,
            "unschedulablePods": self.unschedulable,
            "eventErrors": self.event_errors,
            "reportErrors": self.report_errors,
            "nominatedEvents": self.nominated,
            "nominatedEventsDropped": self.nominations_dropped,
            "timings": {k: round(v, 4) for k, v in self.timings.items()},
            **(
                {self._retry_key(): {**self.retry.to_json(), "sent": self.retry_sent}} if self.retry is not None else {}
            ),
            **({"karpenterRunning": self.karpenter.to_json()} if self.karpenter is not None else {}),
        }

    def _retry_key(self) -> str:
        return "pendingRetry" if isinstance(self.retry, PendingRetry) else "pauseRetry"


class _TokenBucket:
    """``try_accept`` takes a token when one is left: ``burst`` at most, ``rate`` more per second of ``timer``."""

    def __init__(self, burst: int, rate: float, timer: Callable[[], float]) -> None:
        self._burst = float(burst)
        self._tokens = float(burst)
        self._rate = rate
        self._timer = timer
        self._at = timer()
        self._lock = threading.Lock()

    def try_accept(self) -> bool:
        with self._lock:
            now = self._timer()
            self._tokens = min(self._burst, self._tokens + (now - self._at) * self._rate)
            self._at = now
            if self._tokens < 1:
                return False
            self._tokens -= 1
            return True


def _in_parallel(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """``[fn(i) for i in items]``, CLAIM_WORKERS at a time (each in a copy of the caller's context)."""
    if len(items) <= 1:
        return [fn(i) for i in items]
    with ThreadPoolExecutor(max_workers=min(CLAIM_WORKERS, len(items))) as executor:
        futures = [executor.submit(contextvars.copy_context().run, fn, i) for i in items]
        try:
            return [f.result() for f in futures]
        except BaseException:
            executor.shutdown(wait=True, cancel_futures=True)  # the first error stops the rest (none is half done)
            raise


def _create_claim(
    deps: ProvisionDeps,
    nc: NodeClaimPlan,
    pool: NodePool,
    batch: str,
    key: Sequence[str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> str:
    """Create ``nc``'s NodeClaim (idempotent); returns its name. A 429 is retried after the server's Retry-After
    (the request was not processed); a clash of short names with a different NodeClaim takes a longer suffix.
    ``key`` names it instead of its pods (a static NodeClaim has none)."""
    for length in (5, 10):
        name = node_claim_name(nc.nodepool, batch, nc.pods if key is None else key, length=length)
        manifest = node_claim_manifest(nc, pool, name, batch=batch)
        manifest["metadata"]["annotations"].update(annotations or {})
        try:
            kerr.retry(
                functools.partial(create_node_claim, deps.kube, manifest),
                on=(kerr.TooManyRequests,),
                attempts=deps.kube_attempts,
                base_delay=0.2,
                max_delay=deps.max_backoff,
                sleep=deps.sleep,
            )
        except kerr.AlreadyExists:
            continue
        return name
    raise kerr.Conflict(f"NodeClaim names for NodePool {nc.nodepool} of batch {batch} are taken")


def _start(deps: ProvisionDeps, name: str, out: ProvisionResult, lock: threading.Lock) -> bool:
    """Start ``name``'s launch, retrying Step Functions' throttling (and 5xx) with backoff and jitter. When it
    still cannot be started, the NodeClaim is recorded in ``out.deferred`` (never dropped: the batch is retried,
    and any later provisioner run starts every NodeClaim that never launched)."""
    delay = 0.1
    for attempt in range(deps.start_attempts):
        try:
            return deps.start_launch(name)
        except (aws_errors.Throttled, aws_errors.AwsUnavailable):
            if attempt == deps.start_attempts - 1:
                break
            deps.sleep(delay * (0.5 + deps.jitter() / 2))
            delay = min(deps.max_backoff, delay * 2)
    with lock:
        out.deferred.append(name)
    return False


def _static_names(plans: Sequence[NodeClaimPlan], claims: Sequence[NodeClaim]) -> dict[int, tuple[str, tuple[str]]]:
    """(batch, key) naming each static NodeClaim of ``plans`` (by index): the n-th one a NodePool lacks, given the
    NodeClaims it has. Runs on the same cluster state (a retried batch, the provisioner and the periodic run of
    the disruption Lambda) propose the same names, so a NodeClaim is never made twice for one missing replica."""
    out: dict[int, tuple[str, tuple[str]]] = {}
    seen: dict[str, int] = {}
    for i, nc in enumerate(plans):
        if not nc.static:
            continue
        n = seen[nc.nodepool] = seen.get(nc.nodepool, -1) + 1
        mine = sorted(c.name for c in claims if (c.metadata.labels or {}).get(wk.LABEL_NODEPOOL) == nc.nodepool)
        out[i] = (batch_id(["static", nc.nodepool, *mine]), (f"replica-{n}",))
    return out


def keep_static(deps: ProvisionDeps, state: ClusterState) -> list[str]:
    """Create and launch the NodeClaims the static NodePools (spec.replicas) of ``state`` still need, as the
    provisioner does on each run (the periodic run: the disruption Lambda calls it every minute, as Karpenter's
    static provisioning requeues). Pending pods are left to the provisioner. Returns the NodeClaims created."""
    if not any(is_static(p) for p in state.node_pools):
        return []
    bound = dataclasses.replace(state, pods=tuple(p for p in state.pods if p.spec.node_name))
    inp = build_input(bound, deps.catalog, unavailable=deps.unavailable(deps.now()), now=deps.now())
    pools = {p.name: p for p in state.node_pools}
    names = _static_names(inp.static_claims, state.node_claims)
    known = {c.name for c in state.node_claims}
    lock = threading.Lock()
    out = ProvisionResult(batch="static")

    def create(item: tuple[int, NodeClaimPlan]) -> str | None:
        batch, key = names[item[0]]
        try:
            name = _create_claim(deps, item[1], pools[item[1].nodepool], batch, key)
        except (ValueError, kerr.Invalid, kerr.Forbidden) as exc:
            deps.log("static NodeClaim refused", {"nodePool": item[1].nodepool, "error": str(exc)[:500]})
            return None
        _start(deps, name, out, lock)
        return name

    made = _in_parallel(create, list(enumerate(inp.static_claims)))
    return [name for name in made if name is not None and name not in known]


def _never_launched(claim: NodeClaim) -> bool:
    if claim.metadata.deletion_timestamp is not None:
        return False
    status = claim.status
    return status is None or (not status.provider_id and status.condition("Launched") is None)


def provision(deps: ProvisionDeps, batch: str, attempt: int = 0) -> ProvisionResult:
    """Provision every pending pod of the cluster; ``batch`` is the stable id of the triggering events, ``attempt``
    the ``PendingRetry`` attempt that triggered it (``retry_attempt``)."""
    out = ProvisionResult(batch=batch)
    if _karpenter_runs(deps, out):  # a Karpenter controller runs: no status, no NodeClaim, no launch (a run later)
        return out
    t0 = deps.timer()
    snap = deps.snapshot(deps.kube)
    out.timings["snapshot"] = deps.timer() - t0
    snap, overlays = _report_status(deps, snap, out)
    out.pending_pods = len(snap.pending)
    if not snap.pending and not any(is_static(p) for p in snap.node_pools):
        out.resumed = _resume(deps, [c.name for c in snap.node_claims if _never_launched(c)], out, threading.Lock())
        return out

    t1 = deps.timer()
    state = snap.provisioning_state()
    if deps.reservations is not None:  # reserved offerings, less what NodeClaims not launched yet will take
        live = deps.reservations(snap.node_classes, deps.now())
        if live:
            state = dataclasses.replace(state, capacity_reservations=available_after_launches(live, snap.node_claims))
    now = deps.now()
    result = plan(state, deps.catalog, unavailable=deps.unavailable(now), now=now)
    out.timings["solve"] = deps.timer() - t1

    pending: Mapping[str, Pod] = {p.key: p for p in snap.pending}
    outcomes, refused = _create_and_start(deps, _Launches(deps, batch, snap, result, overlays, pending, out, t0))
    _failed_scheduling(deps, result, pending, refused, out)
    out.unschedulable = len(result.unschedulable)
    if deps.retry is not None:
        held = pause_retry(state, result, now)
        placed = pending_retry(list(pending), result, attempt, bool(out.created))
        # the sooner of the two (one delayed message at a time): a pause's run is re-armed by the runs before it
        soonest = min((r for r in (held, placed) if r is not None), key=lambda r: r.delay_seconds, default=None)
        _schedule_retry(deps, out, soonest)
    if deps.decisions is not None:  # last: the launches and events do not wait for it
        _log_decisions(deps, batch, list(pending), result, outcomes)
    return out


def _karpenter_runs(deps: ProvisionDeps, out: ProvisionResult) -> bool:
    """Does a Karpenter controller run (``out.karpenter`` says which; a run is scheduled for later)?"""
    if deps.karpenter is None:
        return False
    reports = Reports(deps.log)
    out.karpenter = deps.karpenter(reports)
    out.report_errors = reports.failed
    if out.karpenter is None:
        return False
    if deps.retry is not None:
        now = deps.now()
        due = PauseRetry(now + timedelta(seconds=KARPENTER_RETRY_SECONDS), KARPENTER_RETRY_SECONDS, (), 0)
        _schedule_retry(deps, out, due)
    return True


def _report_status(deps: ProvisionDeps, snap: Snapshot, out: ProvisionResult) -> tuple[Snapshot, OverlayResult | None]:
    """NodePools', EC2NodeClasses', NodeflowPolicies' and NodeOverlays' conditions and Events written; the snapshot
    as they leave it, and what the NodeOverlays changed (None without any)."""
    t_status = deps.timer()
    # A NodePool that is invalid, or whose EC2NodeClass is missing or not Ready, gets its condition and an
    # Event, and the solver skips it (reason per pod); NodePools around it keep working.
    # Each object's report stands on its own: a write the API server refuses is logged and counted, the rest go on.
    reports = Reports(deps.log)
    snap = reconcile_status(
        deps.kube, deps.recorder, snap, deps.now(), resolver=deps.resolver, log=deps.log, reports=reports
    )
    # An invalid NodeflowPolicy gets an Event naming its fields (the plan gets its fail-safe stand-in).
    report_policies(deps.recorder, snap, deps.log, reports)
    out.report_errors = reports.failed
    # NodeOverlays' conditions (applied, or not: conflict, runtime validation); what they changed, for the
    # price-overlay-applied / capacity-overlay-applied annotations of the NodeClaims
    overlays = (
        write_overlay_statuses(deps.kube, snap.state, deps.catalog, deps.now(), deps.unavailable(deps.now()))
        if snap.node_overlays
        else None
    )
    out.timings["status"] = deps.timer() - t_status
    return snap, overlays


def _resume(deps: ProvisionDeps, names: Sequence[str], out: ProvisionResult, lock: threading.Lock) -> list[str]:
    """Start the launches of the NodeClaims ``names`` (that never launched); those started."""
    started = _in_parallel(lambda name: _start(deps, name, out, lock), names)
    return [name for name, ok in zip(names, started, strict=True) if ok]


class _Launches:
    """The NodeClaims of one plan being created and launched, a bounded number at a time: each NodeClaim's launch
    starts as soon as it exists (the first CreateFleet does not wait for the whole batch to be written), then its
    pods' Nominated events are sent, as the rate limit lets them and while the API server answers them quickly."""

    def __init__(
        self,
        deps: ProvisionDeps,
        batch: str,
        snap: Snapshot,
        result: SchedulingResult,
        overlays: OverlayResult | None,
        pending: Mapping[str, Pod],
        out: ProvisionResult,
        t0: float,
    ) -> None:
        self.deps = deps
        self.batch = batch
        self.snap = snap
        self.result = result
        self.overlays = overlays
        self.pending = pending
        self.out = out
        self.t0 = t0  # when the run started (the timings count from it)
        self.pools = {p.name: p for p in snap.node_pools}
        self.known = {c.name for c in snap.node_claims}
        self.static_names = _static_names(result.node_claims, snap.node_claims)  # a static one has no pods to name it
        self.lock = threading.Lock()
        self.bucket = _TokenBucket(NOMINATED_BURST, NOMINATED_PER_SECOND, deps.timer)
        self.events_off = False  # set by a slow or failed Nominated write: the rest are dropped

    def nominate(self, name: str, keys: Sequence[str]) -> None:
        """The Nominated events of a NodeClaim's pods the rate limit lets through."""
        out = self.out
        for key in keys:
            pod = self.pending.get(key)
            if pod is None:
                continue
            if self.events_off or not self.bucket.try_accept():
                with self.lock:
                    out.nominations_dropped += 1
                continue
            started = self.deps.timer()
            try:
                self.deps.recorder.nominated(pod, name)
            except kerr.KubeError:  # an event that cannot be written is not worth failing the batch
                with self.lock:
                    out.event_errors += 1
                    self.events_off = True
            else:
                with self.lock:
                    out.nominated += 1
                    if self.deps.timer() - started >= NOMINATED_SLOW_SECONDS:
                        self.events_off = True

    def launch(self, item: tuple[int, NodeClaimPlan]) -> tuple[str | None, str | None, bool]:
        """(name, refusal, started) of one planned NodeClaim."""
        deps, out, lock, t0 = self.deps, self.out, self.lock, self.t0
        i, nc = item
        claim_batch, key = self.static_names.get(i, (self.batch, None))
        try:
            notes = claim_annotations(self.overlays, nc.nodepool, nc.instance_types[:MAX_CLAIM_INSTANCE_TYPES])
            name = _create_claim(deps, nc, self.pools[nc.nodepool], claim_batch, key, notes)
        except (ValueError, kerr.Invalid, kerr.Forbidden) as exc:
            # What this NodePool makes cannot be created (refused by validation or admission): its pods wait
            # with the reason, and the other NodePools' NodeClaims are still made. Retrying cannot help.
            return None, str(exc).splitlines()[0][:500], False
        with lock:
            out.timings["claims_created"] = deps.timer() - t0  # the last one to finish wins
        started = _start(deps, name, out, lock)
        with lock:
            if "first_start" not in out.timings:
                out.timings["first_start"] = deps.timer() - t0
            out.timings["all_started"] = deps.timer() - t0
        self.nominate(name, nc.pods)  # after the launch started: it does not wait for events
        return name, None, started


def _create_and_start(
    deps: ProvisionDeps, launches: _Launches
) -> tuple[list[ClaimOutcome], list[tuple[str, tuple[str, ...]]]]:
    """Create and launch the planned NodeClaims (CLAIM_WORKERS at a time, in the plan's order), then resume those
    of earlier runs that never launched: each planned NodeClaim's outcome, for the decision log, and the (NodePool,
    pods) whose NodeClaim was refused."""
    t2 = deps.timer()
    out, plans = launches.out, launches.result.node_claims
    proposed: set[str] = set()
    refused: list[tuple[str, tuple[str, ...]]] = []
    outcomes: list[ClaimOutcome] = []
    for nc, (name, refusal, started) in zip(plans, _in_parallel(launches.launch, list(enumerate(plans))), strict=True):
        known = name in launches.known
        outcomes.append(
            ClaimOutcome(None, "refused", refusal or "")
            if name is None
            else ClaimOutcome(name, "existing" if known else "created")
        )
        if name is None:
            out.refused[nc.nodepool] = refusal or ""
            refused.append((nc.nodepool, nc.pods))
            continue
        proposed.add(name)
        (out.existing if known else out.created).append(name)
        out.pools[name] = nc.nodepool
        if started:
            out.started.append(name)
    waiting = [c.name for c in launches.snap.node_claims if c.name not in proposed and _never_launched(c)]
    out.resumed = _resume(deps, waiting, out, launches.lock)
    out.timings["create_and_start"] = deps.timer() - t2
    return outcomes, refused


def _failed_scheduling(
    deps: ProvisionDeps,
    result: SchedulingResult,
    pods: Mapping[str, Pod],
    refused: Sequence[tuple[str, tuple[str, ...]]],
    out: ProvisionResult,
) -> None:
    """FailedScheduling events last, a few at a time: they are for people, the launches do not wait for them. A pod
    the plan left pending gets its reasons per NodePool; a pod whose NodeClaim was refused, the refusal."""
    t4 = deps.timer()
    calls: list[Callable[[], Any]] = []
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


def _schedule_retry(deps: ProvisionDeps, out: ProvisionResult, retry: PauseRetry | PendingRetry | None) -> None:
    assert deps.retry is not None
    out.retry = retry
    if retry is None:
        return
    try:
        out.retry_sent = deps.retry(retry)
    except Exception as exc:  # the agent's resync still re-sends the pods: never fails the batch
        deps.log("retry: not scheduled", {"error": f"{type(exc).__name__}: {str(exc)[:400]}"})


def _log_decisions(
    deps: ProvisionDeps, batch: str, pods: list[str], result: SchedulingResult, outcomes: list[ClaimOutcome]
) -> None:
    assert deps.decisions is not None
    try:
        records = provisioning_records(batch[:16], deps.now(), pods, result, outcomes, MAX_CLAIM_INSTANCE_TYPES)
        deps.decisions(records)
    except Exception as exc:  # the log is for people: a failure here never fails the batch
        deps.log("decision log: not written", {"error": f"{type(exc).__name__}: {str(exc)[:400]}"})
