"""The governance record: one reviewable document of what nodeflow may create, for whom, at what cost, and with
which permissions (``python -m nodeflow governance``). Pure: built from a ``ClusterState`` (manifests or a
cluster snapshot), the catalog, the NodeflowPolicies, the permissions data and the time, all given.

``build_record(...)`` returns the record as JSON-ready data (``-o json``); ``render_markdown(record)`` renders the
same data for a review (``-o markdown``), so both outputs always say the same. Keys (stable; lists are sorted by
name unless said otherwise):

  kind "NodeflowGovernanceRecord", version 1, generatedAt (RFC 3339), source, catalog {region,
      spotPricesEstimated}
  nodePools[]  name, nodeClass {group, kind, name}, weight, replicas, requirements[] {key, operator, values,
      minValues}, labels, annotations, taints[] {key, value, effect}, startupTaints[], limits, expireAfter,
      terminationGracePeriod, consolidationPolicy, consolidateAfter, budgets[] {nodes, reasons, schedule,
      duration}, pricePerHour (its nodes and launching NodeClaims)
  nodeClasses[]  name, role, instanceProfile, amiFamily, amiSelectorTerms[], subnetSelectorTerms[],
      securityGroupSelectorTerms[], tags, metadataOptions {httpEndpoint, httpProtocolIPv6,
      httpPutResponseHopLimit, httpTokens}, review[] (findings worth a look), usedBy[] (NodePools)
  capacity  machines[] {nodeClaim, node, nodePool, instanceType, zone, capacityType, state
      "launching"|"running"|"deleting", pricePerHour (null: no catalog price)}, byNodePool[] {nodePool
      (null: not a NodePool's), capacityType, count, pricePerHour}, totalPerHour (what is not deleting),
      unpriced[] (machines without a catalog price)
  access  policies[], namespaces[] {namespace, labels, nodePools[] {nodePool, allowed, reason},
      resources[] {resource, allowed, reason}}, governedNodePools[] ("*": every NodePool), governedResources[]
  ceilings[] {policy, scope "cluster"|"nodePool"|"namespace", name, maxPricePerHour, inUsePerHour}
  groupLimits[] {policy, name, nodePools[] (null: all, as a policy's "*"), limits {resource: quantity}}
  pauses[] {policy, name, schedule, duration, provisioning, disruption, nodePools (null: all, unset or "*"), openUntil
      (RFC 3339 when open at generatedAt, else null)}
  disruptionControls  doNotDisrupt[] {kind "Pod"|"Node"|"NodeClaim", name (ns/name for pods), node, value},
      pdbs[] {namespace, name, minAvailable, maxUnavailable, selector, pods[]}, unprotectedPods (bound
      pods no PDB and no do-not-disrupt covers: a count)
  permissions  available, error, lambdas[] {function, description, uses[], statements[] {sid, actions[],
      resources, condition, when}, unknownUses[]}, kubernetes {functionGroups {function: [group]},
      accessPolicies {function: {policy, when}} (EKS access policies instead of groups: the installer),
      clusterRoles[] {name, rules[] {apiGroups, resources, verbs}}, roles[] {namespace, name, rules[]},
      agent {clusterRoles[]}}

Must not touch: what policies allow (``policy``) or what is spent (``spend``); the cluster (a ``ClusterState`` is the
input).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from nodeflow.api import labels as wk
from nodeflow.api.core import Pod
from nodeflow.api.karpenter import EC2NodeClass, NodeClaim, NodePool
from nodeflow.api.nodeflow_policy import NodeflowPolicy
from nodeflow.api.pool_names import EVERY
from nodeflow.api.quantity import format_milli
from nodeflow.catalog.model import CatalogData
from nodeflow.governance.policy import Governance
from nodeflow.governance.spend import cluster_spend, offering_price
from nodeflow.podutil import is_daemon_or_mirror

if TYPE_CHECKING:
    from nodeflow.cluster import ClusterState

__all__ = ["ACCELERATORS", "RECORD_KIND", "Permissions", "build_record", "render_markdown"]

RECORD_KIND = "NodeflowGovernanceRecord"
RECORD_VERSION = 1
# Accelerator resources listed for every namespace even when no policy governs them and no pod asks.
ACCELERATORS = ("aws.amazon.com/neuron", "nvidia.com/gpu")
_BASE_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage", "pods"})
_NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set on every namespace by the API server: not shown
_HOP_LIMIT_CONTAINERS = 2  # a pod reaching IMDS through the node's network namespace needs a hop limit of 2


@dataclass(frozen=True, slots=True)
class Permissions:
    """What nodeflow itself holds, as data (``nodeflow.governance.permissions.load_permissions``): the Lambda roles'
    IAM statements and the Kubernetes RBAC. ``error`` says why they could not be read (then the rest is empty)."""

    lambdas: Sequence[Mapping[str, Any]] = ()
    kubernetes: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None


def _dump(model: Any) -> Any:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def _taints(taints: Sequence[Any] | None) -> list[dict[str, Any]]:
    return [{"key": t.key, "value": t.value, "effect": t.effect} for t in taints or ()]


def _time(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- NodePools and EC2NodeClasses -----------------------------------------------------------------------------


def _node_pool(pool: NodePool, price: float) -> dict[str, Any]:
    spec = pool.spec
    template = spec.template
    disruption = spec.disruption
    return {
        "name": pool.name,
        "nodeClass": _dump(template.spec.node_class_ref),
        "weight": spec.weight,
        "replicas": spec.replicas,
        "requirements": [
            {"key": r.key, "operator": r.operator, "values": list(r.values or ()), "minValues": r.min_values}
            for r in template.spec.requirements
        ],
        "labels": dict(sorted((template.metadata.labels or {}).items())),
        "annotations": dict(sorted((template.metadata.annotations or {}).items())),
        "taints": _taints(template.spec.taints),
        "startupTaints": _taints(template.spec.startup_taints),
        "limits": dict(sorted((spec.limits or {}).items())),
        "expireAfter": template.spec.expire_after,
        "terminationGracePeriod": template.spec.termination_grace_period,
        "consolidationPolicy": disruption.consolidation_policy,
        "consolidateAfter": disruption.consolidate_after,
        "budgets": [
            {
                "nodes": b.nodes,
                "reasons": list(b.reasons) if b.reasons else None,
                "schedule": b.schedule,
                "duration": b.duration,
            }
            for b in disruption.budgets
        ],
        "pricePerHour": round(price, 6),
    }


def _review(node_class: EC2NodeClass) -> list[str]:
    """Findings in an EC2NodeClass worth a reviewer's look (instance metadata, public addresses, profiles)."""
    spec = node_class.spec
    meta = spec.metadata_options
    out: list[str] = []
    if meta.http_endpoint == "enabled":
        if meta.http_tokens != "required":
            out.append("IMDS httpTokens is optional: IMDSv1 (no session token) is allowed on the nodes")
        if meta.http_put_response_hop_limit >= _HOP_LIMIT_CONTAINERS:
            out.append(
                f"IMDS hop limit {meta.http_put_response_hop_limit}: pods (not only the node) can reach the "
                "instance metadata and the node role's credentials"
            )
    if spec.associate_public_ip_address:
        out.append("associatePublicIPAddress: nodes get public IP addresses")
    if spec.instance_profile is not None:
        out.append(
            f"instanceProfile {spec.instance_profile}: a pre-made profile (its role is not visible here; nodeflow "
            "does not manage it)"
        )
    if any(t.id is None and not t.tags and not t.alias and not t.name for t in spec.ami_selector_terms):
        out.append("an AMI selector term selects by owner/SSM only")
    if spec.user_data:
        out.append("custom userData (review what it runs at boot)")
    return out


