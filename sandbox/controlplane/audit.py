"""What nodeflow asked the real API server, from the API server's own audit log, and which RBAC grants no request
used.

What it decides:

- ``apiserver_args(directory, users)``: the kube-apiserver flags of an audit log (JSON lines, written as each
  request is answered) that records the requests of ``users`` only, at the ``Metadata`` level (who, verb, API group,
  resource and subresource, namespace, name, answer code; no bodies): the handlers' impersonating token and the
  agent's ServiceAccount. Everything else (controllers, the tests' admin) is not logged, so the file stays small.
- ``AuditLog.requests(since)``: those requests as the authorizer saw them, after impersonation: the impersonated
  user and groups when there were, else the authenticated ones. ``mark()`` is where the log ends now.
- ``grants(manifests)``: every (subject, API group, resource, verb) the manifests' ClusterRoles and Roles give through
  their bindings (a Role's grants hold in its namespace only).
  ``unused_grants(manifests, requests)``: those no allowed request used (a grant matches a request when the rule's
  API group, resource (``pods/eviction`` for a subresource) and verb cover it, ``*`` included, and the request's
  user is the subject: a Group among its groups, a User of its name, a ServiceAccount's
  ``system:serviceaccount:<namespace>:<name>``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from sandbox.controlplane.launcher import ControlPlane

__all__ = ["AuditLog", "AuditedRequest", "Grant", "apiserver_args", "grants", "unused_grants"]


def apiserver_args(directory: Path, users: Sequence[str]) -> list[str]:
    """Write the audit policy into ``directory`` and return kube-apiserver's audit flags (the log is
    ``directory/audit.log``)."""
    policy = {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [{"level": "Metadata", "users": list(users)}, {"level": "None"}],
    }
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "audit-policy.yaml").write_text(json.dumps(policy))
    return [
        f"--audit-policy-file={directory / 'audit-policy.yaml'}",
        f"--audit-log-path={directory / 'audit.log'}",
        "--audit-log-format=json",
        "--audit-log-mode=blocking",
    ]


@dataclass(frozen=True)
class AuditedRequest:
    """One resource request, as authorized."""

    user: str
    groups: tuple[str, ...]
    verb: str
    api_group: str
    resource: str  # with its subresource: pods/eviction
    namespace: str
    name: str
    code: int

    @property
    def allowed(self) -> bool:
        return self.code not in (401, 403)


@dataclass(frozen=True)
class Grant:
    """One (subject, API group, resource, verb) of a ClusterRole bound to the subject."""

    subject: str  # Group/<name>, User/<name> or ServiceAccount/<namespace>/<name>
    api_group: str
    resource: str
    verb: str
    role: str  # ClusterRole/<name> or Role/<namespace>/<name>
    namespace: str = ""  # a Role's: the grant holds there only

    def covers(self, request: AuditedRequest) -> bool:
        kind, _, who = self.subject.partition("/")
        if kind == "Group":
            mine = who in request.groups
        elif kind == "ServiceAccount":
            mine = request.user == "system:serviceaccount:" + who.replace("/", ":", 1)
        else:
            mine = request.user == who
        return (
            mine
            and self.namespace in ("", request.namespace)
            and self.api_group in ("*", request.api_group)
            and self.resource in ("*", request.resource)
            and self.verb in ("*", request.verb)
        )


class AuditLog:
    """The audit log at ``path`` (``apiserver_args``)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def of(cls, plane: ControlPlane) -> AuditLog:
        """The audit log of a control plane started with ``apiserver_args`` in its ``extra_args``."""
        for arg in plane.extra_args.get("kube-apiserver", ()):
            if arg.startswith("--audit-log-path="):
                return cls(Path(arg.split("=", 1)[1]))
        raise ValueError("this control plane keeps no audit log: start it with audit.apiserver_args")

    def mark(self) -> int:
        """Where the log ends now: ``requests(since=mark)`` is what came after."""
        try:
            return os.path.getsize(self.path)
        except FileNotFoundError:
            return 0

    def requests(self, since: int = 0) -> list[AuditedRequest]:
        """The resource requests logged after offset ``since``, once each (a watch is logged when it starts and
        when it ends)."""
        try:
            with open(self.path, "rb") as f:
                f.seek(since)
                lines = f.read().splitlines()
        except FileNotFoundError:
            return []
        seen: set[str] = set()
        out = []
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:  # a line being written
                continue
            request = _request(event)
            if request is None or event.get("auditID") in seen:
                continue
            seen.add(str(event.get("auditID")))
            out.append(request)
        return out


def _request(event: Mapping[str, Any]) -> AuditedRequest | None:
    ref = event.get("objectRef")
    if not ref:  # discovery and other non-resource requests
        return None
    who = event.get("impersonatedUser") or event.get("user") or {}
    resource = str(ref.get("resource") or "")
    if ref.get("subresource"):
        resource += "/" + str(ref["subresource"])
    return AuditedRequest(
        user=str(who.get("username") or ""),
        groups=tuple(who.get("groups") or ()),
        verb=str(event.get("verb") or ""),
        api_group=str(ref.get("apiGroup") or ""),
        resource=resource,
        namespace=str(ref.get("namespace") or ""),
        name=str(ref.get("name") or ""),
        code=int((event.get("responseStatus") or {}).get("code") or 0),
    )


def _subject(subject: Mapping[str, Any]) -> str:
    if subject["kind"] == "ServiceAccount":
        return f"ServiceAccount/{subject['namespace']}/{subject['name']}"
    return f"{subject['kind']}/{subject['name']}"


def grants(manifests: Iterable[Path]) -> list[Grant]:
    """Every grant of the ClusterRoles and Roles that the manifests' bindings bind (resourceNames ignored: a rule
    limited to names is still used by a request for one of them)."""
    docs = [d for path in manifests for d in yaml.safe_load_all(path.read_text()) if d]
    roles: dict[str, list[dict[str, Any]]] = {}
    for d in docs:
        if d["kind"] in ("ClusterRole", "Role"):
            roles[_role_key(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"])] = d.get("rules") or []
    out = []
    for binding in (d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        namespace = binding["metadata"].get("namespace") or ""  # a RoleBinding grants in its namespace only
        ref = binding["roleRef"]
        role = _role_key(ref["kind"], namespace, ref["name"])
        for subject in binding.get("subjects") or []:
            for rule in roles.get(role, []):
                for group in rule.get("apiGroups") or []:
                    for resource in rule.get("resources") or []:
                        for verb in rule.get("verbs") or []:
                            out.append(Grant(_subject(subject), group, resource, verb, role, namespace))
    return out


def _role_key(kind: str, namespace: str | None, name: str) -> str:
    return f"Role/{namespace}/{name}" if kind == "Role" else f"ClusterRole/{name}"


def unused_grants(manifests: Iterable[Path], requests: Iterable[AuditedRequest]) -> list[Grant]:
    """The grants of ``manifests`` that no allowed request in ``requests`` used."""
    allowed = [r for r in requests if r.allowed]
    return [g for g in grants(manifests) if not any(g.covers(r) for r in allowed)]
