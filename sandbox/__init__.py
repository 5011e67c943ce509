"""A local AWS + cluster sandbox built on moto and the test Kubernetes API server.

- ``sandbox.aws``: the moto world (VPC, subnets, AMIs + public SSM parameters, DynamoDB, SQS, Lambda functions,
  state machines), in-process (``moto.mock_aws``) or against a ``ThreadedMotoServer``.
- ``sandbox.stepfunctions``: run real ASL against our Python handlers in-process, scale waits, trace executions.
- ``sandbox.kubelet``: a simulated kubelet that turns moto instances into Kubernetes Nodes.

Used by the functional tests of the launch workflow and by ``make demo``. Imports nothing heavy at package import.
"""
