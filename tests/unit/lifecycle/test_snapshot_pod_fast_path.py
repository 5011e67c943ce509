"""The snapshot's pod LIST fast path (each distinct spec/status validated once) gives exactly what validating every
item as a whole gives: the same pods (equal, same fields set, same dump), the same invalid items and messages, the
same list metadata; and the solver input built from them is the same."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

from benchmarks.provisioning_scale import pod
from nodeflow.api.core import Pod
from nodeflow.catalog.offline import load_offline
from nodeflow.kube.snapshot import KINDS, InvalidObject, _parse_models, _parse_page
from nodeflow.plan import ClusterState, build_input

POD_KIND = next(k for k in KINDS if k.model is Pod)


def _varied(seed: int) -> list[Any]:
    rng = random.Random(seed)
    out: list[Any] = []
    for i in range(300):
        body: Any = pod(rng.randrange(40), i, rng.choice([None, None, "node-a"]))
        choice = rng.randrange(20)
        if choice == 0:  # a real API server leaves out the items' apiVersion and kind
            body.pop("apiVersion")
            body.pop("kind")
        elif choice == 1:
            body["spec"]["affinity"] = {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a"]}
                                ]
                            }
                        ]
                    }
                },
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"a": "b"}}}
                    ]
                },
            }
        elif choice == 2:
            body["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"  # invalid quantity
        elif choice == 3:
            body["metadata"]["labels"]["bad key!"] = "x"  # invalid label key
        elif choice == 4:
            body["unknownTopLevel"] = {"x": 1}
        elif choice == 5:
            body["apiVersion"] = "v2"
        elif choice == 6:
            body.pop("spec")
        elif choice == 7:
            body.pop("status")
        elif choice == 8:
            body["metadata"] = None
        elif choice == 9:
            body["spec"] = None
        elif choice == 10:
            body = rng.choice(["a string", 7, None, []])
        elif choice == 11:  # same spec, other key order
            body["spec"] = dict(reversed(list(body["spec"].items())))
        elif choice == 12:
            body["status"]["conditions"][0]["lastTransitionTime"] = f"2026-01-01T00:00:{i % 60:02d}Z"
            body["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        elif choice == 13:
            body["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": f"data-{i}"}}]
            body["spec"]["initContainers"] = [
                {"name": "init", "image": "busybox", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}
            ]
        elif choice == 14:
            body["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "100m"}  # requests above limits
        elif choice == 15:
            body["metadata"].pop("name")
        out.append(body)
    return out


def _page(items: list[Any]) -> bytes:
    return json.dumps(
        {
            "kind": "PodList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": "42", "continue": "tok"},
            "items": items,
        }
    ).encode()


def _dumps(models: list[Any]) -> list[Any]:
    return [(m.model_dump(mode="json", exclude_unset=True), sorted(m.model_fields_set)) for m in models]


def test_fast_path_equals_whole_item_validation_on_varied_pods() -> None:
    for seed in range(5):
        data = _page(_varied(seed))
        fast_invalid: list[InvalidObject] = []
        slow_invalid: list[InvalidObject] = []
        fast = _parse_page(POD_KIND, data, fast_invalid)
        slow = _parse_models(POD_KIND, data, slow_invalid)
        assert fast[1:] == slow[1:] == ("tok", "42")
        assert fast[0] == slow[0]
        assert _dumps(fast[0]) == _dumps(slow[0])
        assert fast_invalid == slow_invalid
        assert fast_invalid
        assert len({id(p.spec) for p in fast[0]}) < len(fast[0])  # type: ignore[attr-defined]  # the fast path ran: specs shared


def test_fast_path_gives_the_same_solver_input() -> None:
    items = [pod(i // 25, i, None) for i in range(400)]
    items += [copy.deepcopy(items[0]) | {"metadata": {"name": "odd", "namespace": "team-0"}}]
    data = _page(items)
    fast = _parse_page(POD_KIND, data, [])[0]
    slow = _parse_models(POD_KIND, data, [])[0]
    catalog = load_offline("us-east-1")
    from benchmarks.provisioning_scale import node_class, node_pool
    from nodeflow.api.karpenter import EC2NodeClass, NodePool

    pools = (NodePool.model_validate(node_pool()),)
    classes = (EC2NodeClass.model_validate(node_class()),)
    a = build_input(ClusterState(node_pools=pools, node_classes=classes, pods=tuple(fast)), catalog)  # type: ignore[arg-type]
    b = build_input(ClusterState(node_pools=pools, node_classes=classes, pods=tuple(slow)), catalog)  # type: ignore[arg-type]
    assert a.pods == b.pods
    assert len(a.pods) == 401
    assert a == b
