"""Kubernetes objects -> solver constraints: selectors, spread, pod affinity, preferences, volumes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeflow.api.core import (
    Deployment,
    LabelSelector,
    Namespace,
    PersistentVolume,
    PersistentVolumeClaim,
    Pod,
    StorageClass,
    expand_workload,
)
from nodeflow.api.manifests import load_manifests
from nodeflow.constraints import (
    MATCH_NOTHING,
    affinity_terms,
    default_storage_class,
    namespace_label_map,
    preferred_node_terms,
    running_pod,
    selector,
    topology_spreads,
    volume_requirements,
)
from nodeflow.scheduling.requirements import Requirement, Requirements
from nodeflow.scheduling.types import AffinityTerm, Selector, TopologySpread

ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"


def pod(spec: dict[str, Any] | None = None, *, name: str = "web-1", namespace: str = "shop", **labels: str) -> Pod:
    return Pod.model_validate(
        {
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": spec or {"containers": [{"name": "c"}]},
        }
    )


def from_yaml(text: str) -> Any:
    return yaml.safe_load(text)


def reqs(*items: tuple[str, str, list[str]]) -> Requirements:
    return Requirements(Requirement.create(k, op, v) for k, op, v in items)


# --------------------------------------------------------------------------------------------
# selector


def test_none_selector_matches_nothing() -> None:
    converted = selector(None)
    assert converted is MATCH_NOTHING
    assert not converted.matches({})
    assert not converted.matches({"app": "web"})
    assert not converted.matches({"<no labelSelector>": ""})


def test_empty_selector_matches_everything() -> None:
    converted = selector(LabelSelector.model_validate({}))
    assert converted == Selector()
    assert converted.matches({})
    assert converted.matches({"a": "b"})


def test_selector_labels_and_expressions() -> None:
    ls = LabelSelector.model_validate(
        from_yaml(
            """
            matchLabels: {tier: web, app: shop}
            matchExpressions:
              - {key: env, operator: In, values: [prod, staging]}
              - {key: canary, operator: DoesNotExist}
            """
        )
    )
    converted = selector(ls)
    assert converted.match_labels == (("app", "shop"), ("tier", "web"))
    assert converted.expressions == (
        ("env", "In", frozenset({"prod", "staging"})),
        ("canary", "DoesNotExist", frozenset()),
    )
    assert converted.matches({"app": "shop", "tier": "web", "env": "prod"})
    assert not converted.matches({"app": "shop", "tier": "web", "env": "dev"})
    assert not converted.matches({"app": "shop", "tier": "web", "env": "prod", "canary": "1"})


# --------------------------------------------------------------------------------------------
# topology spread


SPREAD_SPEC = from_yaml(
    """
    containers: [{name: c}]
    topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: topology.ebs.csi.aws.com/zone
        whenUnsatisfiable: DoNotSchedule
        labelSelector: {matchLabels: {app: web}}
        matchLabelKeys: [pod-template-hash, absent-key]
        minDomains: 3
      - maxSkew: 2
        topologyKey: kubernetes.io/hostname
        whenUnsatisfiable: ScheduleAnyway
        nodeAffinityPolicy: Ignore
        nodeTaintsPolicy: Honor
      - maxSkew: 1
        topologyKey: failure-domain.beta.kubernetes.io/zone
        whenUnsatisfiable: DoNotSchedule
        labelSelector: {}
    """
)


def test_topology_spreads_defaults_policies_and_match_label_keys() -> None:
    p = pod(SPREAD_SPEC, app="web", **{"pod-template-hash": "abc"})
    first, second, third = topology_spreads(p)
    assert first == TopologySpread(
        key=ZONE,  # EBS CSI zone normalised
        max_skew=1,
        selector=Selector(match_labels=(("app", "web"), ("pod-template-hash", "abc"))),
        schedule_anyway=False,
        min_domains=3,
        honor_node_affinity=True,
        honor_node_taints=False,
    )
    # absent-key is not a label of the pod: ignored, as Kubernetes does.
    assert first.selector.matches({"app": "web", "pod-template-hash": "abc"})
    assert not first.selector.matches({"app": "web", "pod-template-hash": "other"})
    assert second.key == HOSTNAME
    assert second.schedule_anyway
    assert second.min_domains is None
    assert not second.honor_node_affinity
    assert second.honor_node_taints
    assert second.selector is MATCH_NOTHING  # no labelSelector: counts no pod
    assert third.key == ZONE  # beta zone normalised
    assert third.selector == Selector()


def test_topology_spreads_none_and_per_pod_labels() -> None:
    assert topology_spreads(pod()) == ()
    a = pod(SPREAD_SPEC, name="a", app="web", **{"pod-template-hash": "1"})
    b = a.model_copy(
        update={"metadata": a.metadata.model_copy(update={"labels": {"app": "web", "pod-template-hash": "2"}})}
    )
    assert a.spec is b.spec  # shared spec, different labels: results must differ
    assert topology_spreads(a)[0].selector.match_labels == (("app", "web"), ("pod-template-hash", "1"))
    assert topology_spreads(b)[0].selector.match_labels == (("app", "web"), ("pod-template-hash", "2"))
    assert topology_spreads(a) is topology_spreads(a)  # cached


def test_replicas_share_converted_constraints() -> None:
    deployment = Deployment.model_validate(
        {
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": SPREAD_SPEC},
            },
        }
    )
    pods = expand_workload(deployment)
    results = {id(topology_spreads(p)) for p in pods}
    assert len(results) == 1
    assert topology_spreads(pods[0])[0].selector.match_labels == (
        ("app", "web"),
        ("pod-template-hash", pods[0].labels["pod-template-hash"]),
    )


def test_cache_follows_model_copy_and_is_invisible() -> None:
    p = pod(SPREAD_SPEC, app="web")
    assert len(topology_spreads(p)) == 3
    fewer = p.spec.model_copy(update={"topology_spread_constraints": p.spec.topology_spread_constraints[:1]})
    assert len(topology_spreads(p.model_copy(update={"spec": fewer}))) == 1
    assert p.spec == pod(SPREAD_SPEC, app="web").spec
    assert "__nodeflow_constraints__" not in str(p.model_dump())


# --------------------------------------------------------------------------------------------
# pod affinity


AFFINITY_SPEC = from_yaml(
    """
    containers: [{name: c}]
    affinity:
      podAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector: {matchLabels: {app: cache}}
            topologyKey: failure-domain.beta.kubernetes.io/zone
        preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 40
            podAffinityTerm:
              labelSelector: {matchLabels: {app: db}}
              topologyKey: kubernetes.io/hostname
              namespaces: [data]
              namespaceSelector: {matchLabels: {team: storage}}
      podAntiAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector: {matchLabels: {app: web}}
            topologyKey: kubernetes.io/hostname
            matchLabelKeys: [pod-template-hash]
            mismatchLabelKeys: [tenant, absent]
          - topologyKey: kubernetes.io/hostname
            namespaceSelector: {}
        preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 7
            podAffinityTerm:
              labelSelector: {matchLabels: {app: web}}
              topologyKey: topology.ebs.csi.aws.com/zone
              namespaces: [a, b]
    """
)

NAMESPACES = {
    "shop": {"team": "web"},
    "data": {"team": "storage"},
    "archive": {"team": "storage"},
    "other": {},
}


def test_affinity_terms_in_spec_order() -> None:
    p = pod(AFFINITY_SPEC, app="web", tenant="acme", **{"pod-template-hash": "h1"})
    terms = affinity_terms(p, NAMESPACES)
    assert [(t.anti, t.weight) for t in terms] == [(False, 0), (False, 40), (True, 0), (True, 0), (True, 7)]
    cache, db, web, nothing, spread = terms
    assert cache == AffinityTerm(
        key=ZONE, selector=Selector(match_labels=(("app", "cache"),)), namespaces=frozenset({"shop"})
    )
    # namespaces list plus the namespaces the selector matches
    assert db.namespaces == frozenset({"data", "archive"})
    assert db.key == HOSTNAME
    # matchLabelKeys -> key=value; mismatchLabelKeys -> key NotIn [value]; absent keys ignored
    assert web.selector == Selector(
        match_labels=(("app", "web"), ("pod-template-hash", "h1")),
        expressions=(("tenant", "NotIn", frozenset({"acme"})),),
    )
    assert web.selects("shop", {"app": "web", "pod-template-hash": "h1", "tenant": "other"})
    assert not web.selects("shop", {"app": "web", "pod-template-hash": "h1", "tenant": "acme"})
    assert not web.selects("shop", {"app": "web", "pod-template-hash": "h2"})
    assert not web.selects("data", {"app": "web", "pod-template-hash": "h1"})
    # namespaceSelector {} means every namespace; no labelSelector matches nothing
    assert nothing.namespaces is None
    assert nothing.selector is MATCH_NOTHING
    assert not nothing.selects("shop", {"app": "web"})
    assert spread.namespaces == frozenset({"a", "b"})
    assert spread.key == ZONE


def test_namespace_selector_implicit_name_label_and_own_namespace() -> None:
    spec = from_yaml(
        """
        containers: [{name: c}]
        affinity:
          podAffinity:
            requiredDuringSchedulingIgnoredDuringExecution:
              - labelSelector: {matchLabels: {app: db}}
                topologyKey: kubernetes.io/hostname
                namespaceSelector:
                  matchExpressions:
                    - {key: kubernetes.io/metadata.name, operator: In, values: [data, shop, ghost]}
        """
    )
    (term,) = affinity_terms(pod(spec, namespace="shop"), {"data": {}, "archive": {}})
    # "shop" is the pod's own namespace: it exists even though the mapping omits it;
    # "ghost" is not a known namespace.
    assert term.namespaces == frozenset({"data", "shop"})
    (term,) = affinity_terms(pod(spec, namespace="web"), {"data": {"kubernetes.io/metadata.name": "data"}})
    assert term.namespaces == frozenset({"data"})


def test_namespace_selector_matching_nothing_known() -> None:
    spec = from_yaml(
        """
        containers: [{name: c}]
        affinity:
          podAntiAffinity:
            requiredDuringSchedulingIgnoredDuringExecution:
              - labelSelector: {}
                topologyKey: kubernetes.io/hostname
                namespaceSelector: {matchLabels: {team: nobody}}
        """
    )
    (term,) = affinity_terms(pod(spec), NAMESPACES)
    assert term.namespaces == frozenset()
    assert term.selector == Selector()
    assert not term.selects("shop", {})


def test_affinity_cache_keyed_on_namespace_and_mapping() -> None:
    a = pod(AFFINITY_SPEC, namespace="shop")
    b = a.model_copy(update={"metadata": a.metadata.model_copy(update={"namespace": "other"})})
    assert affinity_terms(a, NAMESPACES)[0].namespaces == frozenset({"shop"})
    assert affinity_terms(b, NAMESPACES)[0].namespaces == frozenset({"other"})
    more = {**NAMESPACES, "backup": {"team": "storage"}}
    assert affinity_terms(a, more)[1].namespaces == frozenset({"data", "archive", "backup"})
    assert affinity_terms(pod(), NAMESPACES) == ()


def test_running_pod_keeps_required_anti_affinity_only() -> None:
    p = pod(AFFINITY_SPEC, app="web", **{"pod-template-hash": "h1"})
    running = running_pod(p, NAMESPACES)
    assert running.namespace == "shop"
    assert running.labels == {"app": "web", "pod-template-hash": "h1"}
    assert [(t.anti, t.weight) for t in running.anti_affinity] == [(True, 0), (True, 0)]
    assert running_pod(pod(), NAMESPACES).anti_affinity == ()


def test_namespace_label_map() -> None:
    ns = Namespace.model_validate({"metadata": {"name": "data", "labels": {"team": "storage"}}})
    assert ns.labels == {"team": "storage", "kubernetes.io/metadata.name": "data"}
    assert namespace_label_map([ns], ["default", "data"]) == {
        "default": {"kubernetes.io/metadata.name": "default"},
        "data": {"team": "storage", "kubernetes.io/metadata.name": "data"},
    }


def test_manifests_load_namespaces(tmp_path: Path) -> None:
    (tmp_path / "ns.yaml").write_text(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: data\n  labels: {team: storage}\n"
        "---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n"
    )
    result = load_manifests([tmp_path])
    assert [n.name for n in result.namespaces] == ["data", "shop"]
    assert result.skipped == ()
    assert namespace_label_map(result.namespaces)["data"]["team"] == "storage"


# --------------------------------------------------------------------------------------------
# preferred node affinity


def test_preferred_node_terms() -> None:
    spec = from_yaml(
        """
        containers: [{name: c}]
        affinity:
          nodeAffinity:
            preferredDuringSchedulingIgnoredDuringExecution:
              - weight: 80
                preference:
                  matchExpressions:
                    - {key: failure-domain.beta.kubernetes.io/zone, operator: In, values: [us-east-1a]}
                    - {key: karpenter.sh/capacity-type, operator: NotIn, values: [spot]}
              - weight: 5
                preference:
                  matchExpressions:
                    - {key: karpenter.k8s.aws/instance-cpu, operator: Gt, values: ["8"]}
        """
    )
    p = pod(spec)
    assert preferred_node_terms(p) == (
        (80, reqs((ZONE, "In", ["us-east-1a"]), ("karpenter.sh/capacity-type", "NotIn", ["spot"]))),
        (5, reqs(("karpenter.k8s.aws/instance-cpu", "Gt", ["8"]))),
    )
    assert preferred_node_terms(p) is preferred_node_terms(p)
    assert preferred_node_terms(pod()) == ()


# --------------------------------------------------------------------------------------------
# volumes


def pvc(name: str, namespace: str = "shop", **spec: Any) -> PersistentVolumeClaim:
    """A claim; one naming a volume is bound (the bind-completed annotation the PV controller writes)."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if "volumeName" in spec:
        meta["annotations"] = {"pv.kubernetes.io/bind-completed": "yes"}
    return PersistentVolumeClaim.model_validate({"metadata": meta, "spec": spec})


