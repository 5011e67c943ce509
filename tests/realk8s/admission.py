"""What the real API server says of an object nodeflow's CRDs describe, without storing it: a server-side dry run
(``dryRun=All``) with strict field validation, so an unknown field is refused instead of pruned.

An ``Issue`` is one cause of the server's 422 (or 400): the field it names, the reason (``FieldValueInvalid``,
``FieldValueDuplicate``...) and ``detail``, the message without the server's ``Invalid value: <value>:`` prefix
(for a CEL rule: the rule's message). A CEL rule is skipped when the object has a blocking error (a missing
required field, a value outside its enum, a string too long): then the server adds a cause with no field saying
so (``NOT_CHECKED``).
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
import secrets
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from nodeflow.kube.client import KubeClient, Resource
from nodeflow.kube.errors import Invalid
from sandbox.controlplane.launcher import CRD_DIR

DRY_RUN = (("dryRun", "All"), ("fieldValidation", "Strict"))
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
NOT_CHECKED = "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"
#: the rendered value the server puts before a message: a JSON string, a number, a boolean or null
_VALUE = re.compile(r'("(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?|true|false|null): ')


def crd(filename: str) -> dict[str, Any]:
    """One of the CRDs the control plane installs (agent/manifests/crds)."""
    return next(d for d in yaml.safe_load_all((CRD_DIR / filename).read_text()) if d)


def schema(filename: str) -> dict[str, Any]:
    """The OpenAPI schema of a CRD's (only) version."""
    return crd(filename)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]


def crd_resources() -> dict[str, Resource]:
    """kind -> the served resource of every CRD the control plane installs."""
    out = {}
    for path in sorted(CRD_DIR.glob("*.yaml")):
        spec = crd(path.name)["spec"]
        version = next(v["name"] for v in spec["versions"] if v.get("served", True))
        kind = spec["names"]["kind"]
        out[kind] = Resource(spec["group"], version, spec["names"]["plural"], kind, spec["scope"] == "Namespaced")
    return out


@dataclass(frozen=True)
class Issue:
    field: str
    reason: str
    detail: str


def detail(message: str) -> str:
    """A cause's message without ``Invalid value: <value>: `` (the server renders scalars, omits the rest)."""
    for prefix in ("Invalid value: ", "Unsupported value: "):
        if message.startswith(prefix):
            rest = message[len(prefix) :]
            value = _VALUE.match(rest)
            return rest[value.end() :] if value else rest
    return message


def _issues(error: Invalid) -> list[Issue]:
    causes = error.details.get("causes") or []
    if not causes:
        return [Issue("", error.reason, error.message)]
    return [
        Issue(
            "" if c.get("field") in (None, "<nil>") else str(c["field"]),
            str(c.get("reason") or ""),
            detail(str(c.get("message") or "")),
        )
        for c in causes
    ]


def _renamed(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``obj`` under a name no other test uses (tests share the control plane)."""
    body = copy.deepcopy(dict(obj))
    body["metadata"] = {**body.get("metadata", {}), "name": f"{body['metadata']['name']}-{secrets.token_hex(3)}"}
    return body


class Admission:
    """Dry-run creates and updates of custom resources, as the cluster admin. Each object is sent under a fresh
    name (what the server says does not depend on it)."""

    def __init__(self, kube: KubeClient, crds: Mapping[str, Resource]) -> None:
        self.kube = kube
        self.crds = dict(crds)  # kind -> resource

    def resource(self, obj: Mapping[str, Any]) -> Resource:
        return self.crds[obj["kind"]]

    def create(self, obj: Mapping[str, Any]) -> list[Issue]:
        """Why the server would refuse to create ``obj`` ([] when it would store it)."""
        return self._dry_run("POST", self.resource(obj).path(), _renamed(obj))

    def update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Issue]:
        """Why the server would refuse to replace ``old`` (stored for real for the time of the call) by ``new``:
        transition rules (``oldSelf``) run only on updates."""
        with self._stored(old) as stored:
            meta = stored["metadata"]
            body = copy.deepcopy(dict(new))
            body["metadata"] = {**body["metadata"], "name": meta["name"], "resourceVersion": meta["resourceVersion"]}
            return self._dry_run("PUT", self.resource(old).path(meta["name"]), body)

    def table(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """The server's Table of ``obj`` (what ``kubectl get -o wide`` prints), stored for the time of the call."""
        with self._stored(obj) as stored:
            api = self.kube.api_client
            method, url, headers, _, _ = api.param_serialize(
                method="GET",
                resource_path=self.resource(obj).path(stored["metadata"]["name"]),
                header_params={"Accept": TABLE},
                auth_settings=["BearerToken"],
            )
            return json.loads(api.call_api(method, url, headers).read())  # type: ignore[no-any-return,no-untyped-call]

    @contextlib.contextmanager
    def _stored(self, obj: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        resource = self.resource(obj)
        stored = self.kube.create(resource, _renamed(obj))
        try:
            yield stored
        finally:
            self.kube.delete(resource, stored["metadata"]["name"])

    def _dry_run(self, method: str, path: str, body: dict[str, Any]) -> list[Issue]:
        try:
            self.kube.request(method, path, query=DRY_RUN, body=body)
        except Invalid as error:
            return _issues(error)
        return []