def _node_class(node_class: EC2NodeClass, used_by: list[str]) -> dict[str, Any]:
    spec = node_class.spec
    return {
        "name": node_class.metadata.name or "",
        "role": spec.role,
        "instanceProfile": spec.instance_profile or (node_class.status.instance_profile if node_class.status else None),
        "amiFamily": spec.ami_family,
        "amiSelectorTerms": [_dump(t) for t in spec.ami_selector_terms],
        "subnetSelectorTerms": [_dump(t) for t in spec.subnet_selector_terms],
        "securityGroupSelectorTerms": [_dump(t) for t in spec.security_group_selector_terms],
        "tags": dict(sorted((spec.tags or {}).items())),
        "metadataOptions": _dump(spec.metadata_options),
        "review": _review(node_class),
        "usedBy": used_by,
    }


# -- capacity -------------------------------------------------------------------------------------------------


def _capacity(state: ClusterState, catalog: CatalogData) -> tuple[dict[str, Any], Any]:
    spend, costs = cluster_spend(state, catalog)
    priced = {c.name: c.price for c in costs}
    claims_by_node: dict[str, NodeClaim] = {}
    for claim in state.node_claims:
        status = claim.status
        if status is not None:
            for ref in (status.node_name, status.provider_id):
                if ref:
                    claims_by_node[ref] = claim
    machines: list[dict[str, Any]] = []
    seen_claims: set[str] = set()

    def row(claim: NodeClaim | None, node: Any | None) -> dict[str, Any]:
        labels = {**((claim.metadata.labels or {}) if claim else {}), **((node.metadata.labels or {}) if node else {})}
        deleting = any(o is not None and o.metadata.deletion_timestamp is not None for o in (claim, node))
        state_ = "deleting" if deleting else "running" if node is not None else "launching"
        name = (node.metadata.name if node is not None else None) or (claim.name if claim is not None else "")
        launched = wk.LABEL_INSTANCE_TYPE in labels
        capacity_type = labels.get(wk.LABEL_CAPACITY_TYPE, wk.CAPACITY_TYPE_ON_DEMAND if launched else None)
        if name in priced:
            price: float | None = priced[name]
        elif launched:
            price = offering_price(
                catalog, labels[wk.LABEL_INSTANCE_TYPE], labels.get(wk.LABEL_ZONE, ""), capacity_type or ""
            )
        else:
            price = None
        if (
            launched
            and offering_price(
                catalog, labels[wk.LABEL_INSTANCE_TYPE], labels.get(wk.LABEL_ZONE, ""), capacity_type or ""
            )
            is None
        ):
            price = None  # the spend counts it $0; the record says it has no price
        return {
            "nodeClaim": claim.name if claim is not None else None,
            "node": node.metadata.name if node is not None else None,
            "nodePool": labels.get(wk.LABEL_NODEPOOL),
            "instanceType": labels.get(wk.LABEL_INSTANCE_TYPE),
            "zone": labels.get(wk.LABEL_ZONE),
            "capacityType": capacity_type,
            "state": state_,
            "pricePerHour": None if price is None else round(price, 6),
        }

    for node in sorted(state.nodes, key=lambda n: n.metadata.name or ""):
        paired = claims_by_node.get(node.metadata.name or "") or claims_by_node.get(node.spec.provider_id or "")
        if paired is not None:
            seen_claims.add(paired.name)
        machines.append(row(paired, node))
    for claim in sorted(state.node_claims, key=lambda c: c.name):
        if claim.name not in seen_claims:
            machines.append(row(claim, None))
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for m in machines:
        if m["state"] == "deleting":
            continue
        key = (m["nodePool"] or "", m["capacityType"] or "")
        group = groups.setdefault(
            key, {"nodePool": m["nodePool"], "capacityType": m["capacityType"], "count": 0, "pricePerHour": 0.0}
        )
        group["count"] += 1
        group["pricePerHour"] = round(group["pricePerHour"] + (m["pricePerHour"] or 0.0), 6)
    capacity = {
        "machines": machines,
        "byNodePool": [groups[k] for k in sorted(groups)],
        "totalPerHour": round(sum(g["pricePerHour"] for g in groups.values()), 6),
        "unpriced": sorted(m["node"] or m["nodeClaim"] for m in machines if m["pricePerHour"] is None),
    }
    return capacity, spend