def pv(name: str, *terms: list[dict[str, Any]]) -> PersistentVolume:
    spec: dict[str, Any] = {}
    if terms:
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [{"matchExpressions": t} for t in terms]}}
    return PersistentVolume.model_validate({"metadata": {"name": name}, "spec": spec})


def storage_class(
    name: str, mode: str = "WaitForFirstConsumer", zones: tuple[list[str], ...] = (), default: bool = False
) -> StorageClass:
    return StorageClass.model_validate(
        {
            "metadata": {
                "name": name,
                "annotations": {"storageclass.kubernetes.io/is-default-class": "true"} if default else {},
            },
            "provisioner": "ebs.csi.aws.com",
            "volumeBindingMode": mode,
            "allowedTopologies": [
                {"matchLabelExpressions": [{"key": "topology.ebs.csi.aws.com/zone", "values": z}]} for z in zones
            ],
        }
    )


def with_volumes(*volumes: dict[str, Any], name: str = "web-1") -> Pod:
    return pod({"containers": [{"name": "c"}], "volumes": list(volumes)}, name=name)


def claim(volume: str, claim_name: str) -> dict[str, Any]:
    return {"name": volume, "persistentVolumeClaim": {"claimName": claim_name}}


def zone(*zones: str) -> Requirements:
    return reqs((ZONE, "In", list(zones)))


