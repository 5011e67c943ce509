"""``python -m nodeflow doctor``: is the cluster and account ready for nodeflow, and does an installed nodeflow work?

``checks``     PURE: the facts each check needs and the decision (OK / WARN / FAIL, what to do) for each
``aws_facts``  reads the facts from AWS (the stack, EKS, EC2, IAM, quotas, SQS, Step Functions, CloudWatch, the
               webhook's URL)
``kube_facts`` reads the facts from the cluster (EC2NodeClasses, NodePools, CRDs, the agent, NodeClaims, Karpenter)
The command itself is ``nodeflow.doctor_cli``.

Must not touch: nodeflow's own objects or the account's resources: the doctor only reads.
"""
