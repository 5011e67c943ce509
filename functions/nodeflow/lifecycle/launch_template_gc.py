"""Launch templates garbage collection deletes, and the EC2NodeClass finalizer that decides when.

The Launch step keeps one launch template per distinct launch configuration
(``nodeflow.aws.ec2.launch_templates``, named by its hash), so an edited EC2NodeClass, a new AMI, new user data
or a new default leaves the old templates behind, and they count against the account's quota. As Karpenter's AWS
provider, garbage collection (every run):

- puts the ``karpenter.k8s.aws/termination`` finalizer on every EC2NodeClass that lacks it. A class being deleted is not
  Ready (``nodeflow.plan.node_class_readiness``; its NodePools' NodeClassReady is False with ``NodeClassTerminating``),
  nothing is launched from it, and it is neither resolved nor hashed again. It stays while NodeClaims of it exist (a
  Normal ``WaitingOnNodeClaimTermination`` Event on it names them); then all its launch templates are deleted and the
  finalizer removed (``finalize``). A class that already carries the finalizer (one Karpenter managed) is deleted the
  same way;
- deletes any other launch template once no live instance (pending, running, stopping or stopped) was launched from it
  (EC2 tags such instances ``aws:ec2launchtemplate:id``) and it is older than ``TEMPLATE_GRACE`` (``unused``).
  Karpenter deletes a template a minute after it last used it; nodeflow keeps no memory between runs, so the age is
  counted from the template's creation. That covers the templates of a live class nothing uses any more, those of a
  class deleted before it had the finalizer, and the current template of an idle class (the next launch makes it
  again). The grace keeps a template a Launch step has just made; a Launch step that found an older template and
  loses it before its CreateFleet makes it again and repeats the call (``nodeflow.lifecycle.launch``). At most
  ``DELETIONS_PER_RUN`` go per run, oldest first.

Only the launch templates a provisioner of this cluster made are ever considered
(``nodeflow.aws.ec2.launch_templates``: named ``nodeflow/...``, or ``karpenter.k8s.aws/...`` as Karpenter names
its own, and tagged with the cluster, a NodePool and an EC2NodeClass); the stack allows ec2:DeleteLaunchTemplate only on
templates tagged so (infra/iam.py ``Permissions.delete_launch_templates``). A failed call is logged and tried again next
run: a class keeps its finalizer until all its templates are gone, and nothing else in garbage collection waits for it.

Must not touch: how templates are listed or made (``nodeflow.aws.ec2.launch_templates``); instances or NodeClaims
(``cleanup``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from nodeflow.api import labels as wk
from nodeflow.api.karpenter import EC2NodeClass, NodeClaim
from nodeflow.aws.ec2.instances import InstanceInfo
from nodeflow.aws.ec2.launch_templates import LaunchTemplate, delete_launch_template, list_launch_templates
from nodeflow.aws.ec2.tags import TAG_LAUNCH_TEMPLATE_ID
from nodeflow.aws.errors import AwsError
from nodeflow.kube.client import EC2_NODE_CLASSES, KubeClient
from nodeflow.kube.events import NORMAL, EventRecorder, ObjectRef
from nodeflow.kube.reports import Reports

__all__ = [
    "DELETIONS_PER_RUN",
    "TEMPLATE_GRACE",
    "LaunchTemplateDeps",
    "collect_launch_templates",
    "finalizer_patches",
    "unused",
    "waiting_message",
]

# Twice the Launch step's TimeoutSeconds (statemachines/launch.asl.json): a template made by a Launch step still running
# is never deleted.
TEMPLATE_GRACE = timedelta(minutes=10)
# Unused templates deleted per run, oldest first: an account with thousands left from before (the quota is 5,000 per
# region) is cleared over several runs, each well within gc's timeout and EC2's request rate.
DELETIONS_PER_RUN = 200
REASON_WAITING = "WaitingOnNodeClaimTermination"  # Karpenter's Event reason


@dataclass(frozen=True)
class LaunchTemplateDeps:
    kube: KubeClient
    ec2: Any
    recorder: EventRecorder
    cluster_name: str
    log: Callable[[str, dict[str, Any]], None] = lambda _message, _extra: None


def unused(
    templates: Iterable[LaunchTemplate],
    instances: Iterable[InstanceInfo],
    now: datetime,
    grace: timedelta = TEMPLATE_GRACE,
) -> list[LaunchTemplate]:
    """The ``templates`` no live instance among ``instances`` was launched from, older than ``grace`` (pure; one
    whose creation time is unknown is kept)."""
    used = {i.tags.get(TAG_LAUNCH_TEMPLATE_ID) for i in instances}
    return [t for t in templates if t.id not in used and t.created is not None and now - t.created >= grace]


def _users(node_class: EC2NodeClass, claims: Iterable[NodeClaim]) -> list[str]:
    return sorted(
        c.name
        for c in claims
        if c.spec.node_class_ref.kind == "EC2NodeClass" and c.spec.node_class_ref.name == node_class.name
    )


def waiting_message(names: Sequence[str], shown: int = 5) -> str:
    """The ``WaitingOnNodeClaimTermination`` message, as Karpenter words it (the first ``shown`` names)."""
    more = f" and {len(names) - shown} other(s)" if len(names) > shown else ""
    return f"Waiting on NodeClaim termination for {', '.join(names[:shown])}{more}"


def finalizer_patches(classes: Iterable[EC2NodeClass]) -> dict[str, dict[str, Any]]:
    """Class name -> the merge patch that puts the finalizer on it, for every class not being deleted that lacks it
    (pure). Each patch carries the class's resourceVersion: a class changed meanwhile is patched next run."""
    out: dict[str, dict[str, Any]] = {}
    for nc in classes:
        have = list(nc.metadata.finalizers or [])
        if nc.metadata.deletion_timestamp is None and wk.FINALIZER_EC2NODECLASS not in have:
            meta = {"finalizers": [*have, wk.FINALIZER_EC2NODECLASS], "resourceVersion": nc.metadata.resource_version}
            out[nc.name] = {"metadata": meta}
    return out