EBS_ZONE_A = {"key": "topology.ebs.csi.aws.com/zone", "operator": "In", "values": ["us-east-1a"]}


def test_no_volumes_no_requirements() -> None:
    assert volume_requirements(pod(), {}, {}, {}) == (Requirements(),)
    other = with_volumes({"name": "cfg", "configMap": {"name": "x"}})
    assert volume_requirements(other, {}, {}, {}) == (Requirements(),)


def test_missing_claim_and_volume_are_errors() -> None:
    p = with_volumes(claim("data", "data-0"))
    assert volume_requirements(p, {}, {}, {}) == 'persistentvolumeclaim "shop/data-0" not found'
    claims = {"shop/data-0": pvc("data-0", volumeName="pv-1")}
    error = volume_requirements(p, claims, {}, {})
    assert isinstance(error, str)
    assert error.startswith('persistentvolume "pv-1" not found')
    # a claim of that name in another namespace does not count
    assert isinstance(volume_requirements(p, {"other/data-0": pvc("data-0", "other")}, {}, {}), str)


def test_bound_claim_uses_pv_node_affinity_with_ebs_zone_normalised() -> None:
    p = with_volumes(claim("data", "data-0"))
    claims = {"shop/data-0": pvc("data-0", volumeName="pv-1")}
    volume = pv(
        "pv-1",
        [EBS_ZONE_A, {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}],
        [{"key": "topology.ebs.csi.aws.com/zone", "operator": "In", "values": ["us-east-1b"]}],
    )
    result = volume_requirements(p, claims, {"pv-1": volume}, {})
    assert result == (
        reqs((ZONE, "In", ["us-east-1a"]), ("kubernetes.io/arch", "In", ["arm64"])),
        zone("us-east-1b"),
    )
    assert isinstance(result, tuple)
    assert "topology.ebs.csi.aws.com/zone" not in result[0]
    # a PV without node affinity: no restriction
    assert volume_requirements(p, claims, {"pv-1": pv("pv-1")}, {}) == (Requirements(),)


