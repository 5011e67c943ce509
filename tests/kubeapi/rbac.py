"""Authentication and RBAC for the test API server, evaluated the way the real API server does.

- **Authentication**: the bearer token names a user (``Tokens``); no token is ``system:anonymous``; an unknown
  token is 401. ``Impersonate-User`` / ``Impersonate-Group`` headers (what ``kubectl --as --as-group`` sends)
  switch to that identity when the authenticated user may impersonate; ``Impersonate-Group`` without
  ``Impersonate-User`` is 400, impersonation by anyone else 403.
- **Authorization** (``Authorizer``): ClusterRoles, Roles, ClusterRoleBindings and RoleBindings loaded from
  manifests. A request is allowed when a rule of a role bound to the user, one of its groups or its service
  account matches its verb, API group, resource (``pods/eviction`` for a subresource), name and namespace
  (a RoleBinding grants only in its namespace). ``system:masters`` may do anything; everyone authenticated may
  read discovery and ``/version``; health endpoints are public. Anything else: 403 Forbidden with the message
  the real server writes.

Every decision names the grants that allowed it (binding, role, rule), so a test can tell which rules were
used and which were not.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.kubeapi.cluster import APIError

__all__ = [
    "ADMIN",
    "ANONYMOUS",
    "AUTHENTICATED",
    "MASTERS",
    "Attributes",
    "Authorizer",
    "Decision",
    "Grant",
    "Rule",
    "Tokens",
    "UserInfo",
    "forbidden",
    "request_attributes",
    "service_account_user",
]

MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
_NAMESPACE_SUBRESOURCES = ("status", "finalize")
# Non-resource paths: open to everyone (system:public-info-viewer) / to the authenticated (system:discovery).
_PUBLIC_PATHS = ("/healthz", "/livez", "/readyz", "/version", "/version/")
_DISCOVERY_PREFIXES = ("/api", "/apis", "/openapi")


@dataclass(frozen=True, slots=True)
class UserInfo:
    name: str
    groups: tuple[str, ...] = ()

    def describe(self) -> str:
        return f"{self.name} (groups {', '.join(self.groups) or 'none'})"


ADMIN = UserInfo("kubernetes-admin", (MASTERS, AUTHENTICATED))
ANONYMOUS = UserInfo("system:anonymous", (UNAUTHENTICATED,))


def service_account_user(namespace: str, name: str) -> UserInfo:
    """The identity a ServiceAccount's token authenticates as."""
    return UserInfo(
        f"system:serviceaccount:{namespace}:{name}",
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", AUTHENTICATED),
    )


@dataclass
class Tokens:
    """Bearer token -> user, and the users that may impersonate others."""

    users: dict[str, UserInfo] = field(default_factory=dict)
    impersonators: set[str] = field(default_factory=set)

    def add(self, token: str, user: UserInfo, *, impersonate: bool = False) -> None:
        self.users[token] = user
        if impersonate:
            self.impersonators.add(user.name)

    def authenticate(self, authorization: str | None, impersonate_user: str | None, groups: Sequence[str]) -> UserInfo:
        """The request's identity (raises the API's 401 / 400 / 403)."""
        user = ANONYMOUS
        if authorization:
            scheme, _, token = authorization.partition(" ")
            found = self.users.get(token.strip()) if scheme.lower() == "bearer" else None
            if found is None:
                raise APIError(401, "Unauthorized", "Unauthorized")
            user = found
        if impersonate_user is None and not groups:
            return user
        if impersonate_user is None:
            raise APIError(400, "BadRequest", f"requested {list(groups)} without impersonating a user")
        if MASTERS not in user.groups and user.name not in self.impersonators:
            raise APIError(
                403,
                "Forbidden",
                f'users "{impersonate_user}" is forbidden: User "{user.name}" cannot impersonate resource "users" '
                'in API group "" at the cluster scope',
                {"name": impersonate_user, "kind": "users"},
            )
        extra = () if impersonate_user == ANONYMOUS.name else (AUTHENTICATED,)
        return UserInfo(impersonate_user, tuple(dict.fromkeys([*groups, *extra])))


