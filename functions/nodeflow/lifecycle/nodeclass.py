"""EC2NodeClass status: resolve what a class selects and write it, with Karpenter's conditions.

One mechanism for every caller: the Launch step (before it launches), the provisioner (for classes not yet
resolved at their current generation, so a class that is not Ready never gets a NodeClaim) and garbage
collection (every class, on its schedule, so a class recovers when its subnets, groups or AMIs come back
without an edit, and turns not Ready when they go).

Conditions (as Karpenter names them): ``SubnetsReady``, ``SecurityGroupsReady``, ``AMIsReady``,
``InstanceProfileReady``, ``ValidationSucceeded`` (False with reason DependenciesNotReady while one of the
four is False; once they resolve, False with Karpenter's reason ``CreateLaunchTemplateAuthCheckFailed`` /
``CreateFleetAuthCheckFailed`` / ``RunInstancesAuthCheckFailed`` when EC2 answers a dry run of that launch call
with UnauthorizedOperation: ``nodeflow.aws.ec2.validation.dry_run_launch_authorization``, its outcome cached per class
generation and what it resolved to for 30 minutes in ``VALIDATION_CACHE``) and the root ``Ready``, each with
the object's generation as observedGeneration;
``status.subnets`` (id, zone, zoneID), ``securityGroups`` (id, name), ``amis`` (id, name, requirements),
``instanceProfile`` and ``capacityReservations``: what ``capacityReservationSelectorTerms`` select, live from
DescribeCapacityReservations (``nodeflow.aws.ec2.capacity_reservations``; active, not ended, by id), each as Karpenter
writes it (``nodeflow.catalog.reservations.to_status``: a capacity block within 40 minutes of its end is
``expiring``), an empty list when none; with Karpenter's ``CapacityReservationsReady`` condition (True once they
were asked).
``nodeflow.plan.node_class_readiness`` reads them back: a NodePool whose class is Ready=False is skipped by
the solver with that message.

The hash annotations, as the AWS provider writes them: ``karpenter.k8s.aws/ec2nodeclass-hash`` (the spec's hash,
``nodeflow.api.template_hash.ec2nodeclass_hash``, with the CA bundle nodes get) and
``karpenter.k8s.aws/ec2nodeclass-hash-version`` on every class, written whenever they differ
(``NodeClassResolver.write_hash``); Launch puts the same two on each NodeClaim it launches, and drift compares
them. When a class's hash version changes (or it had none: a class nodeflow had not hashed yet), its NodeClaims of
another version are re-stamped first: the current version, and the current hash unless the NodeClaim is already
Drifted, so a new hash algorithm (or nodeflow starting to write the hash) never drifts a node by itself.

``reconcile_status`` does the whole job for the provisioner and garbage collection: EC2NodeClasses, then
every NodePool's status (``ValidationSucceeded`` naming the field of an invalid NodePool, ``NodeClassReady``,
``Ready``; ``nodeflow.kube.status``), with a Warning Event on a NodePool when it turns not Ready
(``ValidationFailed`` / ``NodeClassNotReady``). Other NodePools are not affected by a bad one: each class's and each
NodePool's report stands on its own (``nodeflow.kube.reports``), a write the API server refuses or fails is logged
and counted, and the others are written.

Must not touch: how a class's subnets, security groups, AMIs or profile are read (``nodeflow.aws.ec2``); launches.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from nodeflow.api import labels as wk
from nodeflow.api.karpenter import EC2NodeClass, NodeClaim
from nodeflow.api.template_hash import EC2NODECLASS_HASH_VERSION, ec2nodeclass_hash
from nodeflow.aws.ec2.node_class import ResolvedNodeClass, resolve_node_class
from nodeflow.aws.ec2.validation import AuthorizationDenied, dry_run_launch_authorization
from nodeflow.aws.errors import AwsError
from nodeflow.catalog.reservations import to_status
from nodeflow.kube import errors as kerr
from nodeflow.kube.client import EC2_NODE_CLASSES, NODE_CLAIMS, KubeClient
from nodeflow.kube.events import (
    REASON_NODECLASS_NOT_READY,
    REASON_VALIDATION_FAILED,
    WARNING,
    EventRecorder,
    ObjectRef,
)
from nodeflow.kube.reports import Reports
from nodeflow.kube.snapshot import Snapshot
from nodeflow.kube.status import (
    CONDITION_NODECLASS_READY,
    CONDITION_VALIDATION_SUCCEEDED,
    node_pool_status_changes,
    set_condition,
    write_node_pool_status_change,
)
from nodeflow.plan import node_class_readiness

__all__ = [
    "VALIDATION_CACHE",
    "NodeClassResolver",
    "ValidationCache",
    "hash_annotations",
    "node_class_status",
    "not_ready_event",
    "reconcile_node_classes",
    "reconcile_status",
    "rehashed_claim_annotations",
]

# (condition, what ResolvedNodeClass.missing calls it, reason when missing, message when missing)
_PARTS: tuple[tuple[str, str, str, str], ...] = (
    ("SubnetsReady", "subnets", "SubnetsNotFound", "subnetSelectorTerms matched no subnet"),
    ("SecurityGroupsReady", "securityGroups", "SecurityGroupsNotFound", "securityGroupSelectorTerms matched no group"),
    ("AMIsReady", "amis", "AMINotFound", "amiSelectorTerms matched no AMI"),
    ("InstanceProfileReady", "instanceProfile", "InstanceProfileNotReady", "the instance profile is not ready"),
)


_RESOLVED = (
    "subnets",
    "securityGroups",
    "amis",
    "instanceProfile",
    "capacityReservations",
)  # status fields resolution owns


def node_class_status(
    node_class: EC2NodeClass,
    resolved: ResolvedNodeClass,
    now: datetime,
    denied: AuthorizationDenied | None = None,
    *,
    validated: bool = True,
) -> dict[str, Any]:
    """The EC2NodeClass ``status`` for what it resolved to (pure). ``denied``: the launch call EC2 refused in the
    authorization dry runs (ValidationSucceeded False with its reason, the class not Ready); ``validated=False``:
    the dry runs were inconclusive (EC2 throttled or unavailable), the class keeps the ValidationSucceeded it had."""
    old = node_class.status.model_dump(by_alias=True, exclude_none=True, mode="json") if node_class.status else {}
    conditions: list[dict[str, Any]] = list(old.get("conditions") or [])
    generation = node_class.metadata.generation
    unhealthy: list[str] = []
    for kind, part, reason, message in _PARTS:
        if part in resolved.missing:
            why = (
                resolved.instance_profile_error
                if part == "instanceProfile" and resolved.instance_profile_error
                else message
            )
            conditions = set_condition(conditions, kind, "False", reason, why, now=now, generation=generation)
            unhealthy.append(why)
        else:
            conditions = set_condition(conditions, kind, "True", kind, "", now=now, generation=generation)
    # Karpenter validates a class only once what it selects is resolved (its restricted tags are refused by
    # the EC2NodeClass model already, so such a class is never resolved)
    if unhealthy:
        valid = (
            "False",
            "DependenciesNotReady",
            "waiting until the subnets, security groups, AMIs and instance profile resolve",
        )
    elif denied is not None:
        valid = ("False", denied.reason, denied.message)
        unhealthy.append(denied.message)
    else:
        valid = ("True", "ValidationSucceeded", "")
        had = next((c for c in conditions if c.get("type") == "ValidationSucceeded"), None)
        if not validated and had is not None and had.get("reason") != "DependenciesNotReady":
            valid = (str(had.get("status")), str(had.get("reason") or ""), str(had.get("message") or ""))
            if valid[0] == "False":
                unhealthy.append(valid[2])
    conditions = set_condition(conditions, "ValidationSucceeded", *valid, now=now, generation=generation)
    # reservations were asked (a failure to ask raises before here): Karpenter's condition is True, even for none
    conditions = set_condition(
        conditions, "CapacityReservationsReady", "True", "CapacityReservationsReady", "", now=now, generation=generation
    )
    if unhealthy:
        ready = ("False", "UnhealthyDependents", "; ".join(unhealthy))
    else:
        ready = ("True", "Ready", "")
    conditions = set_condition(conditions, "Ready", *ready, now=now, generation=generation)
    reservations = [to_status(r, now) for r in resolved.capacity_reservations]
    return {**resolved.status, "capacityReservations": reservations, "conditions": conditions}


def _comparable(status: dict[str, Any]) -> Any:
    conditions = sorted(
        (c.get("type"), c.get("status"), c.get("reason"), c.get("message") or "", c.get("observedGeneration"))
        for c in status.get("conditions") or []
    )
    return {**{k: v for k, v in status.items() if k != "conditions"}, "conditions": conditions}


def hash_annotations(node_class: EC2NodeClass, ca_bundle: str | None) -> dict[str, str]:
    """The class's ``ec2nodeclass-hash`` and ``ec2nodeclass-hash-version`` now (pure): what the class carries and
    what a NodeClaim launched from it gets."""
    return {
        wk.ANNOTATION_EC2NODECLASS_HASH: ec2nodeclass_hash(node_class, ca_bundle),
        wk.ANNOTATION_EC2NODECLASS_HASH_VERSION: EC2NODECLASS_HASH_VERSION,
    }


def rehashed_claim_annotations(claim: NodeClaim, current: dict[str, str]) -> dict[str, str] | None:
    """The annotations to write on ``claim`` when its class's hash version changed (pure; None: nothing to write):
    a NodeClaim of another hash version (or none) gets the current version, and the current hash unless it is
    already Drifted (whether it still is cannot be judged across algorithms, so it stays drifted)."""
    have = claim.metadata.annotations or {}
    if have.get(wk.ANNOTATION_EC2NODECLASS_HASH_VERSION) == EC2NODECLASS_HASH_VERSION:
        return None
    out = {wk.ANNOTATION_EC2NODECLASS_HASH_VERSION: EC2NODECLASS_HASH_VERSION}
    drifted = claim.status.condition("Drifted") if claim.status is not None else None
    if drifted is None or drifted.status != "True":
        out[wk.ANNOTATION_EC2NODECLASS_HASH] = current[wk.ANNOTATION_EC2NODECLASS_HASH]
    return out


VALIDATION_TTL = timedelta(minutes=30)  # as Karpenter's validation cache: a denial is asked again after this
VALIDATION_CACHE_SIZE = 512


class ValidationCache:
    """The outcome of a class's authorization dry runs (a denial, or None: allowed), kept per class (name, uid),
    generation and what it resolved to, for ``ttl``: the dry runs are not repeated on every provisioner or gc
    run, and are asked again when the class or what it selects changes, or the entry expires. At most ``size``
    entries (the expired, then the oldest, go first). One per Lambda container (``VALIDATION_CACHE``)."""

    def __init__(self, ttl: timedelta = VALIDATION_TTL, size: int = VALIDATION_CACHE_SIZE) -> None:
        self.ttl = ttl
        self.size = size
        self._entries: dict[str, tuple[datetime, AuthorizationDenied | None]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def key(node_class: EC2NodeClass, resolved: ResolvedNodeClass) -> str:
        selected = json.dumps(resolved.status, sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(selected.encode()).hexdigest()[:16]
        meta = node_class.metadata
        return f"{meta.name}/{meta.uid or ''}/{meta.generation or 0}/{digest}"

    def get(self, key: str, now: datetime) -> tuple[bool, AuthorizationDenied | None]:
        """(found, outcome) of an entry that has not expired at ``now``."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry[0] <= now:
                self._entries.pop(key, None)
                return False, None
            return True, entry[1]

    def put(self, key: str, outcome: AuthorizationDenied | None, now: datetime) -> None:
        with self._lock:
            for stale in [k for k, (until, _) in self._entries.items() if until <= now]:
                del self._entries[stale]
            while len(self._entries) >= self.size:
                del self._entries[min(self._entries, key=lambda k: self._entries[k][0])]
            self._entries[key] = (now + self.ttl, outcome)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


