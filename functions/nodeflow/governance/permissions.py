"""nodeflow's own permissions as data, for the governance record: the Lambda roles' IAM statements
(``infra.grants``: the same table tests/infra checks against the synthesized stack; no CDK) and the Kubernetes RBAC
(``infra/cluster/controller-rbac.yaml``, the groups of ``infra.cluster_rbac``, ``agent/manifests/20-rbac.yaml``).

They live in the repository next to the code (``infra/`` beside ``functions/``): when that is not there (an
installed package, a Lambda asset) ``load_permissions`` says so in ``Permissions.error`` instead of failing.

Must not touch: the grants themselves (``infra/``): this only reads them as data.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import yaml

from nodeflow.governance.record import Permissions

__all__ = ["REPO_ROOT", "load_permissions"]

REPO_ROOT = Path(__file__).resolve().parents[3]


def _rules(doc: dict[str, Any]) -> list[dict[str, list[str]]]:
    return [
        {
            "apiGroups": [str(g) for g in rule.get("apiGroups") or ()],
            "resources": [str(r) for r in rule.get("resources") or ()],
            "verbs": [str(v) for v in rule.get("verbs") or ()],
        }
        for rule in doc.get("rules") or ()
    ]


def _roles(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(ClusterRoles, Roles) of a multi-document RBAC manifest."""
    cluster_roles: list[dict[str, Any]] = []
    roles: list[dict[str, Any]] = []
    for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
        if not isinstance(doc, dict):
            continue
        meta = doc.get("metadata") or {}
        if not isinstance(meta, dict) or "name" not in meta:
            raise ValueError(f"{path}: document {i}: metadata.name is missing")
        if doc.get("kind") == "ClusterRole":
            cluster_roles.append({"name": meta["name"], "rules": _rules(doc)})
        elif doc.get("kind") == "Role":
            roles.append({"namespace": meta.get("namespace", "default"), "name": meta["name"], "rules": _rules(doc)})
    return cluster_roles, roles


def load_permissions(root: Path = REPO_ROOT) -> Permissions:
    """The permissions of the nodeflow checkout at ``root`` (``Permissions.error`` when they cannot be read)."""
    infra = root / "infra"
    if not (infra / "grants.py").is_file():
        return Permissions(error=f"infra/ is not next to this nodeflow ({infra} not found): run from a checkout")
    added = str(root) not in sys.path
    if added:
        sys.path.insert(0, str(root))
    try:
        grants = importlib.import_module("infra.grants")
        cluster_rbac = importlib.import_module("infra.cluster_rbac")
        lambdas = [
            {
                "function": g.function,
                "description": g.description,
                "uses": list(g.uses),
                "statements": [s.to_json() for s in g.grants],
                "unknownUses": list(g.unknown_uses),
            }
            for g in grants.lambda_grants()
        ]
        cluster_roles, roles = _roles(cluster_rbac.CONTROLLER_RBAC)
        agent_roles, _ = _roles(root / "agent" / "manifests" / "20-rbac.yaml")
        kubernetes = {
            "functionGroups": {k: list(v) for k, v in sorted(cluster_rbac.FUNCTION_GROUPS.items())},
            "accessPolicies": {
                k: {"policy": policy, "when": when}
                for k, (policy, when) in sorted(getattr(cluster_rbac, "ACCESS_POLICIES", {}).items())
            },
            "groups": dict(sorted(cluster_rbac.GROUPS.items())),
            "clusterRoles": sorted(cluster_roles, key=lambda r: r["name"]),
            "roles": sorted(roles, key=lambda r: (r["namespace"], r["name"])),
            "agent": {"clusterRoles": agent_roles},
        }
    except (ImportError, OSError, ValueError, yaml.YAMLError) as exc:
        return Permissions(error=f"infra could not be read: {exc}")
    finally:
        if added:
            sys.path.remove(str(root))
    return Permissions(lambdas=lambdas, kubernetes=kubernetes)
