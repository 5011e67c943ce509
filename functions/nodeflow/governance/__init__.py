"""Governance: NodeflowPolicies (who may create which capacity, at what cost, when), the decision log and the
governance record. ``policy`` is pure (no clock, no AWS or Kubernetes client).

Must not touch: AWS, the Kubernetes API, the clock; where pods go (``nodeflow.scheduling`` applies the bounds).
"""
