"""The snapshot's slim pod parse gives exactly what validating each pod with ``Pod.model_validate`` gives.

``parse_pods`` validates each distinct spec / status / metadata part once and assembles the pods from shared
parts; these tests compare it, pod by pod, with the full validation on varied pods (valid and invalid), including
pods that differ only in value types (1 vs 1.0 vs "1") or in fields the models ignore.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from nodeflow.api.core import Pod
from nodeflow.api.errors import format_validation_error
from nodeflow.kube import client as kc
from nodeflow.kube.snapshot import KINDS, InvalidObject, _parse_page, _PodParser, parse_pods

STAMP = "2026-01-02T03:04:05Z"


def _meta(name: str, i: int, **more: Any) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": "team-a",
        "uid": f"uid-{name}",
        "resourceVersion": str(100 + i),
        "creationTimestamp": STAMP if i % 2 else "2026-01-02T03:04:06Z",
        "generateName": "web-6c9f8d7b5-",
        "labels": {"app": "web", "pod-template-hash": "6c9f8d7b5"},
        "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-6c9f8d7b5", "uid": "rs-1", "controller": True}
        ],
        "managedFields": [{"manager": "kube-controller-manager", "operation": "Update", "time": STAMP}],
        **more,
    }


def _container(name: str = "app", cpu: Any = "500m", **more: Any) -> dict[str, Any]:
    return {
        "name": name,
        "image": "public.ecr.aws/nginx/nginx:1.27",
        "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}, "limits": {"memory": "1Gi"}},
        "ports": [{"containerPort": 8080, "protocol": "TCP"}],
        "volumeMounts": [{"name": f"kube-api-access-{more.pop('token', 'abcde')}", "mountPath": "/var/run"}],
        **more,
    }


PENDING = {
    "phase": "Pending",
    "conditions": [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/3 nodes are available",
            "lastProbeTime": None,
            "lastTransitionTime": STAMP,
        }
    ],
    "qosClass": "Burstable",
}


def _pod(i: int, spec: dict[str, Any], *, status: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    token = f"t{i:04d}"
    spec = copy.deepcopy(spec)
    for c in (*spec.get("containers", ()), *spec.get("initContainers", ())):
        for mount in c.get("volumeMounts", ()):
            mount["name"] = f"kube-api-access-{token}"
    spec.setdefault("volumes", []).append({"name": f"kube-api-access-{token}", "projected": {"sources": []}})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _meta(f"web-{i}", i, **meta),
        "spec": spec,
        "status": copy.deepcopy(PENDING if status is None else status),
    }


AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}
            ]
        },
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 10, "preference": {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}}
        ],
    },
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
        ]
    },
    "podAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 50,
                "podAffinityTerm": {
                    "labelSelector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["db"]}]},
                    "topologyKey": "topology.kubernetes.io/zone",
                },
            }
        ]
    },
}

SPECS: list[dict[str, Any]] = [
    {"containers": [_container()]},
    {
        "containers": [_container(), _container("sidecar-like", "100m")],
        "initContainers": [
            _container("init", "2"),
            {**_container("proxy", "50m"), "restartPolicy": "Always"},
        ],
        "overhead": {"cpu": "250m", "memory": "120Mi"},
        "affinity": AFFINITY,
        "tolerations": [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
        ],
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "web"}},
                "matchLabelKeys": ["pod-template-hash"],
                "minDomains": 2,
            }
        ],
        "nodeSelector": {"karpenter.sh/capacity-type": "on-demand"},
        "priorityClassName": "high",
        "priority": 1000,
        "preemptionPolicy": "Never",
        "terminationGracePeriodSeconds": 30,
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu-claim"}],
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "web",
        "hostname": "web-0",
    },
    {
        "containers": [_container(ports=[{"containerPort": 80, "hostPort": 8080, "hostIP": "10.0.0.1"}])],
        "hostNetwork": True,
        "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "data-web"}},
            {
                "name": "scratch",
                "ephemeral": {
                    "volumeClaimTemplate": {
                        "metadata": {"labels": {"x": "y"}},
                        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
                    }
                },
            },
            {"name": "config", "configMap": {"name": "web"}},
        ],
        "schedulerName": "my-scheduler",
    },
    # Same content, other value types: each must validate on its own (a cache keyed by value equality, where
    # 1 == 1.0 == True, would hand one pod another's quantities).
    {"containers": [_container(cpu=1)]},
    {"containers": [_container(cpu=1.0)]},
    {"containers": [_container(cpu="1")]},
    # Same keys in another order, and snake_case spellings the models accept.
    {"nodeSelector": {"a": "b"}, "containers": [_container()]},
    {"containers": [_container()], "node_selector": {"a": "b"}},
    {"containers": [_container()], "init_containers": [_container("i")], "node_name": "n-9"},
]

STATUSES: list[dict[str, Any] | None] = [
    None,
    {"phase": "Running", "startTime": STAMP, "conditions": [{"type": "Ready", "status": "True"}], "podIP": "1"},
    {"phase": "Pending", "nominatedNodeName": "node-1", "conditions": []},
    {"phase": "Succeeded"},
    {},
]


def _valid_pods() -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = []
    i = 0
    for s, spec in enumerate(SPECS):
        for status in STATUSES:
            for copy_ in range(3):  # replicas: the shared parts are reused
                i += 1
                raw = _pod(i, spec, status=status)
                if copy_ == 1:
                    raw["spec"]["nodeName"] = f"node-{s}"
                pods.append(raw)
    # Metadata variations.
    pods.append(_pod(900, SPECS[0], deletionTimestamp=STAMP, deletionGracePeriodSeconds=30, finalizers=["x/y"]))
    pods.append(_pod(901, SPECS[0], annotations={"kubernetes.io/config.mirror": "abc"}))
    pods.append(
        _pod(902, SPECS[0], ownerReferences=[{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "d"}])
    )
    pods.append(_pod(903, SPECS[0], resourceVersion=None, uid=None, creationTimestamp=None))
    pods.append(_pod(904, SPECS[0], creationTimestamp="2026-01-02T03:04:05.123456+02:00"))
    pods.append(_pod(905, SPECS[0], generation=3, selfLink="/api/v1/x"))
    bare = _pod(906, SPECS[0])
    del bare["apiVersion"], bare["kind"], bare["status"]
    pods.append(bare)
    pods.append({"metadata": {"name": "only-meta"}})
    pods.append({})
    snake = _pod(907, SPECS[0])
    snake["metadata"]["resource_version"] = snake["metadata"].pop("resourceVersion")
    pods.append(snake)
    snake2 = _pod(908, SPECS[0])
    snake2["api_version"] = snake2.pop("apiVersion")
    pods.append(snake2)
    return pods


def _invalid_pods() -> list[Any]:
    bad: list[Any] = []

    def add(i: int, change: Any, spec: dict[str, Any] = SPECS[1]) -> None:
        raw = _pod(i, spec)
        change(raw)
        bad.append(raw)

    add(1000, lambda p: p["spec"]["containers"][0]["resources"]["requests"].update(cpu="lots"))
    add(1001, lambda p: p["spec"]["containers"].append(_container()))  # duplicate name
    add(1002, lambda p: p["spec"]["tolerations"].append({"operator": "Bogus"}))
    add(1003, lambda p: p.update(metadata=None))
    add(1004, lambda p: p.update(kind="Node"))
    add(1005, lambda p: p["metadata"].update(creationTimestamp="yesterday"))
    add(1006, lambda p: p["metadata"].update(name=7))
    add(1007, lambda p: p["spec"].update(volumes={"name": "x"}))
    add(1008, lambda p: p["spec"]["volumes"].append({"name": ""}))
    add(1009, lambda p: p["spec"]["containers"][0].update(restartPolicy="Always"))
    add(1010, lambda p: p["spec"].update(nodeName=5))
    add(1011, lambda p: p["status"].update(phase="Sleeping"))
    add(1012, lambda p: p["status"]["conditions"].append({"type": "X", "status": "Maybe"}))
    add(1013, lambda p: p["metadata"]["ownerReferences"].append({"kind": "ReplicaSet"}))
    add(1014, lambda p: p["metadata"]["labels"].update(app=3))
    add(1015, lambda p: p.update(spec="nope"))
    add(1016, lambda p: p["spec"]["topologySpreadConstraints"][0].update(maxSkew=0))
    add(1017, lambda p: p["spec"].update(overhead={"cpu": "-1"}))
    add(1018, lambda p: p.update(apiVersion="v2"))
    add(1019, lambda p: p["spec"].update(hostNetwork="sometimes"))
    add(1020, lambda p: p["spec"]["containers"][0]["resources"]["requests"].update(cpu=True), SPECS[3])
    bad.append("not a pod")
    bad.append(None)
    return bad


def _full(raw: Any) -> Pod | InvalidObject:
    try:
        return Pod.model_validate(raw)
    except ValidationError as exc:
        meta = raw.get("metadata") if isinstance(raw, dict) else None
        meta = meta if isinstance(meta, dict) else {}
        name, namespace = str(meta.get("name") or ""), meta.get("namespace")
        return InvalidObject("Pod", name, namespace, tuple(format_validation_error(exc)), raw)


def _assert_same_model(got: Any, want: Any, path: str = "pod") -> None:
    """Equal values of the same types, and the same fields set and extras, at every level."""
    assert type(got) is type(want), path
    if isinstance(want, BaseModel):
        assert got == want, path
        assert got.__pydantic_fields_set__ == want.__pydantic_fields_set__, path
        assert (got.__pydantic_extra__ or {}) == (want.__pydantic_extra__ or {}), path
        for name in type(want).model_fields:
            _assert_same_model(getattr(got, name), getattr(want, name), f"{path}.{name}")
    elif isinstance(want, tuple | list):
        assert len(got) == len(want), path
        for index, (g, w) in enumerate(zip(got, want, strict=True)):
            _assert_same_model(g, w, f"{path}[{index}]")
    elif isinstance(want, dict):
        assert list(got) == list(want), path
        for key in want:
            _assert_same_model(got[key], want[key], f"{path}.{key}")
    else:
        assert got == want, path


def test_slim_parse_equals_full_validation_on_varied_pods() -> None:
    raws = _valid_pods() + _invalid_pods()
    raws = raws + json.loads(json.dumps(raws[::-1]))  # again, in another order, after the caches are warm
    expected = [_full(r) for r in raws]
    pods, invalid = parse_pods(raws)
    assert len(pods) == sum(isinstance(e, Pod) for e in expected)
    assert invalid == [e for e in expected if isinstance(e, InvalidObject)]
    for got, want in zip(pods, [e for e in expected if isinstance(e, Pod)], strict=True):
        _assert_same_model(got, want)
        assert repr(got) == repr(want)
        for exclude_unset in (False, True):
            assert got.model_dump(by_alias=True, exclude_unset=exclude_unset) == want.model_dump(
                by_alias=True, exclude_unset=exclude_unset
            )
        assert got.effective_requests() == want.effective_requests()
        assert got.host_ports() == want.host_ports()
        assert got.claim_names() == want.claim_names()
    assert (len(invalid), len(pods)) == (2 * 23, 2 * (len(SPECS) * len(STATUSES) * 3 + 11))


def test_replicas_share_their_parsed_parts_and_unusual_pods_take_the_full_path() -> None:
    raws = [_pod(i, SPECS[1]) for i in range(50)]
    parser = _PodParser()
    pods = [parser.pod(r) for r in raws]
    assert parser.slim == 50
    # Each pod has its own token volume (a real API server's kube-api-access-xxxxx), yet the containers, the
    # affinity and the status were validated once.
    assert len({id(p.spec.containers) for p in pods}) == 1
    assert len({id(p.spec.affinity) for p in pods}) == 1
    assert len({id(p.status) for p in pods}) == 1
    assert len({p.spec.volumes[-1].name for p in pods}) == 50
    assert len({p.metadata.uid for p in pods}) == 50
    snake = _pod(1, SPECS[0])
    snake["spec"]["node_name"] = "n"
    parser.pod(snake)
    assert parser.slim == 50  # taken by the full validation


def test_a_list_page_parses_as_before() -> None:
    """``_parse_page`` on a pod LIST body: the pods of the whole-list validation, and each invalid one reported."""
    kind = next(k for k in KINDS if k.resource is kc.PODS)
    valid = _valid_pods()
    body = json.dumps({"kind": "PodList", "metadata": {"resourceVersion": "42", "continue": "next"}, "items": valid})
    invalid: list[InvalidObject] = []
    items, token, version = _parse_page(kind, body.encode(), invalid)
    assert all(isinstance(p, Pod) for p in items)
    assert (token, version, invalid) == ("next", "42", [])
    want = [Pod.model_validate(r) for r in valid]
    for got, expected in zip(items, want, strict=True):
        _assert_same_model(got, expected)

    mixed = [*valid[:5], *_invalid_pods()[:3], *valid[5:8]]
    invalid = []
    items, token, version = _parse_page(kind, json.dumps({"metadata": {}, "items": mixed}).encode(), invalid)
    assert (token, version) == (None, None)
    assert [p.name for p in items if isinstance(p, Pod)] == [r["metadata"]["name"] for r in (*valid[:5], *valid[5:8])]
    assert len(items) == 8
    assert [(o.name, o.errors) for o in invalid] == [
        (o.name, o.errors) for o in (_full(r) for r in _invalid_pods()[:3]) if isinstance(o, InvalidObject)
    ]
    assert all(isinstance(o.raw, dict) for o in invalid)


@pytest.mark.parametrize("body", [b'{"metadata": {}, "items": null}', b'{"metadata": {}}'])
def test_an_empty_pod_list(body: bytes) -> None:
    kind = next(k for k in KINDS if k.resource is kc.PODS)
    assert _parse_page(kind, body, []) == ([], None, None)


def test_pods_whose_raw_spec_and_status_always_differ() -> None:
    """As a real API server lists them (a kube-api-access-xxxxx volume per pod, condition timestamps): the
    whole-raw caches give up after a trial, and the pods are still exactly the full validation's."""
    raws = []
    for i in range(400):
        raw = _pod(i, SPECS[1 + i % 2])
        raw["status"]["conditions"][0]["lastTransitionTime"] = f"2026-01-02T03:{i // 60:02d}:{i % 60:02d}Z"
        raws.append(raw)
    parser = _PodParser()
    pods = [parser.pod(r) for r in raws]
    assert parser.slim == 400
    assert not parser._raw_cache_pays("spec")
    assert not parser._raw_cache_pays("status")
    for got, raw in zip(pods, raws, strict=True):
        _assert_same_model(got, Pod.model_validate(raw))
    assert len({id(p.spec.containers) for p in pods}) == 2
