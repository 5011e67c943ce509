"""The decision log's records: why each NodeClaim was made, why pods got none, why nodes were removed or kept.

Pure: built from the solver's and the disruption round's results with the time passed in; no boto3, no clock.

Kinds (``Decision.kind``):

    provisioning    one provisioner run: the pods it considered, its NodeClaims, how many pods got none, $/hour
    nodeclaim       one NodeClaim planned by that run: NodePool, its instance types (the cheapest first, the one
                    priced) and the compatible types left off it, capacity type, zones, $/hour, its pods, and
                    whether it was created, was there already, or was refused (with why)
    unschedulable   pods that got no NodeClaim, grouped by their per-NodePool reasons; the reasons that name a
                    policy ("namespace ml-exp may not use NodePool gpu: policy gpu-access", ceilings, pauses)
                    are listed again in ``policy`` (one record per hour and reason set, keyed by the hour: the runs
                    of that hour rewrite it, its time, run and pods the latest run's)
    disruption      one disruption command: reason, method, candidates, replacements, moved pods, $/hour saved,
                    and what became of it (executed, replacing, skipped: why)
    blocked         a disruption candidate that was not disrupted: node, event, message (one record per hour and
                    blocker, keyed by the hour: the rounds of that hour rewrite it, its time is the latest round's)
    expiration / scale-down / capacity-block   forceful terminations of a round (expireAfter, a static NodePool
                    above its replicas, a capacity block ending)
    interruption    a NodeClaim terminated on an AWS event (spot interruption, rebalance, state change, scheduled
                    event, failed status check)
    deletion        a NodeClaim terminated because its NodeClaim or Node was deleted through the Kubernetes API
                    (``kubectl delete nodeclaim``, its NodePool deleted, another controller): not nodeflow's decision
                    and not AWS's, as Karpenter's termination controller treats it

Every record names the nodeflow release that made it (``version``; empty in records written before versions).

DynamoDB layout (its own table, ``<prefix>-decisions``; every item expires ``ttl`` = time + TTL days):

    record      pk "DECISION#<yyyy-mm-dd>#<shard>"  sk "<time>#<id>"   the whole record (``body``: JSON)
    by NodePool pk "NODEPOOL#<name>#<shard>"        sk "<time>#<id>#<digest>"   pointers (``refs``: JSON [[pk, sk],
                                                    ...] of up to POOL_REFS records) per NodePool and write; sk: the
                                                    newest record's, then a digest of ``refs``
    by pod      pk "POD#<ns>/<name>"                sk "<time>#<id>"   pointer (``ref``: the record's pk) per pod named

A NodePool's pointers are grouped: one item names every record of a write (a provisioner run) naming that NodePool,
not one item per record (a 20,000-pod run: 20 items instead of 4,900, a sixth of all its items, so a sixth fewer
BatchWriteItem calls). Pointers written before that are one per record, ``ref`` and the record's sk, as a pod's
still are; ``pointer_refs`` reads both.

``<shard>`` (``00`` .. ``15``, from a hash of the sk) spreads one day's records and one NodePool's pointers over
SHARDS partition keys: DynamoDB writes one partition key at most 1,000 WCU a second, and a provisioner run for
20,000 pods writes ~5,400 records of ~2 KB at once (~16,000 WCU). Readers query every shard.

``<time>`` is UTC with milliseconds (``2026-11-25T05:01:02.345Z``), so a partition sorts by time and a
``sk >= <since>`` condition selects a period. A record can name several NodePools (an unschedulable pod has a
reason per NodePool; a command's candidates can span NodePools), so NodePools and pods are index items rather
than one GSI attribute.

Must not touch: how records are stored (``nodeflow.aws.decision_log``); what was decided (the records report it).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from nodeflow import __version__
from nodeflow.scheduling.types import (
    NO_NODEPOOL,
    NodeClaimPlan,
    SchedulingResult,
    group_unschedulable,
    reason_lines,
)

__all__ = [
    "BLOCKED",
    "CAPACITY_BLOCK",
    "DEFAULT_TTL_DAYS",
    "DELETION",
    "DISRUPTION",
    "EXPIRATION",
    "INTERRUPTION",
    "KINDS",
    "MAX_TTL_DAYS",
    "NODECLAIM",
    "PROVISIONING",
    "SCALE_DOWN",
    "UNSCHEDULABLE",
    "ClaimOutcome",
    "Decision",
    "DecisionError",
    "PoolRef",
    "bounded",
    "day_partitions",
    "deletion_records",
    "disruption_records",
    "from_item",
    "index_items",
    "interruption_records",
    "item_count",
    "item_size",
    "items",
    "nodepool_partition",
    "nodepool_partitions",
    "pod_partition",
    "pointer_refs",
    "policy_reasons",
    "pool_pointers",
    "provisioning_records",
    "record_partition",
    "shard",
    "stored",
    "time_key",
    "to_item",
    "write_items",
]

PROVISIONING = "provisioning"
NODECLAIM = "nodeclaim"
UNSCHEDULABLE = "unschedulable"
DISRUPTION = "disruption"
BLOCKED = "blocked"
EXPIRATION = "expiration"
SCALE_DOWN = "scale-down"
CAPACITY_BLOCK = "capacity-block"
INTERRUPTION = "interruption"
DELETION = "deletion"
KINDS = (
    PROVISIONING,
    NODECLAIM,
    UNSCHEDULABLE,
    DISRUPTION,
    BLOCKED,
    EXPIRATION,
    SCALE_DOWN,
    CAPACITY_BLOCK,
    INTERRUPTION,
    DELETION,
)

DEFAULT_TTL_DAYS = 90
MAX_TTL_DAYS = 3650
# A stored record names at most this many pods in its body (DynamoDB items stop at 400 KB); ``pod_count`` is the
# total, and every pod still gets its index item. Every other list of a stored record is cut at the same length.
MAX_PODS_PER_RECORD = 1000
MAX_OTHER_TYPES = 50  # compatible instance types listed beyond a NodeClaim's own
MAX_SUMMARY = 300
# A stored record item is at most MAX_ITEM_BYTES as DynamoDB counts them (its limit: 400 KB, and one item over it
# makes BatchWriteItem refuse its whole batch). Each free-text value of a stored record (a reason, a message, an
# instance type) keeps at most MAX_TEXT characters, each list and each map in ``detail`` at most
# MAX_PODS_PER_RECORD entries; an item still too big has both halved until it fits (down to MIN_TEXT / MIN_ENTRIES).
# What was cut is counted in ``detail.truncated`` ({field: {"characters": n, "entries": n}}).
MAX_ITEM_BYTES = 100_000
MAX_TEXT = 2_000
MIN_TEXT = 100
MIN_ENTRIES = 1

RECORD_PREFIX = "DECISION#"
NODEPOOL_PREFIX = "NODEPOOL#"
POD_PREFIX = "POD#"
SHARDS = 16  # partition keys per day of records and per NodePool of pointers
# Records a NodePool pointer item names at most: a key is at most 1 KB (DynamoDB's sort key limit), so an item of
# POOL_REFS keys stays below 400 KB; with keys of ~70 bytes it is ~17 KB.
POOL_REFS = 250

# "...: policy gpu-access" (denials, ceilings) and "... by policy freeze: ..." (pauses) name their policy
_POLICY = re.compile(r"(?::|\bby) policy ([a-z0-9](?:[-a-z0-9.]*[a-z0-9])?)")


class DecisionError(ValueError):
    """A stored item that is not a decision record (the message names the attribute)."""


@dataclass(frozen=True, slots=True)
class Decision:
    kind: str
    at: datetime  # timezone-aware
    id: str  # unique with ``at``: "<run>-<n>"
    run: str  # the provisioner batch or disruption round it belongs to
    summary: str  # one line for people
    node_pools: tuple[str, ...] = ()
    pods: tuple[str, ...] = ()  # namespace/name (a stored record names at most MAX_PODS_PER_RECORD)
    pod_count: int = 0  # pods in all
    policy: tuple[str, ...] = ()  # the reasons that name a policy
    detail: Mapping[str, Any] = field(default_factory=dict)  # kind-specific, JSON
    version: str = __version__  # the nodeflow release that made the decision ("" in records written before versions)

    def __post_init__(self) -> None:
        if self.at.tzinfo is None:
            raise DecisionError(f"decision {self.id}: time {self.at.isoformat()} has no timezone")
        # stored to the millisecond, in UTC: a record read back equals the one written
        at = self.at.astimezone(UTC)
        object.__setattr__(self, "at", at.replace(microsecond=at.microsecond // 1000 * 1000))

    @property
    def time(self) -> str:
        return time_key(self.at)

    @property
    def sk(self) -> str:
        """``<time>#<id>``; a blocked candidate's and an unschedulable group's record is keyed by its hour
        (``detail.hour``), so the rounds / runs of an hour rewrite one record, whose time is the latest one's."""
        return self._sk(self.time)

    def _sk(self, time: str) -> str:
        """``sk`` given the record's ``time`` (worked out once per record by ``items``)."""
        if self.kind in (BLOCKED, UNSCHEDULABLE) and isinstance(self.detail.get("hour"), str):
            return f"{self.detail['hour']}#{self.id}"
        return f"{time}#{self.id}"

    def to_json(self) -> dict[str, Any]:
        """The stable JSON of ``decisions -o json`` (keys in this order)."""
        return self._json(self.time)

    def _json(self, time: str) -> dict[str, Any]:
        return {
            "time": time,
            "kind": self.kind,
            "id": self.id,
            "run": self.run,
            "nodePools": list(self.node_pools),
            "summary": self.summary,
            "podCount": self.pod_count,
            "pods": list(self.pods),
            "policy": list(self.policy),
            "detail": dict(self.detail),
            "version": self.version,
        }

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> Decision:
        try:
            return Decision(
                kind=str(data["kind"]),
                at=parse_time(str(data["time"])),
                id=str(data["id"]),
                run=str(data.get("run", "")),
                summary=str(data.get("summary", "")),
                node_pools=tuple(str(p) for p in data.get("nodePools") or ()),
                pods=tuple(str(p) for p in data.get("pods") or ()),
                pod_count=int(data.get("podCount", 0)),
                policy=tuple(str(p) for p in data.get("policy") or ()),
                detail=dict(data.get("detail") or {}),
                version=str(data.get("version", "")),
            )
        except (KeyError, TypeError, ValueError, OverflowError) as exc:  # a year-1 time with an offset: overflow
            raise DecisionError(f"decision record: {exc}") from None


