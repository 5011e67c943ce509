"""Fail safe for a NodeflowPolicy the cluster holds but the model rejects.

The CRD refuses almost every bad policy at ``kubectl apply``; what it cannot check (a cron field out of range, a
policy stored under an older CRD, a CRD installed without validation) reaches nodeflow as an invalid object. Such a
policy cannot be evaluated, and ignoring it would silently open what it meant to close (a GPU NodePool, a ceiling).
So it stands in as the most restrictive thing it could have meant for NEW capacity: provisioning is paused, always,
in the NodePools the policy names anywhere (access rules, ceilings, group limits, pause windows); in every NodePool
when it names none or has a part that is not about named NodePools (resource access, the cluster or a namespace
ceiling, a pause window without nodePools) or a name that is not valid. Pending pods get the pause as their reason
("provisioning paused for NodePool gpu by policy gpu-access: window invalid-policy ..."), the policy gets a Warning
Event naming the field, and fixing the policy lifts the pause at the next provisioning run. Existing nodes are
untouched, and so is voluntary disruption, unless the policy holds a pause window that may pause disruption (its
``disruption`` is not ``false``, or the windows cannot be read): then disruption is paused too, in the same NodePools.
Pure: no clock, no I/O.

Must not touch: what a valid policy allows (``policy``); reporting the invalid policy
(``nodeflow.lifecycle.policy_status``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from nodeflow.api.meta import ObjectMeta, is_dns1123_subdomain
from nodeflow.api.nodeflow_policy import NodeflowPolicy, NodeflowPolicySpec, PauseWindow

__all__ = ["INVALID_WINDOW", "governed_pools", "pauses_disruption", "stand_in"]

INVALID_WINDOW = "invalid-policy"
# Open at every minute for an hour: always open.
_ALWAYS = ("* * * * *", "1h")


def _items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _strings(values: Iterable[Any], out: set[str]) -> bool:
    """Add the valid names of ``values`` to ``out``; False when one is not a valid name (``*``, every NodePool,
    included: the policy may be about every NodePool)."""
    ok = True
    for value in values:
        if isinstance(value, str) and is_dns1123_subdomain(value):
            out.add(value)
        else:
            ok = False
    return ok


def governed_pools(raw: Mapping[str, Any]) -> frozenset[str] | None:
    """The NodePools an (invalid) policy document is about, or None when it may be about every NodePool."""
    spec = raw.get("spec")
    if spec is None:
        return frozenset()  # an empty policy restricts nothing
    if not isinstance(spec, dict):
        return None
    pools: set[str] = set()
    ok = True
    if spec.get("resourceAccess") is not None:
        return None
    for rule in _items(spec.get("nodePoolAccess")):
        ok &= isinstance(rule, dict) and _strings(_items(rule.get("nodePools")), pools)
    costs = spec.get("costCeilings")
    if costs is not None:
        if not isinstance(costs, dict) or costs.get("cluster") is not None or costs.get("namespaces") is not None:
            return None
        ok &= _strings((c.get("name") if isinstance(c, dict) else None for c in _items(costs.get("nodePools"))), pools)
    for group in _items(spec.get("limits")):
        ok &= isinstance(group, dict) and _strings(_items(group.get("nodePools")), pools)
    for window in _items(spec.get("pauses")):
        if not isinstance(window, dict) or window.get("nodePools") is None:
            return None
        ok &= _strings(_items(window["nodePools"]), pools)
    known = {"nodePoolAccess", "costCeilings", "limits", "pauses"}
    if not ok or not pools or not set(spec) <= known:
        return None
    return frozenset(pools)


def pauses_disruption(raw: Mapping[str, Any]) -> bool:
    """Whether an (invalid) policy document may have meant to pause disruption: a pause window whose ``disruption``
    is anything but ``false`` (absent means false, the model's default), or ``pauses`` that cannot be read."""
    spec = raw.get("spec")
    if not isinstance(spec, dict) or spec.get("pauses") is None:
        return False
    windows = spec["pauses"]
    if not isinstance(windows, list):
        return True
    return any(not isinstance(w, dict) or w.get("disruption", False) is not False for w in windows)


def stand_in(raw: Mapping[str, Any]) -> NodeflowPolicy | None:
    """The valid policy an invalid policy document ``raw`` stands in as (see the module); None when it governs
    nothing (an empty spec)."""
    pools = governed_pools(raw)
    if pools is not None and not pools:
        return None
    meta = raw.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    name = name if isinstance(name, str) and is_dns1123_subdomain(name) else "invalid"
    schedule, duration = _ALWAYS
    window = PauseWindow(
        name=INVALID_WINDOW,
        schedule=schedule,
        duration=duration,
        provisioning=True,
        disruption=pauses_disruption(raw),
        node_pools=sorted(pools) if pools is not None else None,
    )
    return NodeflowPolicy(metadata=ObjectMeta(name=name), spec=NodeflowPolicySpec(pauses=[window]))