@dataclass(frozen=True, slots=True)
class Attributes:
    """What RBAC looks at: a resource request (verb, API group, resource, subresource, namespace, name) or a
    non-resource one (verb and path)."""

    verb: str
    path: str
    resource_request: bool
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str | None = None
    name: str | None = None

    @property
    def full_resource(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource

    def describe(self) -> str:
        if not self.resource_request:
            return f"{self.verb} {self.path}"
        where = f"namespace {self.namespace}" if self.namespace else "cluster scope"
        group = self.api_group or "core"
        return f"{self.verb} {group}/{self.full_resource}{' ' + self.name if self.name else ''} ({where})"


def request_attributes(method: str, path: str, query: Mapping[str, str]) -> Attributes:
    """The RBAC attributes of an HTTP request, parsed like the API server's request-info resolver."""
    parts = [p for p in path.split("/") if p]
    lowered = method.lower()
    if not parts or parts[0] not in ("api", "apis"):
        return Attributes(verb=lowered, path=path, resource_request=False)
    if parts[0] == "api":
        group, rest = "", parts[2:]
    else:
        group, rest = (parts[1] if len(parts) > 1 else ""), parts[3:]
    if not rest:  # discovery: /api, /api/v1, /apis/g, /apis/g/v
        return Attributes(verb=lowered, path=path, resource_request=False)
    namespace: str | None = None
    if rest[0] == "namespaces" and len(rest) >= 3 and not (len(rest) == 3 and rest[2] in _NAMESPACE_SUBRESOURCES):
        namespace, rest = rest[1], rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else ""
    if resource == "namespaces" and name is not None:
        namespace = name  # a namespace is in its own namespace, as far as RoleBindings go
    watch = query.get("watch") in ("true", "1")
    if method == "GET":
        verb = "watch" if watch else ("get" if name is not None else "list")
    elif method == "POST":
        verb = "create"
    elif method == "PUT":
        verb = "update"
    elif method == "PATCH":
        verb = "patch"
    elif method == "DELETE":
        verb = "delete" if name is not None else "deletecollection"
    else:
        verb = lowered
    if verb in ("list", "watch") and name is None:  # as the API server: an exact metadata.name field selector names it
        for term in (query.get("fieldSelector") or "").split(","):
            key, eq, value = term.partition("=")
            if eq and key.strip() == "metadata.name" and not key.endswith("!"):
                name = value.lstrip("=").strip() or None
    return Attributes(
        verb=verb,
        path=path,
        resource_request=True,
        api_group=group,
        resource=resource,
        subresource=subresource,
        namespace=namespace,
        name=name,
    )


@dataclass(frozen=True, slots=True)
class Rule:
    """One PolicyRule of a (Cluster)Role."""

    api_groups: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ()
    resource_names: tuple[str, ...] = ()
    non_resource_urls: tuple[str, ...] = ()

    @staticmethod
    def parse(doc: Mapping[str, Any], where: str) -> Rule:
        known = {"apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"}
        unknown = sorted(set(doc) - known)
        if unknown:
            raise ValueError(f"{where}: unknown rule fields {unknown}")
        if not doc.get("verbs"):
            raise ValueError(f"{where}: a rule needs verbs")

        def strings(key: str) -> tuple[str, ...]:
            value = doc.get(key) or []
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"{where}: {key} must be a list of strings, got {value!r}")
            return tuple(value)

        return Rule(
            strings("apiGroups"),
            strings("resources"),
            strings("verbs"),
            strings("resourceNames"),
            strings("nonResourceURLs"),
        )

    def matches(self, attrs: Attributes) -> bool:
        if "*" not in self.verbs and attrs.verb not in self.verbs:
            return False
        if not attrs.resource_request:
            return any(
                u == attrs.path or (u.endswith("*") and attrs.path.startswith(u[:-1])) for u in self.non_resource_urls
            )
        if "*" not in self.api_groups and attrs.api_group not in self.api_groups:
            return False
        full = attrs.full_resource
        sub_wildcard = f"*/{attrs.subresource}" if attrs.subresource else None
        if not any(r in ("*", full) or (sub_wildcard is not None and r == sub_wildcard) for r in self.resources):
            return False
        return not self.resource_names or (attrs.name is not None and attrs.name in self.resource_names)

    def expand(self) -> list[tuple[str, str, str]]:
        """(API group, resource, verb) for every combination the rule names (non-resource rules: none)."""
        return [(g, r, v) for g in self.api_groups for r in self.resources for v in self.verbs]