# -- access, ceilings, limits, pauses -------------------------------------------------------------------------


def _requested_resources(pods: Sequence[Pod]) -> set[str]:
    out: set[str] = set()
    for pod in pods:
        out.update(k for k in pod.spec.effective_requests() if k not in _BASE_RESOURCES)
    return out


def _access(
    state: ClusterState, governance: Governance, policies: Sequence[NodeflowPolicy]
) -> tuple[dict[str, Any], list[str]]:
    labels_of: dict[str, dict[str, str]] = {}
    for ns in state.namespaces:
        labels_of[ns.metadata.name or ""] = dict(ns.metadata.labels or {})
    for pod in state.pods:
        labels_of.setdefault(pod.namespace, {})
    unknown = sorted(
        {
            name
            for policy in policies
            for rule in (*(policy.spec.node_pool_access or ()), *(policy.spec.resource_access or ()))
            for name in rule.namespaces or ()
            if name != EVERY and name not in labels_of
        }
    )
    pools = sorted({p.name for p in state.node_pools} | set(governance.pool_rules) - {EVERY})
    resources = sorted(set(ACCELERATORS) | set(governance.resource_rules) | _requested_resources(state.pods))
    namespaces = []
    for name in sorted(labels_of):
        labels = labels_of[name]
        pool_rows = []
        for pool in pools:
            why = governance.pool_denial(name, labels, pool)
            pool_rows.append({"nodePool": pool, "allowed": why is None, "reason": why})
        resource_rows = []
        for resource in resources:
            why = governance.resource_denial(name, labels, resource)
            resource_rows.append({"resource": resource, "allowed": why is None, "reason": why})
        namespaces.append(
            {
                "namespace": name,
                "labels": dict(sorted(labels.items())),
                "nodePools": pool_rows,
                "resources": resource_rows,
            }
        )
    notes = [
        f"namespace {n} is named by a policy but is not among the namespaces (no Namespace object, no pods)"
        for n in unknown
    ]
    access = {
        "policies": list(governance.policies),
        "namespaces": namespaces,
        "governedNodePools": sorted(governance.pool_rules),
        "governedResources": sorted(governance.resource_rules),
    }
    return access, notes


