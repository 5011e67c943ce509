"""What the provisioner tells people about the NodeflowPolicies of a snapshot.

- An invalid policy (one the CRD let through but the model rejects, e.g. a cron field out of range): a Warning
  ``ValidationFailed`` Event on the NodeflowPolicy naming the fields, and an error log line. It is not ignored:
  ``Snapshot.state`` puts its fail-safe stand-in in the plan (``nodeflow.governance.invalid``: provisioning paused
  in what it governs), so the pods it holds back get that pause as their reason.
- No policies readable (the CRD is not installed: 404; an older controller-rbac.yaml: 403): logged once per
  container, as a warning (nodeflow then provisions without policies).

Must not touch: whether a policy is valid or what it allows (``nodeflow.governance``); objects other than
NodeflowPolicies and their Events.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from nodeflow.api.nodeflow_policy import POLICY_API_VERSION, POLICY_KIND
from nodeflow.governance.invalid import governed_pools
from nodeflow.kube.events import EventRecorder, ObjectRef
from nodeflow.kube.reports import Reports
from nodeflow.kube.snapshot import Snapshot

__all__ = ["report_policies"]

_missing_logged: set[str] = set()  # per container: "the CRD is absent" is said once


def report_policies(
    recorder: EventRecorder,
    snap: Snapshot,
    log: Callable[[str, dict[str, Any]], None],
    reports: Reports | None = None,
) -> int:
    """Events and logs about the snapshot's invalid or unreadable policies; returns the number of invalid ones. Each
    policy's Event on its own: one the API server does not take is logged and counted in ``reports``."""
    reports = reports if reports is not None else Reports(log)
    if POLICY_KIND in snap.missing_kinds:
        if POLICY_KIND not in _missing_logged:
            _missing_logged.add(POLICY_KIND)
            log(
                "NodeflowPolicies cannot be listed (CRD nodeflowpolicies.nodeflow.io not installed, or not granted "
                "to group nodeflow-snapshot): provisioning without policies",
                {"kind": POLICY_KIND},
            )
    else:
        _missing_logged.discard(POLICY_KIND)
    invalid = snap.invalid_of(POLICY_KIND)
    for obj in invalid:
        pools = governed_pools(obj.raw)
        if pools is not None and not pools:
            effect = "invalid; it governs nothing"
        else:
            scope = "every NodePool" if pools is None else "NodePool " + ", ".join(sorted(pools))
            effect = f"invalid, so provisioning is paused in {scope} until it is fixed"
        log("NodeflowPolicy invalid", {"policy": obj.name, "errors": list(obj.errors), "effect": effect})
        uid = (obj.raw.get("metadata") or {}).get("uid") if isinstance(obj.raw.get("metadata"), dict) else None
        ref = ObjectRef(POLICY_KIND, obj.name, None, uid, POLICY_API_VERSION)
        reports.run(
            "NodeflowPolicy event",
            f"{POLICY_KIND}/{obj.name}",
            partial(recorder.validation_failed, ref, [*obj.errors, effect]),
        )
    return len(invalid)
