"""The generated Karpenter CRDs (agent/manifests/crds): fresh, structural, and accepting the examples.

``validate`` is a small OpenAPI v3 validator for the subset ``tools/gen_crds.py`` emits (type,
properties, required, additionalProperties, items, enum, pattern, lengths, bounds, counts,
x-kubernetes-int-or-string). Unknown fields are reported like ``kubectl apply`` with strict
field validation does.
"""

from __future__ import annotations

import copy
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from nodeflow.api.karpenter import EC2NodeClass, NodeClaim, NodePool

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").rglob("*.yaml"))


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_crds", REPO / "tools" / "gen_crds.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_crds"] = module
    spec.loader.exec_module(module)
    return module


gen_crds = _load_generator()
CRD_FILES = {
    "NodePool": "karpenter.sh_nodepools.yaml",
    "NodeClaim": "karpenter.sh_nodeclaims.yaml",
    "EC2NodeClass": "karpenter.k8s.aws_ec2nodeclasses.yaml",
}
MODELS = {"NodePool": NodePool, "NodeClaim": NodeClaim, "EC2NodeClass": EC2NodeClass}


def _committed(kind: str) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all((gen_crds.CRD_DIR / CRD_FILES[kind]).read_text()) if d]
    assert len(docs) == 1
    return docs[0]  # type: ignore[no-any-return]


CRDS = {kind: _committed(kind) for kind in CRD_FILES}


def _version(kind: str) -> dict[str, Any]:
    versions = CRDS[kind]["spec"]["versions"]
    assert len(versions) == 1
    return versions[0]  # type: ignore[no-any-return]


def _schema(kind: str) -> dict[str, Any]:
    return _version(kind)["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------------------------
# A validator for the OpenAPI subset the generator emits

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "boolean": (bool,),
    "integer": (int,),
    "number": (int, float),
}


def _type_ok(value: Any, type_: str) -> bool:
    if isinstance(value, bool) and type_ != "boolean":
        return False
    return isinstance(value, _TYPES[type_])