def _oldest(template: LaunchTemplate) -> tuple[datetime, str]:
    return (template.created or datetime.max.replace(tzinfo=UTC), template.name)


def _delete(deps: LaunchTemplateDeps, template: LaunchTemplate) -> bool:
    """Delete one template; False (logged) when EC2 refused or failed the call (tried again next run)."""
    try:
        delete_launch_template(deps.ec2, template)
    except AwsError as exc:
        deps.log(
            "launch template not deleted",
            {"launchTemplate": template.name, "id": template.id, "error": f"{type(exc).__name__}: {exc}"},
        )
        return False
    return True


def finalize(
    deps: LaunchTemplateDeps,
    node_class: EC2NodeClass,
    claims: Sequence[NodeClaim],
    templates: Sequence[LaunchTemplate],
    reports: Reports,
) -> tuple[list[str], bool]:
    """A class being deleted: (the templates deleted, whether its finalizer was removed). While NodeClaims of it exist,
    only the Event; then all its templates are deleted, and the finalizer is removed once none is left."""
    name = f"EC2NodeClass/{node_class.name}"
    users = _users(node_class, claims)
    if users:
        event = partial(deps.recorder.record, ObjectRef.of(node_class), NORMAL, REASON_WAITING, waiting_message(users))
        reports.run("EC2NodeClass event", name, event)
        return [], False
    mine = [t for t in templates if t.node_class == node_class.name]
    deleted = [t.name for t in mine if _delete(deps, t)]
    if len(deleted) < len(mine):
        return deleted, False
    rest = [f for f in node_class.metadata.finalizers or [] if f != wk.FINALIZER_EC2NODECLASS]
    patch = {"metadata": {"finalizers": rest, "resourceVersion": node_class.metadata.resource_version}}
    done = reports.run(
        "EC2NodeClass finalizer", name, partial(deps.kube.patch, EC2_NODE_CLASSES, node_class.name, patch)
    )
    return deleted, done is not None


def collect_launch_templates(
    deps: LaunchTemplateDeps,
    classes: Sequence[EC2NodeClass],
    claims: Sequence[NodeClaim],
    instances: Sequence[InstanceInfo],
    now: datetime,
    reports: Reports,
) -> dict[str, list[str]]:
    """One garbage collection pass over the cluster's launch templates and the EC2NodeClass finalizer (see the module).
    ``classes`` and ``claims``: all of them, as listed; ``instances``: the cluster's live instances. Returns the names
    of the templates deleted and of the classes finalized."""
    for class_name, patch in sorted(finalizer_patches(classes).items()):
        reports.run(
            "EC2NodeClass finalizer",
            f"EC2NodeClass/{class_name}",
            partial(deps.kube.patch, EC2_NODE_CLASSES, class_name, patch),
        )
    try:
        templates = list_launch_templates(deps.ec2, deps.cluster_name)
    except AwsError as exc:  # nothing is deleted and no class finalized this run
        deps.log("launch templates not listed", {"error": f"{type(exc).__name__}: {exc}"})
        return {"deletedLaunchTemplates": [], "finalizedNodeClasses": []}
    deleted: list[str] = []
    finalized: list[str] = []
    deleting = [
        nc
        for nc in classes
        if nc.metadata.deletion_timestamp is not None and wk.FINALIZER_EC2NODECLASS in (nc.metadata.finalizers or [])
    ]
    for nc in sorted(deleting, key=lambda c: c.name):
        gone, done = finalize(deps, nc, claims, templates, reports)
        deleted += gone
        if done:
            finalized.append(nc.name)
    handled = {nc.name for nc in deleting}  # a finalizing class's templates go with it, not before
    stale = sorted((t for t in unused(templates, instances, now) if t.node_class not in handled), key=_oldest)
    deleted += [t.name for t in stale[:DELETIONS_PER_RUN] if _delete(deps, t)]
    return {"deletedLaunchTemplates": sorted(deleted), "finalizedNodeClasses": finalized}