@dataclass(frozen=True, slots=True)
class Grant:
    """Where an allowed request's permission came from."""

    binding: str  # "ClusterRoleBinding/name" or "RoleBinding/namespace/name"
    role: str  # "ClusterRole/name" or "Role/namespace/name"
    subject: str  # "Group/name", "User/name", "ServiceAccount/namespace/name"
    rule: int  # index in the role's rules


@dataclass(frozen=True, slots=True)
class Decision:
    user: UserInfo
    attrs: Attributes
    allowed: bool
    grants: tuple[Grant, ...] = ()
    reason: str = ""  # "rbac", "system:masters", "discovery", "public", or why it was denied

    def describe(self) -> str:
        verdict = "allowed" if self.allowed else "DENIED"
        return f"{verdict}: {self.user.describe()} {self.attrs.describe()}"


@dataclass(frozen=True, slots=True)
class _Binding:
    kind: str
    name: str
    namespace: str | None  # RoleBinding's namespace; None for a ClusterRoleBinding
    role: str  # key in Authorizer.roles
    subjects: tuple[tuple[str, str], ...]  # ("Group"|"User", name); service accounts as users


class Authorizer:
    """The RBAC authorizer over a set of manifests (ClusterRole, Role, ClusterRoleBinding, RoleBinding)."""

    def __init__(self, documents: Iterable[Mapping[str, Any]]) -> None:
        self.roles: dict[str, tuple[Rule, ...]] = {}
        self.bindings: list[_Binding] = []
        pending: list[Mapping[str, Any]] = []
        for doc in documents:
            if not doc:
                continue
            kind = doc.get("kind")
            meta = doc.get("metadata") or {}
            if kind in ("ClusterRole", "Role"):
                key = _role_key(kind, meta.get("name", ""), meta.get("namespace") if kind == "Role" else None)
                if kind == "Role" and not meta.get("namespace"):
                    raise ValueError(f"{key}: a Role needs metadata.namespace")
                if key in self.roles:
                    raise ValueError(f"{key} is defined twice")
                rules = doc.get("rules") or []
                self.roles[key] = tuple(Rule.parse(r, f"{key} rule {i}") for i, r in enumerate(rules))
            elif kind in ("ClusterRoleBinding", "RoleBinding"):
                pending.append(doc)
        for doc in pending:
            self.bindings.append(self._binding(doc))

    @staticmethod
    def from_files(*paths: str | Path) -> Authorizer:
        docs: list[Mapping[str, Any]] = []
        for path in paths:
            docs.extend(d for d in yaml.safe_load_all(Path(path).read_text()) if d)
        return Authorizer(docs)

    def _binding(self, doc: Mapping[str, Any]) -> _Binding:
        kind = str(doc["kind"])
        meta = doc.get("metadata") or {}
        namespace = meta.get("namespace") if kind == "RoleBinding" else None
        where = f"{kind}/{namespace + '/' if namespace else ''}{meta.get('name', '')}"
        if kind == "RoleBinding" and not namespace:
            raise ValueError(f"{where}: a RoleBinding needs metadata.namespace")
        ref = doc.get("roleRef") or {}
        if ref.get("kind") == "Role" and kind == "RoleBinding":
            role = _role_key("Role", ref.get("name", ""), namespace)
        elif ref.get("kind") == "ClusterRole":
            role = _role_key("ClusterRole", ref.get("name", ""), None)
        else:
            raise ValueError(f"{where}: roleRef {ref!r} is not a ClusterRole (or a Role of a RoleBinding)")
        if role not in self.roles:
            raise ValueError(f"{where}: roleRef names {role}, which the manifests do not define")
        subjects: list[tuple[str, str]] = []
        for s in doc.get("subjects") or []:
            if s.get("kind") == "ServiceAccount":
                subjects.append(("User", f"system:serviceaccount:{s.get('namespace') or namespace}:{s['name']}"))
            elif s.get("kind") in ("Group", "User"):
                subjects.append((str(s["kind"]), str(s["name"])))
            else:
                raise ValueError(f"{where}: unknown subject {s!r}")
        return _Binding(kind, str(meta.get("name", "")), namespace, role, tuple(subjects))

    # ------------------------------------------------------------------ questions

    def authorize(self, user: UserInfo, attrs: Attributes) -> Decision:
        if MASTERS in user.groups:
            return Decision(user, attrs, True, reason=MASTERS)
        if not attrs.resource_request and attrs.verb == "get":
            if attrs.path in _PUBLIC_PATHS:
                return Decision(user, attrs, True, reason="public")
            if AUTHENTICATED in user.groups and attrs.path.startswith(_DISCOVERY_PREFIXES):
                return Decision(user, attrs, True, reason="discovery")
        grants = tuple(self._grants(user, attrs))
        if grants:
            return Decision(user, attrs, True, grants, reason="rbac")
        return Decision(user, attrs, False, reason="no RBAC rule allows it")

    def _grants(self, user: UserInfo, attrs: Attributes) -> Iterable[Grant]:
        for b in self.bindings:
            if b.namespace is not None and attrs.namespace != b.namespace:
                continue
            subject = next(
                (
                    s
                    for s in b.subjects
                    if (s[0] == "User" and s[1] == user.name) or (s[0] == "Group" and s[1] in user.groups)
                ),
                None,
            )
            if subject is None:
                continue
            for i, rule in enumerate(self.roles[b.role]):
                if rule.matches(attrs):
                    where = f"{b.namespace}/" if b.namespace else ""
                    yield Grant(f"{b.kind}/{where}{b.name}", b.role, f"{subject[0]}/{subject[1]}", i)

    def groups(self) -> set[str]:
        """Every group a binding names."""
        return {name for b in self.bindings for kind, name in b.subjects if kind == "Group"}

    def roles_of_group(self, group: str) -> list[tuple[_Binding, str]]:
        """(binding, role key) of every binding that names ``group``."""
        return [(b, b.role) for b in self.bindings if ("Group", group) in b.subjects]


