"""Lambda (Function URL, AWS_IAM or HMAC): accept the agent's events and put them on the bus.

Answers 202 when every event is on the bus (or was already), 4xx with a reason when the request
is refused (nothing is enqueued), 503 when the store or the bus failed (the agent retries).

Must not touch: which requests are accepted or where events go (``nodeflow.ingress``); this maps the Function URL
request to ``nodeflow.ingress.webhook`` and back.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from nodeflow.aws.bus import put_entries
from nodeflow.aws.dedup import SeenRecords
from nodeflow.handlers.common import logger, metrics, tracer
from nodeflow.handlers.runtime import runtime
from nodeflow.ingress.webhook import WebhookConfig, WebhookDeps, handle

SECRETS_CACHE_SECONDS = 300
_secrets_lock = threading.Lock()
_secrets_cache: dict[str, tuple[float, tuple[str, ...]]] = {}


def _secrets(arn: str) -> tuple[str, ...]:
    """The HMAC secrets in Secrets Manager secret ``arn`` (one per line, or a JSON list), cached 5 min
    so a rotation is picked up without a redeploy."""
    with _secrets_lock:
        hit = _secrets_cache.get(arn)
        if hit and time.monotonic() - hit[0] < SECRETS_CACHE_SECONDS:
            return hit[1]
    raw = runtime().client("secretsmanager").get_secret_value(SecretId=arn).get("SecretString") or ""
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = raw.splitlines()
    values = tuple(str(s).strip() for s in (parsed if isinstance(parsed, list) else [raw]) if str(s).strip())
    with _secrets_lock:
        _secrets_cache[arn] = (time.monotonic(), values)
    return values


def _log(message: str, extra: Mapping[str, Any]) -> None:
    logger.warning(message, extra=dict(extra))


def deps() -> WebhookDeps:
    rt = runtime()
    s = rt.settings.require("table_name", "event_bus_name")
    if s.webhook_auth == "hmac":
        s.require("webhook_hmac_secret_arn")
    seen = SeenRecords(rt.client("dynamodb"), s.table_name or "")
    ttl = s.dedup_ttl_seconds
    bus, events = s.event_bus_name or "", rt.client("events")
    cfg = WebhookConfig(
        cluster=s.cluster_name, auth_mode=s.webhook_auth, principals=s.agent_principal_arns, dedup_ttl_seconds=ttl
    )

    def claim(ids: Sequence[str], now: float) -> list[str]:
        return seen.claim_events(ids, now, lease_seconds=cfg.claim_lease_seconds, ttl_seconds=ttl)

    return WebhookDeps(
        config=cfg,
        now=lambda: rt.now().timestamp(),
        secrets=lambda: _secrets(s.webhook_hmac_secret_arn or ""),
        claim_nonce=seen.claim_nonce,
        claim_events=claim,
        confirm_events=lambda ids, now: seen.confirm_events(ids, now, ttl),
        release_events=seen.release_events,
        publish=lambda entries: put_entries(events, bus, entries),
        log=_log,
    )


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    response = handle(deps(), event)
    metrics.add_metric(name=f"Webhook{response.status // 100}xx", unit="Count", value=1)
    if response.status == 202:
        metrics.add_metric(name="EventsAccepted", unit="Count", value=response.body.get("accepted", 0))
        metrics.add_metric(name="EventsDuplicate", unit="Count", value=response.body.get("duplicates", 0))
        logger.info("events accepted", extra=response.body)
    elif response.outcome == "unreadable":  # a bug in reading content (the agent drops the event)
        logger.error("request refused: the webhook could not read it", extra={"reason": response.body.get("message")})
    else:
        logger.warning(
            "request refused",
            extra={"status": response.status, "outcome": response.outcome, "reason": response.body.get("message")},
        )
    return response.to_lambda()
