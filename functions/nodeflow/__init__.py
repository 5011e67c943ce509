"""nodeflow: Karpenter's provisioning and disruption logic as Lambda functions.

Must not touch: anything at import time beyond the version: importing the package must stay cheap.
"""

__version__ = "0.1.0"
