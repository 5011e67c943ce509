from tests.kubeapi.fixtures import kubeapi, kubeapi_server

__all__ = ["kubeapi", "kubeapi_server"]
