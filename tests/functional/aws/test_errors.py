"""The error-mapping table: botocore errors -> typed errors (class names are the ASL contract)."""

from __future__ import annotations

import pickle
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ParamValidationError, ReadTimeoutError
from botocore.stub import Stubber

from nodeflow.aws import errors as E
from nodeflow.aws.ec2.fleet import FleetRequest, create_fleet
from nodeflow.aws.ec2.instances import terminate_instances
from nodeflow.aws.ec2.launch_template_data import LaunchTemplateSpec
from nodeflow.aws.ec2.launch_templates import ensure_launch_template
from nodeflow.aws.errors import (
    AccessDenied,
    AlreadyExists,
    AwsError,
    AwsUnavailable,
    InsufficientCapacity,
    InvalidRequest,
    NotFound,
    Offering,
    Throttled,
    map_error,
)


def client_error(code: str, status: int = 400, op: str = "RunInstances") -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": f"boom {code}"}, "ResponseMetadata": {"HTTPStatusCode": status}}, op
    )


TABLE = [
    ("InsufficientInstanceCapacity", 500, InsufficientCapacity),
    ("MaxSpotInstanceCountExceeded", 400, InsufficientCapacity),
    ("UnfulfillableCapacity", 400, InsufficientCapacity),
    ("VcpuLimitExceeded", 400, InsufficientCapacity),
    ("InsufficientFreeAddressesInSubnet", 400, InsufficientCapacity),
    ("SpotMaxPriceTooLow", 400, InsufficientCapacity),
    ("ReservationCapacityExceeded", 400, InsufficientCapacity),
    ("RequestLimitExceeded", 503, Throttled),
    ("Throttling", 400, Throttled),
    ("ThrottlingException", 400, Throttled),
    ("TooManyRequestsException", 429, Throttled),
    ("SomethingNew", 429, Throttled),
    ("InvalidInstanceID.NotFound", 400, NotFound),
    ("InvalidLaunchTemplateName.NotFoundException", 400, NotFound),
    ("InvalidLaunchTemplateId.NotFound", 400, NotFound),
    ("InvalidAMIID.NotFound", 400, NotFound),
    ("InvalidSubnetID.NotFound", 400, NotFound),
    ("NoSuchEntity", 404, NotFound),
    ("ParameterNotFound", 400, NotFound),
    ("InvalidVpcID.NotFound", 400, NotFound),
    ("InvalidLaunchTemplateName.AlreadyExistsException", 400, AlreadyExists),
    ("EntityAlreadyExists", 409, AlreadyExists),
    ("AccessDenied", 403, AccessDenied),
    ("UnauthorizedOperation", 403, AccessDenied),
    ("AuthFailure", 401, AccessDenied),
    ("SomethingForbidden", 403, AccessDenied),
    ("InvalidParameterValue", 400, InvalidRequest),
    ("InvalidParameterCombination", 400, InvalidRequest),
    ("MissingParameter", 400, InvalidRequest),
    ("ValidationError", 400, InvalidRequest),
    ("LimitExceeded", 409, InvalidRequest),
    ("ProvisionedThroughputExceededException", 400, Throttled),  # DynamoDB: a hot partition key
    ("InternalError", 500, AwsUnavailable),
    ("ServiceUnavailable", 503, AwsUnavailable),
    ("Unavailable", 503, AwsUnavailable),
    ("SomethingBroke", 502, AwsUnavailable),
]


@pytest.mark.parametrize(("code", "status", "cls"), TABLE)
def test_mapping_table(code: str, status: int, cls: type[AwsError]) -> None:
    err = map_error(client_error(code, status))
    assert type(err) is cls
    assert err.code == code
    assert err.status == status
    assert err.operation == "RunInstances"
    assert code in str(err)


def test_class_names_are_the_contract() -> None:
    names = {
        c.__name__ for c in (InsufficientCapacity, Throttled, NotFound, AccessDenied, InvalidRequest, AwsUnavailable)
    }
    assert names == {
        "InsufficientCapacity",
        "Throttled",
        "NotFound",
        "AccessDenied",
        "InvalidRequest",
        "AwsUnavailable",
    }
    assert all(issubclass(c, AwsError) for c in (InsufficientCapacity, Throttled, NotFound, AlreadyExists))


