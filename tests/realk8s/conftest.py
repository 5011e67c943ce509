"""Tests against a real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler
v1.36.2; see sandbox/controlplane) and the simulated kubelets (sandbox/kwok), with moto for EC2."""

from tests.functional.conftest import aws_env, shared_clients  # noqa: F401
from tests.functional.sandbox.conftest import clients, world  # noqa: F401
from tests.realk8s.fixtures import admission, cluster, cluster_scope, control_plane, real_kube, real_kube_server  # noqa: F401
