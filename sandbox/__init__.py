"""A local AWS + cluster sandbox built on moto and a real Kubernetes control plane.

- ``sandbox.aws``: the moto world (VPC, subnets, AMIs + public SSM parameters, DynamoDB, SQS, Lambda functions,
  state machines), in-process (``moto.mock_aws``) or against a ``ThreadedMotoServer``.
- ``sandbox.stepfunctions``: run real ASL against our Python handlers in-process, scale waits, trace executions.
- ``sandbox.controlplane``: etcd, kube-apiserver, kube-controller-manager and kube-scheduler on 127.0.0.1, and the
  fault-injecting proxy in front of them.
- ``sandbox.kwok``: simulated kubelets that turn moto instances into Kubernetes Nodes and run their pods
  (``sandbox.kubelet``: the Node they register).

Used by the functional tests of the launch workflow and by ``make demo``. Imports nothing heavy at package import.
"""
