"""Lambda (CloudFormation custom resources): ``Custom::NodeflowClusterCheck`` and ``Custom::NodeflowInstall``, the
in-cluster side of ``cdk deploy`` / ``cdk destroy`` (``nodeflow.installer`` does the work).

Plain Lambda-backed custom resources: CloudFormation invokes this function and waits for the response it PUTs to
the request's URL (``nodeflow.aws.custom_resource``). Every request is answered before the function's own timeout
(``RESPONSE_MARGIN_SECONDS`` are kept for it): an error is a FAILED response carrying its message, which
CloudFormation shows and ``cdk deploy`` prints.

``Custom::NodeflowClusterCheck`` (properties ``ClusterName``, ``AccessEntries``): Create and Update run
``installer.check_cluster`` on eks:DescribeCluster; Delete does nothing. Every EKS access entry of the stack
depends on it, so a cluster that cannot take them fails the deploy here, with what to run.

``Custom::NodeflowInstall`` (``ClusterName``, ``WebhookUrl``, ``AgentRoleArn``, ``PodIdentity``, ``HmacSecretArn``
in hmac mode, ``SourceDigest``, ``AgentReadySeconds``):

- Create and Update install (``installer.install``); a failed Create deletes what it created and answers the
  physical id ``<id>/not-installed``, whose Delete (CloudFormation's rollback) has nothing to do.
- ``SourceDigest`` is ``nodeflow.install.source_digest`` at synth; the function renders only from files with the
  same digest. An Update whose digest is not this code's while the old properties' is, is CloudFormation rolling
  back a failed upgrade (the function still runs the new code at that point): the cluster keeps what the new code
  applied, since the old files are not here to apply, and the answer says so; the next deploy applies again.
  Anything else with another digest fails: the code asset does not match the template.
- Delete uninstalls (``installer.uninstall``: refused while nodeflow manages NodeClaims).

The physical id is constant (``nodeflow-install/<cluster>``): an Update never replaces the resource, so
CloudFormation never sends the Delete of a replaced one.

Must not touch: what is installed (``nodeflow.installer``); this answers CloudFormation's custom resource protocol
around it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from nodeflow.aws.custom_resource import Request, flag, parse, respond, whole
from nodeflow.handlers.common import logger, tracer
from nodeflow.handlers.runtime import runtime
from nodeflow.install import StackOutputs, source_digest
from nodeflow.installer import InstallFailed, check_cluster, install, uninstall

__all__ = ["CHECK_TYPE", "INSTALL_TYPE", "RESPONSE_MARGIN_SECONDS", "handler"]

CHECK_TYPE = "Custom::NodeflowClusterCheck"
INSTALL_TYPE = "Custom::NodeflowInstall"
RESPONSE_MARGIN_SECONDS = 20.0
NOT_INSTALLED = "/not-installed"
GONE = "the EKS cluster is gone: nothing to remove"


def _log(message: str, extra: Mapping[str, Any]) -> None:
    logger.info(message, extra={"install": dict(extra)})  # nested: "created" is a LogRecord attribute


def _describe_cluster(name: str) -> Mapping[str, Any] | None:
    eks = runtime().client("eks")
    try:
        cluster: Mapping[str, Any] = eks.describe_cluster(name=name)["cluster"]
    except eks.exceptions.ResourceNotFoundException:
        return None
    return cluster


def _stack_name(stack_id: str) -> str:
    """``arn:aws:cloudformation:<region>:<account>:stack/<name>/<uuid>`` -> name."""
    parts = stack_id.split(":stack/", 1)
    return parts[1].split("/", 1)[0] if len(parts) == 2 else stack_id


def _text(properties: Mapping[str, Any], key: str) -> str:
    value = properties.get(key)
    if not isinstance(value, str) or not value:
        raise InstallFailed(f"property {key} is missing")
    return value


def _outputs(request: Request) -> StackOutputs:
    p, s = request.properties, runtime().settings
    cluster = _text(p, "ClusterName")
    if cluster != s.cluster_name:
        raise InstallFailed(f"property ClusterName {cluster!r} is not this function's cluster {s.cluster_name!r}")
    return StackOutputs(
        stack=_stack_name(request.stack_id),
        region=s.region,
        cluster_name=cluster,
        webhook_url=_text(p, "WebhookUrl"),
        agent_role_arn=_text(p, "AgentRoleArn"),
        pod_identity=flag(p, "PodIdentity"),
        hmac_secret_arn=p.get("HmacSecretArn") or None,
    )


def _install(request: Request, time_left: Callable[[], float]) -> tuple[str, str]:
    """(physical id, reason) of a successful Create/Update of the install."""
    physical = f"nodeflow-install/{runtime().settings.cluster_name}"
    mine = source_digest()
    wanted = request.properties.get("SourceDigest")
    if wanted != mine:
        if request.request_type == "Update" and request.old_properties.get("SourceDigest") == mine:
            reason = (
                f"rollback: the files of digest {wanted} are not in this code (it has {mine}); the cluster keeps what "
                "the failed update applied, the next deploy applies again"
            )
            logger.warning(reason)
            return physical, reason
        raise InstallFailed(
            f"the function's install files (digest {mine}) are not those the template was synthesized with "
            f"({wanted}): deploy the code asset and the template together (cdk deploy)"
        )
    outputs = _outputs(request)
    secret = None
    if outputs.hmac_secret_arn:
        secret = runtime().client("secretsmanager").get_secret_value(SecretId=outputs.hmac_secret_arn)["SecretString"]
    summary = install(
        runtime().kube,
        outputs,
        hmac_value=secret,
        agent_ready_seconds=whole(request.properties, "AgentReadySeconds", 0),
        undo_on_failure=request.request_type == "Create",
        time_left=time_left,
        log=_log,
    )
    kept = f"; Karpenter's CRDs kept: {', '.join(summary['keptCrds'])}" if summary["keptCrds"] else ""
    return (
        physical,
        f"installed: {len(summary['created'])} created, {summary['applied']} applied, {len(summary['pruned'])} pruned"
        + kept,
    )


def _cluster_exists() -> bool:
    return _describe_cluster(runtime().settings.cluster_name) is not None


def _dispatch(request: Request, time_left: Callable[[], float]) -> tuple[str, str]:
    """(physical id, reason) of a success; raises on failure."""
    cluster = runtime().settings.cluster_name
    if request.resource_type == CHECK_TYPE:
        physical = f"nodeflow-cluster-check/{cluster}"
        if request.request_type == "Delete":
            return request.physical_id or physical, "nothing to delete"
        checked = check_cluster(
            _describe_cluster(_text(request.properties, "ClusterName")),
            name=_text(request.properties, "ClusterName"),
            region=runtime().settings.region,
            access_entries=flag(request.properties, "AccessEntries", True),
        )
        return physical, checked
    if request.resource_type != INSTALL_TYPE:
        raise InstallFailed(
            f"unknown resource type {request.resource_type!r} (this function serves {CHECK_TYPE} and {INSTALL_TYPE})"
        )
    if request.request_type != "Delete":
        return _install(request, time_left)
    physical = request.physical_id or f"nodeflow-install/{cluster}"
    if physical.endswith(NOT_INSTALLED):
        return physical, "the install had failed: nothing to remove"
    try:
        kube = runtime().kube  # without clusterEndpoint, eks:DescribeCluster: fails once the cluster is deleted
    except Exception:
        if not _cluster_exists():
            return physical, GONE
        raise
    removed = uninstall(kube, cluster_exists=_cluster_exists, log=_log)
    if removed.get("cluster") == "gone":
        return physical, GONE
    return physical, f"removed {len(removed['removed'])} objects (CRDs kept)"


@logger.inject_lambda_context
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    try:
        request = parse(event)
    except ValueError as exc:  # nothing to answer to: CloudFormation did not send this
        logger.error(str(exc))
        return {"status": "ignored", "reason": str(exc)}
    started = time.monotonic()

    def time_left() -> float:
        if context is not None and hasattr(context, "get_remaining_time_in_millis"):
            return float(context.get_remaining_time_in_millis()) / 1000 - RESPONSE_MARGIN_SECONDS
        return 600.0 - (time.monotonic() - started)

    logger.info("custom resource request", extra={"type": request.resource_type, "request": request.request_type})
    try:
        physical, reason = _dispatch(request, time_left)
        success = True
    except Exception as exc:  # every failure is answered: CloudFormation would otherwise wait an hour
        logger.exception("custom resource failed")
        success = False
        reason = str(exc) if isinstance(exc, InstallFailed) else f"{type(exc).__name__}: {exc}"
        physical = request.physical_id or request.logical_id  # Create: settings may be what failed
        if request.request_type == "Create" and request.resource_type == INSTALL_TYPE:
            physical += NOT_INSTALLED
    respond(request, success=success, reason=reason, physical_id=physical)
    return {"status": "SUCCESS" if success else "FAILED", "reason": reason, "physicalResourceId": physical}
