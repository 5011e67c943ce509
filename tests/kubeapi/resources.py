"""Resource types served by the test API server: the built-in kinds and CRD-derived ones."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.kubeapi.selectors import FieldGetter, path_getter

Obj = dict[str, Any]

ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


@dataclass
class ResourceType:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: list[str] = field(default_factory=list)
    status_subresource: bool = False
    extra_subresources: tuple[str, ...] = ()  # e.g. ("eviction", "binding") for pods
    builtin: bool = True  # built-ins accept strategic merge patch; custom resources do not
    return_deleted_object: bool = False  # DELETE answers with the object instead of a Status
    allow_unconditional_update: bool = True  # PUT without metadata.resourceVersion
    field_selectors: dict[str, FieldGetter] = field(default_factory=dict)
    storage: str = ""  # objects of types sharing a storage key are one set (core and events.k8s.io events)
    to_storage: Callable[[Obj], Obj] | None = None
    from_storage: Callable[[Obj], Obj] | None = None
    crd_name: str = ""
    categories: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.singular:
            self.singular = self.kind.lower()
        if not self.storage:
            self.storage = f"{self.group}/{self.plural}"
        selectors: dict[str, FieldGetter] = {
            "metadata.name": path_getter("metadata.name"),
        }
        if self.namespaced:
            selectors["metadata.namespace"] = path_getter("metadata.namespace")
        selectors.update(self.field_selectors)
        self.field_selectors = selectors

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_resource(self) -> str:
        """How error messages name the resource: ``pods``, ``deployments.apps``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


def _getters(*paths: str) -> dict[str, FieldGetter]:
    return {p: path_getter(p) for p in paths}


_EVENT_RENAMES = [
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
    ("reportingComponent", "reportingController"),
]


def _core_event_to_new(obj: Obj) -> Obj:
    out = dict(obj)
    for old, new in _EVENT_RENAMES:
        if old in out:
            out[new] = out.pop(old)
    out["apiVersion"] = "events.k8s.io/v1"
    return out


def _new_event_to_core(obj: Obj) -> Obj:
    out = dict(obj)
    for old, new in _EVENT_RENAMES:
        if new in out:
            out[old] = out.pop(new)
    out["apiVersion"] = "v1"
    return out


def _field_selectors_new_events() -> dict[str, FieldGetter]:
    # events.k8s.io serves the same storage; its field labels are the core v1 ones
    core = _getters(
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    )
    out: dict[str, FieldGetter] = {}
    for name, getter in core.items():
        out[name] = _on_core(getter)
        for old, new in _EVENT_RENAMES:
            if name == old or name.startswith(old + "."):
                out[new + name[len(old) :]] = _on_core(getter)
    return out


def _on_core(getter: FieldGetter) -> FieldGetter:
    return lambda obj: getter(_new_event_to_core(dict(obj)) if obj.get("apiVersion") == "events.k8s.io/v1" else obj)


