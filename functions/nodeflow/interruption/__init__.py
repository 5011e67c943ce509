"""Interruption: what arrives on the interruption queue (``messages``: Karpenter's AWS interruption
events and the agent's NodeClaim / Node deletions), parsed into typed messages. Pure code: the
interruption Lambda's side effects live in ``nodeflow.lifecycle.interruption_handling``.

Must not touch: acting on a message (``nodeflow.lifecycle.interruption_handling``); AWS, Kubernetes, the clock.
"""
