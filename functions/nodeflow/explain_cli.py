"""``python -m nodeflow explain -f PATH NAME``: what ``NAME`` means and how its explanation is printed.

``NAME`` is ``[NAMESPACE/][KIND/]NAME`` (namespace ``default`` when left out):

- a pending pod (``shop/web-7d4b9c-x2k8q``): where it goes, or why not, NodePool by NodePool (as before);
- a workload (``shop/web``): a Deployment, ReplicaSet, StatefulSet or Job, found by the pending pods it owns
  (the pods' controller owner, and a ReplicaSet's Deployment by the ``pod-template-hash`` label, so pods dumped
  from a cluster resolve as the manifests' expanded ones do) or by its manifest: each of its pending pods is
  explained, the pods with the same explanation together (one solve for all);
- a DaemonSet: its pods are not planned (they follow the nodes), so the answer is, per NodePool, whether its pod
  runs on the NodePool's new nodes and the overhead it adds to each, or why not.

A name that several kinds carry (a Deployment and a StatefulSet both called ``web``) explains each; ``KIND/``
(``deployment/web``, ``sts/web``, ``pod/web-0``, as kubectl's short names) picks one. Nothing that matches is
an error naming the value, with near matches (same-namespace names that start alike or look alike, the same name
in other namespaces, the workload of a pod name that no longer exists).

``-o json``: a pending pod gives ``{"pod", "placement", "nodePools"}`` (as before); anything else
``{"query", "workloads": [{"kind", "namespace", "name", "pendingPods", "explanations": [{"pods", "placement",
"nodePools"}]}]}``, a DaemonSet's entry with ``nodePools`` (its NodePool by NodePool answer) and no explanations.

Must not touch: why a pod goes where it goes (``nodeflow.scheduling.solver.explain``); only which pods a NAME means and
how the answer is printed are decided here.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from nodeflow.api.core import LABEL_POD_TEMPLATE_HASH, Pod, daemon_set_pod
from nodeflow.scheduling.types import PodExplanation, SchedulingInput, pod_list, reason_lines

if TYPE_CHECKING:
    from nodeflow.api.manifests import Manifests

__all__ = ["ExplainError", "Target", "explain", "owners", "resolve"]

# kubectl's names and short names of the kinds ``explain`` knows, in the order matches are listed
KINDS = {
    "Pod": ("pod", "pods", "po"),
    "Deployment": ("deployment", "deployments", "deploy"),
    "ReplicaSet": ("replicaset", "replicasets", "rs"),
    "StatefulSet": ("statefulset", "statefulsets", "sts"),
    "Job": ("job", "jobs"),
    "DaemonSet": ("daemonset", "daemonsets", "ds"),
}
_KIND_OF = {alias: kind for kind, aliases in KINDS.items() for alias in (kind.lower(), *aliases)}
_ORDER = {kind: i for i, kind in enumerate(KINDS)}
NEAR_MATCHES = 5


class ExplainError(ValueError):
    """The name matches nothing explain can answer for (the message names it and lists near matches)."""


@dataclass
class Target:
    """One thing ``NAME`` names: a pending pod, a workload with its pending pods, or a DaemonSet."""

    kind: str
    namespace: str
    name: str
    pending: list[str] = field(default_factory=list)  # its pending pods' keys, in the order the input has them
    pods: int = 0  # every pod it has in the manifests (pending or not); 0 for a DaemonSet
    daemon: str | None = None  # a DaemonSet: the key of the pod it runs on each node

    @property
    def handle(self) -> str:
        return f"{self.namespace}/{self.name}"

    def describe(self) -> str:
        if self.kind in ("DaemonSet", "Pod"):
            return f"{self.handle} ({self.kind})"
        return f"{self.handle} ({self.kind}, {self.pending_count()})"

    def pending_count(self) -> str:
        return f"{len(self.pending)} pending pod{'s' if len(self.pending) != 1 else ''}"


def owners(pod: Pod) -> list[tuple[str, str]]:
    """(kind, name) of what ``pod`` is and belongs to: itself, its controller, and for a ReplicaSet made by a
    Deployment (named ``<deployment>-<pod-template-hash>``) that Deployment."""
    out = [("Pod", pod.name)]
    owner = pod.owner()
    if owner is None:
        return out
    out.append((owner.kind, owner.name))
    template_hash = (pod.metadata.labels or {}).get(LABEL_POD_TEMPLATE_HASH)
    if owner.kind == "ReplicaSet" and template_hash and owner.name.endswith(f"-{template_hash}"):
        out.append(("Deployment", owner.name[: -len(template_hash) - 1]))
    return out


def _targets(manifests: Manifests, inp: SchedulingInput) -> dict[tuple[str, str, str], Target]:
    """(namespace, kind, name) -> target, for every pending pod and what owns it, and every workload and
    DaemonSet of the manifests."""
    targets: dict[tuple[str, str, str], Target] = {}
    pending = {p.key for p in inp.pods}

    def target(namespace: str, kind: str, name: str) -> Target:
        return targets.setdefault((namespace, kind, name), Target(kind, namespace, name))

    for pod in manifests.pods:
        for kind, name in owners(pod):
            t = target(pod.namespace, kind, name)
            t.pods += 1
            if pod.key in pending:
                t.pending.append(pod.key)
    for workload in manifests.workloads:
        target(workload.metadata.namespace or "default", workload.kind, workload.metadata.name or "")
    daemons = {d.key for d in inp.daemon_pods}
    for ds in manifests.daemon_sets:
        t = target(ds.metadata.namespace or "default", "DaemonSet", ds.metadata.name or "")
        key = daemon_set_pod(ds).key
        t.daemon = key if key in daemons else None
    return targets


def resolve(query: str, manifests: Manifests, inp: SchedulingInput) -> list[Target]:
    """What ``query`` (``[NAMESPACE/][KIND/]NAME``) names, kinds in ``KINDS`` order; ExplainError when nothing."""
    parts = query.split("/")
    if len(parts) > 3 or not all(parts):
        raise ExplainError(f"{query!r} is not NAMESPACE/NAME or NAMESPACE/KIND/NAME (e.g. shop/web, shop/sts/db)")
    namespace, name = (parts[0], parts[-1]) if len(parts) > 1 else ("default", parts[0])
    kind: str | None = None
    if len(parts) == 3:
        kind = _KIND_OF.get(parts[1].lower())
        if kind is None:
            known = ", ".join(a for aliases in KINDS.values() for a in aliases[::2])
            raise ExplainError(f"{query!r}: {parts[1]!r} is not a kind explain knows ({known})")
    targets = _targets(manifests, inp)
    found = [
        t
        for (ns, k, n), t in targets.items()
        if ns == namespace and n == name and (k == kind if kind else t.pending or k != "Pod")
    ]
    if not found:
        raise ExplainError(_nothing(query, namespace, name, kind, targets.values()))
    return sorted(found, key=lambda t: _ORDER.get(t.kind, len(_ORDER)))


def _nothing(query: str, namespace: str, name: str, kind: str | None, targets: Iterable[Target]) -> str:
    """The error for a query that matches nothing: what it is not, and near matches (or what there is)."""
    every = [t for t in targets if t.kind != "Pod" or t.pending]
    bound = next((t for t in targets if t.kind == "Pod" and t.namespace == namespace and t.name == name), None)
    if bound is not None and not bound.pending and kind in (None, "Pod"):
        return f"{query} is not a pending pod: pod {bound.handle} is bound to a node or finished"
    near = [t for t in every if t.name == name]  # the same name: another namespace, or another kind
    near += [  # same namespace, one name starts the other (a workload's pods, a stale pod's workload)
        t for t in every if t.namespace == namespace and (t.name.startswith(name) or name.startswith(f"{t.name}-"))
    ]
    handles = {t.handle: t for t in sorted(every, key=lambda t: (t.handle, _ORDER.get(t.kind, len(_ORDER))))}
    wanted = f"{namespace}/{name}"
    near += [handles[h] for h in difflib.get_close_matches(wanted, list(handles), n=NEAR_MATCHES, cutoff=0.6)]
    near.sort(key=lambda t: t.kind == "Pod")  # workloads first, then pods (stable: in the order found)
    shown = list(dict.fromkeys(t.describe() for t in near))[:NEAR_MATCHES]
    if shown:
        hint = f"near matches: {', '.join(shown)}"
    elif every:
        listed = sorted(every, key=lambda t: (t.kind == "Pod", t.handle))
        hint = f"there are {', '.join(t.describe() for t in listed[:NEAR_MATCHES])}" + (
            f" and {len(listed) - NEAR_MATCHES} more" if len(listed) > NEAR_MATCHES else ""
        )
    else:
        hint = "the manifests have no pending pods and no workloads"
    return f"{query} is not {f'a {kind}' if kind else 'a pending pod or a workload'} in the manifests; {hint}"


def _groups(explanations: Sequence[PodExplanation]) -> list[tuple[list[str], PodExplanation]]:
    """The pods with the same placement and reasons together, in the order of each group's first pod."""
    groups: dict[tuple[str | None, tuple[tuple[str, str], ...]], tuple[list[str], PodExplanation]] = {}
    for why in explanations:
        key = (why.placement, tuple(sorted(why.per_pool.items())))
        groups.setdefault(key, ([], why))[0].append(why.pod)
    return list(groups.values())


