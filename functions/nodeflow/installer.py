"""What the stack's custom resources do (the ``install`` Lambda, ``nodeflow.handlers.install``): check the cluster
before anything is granted in it, install or upgrade the in-cluster side, and remove it.

- ``check_cluster``: the EKS cluster exists and is usable, and, when the stack creates EKS access entries, its
  authentication mode allows them (API or API_AND_CONFIG_MAP); otherwise the deploy fails saying what to run.
- ``install`` (Create and Update): waits until the cluster lets the install role in (a new EKS access entry takes a
  few seconds to be honoured), applies ``nodeflow.install.manifests`` (plus the HMAC Secret in hmac mode) with
  server-side apply in a valid order (``nodeflow.kube.applyset``), waits for the agent to roll out when asked,
  then prunes what carries the install's label but is no longer in the set (an older version's objects, the
  previous agent code ConfigMap). A failed first install deletes what it created (what existed before stays).
  Karpenter's CRDs are kept (``keep_karpenter_crds``): a karpenter.sh / karpenter.k8s.aws CRD that another installer
  made (Karpenter's chart) and that serves every version nodeflow's serves is neither applied over nor pruned; one
  that lacks a version nodeflow reads fails the install before anything is applied, saying which.
- ``uninstall`` (Delete): refuses while NodeClaims that nodeflow manages exist (deleting nodeflow then would leave
  their instances running, with nothing left to drain and terminate them), unless the namespace carries
  ``KEEP_ANNOTATION`` (the NodeClaims are handed to another controller, e.g. back to Karpenter); then deletes every
  object with the install's label except the CRDs. CRDs are kept, as Karpenter's chart keeps them on uninstall:
  deleting one deletes every NodePool, EC2NodeClass or NodeClaim of it.

Must not touch: the CloudFormation protocol (``nodeflow.handlers.install``); the cluster's objects other than nodeflow's
own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from nodeflow.install import (
    INSTALL_LABEL,
    INSTALL_LABEL_VALUE,
    INSTALL_SELECTOR,
    NAMESPACE,
    StackOutputs,
    hmac_secret,
    manifests,
)
from nodeflow.kube.applyset import (
    CRDS,
    PRUNED_KINDS,
    Applied,
    ApplyError,
    apply_all,
    find_labelled,
    prune,
    ref_of,
    remove,
)
from nodeflow.kube.client import NAMESPACES, NODE_CLAIMS, KubeClient
from nodeflow.kube.errors import Forbidden, KubeError, NotFound, Unavailable
from nodeflow.kube.rollout import RolloutError, wait_rolled_out

__all__ = [
    "AGENT_DEPLOYMENT",
    "FIELD_MANAGER",
    "KEEP_ANNOTATION",
    "InstallFailed",
    "check_cluster",
    "install",
    "keep_karpenter_crds",
    "managed_nodeclaims",
    "uninstall",
]

FIELD_MANAGER = "nodeflow-install"
AGENT_DEPLOYMENT = "nodeflow-agent"
KEEP_ANNOTATION = "nodeflow.io/uninstall"
KEEP_VALUE = "keep-nodeclaims"
ACCESS_PATIENCE_SECONDS = 120.0  # how long a new EKS access entry may take to be honoured
NODECLAIMS_NAMED = 10
_AWS_NODE_CLASS = ("karpenter.k8s.aws", "EC2NodeClass")
_ACCESS_MODES = ("API", "API_AND_CONFIG_MAP")
KARPENTER_GROUPS = ("karpenter.sh", "karpenter.k8s.aws")  # the API groups whose CRDs Karpenter's chart may own

Log = Callable[[str, Mapping[str, Any]], None]


class InstallFailed(Exception):
    """The install, upgrade, removal or check cannot go on; the message is what CloudFormation shows."""


def _no_log(message: str, extra: Mapping[str, Any]) -> None:
    return None


# --------------------------------------------------------------------------------------------- cluster check


def check_cluster(cluster: Mapping[str, Any] | None, *, name: str, region: str, access_entries: bool) -> str:
    """Judge eks:DescribeCluster's ``cluster`` (None: not found); returns a summary or raises ``InstallFailed``
    saying what to do."""
    if cluster is None:
        raise InstallFailed(
            f"EKS cluster {name!r} was not found in {region}: check -c clusterName and the region you deploy to"
        )
    status = cluster.get("status") or "UNKNOWN"
    if status in ("CREATING", "DELETING", "FAILED"):
        raise InstallFailed(f"EKS cluster {name!r} is {status}: deploy once it is ACTIVE")
    mode = (cluster.get("accessConfig") or {}).get("authenticationMode")
    if access_entries and mode is not None and mode not in _ACCESS_MODES:
        raise InstallFailed(
            f"EKS cluster {name!r} has authentication mode {mode}, which does not allow the EKS access entries this "
            "stack creates for its functions and installer. Allow them (existing aws-auth mappings keep working): "
            f"aws eks update-cluster-config --name {name} --region {region} "
            "--access-config authenticationMode=API_AND_CONFIG_MAP, wait until the cluster is ACTIVE, then deploy "
            "again. Or deploy with -c eksAccessEntries=false -c clusterInstall=false, map the roles in aws-auth "
            "yourself and apply `python -m nodeflow install-manifests`."
        )
    return f"cluster {name} is {status}, authentication mode {mode or 'not reported'}"


# --------------------------------------------------------------------------------------------- install


def wait_for_access(
    kube: KubeClient,
    *,
    time_left: Callable[[], float],
    sleep: Callable[[float], None] = time.sleep,
    patience: float = ACCESS_PATIENCE_SECONDS,
) -> None:
    """Until the API server accepts the install role (a fresh access entry answers 401 for a few seconds)."""
    started = time.monotonic()
    while True:
        try:
            kube.get(NAMESPACES, "kube-system")
            return
        except (Forbidden, Unavailable) as exc:
            waited = time.monotonic() - started
            if waited >= patience or time_left() <= 5:
                hint = (
                    "its EKS access entry (the stack's InstallerAccessEntry) is not honoured"
                    if isinstance(exc, Forbidden)
                    else "the endpoint cannot be reached from the function (a private endpoint needs "
                    "-c lambdaVpcId and -c lambdaSubnetIds)"
                )
                raise InstallFailed(
                    f"the install role cannot use the cluster's API after {waited:.0f} s ({exc}): {hint}"
                ) from exc
            sleep(min(5.0, 0.5 + waited / 4))


def _served(crd: Mapping[str, Any]) -> set[str]:
    return {str(v.get("name")) for v in (crd.get("spec") or {}).get("versions") or [] if v.get("served")}


def _owner(crd: Mapping[str, Any]) -> str:
    """Who installed a CRD, as far as its metadata says (for messages)."""
    meta = crd.get("metadata") or {}
    release = (meta.get("annotations") or {}).get("meta.helm.sh/release-name")
    if release:
        return f"Helm release {(meta.get('annotations') or {}).get('meta.helm.sh/release-namespace', '')}/{release}"
    return "another installer (Karpenter's)"


def keep_karpenter_crds(kube: KubeClient, objects: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """``objects`` less the karpenter.sh / karpenter.k8s.aws CRDs to keep as they are, and their names.

    A CRD of those groups is kept when the cluster has it, not from a nodeflow install (no ``INSTALL_LABEL``:
    Karpenter's chart, or kubectl apply of Karpenter's release) and serving every version nodeflow's CRD serves
    (karpenter.sh/v1, karpenter.k8s.aws/v1, karpenter.sh/v1alpha1 NodeOverlays: the versions of Karpenter v1.x): its
    custom resources are then the very objects Karpenter made, and nodeflow adopts them (docs/migration). One that
    lacks such a version (a Karpenter v0.x CRD serving only v1beta1) raises ``InstallFailed`` naming it and the
    versions: applying ours would take the CRD from its owner and stop serving what its objects are stored as."""
    out: list[dict[str, Any]] = []
    kept: list[str] = []
    for obj in objects:
        spec = obj.get("spec") or {}
        if obj.get("kind") != "CustomResourceDefinition" or spec.get("group") not in KARPENTER_GROUPS:
            out.append(obj)
            continue
        name = str((obj.get("metadata") or {}).get("name"))
        try:
            live = kube.get(CRDS, name)
        except NotFound:
            out.append(obj)
            continue
        if ((live.get("metadata") or {}).get("labels") or {}).get(INSTALL_LABEL) == INSTALL_LABEL_VALUE:
            out.append(obj)  # ours, from an earlier install: upgraded
            continue
        missing = sorted(_served(obj) - _served(live))
        if missing:
            raise InstallFailed(
                f"CRD {name} is installed by {_owner(live)} and serves {', '.join(sorted(_served(live))) or 'nothing'}"
                f", not {', '.join(missing)}, which nodeflow reads. nodeflow does not replace another controller's "
                "CRD: upgrade Karpenter's CRDs to v1 (Karpenter v1.x, the karpenter-crd chart) and migrate its "
                "objects, or delete the CRD if nothing uses it, then deploy again"
            )
        kept.append(name)
    return out, kept


def install(
    kube: KubeClient,
    outputs: StackOutputs,
    *,
    hmac_value: str | None = None,
    agent_ready_seconds: int = 0,
    undo_on_failure: bool = False,
    time_left: Callable[[], float],
    sleep: Callable[[float], None] = time.sleep,
    log: Log = _no_log,
) -> dict[str, Any]:
    """Apply the install for ``outputs``, wait for the agent (``agent_ready_seconds``, 0: do not wait), prune what
    the set no longer has; returns what changed. ``undo_on_failure`` (a first install): on failure, delete what this
    call created before raising."""
    objects = manifests(outputs)
    if hmac_value is not None:
        objects.append(hmac_secret(hmac_value))
    done = Applied()
    kept: list[str] = []
    try:
        wait_for_access(kube, time_left=time_left, sleep=sleep)
        objects, kept = keep_karpenter_crds(kube, objects)
        apply_all(kube, objects, field_manager=FIELD_MANAGER, time_left=time_left, done=done, sleep=sleep)
        if agent_ready_seconds > 0:
            until = time.monotonic() + agent_ready_seconds
            wait_rolled_out(
                kube,
                NAMESPACE,
                AGENT_DEPLOYMENT,
                time_left=lambda: min(time_left(), until - time.monotonic()),
                sleep=sleep,
            )
        pruned = prune(kube, [ref_of(o) for o in objects], selector=INSTALL_SELECTOR, sleep=sleep)
    except (ApplyError, RolloutError, KubeError, InstallFailed) as exc:
        reason = str(exc)
        if undo_on_failure and done.created:
            try:
                undone = remove(kube, done.created, sleep=sleep)
                reason += f" (the {len(undone)} objects this install created were deleted again)"
            except (ApplyError, KubeError) as undo:
                reason += f" (deleting the objects it created failed too: {undo})"
        log("install failed", {"reason": reason, "created": [str(r) for r in done.created]})
        raise InstallFailed(reason) from exc
    summary = {
        "created": [str(r) for r in done.created],
        "applied": len(done.applied),
        "pruned": [str(r) for r in pruned],
        "keptCrds": kept,
    }
    log("installed", summary)
    return summary


# --------------------------------------------------------------------------------------------- uninstall


def managed_nodeclaims(kube: KubeClient) -> list[str]:
    """Names of the NodeClaims nodeflow manages (their nodeClassRef is an EC2NodeClass, as Karpenter's AWS provider
    decides it); none when the CRD is not served."""
    try:
        claims = kube.list_items(NODE_CLAIMS)
    except NotFound:
        return []
    names = []
    for claim in claims:
        ref = (claim.get("spec") or {}).get("nodeClassRef") or {}
        if (ref.get("group"), ref.get("kind")) == _AWS_NODE_CLASS:
            names.append(str((claim.get("metadata") or {}).get("name")))
    return sorted(names)


def _kept_for_another_controller(kube: KubeClient) -> bool:
    try:
        namespace = kube.get(NAMESPACES, NAMESPACE)
    except NotFound:
        return False
    return bool(((namespace.get("metadata") or {}).get("annotations") or {}).get(KEEP_ANNOTATION) == KEEP_VALUE)


def refusal(claims: list[str]) -> str:
    shown = ", ".join(claims[:NODECLAIMS_NAMED]) + (
        f" and {len(claims) - NODECLAIMS_NAMED} more" if len(claims) > NODECLAIMS_NAMED else ""
    )
    return (
        f"not removing nodeflow: it still manages {len(claims)} NodeClaims ({shown}); without nodeflow their "
        "instances would keep running with nothing to drain and terminate them. First run `kubectl delete nodepools "
        "--all` (or `kubectl delete nodeclaims --all`) and wait until `kubectl get nodeclaims` lists none (nodeflow "
        "drains and terminates them), then run cdk destroy again. To leave them to another controller instead (moving "
        f"back to Karpenter): `kubectl annotate namespace {NAMESPACE} {KEEP_ANNOTATION}={KEEP_VALUE}`, then cdk "
        "destroy again."
    )


def uninstall(
    kube: KubeClient,
    *,
    cluster_exists: Callable[[], bool],
    sleep: Callable[[float], None] = time.sleep,
    log: Log = _no_log,
) -> dict[str, Any]:
    """Remove the install (every object with its label, CRDs kept); ``InstallFailed`` while nodeflow still manages
    NodeClaims (see ``refusal``). A cluster that is gone (``cluster_exists`` false when the API cannot be reached)
    has nothing left to remove."""
    try:
        claims = managed_nodeclaims(kube)
    except Unavailable as exc:
        if not cluster_exists():
            log("cluster gone: nothing to remove", {"error": str(exc)})
            return {"removed": [], "cluster": "gone"}
        raise InstallFailed(f"the cluster's API cannot be reached to remove nodeflow: {exc}") from exc
    except KubeError as exc:
        raise InstallFailed(f"listing NodeClaims: {exc}") from exc
    kept = bool(claims) and _kept_for_another_controller(kube)
    if claims and not kept:
        raise InstallFailed(refusal(claims))
    try:
        found = find_labelled(kube, INSTALL_SELECTOR, PRUNED_KINDS | {("v1", "Namespace")})
        removed = remove(kube, found, sleep=sleep)
    except (ApplyError, KubeError) as exc:
        raise InstallFailed(f"removing nodeflow: {exc}") from exc
    summary = {"removed": [str(r) for r in removed], "nodeClaimsLeft": claims if kept else []}
    log("uninstalled", summary)
    return summary
