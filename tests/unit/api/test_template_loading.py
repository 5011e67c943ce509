"""Documents that repeat a shape (``manifests._template_documents``) load as the whole stream's parse loads them.

Every stream is compared with ``yaml.load_all`` and PyYAML's SafeLoader (libyaml's and the pure-Python one):
the same values of the same types, the same sharing (aliases) and recursion, document by document; streams the
split cannot be sure of, and any YAML error, give None (the caller then parses the stream as before).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeflow.api import manifests
from nodeflow.api.manifests import ManifestError, load_manifests


class _PurePythonFast(manifests._Faster, yaml.SafeLoader):
    """``_FastLoader`` where PyYAML has no libyaml."""


LOADERS = {"libyaml": (manifests._SafeLoader, manifests._FastLoader), "python": (yaml.SafeLoader, _PurePythonFast)}

# Values a slot line can hold, each resolved by its text: strings, and what YAML 1.1 reads as ints, floats, bools,
# nulls and dates.
VALUES = [
    "web-0",
    "123",
    "0x1F",
    "0o17",
    "017",
    "1_000",
    "1.5",
    "6.8e+5",
    "1e3",
    "yes",
    "Off",
    "TRUE",
    "y",
    "null",
    "Null",
    "2026-11-24",
    "500m",
    "1Gi",
    "v1.2.3",
    "a_b",
    "x.y-z",
]


def _pod(name: str, app: str, cpu: str) -> str:
    return (
        f"apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: shop\n  labels:\n    app: {app}\n"
        f"spec:\n  containers:\n  - name: app\n    image: nginx:1.27\n    resources:\n      requests:\n"
        f"        cpu: {cpu}\n        memory: 1Gi\n"
    )


def _shapes(value: str, i: int) -> list[str]:
    """One document per tricky shape, its varying parts filled with ``value`` and ``i``."""
    return [
        _pod(f"pod-{i}", value, value),
        # flow style on one line (no slot), and a flow mapping over lines (its last line is a slot line)
        f"kind: Pod\nmetadata: {{name: flow-{i}, labels: {{app: {value}}}}}\nspec: {{\n  nodeName: {value}\n}}\n",
        "kind: Pod\nlist: [\n  a: 1,\n  b: " + value + "\n]\n",
        # slot-like lines in a literal and a folded block scalar, in a quoted and a plain multi-line string
        f"kind: ConfigMap\nmetadata:\n  name: cm-{i}\ndata:\n  script: |\n    name: {value}\n    kind: x\n"
        f"  folded: >\n    name: {value}\n\n    more: text\n",
        f"kind: ConfigMap\nnote: \"first\n  name: {value}\n  last\"\nsingle: 'a\n  name: {value}'\n",
        f"kind: ConfigMap\ndescription: first-{i}\n  second line\nafter: {value}\n",
        # comments everywhere, quoted names, a trailing comment on a value (not a slot)
        f"# leading comment\nkind: Pod  # kind\nmetadata:\n  # name: not-this\n  name: 'quoted-{i}'\n"
        f'  namespace: "{value}"\n  uid: u-{i} # trailing\n  labels:\n    app: {value}\n# closing\n',
        # anchors: a slot under an anchored mapping (shared by the alias), a recursive mapping
        f"kind: Deployment\nspec:\n  selector:\n    matchLabels: &labels\n      app: {value}\n"
        f"  template:\n    metadata:\n      labels: *labels\n  replicas: {i}\n",
        f"kind: X\nroot: &r\n  name: {value}\n  self: *r\n  list: &l [1, *l]\n",
        # merge keys copy a slot value: never reused, parsed as is
        f"kind: X\nbase: &b\n  cpu: {value}\nderived:\n  <<: *b\n  memory: 2Gi\n",
        # duplicate keys: the first value is dropped
        f"kind: X\nmetadata:\n  name: first-{i}\n  name: {value}\n",
        # tags on parents and values, sets, ordered maps, binary, timestamps with a time (not slots)
        f"kind: X\nmetadata: !!map\n  name: {value}\nexplicit: !!str 12\nat: 2026-11-24T00:00:00Z\n"
        f"bin: !!binary aGVsbG8=\nset: !!set {{a, b}}\n",
        f"kind: X\nordered: !!omap\n  - a: {value}\n  - b: 2\n",
        # keys with dots and slashes, 4-space indentation, sequences of mappings, nested sequences
        f"kind: X\nmetadata:\n    labels:\n        app.kubernetes.io/name: {value}\n        k8s.io/x_y: z-{i}\n"
        f"items:\n- name: {value}\n  port: {i}\n-   name: other\n- - nested: {value}\n",
        # a value that contains the placeholder's text, and a key that does
        f"kind: X\nname: __nodeflow_slot_0__\nother: {value}\n",
        f"kind: X\n__nodeflow_slot_1__: {value}\n",
        # non-string keys, a document that is a plain scalar, a list, an empty mapping
        f"1: one\ntrue: {value}\nnull: x\n",
        f"plain-{i}\n",
        f"- {value}\n- b: {value}\n",
        "{}\n",
    ]


def _json_documents() -> list[str]:
    """JSON documents (kubectl's 4-space indents, one line, arrays) with the numbers, escapes and characters YAML
    1.1 reads otherwise than JSON, or refuses: those leave the document to YAML."""
    pods = [
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"j-{i}", "labels": {"app": "web"}}, "spec": {}}
        for i in range(3)
    ]
    documents = [json.dumps(pod, indent=4) + "\n" for pod in pods]
    documents += [
        '{"kind": "X", "floats": [1.5, -0.25, 1.5e+3, 2.0E-2], "ints": [0, -0, 12345678901234567890123]}\n',
        '{"kind": "X", "exponents": [1e5, 1.5e3, 2E2]}\n',  # strings in YAML 1.1
        '{"kind": "X", "escapes": "a\\/b \\u00e9 \\n \\t \\" \\\\ \\b \\f \\u0000"}\n',
        '{"kind": "X", "key": 1, "key": 2, "nested": [[], {}, [{"a": null, "b": true, "c": false}]]}\n',
        '{"kind": "X", "text": "caf\u00e9 \u65e5\u672c"}\n',  # raw non-ASCII
        "# a comment first: YAML only\n" + json.dumps(pods[0]) + "\n",
        '[1, "two", {"three": 3}]\n',
        '  {"kind": "X", "NaN": "NaN", "values": ["Infinity", "yes", "on", "2026-11-24", "0x1F"]}\n',
    ]
    return documents


def _list(items: list[str], indent: str = "") -> str:
    """A ``kind: List`` document as ``kubectl get -o yaml`` writes it: each item (block YAML) an entry of
    ``items:``, indented by ``indent`` more."""
    entries = "".join(indent + "- " + item.rstrip("\n").replace("\n", "\n" + indent + "  ") + "\n" for item in items)
    return f'apiVersion: v1\nitems:\n{entries}kind: List\nmetadata:\n  resourceVersion: ""\n'


def _stream(documents: list[str], start: bool) -> str:
    text = "---\n".join(doc for doc in documents if doc)
    return ("---\n" if start else "") + text


STREAMS = {
    "repeated shapes": _stream([doc for i, value in enumerate(VALUES) for doc in _shapes(value, i)], start=False),
    "explicit start": _stream([doc for i, value in enumerate(VALUES[:6]) for doc in _shapes(value, i)], start=True),
    "empty documents": "# only a comment\n---\n---\n# a comment\n---\n" + _pod("a", "b", "1") + "---\n",
    "no newline at the end": _pod("a", "b", "1") + "---\n" + _pod("c", "d", "2").rstrip("\n"),
    "ends with a separator": _pod("a", "b", "1") + "---",
    "pods dump": yaml.safe_dump_all(
        [
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p-{i}", "labels": {"app": f"a{i % 3}"}}}
            for i in range(50)
        ],
        sort_keys=False,
    ),
    "many shapes": "".join(f"---\nk{i}: {i}\n" for i in range(100)),
    "deep document": _pod("a", "b", "1") + "---\na: " + "[" * 1500 + "]" * 1500 + "\n",
    "JSON documents": _stream(_json_documents(), start=False),
    "JSON documents with YAML": _stream([*_json_documents(), *_shapes("web", 1)], start=True),
    "List": _list([_pod(f"p-{i}", "web", str(i)) for i in range(5)]),
    "List, indented entries": _list([_pod(f"p-{i}", "web", "1") for i in range(5)], indent="  "),
    "List of every shape": _list(  # (anchors are one document's: an entry's may not repeat another's)
        [doc for i, value in enumerate(VALUES[:4]) for doc in _shapes(value, i) if i == 0 or "&" not in doc]
    ),
    "List then documents": _list([_pod(f"p-{i}", "web", "1") for i in range(3)]) + "---\n" + _pod("q", "w", "2"),
    "List, items last": "kind: List\napiVersion: v1\nitems:\n- a: 1\n\n- b: |\n    text\n\n    more\n- c: 3\n",
    "List, alias across entries": _list(["a: &x 1\n", "b: *x\n", "c: 2\n"]),
    "List, anchors in entries": _list(["a: &x {k: v}\nb: *x\n", "a: &y {k: w}\nb: *y\n"]),
    "List, entry cut by a quoted string": _list(["a: 1\n", 'b: "x\n--- y"\n', "c: 3\n"]),
    "List, comment at column 0": "apiVersion: v1\nitems:\n- a: 1\n# between\n- b: 2\nkind: List\n",
    "List, entries not all mappings": "items:\n- a: 1\n- plain\n- |\n  block\n- - nested\n- b: 2\nkind: List\n",
    "List, JSON entries": _list(["a: 1\n", '{"b": 2, "c": [1.5, 1e5]}\n', "d: 4\n"]),
    "List, duplicate items key": "items:\n- a: 1\n- b: 2\nitems: later\nkind: List\n",
    "List in a List": _list([_list(["a: 1\n", "b: 2\n"]), "c: 3\n"]),
}

# Streams whose split is not certain, or that are not valid YAML: the stream parse decides.
REFUSED = {
    "document end": _pod("a", "b", "1") + "...\n---\n" + _pod("c", "d", "2"),
    "directive": "%YAML 1.1\n---\n" + _pod("a", "b", "1"),
    "content after ---": "--- " + _pod("a", "b", "1") + "--- |\n  text\n",
    "comment after ---": _pod("a", "b", "1") + "--- # next\n" + _pod("c", "d", "2"),
    "longer separator": _pod("a", "b", "1") + "----\n",
    "CRLF": _pod("a", "b", "1").replace("\n", "\r\n"),
    "NEL": "a: 1\x85b: 2\n",
    "BOM": "\ufeff" + _pod("a", "b", "1"),
    "syntax error": _pod("a", "b", "1") + "---\nkind: [\n---\n" + _pod("c", "d", "2"),
    "unknown alias": _pod("a", "b", "1") + "---\nkind: *missing\n",
    "unknown tag": _pod("a", "b", "1") + "---\nkind: !custom x\n",
    "bad date": _pod("a", "b", "1") + "---\nkind: Pod\ncreated: 2026-13-45\n",
    "quoted separator": "a: 'x\n---\ny'\n",
    "malformed JSON document": json.dumps({"kind": "Pod"}) + "\n---\n" + '{"kind": "Pod",\n  "metadata": {\n',
    "JSON with DEL": '{"kind": "X", "a": "\x7f"}\n',  # JSON reads it, YAML refuses the character
    "List with a syntax error": _list(["a: 1\n", "b: [\n", "c: 3\n"]),
    "List, an anchor in two entries": _list(["a: &x {k: v}\nb: *x\n", "a: &x {k: w}\nb: *x\n"]),
}


def _layout(documents: list[Any]) -> list[tuple[Any, ...]]:
    """Each value with its path and type; containers numbered by identity (aliases and recursion show)."""
    seen: dict[int, int] = {}
    out: list[tuple[Any, ...]] = []

    def walk(node: Any, path: tuple[str, ...]) -> None:
        if type(node) in (dict, list):
            if id(node) in seen:
                out.append((path, "alias", seen[id(node)]))
                return
            seen[id(node)] = len(seen)
            out.append((path, type(node).__name__, seen[id(node)]))
            items = node.items() if type(node) is dict else enumerate(node)
            for key, value in items:
                walk(value, (*path, f"{type(key).__name__}:{key!r}"))
        else:
            out.append((path, type(node).__name__, repr(node)))

    for number, document in enumerate(documents):
        seen.clear()  # no alias crosses documents
        walk(document, (str(number),))
    return out


def _reference(text: str, loader: Any) -> list[Any]:
    return list(yaml.load_all(text, Loader=loader))


@pytest.mark.parametrize("loaders", sorted(LOADERS))
@pytest.mark.parametrize("name", sorted(STREAMS))
def test_shapes_load_what_the_stream_loads(name: str, loaders: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if name == "deep document" and loaders == "python":
        pytest.skip("PyYAML's pure-Python parser takes seconds here; the deep path is the same with libyaml")
    reference, fast = LOADERS[loaders]
    text = STREAMS[name]
    parsed: list[int] = []
    shape = manifests._shape

    def counting(parts: list[str], count: int, loader: Any) -> Any:
        parsed.append(count)
        return shape(parts, count, loader)

    monkeypatch.setattr(manifests, "_shape", counting)
    try:
        want = _reference(text, reference)
    except RecursionError:  # too deep for PyYAML's constructor: too deep for the shapes too
        assert manifests._template_documents(text, fast) is None
        return
    got = manifests._template_documents(text, fast)
    if name == "many shapes":  # every document its own shape: the stream is parsed as a whole
        assert got is None
        assert len(parsed) == manifests._SHAPES_BEFORE_GIVING_UP
        return
    assert got is not None
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20000))  # the layouts of deep documents recurse
    try:
        assert _layout(got) == _layout(want)
    finally:
        sys.setrecursionlimit(limit)
    if name == "repeated shapes":  # the shapes with slots are parsed once, the others once per value
        assert len(parsed) < len(got) / 2
    if name == "pods dump":  # names and labels differ, nothing else: one parse
        assert parsed == [4]  # apiVersion, kind, name, app
    if name == "JSON documents":  # by the JSON scanner, but for the exponents and the comment: YAML's
        assert len(parsed) == 2
    if name == "List":  # entry by entry, none of the List whole: the empty text before the first entry, the
        assert sorted(parsed) == [0, 8, 8]  # entries' shape (8 plain values), the last one's (no line break after it)


@pytest.mark.parametrize("loaders", sorted(LOADERS))
@pytest.mark.parametrize("name", sorted(REFUSED))
def test_uncertain_streams_are_left_to_the_stream_parse(name: str, loaders: str) -> None:
    assert manifests._template_documents(REFUSED[name], LOADERS[loaders][1]) is None


def test_reused_shapes_are_fresh_objects_with_their_own_values() -> None:
    text = _stream([_pod(f"p-{i}", "web", "1") for i in range(3)], start=False)
    docs = manifests._template_documents(text, manifests._FastLoader)
    assert docs is not None
    assert [doc["metadata"]["name"] for doc in docs] == ["p-0", "p-1", "p-2"]
    assert docs[0]["spec"] is not docs[1]["spec"]
    docs[0]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2"
    assert docs[1]["spec"]["containers"][0]["resources"]["requests"]["cpu"] == 1
    anchored = manifests._template_documents(STREAMS["repeated shapes"], manifests._FastLoader)
    assert anchored is not None
    deployments = [doc for doc in anchored if isinstance(doc, dict) and doc.get("kind") == "Deployment"]
    assert len(deployments) == len(VALUES)
    for doc in deployments:
        assert doc["spec"]["template"]["metadata"]["labels"] is doc["spec"]["selector"]["matchLabels"]


def test_load_manifests_gives_the_same_problems_and_exceptions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each refused stream and each stream above, as a file: the fast path reports (or raises) what the reference
    path (``_FAST = False``, the whole stream with SafeLoader) reports."""

    def outcome(path: Path) -> Any:
        try:
            loaded = load_manifests([path])
        except ManifestError as exc:
            return ("problems", exc.problems)
        except (ValueError, RecursionError) as exc:  # a bad date, a too deep document: not a ManifestError today
            return ("raised", type(exc).__name__, str(exc))
        return ("loaded", [pod.model_dump(mode="json") for pod in loaded.pods], [str(s) for s in loaded.skipped])

    for number, (name, text) in enumerate({**STREAMS, **REFUSED}.items()):
        path = tmp_path / f"case{number}.yaml"
        path.write_bytes(text.encode("utf-8"))
        fast = outcome(path)
        monkeypatch.setattr(manifests, "_FAST", False)
        try:
            reference = outcome(path)
        finally:
            monkeypatch.setattr(manifests, "_FAST", True)
        assert fast == reference, name


@pytest.mark.parametrize("loaders", sorted(LOADERS))
@pytest.mark.parametrize(
    "document",
    [
        '{"kind": "X", "pair": "\\ud83d\\ude00"}\n',  # one character in JSON, two lone surrogates in PyYAML, refused by libyaml
        '{"kind": "X",\t"tab": 1}\n',  # a tab: PyYAML's own parser refuses it, libyaml reads it
    ],
)
def test_json_that_one_yaml_parser_refuses_is_read_as_yaml(loaders: str, document: str) -> None:
    """JSON documents one of PyYAML's parsers reads and the other refuses: YAML decides."""
    reference, fast = LOADERS[loaders]
    text = json.dumps({"kind": "Pod", "metadata": {"name": "p"}}) + "\n---\n" + document
    try:
        want = _reference(text, reference)
    except yaml.YAMLError:
        assert manifests._template_documents(text, fast) is None
        return
    got = manifests._template_documents(text, fast)
    assert got is not None
    assert _layout(got) == _layout(want)