def explain(query: str, manifests: Manifests, inp: SchedulingInput, output: str, out: TextIO) -> None:
    """Explain what ``query`` names (see the module docstring) to ``out``; ExplainError when it names nothing."""
    from nodeflow.scheduling.solver import explain_daemon, explain_pods

    targets = resolve(query, manifests, inp)
    keys = list(dict.fromkeys(k for t in targets for k in t.pending))
    _, explanations = explain_pods(inp, keys)
    by_pod = dict(zip(keys, explanations, strict=True))
    if len(targets) == 1 and targets[0].kind == "Pod":  # one pending pod: the answer as it always was
        why = by_pod[targets[0].pending[0]]
        if output == "json":
            _dump(why.to_json(), out)
            return
        print(f"pod {why.pod}: {_where(why)}", file=out)
        _reasons(why.per_pool, "  ", out)
        return
    docs: list[dict[str, Any]] = []
    for t in targets:
        doc: dict[str, Any] = {"kind": t.kind, "namespace": t.namespace, "name": t.name}
        if t.kind == "DaemonSet":
            daemon = explain_daemon(inp, t.daemon) if t.daemon is not None else None
            doc["nodePools"] = dict(sorted(daemon.per_pool.items())) if daemon else None
            docs.append(doc)
            if output != "json":
                _daemon_text(t, daemon, out)
            continue
        groups = _groups([by_pod[k] for k in t.pending])
        doc["pendingPods"] = len(t.pending)
        doc["explanations"] = [
            {"pods": pods, "placement": why.placement, "nodePools": dict(sorted(why.per_pool.items()))}
            for pods, why in groups
        ]
        docs.append(doc)
        if output == "json":
            continue
        print(f"{t.kind} {t.handle}: {_pending(t)}", file=out)
        for pods, why in groups:
            print(f"  {pod_list(pods)}: {_where(why)}", file=out)
            _reasons(why.per_pool, "    ", out)
    if output == "json":
        _dump({"query": query, "workloads": docs}, out)


def _pending(t: Target) -> str:
    if t.pending:
        return t.pending_count()
    if t.pods:
        return f"no pending pods (its {t.pods} pod{'s are' if t.pods != 1 else ' is'} bound to nodes or finished)"
    return "no pending pods (it has no pods: 0 replicas, or its pods are not in the manifests)"


def _daemon_text(t: Target, daemon: PodExplanation | None, out: TextIO) -> None:
    print(f"DaemonSet {t.handle}: its pods are not planned, they run on every node they fit", file=out)
    if daemon is None:
        print(
            "  on no new node: its pods wait for karpenter.sh/registered or karpenter.sh/initialized to be other "
            'than "true"',
            file=out,
        )
        return
    _reasons(daemon.per_pool, "  ", out)


def _where(why: PodExplanation) -> str:
    return f"goes to {why.placement}" if why.placement else "cannot be scheduled"


def _reasons(per_pool: Mapping[str, str], indent: str, out: TextIO) -> None:
    for line in reason_lines(per_pool):
        print(f"{indent}{line}", file=out)


def _dump(doc: Any, out: TextIO) -> None:
    json.dump(doc, out, indent=2)
    out.write("\n")
