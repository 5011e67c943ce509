"""An in-process Kubernetes API server over real HTTP, for tests and the demo.

The official ``kubernetes`` client talks to it unchanged. See ``tests/kubeapi/README.md`` for what is
supported.
"""

from __future__ import annotations

import json
import os
import select
import socket
import threading
from collections.abc import Callable
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

from tests.kubeapi.cluster import APIError, Cluster, Gone, bad_request, method_not_allowed
from tests.kubeapi.openapi import content_hash, group_version_document, gv_path, unknown_fields
from tests.kubeapi.rbac import ADMIN, Authorizer, Decision, DecisionLog, Tokens, forbidden, request_attributes
from tests.kubeapi.resources import Obj, ResourceType
from tests.kubeapi.table import to_table, wants_table

if TYPE_CHECKING:
    import kubernetes.client

SERVER_VERSION: Obj = {
    "major": "1",
    "minor": "33",
    "gitVersion": "v1.33.0-nodeflow-test",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.24.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}

_NOT_FOUND = APIError(404, "NotFound", "the server could not find the requested resource", {})
#: the token of ``api_client()`` and ``kubeconfig()``: a cluster admin (system:masters) when RBAC is on
ADMIN_TOKEN = "nodeflow-test"
_NAMESPACE_SUBRESOURCES = ("status", "finalize")
#: request bodies and answers the server does not speak (it serves JSON only)
PROTOBUF_TYPES = frozenset(
    {"application/vnd.kubernetes.protobuf", "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"}
)