def test_unbound_claim_wait_for_first_consumer_uses_allowed_topologies() -> None:
    p = with_volumes(claim("data", "data-0"))
    claims = {"shop/data-0": pvc("data-0", storageClassName="gp3")}
    classes = {"gp3": storage_class("gp3", zones=(["us-east-1a", "us-east-1b"], ["us-east-1c"]))}
    assert volume_requirements(p, claims, {}, classes) == (zone("us-east-1a", "us-east-1b"), zone("us-east-1c"))


def test_unbound_claim_without_constraint() -> None:
    p = with_volumes(claim("data", "data-0"))
    claims = {"shop/data-0": pvc("data-0", storageClassName="gp3")}
    no_topologies = {"gp3": storage_class("gp3")}
    assert volume_requirements(p, claims, {}, no_topologies) == (Requirements(),)


def test_unbound_claim_that_cannot_be_provisioned_for_yet_is_an_error() -> None:
    """As Karpenter: an Immediate class binds the volume first; a missing class, or none, binds nothing."""
    p = with_volumes(claim("data", "data-0"))
    claims = {"shop/data-0": pvc("data-0", storageClassName="gp3")}
    immediate = {"gp3": storage_class("gp3", mode="Immediate", zones=(["us-east-1a"],))}
    assert "binds Immediate" in str(volume_requirements(p, claims, {}, immediate))
    assert 'storageclass "gp3"' in str(volume_requirements(p, claims, {}, {}))
    assert "names no storage class" in str(volume_requirements(p, {"shop/data-0": pvc("data-0")}, {}, {}))


