"""Fixtures for the doctor's tests against moto: the sandbox world (tests/functional/sandbox), a deployed stack
over it (``stack.deploy``), and the doctor's AWS clients with the few stubbed answers moto cannot give."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandbox.aws import AwsWorld, Clients
from tests.functional.doctor.stack import Aws, DoctorStack, deploy
from tests.functional.sandbox.conftest import clients, world  # noqa: F401

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:moto.cloudformation.parsing")


@pytest.fixture
def stack(clients: Clients, world: AwsWorld) -> Iterator[DoctorStack]:  # noqa: F811
    deployed = deploy(clients, world)
    try:
        yield deployed
    finally:
        deployed.webhook.stop()


@pytest.fixture
def aws(clients: Clients) -> Aws:  # noqa: F811
    return Aws(clients)
