"""Constants of the agent → webhook protocol (agent/PROTOCOL.md is the prose version).

Must not touch: how requests are checked (``auth``, ``models``) or routed (``routing``).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = [
    "DETAIL_TYPES",
    "HEADER_NONCE",
    "HEADER_SIGNATURE",
    "HEADER_TIMESTAMP",
    "KINDS",
    "MAX_BODY_BYTES",
    "MAX_EVENTS",
    "NAMESPACED_KINDS",
    "NONCE_TTL_SECONDS",
    "SOURCE",
    "TIMESTAMP_SKEW_SECONDS",
]

SOURCE = "nodeflow.agent"  # EventBridge source of every event the webhook puts on the bus

MAX_BODY_BYTES = 262_144  # 256 KiB: larger requests get 413
MAX_EVENTS = 500  # per request
TIMESTAMP_SKEW_SECONDS = 300  # a request signed further from the webhook's clock is refused
NONCE_TTL_SECONDS = 600  # a nonce seen within this long is a replay

# Lower-case, as Lambda Function URLs deliver header names.
HEADER_TIMESTAMP = "x-nodeflow-timestamp"
HEADER_NONCE = "x-nodeflow-nonce"
HEADER_SIGNATURE = "x-nodeflow-signature"

# Agent event kind -> EventBridge detail-type.
DETAIL_TYPES: Mapping[str, str] = MappingProxyType(
    {
        "PodUnschedulable": "Pod Unschedulable",
        "PodBound": "Pod Bound",
        "PodDeleted": "Pod Deleted",
        "NodeReady": "Node Ready",
        "NodeNotReady": "Node NotReady",
        "NodeDeleting": "Node Deleting",
        "NodeDeleted": "Node Deleted",
        "NodePoolChanged": "NodePool Changed",
        "NodePoolDeleted": "NodePool Deleted",
        "EC2NodeClassChanged": "EC2NodeClass Changed",
        "EC2NodeClassDeleted": "EC2NodeClass Deleted",
        "NodeClaimChanged": "NodeClaim Changed",
        "NodeClaimDeleting": "NodeClaim Deleting",
        "NodeClaimDeleted": "NodeClaim Deleted",
    }
)
KINDS: tuple[str, ...] = tuple(DETAIL_TYPES)
NAMESPACED_KINDS = frozenset({"PodUnschedulable", "PodBound", "PodDeleted"})