def test_a_claim_or_volume_that_is_going_or_not_bound_yet_is_an_error() -> None:
    p = with_volumes(claim("data", "data-0"))
    classes = {"gp3": storage_class("gp3")}
    gone = PersistentVolumeClaim.model_validate(
        {"metadata": {"name": "data-0", "namespace": "shop", "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    )
    assert "being deleted" in str(volume_requirements(p, {"shop/data-0": gone}, {}, classes))
    lost = PersistentVolumeClaim.model_validate(
        {"metadata": {"name": "data-0", "namespace": "shop"}, "spec": {"volumeName": "v"}, "status": {"phase": "Lost"}}
    )
    assert "Lost" in str(volume_requirements(p, {"shop/data-0": lost}, {"v": pv("v")}, classes))
    unannotated = PersistentVolumeClaim.model_validate(
        {"metadata": {"name": "data-0", "namespace": "shop"}, "spec": {"volumeName": "v"}}
    )
    assert "bind-completed" in str(volume_requirements(p, {"shop/data-0": unannotated}, {"v": pv("v")}, classes))
    doomed = PersistentVolume.model_validate({"metadata": {"name": "v", "deletionTimestamp": "2026-01-01T00:00:00Z"}})
    bound = {"shop/data-0": pvc("data-0", volumeName="v")}
    assert "being deleted" in str(volume_requirements(p, bound, {"v": doomed}, classes))


def test_the_hostname_term_of_a_node_local_volume_is_left_out() -> None:
    p = with_volumes(claim("data", "data-0"))
    local = PersistentVolume.model_validate(
        {
            "metadata": {"name": "v"},
            "spec": {
                "local": {"path": "/mnt"},
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["h"]}]}
                        ]
                    }
                },
            },
        }
    )
    assert volume_requirements(p, {"shop/data-0": pvc("data-0", volumeName="v")}, {"v": local}, {}) == (Requirements(),)