def builtin_resources() -> list[ResourceType]:
    pod_fields = _getters(
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    )
    return [
        ResourceType(
            "",
            "v1",
            "namespaces",
            "Namespace",
            False,
            short_names=["ns"],
            status_subresource=True,
            extra_subresources=("finalize",),
            return_deleted_object=True,
            field_selectors=_getters("status.phase"),
        ),
        ResourceType(
            "",
            "v1",
            "pods",
            "Pod",
            True,
            short_names=["po"],
            status_subresource=True,
            extra_subresources=("eviction", "binding"),
            return_deleted_object=True,
            field_selectors=pod_fields,
            categories=["all"],
        ),
        ResourceType(
            "",
            "v1",
            "nodes",
            "Node",
            False,
            short_names=["no"],
            status_subresource=True,
            field_selectors=_getters("spec.unschedulable"),
        ),
        ResourceType(
            "",
            "v1",
            "events",
            "Event",
            True,
            short_names=["ev"],
            storage="events",
            field_selectors=_getters(
                "involvedObject.kind",
                "involvedObject.namespace",
                "involvedObject.name",
                "involvedObject.uid",
                "involvedObject.apiVersion",
                "involvedObject.resourceVersion",
                "involvedObject.fieldPath",
                "reason",
                "reportingComponent",
                "source",
                "type",
            ),
        ),
        ResourceType(
            "events.k8s.io",
            "v1",
            "events",
            "Event",
            True,
            short_names=["ev"],
            storage="events",
            to_storage=_new_event_to_core,
            from_storage=_core_event_to_new,
            field_selectors=_field_selectors_new_events(),
        ),
        ResourceType(
            "",
            "v1",
            "persistentvolumes",
            "PersistentVolume",
            False,
            short_names=["pv"],
            status_subresource=True,
            return_deleted_object=True,
        ),
        ResourceType(
            "",
            "v1",
            "persistentvolumeclaims",
            "PersistentVolumeClaim",
            True,
            short_names=["pvc"],
            status_subresource=True,
            return_deleted_object=True,
        ),
        ResourceType(
            "",
            "v1",
            "services",
            "Service",
            True,
            short_names=["svc"],
            status_subresource=True,
            return_deleted_object=True,
        ),
        ResourceType("", "v1", "configmaps", "ConfigMap", True, short_names=["cm"]),
        ResourceType("", "v1", "secrets", "Secret", True, field_selectors=_getters("type")),
        ResourceType(
            "", "v1", "serviceaccounts", "ServiceAccount", True, short_names=["sa"], return_deleted_object=True
        ),
        ResourceType("", "v1", "endpoints", "Endpoints", True, short_names=["ep"]),
        ResourceType("apps", "v1", "deployments", "Deployment", True, short_names=["deploy"], status_subresource=True),
        ResourceType("apps", "v1", "replicasets", "ReplicaSet", True, short_names=["rs"], status_subresource=True),
        ResourceType("apps", "v1", "statefulsets", "StatefulSet", True, short_names=["sts"], status_subresource=True),
        ResourceType("apps", "v1", "daemonsets", "DaemonSet", True, short_names=["ds"], status_subresource=True),
        ResourceType("apps", "v1", "controllerrevisions", "ControllerRevision", True),
        ResourceType(
            "policy",
            "v1",
            "poddisruptionbudgets",
            "PodDisruptionBudget",
            True,
            short_names=["pdb"],
            status_subresource=True,
        ),
        ResourceType(
            "storage.k8s.io",
            "v1",
            "storageclasses",
            "StorageClass",
            False,
            short_names=["sc"],
            return_deleted_object=True,
        ),
        ResourceType(
            "storage.k8s.io",
            "v1",
            "volumeattachments",
            "VolumeAttachment",
            False,
            status_subresource=True,
            return_deleted_object=True,
        ),
        ResourceType("storage.k8s.io", "v1", "csinodes", "CSINode", False, return_deleted_object=True),
        ResourceType("storage.k8s.io", "v1", "csidrivers", "CSIDriver", False, return_deleted_object=True),
        ResourceType("batch", "v1", "jobs", "Job", True, status_subresource=True),
        ResourceType("batch", "v1", "cronjobs", "CronJob", True, short_names=["cj"], status_subresource=True),
        ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True),
        ResourceType("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False, short_names=["pc"]),
        # Served so that `kubectl apply -k` of the rendered install (tests/functional/test_install_manifests.py)
        # can create them; stored only (the RBAC the server enforces comes from tests/kubeapi/rbac.py).
        ResourceType("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False),
        ResourceType("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False),
        ResourceType("rbac.authorization.k8s.io", "v1", "roles", "Role", True),
        ResourceType("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True),
        ResourceType("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", True, short_names=["netpol"]),
        ResourceType(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            False,
            short_names=["crd", "crds"],
            status_subresource=True,
        ),
    ]


def crd_resources(crd: Obj) -> list[ResourceType]:
    """One ResourceType per served version of an apiextensions.k8s.io/v1 CRD (all versions share storage)."""
    spec = crd["spec"]
    names = spec["names"]
    out: list[ResourceType] = []
    for version in spec.get("versions") or []:
        if not version.get("served", True):
            continue
        selectable = {
            sf["jsonPath"].lstrip("."): path_getter(sf["jsonPath"].lstrip("."))
            for sf in version.get("selectableFields") or []
        }
        out.append(
            ResourceType(
                spec["group"],
                version["name"],
                names["plural"],
                names["kind"],
                spec.get("scope", "Namespaced") == "Namespaced",
                singular=names.get("singular") or names["kind"].lower(),
                short_names=list(names.get("shortNames") or []),
                status_subresource="status" in (version.get("subresources") or {}),
                builtin=False,
                allow_unconditional_update=False,
                field_selectors=selectable,
                crd_name=crd["metadata"]["name"],
                categories=list(names.get("categories") or []),
            )
        )
    return out