VALIDATION_CACHE = ValidationCache()


@dataclass(frozen=True)
class NodeClassResolver:
    """Resolves EC2NodeClasses against EC2/SSM/IAM and writes their status (only when it changes)."""

    kube: KubeClient
    ec2: Any
    ssm: Any
    iam: Any
    cluster_name: str
    kubernetes_version: Callable[[], str]
    now: Callable[[], datetime]
    ca_bundle: str | None = None  # the cluster CA (base64) nodes get: part of the class hash, as in Karpenter
    validations: ValidationCache = field(default_factory=lambda: VALIDATION_CACHE)
    # The authorization dry runs belong to the provisioner and gc, which decide whether a class is usable; the
    # Launch step resolves without them (three EC2 calls before CreateFleet) and keeps the class's condition.
    dry_runs: bool = True

    def validate(
        self, node_class: EC2NodeClass, resolved: ResolvedNodeClass
    ) -> tuple[bool, AuthorizationDenied | None]:
        """(conclusive, denial) of the launch-authorization dry runs (``nodeflow.aws.ec2.validation``) for a
        class that resolved, from the cache when asked before; an inconclusive answer (throttled, EC2 unavailable)
        is not cached and leaves the condition as it was."""
        key = ValidationCache.key(node_class, resolved)
        found, denied = self.validations.get(key, self.now())
        if found:
            return True, denied
        try:
            denied = dry_run_launch_authorization(self.ec2, resolved, self.cluster_name, node_class.spec.tags)
        except AwsError:
            return False, None
        self.validations.put(key, denied, self.now())
        return True, denied

    def write_hash(self, node_class: EC2NodeClass) -> EC2NodeClass:
        """Write the class's hash annotations when they differ (``hash_annotations``); first, when its hash
        version changes, re-stamp its NodeClaims (``rehashed_claim_annotations``). Returns the class as written."""
        want = hash_annotations(node_class, self.ca_bundle)
        have = node_class.metadata.annotations or {}
        if all(have.get(k) == v for k, v in want.items()):
            return node_class
        if have.get(wk.ANNOTATION_EC2NODECLASS_HASH_VERSION) != EC2NODECLASS_HASH_VERSION:
            self._rehash_claims(node_class, want)
        try:
            written = self.kube.patch(EC2_NODE_CLASSES, node_class.name, {"metadata": {"annotations": want}})
        except kerr.NotFound:  # deleted meanwhile
            return node_class
        return EC2NodeClass.model_validate(written)

    def _rehash_claims(self, node_class: EC2NodeClass, current: dict[str, str]) -> None:
        for item in self.kube.list_items(NODE_CLAIMS):
            try:
                claim = NodeClaim.model_validate(item)
            except ValueError:  # not a NodeClaim nodeflow can read: not one of this class's
                continue
            ref = claim.spec.node_class_ref
            if ref.name != node_class.name or ref.kind != "EC2NodeClass":
                continue
            patch = rehashed_claim_annotations(claim, current)
            if patch is None:
                continue
            try:
                self.kube.patch(NODE_CLAIMS, claim.name, {"metadata": {"annotations": patch}})
            except kerr.NotFound:  # deleted meanwhile
                continue

    def resolve(self, node_class: EC2NodeClass) -> tuple[ResolvedNodeClass, EC2NodeClass]:
        """(what it resolved to, the class with its new status)."""
        uses_alias = any(t.alias for t in node_class.spec.ami_selector_terms)
        resolved = resolve_node_class(
            self.ec2,
            self.ssm,
            self.iam,
            node_class,
            self.cluster_name,
            kubernetes_version=self.kubernetes_version() if uses_alias else None,
            now=self.now(),
        )
        if not resolved.ready:
            validated, denied = True, None
        elif self.dry_runs:
            validated, denied = self.validate(node_class, resolved)
        else:
            validated, denied = False, None  # not asked here: ValidationSucceeded stays as it was
        status = node_class_status(node_class, resolved, self.now(), denied, validated=validated)
        old = node_class.status.model_dump(by_alias=True, exclude_none=True, mode="json") if node_class.status else {}
        if _comparable({k: old.get(k) for k in status}) == _comparable(status):
            return resolved, node_class
        try:
            gone: dict[str, Any] = {k: None for k in _RESOLVED if k in old and k not in status}
            patch = {"status": {**gone, **status}}
            written = self.kube.patch(EC2_NODE_CLASSES, node_class.name, patch, subresource="status")
        except kerr.NotFound:  # deleted meanwhile
            return resolved, node_class
        return resolved, EC2NodeClass.model_validate(written)