def test_default_storage_class() -> None:
    p = with_volumes(claim("data", "data-0"))
    classes = {
        "slow": storage_class("slow", zones=(["us-east-1c"],)),
        "gp3": storage_class("gp3", zones=(["us-east-1a"],), default=True),
    }
    assert default_storage_class(classes) is classes["gp3"]
    unset = {"shop/data-0": pvc("data-0")}
    assert volume_requirements(p, unset, {}, classes) == (zone("us-east-1a"),)
    # storageClassName "" asks for no class: the default does not apply, and nothing can bind it
    empty = {"shop/data-0": pvc("data-0", storageClassName="")}
    assert "names no storage class" in str(volume_requirements(p, empty, {}, classes))
    assert default_storage_class({"slow": classes["slow"]}) is None


def test_newest_default_storage_class_wins() -> None:
    def dated(name: str, created: str) -> StorageClass:
        return StorageClass.model_validate(
            {
                "metadata": {
                    "name": name,
                    "creationTimestamp": created,
                    "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
                },
                "provisioner": "x",
            }
        )

    old, new = dated("old", "2023-01-01T00:00:00Z"), dated("new", "2024-01-01T00:00:00Z")
    assert default_storage_class({"new": new, "old": old}) is new
    assert default_storage_class({"old": old, "new": new}) is new


def test_ephemeral_volume_uses_template_class_or_existing_claim() -> None:
    volume = {
        "name": "scratch",
        "ephemeral": {"volumeClaimTemplate": {"spec": {"storageClassName": "gp3", "accessModes": ["ReadWriteOnce"]}}},
    }
    p = with_volumes(volume, name="job-x")
    classes = {"gp3": storage_class("gp3", zones=(["us-east-1b"],))}
    assert volume_requirements(p, {}, {}, classes) == (zone("us-east-1b"),)
    # once the controller created "<pod>-<volume>" and it is bound, the PV decides
    claims = {"shop/job-x-scratch": pvc("job-x-scratch", volumeName="pv-9")}
    assert volume_requirements(p, claims, {"pv-9": pv("pv-9", [EBS_ZONE_A])}, classes) == (zone("us-east-1a"),)
    # a template without a class takes the default class
    unset = with_volumes({"name": "s", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}})
    default = {"d": storage_class("d", zones=(["us-east-1c"],), default=True)}
    assert volume_requirements(unset, {}, {}, default) == (zone("us-east-1c"),)


def test_several_volumes_are_anded() -> None:
    p = with_volumes(claim("a", "a"), claim("b", "b"))
    claims = {"shop/a": pvc("a", storageClassName="gp3"), "shop/b": pvc("b", volumeName="pv-b")}
    classes = {"gp3": storage_class("gp3", zones=(["us-east-1a", "us-east-1b"], ["us-east-1c"]))}
    pv_b = pv(
        "pv-b",
        [{"key": "topology.ebs.csi.aws.com/zone", "operator": "In", "values": ["us-east-1b", "us-east-1c"]}],
        [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
    )
    result = volume_requirements(p, claims, {"pv-b": pv_b}, classes)
    assert result == (
        zone("us-east-1b"),
        reqs((ZONE, "In", ["us-east-1a", "us-east-1b"]), ("kubernetes.io/arch", "In", ["amd64"])),
        zone("us-east-1c"),
        reqs((ZONE, "In", ["us-east-1c"]), ("kubernetes.io/arch", "In", ["amd64"])),
    )


def test_conflicting_volumes_are_an_error() -> None:
    p = with_volumes(claim("a", "a"), claim("b", "b"))
    claims = {"shop/a": pvc("a", volumeName="pv-a"), "shop/b": pvc("b", volumeName="pv-b")}
    pvs = {
        "pv-a": pv("pv-a", [EBS_ZONE_A]),
        "pv-b": pv("pv-b", [{"key": ZONE, "operator": "In", "values": ["us-east-1b"]}]),
    }
    result = volume_requirements(p, claims, pvs, {})
    assert isinstance(result, str)
    assert "exclude each other" in result


@pytest.mark.parametrize("mode", ["Immediate", "WaitForFirstConsumer"])
def test_volume_requirements_with_same_claim_twice(mode: str) -> None:
    p = with_volumes(claim("a", "data"), claim("b", "data"))
    claims = {"shop/data": pvc("data", storageClassName="gp3")}
    classes = {"gp3": storage_class("gp3", mode=mode, zones=(["us-east-1a"],))}
    if mode == "WaitForFirstConsumer":
        assert volume_requirements(p, claims, {}, classes) == (zone("us-east-1a"),)
    else:
        assert "binds Immediate" in str(volume_requirements(p, claims, {}, classes))