def _verbs(rt: ResourceType) -> list[str]:
    return ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    wbufsize = 1 << 16  # headers and body in one segment; handle_one_request flushes
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # ---------------------------------------------------------------- plumbing

    def _send_json(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _json_body(self, raw: bytes) -> Any:
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError as e:
            raise bad_request(f"Object 'Kind' is missing in '{raw[:100]!r}': {e}") from None

    def _handle(self, method: str) -> None:
        url = urlsplit(self.path)
        path = unquote(url.path)
        self.server.kube.requests.append((method, path, url.query))
        raw = self._body() if method in ("POST", "PUT", "PATCH", "DELETE") else b""
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        try:
            self._media_types(method, raw)
            self._authorize(method, path, query)
            hook = self.server.kube.before_request
            if hook is not None:
                hook(method, path, query)
            self._route(method, path, query, raw)
        except APIError as e:
            self._send_json(e.code, e.status())
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:  # pragma: no cover - a bug in the test server should be visible, not a hang
            self._send_json(500, APIError(500, "InternalError", f"test API server error: {e!r}").status())

    def _media_types(self, method: str, raw: bytes) -> None:
        """JSON only: a protobuf body is refused (415) the way a server without that serializer refuses it, so
        client-go retries the request as JSON; an Accept allowing only protobuf gets 406."""
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        if raw and method in ("POST", "PUT") and ctype in PROTOBUF_TYPES:
            raise APIError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format ({ctype}) - accepted media types include: "
                "application/json, application/yaml",
            )
        accept = [m.split(";")[0].strip() for m in (self.headers.get("Accept") or "").split(",") if m.strip()]
        if accept and all(m in PROTOBUF_TYPES for m in accept):
            raise APIError(
                406,
                "NotAcceptable",
                f"only the following media types are accepted: application/json (not {', '.join(accept)})",
            )

    def _authorize(self, method: str, path: str, query: dict[str, str]) -> None:
        """With RBAC on: who is asking (token, impersonation headers), and may they (403 if not)."""
        kube = self.server.kube
        authorizer = kube.rbac
        if authorizer is None:
            return
        user = kube.tokens.authenticate(
            self.headers.get("Authorization"),
            self.headers.get("Impersonate-User"),
            self.headers.get_all("Impersonate-Group") or [],
        )
        attrs = request_attributes(method, path, query)
        decision = authorizer.authorize(user, attrs)
        kube.decisions.append(decision)
        if not decision.allowed:
            raise forbidden(user, attrs)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    # ----------------------------------------------------------------- routing

    def _route(self, method: str, path: str, query: dict[str, str], raw: bytes) -> None:
        kube = self.server.kube
        cluster = kube.cluster
        parts = [p for p in path.split("/") if p]
        if path in ("/healthz", "/readyz", "/livez"):
            data = b"ok"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if path == "/version" or path == "/version/":
            self._send_json(200, SERVER_VERSION)
            return
        if parts[:2] == ["openapi", "v3"]:
            self._only_get(method)
            doc = kube.openapi_v3("/".join(parts[2:]))
            if doc is None:
                raise _NOT_FOUND
            self._send_json(200, doc)
            return
        if not parts or parts[0] not in ("api", "apis"):
            raise _NOT_FOUND
        if parts[0] == "api":
            if len(parts) == 1:
                self._only_get(method)
                self._send_json(200, kube.discovery_core_versions())
                return
            group, version, rest = "", parts[1], parts[2:]
        else:
            if len(parts) == 1:
                self._only_get(method)
                self._send_json(200, kube.discovery_groups())
                return
            if len(parts) == 2:
                self._only_get(method)
                group_doc = kube.discovery_group(parts[1])
                if group_doc is None:
                    raise _NOT_FOUND
                self._send_json(200, group_doc)
                return
            group, version, rest = parts[1], parts[2], parts[3:]
        if not rest:
            self._only_get(method)
            resources = kube.discovery_resources(group, version)
            if resources is None:
                raise _NOT_FOUND
            self._send_json(200, resources)
            return
        namespace: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3 and not (len(rest) == 3 and rest[2] in _NAMESPACE_SUBRESOURCES):
            namespace, rest = rest[1], rest[2:]
        if len(rest) > 3:
            raise _NOT_FOUND
        rt = cluster.resource_type(group, version, rest[0])
        if rt is None:
            raise _NOT_FOUND
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if namespace is not None and not rt.namespaced:
            raise _NOT_FOUND
        if rt.namespaced and name is not None and namespace is None:
            raise _NOT_FOUND
        if sub is not None and not ((sub == "status" and rt.status_subresource) or sub in rt.extra_subresources):
            raise _NOT_FOUND
        if name is None:
            self._collection(method, rt, namespace, query, raw)
        elif sub in ("eviction", "binding"):
            if method != "POST":
                raise method_not_allowed()
            assert namespace is not None
            body = self._json_body(raw)
            if sub == "eviction":
                self._send_json(201, cluster.evict(namespace, name, body))
            else:
                self._send_json(201, cluster.bind(namespace, name, body))
        else:
            self._item(method, rt, namespace, name, sub, query, raw)

    def _only_get(self, method: str) -> None:
        if method != "GET":
            raise method_not_allowed()

    def _collection(
        self, method: str, rt: ResourceType, namespace: str | None, query: dict[str, str], raw: bytes
    ) -> None:
        cluster = self.server.kube.cluster
        if method == "GET":
            if query.get("watch") in ("true", "1"):
                self._watch(rt, namespace, query)
                return
            try:
                limit = int(query.get("limit") or 0)
            except ValueError:
                raise bad_request(f"invalid limit: {query.get('limit')}") from None
            listed = cluster.list_objects(
                rt,
                namespace,
                query.get("labelSelector", ""),
                query.get("fieldSelector", ""),
                limit,
                query.get("continue", ""),
            )
            if wants_table(self.headers.get("Accept") or ""):
                listed = self._table(rt, listed["items"], listed.get("metadata") or {})
            self._send_json(200, listed)
        elif method == "POST":
            if rt.namespaced and namespace is None:
                raise method_not_allowed()
            self._strict_fields(rt, query, raw)
            dry_run = query.get("dryRun") == "All"
            self._send_json(201, cluster.create(rt, namespace, self._json_body(raw), dry_run=dry_run))
        elif method == "DELETE":
            if rt.namespaced and namespace is None:
                raise method_not_allowed()
            self._send_json(
                200,
                cluster.delete_collection(
                    rt, namespace, query.get("labelSelector", ""), query.get("fieldSelector", "")
                ),
            )
        else:
            raise method_not_allowed()

    def _item(
        self,
        method: str,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        sub: str | None,
        query: dict[str, str],
        raw: bytes,
    ) -> None:
        cluster = self.server.kube.cluster
        dry_run = query.get("dryRun") == "All"
        if sub == "finalize":
            if method != "PUT":
                raise method_not_allowed()
            self._send_json(200, cluster.update(rt, namespace, name, self._json_body(raw)))
            return
        if method == "GET":
            if query.get("watch") in ("true", "1"):
                selector = f"metadata.name={name}"
                if query.get("fieldSelector"):
                    selector += "," + query["fieldSelector"]
                self._watch(rt, namespace, {**query, "fieldSelector": selector})
                return
            obj = cluster.get(rt, namespace, name)
            if wants_table(self.headers.get("Accept") or ""):
                obj = self._table(rt, [obj], obj["metadata"])
            self._send_json(200, obj)
        elif method == "PUT":
            self._strict_fields(rt, query, raw)
            self._send_json(
                200, cluster.update(rt, namespace, name, self._json_body(raw), subresource=sub, dry_run=dry_run)
            )
        elif method == "PATCH":
            ctype = self.headers.get("Content-Type") or ""
            self._send_json(200, cluster.patch(rt, namespace, name, ctype, raw, subresource=sub, dry_run=dry_run))
        elif method == "DELETE" and sub is None:
            options = self._json_body(raw) or {}
            if not isinstance(options, dict):
                raise bad_request("DeleteOptions must be a JSON object")
            if query.get("propagationPolicy"):
                options.setdefault("propagationPolicy", query["propagationPolicy"])
            code, body = cluster.delete(rt, namespace, name, options, dry_run=dry_run)
            self._send_json(code, body)
        else:
            raise method_not_allowed()

    def _strict_fields(self, rt: ResourceType, query: dict[str, str], raw: bytes) -> None:
        """``fieldValidation=Strict`` on a custom resource: fields its schema does not declare → 400 naming them
        (the default, like ``Ignore``, prunes them silently)."""
        if query.get("fieldValidation") != "Strict" or not rt.crd_name:
            return
        body = self._json_body(raw)
        if not isinstance(body, dict):
            return
        cluster = self.server.kube.cluster
        crd_rt = cluster.resource_type("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        assert crd_rt is not None
        crd = cluster.get(crd_rt, None, rt.crd_name)
        version: dict[str, Any] = next((v for v in crd["spec"]["versions"] if v["name"] == rt.version), {})
        schema = (version.get("schema") or {}).get("openAPIV3Schema") or {}
        unknown = unknown_fields(body, schema)
        if unknown:
            raise bad_request("strict decoding error: " + ", ".join(f'unknown field "{f}"' for f in unknown))

    def _table(self, rt: ResourceType, items: list[Obj], list_meta: Obj) -> Obj:
        cluster = self.server.kube.cluster
        crd = None
        if rt.crd_name:
            crd_rt = cluster.resource_type("apiextensions.k8s.io", "v1", "customresourcedefinitions")
            assert crd_rt is not None
            crd = cluster.get(crd_rt, None, rt.crd_name)
        return to_table(rt, items, list_meta, cluster._now(), crd)

    # ------------------------------------------------------------------- watch

    def _watch(self, rt: ResourceType, namespace: str | None, query: dict[str, str]) -> None:
        cluster = self.server.kube.cluster
        try:
            timeout = float(query.get("timeoutSeconds") or 1800)
        except ValueError:
            raise bad_request(f"invalid timeoutSeconds: {query.get('timeoutSeconds')}") from None
        events = cluster.watch(
            rt,
            namespace,
            query.get("labelSelector", ""),
            query.get("fieldSelector", ""),
            query.get("resourceVersion", ""),
            timeout,
            lambda: self.server.stopping or self._client_gone(),
            bookmarks=query.get("allowWatchBookmarks") in ("true", "1"),
            send_initial_events={"true": True, "false": False}.get(query.get("sendInitialEvents", "")),
        )
        # Parse selectors/resourceVersion before committing to a 200 (bad selectors answer 400).
        cluster.parse_selectors(rt, query.get("labelSelector", ""), query.get("fieldSelector", ""))
        rv = query.get("resourceVersion", "")
        if rv not in ("", "0"):
            try:
                int(rv)
            except ValueError:
                raise bad_request(f'invalid resource version: "{rv}"') from None
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.close_connection = True
        try:
            for type_, obj in events:
                self._chunk(json.dumps({"type": type_, "object": obj}).encode() + b"\n")
        except Gone as e:
            status = APIError(410, "Expired", e.message).status()
            self._chunk(json.dumps({"type": "ERROR", "object": status}).encode() + b"\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _client_gone(self) -> bool:
        """True once the watching client has closed its end (so idle watches do not linger until timeout)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, kube: KubeAPIServer) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.kube = kube
        self.stopping = False


class KubeAPIServer:
    """An in-process Kubernetes API server on 127.0.0.1 (ephemeral port) for tests and the demo.

    >>> server = KubeAPIServer().start()
    >>> api = kubernetes.client.CoreV1Api(server.api_client())
    """

    def __init__(self, history_size: int = 1000, now: Callable[[], datetime] | None = None) -> None:
        self.cluster = Cluster(history_size=history_size, now=now)
        self.requests: list[tuple[str, str, str]] = []
        #: called as hook(method, path, query) before each request; raise APIError to inject a failure
        self.before_request: Callable[[str, str, dict[str, str]], None] | None = None
        #: RBAC (``enable_rbac``): None accepts every request, with any or no token
        self.rbac: Authorizer | None = None
        self.tokens = Tokens()
        self.decisions = DecisionLog()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --------------------------------------------------------------- lifecycle

    def start(self) -> KubeAPIServer:
        if self._httpd is not None:
            return self
        self._httpd = _HTTPServer(self)
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="kubeapi", daemon=True)
        self._thread.start()
        return self

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("KubeAPIServer is not started")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._httpd.stopping = True
        self.cluster.close()
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None
        self._thread = None

    def __enter__(self) -> KubeAPIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def reset(self) -> None:
        """Drop all objects (registered CRDs stay), recreate the default namespaces, clear ``requests``; CEL
        admission is on again."""
        self.cluster.reset()
        self.cluster.cel_validation = True
        self.requests.clear()
        self.before_request = None
        self.disable_rbac()

    # ------------------------------------------------------------------- RBAC

    def enable_rbac(self, authorizer: Authorizer, tokens: Tokens | None = None) -> KubeAPIServer:
        """Authenticate and authorize every request from now on (``tests/kubeapi/rbac.py``). ``tokens`` adds to
        the admin token of ``api_client()`` / ``kubeconfig()``; every decision is kept in ``decisions``."""
        users = Tokens({ADMIN_TOKEN: ADMIN})
        if tokens is not None:
            users.users.update(tokens.users)
            users.impersonators |= tokens.impersonators
        self.tokens = users
        self.decisions.clear()
        self.rbac = authorizer
        return self

    def disable_rbac(self) -> None:
        """Accept every request again (``reset()`` does this too); the decisions made are kept until the next
        ``enable_rbac``."""
        self.rbac = None

    def denied(self) -> list[Decision]:
        """The requests RBAC refused since it was enabled."""
        return [d for d in self.decisions.items() if not d.allowed]

    # ------------------------------------------------------------------ setup

    def register_crd(self, crd: Obj) -> Obj:
        """Create (or replace) an apiextensions.k8s.io/v1 CustomResourceDefinition and serve its resources."""
        rt = self.cluster.resource_type("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        assert rt is not None
        name = (crd.get("metadata") or {}).get("name", "")
        with self.cluster.lock:
            try:
                existing = self.cluster.get(rt, None, name)
            except APIError:
                return self.cluster.create(rt, None, crd)
            body = dict(crd)
            body["metadata"] = {
                **(crd.get("metadata") or {}),
                "resourceVersion": existing["metadata"]["resourceVersion"],
            }
            return self.cluster.update(rt, None, name, body)

    def resource_for(self, api_version: str, kind: str) -> ResourceType:
        """The served resource for an apiVersion and kind (KeyError if none)."""
        group, _, version = api_version.rpartition("/")
        for rt in self.cluster.types():
            if rt.group == group and rt.version == version and rt.kind == kind:
                return rt
        raise KeyError(f"no resource serves {api_version} {kind}")

    def create(self, obj: Obj, keep_status: bool = True) -> Obj:
        """Seed an object directly (no HTTP), with the API's create semantics except that by default the given
        ``status`` is kept (a real server resets e.g. pod status on create). Namespaced objects default to
        ``default``. Returns the stored object."""
        rt = self.resource_for(obj["apiVersion"], obj["kind"])
        namespace = (obj.get("metadata") or {}).get("namespace") or "default" if rt.namespaced else None
        return self.cluster.create(rt, namespace, obj, keep_status=keep_status)

    def store_bypassing_admission(self, obj: Obj) -> Obj:
        """Write an object the API server would refuse (a broken NodePool, a spec a CEL rule forbids) straight into
        storage, as an etcd-level write, an older server version or a corrupted backup would leave it: create
        semantics (uid, resourceVersion, a watch event, ``status`` kept, schema defaults applied) without any validation. Only for tests of
        how nodeflow copes with such objects; everything else goes through ``create``. An object that exists already
        is replaced (its spec and metadata; the status subresource's rules apply). Returns the stored object."""
        rt = self.resource_for(obj["apiVersion"], obj["kind"])
        namespace = (obj.get("metadata") or {}).get("namespace") or "default" if rt.namespaced else None
        name = (obj.get("metadata") or {}).get("name") or ""
        with self.cluster.lock:
            try:
                current = self.cluster.get(rt, namespace, name)
            except APIError:
                return self.cluster.create(rt, namespace, obj, keep_status=True, admission=False)
            rv = current["metadata"]["resourceVersion"]
            body = {**obj, "metadata": {**obj["metadata"], "resourceVersion": rv}}
            return self.cluster.update(rt, namespace, name, body, admission=False)

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Obj:
        """Read an object directly (no HTTP); raises APIError (404) if missing."""
        rt = self.resource_for(api_version, kind)
        return self.cluster.get(rt, namespace if rt.namespaced else None, name)

    def objects(self, api_version: str, kind: str, namespace: str | None = None) -> list[Obj]:
        """All objects of a kind (optionally in one namespace), read directly (no HTTP)."""
        rt = self.resource_for(api_version, kind)
        items: list[Obj] = self.cluster.list_objects(rt, namespace)["items"]
        return items

    def compact(self) -> None:
        """Forget the watch history: watches from any older resourceVersion now get 410 Gone."""
        self.cluster.compact()

    def count(self, method: str, path: str, query_contains: str = "") -> int:
        """How many recorded requests had this method and path (and a query containing ``query_contains``)."""
        return sum(1 for m, p, q in self.requests if m == method and p == path and query_contains in q)

    def api_client(self, token: str = ADMIN_TOKEN) -> kubernetes.client.ApiClient:
        import kubernetes.client

        config = kubernetes.client.Configuration(host=self.url)
        config.api_key = {"BearerToken": token}
        config.api_key_prefix = {"BearerToken": "Bearer"}
        return kubernetes.client.ApiClient(config)

    def kubeconfig(self, namespace: str = "default", token: str = ADMIN_TOKEN) -> Obj:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "kubeapi", "cluster": {"server": self.url}}],
            "users": [{"name": "kubeapi", "user": {"token": token}}],
            "contexts": [
                {"name": "kubeapi", "context": {"cluster": "kubeapi", "user": "kubeapi", "namespace": namespace}}
            ],
            "current-context": "kubeapi",
            "preferences": {},
        }

    def write_kubeconfig(self, path: str | os.PathLike[str], token: str = ADMIN_TOKEN) -> str:
        """Write a kubeconfig for ``kubernetes.config.load_kube_config`` (JSON is YAML) and return its path."""
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.kubeconfig(token=token), f, indent=2)
        return os.fspath(path)

    # ---------------------------------------------------------------- OpenAPI

    def openapi_v3(self, path: str) -> Obj | None:
        """``/openapi/v3`` (path ``""``: the index of group-version documents) or one document (``apis/G/V``,
        ``api/v1``); None when no such group-version is served."""
        by_gv: dict[str, list[ResourceType]] = {}
        for rt in self.cluster.types():
            by_gv.setdefault(gv_path(rt.group, rt.version), []).append(rt)
        crd_rt = self.cluster.resource_type("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        assert crd_rt is not None
        crds = {c["metadata"]["name"]: c for c in self.cluster.list_objects(crd_rt, None)["items"]}
        version = SERVER_VERSION["gitVersion"]
        if path:
            types = by_gv.get(path)
            return None if types is None else group_version_document(types, crds, version)
        return {
            "paths": {
                gv: {
                    "serverRelativeURL": f"/openapi/v3/{gv}?hash="
                    + content_hash(group_version_document(types, crds, version))
                }
                for gv, types in sorted(by_gv.items())
            }
        }

    # -------------------------------------------------------------- discovery

    def _group_versions(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for rt in self.cluster.types():
            if rt.group:
                versions = out.setdefault(rt.group, [])
                if rt.version not in versions:
                    versions.append(rt.version)
        return out

    def _address(self) -> list[Obj]:
        return [{"clientCIDR": "0.0.0.0/0", "serverAddress": self.url.removeprefix("http://")}]

    def discovery_core_versions(self) -> Obj:
        return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": self._address()}

    def _group_doc(self, group: str, versions: list[str]) -> Obj:
        ordered = sorted(versions, key=_version_priority)
        return {
            "name": group,
            "versions": [{"groupVersion": f"{group}/{v}", "version": v} for v in ordered],
            "preferredVersion": {"groupVersion": f"{group}/{ordered[0]}", "version": ordered[0]},
        }

    def discovery_groups(self) -> Obj:
        groups = [self._group_doc(g, vs) for g, vs in sorted(self._group_versions().items())]
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def discovery_group(self, group: str) -> Obj | None:
        versions = self._group_versions().get(group)
        if versions is None:
            return None
        return {"kind": "APIGroup", "apiVersion": "v1", **self._group_doc(group, versions)}

    def discovery_resources(self, group: str, version: str) -> Obj | None:
        types = [rt for rt in self.cluster.types() if rt.group == group and rt.version == version]
        if not types:
            return None
        resources: list[Obj] = []
        for rt in sorted(types, key=lambda t: t.plural):
            entry: Obj = {
                "name": rt.plural,
                "singularName": rt.singular,
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": _verbs(rt),
            }
            if rt.short_names:
                entry["shortNames"] = rt.short_names
            if rt.categories:
                entry["categories"] = rt.categories
            resources.append(entry)
            if rt.status_subresource:
                resources.append(
                    {
                        "name": f"{rt.plural}/status",
                        "singularName": "",
                        "namespaced": rt.namespaced,
                        "kind": rt.kind,
                        "verbs": ["get", "patch", "update"],
                    }
                )
            for sub in rt.extra_subresources:
                kind = {"eviction": "Eviction", "binding": "Binding"}.get(sub, rt.kind)
                sub_group = {"eviction": "policy"}.get(sub)
                sub_entry: Obj = {
                    "name": f"{rt.plural}/{sub}",
                    "singularName": "",
                    "namespaced": rt.namespaced,
                    "kind": kind,
                    "verbs": ["create"] if sub != "finalize" else ["update"],
                }
                if sub_group:
                    sub_entry["group"] = sub_group
                    sub_entry["version"] = "v1"
                resources.append(sub_entry)
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": resources,
        }


def _version_priority(version: str) -> tuple[int, int, int]:
    """Kubernetes version priority: GA > beta > alpha, higher major/minor first."""
    import re

    m = re.match(r"^v(\d+)(?:(alpha|beta)(\d+))?$", version)
    if not m:
        return (3, 0, 0)
    stability = {None: 0, "beta": 1, "alpha": 2}[m.group(2)]
    return (stability, -int(m.group(1)), -int(m.group(3) or 0))