def test_capacity_error_carries_offering() -> None:
    err = map_error(
        client_error("InsufficientInstanceCapacity"), instance_type="m5.large", zone="us-east-1a", capacity_type="spot"
    )
    assert isinstance(err, InsufficientCapacity)
    assert err.offerings == (Offering("m5.large", "us-east-1a", "spot"),)
    assert (err.instance_type, err.zone, err.capacity_type) == ("m5.large", "us-east-1a", "spot")
    # other classes carry no offering
    assert map_error(client_error("Throttling"), instance_type="m5.large").offerings == ()


def test_connection_and_client_side_errors() -> None:
    assert type(map_error(EndpointConnectionError(endpoint_url="https://ec2"))) is AwsUnavailable
    assert type(map_error(ReadTimeoutError(endpoint_url="https://ec2"))) is AwsUnavailable
    assert type(map_error(ParamValidationError(report="bad"))) is InvalidRequest
    same = Throttled("x")
    assert map_error(same) is same
    with pytest.raises(TypeError):
        map_error(ValueError("not aws"))


def test_errors_pickle() -> None:
    err = map_error(
        client_error("InsufficientInstanceCapacity"), instance_type="m5.large", zone="a", capacity_type="spot"
    )
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is InsufficientCapacity
    assert back.offerings == err.offerings
    assert back.code == err.code


def test_aws_errors_context_manager_chains() -> None:
    with pytest.raises(Throttled) as info, E.aws_errors():
        raise client_error("RequestLimitExceeded", 503)
    assert isinstance(info.value.__cause__, ClientError)


# --- through the adapter, with botocore's Stubber --------------------------------------------


def stubbed_ec2() -> tuple[Any, Stubber]:
    ec2 = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    return ec2, Stubber(ec2)


def test_create_fleet_call_error_is_typed() -> None:
    ec2, stub = stubbed_ec2()
    stub.add_client_error("create_fleet", service_error_code="RequestLimitExceeded", http_status_code=503)
    stub.add_client_error("create_fleet", service_error_code="VcpuLimitExceeded", http_status_code=400)
    req = FleetRequest(
        launch_template_name="nodeflow/lt",
        capacity_type="spot",
        instance_types=("m5.large",),
        subnets={"us-east-1a": "subnet-1"},
        client_token="tok",
        cluster_name="demo",
        node_pool="p",
        node_claim="p-1",
    )
    with stub:
        with pytest.raises(Throttled):
            create_fleet(ec2, req)
        with pytest.raises(InsufficientCapacity) as info:
            create_fleet(ec2, req)
    assert info.value.capacity_type == "spot"


def test_terminate_tolerates_not_found() -> None:
    ec2, stub = stubbed_ec2()
    stub.add_client_error(
        "terminate_instances",
        service_error_code="InvalidInstanceID.NotFound",
        service_message="The instance IDs 'i-0000000000000000a, i-0000000000000000b' do not exist",
    )
    stub.add_response(
        "terminate_instances",
        {
            "TerminatingInstances": [
                {"InstanceId": "i-0000000000000000c", "CurrentState": {"Code": 32, "Name": "shutting-down"}}
            ]
        },
        {"InstanceIds": ["i-0000000000000000c"]},
    )
    with stub:
        got = terminate_instances(ec2, ["i-0000000000000000a", "i-0000000000000000b", "i-0000000000000000c"])
    assert got == {
        "i-0000000000000000a": "terminated",
        "i-0000000000000000b": "terminated",
        "i-0000000000000000c": "shutting-down",
    }


def test_terminate_access_denied_propagates() -> None:
    ec2, stub = stubbed_ec2()
    stub.add_client_error("terminate_instances", service_error_code="UnauthorizedOperation", http_status_code=403)
    with stub, pytest.raises(AccessDenied):
        terminate_instances(ec2, ["i-0000000000000000a"])


def test_ensure_launch_template_access_denied() -> None:
    ec2, stub = stubbed_ec2()
    stub.add_client_error("describe_launch_templates", service_error_code="UnauthorizedOperation", http_status_code=403)
    spec = LaunchTemplateSpec(
        cluster_name="demo",
        node_pool="p",
        node_class="c",
        image_id="ami-1",
        security_group_ids=("sg-1",),
        instance_profile="ip",
        user_data="",
    )
    with stub, pytest.raises(AccessDenied):
        ensure_launch_template(ec2, spec)
