"""Server-side printing: ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io`` answers a meta.k8s.io/v1 Table.

Custom resources get their CRD version's ``additionalPrinterColumns`` (JSONPath evaluated on each object, ``date``
columns shown as ages); built-ins get the columns kubectl prints for them (nodes, pods, namespaces; NAME and AGE for
the rest).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from tests.kubeapi.cluster import APIError
from tests.kubeapi.resources import Obj, ResourceType

Cell = Any
Row = Callable[[Obj, datetime], list[Cell]]


def wants_table(accept: str) -> bool:
    """True when the first acceptable media type is a meta.k8s.io/v1 Table (kubectl get)."""
    for media in accept.split(","):
        params = [p.strip() for p in media.split(";")]
        if params[0] not in ("application/json", "*/*"):
            continue
        opts = dict(p.split("=", 1) for p in params[1:] if "=" in p)
        if opts.get("as") == "Table" and opts.get("g") == "meta.k8s.io" and opts.get("v") == "v1":
            return True
        if "as" not in opts:
            return False
    return False


def human_age(delta_seconds: float) -> str:
    """An age as kubectl shows it: 45s, 5m30s, 95m, 3h20m, 30h, 3d5h, 200d, 2y30d, 9y."""
    s = max(0, int(delta_seconds))
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = s // 3600
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    if h < 24 * 8:
        return f"{h // 24}d{h % 24}h" if h % 24 else f"{h // 24}d"
    days = h // 24
    if days < 365 * 2:
        return f"{days}d"
    if days < 365 * 8:
        return f"{days // 365}y{days % 365}d" if days % 365 else f"{days // 365}y"
    return f"{days // 365}y"


def _age(obj: Obj, now: datetime) -> str:
    ts = (obj.get("metadata") or {}).get("creationTimestamp")
    if not ts:
        return "<unknown>"
    created = datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return human_age((now - created).total_seconds())


# ------------------------------------------------------------------ JSONPath

_TOKEN = re.compile(r"""\.((?:\\.|[^.\[\\])+)|\[\?\(@\.([\w.\-/]+)\s*==\s*["']([^"']*)["']\)\]|\[(\d+|\*)\]""")


def jsonpath(obj: Any, expr: str) -> list[Any]:
    """The values a CRD column's JSONPath selects (fields with ``\\.`` escapes, ``[n]``, ``[*]``,
    ``[?(@.field=="value")]``). An expression outside that subset raises ValueError naming it."""
    pos, nodes = 0, [obj]
    expr = expr.strip()
    if expr.startswith("{") and expr.endswith("}"):
        expr = expr[1:-1]
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None:
            raise ValueError(f"unsupported JSONPath {expr!r} at offset {pos}")
        pos = m.end()
        out: list[Any] = []
        for node in nodes:
            if m.group(1) is not None:
                key = re.sub(r"\\(.)", r"\1", m.group(1))
                if isinstance(node, dict) and key in node:
                    out.append(node[key])
            elif m.group(2) is not None:
                if isinstance(node, list):
                    out.extend(
                        item for item in node if isinstance(item, dict) and str(item.get(m.group(2))) == m.group(3)
                    )
            elif m.group(4) == "*":
                out.extend(node if isinstance(node, list) else (node.values() if isinstance(node, dict) else []))
            elif isinstance(node, list) and int(m.group(4)) < len(node):
                out.append(node[int(m.group(4))])
        nodes = out
    return nodes


def _cell(values: list[Any], col_type: str, now: datetime) -> Cell:
    if not values:
        return None
    value = values[0]
    if col_type == "date" and isinstance(value, str):
        try:
            created = datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        except ValueError:
            return value
        return human_age((now - created).total_seconds())
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    if col_type in ("integer", "number", "boolean"):
        return value
    return value if isinstance(value, str) else json.dumps(value)


# ---------------------------------------------------------- built-in columns


def _col(name: str, col_type: str = "string", priority: int = 0, fmt: str = "") -> Obj:
    return {"name": name, "type": col_type, "format": fmt, "description": f"{name} column", "priority": priority}


def _node_status(node: Obj) -> str:
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = next((c.get("status") for c in conditions if c.get("type") == "Ready"), None)
    status = {"True": "Ready", "False": "NotReady"}.get(str(ready), "Unknown")
    if (node.get("spec") or {}).get("unschedulable"):
        status += ",SchedulingDisabled"
    return status


def _node_roles(node: Obj) -> str:
    roles = set()
    for key, value in ((node.get("metadata") or {}).get("labels") or {}).items():
        if key.startswith("node-role.kubernetes.io/"):
            roles.add(key.removeprefix("node-role.kubernetes.io/"))
        elif key == "kubernetes.io/role" and value:
            roles.add(value)
    return ",".join(sorted(r for r in roles if r)) or "<none>"


def _node_row(node: Obj, now: datetime) -> list[Cell]:
    status = node.get("status") or {}
    addresses = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    info = status.get("nodeInfo") or {}
    return [
        node["metadata"]["name"],
        _node_status(node),
        _node_roles(node),
        _age(node, now),
        info.get("kubeletVersion", ""),
        addresses.get("InternalIP", "<none>"),
        addresses.get("ExternalIP", "<none>"),
        info.get("osImage", "<unknown>"),
        info.get("kernelVersion", "<unknown>"),
        info.get("containerRuntimeVersion", "<unknown>"),
    ]


def _pod_status(pod: Obj) -> str:
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Unknown"
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        if state.get("waiting", {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif state.get("terminated"):
            terminated = state["terminated"]
            reason = terminated.get("reason") or (
                f"Signal:{terminated['signal']}"
                if terminated.get("signal")
                else f"ExitCode:{terminated.get('exitCode')}"
            )
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return str(reason)


def _pod_row(pod: Obj, now: datetime) -> list[Cell]:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for cs in statuses if cs.get("ready"))
    restarts = sum(int(cs.get("restartCount") or 0) for cs in statuses)
    gates = spec.get("readinessGates") or []
    return [
        pod["metadata"]["name"],
        f"{ready}/{len(spec.get('containers') or [])}",
        _pod_status(pod),
        str(restarts),
        _age(pod, now),
        status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        f"{len(gates)}/{len(gates)}" if gates else "<none>",
    ]


def _namespace_row(ns: Obj, now: datetime) -> list[Cell]:
    return [ns["metadata"]["name"], (ns.get("status") or {}).get("phase", ""), _age(ns, now)]


def _default_row(obj: Obj, now: datetime) -> list[Cell]:
    return [obj["metadata"]["name"], _age(obj, now)]


_NAME = _col("Name", fmt="name")
BUILTIN_COLUMNS: dict[tuple[str, str], tuple[list[Obj], Row]] = {
    ("", "nodes"): (
        [
            _NAME,
            _col("Status"),
            _col("Roles"),
            _col("Age"),
            _col("Version"),
            _col("Internal-IP", priority=1),
            _col("External-IP", priority=1),
            _col("OS-Image", priority=1),
            _col("Kernel-Version", priority=1),
            _col("Container-Runtime", priority=1),
        ],
        _node_row,
    ),
    ("", "pods"): (
        [
            _NAME,
            _col("Ready"),
            _col("Status"),
            _col("Restarts", "string"),
            _col("Age"),
            _col("IP", priority=1),
            _col("Node", priority=1),
            _col("Nominated Node", priority=1),
            _col("Readiness Gates", priority=1),
        ],
        _pod_row,
    ),
    ("", "namespaces"): ([_NAME, _col("Status"), _col("Age")], _namespace_row),
}


# --------------------------------------------------------------------- table


def _partial(obj: Obj) -> Obj:
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata") or {}}


def crd_columns(crd: Obj, version: str) -> list[Obj]:
    """The ``additionalPrinterColumns`` of a CRD version (Age on creationTimestamp when it declares none)."""
    for v in crd["spec"].get("versions") or []:
        if v.get("name") == version:
            cols = v.get("additionalPrinterColumns")
            if cols is None:
                return [{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]
            return list(cols)
    raise APIError(404, "NotFound", f"version {version} not served by {crd['metadata']['name']}")


def to_table(rt: ResourceType, objects: list[Obj], list_meta: Obj, now: datetime, crd: Obj | None) -> Obj:
    """A meta.k8s.io/v1 Table of ``objects`` (rows carry PartialObjectMetadata, as by default)."""
    if crd is not None:
        printer = crd_columns(crd, rt.version)
        columns = [_NAME] + [
            {
                "name": c["name"],
                "type": c.get("type", "string"),
                "format": c.get("format", ""),
                "description": c.get("description", ""),
                "priority": int(c.get("priority") or 0),
            }
            for c in printer
        ]

        def crd_row(obj: Obj, now: datetime) -> list[Cell]:
            return [obj["metadata"]["name"]] + [
                _cell(jsonpath(obj, c["jsonPath"]), c.get("type", "string"), now) for c in printer
            ]

        row: Row = crd_row
    else:
        columns, row = BUILTIN_COLUMNS.get((rt.group, rt.plural), ([_NAME, _col("Age")], _default_row))
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {k: v for k, v in list_meta.items() if k in ("resourceVersion", "continue")},
        "columnDefinitions": columns,
        "rows": [{"cells": row(obj, now), "object": _partial(obj)} for obj in objects],
    }
