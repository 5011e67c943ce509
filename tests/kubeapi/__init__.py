"""An in-process Kubernetes API server over real HTTP that the official ``kubernetes`` client talks to."""

from tests.kubeapi.cluster import APIError, Cluster
from tests.kubeapi.server import KubeAPIServer

__all__ = ["APIError", "Cluster", "KubeAPIServer"]