def reconcile_node_classes(
    resolver: NodeClassResolver,
    classes: Iterable[EC2NodeClass],
    *,
    only_unknown: bool,
    log: Callable[[str, dict[str, Any]], None] = lambda _m, _e: None,
    reports: Reports | None = None,
) -> list[EC2NodeClass]:
    """``classes`` with fresh status: every one (``only_unknown=False``), or only those whose readiness at
    their current generation is not known yet; and every one with its hash annotations (``write_hash``). A class being
    deleted is left as it is (as Karpenter, which only finalizes it: no instance profile or status is made for it).
    Each class on its own: one that cannot be resolved now (AWS unavailable, throttled) or whose status or hash the
    API server refuses keeps what it had (logged and counted in ``reports``); the next caller tries again."""
    reports = reports if reports is not None else Reports(log)
    out: list[EC2NodeClass] = []
    for nc in classes:
        name = f"EC2NodeClass/{nc.name}"
        if nc.metadata.deletion_timestamp is not None:  # being deleted: only finalized (launch_template_gc)
            out.append(nc)
            continue
        if not (only_unknown and node_class_readiness(nc)[0] != "Unknown"):
            try:
                nc = resolver.resolve(nc)[1]
            except kerr.NotFound:  # deleted meanwhile
                pass
            except Exception as exc:  # one class must not stop the others (or the caller's batch)
                reports.failed_with("EC2NodeClass status", name, exc)
        nc = reports.run("EC2NodeClass hash", name, partial(resolver.write_hash, nc)) or nc
        out.append(nc)
    return out


