"""Suite-wide: the few long tests start first; every botocore session shares one data loader (``one_botocore_loader``).

`make test` runs pytest-xdist (--dist load: tests handed out in collected order); a test of minutes collected last (tests/unit
comes after tests/realk8s, which comes after tests/e2e...) leaves one worker busy while the others are idle. The
fresh-clone run at 198a901 spent its last ~6 minutes (95 % -> 100 %) that way. Starting the long ones first lets the
short ones fill in around them (each worker takes its first tests from the front). Order only: which tests run and what they check is unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

# Test files (or node-id prefixes) that take a minute or more each on 2 cores: whole-system runs (the demo, the
# cost and fidelity smoke runs, migration end to end, the fault matrix, the RBAC scenario).
LONG_FIRST = (
    "tests/e2e/",
    "tests/unit/test_bench_cost.py::test_quick_run",
    "tests/realk8s/test_fidelity_benchmark.py",
    "tests/functional/migration/",
    "tests/functional/faults/test_fault_matrix.py",
    "tests/infra/test_cluster_rbac_scenario.py",
    "tests/functional/termination/",
    "tests/functional/disruption/test_replace_moves_pods.py",
)


def _rank(item: pytest.Item) -> int:
    for i, prefix in enumerate(LONG_FIRST):
        if item.nodeid.startswith(prefix):
            return i
    return len(LONG_FIRST)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_rank)  # stable: the rest keep their collected order


@pytest.fixture(autouse=True, scope="session")
def one_botocore_loader() -> Iterator[None]:
    """Every botocore session of the test process reads the service models through one data loader, as the
    handlers' sessions do (``nodeflow.aws.session``): ``mock_aws`` replaces boto3's default session at each start, so
    without this every ``boto3.client`` in a test parsed its service's JSON model again (EC2's is megabytes: ~0.1 s
    a client). Only data read from botocore's own files is shared; credentials and configuration stay per session."""
    import botocore.session

    from nodeflow.aws.session import shared_loader

    original = botocore.session.create_loader

    def create_loader(search_path_string: Any = None) -> Any:
        return shared_loader() if search_path_string is None else original(search_path_string)

    botocore.session.create_loader = create_loader
    try:
        yield
    finally:
        botocore.session.create_loader = original
