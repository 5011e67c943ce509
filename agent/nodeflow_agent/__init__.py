"""nodeflow's in-cluster agent: watch Kubernetes, forward compact events to the nodeflow webhook.

Standard library only (the image is ``python:*-slim`` plus this package). Wire contract: ``agent/PROTOCOL.md``.
"""

__version__ = "0.1.0"
