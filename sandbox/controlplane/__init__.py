"""A real Kubernetes control plane for tests, the demo and humans: ``ControlPlane`` (launcher.py) starts etcd,
kube-apiserver and optionally kube-controller-manager and kube-scheduler from binaries found by
``find_binaries`` (binaries.py); ``python -m sandbox.controlplane`` starts one and prints its kubeconfig."""

from sandbox.controlplane.binaries import Binaries, BinariesNotFound, find_binaries
from sandbox.controlplane.launcher import ADMIN, IMPERSONATOR, KUBELET, ControlPlane, ControlPlaneError, Identity

__all__ = [
    "ADMIN",
    "IMPERSONATOR",
    "KUBELET",
    "Binaries",
    "BinariesNotFound",
    "ControlPlane",
    "ControlPlaneError",
    "Identity",
    "find_binaries",
]