# ---------------------------------------------------------------------------------------------- keys


def time_key(at: datetime) -> str:
    """UTC, milliseconds, sortable: ``2026-11-25T05:01:02.345Z``."""
    if at.tzinfo is None:
        raise DecisionError(f"time {at.isoformat()} has no timezone")
    return _time_key(at)


@functools.lru_cache(maxsize=64)
def _time_key(at: datetime) -> str:
    """``time_key`` of an aware time (the records of a run share one: their keys are worked out once, not a
    ``strftime`` each; equal aware times are the same instant, so the same key)."""
    u = at.astimezone(UTC)
    return u.strftime("%Y-%m-%dT%H:%M:%S.") + f"{u.microsecond // 1000:03d}Z"


@functools.lru_cache(maxsize=64)
def _day(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d")


def parse_time(text: str) -> datetime:
    at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if at.tzinfo is None:
        raise ValueError(f"time {text!r} has no timezone")
    return at.astimezone(UTC)


def shard(sk: str) -> str:
    """The shard of the record keyed ``sk`` (two digits, stable across processes)."""
    return f"{int(hashlib.sha256(sk.encode()).hexdigest()[:8], 16) % SHARDS:02d}"


def record_partition(at: datetime, sk: str) -> str:
    return f"{RECORD_PREFIX}{_day(at)}#{shard(sk)}"


def nodepool_partition(name: str, sk: str) -> str:
    return f"{NODEPOOL_PREFIX}{name}#{shard(sk)}"


def nodepool_partitions(name: str) -> list[str]:
    """Every partition of a NodePool's pointers."""
    return [f"{NODEPOOL_PREFIX}{name}#{n:02d}" for n in range(SHARDS)]


def pod_partition(key: str) -> str:
    return POD_PREFIX + key


def day_partitions(since: datetime, until: datetime) -> list[list[str]]:
    """The record partitions that can hold records from ``since`` to ``until``: per day, newest day first, the
    day's shards."""
    first = since.astimezone(UTC).date()
    day = until.astimezone(UTC).date()
    out: list[list[str]] = []
    while day >= first:
        out.append([f"{RECORD_PREFIX}{day.isoformat()}#{n:02d}" for n in range(SHARDS)])
        day -= timedelta(days=1)
    return out


def _expiry(at: datetime, ttl_days: int) -> int:
    if not 1 <= ttl_days <= MAX_TTL_DAYS:
        raise DecisionError(f"ttl days: expected 1 to {MAX_TTL_DAYS}, got {ttl_days}")
    return int((at + timedelta(days=ttl_days)).timestamp())


@dataclass(frozen=True, slots=True)
class _Keys:
    """What every item of one record shares, worked out once: its time, sort key, record partition and expiry."""

    time: str
    sk: str
    partition: str
    ttl: dict[str, dict[str, str]]  # {"ttl": {"N": <epoch seconds>}}

    @staticmethod
    def of(decision: Decision, ttl_days: int) -> _Keys:
        time = decision.time
        sk = decision._sk(time)
        expiry = {"ttl": {"N": str(_expiry(decision.at, ttl_days))}}
        return _Keys(time, sk, record_partition(decision.at, sk), expiry)


@dataclass(frozen=True, slots=True)
class PoolRef:
    """What the NodePool pointers keep of one record: the NodePools it names, its key, its expiry."""

    node_pools: tuple[str, ...]
    partition: str
    sk: str
    ttl: int  # epoch seconds


def items(decision: Decision, ttl_days: int = DEFAULT_TTL_DAYS) -> list[dict[str, Any]]:
    """The items of ``decision`` written alone: ``to_item`` and ``index_items``."""
    made, ref = stored(decision, ttl_days)
    return [*made, *(item for item, _ in pool_pointers([ref]))]


def stored(decision: Decision, ttl_days: int = DEFAULT_TTL_DAYS) -> tuple[list[dict[str, Any]], PoolRef]:
    """The record item and its pods' pointers, and what its NodePool pointers name (``pool_pointers`` groups those
    of a write's records): what the writer stores per record, its keys worked out once."""
    keys = _Keys.of(decision, ttl_days)
    ref = PoolRef(decision.node_pools, keys.partition, keys.sk, int(keys.ttl["ttl"]["N"]))
    return [_record_item(decision, keys), *_pod_items(decision, keys)], ref


def pool_pointers(refs: Sequence[PoolRef]) -> list[tuple[dict[str, Any], list[int]]]:
    """The NodePool pointer items of records written together (``refs``: theirs, in order), each with the positions
    in ``refs`` of the records it names: per NodePool, POOL_REFS records an item, keyed by its newest record's sk
    (so ``sk >= <since>`` finds it when that record is in the period) and a digest of what it names (a write of the
    same records rewrites the same item; two different ones never share a key). Expires with its last record."""
    by_pool: dict[str, list[int]] = {}
    for n, ref in enumerate(refs):
        for pool in ref.node_pools:
            by_pool.setdefault(pool, []).append(n)
    out: list[tuple[dict[str, Any], list[int]]] = []
    for pool, named in by_pool.items():
        for start in range(0, len(named), POOL_REFS):
            part = named[start : start + POOL_REFS]
            text = json.dumps([[refs[n].partition, refs[n].sk] for n in part], separators=(",", ":"))
            newest = max(refs[n].sk for n in part)
            sk = f"{newest}#{hashlib.sha256(text.encode()).hexdigest()[:12]}"
            item = {
                "pk": {"S": nodepool_partition(pool, sk)},
                "sk": {"S": sk},
                "refs": {"S": text},
                "ttl": {"N": str(max(refs[n].ttl for n in part))},
            }
            out.append((item, part))
    return out


def write_items(decisions: Sequence[Decision], ttl_days: int = DEFAULT_TTL_DAYS) -> list[dict[str, Any]]:
    """Every item a write of ``decisions`` stores: each record and its pods' pointers, then the NodePool pointers."""
    made = [stored(d, ttl_days) for d in decisions]
    return [item for m, _ in made for item in m] + [item for item, _ in pool_pointers([r for _, r in made])]


def item_count(decisions: Sequence[Decision]) -> int:
    """How many items a write of ``decisions`` stores (``len(write_items(decisions))``, without rendering them)."""
    pools: dict[str, int] = {}
    for d in decisions:
        for pool in d.node_pools:
            pools[pool] = pools.get(pool, 0) + 1
    return sum(1 + len(d.pods) for d in decisions) + sum(-(-n // POOL_REFS) for n in pools.values())


def pointer_refs(item: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The (pk, sk) of the records a pointer item names: a pod's (and a NodePool's written before they were grouped)
    names one, ``ref`` and its own sk; a NodePool's names those in ``refs``. Raises ``DecisionError`` naming the
    item when ``refs`` is not a JSON list of [pk, sk] strings."""
    if "ref" in item:
        return [(item["ref"]["S"], item["sk"]["S"])]
    refs = item.get("refs")
    if refs is None:
        return []
    where = f"pointer {item.get('pk', {}).get('S')}/{item.get('sk', {}).get('S')}"
    try:
        pairs = json.loads(refs["S"])
    except (KeyError, TypeError, ValueError) as exc:
        raise DecisionError(f"{where}: refs: not JSON: {exc}") from None
    if not isinstance(pairs, list) or not all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(k, str) for k in p) for p in pairs
    ):
        raise DecisionError(f"{where}: refs: expected a list of [pk, sk] strings")
    return [(pk, sk) for pk, sk in pairs]


def to_item(decision: Decision, ttl_days: int = DEFAULT_TTL_DAYS) -> dict[str, Any]:
    """The record item (DynamoDB attribute values), at most MAX_ITEM_BYTES (``bounded``)."""
    return _record_item(decision, _Keys.of(decision, ttl_days))


def _record_item(decision: Decision, keys: _Keys) -> dict[str, Any]:
    fixed = {
        "pk": {"S": keys.partition},
        "sk": {"S": keys.sk},
        "kind": {"S": decision.kind},
        "time": {"S": keys.time},
    }
    ttl = keys.ttl
    data = decision._json(keys.time)
    text, entries = MAX_TEXT, MAX_PODS_PER_RECORD
    body, stored = data, json.dumps(data, separators=(",", ":"), sort_keys=False)
    if _may_cut(stored, text, entries):  # most records: nothing to cut, no walk
        body = bounded(data, text, entries)
        stored = json.dumps(body, separators=(",", ":"), sort_keys=False)
    while True:
        item = {
            **fixed,
            "summary": {"S": body["summary"]},
            "nodePools": {"S": ",".join(body["nodePools"])},
            "podCount": {"N": str(decision.pod_count)},
            "body": {"S": stored},
            **ttl,
        }
        if item_size(item) <= MAX_ITEM_BYTES or (text, entries) == (MIN_TEXT, MIN_ENTRIES):
            return item
        text, entries = max(MIN_TEXT, text // 2), max(MIN_ENTRIES, entries // 2)
        body = bounded(data, text, entries)
        stored = json.dumps(body, separators=(",", ":"), sort_keys=False)


def _may_cut(stored: str, text: int, entries: int) -> bool:
    """Whether a body (its JSON) may have something ``bounded`` cuts: a string of more than ``text`` characters
    (a JSON string between two quotes, an escape counting as more; an escaped quote: maybe), or a list or map of
    more than ``entries`` (one of N + 1 entries has N commas). Cheap, and never wrong the unsafe way."""
    return stored.count(",") >= entries or '\\"' in stored or _longer_than(text).search(stored) is not None


@functools.lru_cache(maxsize=8)
def _longer_than(text: int) -> re.Pattern[str]:
    """More than ``text`` characters without a quote (a JSON string longer than ``text``, or a long run of other
    JSON), from the start or a quote (so each run is scanned once): found in C, where splitting the body at its
    quotes built a string per piece."""
    return re.compile(f'(?:^|")[^"]{{{text + 1}}}')


def item_size(item: Mapping[str, Any]) -> int:
    """At least the size DynamoDB counts for ``item`` (attribute names and values, UTF-8; a number as its text)."""
    size = 0
    for name, value in item.items():
        for text in (name, *(v if isinstance(v, str) else str(v) for v in value.values())):
            size += len(text) if text.isascii() else len(text.encode())
    return size


_UNCUT = frozenset({"time", "kind", "id", "run", "podCount"})  # keys and counts: short, never cut


def bounded(data: Mapping[str, Any], text: int, entries: int) -> dict[str, Any]:
    """A record's JSON (``Decision.to_json``) with every string cut to ``text`` characters (marked ``...[+N
    characters]``) and every list, and each map in ``detail``, to ``entries`` entries; what was cut is counted
    in ``detail.truncated`` by field (``summary``, ``pods``, ``detail.reasons``, ...)."""
    cuts: dict[str, dict[str, int]] = {}
    out = {
        key: value if key in _UNCUT else _cut_value(value, text, entries, key, cuts, 0) for key, value in data.items()
    }
    if cuts:
        out["detail"] = {**out.get("detail", {}), "truncated": cuts}
    return out


def _cut_value(value: Any, text: int, entries: int, where: str, cuts: dict[str, dict[str, int]], depth: int) -> Any:
    """``value`` cut (see ``bounded``); ``where``: the field cuts are counted under (a body key, or detail's)."""
    if isinstance(value, str):
        if len(value) <= text:
            return value
        counts = cuts.setdefault(where, {})
        counts["characters"] = counts.get("characters", 0) + len(value) - text
        return f"{value[:text]}...[+{len(value) - text} characters]"
    if isinstance(value, Mapping):
        keys = list(value)
        if depth == 1 and len(keys) > entries:  # detail's maps are keyed by name (reasons by NodePool, requests)
            counts = cuts.setdefault(where, {})
            counts["entries"] = counts.get("entries", 0) + len(keys) - entries
            keys = keys[:entries]
        return {
            k: _cut_value(value[k], text, entries, f"{where}.{k}" if depth == 0 else where, cuts, depth + 1)
            for k in keys
        }
    if isinstance(value, list | tuple):
        if len(value) > entries:
            counts = cuts.setdefault(where, {})
            counts["entries"] = counts.get("entries", 0) + len(value) - entries
        kept = value[:entries]
        if not kept or (set(map(type, kept)) == {str} and max(map(len, kept)) <= text):  # names: the common case
            return list(kept)
        return [_cut_value(v, text, entries, where, cuts, depth + 1) for v in kept]
    return value


def index_items(decision: Decision, ttl_days: int = DEFAULT_TTL_DAYS) -> list[dict[str, Any]]:
    """The pointers of the record written alone: one per pod it names (all its pods, even beyond the body's cut),
    then its NodePools' (``pool_pointers``)."""
    made, ref = stored(decision, ttl_days)
    return [*made[1:], *(item for item, _ in pool_pointers([ref]))]


def _pod_items(decision: Decision, keys: _Keys) -> list[dict[str, Any]]:
    """The pods' pointers, each keyed ``keys.sk`` (once per record: a record of a NodeClaim names up to hundreds of
    pods)."""
    sk = {"S": keys.sk}
    ref = {"ref": {"S": keys.partition}, "kind": {"S": decision.kind}}
    ttl = keys.ttl
    return [{"pk": {"S": pod_partition(p)}, "sk": sk, **ref, **ttl} for p in decision.pods]


def from_item(item: Mapping[str, Any]) -> Decision:
    """A record item back (``to_item``'s inverse)."""
    body = item.get("body")
    if not isinstance(body, Mapping) or "S" not in body:
        raise DecisionError(f"item {item.get('pk')}/{item.get('sk')}: no body (is it an index item?)")
    try:
        data = json.loads(body["S"])
    except ValueError as exc:
        raise DecisionError(f"item body: not JSON: {exc}") from None
    if not isinstance(data, Mapping):
        raise DecisionError("item body: not a JSON object")
    return Decision.from_json(data)


# ---------------------------------------------------------------------------------------------- builders


def policy_reasons(reasons: Mapping[str, str]) -> tuple[str, ...]:
    """The reasons (NodePool -> why) that name a NodeflowPolicy, as "<NodePool>: <reason>"."""
    return tuple(f"{pool}: {why}" if pool else why for pool, why in sorted(reasons.items()) if _POLICY.search(why))


def policy_names(texts: Iterable[str]) -> list[str]:
    return sorted({m.group(1) for t in texts for m in _POLICY.finditer(t)})


def _n(count: int, what: str) -> str:
    return f"{count} {what}" + ("" if count == 1 else "s")


def _cut(text: str) -> str:
    return text if len(text) <= MAX_SUMMARY else text[: MAX_SUMMARY - 3] + "..."


def _pods(keys: Sequence[str]) -> tuple[tuple[str, ...], int]:
    return tuple(keys), len(keys)


@dataclass(frozen=True, slots=True)
class ClaimOutcome:
    """What became of one planned NodeClaim: created, existing (made by an earlier run), refused (``message``)."""

    name: str | None
    status: str  # "created" | "existing" | "refused"
    message: str = ""


def _claim_record(run: str, at: datetime, n: int, nc: NodeClaimPlan, outcome: ClaimOutcome, limit: int) -> Decision:
    own, other = nc.instance_types[:limit], nc.instance_types[limit:]
    pods, count = _pods(nc.pods)
    zones = "/".join(nc.zones) or "any zone"
    more = f" +{len(own) - 1} more" if len(own) > 1 else ""
    what = f"NodeClaim {outcome.name}" if outcome.name else "a NodeClaim"
    verb = {"created": "created", "existing": "already there", "refused": "refused"}.get(outcome.status, outcome.status)
    summary = (
        f"{what} {verb}: {own[0] if own else '?'}{more}, {nc.capacity_type}, {zones}, ${nc.price:.4f}/hour, "
        f"{_n(count, 'pod')}" + (" (static)" if nc.static else "") + (f": {outcome.message}" if outcome.message else "")
    )
    detail: dict[str, Any] = {
        "nodeClaim": outcome.name,
        "status": outcome.status,
        "nodePool": nc.nodepool,
        "instanceType": own[0] if own else None,
        "instanceTypes": list(own),
        "otherInstanceTypes": list(other[:MAX_OTHER_TYPES]),
        "otherInstanceTypeCount": len(other),
        "capacityType": nc.capacity_type,
        "zones": list(nc.zones),
        "pricePerHour": round(nc.price, 6),
        "requests": nc.to_json()["requests"],
    }
    if nc.static:
        detail["static"] = True
    if outcome.message:
        detail["message"] = outcome.message
    policy = (outcome.message,) if _POLICY.search(outcome.message) else ()
    return Decision(NODECLAIM, at, f"{run}-{n:04d}", run, _cut(summary), (nc.nodepool,), pods, count, policy, detail)


def provisioning_records(
    run: str,
    at: datetime,
    considered: Sequence[str],
    result: SchedulingResult,
    outcomes: Sequence[ClaimOutcome],
    claim_types: int = 60,
) -> list[Decision]:
    """The records of one provisioner run: the run, one per planned NodeClaim (``outcomes`` in the plan's order),
    one per group of unschedulable pods with the same reasons. ``considered``: the pending pods it solved for;
    ``claim_types``: how many instance types a NodeClaim carries (the rest are listed as other types)."""
    if len(outcomes) != len(result.node_claims):
        raise DecisionError(f"{len(outcomes)} outcomes for {len(result.node_claims)} planned NodeClaims")
    records: list[Decision] = []
    for n, (nc, outcome) in enumerate(zip(result.node_claims, outcomes, strict=True), 1):
        records.append(_claim_record(run, at, n, nc, outcome, claim_types))
    # Pods a policy holds stay unschedulable run after run (a pause for days): a group's record is keyed by the hour
    # and its reasons, so the runs of one hour rewrite one record (and its index items), not one each.
    hour = time_key(at.astimezone(UTC).replace(minute=0, second=0, microsecond=0))
    for group in group_unschedulable(result.unschedulable):
        by_pool = dict(group.reasons)
        reasons = sorted(by_pool.items())
        policy = policy_reasons(by_pool)
        pods, count = _pods(group.pods)
        why = "; ".join(reason_lines(by_pool)) or "no NodePool can serve them"
        digest = hashlib.sha256("\n".join(f"{p}\t{r}" for p, r in reasons).encode()).hexdigest()[:12]
        records.append(
            Decision(
                UNSCHEDULABLE,
                at,
                f"unschedulable-{digest}",
                run,
                _cut(f"{count} pod{'s' if count != 1 else ''} got no NodeClaim: {why}"),
                tuple(p for p in by_pool if p and p != NO_NODEPOOL),
                pods,
                count,
                policy,
                {"reasons": by_pool, "policies": policy_names(by_pool.values()), "hour": hour},
            )
        )
    created = [o for o in outcomes if o.status == "created"]
    refused = [o for o in outcomes if o.status == "refused"]
    price = sum(nc.price for nc, o in zip(result.node_claims, outcomes, strict=True) if o.status != "refused")
    unschedulable = len(result.unschedulable)
    pools = sorted({nc.nodepool for nc in result.node_claims} | {p for r in records for p in r.node_pools})
    policy = tuple(dict.fromkeys(p for r in records for p in r.policy))
    summary = (
        f"{_n(len(considered), 'pending pod')}: {_n(len(created), 'NodeClaim')} created"
        + (
            f", {len(outcomes) - len(created) - len(refused)} already there"
            if len(outcomes) > len(created) + len(refused)
            else ""
        )
        + (f", {len(refused)} refused" if refused else "")
        + f" (${price:.4f}/hour), {_n(unschedulable, 'pod')} unschedulable"
    )
    pods, count = _pods(list(considered))
    run_record = Decision(
        PROVISIONING,
        at,
        f"{run}-0000",
        run,
        _cut(summary),
        tuple(pools),
        (),  # the pods are indexed by their NodeClaim or unschedulable record, not twice
        count,
        policy,
        {
            "pods": list(pods[:MAX_PODS_PER_RECORD]),  # the first of them (podCount: all)
            "nodeClaims": [o.name for o in outcomes if o.name],
            "created": [o.name for o in created],
            "refused": [o.message for o in refused],
            "unschedulable": unschedulable,
            "pricePerHour": round(price, 6),
            "policies": policy_names(policy),
        },
    )
    return [run_record, *records]


def disruption_records(
    run: str,
    at: datetime,
    *,
    command: Mapping[str, Any] | None = None,
    executed: Sequence[str] = (),
    replacing: bool = False,
    skipped: str | None = None,
    blocked: Sequence[Mapping[str, Any]] = (),
    expired: Sequence[str] = (),
    scaled_down: Sequence[str] = (),
    capacity_blocks: Sequence[str] = (),
    node_pools: Mapping[str, str] | None = None,
    claim_pools: Mapping[str, str] | None = None,
) -> list[Decision]:
    """The records of one disruption round: its command (``Command.to_json()``, with what became of it), each
    blocked candidate (``Blocked.to_json()``), and the forceful terminations. ``node_pools``: node -> NodePool,
    ``claim_pools``: NodeClaim -> NodePool (to key them by NodePool)."""
    nodes = node_pools or {}
    claims = claim_pools or {}
    records: list[Decision] = []

    def add(
        kind: str,
        summary: str,
        pools: Iterable[str],
        pods: Sequence[str],
        detail: Mapping[str, Any],
        why: str = "",
        rid: str = "",
    ) -> None:
        named, count = _pods(pods)
        policy = (why,) if _POLICY.search(why) else ()
        record = Decision(
            kind,
            at,
            rid or f"{run}-{len(records) + 1:04d}",
            run,
            _cut(summary),
            tuple(sorted({p for p in pools if p})),
            named,
            count,
            policy,
            dict(detail),
        )
        records.append(record)

    if command is not None:
        summary, pools, moved, detail = _command_record(command, executed, replacing, skipped, nodes)
        add(DISRUPTION, summary, pools, moved, detail, skipped or "")
    # A candidate stays blocked for many rounds (one a minute): its record is keyed by the hour and by what blocks
    # it, so the rounds of one hour write one record (its time: the latest round's), not sixty.
    hour = time_key(at.astimezone(UTC).replace(minute=0, second=0, microsecond=0))
    for b in blocked:
        node, event, message = str(b.get("node", "")), str(b.get("event", "")), str(b.get("message", ""))
        digest = hashlib.sha256(f"{node}\n{event}\n{message}".encode()).hexdigest()[:12]
        add(
            BLOCKED,
            f"{event} {node}: {message}",
            [nodes.get(node, "")],
            (),
            {"node": node, "event": event, "message": message, "hour": hour},
            message,
            f"blocked-{digest}",
        )
    for kind, names, why in (
        (EXPIRATION, expired, "expireAfter passed"),
        (SCALE_DOWN, scaled_down, "static NodePool above its replicas"),
        (CAPACITY_BLOCK, capacity_blocks, "its capacity block ends soon"),
    ):
        for claim in names:
            add(kind, f"terminate NodeClaim {claim}: {why}", [claims.get(claim, "")], (), {"nodeClaim": claim})
    return records


def _command_record(
    command: Mapping[str, Any],
    executed: Sequence[str],
    replacing: bool,
    skipped: str | None,
    nodes: Mapping[str, str],
) -> tuple[str, list[str], list[str], dict[str, Any]]:
    """A round's command as a record: its summary, NodePools (of the candidates and the replacements), the pods it
    moves, and its detail (with what became of it: executed, replacing, skipped or only decided)."""
    candidates = [str(c) for c in command.get("candidates") or ()]
    moved = [str(m.get("pod")) for m in command.get("moves") or () if m.get("pod")]
    replacements = [dict(r) for r in command.get("replacements") or ()]
    pools = [nodes.get(c, "") for c in candidates] + [str(r.get("nodePool", "")) for r in replacements]
    outcome = "executed" if executed else "replacing" if replacing else f"skipped: {skipped}" if skipped else "decided"
    saved = float(command.get("savedPerHour", 0.0))
    summary = (
        f"{command.get('reason')} ({command.get('method')}): {command.get('decision', 'delete')} "
        f"{', '.join(candidates)}"
        + (f" with {len(replacements)} replacement{'s' if len(replacements) != 1 else ''}" if replacements else "")
        + f", saves ${saved:.4f}/hour; {outcome}"
    )
    detail = {
        "reason": command.get("reason"),
        "method": command.get("method"),
        "decision": command.get("decision"),
        "candidates": candidates,
        "replacements": replacements,
        "moves": list(command.get("moves") or ()),
        "candidatesPricePerHour": command.get("candidatesPricePerHour"),
        "replacementsPricePerHour": command.get("replacementsPricePerHour"),
        "savedPerHour": saved,
        "outcome": outcome.split(":")[0],
        "executed": list(executed),
        **({"skipped": skipped} if skipped else {}),
    }
    return summary, pools, moved, detail


def _claim_offering(labels: Mapping[str, str]) -> tuple[tuple[str, ...], dict[str, str]]:
    """(the NodePool, if labelled; instanceType / zone / capacityType) of a NodeClaim from its labels."""
    pool = labels.get("karpenter.sh/nodepool", "")
    offering = {
        key: labels[label]
        for key, label in (
            ("instanceType", "node.kubernetes.io/instance-type"),
            ("zone", "topology.kubernetes.io/zone"),
            ("capacityType", "karpenter.sh/capacity-type"),
        )
        if label in labels
    }
    return ((pool,) if pool else ()), offering


def _claim_named(claim: str, offering: Mapping[str, str]) -> str:
    what = ", ".join(offering.values())
    return f"NodeClaim {claim}" + (f" ({what})" if what else "")


def interruption_records(
    run: str, at: datetime, terminations: Sequence[tuple[str, str, str, Mapping[str, str]]]
) -> list[Decision]:
    """One record per NodeClaim whose termination an interruption message started: (NodeClaim, reason, message
    kind, the NodeClaim's labels)."""
    out: list[Decision] = []
    for n, (claim, reason, message, labels) in enumerate(terminations, 1):
        pools, offering = _claim_offering(labels)
        out.append(
            Decision(
                INTERRUPTION,
                at,
                f"{run}-{n:04d}",
                run,
                _cut(f"terminate {_claim_named(claim, offering)}: {reason} ({message})"),
                pools,
                detail={"nodeClaim": claim, "reason": reason, "message": message, **offering},
            )
        )
    return out


def deletion_records(
    run: str, at: datetime, deletions: Sequence[tuple[str, str, Mapping[str, str]]], first: int = 1
) -> list[Decision]:
    """One ``deletion`` record per NodeClaim whose termination started because an object was deleted through the
    Kubernetes API: (NodeClaim, the object deleted, "NodeClaim <name>" or "Node <name>", the NodeClaim's labels).
    Ids count on from ``first`` (after the run's interruption records)."""
    out: list[Decision] = []
    for n, (claim, deleted, labels) in enumerate(deletions, first):
        pools, offering = _claim_offering(labels)
        out.append(
            Decision(
                DELETION,
                at,
                f"{run}-{n:04d}",
                run,
                _cut(f"terminate {_claim_named(claim, offering)}: {deleted} deleted through the Kubernetes API"),
                pools,
                detail={"nodeClaim": claim, "reason": "Deleted", "deleted": deleted, **offering},
            )
        )
    return out
