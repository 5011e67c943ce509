"""What a plan assumes, one sentence each (``plan_warnings``): shown with ``nodeflow plan``. Pure.

Decides which inputs deserve a warning: an EC2NodeClass never resolved against AWS (every zone assumed), static
NodePools short of replicas, nothing pending, pods requesting nothing, NodeOverlays not applied, NodeflowPolicies
naming a NodePool that does not exist.

Must not touch: the plan itself (a warning never changes what is planned).
"""

from __future__ import annotations

from nodeflow.api.pool_names import EVERY
from nodeflow.cluster import ClusterState
from nodeflow.plan.overlays import overlay_verdicts
from nodeflow.scheduling.types import SchedulingInput

__all__ = ["plan_warnings"]

_NAMED_PODS = 5


def plan_warnings(state: ClusterState, inp: SchedulingInput, region: str) -> list[str]:
    """What a plan of ``inp`` (built from ``state``) assumes, one sentence each, in a stable order:
    an EC2NodeClass a NodePool uses that has no resolved subnets (every zone of ``region`` is assumed),
    no pending pods at all, pending pods that request nothing (planned as needing no CPU or memory)."""
    warnings: list[str] = []
    used = {p.spec.template.spec.node_class_ref.name for p in state.node_pools}
    for node_class in sorted(state.node_classes, key=lambda c: c.name):
        if node_class.name not in used:
            continue
        subnets = node_class.status.subnets if node_class.status is not None else None
        if not any(s.zone for s in subnets or ()):
            what = "no status" if node_class.status is None else "no subnets in its status"
            warnings.append(
                f"EC2NodeClass {node_class.name!r} has {what} (it was not resolved against AWS): "
                f"all zones of {region} are assumed"
            )
    warnings.extend(inp.static_problems)
    if not inp.pods and not inp.static_claims:
        warnings.append(
            "no pending pods found (pods without spec.nodeName that are not finished, deleted or DaemonSet-owned, "
            "and pods of deleting nodes): nothing to plan"
        )
    bare = sorted(p.key for p in inp.pods if not any(v for k, v in p.requests.items() if k != "pods"))
    if bare:
        named = ", ".join(bare[:_NAMED_PODS])
        more = f" and {len(bare) - _NAMED_PODS} more" if len(bare) > _NAMED_PODS else ""
        warnings.append(
            f"{len(bare)} pending pod(s) request no resources (no cpu or memory requests or limits): {named}{more}; "
            "they are planned as needing only a pod slot"
        )
    for verdict in overlay_verdicts(state, inp):
        if not verdict.ok:
            warnings.append(f"NodeOverlay {verdict.name!r} is not applied ({verdict.reason}): {verdict.message}")
    warnings.extend(_policy_warnings(state))
    return warnings


def _policy_warnings(state: ClusterState) -> list[str]:
    """A NodeflowPolicy naming a NodePool the manifests do not hold (a typo, or a NodePool not given)."""
    known = {p.name for p in state.node_pools}
    out: list[str] = []
    for policy in sorted(state.policies, key=lambda p: p.name):
        spec = policy.spec
        named: dict[str, str] = {}
        for rule in spec.node_pool_access or ():
            named.update((n, "nodePoolAccess") for n in rule.node_pools if n not in named)
        ceilings = spec.cost_ceilings
        for c in (ceilings.node_pools if ceilings is not None else None) or ():
            named.setdefault(c.name, "costCeilings.nodePools")
        for g in spec.limits or ():
            named.update((n, f"limits {g.name}") for n in g.node_pools if n not in named)
        for w in spec.pauses or ():
            named.update((n, f"pauses {w.name}") for n in w.node_pools or () if n not in named)
        for name, where in sorted(named.items()):
            if name != EVERY and name not in known:
                out.append(f"NodeflowPolicy {policy.name!r} names NodePool {name!r} ({where}), which does not exist")
    return out
