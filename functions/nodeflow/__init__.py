"""nodeflow: Karpenter's provisioning and disruption logic as Lambda functions."""

__version__ = "0.1.0"