def _limits_text(limits: Mapping[str, int]) -> dict[str, str]:
    return {k: format_milli(v, k) for k, v in sorted(limits.items())}


def _pause_rows(governance: Governance, now: datetime) -> list[dict[str, Any]]:
    rows = []
    open_ = dict(governance.open_windows(now))
    for w in governance.windows:
        until = open_.get(w)
        rows.append(
            {
                "policy": w.policy,
                "name": w.name,
                "schedule": w.schedule,
                "duration": w.duration_text,
                "provisioning": w.provisioning,
                "disruption": w.disruption,
                "nodePools": w.nodepools.to_json(),
                "openUntil": _time(until) if until is not None else None,
            }
        )
    return rows


# -- disruption controls --------------------------------------------------------------------------------------


def _disruption_controls(state: ClusterState) -> dict[str, Any]:
    marked: list[dict[str, Any]] = []
    for pod in sorted(state.pods, key=lambda p: p.key):
        value = (pod.metadata.annotations or {}).get(wk.ANNOTATION_DO_NOT_DISRUPT)
        if value is not None:
            marked.append({"kind": "Pod", "name": pod.key, "node": pod.spec.node_name, "value": value})
    for node in sorted(state.nodes, key=lambda n: n.metadata.name or ""):
        value = (node.metadata.annotations or {}).get(wk.ANNOTATION_DO_NOT_DISRUPT)
        if value is not None:
            marked.append(
                {"kind": "Node", "name": node.metadata.name or "", "node": node.metadata.name, "value": value}
            )
    for claim in sorted(state.node_claims, key=lambda c: c.name):
        value = (claim.metadata.annotations or {}).get(wk.ANNOTATION_DO_NOT_DISRUPT)
        if value is not None:
            on = claim.status.node_name if claim.status is not None else None
            marked.append({"kind": "NodeClaim", "name": claim.name, "node": on, "value": value})
    covered: set[str] = set()
    pdbs = []
    for pdb in sorted(state.pdbs, key=lambda p: (p.metadata.namespace or "default", p.metadata.name or "")):
        namespace = pdb.metadata.namespace or "default"
        selector = pdb.spec.selector
        pods = sorted(
            p.key
            for p in state.pods
            if p.namespace == namespace and selector is not None and selector.matches(p.labels)
        )
        covered.update(pods)
        pdbs.append(
            {
                "namespace": namespace,
                "name": pdb.metadata.name or "",
                "minAvailable": pdb.spec.min_available,
                "maxUnavailable": pdb.spec.max_unavailable,
                "selector": _dump(selector) if selector is not None else None,
                "pods": pods,
            }
        )
    protected = covered | {m["name"] for m in marked if m["kind"] == "Pod"}
    bound = [p for p in state.pods if p.spec.node_name and not is_daemon_or_mirror(p)]
    return {
        "doNotDisrupt": marked,
        "pdbs": pdbs,
        "unprotectedPods": sum(1 for p in bound if p.key not in protected),
    }