def _role_key(kind: str, name: str, namespace: str | None) -> str:
    return f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"


def forbidden(user: UserInfo, attrs: Attributes) -> APIError:
    """The 403 the real API server answers (its message and details)."""
    if not attrs.resource_request:
        return APIError(403, "Forbidden", f'forbidden: User "{user.name}" cannot {attrs.verb} path "{attrs.path}"', {})
    qualified = f"{attrs.resource}.{attrs.api_group}" if attrs.api_group else attrs.resource
    target = f'{qualified} "{attrs.name}"' if attrs.name else qualified
    scope = f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
    message = (
        f'{target} is forbidden: User "{user.name}" cannot {attrs.verb} resource "{attrs.full_resource}" '
        f'in API group "{attrs.api_group}" {scope}'
    )
    details: dict[str, Any] = {"kind": attrs.resource}
    if attrs.name:
        details["name"] = attrs.name
    if attrs.api_group:
        details["group"] = attrs.api_group
    return APIError(403, "Forbidden", message, details)


class DecisionLog:
    """Thread-safe record of the decisions the server made while RBAC was on."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[Decision] = []

    def append(self, decision: Decision) -> None:
        with self._lock:
            self._items.append(decision)

    def items(self) -> list[Decision]:
        with self._lock:
            return list(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