def _condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c.get("type") == kind), {})


def not_ready_event(status: dict[str, Any]) -> tuple[str, str] | None:
    """(reason, message) of the Warning Event for a NodePool whose new ``status`` is not Ready, or None: invalid
    (``ValidationFailed`` naming the fields) or its EC2NodeClass missing or not Ready (``NodeClassNotReady``)."""
    valid = _condition(status, CONDITION_VALIDATION_SUCCEEDED)
    if valid.get("status") == "False":
        return REASON_VALIDATION_FAILED, str(valid.get("message") or "invalid")
    ready_class = _condition(status, CONDITION_NODECLASS_READY)
    if ready_class.get("status") == "False":
        return REASON_NODECLASS_NOT_READY, str(ready_class.get("message") or "")
    return None


def reconcile_status(
    kube: KubeClient,
    recorder: EventRecorder,
    snapshot: Snapshot,
    now: datetime,
    *,
    resolver: NodeClassResolver | None = None,
    only_unknown: bool = True,
    log: Callable[[str, dict[str, Any]], None] = lambda _m, _e: None,
    reports: Reports | None = None,
) -> Snapshot:
    """Resolve EC2NodeClasses (see ``reconcile_node_classes``; none without a resolver), write every NodePool's
    status where it changed, and record a Warning Event on each NodePool that turned not Ready. Each NodePool's
    report (its status, its Event) stands on its own (``nodeflow.kube.reports``): a write the API server refuses or
    fails is logged and counted in ``reports``, and every other NodePool's status and Event is still written; the
    Event of a NodePool whose status write was refused is recorded all the same (it is then the only word people
    get). Returns ``snapshot`` with the classes' new status (what the solver must see)."""
    reports = reports if reports is not None else Reports(log)
    if resolver is not None:
        classes = reconcile_node_classes(
            resolver, snapshot.node_classes, only_unknown=only_unknown, log=log, reports=reports
        )
        snapshot = dataclasses.replace(snapshot, node_classes=tuple(classes))
    for change in sorted(node_pool_status_changes(snapshot, now=now), key=lambda c: c.name):
        name = f"NodePool/{change.name}"
        reports.run("NodePool status", name, partial(write_node_pool_status_change, kube, change))
        event = not_ready_event(change.status)
        if event is not None:
            ref = ObjectRef("NodePool", change.name, api_version="karpenter.sh/v1")
            reports.run("NodePool event", name, partial(recorder.record, ref, WARNING, *event))
    return snapshot
