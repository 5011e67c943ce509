"""The disruption decisions (pure): one module per method, the budgets, and the round that orders them
(``round.decide``).

Must not touch: AWS, the Kubernetes API, the clock (``now`` is an input); carrying out a command
(``nodeflow.lifecycle.disruption_round``).
"""
