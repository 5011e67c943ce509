"""AWS access: one module per service or EC2 resource family (``ec2/``), each behind a narrow adapter the lifecycle
steps call, with typed errors (``errors``).

Must not touch: what to create or delete (the lifecycle steps and the pure code decide); Kubernetes.
"""
