"""The manifest loader behind ``plan``: files, directories, kinds, expansion and error reporting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from nodeflow.api import manifests
from nodeflow.api.manifests import ManifestError, Manifests, SkippedDocument, load_manifests

NODEPOOL = """\
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: {name}
spec:
  template:
    spec:
      nodeClassRef:
        group: karpenter.k8s.aws
        kind: EC2NodeClass
        name: default
      requirements:
        - key: karpenter.sh/capacity-type
          operator: {operator}
          values: ["spot", "on-demand"]
"""

EC2NODECLASS = """\
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: default
spec:
  role: KarpenterNodeRole
  amiSelectorTerms:
    - alias: al2023@latest
  subnetSelectorTerms:
    - tags:
        karpenter.sh/discovery: demo
  securityGroupSelectorTerms:
    - tags:
        karpenter.sh/discovery: demo
"""

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  namespace: shop
spec:
  replicas: {replicas}
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      containers:
        - name: app
          image: nginx:1.27
          env: [{{name: A, value: "1"}}]
          resources:
            requests: {{cpu: {cpu}, memory: 256Mi}}
"""

POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  containers:
    - name: c
      image: busybox
      resources:
        limits: {{cpu: "1", memory: 1Gi}}
"""

CONFIGMAP = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
data:
  key: value
"""

STATEFULSET = """\
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
spec:
  replicas: 2
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: db, image: postgres, resources: {requests: {cpu: "2", memory: 4Gi}}}]
  volumeClaimTemplates:
    - metadata: {name: data}
      spec:
        accessModes: [ReadWriteOnce]
        storageClassName: gp3
        resources: {requests: {storage: 50Gi}}
"""

