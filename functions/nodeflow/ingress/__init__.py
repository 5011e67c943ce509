"""Ingress: what the in-cluster agent sends (``protocol``), how the webhook checks it (``auth``,
``models``), and where each kind of event goes from the EventBridge bus (``routing``). Pure code:
the webhook's side effects live in ``nodeflow.aws.dedup`` / ``nodeflow.aws.bus`` and ``webhook``
wires them together.

Must not touch: the bus, the nonce store, the queues (``nodeflow.aws``); the clock (an input).
"""
