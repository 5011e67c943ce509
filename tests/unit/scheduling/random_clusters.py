"""Random clusters as manifests, and the bytes ``plan`` and ``disrupt --dry-run`` print for them.

``cluster(n)`` builds cluster number ``n`` (seeded by ``n`` alone, so a number names one cluster): Ready
EC2NodeClasses, one to three NodePools (requirements on capacity type, category, arch, zones and CPUs,
``minValues``, weights that often tie, CPU limits, taints, template labels, budgets, expireAfter), namespaces
with labels, existing Karpenter nodes with bound pods (some empty, some drifted, some under a PDB or
do-not-disrupt, some NodeClaims still launching; a third of the clusters are mostly bound pods, for
consolidation) and pending workloads mixing nodeSelectors, required node affinity (ORed terms too), preferred
node affinity, pod affinity (namespace selectors too) and anti-affinity on hostname and zone, topology spreads
(zone, hostname, capacity type; both whenUnsatisfiable, minDomains, matchLabelKeys), tolerations and host
ports; sometimes a NodeflowPolicy (access, ceilings, group limits, pause windows), a DaemonSet, a NodeOverlay,
a static NodePool or capacity reservations. ``REGRESSIONS`` are small clusters whose output once followed the
hash seed.

Run as a program (``python -m tests.unit.scheduling.random_clusters FIRST COUNT``), it prints one JSON line per
cluster FIRST..FIRST+COUNT-1 and per regression case: ``{"case": name, "plan": <plan -o json text>,
"disrupt": <disrupt --dry-run -o json text>}``. ``test_determinism.py`` runs it under several PYTHONHASHSEED
values and compares the lines.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Callable
from functools import partial
from typing import Any

from tests.parity.harness import (
    ARCH,
    CAPACITY_TYPE,
    HOSTNAME,
    NOW,
    ZONE,
    ZONES,
    Obj,
    affinity_term,
    ago,
    managed_node,
    namespace,
    node_class,
    node_pool,
    pdb,
    pod,
    requirement,
    reservations,
    run,
    spread,
    taint,
    toleration,
    ts,
)

CATEGORY = "karpenter.k8s.aws/instance-category"
CPU = "karpenter.k8s.aws/instance-cpu"
FAMILY = "karpenter.k8s.aws/instance-family"
TEAM = "example.com/team"
NODE_TYPES = ("m5.large", "m5.xlarge", "c5.xlarge", "r5.large", "m6g.large", "t3.medium", "c6g.xlarge")
NAMESPACES = ("default", "team-a", "team-b")


def _sub(rng: random.Random, values: tuple[str, ...]) -> list[str]:
    return sorted(rng.sample(values, rng.randint(1, len(values))))


def _pool(rng: random.Random, name: str, drifted_from: Obj | None = None) -> Obj:
    reqs: list[Obj] = []
    if rng.random() < 0.6:
        reqs.append(requirement(CAPACITY_TYPE, "In", *_sub(rng, ("spot", "on-demand"))))
    if rng.random() < 0.5:
        reqs.append(requirement(CATEGORY, "In", *_sub(rng, ("c", "m", "r", "t"))))
    if rng.random() < 0.4:
        reqs.append(requirement(ARCH, "In", *_sub(rng, ("amd64", "arm64"))))
    if rng.random() < 0.3:
        reqs.append(requirement(ZONE, "In", *_sub(rng, ZONES)))
    if rng.random() < 0.4:
        reqs.append(requirement(CPU, rng.choice(("Lt", "Gt")), rng.choice(("2", "5", "9", "17"))))
    if rng.random() < 0.15:
        reqs.append(requirement(FAMILY, "Exists", min_values=rng.choice((2, 3))))
    kw: dict[str, Any] = {}
    if rng.random() < 0.5:
        kw["weight"] = rng.choice((10, 10, 50))  # ties on purpose
    if rng.random() < 0.35:
        kw["limits"] = {"cpu": rng.choice(("4", "8", "16", "32"))}
    if rng.random() < 0.2:
        kw["taints"] = [taint("dedicated", rng.choice(("gpu", "batch")))]
    if rng.random() < 0.3:
        kw["labels"] = {TEAM: rng.choice(("a", "b"))}
    if rng.random() < 0.4:
        kw["disruption"] = {
            "consolidationPolicy": rng.choice(("WhenEmpty", "WhenEmptyOrUnderutilized", "WhenEmptyOrUnderutilized")),
            "budgets": [{"nodes": rng.choice(("1", "2", "50%", "100%"))}],
        }
    if rng.random() < 0.1:
        kw["expire_after"] = rng.choice(("1h", "24h"))
    if rng.random() < 0.2:
        kw["node_class_name"] = "two-zones"
    return node_pool(name, requirements=reqs, **kw)


def _existing(rng: random.Random, pools: list[Obj], apps: list[str], busy: bool) -> list[Obj]:
    """Karpenter nodes with bound pods; ``busy``: more nodes and pods (a world for consolidation)."""
    out: list[Obj] = []
    for i in range(rng.choice((3, 4, 6, 8) if busy else (0, 0, 1, 2, 3, 5))):
        pool = rng.choice(pools)
        name = f"node-{i}"
        instance_type = rng.choice(NODE_TYPES)
        kw: dict[str, Any] = {
            "pool": pool["metadata"]["name"],
            "instance_type": instance_type,
            "zone": rng.choice(ZONES),
            "capacity_type": rng.choice(("spot", "on-demand")),
            "created": ago(hours=rng.choice((2, 5, 30))),
        }
        if rng.random() < (0.05 if busy else 0.25):
            kw["claim_image_id"] = "ami-0old"  # drifted: the class resolves ami-0parity now
        if rng.random() < 0.1:
            kw["annotations"] = {"karpenter.sh/do-not-disrupt": "true"}
        if rng.random() < 0.1:  # a NodeClaim still launching: no Node yet
            out.append(managed_node(name, **kw)[1])
            continue
        out.extend(managed_node(name, **kw))
        for j in range(rng.choice((1, 2, 3, 5) if busy else (0, 1, 1, 2, 3))):
            app = rng.choice(apps)
            out.append(
                pod(
                    f"{app}-bound-{i}-{j}",
                    namespace=rng.choice(NAMESPACES),
                    node=name,
                    cpu=rng.choice(("100m", "250m", "500m")),
                    memory=rng.choice(("128Mi", "512Mi")),
                    labels={"app": app, "tier": rng.choice(("front", "back"))},
                    spread=[spread(ZONE, labels={"app": app}, when="ScheduleAnyway")] if rng.random() < 0.2 else (),
                    pod_anti_affinity=[affinity_term(HOSTNAME, {"app": app})] if rng.random() < 0.15 else (),
                )
            )
    if out and rng.random() < 0.3:
        out.append(pdb("guard", {"app": apps[0]}, max_unavailable=0, disruptions_allowed=0))
    return out


def _workload(rng: random.Random, w: int, apps: list[str]) -> list[Obj]:
    app = apps[w]
    kw: dict[str, Any] = {
        "namespace": rng.choice(NAMESPACES),
        "cpu": rng.choice(("100m", "250m", "500m", "1", "1500m", "3", "7")),
        "memory": rng.choice(("128Mi", "512Mi", "1Gi", "2Gi", "6Gi", "15Gi")),
        "labels": {"app": app, "tier": rng.choice(("front", "back")), "pod-template-hash": rng.choice(("h1", "h2"))},
    }
    if rng.random() < 0.25:
        key, values = rng.choice(
            [(ZONE, ZONES), (ARCH, ("amd64", "arm64")), (CAPACITY_TYPE, ("spot", "on-demand")), (TEAM, ("a", "b"))]
        )
        kw["node_selector"] = {key: rng.choice(values)}
    terms: list[list[Obj]] = []
    if rng.random() < 0.3:
        terms = [[requirement(ZONE, rng.choice(("In", "NotIn")), *_sub(rng, ZONES))]]
        if rng.random() < 0.4:  # ORed terms
            terms.append(
                [requirement(CATEGORY, "In", *_sub(rng, ("c", "m", "r"))), requirement(ZONE, "In", *_sub(rng, ZONES))]
            )
        kw["node_affinity"] = terms[0]
    if rng.random() < 0.25:
        kw["preferred_node_affinity"] = [
            (rng.choice((1, 10, 10)), requirement(CATEGORY, "In", rng.choice(("c", "m", "r")))),
            (rng.choice((1, 10)), requirement(ZONE, "In", rng.choice(ZONES))),
        ][: rng.randint(1, 2)]
    if rng.random() < 0.25:
        other = rng.choice(apps)
        namespaces = {"matchLabels": {"team": "a"}} if rng.random() < 0.3 else None
        kw["pod_affinity"] = [
            affinity_term(
                rng.choice((HOSTNAME, ZONE)),
                {"app": other},
                weight=rng.choice((None, None, 50)),
                namespace_selector=namespaces,
            )
        ]
    if rng.random() < 0.25:
        kw["pod_anti_affinity"] = [
            affinity_term(rng.choice((HOSTNAME, HOSTNAME, ZONE)), {"app": app}, weight=rng.choice((None, 20)))
        ]
    if rng.random() < 0.4:
        spreads = []
        for key in rng.sample((ZONE, HOSTNAME, CAPACITY_TYPE), rng.randint(1, 2)):
            labels = {"app": app} if rng.random() < 0.7 else {"tier": kw["labels"]["tier"]}
            when = rng.choice(("DoNotSchedule", "DoNotSchedule", "ScheduleAnyway"))
            min_domains = rng.choice((None, None, 2)) if key == ZONE and when == "DoNotSchedule" else None
            keys = ("pod-template-hash",) if rng.random() < 0.2 else ()
            spreads.append(
                spread(
                    key,
                    labels=labels,
                    max_skew=rng.choice((1, 1, 2)),
                    when=when,
                    min_domains=min_domains,
                    match_label_keys=keys,
                )
            )
        kw["spread"] = spreads
    if rng.random() < 0.25:
        kw["tolerations"] = [toleration("dedicated", rng.choice((None, "gpu", "batch")))]
    if rng.random() < 0.08:
        kw["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    ports = kw.pop("ports", None)
    out = []
    for r in range(rng.choice((1, 1, 2, 3, 4, 6, 9))):
        p = pod(f"{app}-{r}", **kw)
        if len(terms) > 1:
            required = p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            required["nodeSelectorTerms"] += [{"matchExpressions": t} for t in terms[1:]]
        if ports:
            p["spec"]["containers"][0]["ports"] = ports
        out.append(p)
    return out


def _policy(rng: random.Random, pools: list[Obj]) -> Obj:
    names = [p["metadata"]["name"] for p in pools]
    spec: Obj = {}
    if rng.random() < 0.5:
        spec["nodePoolAccess"] = [
            {"nodePools": [rng.choice(names)], "namespaceSelector": {"matchLabels": {"team": "a"}}}
        ]
    if rng.random() < 0.5:
        spec["costCeilings"] = {"cluster": {"maxPricePerHour": rng.choice(("0.5", "1", "3"))}}
    if rng.random() < 0.5:
        spec["limits"] = [{"name": "group", "nodePools": names, "resources": {"cpu": rng.choice(("6", "12"))}}]
    if rng.random() < 0.3:
        spec["pauses"] = [
            {
                "name": "window",
                "schedule": "0 * * * *",
                "duration": "2h",
                "provisioning": rng.random() < 0.5,
                "disruption": True,
                "nodePools": [rng.choice(names)],
            }
        ]
    return {
        "apiVersion": "nodeflow.io/v1alpha1",
        "kind": "NodeflowPolicy",
        "metadata": {"name": "random"},
        "spec": spec,
    }


def cluster(n: int) -> list[Obj]:
    """Cluster number ``n``: the same objects for the same ``n``, whatever the process."""
    rng = random.Random(n)
    pools = [_pool(rng, name) for name in ("general", "spot", "big")[: rng.choice((1, 2, 2, 3))]]
    apps = [f"w{i}" for i in range(rng.randint(1, 8))]
    objs: list[Obj] = [node_class(), node_class("two-zones", zones=ZONES[:2]), *pools]
    objs += [namespace("default"), namespace("team-a", {"team": "a"}), namespace("team-b", {"team": "b"})]
    busy = rng.random() < 0.35  # a world for consolidation: more bound pods, few pending ones
    objs += _existing(rng, pools, apps, busy)
    for w in range(len(apps)):
        if not busy or rng.random() < 0.2:
            objs += _workload(rng, w, apps)
    if rng.random() < 0.15:
        objs.append(_policy(rng, pools))
    objs += _extras(rng)
    return objs


def _extras(rng: random.Random) -> list[Obj]:
    """Sometimes: a DaemonSet, a NodeOverlay, a static NodePool, capacity reservations."""
    out: list[Obj] = []
    if rng.random() < 0.2:
        template = pod("agent-template", cpu=rng.choice(("100m", "200m")), memory="128Mi", owner=None)
        out.append(
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {"name": "agent", "namespace": "default"},
                "spec": {
                    "selector": {"matchLabels": {"ds": "agent"}},
                    "template": {"metadata": {"labels": {"ds": "agent"}}, "spec": template["spec"]},
                },
            }
        )
    if rng.random() < 0.15:
        out.append(
            {
                "apiVersion": "karpenter.sh/v1alpha1",
                "kind": "NodeOverlay",
                "metadata": {"name": "cheaper"},
                "spec": {
                    "requirements": [requirement(CATEGORY, "In", rng.choice(("c", "m", "r")))],
                    "priceAdjustment": rng.choice(("-20%", "+10%")),
                },
            }
        )
    if rng.random() < 0.1:
        static = node_pool("fixed", requirements=[requirement(CATEGORY, "In", "m")])
        static["spec"]["replicas"] = rng.choice((1, 2))
        out.append(static)
    if rng.random() < 0.1:
        ids = ["cr-a", "cr-b"]
        out.append(node_class("reserved", capacityReservationSelectorTerms=[{"id": i} for i in ids]))
        out.append(
            node_pool(
                "held",
                requirements=[requirement(CAPACITY_TYPE, "In", "reserved", "on-demand")],
                node_class_name="reserved",
                weight=rng.choice((None, 10)),
            )
        )
        out.append(reservations(("cr-a", "m5.large", rng.choice((1, 2))), ("cr-b", "c5.large", 1)))
    return out


# --- regression cases: clusters whose plan or disruption once followed the hash seed ----------------------------------

_ANY_ZONE = requirement(ZONE, "In", *ZONES)
# Pods whose NodeClaim holds a topology rule's pods (a zone anti-affinity matching nothing): never merged away.
_NO_MERGE: dict[str, Any] = {"pod_anti_affinity": [affinity_term(ZONE, {"app": "nobody"})]}


def multi_zone_pods_join_a_pinned_claim() -> list[Obj]:
    """One pod pinned to us-east-1c opens a NodeClaim there; two small pods allowing every zone fit on it. They
    were placed by one zone of their ``In`` (a frozenset's first value): under some hash seeds they skipped the
    NodeClaim and opened a second one (``Packer.place_on_claims``)."""
    return [
        node_class(),
        node_pool(),
        pod("big-0", cpu="1500m", memory="1Gi", node_selector={ZONE: ZONES[2]}),
        *(pod(f"small-{i}", cpu="100m", memory="128Mi", node_affinity=[_ANY_ZONE], **_NO_MERGE) for i in range(2)),
    ]


def consolidation_of_multi_zone_pods() -> list[Obj]:
    """The same pods bound to an oversized node: single-node consolidation replaces it with one small node. Under
    some hash seeds the simulation needed two nodes and the node was Unconsolidatable."""
    return [
        node_class(),
        node_pool(),
        *managed_node("big", instance_type="m5.2xlarge", zone=ZONES[2]),
        pod("big-0", node="big", cpu="1500m", memory="1Gi", node_selector={ZONE: ZONES[2]}),
        *(
            pod(f"small-{i}", node="big", cpu="100m", memory="128Mi", node_affinity=[_ANY_ZONE], **_NO_MERGE)
            for i in range(2)
        ),
    ]


REGRESSIONS: dict[str, Callable[[], list[Obj]]] = {
    f.__name__: f for f in (multi_zone_pods_join_a_pinned_claim, consolidation_of_multi_zone_pods)
}


def outputs(objs: list[Obj]) -> dict[str, str]:
    """What ``plan -o json`` and ``disrupt --dry-run -o json`` print for ``objs`` (at the harness's NOW)."""
    code, plan_out, plan_err = run("plan", objs, "--now", ts(NOW), "-o", "json")
    assert code == 0, f"plan exited {code}: {plan_err}"
    code, disrupt_out, disrupt_err = run("disrupt", objs, "--dry-run", "--now", ts(NOW), "-o", "json")
    assert code == 0, f"disrupt exited {code}: {disrupt_err}"
    return {"plan": plan_out, "disrupt": disrupt_out}


def main(argv: list[str]) -> int:
    """``FIRST COUNT``: one JSON line per cluster FIRST..FIRST+COUNT-1, then one per regression case:
    ``{"case": "cluster N" | case name, "plan": text, "disrupt": text}``."""
    first, count = int(argv[0]), int(argv[1])
    cases: dict[str, Callable[[], list[Obj]]] = {
        f"cluster {n}": partial(cluster, n) for n in range(first, first + count)
    }
    for name, build in {**cases, **REGRESSIONS}.items():
        sys.stdout.write(json.dumps({"case": name, **outputs(build())}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
