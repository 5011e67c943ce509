"""The Kubernetes and Karpenter kinds nodeflow reads and writes, and the formats of their fields (durations, cron,
quantities, hashes, labels). Pure: pydantic models and parsers.

Must not touch: what the objects mean to a decision (scheduling, disruption, governance); no I/O.
"""
