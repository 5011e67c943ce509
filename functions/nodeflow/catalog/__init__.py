"""The instance type catalog: its data model (``model``), where it comes from (``source``: EC2 and the Pricing API,
or the bundled snapshot), and how it resolves for an EC2NodeClass (``instancetypes``, ``overlays``,
``reservations``).

Must not touch: where pods go (``nodeflow.scheduling``); Kubernetes.
"""
