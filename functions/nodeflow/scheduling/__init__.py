"""The solver (pure): pods onto existing nodes and new NodeClaims, cheapest first (``solver.solve``), with topology,
bounds and capacity reservations.

Must not touch: AWS, the Kubernetes API, the clock; the objects before they are solver input (``nodeflow.plan``).
"""