OTHERS = """\
apiVersion: batch/v1
kind: Job
metadata: {name: report}
spec:
  parallelism: 3
  completions: 2
  template:
    metadata: {labels: {job: report}}
    spec:
      restartPolicy: Never
      containers: [{name: r, image: r, resources: {requests: {cpu: 500m}}}]
---
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: legacy}
spec:
  replicas: 2
  template:
    metadata: {labels: {app: legacy}}
    spec:
      containers: [{name: l, image: l}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: kube-system}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      containers: [{name: a, image: a, resources: {requests: {cpu: 100m, memory: 64Mi}}}]
---
apiVersion: v1
kind: Node
metadata: {name: ip-10-0-0-1, labels: {karpenter.sh/nodepool: default}}
spec: {providerID: "aws:///us-east-1a/i-0abc"}
status: {allocatable: {cpu: 3920m, memory: 15Gi, pods: "58"}}
---
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata: {name: default-abcde, labels: {karpenter.sh/nodepool: default}}
spec:
  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  requirements:
    - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data-db-0}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: gp3
  volumeName: pv-1
  resources: {requests: {storage: 50Gi}}
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: pv-1}
spec:
  capacity: {storage: 50Gi}
  storageClassName: gp3
  claimRef: {namespace: default, name: data-db-0}
  nodeAffinity:
    required:
      nodeSelectorTerms:
        - matchExpressions: [{key: topology.ebs.csi.aws.com/zone, operator: In, values: [us-east-1a]}]
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: gp3}
provisioner: ebs.csi.aws.com
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web}
spec:
  maxUnavailable: 1
  selector: {matchLabels: {app: web}}
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def problems_of(paths: list[Path]) -> list[str]:
    with pytest.raises(ManifestError) as info:
        load_manifests(paths)
    return info.value.problems


# ---------------------------------------------------------------------------------------------
# Happy paths


def test_loads_every_kind_and_expands_workloads(tmp_path: Path) -> None:
    main = write(
        tmp_path / "main.yaml",
        "---\n".join(
            [
                NODEPOOL.format(name="default", operator="In"),
                EC2NODECLASS,
                DEPLOYMENT.format(name="web", replicas=3, cpu="500m"),
                POD.format(name="solo"),
                CONFIGMAP,
                STATEFULSET,
            ]
        ),
    )
    others = write(tmp_path / "others.yaml", OTHERS)
    result = load_manifests([main, str(others)])

    assert isinstance(result, Manifests)
    assert [np.metadata.name for np in result.node_pools] == ["default"]
    assert [nc.metadata.name for nc in result.node_classes] == ["default"]
    assert [nc.metadata.name for nc in result.node_claims] == ["default-abcde"]
    assert [ds.metadata.name for ds in result.daemon_sets] == ["agent"]
    assert [n.metadata.name for n in result.nodes] == ["ip-10-0-0-1"]
    assert [pv.metadata.name for pv in result.pvs] == ["pv-1"]
    assert [sc.metadata.name for sc in result.storage_classes] == ["gp3"]
    assert [pdb.metadata.name for pdb in result.pdbs] == ["web"]
    assert result.pdbs[0].metadata.namespace == "default"
    # explicit claims first, then the StatefulSet's that were not given explicitly
    assert [claim.key for claim in result.pvcs] == ["default/data-db-0", "default/data-db-1"]
    assert result.pvcs[0].spec.volume_name == "pv-1"

    # pods in input order: 3 web, solo, db-0, db-1, 2 report (min(3, 2)), 2 legacy
    keys = [pod.key for pod in result.pods]
    assert len(keys) == 3 + 1 + 2 + 2 + 2
    assert all(key.startswith("shop/web-") for key in keys[:3])
    assert keys[3:6] == ["default/solo", "default/db-0", "default/db-1"]
    assert all(key.startswith("default/report-") for key in keys[6:8])
    assert all(key.startswith("default/legacy-") for key in keys[8:])
    assert len(set(keys)) == len(keys)
    assert all(pod.status.phase == "Pending" for pod in result.pods[:3])
    assert [w.kind for w in result.workloads] == ["Deployment", "StatefulSet", "Job", "ReplicaSet"]

    # limits-only standalone pod: requests default to limits
    solo = result.pods[3]
    assert solo.effective_requests() == {"cpu": 1000, "memory": 2**30 * 1000, "pods": 1000}
    assert result.pods[4].claim_names() == ["data-db-0"]

    assert result.skipped == (
        SkippedDocument(file=str(main), index=4, kind="ConfigMap", name="settings", api_version="v1"),
    )
    assert str(result.skipped[0]) == (
        f"{main}: document 4 (ConfigMap/settings): kind ConfigMap (v1) is not used by nodeflow; skipped"
    )


def test_directory_is_read_recursively_in_sorted_order(tmp_path: Path) -> None:
    write(tmp_path / "b" / "pods.yml", POD.format(name="from-b"))
    write(tmp_path / "a.yaml", POD.format(name="from-a"))
    write(
        tmp_path / "c" / "d" / "pod.json",
        json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "from-json"}, "spec": {}}),
    )
    write(tmp_path / "notes.txt", "not: [yaml")
    write(tmp_path / ".hidden" / "x.yaml", "not: [yaml")
    result = load_manifests([tmp_path])
    assert [pod.name for pod in result.pods] == ["from-a", "from-b", "from-json"]


def test_same_file_twice_is_read_once(tmp_path: Path) -> None:
    path = write(tmp_path / "pod.yaml", POD.format(name="p"))
    assert len(load_manifests([path, tmp_path]).pods) == 1


def test_a_directory_is_listed_as_rglob_lists_it(tmp_path: Path) -> None:
    """Sorted by path components ("a/" before "a-b/", though "-" sorts before "/"), hidden names left out at any
    depth, a linked file read, a linked directory not followed, a file reached twice read once."""
    write(tmp_path / "a-b" / "p.yaml", POD.format(name="from-a-b"))
    write(tmp_path / "a" / "p.yaml", POD.format(name="from-a"))
    write(tmp_path / "a" / ".p.yaml", "not: [yaml")
    write(tmp_path / "x" / ".cache" / "p.yaml", "not: [yaml")
    elsewhere = write(tmp_path.parent / f"{tmp_path.name}-out" / "p.yaml", POD.format(name="linked"))
    (tmp_path / "z.yaml").symlink_to(elsewhere)
    (tmp_path / "zdir").symlink_to(elsewhere.parent, target_is_directory=True)
    (tmp_path / "again.yaml").symlink_to(tmp_path / "a" / "p.yaml")  # the same file as a/p.yaml
    result = load_manifests([tmp_path])
    assert [pod.name for pod in result.pods] == ["from-a", "from-a-b", "linked"]


def test_a_directorys_files_are_read_without_a_python_file_object_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory of 20,000 files cost one ``Path``, one file object and one text wrapper per file (``plan`` at
    1.55x its solve for one pod per file): each file is now read with ``os.open``/``os.read``. Same pods, same
    order, same labels; fails when a file is read through ``open``."""
    for n in range(3):
        write(tmp_path / "pods" / f"p{n}.yaml", POD.format(name=f"p{n}"))
    write(tmp_path / "pods" / "q.json", json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "q"}}))
    expected = load_manifests([tmp_path])
    import io

    real_open = io.open

    def no_open(file: object, *args: object, **kwargs: object) -> object:
        if str(file).startswith(str(tmp_path)):
            raise AssertionError(f"{file} read through a Python file object")
        return real_open(file, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(io, "open", no_open)
    result = load_manifests([tmp_path])
    assert [p.name for p in result.pods] == ["p0", "p1", "p2", "q"]
    assert result == expected


@pytest.mark.parametrize(
    "data",
    [
        b"a: 1\r\nb: 2\r\n",  # Windows line ends
        b"a: 1\rb: 2\r",  # old Mac ones
        b"\xef\xbb\xbfa: 1\n",  # a byte order mark, kept as read_text keeps it
        b"",
        b"x: " + b"y" * 200_000 + b"\n",  # bigger than one read
        "caf\u00e9: \u2713\n".encode(),
        b"a: \xff\xfe\n",  # not UTF-8
    ],
)
def test_a_file_reads_as_read_text_reads_it(tmp_path: Path, data: bytes) -> None:
    """``_read_text`` gives ``Path.read_text(encoding="utf-8")``'s text, or its error."""
    path = tmp_path / "f.yaml"
    path.write_bytes(data)
    try:
        expected: object = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        expected = str(exc)
    try:
        got: object = manifests._read_text(str(path))
    except UnicodeDecodeError as exc:
        got = str(exc)
    assert got == expected


def test_a_file_that_cannot_be_read_is_named_as_before(tmp_path: Path) -> None:
    """Errors of ``os.open``/``os.read`` name the file as ``open`` did (a directory: read(2) names none)."""
    for path, error in ((tmp_path / "missing.yaml", FileNotFoundError), (tmp_path, IsADirectoryError)):
        with pytest.raises(error) as ours:
            manifests._read_text(str(path))
        with pytest.raises(error) as theirs:
            path.read_text(encoding="utf-8")
        assert str(ours.value) == str(theirs.value)
    bad = write(tmp_path / "d" / "bad.yaml", "")
    bad.write_bytes(b"kind: \xff\n")
    (problem,) = problems_of([tmp_path / "d"])
    assert problem.startswith(f"{bad}: cannot read: 'utf-8' codec can't decode byte 0xff in position 6")


@pytest.mark.parametrize("name", ["a.json", "a.JSON", ".json", "a.", "a.b.json", "..json", "a", "d.x/a", "d.json/a"])
def test_suffix_is_paths_suffix(name: str) -> None:
    assert manifests._suffix(name) == Path(name).suffix


def test_a_directory_named_dot_gives_the_names_path_gives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``plan -f .``: files are named ``a.yaml`` and ``sub/b.yaml`` (as ``str(Path)``), not ``./a.yaml``."""
    write(tmp_path / "a.yaml", "kind: Secret\napiVersion: v1\nmetadata: {name: s}\n")
    write(tmp_path / "sub" / "b.yaml", "kind: Secret\napiVersion: v1\nmetadata: {name: t}\n")
    monkeypatch.chdir(tmp_path)
    assert [s.file for s in load_manifests(["."]).skipped] == ["a.yaml", str(Path("sub") / "b.yaml")]
    assert [s.file for s in load_manifests(["./"]).skipped] == ["a.yaml", str(Path("sub") / "b.yaml")]
    assert [s.file for s in load_manifests([f"{tmp_path}/"]).skipped] == [
        str(tmp_path / "a.yaml"),
        str(tmp_path / "sub" / "b.yaml"),
    ]


def test_empty_documents_and_lists(tmp_path: Path) -> None:
    items = [
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}", "namespace": "ns"}, "spec": {}}
        for i in range(3)
    ]
    items.append({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc"}})
    listing = {"apiVersion": "v1", "kind": "List", "items": items}
    path = write(tmp_path / "list.yaml", "---\n---\n# only a comment\n---\n" + json.dumps(listing) + "\n---\n")
    result = load_manifests([path])
    assert [pod.key for pod in result.pods] == ["ns/p0", "ns/p1", "ns/p2"]
    assert result.skipped[0].index == 2
    assert result.skipped[0].item == 3
    assert "document 2 items[3] (Service/svc)" in str(result.skipped[0])


def test_no_paths_give_empty_manifests() -> None:
    assert load_manifests([]) == Manifests()


def test_expansion_is_deterministic_across_loads(tmp_path: Path) -> None:
    path = write(tmp_path / "d.yaml", DEPLOYMENT.format(name="web", replicas=20, cpu="1"))
    first = [pod.name for pod in load_manifests([path]).pods]
    second = [pod.name for pod in load_manifests([path]).pods]
    assert first == second
    assert len(set(first)) == 20


# ---------------------------------------------------------------------------------------------
# Errors


def test_field_errors_name_file_document_object_and_field(tmp_path: Path) -> None:
    bad = write(
        tmp_path / "bad.yaml",
        EC2NODECLASS + "---\n" + NODEPOOL.format(name="default", operator="Maybe"),
    )
    problems = problems_of([bad])
    assert len(problems) == 1
    assert problems[0].startswith(
        f"{bad}: document 1 (NodePool/default): spec.template.spec.requirements[0].operator: "
    )


def test_all_problems_across_files_are_collected(tmp_path: Path) -> None:
    first = write(
        tmp_path / "1.yaml",
        "---\n".join(
            [
                NODEPOOL.format(name="a", operator="Sometimes"),
                DEPLOYMENT.format(name="web", replicas=2, cpu="lots"),
                "apiVersion: v1\nkind: Pod\nmetadata: {namespace: x}\nspec: {}\n",
            ]
        ),
    )
    second = write(tmp_path / "2.yaml", "apiVersion: karpenter.sh/v1beta1\nkind: NodePool\nmetadata: {name: old}\n")
    third = write(tmp_path / "3.yaml", "kind: Pod\nmetadata:\n  name: [unclosed\n")
    missing = tmp_path / "missing.yaml"
    problems = problems_of([first, second, third, missing])
    assert len(problems) == 6, problems
    assert problems[0].startswith(f"{first}: document 0 (NodePool/a): spec.template.spec.requirements[0].operator")
    assert problems[1].startswith(
        f"{first}: document 1 (Deployment/web): spec.template.spec.containers[0].resources.requests.cpu: "
        "'lots' is not a valid quantity"
    )
    assert problems[2] == f"{first}: document 2 (Pod/<unnamed>): metadata.name: required field is missing"
    assert problems[3] == (
        f"{second}: document 0 (NodePool/old): apiVersion: NodePool must be karpenter.sh/v1, got "
        "karpenter.sh/v1beta1 (nodeflow reads Karpenter v1 APIs only; migrate older manifests to v1)"
    )
    assert problems[4] == (
        f"{third}: line 4, column 1 (document 0): YAML syntax error: did not find expected ',' or ']' "
        "(while parsing a flow sequence started at line 3, column 9)"
    )
    assert problems[5] == f"{missing}: no such file or directory"


def test_error_message_lists_problems(tmp_path: Path) -> None:
    bad = write(tmp_path / "bad.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {}\n")
    with pytest.raises(ManifestError) as info:
        load_manifests([bad])
    assert str(info.value) == (
        f"1 problem in the manifests:\n  {bad}: document 0 (Pod/<unnamed>): metadata.name: required field is missing"
    )


def test_yaml_syntax_error_names_the_line_and_keeps_earlier_documents_checked(tmp_path: Path) -> None:
    text = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, resources: {requests: {cpu: x}}}]}\n"
    text += "---\nkey: value\n  bad: indentation\n"
    bad = write(tmp_path / "syntax.yaml", text)
    problems = problems_of([bad])
    assert len(problems) == 2
    assert problems[0].startswith(f"{bad}: document 0 (Pod/p): spec.containers[0].resources.requests.cpu")
    assert problems[1].startswith(f"{bad}: line 7, column ")


def test_invalid_json_names_line(tmp_path: Path) -> None:
    bad = write(tmp_path / "bad.json", '{\n  "kind": "Pod",\n  oops\n}')
    problems = problems_of([bad])
    assert problems == [f"{bad}: line 3, column 3: invalid JSON: Expecting property name enclosed in double quotes"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "- a\n- b\n",
            "document 0: expected a Kubernetes object (a mapping with apiVersion and kind), got list",
        ),
        ("apiVersion: v1\nmetadata: {name: x}\n", "document 0: kind: required field is missing"),
        (
            "apiVersion: extensions/v1beta1\nkind: Deployment\nmetadata: {name: x}\n",
            "document 0 (Deployment/x): apiVersion: Deployment must be apps/v1, got extensions/v1beta1",
        ),
        (
            "kind: Pod\nmetadata: {name: x}\n",
            "document 0 (Pod/x): apiVersion: Pod must be v1, apiVersion is missing",
        ),
        (
            "apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata: {name: x}\n",
            "document 0 (Provisioner/x): kind Provisioner (karpenter.sh/v1alpha5) is not supported",
        ),
        (
            "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: x}\nspec: {role: r, bogus: 1}\n",
            "document 0 (EC2NodeClass/x): spec.",
        ),
        (
            "apiVersion: v1\nkind: List\nitems: {a: 1}\n",
            "document 0 (List): items: must be a list",
        ),
    ],
)
def test_document_shape_errors(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path / "doc.yaml", text)
    problems = problems_of([path])
    assert any(problem.startswith(f"{path}: {expected}") for problem in problems), problems


def test_duplicates_are_errors(tmp_path: Path) -> None:
    a = write(tmp_path / "a.yaml", POD.format(name="p") + "---\n" + NODEPOOL.format(name="np", operator="In"))
    b = write(
        tmp_path / "b.yaml",
        POD.format(name="p") + "---\n" + NODEPOOL.format(name="np", operator="In") + "---\n" + EC2NODECLASS,
    )
    problems = problems_of([a, b])
    assert problems == [
        f"{b}: document 0 (Pod/p): duplicate Pod default/p (first defined in {a}: document 0)",
        f"{b}: document 1 (NodePool/np): duplicate NodePool np (first defined in {a}: document 1)",
    ]


def test_same_name_in_other_namespace_or_kind_is_fine(tmp_path: Path) -> None:
    text = POD.format(name="p") + "---\n" + POD.format(name="p").replace("name: p", "name: p\n  namespace: other")
    text += "---\napiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: p}\nspec: {}\n"
    path = write(tmp_path / "ok.yaml", text)
    result = load_manifests([path])
    assert [pod.key for pod in result.pods] == ["default/p", "other/p"]
    assert [claim.key for claim in result.pvcs] == ["default/p"]


def test_expanded_pod_colliding_with_a_pod_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path / "c.yaml", POD.format(name="db-1") + "---\n" + STATEFULSET)
    problems = problems_of([path])
    assert problems == [
        f"{path}: document 1 (StatefulSet/db): pod default/db-1 is defined twice: also by {path}: document 0 (Pod/db-1)"
    ]


def test_unknown_fields_are_ignored_in_core_kinds_but_not_karpenter_kinds(tmp_path: Path) -> None:
    pod = POD.format(name="p").replace("spec:\n", "spec:\n  serviceAccountName: sa\n  dnsPolicy: ClusterFirst\n")
    assert len(load_manifests([write(tmp_path / "p.yaml", pod)]).pods) == 1
    pool = NODEPOOL.format(name="np", operator="In").replace("spec:\n  template:", "spec:\n  color: blue\n  template:")
    problems = problems_of([write(tmp_path / "np.yaml", pool)])
    assert problems[0].startswith(f"{tmp_path / 'np.yaml'}: document 0 (NodePool/np): spec.color: ")


def _pod_object(name: str, cpu: str = "1") -> dict[str, object]:
    container = {"name": "c", "image": "nginx", "resources": {"requests": {"cpu": cpu}}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"containers": [container]},
    }


def test_malformed_json_document_in_a_stream_names_the_file_line_and_document(tmp_path: Path) -> None:
    """JSON documents between ``---`` lines are read by the JSON scanner; a broken one is YAML's to report."""
    good = json.dumps(_pod_object("a"), indent=4)
    bad = write(
        tmp_path / "pods.yaml", good + "\n---\n" + '{\n    "apiVersion": "v1",\n    "kind": "Pod"\n    "x": 1\n}\n'
    )
    problems = problems_of([bad])
    assert len(problems) == 1
    assert problems[0] == (
        f"{bad}: line 26, column 5 (document 1): YAML syntax error: did not find expected ',' or '}}' "
        "(while parsing a flow mapping started at line 23, column 1)"
    )


@pytest.mark.parametrize("style", ["json", "yaml", "json documents"])
def test_list_with_a_bad_item_names_the_item_and_field(tmp_path: Path, style: str) -> None:
    """A ``kind: List`` as ``kubectl get -o json`` / ``-o yaml`` writes it (read entry by entry): the bad item's
    problem names the document, the item and the field; the other items are read."""
    listing = {
        "apiVersion": "v1",
        "items": [_pod_object("a"), _pod_object("b", cpu="lots"), _pod_object("c")],
        "kind": "List",
        "metadata": {"resourceVersion": ""},
    }
    if style == "json":
        path = write(tmp_path / "list.json", json.dumps(listing, indent=4))
    elif style == "yaml":
        path = write(tmp_path / "list.yaml", yaml.safe_dump(listing))
    else:
        path = write(tmp_path / "list.yaml", json.dumps(_pod_object("z")) + "\n---\n" + json.dumps(listing, indent=4))
    document = 1 if style == "json documents" else 0
    problems = problems_of([path])
    assert len(problems) == 1
    assert problems[0].startswith(
        f"{path}: document {document} items[1] (Pod/b): spec.containers[0].resources.requests.cpu"
    )
    listing["items"] = [_pod_object("a"), _pod_object("c")]
    path.write_text(json.dumps(listing) if style == "json" else yaml.safe_dump(listing))
    assert [pod.key for pod in load_manifests([path]).pods] == ["ns/a", "ns/c"]


def test_directory_of_files_shares_shapes_and_keeps_each_files_documents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One object per file: the files' shapes are parsed once for all of them; each pod still names its file."""
    parsed: list[int] = []
    shape = manifests._shape
    monkeypatch.setattr(
        manifests, "_shape", lambda parts, count, loader: parsed.append(count) or shape(parts, count, loader)
    )
    for i in range(6):
        write(tmp_path / "pods" / f"p{i}.yaml", yaml.safe_dump(_pod_object(f"p{i}", cpu="bad" if i == 4 else "1")))
    problems = problems_of([tmp_path])
    assert problems == [
        f"{tmp_path / 'pods' / 'p4.yaml'}: document 0 (Pod/p4): spec.containers[0].resources.requests.cpu: "
        + problems[0].split("spec.containers[0].resources.requests.cpu: ", 1)[1]
    ]
    assert len(parsed) == 2  # six files, two shapes: cpu '1' (quoted by safe_dump) and cpu bad
    (tmp_path / "pods" / "p4.yaml").unlink()
    assert [pod.key for pod in load_manifests([tmp_path]).pods] == ["ns/p0", "ns/p1", "ns/p2", "ns/p3", "ns/p5"]