# -- the record -----------------------------------------------------------------------------------------------


def build_record(
    state: ClusterState,
    catalog: CatalogData,
    permissions: Permissions,
    now: datetime,
    source: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The governance record of ``state`` (its NodeflowPolicies included) as JSON-ready data (keys in the module
    docstring). ``now`` decides which pause windows are open."""
    policies = tuple(state.policies)
    governance = Governance.from_policies(policies)
    capacity, spend = _capacity(state, catalog)
    pools = sorted(state.node_pools, key=lambda p: p.name)
    used_by: dict[str, list[str]] = {}
    for pool in pools:
        used_by.setdefault(pool.spec.template.spec.node_class_ref.name, []).append(pool.name)
    access, notes = _access(state, governance, policies)
    pool_names = {p.name for p in pools}
    for c in governance.ceilings:
        if c.scope == "nodePool" and c.name not in pool_names:
            notes.append(f"policy {c.policy}: a ceiling names NodePool {c.name}, which does not exist")
    for g in governance.group_limits:
        for missing in sorted(set(g.nodepools.named()) - pool_names):
            notes.append(f"policy {g.policy}: group {g.name} names NodePool {missing}, which does not exist")
    for name in sorted(set(governance.pool_rules) - pool_names - {EVERY}):
        notes.append(f"a nodePoolAccess rule names NodePool {name}, which does not exist")
    classes = {c.metadata.name or "" for c in state.node_classes}
    for pool in pools:
        ref = pool.spec.template.spec.node_class_ref.name
        if ref not in classes:
            notes.append(f"NodePool {pool.name} uses EC2NodeClass {ref}, which is not among the manifests")
    return {
        "kind": RECORD_KIND,
        "version": RECORD_VERSION,
        "generatedAt": _time(now),
        "source": dict(source or {}),
        "catalog": {"region": catalog.region, "spotPricesEstimated": catalog.spot_prices_estimated},
        "nodePools": [_node_pool(p, spend.by_pool.get(p.name, 0.0)) for p in pools],
        "nodeClasses": [
            _node_class(c, used_by.get(c.metadata.name or "", []))
            for c in sorted(state.node_classes, key=lambda c: c.metadata.name or "")
        ],
        "capacity": capacity,
        "access": access,
        "ceilings": [
            {
                "policy": c.policy,
                "scope": c.scope,
                "name": c.name,
                "maxPricePerHour": c.max_per_hour,
                "inUsePerHour": round(spend.in_use(c), 6),
            }
            for c in governance.ceilings
        ],
        "groupLimits": [
            {"policy": g.policy, "name": g.name, "nodePools": g.nodepools.to_json(), "limits": _limits_text(g.limits)}
            for g in governance.group_limits
        ],
        "pauses": _pause_rows(governance, now),
        "disruptionControls": _disruption_controls(state),
        "permissions": {
            "available": permissions.error is None,
            "error": permissions.error,
            "lambdas": [dict(x) for x in permissions.lambdas],
            "kubernetes": dict(permissions.kubernetes),
        },
        "notes": notes,
    }


# -- markdown -------------------------------------------------------------------------------------------------


def _cell(value: Any) -> str:
    if value is None or value == "" or value == [] or value == {}:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(_cell(v) for v in value)
    return str(value).replace("|", "\\|").replace("\n", " ")


def _pools_cell(pools: list[str] | None) -> Any:
    """A group's or a window's NodePools: "all" for every NodePool (null)."""
    return "all" if pools is None else pools


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return out


def _money(value: float | None) -> str:
    return "no price" if value is None else f"${value:.4f}"


def _requirement(r: Mapping[str, Any]) -> str:
    values = ",".join(r["values"])
    text = f"{r['key']} {r['operator']}" + (f" {values}" if values else "")
    return text + (f" (minValues {r['minValues']})" if r.get("minValues") else "")


def _taint(t: Mapping[str, Any]) -> str:
    return f"{t['key']}" + (f"={t['value']}" if t.get("value") else "") + f":{t['effect']}"


def _groups(rule: Mapping[str, Any]) -> list[str]:
    return [g or "core" for g in rule["apiGroups"]]


def _term(term: Mapping[str, Any]) -> str:
    return "; ".join(f"{k}: {_cell(v)}" for k, v in term.items())


def render_markdown(record: Mapping[str, Any]) -> str:
    """The record for a review: one heading per section (``_md_node_pools`` ... ``_md_permissions``), tables."""
    out: list[str] = [f"# nodeflow governance record ({record['generatedAt']})", ""]
    source = record.get("source") or {}
    if source:
        out += [f"Source: {_cell(source)}. Catalog: {record['catalog']['region']}.", ""]
    out += _md_node_pools(record)
    out += _md_node_classes(record)
    out += _md_capacity(record)
    out += _md_access(record)
    out += _md_bounds(record)
    out += _md_disruption_controls(record)
    out += _md_permissions(record)
    if record.get("notes"):
        out += ["## Notes", ""] + [f"- {n}" for n in record["notes"]] + [""]
    return "\n".join(out)


def _md_node_pools(record: Mapping[str, Any]) -> list[str]:
    """The NodePools: one table each (requirements, labels, taints, limits, disruption, $/hour)."""
    out: list[str] = []
    out += ["## NodePools", ""]
    pools = record["nodePools"]
    if not pools:
        out += ["No NodePools.", ""]
    for p in pools:
        out += [f"### NodePool {p['name']}", ""]
        disruption = f"{p['consolidationPolicy']} after {p['consolidateAfter']}"
        budgets = "; ".join(
            f"{b['nodes']}"
            + (f" for {','.join(b['reasons'])}" if b.get("reasons") else "")
            + (f" at {b['schedule']} for {b['duration']}" if b.get("schedule") else "")
            for b in p["budgets"]
        )
        out += _table(
            ("Field", "Value"),
            [
                ("EC2NodeClass", p["nodeClass"]["name"]),
                ("requirements", "; ".join(_requirement(r) for r in p["requirements"])),
                ("labels", p["labels"]),
                ("taints", [_taint(t) for t in p["taints"]]),
                ("startup taints", [_taint(t) for t in p["startupTaints"]]),
                ("limits", p["limits"]),
                ("weight", p["weight"]),
                ("replicas (static)", p["replicas"]),
                ("expireAfter", p["expireAfter"]),
                ("terminationGracePeriod", p["terminationGracePeriod"]),
                ("consolidation", disruption),
                ("disruption budgets", budgets),
                ("$/hour now", _money(p["pricePerHour"])),
            ],
        )
        out.append("")
    return out


def _md_node_classes(record: Mapping[str, Any]) -> list[str]:
    """The EC2NodeClasses: one table each, with what to review."""
    out: list[str] = []
    out += ["## EC2NodeClasses", ""]
    classes = record["nodeClasses"]
    if not classes:
        out += ["No EC2NodeClasses.", ""]
    for c in classes:
        meta = c["metadataOptions"]
        out += [f"### EC2NodeClass {c['name']}", ""]
        out += _table(
            ("Field", "Value"),
            [
                ("IAM role", c["role"]),
                ("instance profile", c["instanceProfile"]),
                ("used by NodePools", c["usedBy"]),
                ("AMI family", c["amiFamily"]),
                ("AMI selector", [_term(t) for t in c["amiSelectorTerms"]]),
                ("subnet selector", [_term(t) for t in c["subnetSelectorTerms"]]),
                ("security group selector", [_term(t) for t in c["securityGroupSelectorTerms"]]),
                ("tags", c["tags"]),
                (
                    "instance metadata",
                    f"endpoint {meta.get('httpEndpoint')}, httpTokens {meta.get('httpTokens')}, "
                    f"hop limit {meta.get('httpPutResponseHopLimit')}",
                ),
            ],
        )
        out += [""] + [f"- review: {r}" for r in c["review"]] + ([""] if c["review"] else [])
    return out


def _md_capacity(record: Mapping[str, Any]) -> list[str]:
    """The NodeClaims and nodes observed, and their $/hour by NodePool and capacity type."""
    out: list[str] = []
    capacity = record["capacity"]
    out += ["## Capacity and cost", ""]
    if capacity["machines"]:
        out += _table(
            ("NodeClaim", "Node", "NodePool", "Instance type", "Zone", "Capacity", "State", "$/hour"),
            [
                (
                    m["nodeClaim"],
                    m["node"],
                    m["nodePool"] or "(not a NodePool's)",
                    m["instanceType"],
                    m["zone"],
                    m["capacityType"],
                    m["state"],
                    _money(m["pricePerHour"]),
                )
                for m in capacity["machines"]
            ],
        )
        out += ["", "By NodePool and capacity type (deleting ones left out):", ""]
        out += _table(
            ("NodePool", "Capacity", "Count", "$/hour"),
            [
                (
                    g["nodePool"] or "(not a NodePool's)",
                    g["capacityType"] or "(not launched)",
                    g["count"],
                    _money(g["pricePerHour"]),
                )
                for g in capacity["byNodePool"]
            ],
        )
        out += ["", f"Total: {_money(capacity['totalPerHour'])}/hour."]
        if capacity["unpriced"]:
            out.append(f"No catalog price (counted $0): {', '.join(capacity['unpriced'])}.")
        if record["catalog"]["spotPricesEstimated"]:
            out.append("Spot prices are estimates (offline catalog).")
    else:
        out.append("No NodeClaims or nodes observed.")
    out.append("")
    return out


def _md_access(record: Mapping[str, Any]) -> list[str]:
    """Which namespaces may use which NodePools and resources, and why not."""
    out: list[str] = []
    access = record["access"]
    out += ["## Access under the NodeflowPolicies", ""]
    out.append(
        f"Policies: {', '.join(access['policies'])}."
        if access["policies"]
        else "No NodeflowPolicies: every namespace may use every NodePool and request every resource."
    )
    out += [
        f"NodePools governed: {_cell(access['governedNodePools'])}; resources governed: "
        f"{_cell(access['governedResources'])}. Access governs new capacity only.",
        "",
    ]
    if access["namespaces"]:
        pool_names = [r["nodePool"] for r in access["namespaces"][0]["nodePools"]]
        resource_names = [r["resource"] for r in access["namespaces"][0]["resources"]]
        out += _table(
            ("Namespace", "Labels", *(f"NodePool {p}" for p in pool_names), *resource_names),
            [
                (
                    ns["namespace"],
                    {k: v for k, v in ns["labels"].items() if k != _NAMESPACE_NAME_LABEL},
                    *("allowed" if r["allowed"] else "denied" for r in ns["nodePools"]),
                    *("allowed" if r["allowed"] else "denied" for r in ns["resources"]),
                )
                for ns in access["namespaces"]
            ],
        )
        denials = [
            r["reason"] for ns in access["namespaces"] for r in (*ns["nodePools"], *ns["resources"]) if r["reason"]
        ]
        if denials:
            out += ["", "Denials:", ""] + [f"- {d}" for d in denials]
    else:
        out.append("No namespaces known (no Namespace objects, no pods).")
    out.append("")
    return out


def _md_bounds(record: Mapping[str, Any]) -> list[str]:
    """The $/hour ceilings, group limits and pause windows of the NodeflowPolicies."""
    out: list[str] = []
    out += ["## Cost ceilings, group limits and pauses", ""]
    if record["ceilings"]:
        out += _table(
            ("Policy", "Scope", "Name", "Ceiling $/hour", "In use $/hour"),
            [
                (
                    c["policy"],
                    c["scope"],
                    c["name"] or "(cluster)",
                    f"{c['maxPricePerHour']:.2f}",
                    f"{c['inUsePerHour']:.4f}",
                )
                for c in record["ceilings"]
            ],
        )
        out.append("")
    else:
        out += ["No cost ceilings.", ""]
    if record["groupLimits"]:
        out += _table(
            ("Policy", "Group", "NodePools", "Limits"),
            [(g["policy"], g["name"], _pools_cell(g["nodePools"]), g["limits"]) for g in record["groupLimits"]],
        )
        out.append("")
    else:
        out += ["No group limits.", ""]
    if record["pauses"]:
        out += _table(
            ("Policy", "Window", "Schedule (UTC)", "Duration", "Pauses", "NodePools", "Open now"),
            [
                (
                    w["policy"],
                    w["name"],
                    w["schedule"],
                    w["duration"],
                    ", ".join(k for k in ("provisioning", "disruption") if w[k]),
                    _pools_cell(w["nodePools"]),
                    f"until {w['openUntil']}" if w["openUntil"] else "no",
                )
                for w in record["pauses"]
            ],
        )
        out.append("")
    else:
        out += ["No pause windows.", ""]
    return out


def _md_disruption_controls(record: Mapping[str, Any]) -> list[str]:
    """The pods do-not-disrupt and PodDisruptionBudgets protect, and how many neither does."""
    out: list[str] = []
    controls = record["disruptionControls"]
    out += ["## Disruption controls", ""]
    if controls["doNotDisrupt"]:
        out += _table(
            ("Kind", "Name", "Node", "karpenter.sh/do-not-disrupt"),
            [(m["kind"], m["name"], m["node"], m["value"]) for m in controls["doNotDisrupt"]],
        )
    else:
        out.append("Nothing carries karpenter.sh/do-not-disrupt.")
    out.append("")
    if controls["pdbs"]:
        out += _table(
            ("Namespace", "PodDisruptionBudget", "minAvailable", "maxUnavailable", "Pods covered"),
            [(p["namespace"], p["name"], p["minAvailable"], p["maxUnavailable"], p["pods"]) for p in controls["pdbs"]],
        )
    else:
        out.append("No PodDisruptionBudgets.")
    out += ["", f"Bound pods neither a PDB nor do-not-disrupt protects: {controls['unprotectedPods']}.", ""]
    return out


def _md_permissions(record: Mapping[str, Any]) -> list[str]:
    """nodeflow's own IAM statements and Kubernetes RBAC."""
    out: list[str] = []
    perms = record["permissions"]
    out += ["## nodeflow's own permissions", ""]
    if not perms["available"]:
        out += [f"Not listed: {perms['error']}", ""]
    else:
        out += ["### AWS IAM (one role per Lambda function)", ""]
        rows = []
        for fn in perms["lambdas"]:
            for st in fn["statements"]:
                rows.append(
                    (
                        fn["function"],
                        st["sid"],
                        st["actions"],
                        st["resources"],
                        st["condition"],
                        st["when"] or "always",
                    )
                )
            if fn.get("unknownUses"):
                rows.append(
                    (fn["function"], "", "", f"uses not in infra/grants.py: {_cell(fn['unknownUses'])}", "", "")
                )
        out += _table(("Function", "Sid", "Actions", "Resources", "Condition", "When"), rows)
        kube = perms["kubernetes"]
        out += ["", "### Kubernetes RBAC", ""]
        out += _table(
            ("Function", "Groups"), [(fn, groups) for fn, groups in sorted(kube.get("functionGroups", {}).items())]
        )
        out.append("")
        policies = sorted(kube.get("accessPolicies", {}).items())
        if policies:
            out += _table(
                ("Function", "EKS access policy", "When"), [(fn, p["policy"], p["when"]) for fn, p in policies]
            )
            out.append("")
        rule_rows = []
        for role in kube.get("clusterRoles", []):
            for rule in role["rules"]:
                rule_rows.append(("ClusterRole", role["name"], _groups(rule), rule["resources"], rule["verbs"]))
        for role in kube.get("roles", []):
            for rule in role["rules"]:
                rule_rows.append(
                    (f"Role ({role['namespace']})", role["name"], _groups(rule), rule["resources"], rule["verbs"])
                )
        for role in kube.get("agent", {}).get("clusterRoles", []):
            for rule in role["rules"]:
                rule_rows.append(("agent ClusterRole", role["name"], _groups(rule), rule["resources"], rule["verbs"]))
        out += _table(("Kind", "Name", "API groups", "Resources", "Verbs"), rule_rows)
        out.append("")
    return out