def validate(schema: dict[str, Any], value: Any, path: str = "") -> list[str]:
    """Errors of ``value`` against a structural schema node, as ``path: problem`` lines."""
    where = path or "<root>"
    if value is None:
        return [] if schema.get("nullable") else [f"{where}: must not be null"]
    if schema.get("x-kubernetes-int-or-string"):
        if not (_type_ok(value, "integer") or _type_ok(value, "string")):
            return [f"{where}: must be an integer or a string, got {type(value).__name__}"]
    elif "type" in schema and not _type_ok(value, schema["type"]):
        return [f"{where}: must be of type {schema['type']}, got {type(value).__name__}"]
    errors: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: unsupported value {value!r}, must be one of {schema['enum']}")
    if isinstance(value, str):
        if "pattern" in schema and re.search(schema["pattern"], value) is None:
            errors.append(f"{where}: {value!r} does not match {schema['pattern']!r}")
        if len(value) < schema.get("minLength", 0):
            errors.append(f"{where}: shorter than {schema['minLength']}")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(f"{where}: longer than {schema['maxLength']}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema:
            low = schema["minimum"]
            if value < low or (schema.get("exclusiveMinimum") and value == low):
                errors.append(f"{where}: {value} below minimum {low}")
        if "maximum" in schema:
            high = schema["maximum"]
            if value > high or (schema.get("exclusiveMaximum") and value == high):
                errors.append(f"{where}: {value} above maximum {high}")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            errors.append(f"{where}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(f"{where}: more than {schema['maxItems']} items")
        for i, item in enumerate(value):
            errors += validate(schema.get("items", {}), item, f"{path}[{i}]")
    if isinstance(value, dict):
        if "maxProperties" in schema and len(value) > schema["maxProperties"]:
            errors.append(f"{where}: more than {schema['maxProperties']} properties")
        errors += [f"{where}: missing required field {r!r}" for r in schema.get("required", []) if r not in value]
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            sub = f"{path}.{key}" if path else key
            if key in properties:
                errors += validate(properties[key], item, sub)
            elif isinstance(extra, dict):
                errors += validate(extra, item, sub)
            elif properties and not schema.get("x-kubernetes-preserve-unknown-fields"):
                errors.append(f"{sub}: unknown field")  # a bare {type: object} (metadata) takes anything
    return errors


def apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """What the API server's defaulting does to ``value`` (a copy)."""
    value = copy.deepcopy(value)
    if isinstance(value, dict):
        for key, sub in schema.get("properties", {}).items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                value[key] = apply_defaults(sub, value[key])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key in value:
                if key not in schema.get("properties", {}):
                    value[key] = apply_defaults(extra, value[key])
    elif isinstance(value, list) and "items" in schema:
        value = [apply_defaults(schema["items"], item) for item in value]
    return value


def _nodes(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every schema node with its path."""
    found = [(path, schema)]
    for key, sub in schema.get("properties", {}).items():
        found += _nodes(sub, f"{path}.{key}")
    if isinstance(schema.get("items"), dict):
        found += _nodes(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        found += _nodes(schema["additionalProperties"], f"{path}{{}}")
    return found


def _at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    node = schema
    for part in path.split("."):
        if part == "[]":
            node = node["items"]
        elif part == "{}":
            node = node["additionalProperties"]
        else:
            node = node["properties"][part]
    return node


# ---------------------------------------------------------------------------------------------
# Freshness


def test_committed_crds_equal_a_fresh_generation() -> None:
    problems = gen_crds.check()
    assert problems == [], "\n".join([*problems, "run: .venv/bin/python tools/gen_crds.py"])


def test_check_reports_a_stale_file(tmp_path: Path) -> None:
    gen_crds.write_all(tmp_path)
    assert gen_crds.check(tmp_path) == []
    stale = tmp_path / CRD_FILES["NodePool"]
    stale.write_text(stale.read_text().replace("720h", "721h"))
    (tmp_path / CRD_FILES["EC2NodeClass"]).unlink()
    assert gen_crds.main(["--check", "--dir", str(tmp_path)]) == 1
    problems = gen_crds.check(tmp_path)
    assert len(problems) == 2
    assert any("differs" in p and CRD_FILES["NodePool"] in p for p in problems)
    assert any("missing" in p and CRD_FILES["EC2NodeClass"] in p for p in problems)


def test_generation_is_deterministic() -> None:
    assert gen_crds.render_all() == gen_crds.render_all()


# ---------------------------------------------------------------------------------------------
# CRD shape


@pytest.mark.parametrize(
    ("kind", "group", "plural", "short_names"),
    [
        ("NodePool", "karpenter.sh", "nodepools", None),
        ("NodeClaim", "karpenter.sh", "nodeclaims", None),
        ("EC2NodeClass", "karpenter.k8s.aws", "ec2nodeclasses", ["ec2nc", "ec2ncs"]),
    ],
)
def test_crd_names_scope_and_version(kind: str, group: str, plural: str, short_names: list[str] | None) -> None:
    crd = CRDS[kind]
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["metadata"]["name"] == f"{plural}.{group}"
    spec = crd["spec"]
    assert spec["group"] == group
    assert spec["scope"] == "Cluster"
    names = spec["names"]
    assert names["kind"] == kind
    assert names["listKind"] == f"{kind}List"
    assert names["plural"] == plural
    assert names["singular"] == kind.lower()
    assert names["categories"] == ["karpenter"]
    assert names.get("shortNames") == short_names
    version = _version(kind)
    assert (version["name"], version["served"], version["storage"]) == ("v1", True, True)
    scale = {"scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.nodes"}}
    # NodePool: Karpenter's scale subresource (kubectl scale nodepool --replicas, for static NodePools)
    assert version["subresources"] == {"status": {}, **(scale if kind == "NodePool" else {})}


READY = '.status.conditions[?(@.type=="Ready")].status'
AGE = ".metadata.creationTimestamp"


@pytest.mark.parametrize(
    ("kind", "columns"),
    [
        (
            "NodeClaim",
            [
                ("Type", r".metadata.labels.node\.kubernetes\.io/instance-type", 0),
                ("Capacity", r".metadata.labels.karpenter\.sh/capacity-type", 0),
                ("Zone", r".metadata.labels.topology\.kubernetes\.io/zone", 0),
                ("Node", ".status.nodeName", 0),
                ("Ready", READY, 0),
                ("Age", AGE, 0),
                ("ImageID", ".status.imageID", 1),
                ("ID", ".status.providerID", 1),
                ("NodePool", r".metadata.labels.karpenter\.sh/nodepool", 1),
                ("NodeClass", ".spec.nodeClassRef.name", 1),
                ("Drifted", '.status.conditions[?(@.type=="Drifted")].status', 1),
            ],
        ),
        (
            "NodePool",
            [
                ("NodeClass", ".spec.template.spec.nodeClassRef.name", 0),
                ("Nodes", ".status.resources.nodes", 0),
                ("Ready", READY, 0),
                ("Age", AGE, 0),
                ("Weight", ".spec.weight", 1),
                ("CPU", ".status.resources.cpu", 1),
                ("Memory", ".status.resources.memory", 1),
            ],
        ),
        ("EC2NodeClass", [("Ready", READY, 0), ("Age", AGE, 0), ("Role", ".spec.role", 1)]),
    ],
)
def test_printer_columns(kind: str, columns: list[tuple[str, str, int]]) -> None:
    got = [(c["name"], c["jsonPath"], c.get("priority", 0)) for c in _version(kind)["additionalPrinterColumns"]]
    assert got == columns
    for column in _version(kind)["additionalPrinterColumns"]:
        assert column["type"] in {"string", "integer", "number", "boolean", "date"}
        if column["name"] == "Age":
            assert column["type"] == "date"


def test_printer_columns_point_at_schema_fields() -> None:
    for kind in CRDS:
        schema = _schema(kind)
        for column in _version(kind)["additionalPrinterColumns"]:
            path = column["jsonPath"]
            if path.startswith(".metadata.") or "[?(" in path:
                continue
            node = schema
            for part in path.strip(".").split("."):
                node = node.get("properties", {}).get(part) or node.get("additionalProperties") or {}
                assert node, f"{kind} column {column['name']}: {path} is not in the schema"


@pytest.mark.parametrize("kind", list(CRDS))
def test_schema_is_structural(kind: str) -> None:
    schema = _schema(kind)
    assert schema["type"] == "object"
    assert schema["properties"]["metadata"] == {"type": "object"}
    assert set(schema["properties"]) == {"apiVersion", "kind", "metadata", "spec", "status"}
    assert schema["required"] == ["spec"]
    for path, node in _nodes(schema):
        where = f"{kind}{path or ' root'}"
        text = repr(node)
        assert "$ref" not in node, where
        assert "$defs" not in node, where
        assert "title" not in node, where
        assert "const" not in node, where
        if node.get("x-kubernetes-int-or-string"):
            assert "type" not in node, where
            assert node.get("anyOf") == [{"type": "integer"}, {"type": "string"}], where
        else:
            assert "anyOf" not in node, where
            assert node.get("type") in _TYPES, where
        assert "'null'" not in text, where
        if node.get("type") == "object":
            assert (
                "properties" in node
                or "additionalProperties" in node
                or node is schema["properties"]["metadata"]
                or (node.get("x-kubernetes-preserve-unknown-fields") is True)
            ), where
            assert not ("properties" in node and "additionalProperties" in node), where
            assert set(node.get("required", [])) <= set(node.get("properties", {})), where
        if "additionalProperties" in node:
            assert isinstance(node["additionalProperties"], dict), where
        for bound in ("exclusiveMinimum", "exclusiveMaximum"):
            if bound in node:
                assert node[bound] is True, where
        if "pattern" in node:
            re.compile(node["pattern"])
        if "default" in node:
            assert node["default"] is not None, where
            assert validate(node, node["default"], where) == [], where


@pytest.mark.parametrize(
    ("kind", "path", "default"),
    [
        ("NodePool", "spec.template.spec.expireAfter", "720h"),
        ("NodePool", "spec.disruption.consolidationPolicy", "WhenEmptyOrUnderutilized"),
        ("NodePool", "spec.disruption.consolidateAfter", "0s"),
        ("NodePool", "spec.disruption.budgets", [{"nodes": "10%"}]),
        ("NodePool", "spec.disruption.budgets.[].nodes", "10%"),
        ("NodeClaim", "spec.expireAfter", "720h"),
        (
            "EC2NodeClass",
            "spec.metadataOptions",
            {
                "httpEndpoint": "enabled",
                "httpProtocolIPv6": "disabled",
                "httpPutResponseHopLimit": 1,
                "httpTokens": "required",
            },
        ),
        ("EC2NodeClass", "spec.metadataOptions.httpTokens", "required"),
        ("EC2NodeClass", "spec.metadataOptions.httpPutResponseHopLimit", 1),
    ],
)
def test_karpenter_defaults(kind: str, path: str, default: Any) -> None:
    assert _at(_schema(kind), path)["default"] == default


def test_disruption_default_is_the_models_default() -> None:
    default = _at(_schema("NodePool"), "spec.disruption")["default"]
    assert default == {
        "consolidateAfter": "0s",
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
        "budgets": [{"nodes": "10%"}],
    }


@pytest.mark.parametrize(
    ("kind", "path", "expected"),
    [
        ("NodePool", "spec.template.spec.requirements", {"maxItems": 100}),
        ("NodePool", "spec.template.spec.requirements.[].minValues", {"minimum": 1, "maximum": 50}),
        ("NodePool", "spec.template.spec.requirements.[].key", {"maxLength": 316}),
        ("NodePool", "spec.weight", {"minimum": 1, "maximum": 100}),
        ("NodePool", "spec.disruption.budgets", {"maxItems": 50}),
        ("NodePool", "spec.disruption.budgets.[].nodes", {"x-kubernetes-int-or-string": True}),
        ("NodePool", "spec.limits.{}", {"x-kubernetes-int-or-string": True, "pattern": gen_crds.QUANTITY_PATTERN}),
        ("NodeClaim", "spec.resources.requests.{}", {"x-kubernetes-int-or-string": True}),
        ("NodeClaim", "status.capacity.{}", {"pattern": gen_crds.QUANTITY_PATTERN}),
        ("EC2NodeClass", "spec.subnetSelectorTerms", {"minItems": 1, "maxItems": 30}),
        ("EC2NodeClass", "spec.amiSelectorTerms.[].alias", {"maxLength": 30}),
        ("EC2NodeClass", "spec.kubelet.imageGCHighThresholdPercent", {"minimum": 0, "maximum": 100}),
        # Karpenter types kubelet reservations as map[string]string (its CEL rules call startsWith on them)
        (
            "EC2NodeClass",
            "spec.kubelet.kubeReserved.{}",
            {"type": "string", "x-kubernetes-int-or-string": None, "pattern": gen_crds.QUANTITY_PATTERN},
        ),
        ("EC2NodeClass", "spec.kubelet.maxPods", {"format": "int32", "minimum": 0}),
        ("EC2NodeClass", "spec.placementGroupSelector.id", {"pattern": "^pg-[0-9a-z]+$"}),
        ("EC2NodeClass", "spec.networkInterfaces", {"maxItems": 150}),
        ("EC2NodeClass", "spec.connectionTracking.udpTimeout", {"minimum": 30, "maximum": 60}),
        ("EC2NodeClass", "spec.blockDeviceMappings", {"maxItems": 50}),
        ("EC2NodeClass", "spec.blockDeviceMappings.[].ebs.volumeSize", {"x-kubernetes-int-or-string": True}),
        ("EC2NodeClass", "spec.metadataOptions.httpPutResponseHopLimit", {"minimum": 1, "maximum": 64}),
        ("EC2NodeClass", "spec.instanceStorePolicy", {"enum": ["RAID0"]}),
    ],
)
def test_model_constraints_reach_the_schema(kind: str, path: str, expected: dict[str, Any]) -> None:
    node = _at(_schema(kind), path)
    assert {k: node.get(k) for k in expected} == expected


@pytest.mark.parametrize(
    ("kind", "path", "required"),
    [
        ("NodePool", "spec", ["template"]),
        ("NodePool", "spec.template", ["spec"]),
        ("NodePool", "spec.template.spec", ["requirements", "nodeClassRef"]),
        ("NodePool", "spec.template.spec.nodeClassRef", ["group", "kind", "name"]),
        ("NodePool", "spec.template.spec.requirements.[]", ["key", "operator"]),
        ("NodeClaim", "spec", ["requirements", "nodeClassRef"]),
        ("EC2NodeClass", "spec", ["subnetSelectorTerms", "securityGroupSelectorTerms", "amiSelectorTerms"]),
    ],
)
def test_required_fields(kind: str, path: str, required: list[str]) -> None:
    assert sorted(_at(_schema(kind), path)["required"]) == sorted(required)


def test_cel_only_rules_are_documented() -> None:
    assert len(gen_crds.CEL_ONLY_RULES) >= 10
    assert all(isinstance(rule, str) and rule for rule in gen_crds.CEL_ONLY_RULES)


# ---------------------------------------------------------------------------------------------
# Examples


def _example_docs() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in EXAMPLES:
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if isinstance(doc, dict) and doc.get("kind") in CRDS:
                docs.append((f"{path.relative_to(REPO)}#{i}:{doc['kind']}", doc))
    return docs


EXAMPLE_DOCS = _example_docs()


def test_examples_cover_the_user_facing_kinds() -> None:
    kinds = {doc["kind"] for _, doc in EXAMPLE_DOCS}
    assert {"NodePool", "EC2NodeClass"} <= kinds
    assert len(EXAMPLE_DOCS) >= 10


@pytest.mark.parametrize(("name", "doc"), EXAMPLE_DOCS, ids=[name for name, _ in EXAMPLE_DOCS])
def test_example_validates_against_its_crd(name: str, doc: dict[str, Any]) -> None:
    kind = doc["kind"]
    group = CRDS[kind]["spec"]["group"]
    assert doc["apiVersion"] == f"{group}/v1", name
    schema = _schema(kind)
    assert validate(schema, doc) == []
    # The API server's defaulting and the model's defaults agree.
    defaulted = apply_defaults(schema, doc)
    assert validate(schema, defaulted) == []
    model = MODELS[kind]
    assert model.model_validate(defaulted) == model.model_validate(doc)


@pytest.mark.parametrize(("name", "doc"), EXAMPLE_DOCS, ids=[name for name, _ in EXAMPLE_DOCS])
def test_model_dump_validates_against_its_crd(name: str, doc: dict[str, Any]) -> None:
    obj = MODELS[doc["kind"]].model_validate(doc)
    dumped = obj.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert validate(_schema(doc["kind"]), dumped) == []


NODECLAIM: dict[str, Any] = {
    "apiVersion": "karpenter.sh/v1",
    "kind": "NodeClaim",
    "metadata": {"name": "default-abcde", "labels": {"karpenter.sh/nodepool": "default"}},
    "spec": {
        "requirements": [
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large", "m5a.large"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"], "minValues": 1},
        ],
        "resources": {"requests": {"cpu": "1500m", "memory": "2Gi", "pods": 3}},
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
        "taints": [{"key": "example.com/dedicated", "value": "batch", "effect": "NoSchedule"}],
        "expireAfter": "Never",
        "terminationGracePeriod": "1h30m",
    },
    "status": {
        "nodeName": "ip-10-0-0-1.ec2.internal",
        "providerID": "aws:///us-east-1a/i-0123456789abcdef0",
        "imageID": "ami-0123456789abcdef0",
        "capacity": {"cpu": "2", "memory": "7910Mi"},
        "allocatable": {"cpu": "1930m", "memory": "7220Mi"},
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "Ready", "lastTransitionTime": "2024-01-01T00:00:00Z"}
        ],
    },
}


def test_nodeclaim_validates_against_its_crd() -> None:
    schema = _schema("NodeClaim")
    assert validate(schema, NODECLAIM) == []
    NodeClaim.model_validate(NODECLAIM)
    dumped = NodeClaim.model_validate(NODECLAIM).model_dump(mode="json", by_alias=True, exclude_none=True)
    assert validate(schema, dumped) == []


# ---------------------------------------------------------------------------------------------
# Bad manifests fail


def _first(kind: str) -> dict[str, Any]:
    return copy.deepcopy(next(doc for _, doc in EXAMPLE_DOCS if doc["kind"] == kind))


def test_bad_nodepool_fails_validation() -> None:
    doc = _first("NodePool")
    doc["spec"]["disruption"] = {"consolidationPolicy": "WhenIdle", "consolidateAfter": "5 minutes"}
    del doc["spec"]["template"]["spec"]["nodeClassRef"]
    doc["spec"]["template"]["spec"]["requirements"][0]["operator"] = "Among"
    doc["spec"]["weight"] = 101
    doc["spec"]["limits"] = {"cpu": "lots"}
    doc["spec"]["template"]["spec"]["expireAfter"] = "30d"
    doc["spec"]["replica"] = 1
    errors = validate(_schema("NodePool"), doc)
    expected = [
        "spec.disruption.consolidationPolicy: unsupported value 'WhenIdle'",
        "spec.disruption.consolidateAfter: '5 minutes' does not match",
        "spec.template.spec: missing required field 'nodeClassRef'",
        "spec.template.spec.requirements[0].operator: unsupported value 'Among'",
        "spec.weight: 101 above maximum 100",
        "spec.limits.cpu: 'lots' does not match",
        "spec.template.spec.expireAfter: '30d' does not match",
        "spec.replica: unknown field",
    ]
    for message in expected:
        assert any(e.startswith(message) for e in errors), (message, errors)
    assert len(errors) == len(expected), errors


def test_bad_ec2nodeclass_fails_validation() -> None:
    doc = _first("EC2NodeClass")
    doc["spec"]["amiFamily"] = "Ubuntu"
    doc["spec"]["subnetSelectorTerms"] = []
    del doc["spec"]["securityGroupSelectorTerms"]
    doc["spec"]["metadataOptions"] = {"httpTokens": "sometimes", "httpPutResponseHopLimit": 0}
    doc["spec"]["blockDeviceMappings"] = [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "100Mi"}}]
    errors = validate(_schema("EC2NodeClass"), doc)
    expected = [
        "spec.amiFamily: unsupported value 'Ubuntu'",
        "spec.subnetSelectorTerms: fewer than 1 items",
        "spec: missing required field 'securityGroupSelectorTerms'",
        "spec.metadataOptions.httpTokens: unsupported value 'sometimes'",
        "spec.metadataOptions.httpPutResponseHopLimit: 0 below minimum 1",
        "spec.blockDeviceMappings[0].ebs.volumeSize: '100Mi' does not match",
    ]
    for message in expected:
        assert any(e.startswith(message) for e in errors), (message, errors)
    assert len(errors) == len(expected), errors


def test_bad_nodeclaim_fails_validation() -> None:
    doc = copy.deepcopy(NODECLAIM)
    doc["spec"]["taints"][0]["effect"] = "NoWay"
    doc["spec"]["resources"]["requests"]["cpu"] = 0.5  # a float is neither int nor string
    doc["status"]["conditions"][0]["status"] = "Maybe"
    errors = validate(_schema("NodeClaim"), doc)
    assert any(e.startswith("spec.taints[0].effect: unsupported value 'NoWay'") for e in errors), errors
    assert any(e.startswith("spec.resources.requests.cpu: must be an integer or a string") for e in errors), errors
    assert any(e.startswith("status.conditions[0].status: unsupported value 'Maybe'") for e in errors), errors
    assert len(errors) == 3, errors


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("spec.disruption.budgets.[].nodes", "150%"),
        ("spec.disruption.budgets.[].duration", "10s"),
        ("spec.disruption.budgets.[].schedule", "every day"),
        ("spec.template.spec.requirements.[].key", "Example.com/Team"),
        ("spec.template.spec.taints.[].key", ""),
        ("spec.template.metadata.labels.{}", "has spaces"),
        ("spec.template.spec.nodeClassRef.group", "karpenter.k8s.aws/v1"),
    ],
)
def test_patterns_reject_what_the_models_reject(path: str, value: Any) -> None:
    assert validate(_at(_schema("NodePool"), path), value) != []


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("spec.disruption.budgets.[].nodes", "100%"),
        ("spec.disruption.budgets.[].nodes", 5),
        ("spec.disruption.budgets.[].duration", "1h30m"),
        ("spec.disruption.budgets.[].schedule", "@daily"),
        ("spec.disruption.budgets.[].schedule", "0 9 * * mon-fri"),
        ("spec.disruption.consolidateAfter", "Never"),
        ("spec.template.spec.taints.[].value", ""),
        ("spec.template.spec.taints.[].value", "example.com/true"),
        ("spec.limits.{}", "1.5Gi"),
        ("spec.limits.{}", 1000),
    ],
)
def test_patterns_accept_what_the_models_accept(path: str, value: Any) -> None:
    assert validate(_at(_schema("NodePool"), path), value) == []


def _undocumented(schema: dict[str, Any], path: str = "") -> list[str]:
    missing = []
    for key, sub in (schema.get("properties") or {}).items():
        if not sub.get("description"):
            missing.append(f"{path}.{key}")
        missing += _undocumented(sub, f"{path}.{key}")
    for key, suffix in (("items", "[]"), ("additionalProperties", "{}")):
        if isinstance(schema.get(key), dict):
            missing += _undocumented(schema[key], path + suffix)
    return missing


@pytest.mark.parametrize("kind", ["NodePool", "NodeClaim", "EC2NodeClass"])
def test_every_field_has_a_description(kind: str) -> None:
    """What `kubectl explain` shows: no field without one (add it to FIELD_DOCS in tools/gen_crds.py).
    The root metadata stays bare (a structural schema may not say more about it)."""
    assert _undocumented(_schema(kind)) == [".metadata"]


def test_field_docs_name_real_fields() -> None:
    for (model, alias), doc in gen_crds.FIELD_DOCS.items():
        aliases = {field.alias or name for name, field in model.model_fields.items()}
        assert alias in aliases, f"{model.__name__}.{alias}"
        assert doc.endswith("."), f"{model.__name__}.{alias}: {doc!r}"
