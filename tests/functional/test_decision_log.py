"""The decision log for real: the provisioner (against the real API server; its pending pods are held, no scheduler
runs them) writes its records to a DynamoDB
table in moto through ``nodeflow.aws.decision_log.DecisionLog``; they are read back by pod, by NodePool and by time,
expire 90 days (or the configured days) after the run's clock, and a DynamoDB that fails every write costs the
provisioner nothing. ``python -m nodeflow decisions --stack`` reads them from a stack in moto's CloudFormation."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from benchmarks.provisioning_scale import node_class, node_pool, pod
from nodeflow.cli import main
from nodeflow.governance.decisions import nodepool_partitions, pointer_refs
from tests.functional.faults.dynamodb import BatchWriteFaults
from tests.realk8s.workloads import held

if TYPE_CHECKING:
    from nodeflow.aws.decision_log import DecisionLog
    from nodeflow.governance.decisions import Decision
    from nodeflow.lifecycle.provisioner import ProvisionResult
    from sandbox.controlplane.facade import RealKubeAPI

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:moto.cloudformation.parsing")
REGION = "us-east-1"
TABLE = "nodeflow-shop-decisions"
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
NOWHERE = {"nodeSelector": {"example.com/rack": "r1"}}  # no NodePool can label a node so


@pytest.fixture
def kube_server(real_kube: RealKubeAPI) -> RealKubeAPI:
    return real_kube


@pytest.fixture
def world(aws_env: None, kube_server: RealKubeAPI, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    import boto3
    from moto import mock_aws

    from sandbox.aws import create_decision_table

    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    kube_server.create(node_class())
    kube_server.create(node_pool())
    for ns in range(3):
        kube_server.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"team-{ns}"}})
    for i in range(6):
        kube_server.create(held(pod(i % 3, i, None)))
    stray = held(pod(0, 99, None))
    stray["spec"]["nodeSelector"] = NOWHERE["nodeSelector"]
    kube_server.create(stray)
    with mock_aws():
        ddb = boto3.client("dynamodb", region_name=REGION)
        create_decision_table(lambda service: boto3.client(service, region_name=REGION), TABLE)
        yield {
            "kube": kube_server,
            "ddb": ddb,
            "stray": f"{stray['metadata']['namespace']}/{stray['metadata']['name']}",
        }


def _provision(
    world: dict[str, Any], writer: Callable[[Sequence[Decision]], Any] | None, now: datetime = NOW
) -> ProvisionResult:
    from nodeflow.catalog.offline import load_offline
    from nodeflow.kube.client import KubeClient
    from nodeflow.kube.events import EventRecorder
    from nodeflow.lifecycle.provisioner import ProvisionDeps, provision

    kube = KubeClient(world["kube"].api_client())
    deps = ProvisionDeps(
        kube=kube,
        catalog=load_offline(REGION),
        unavailable=lambda _now: frozenset(),
        start_launch=lambda _name: True,
        recorder=EventRecorder(kube),
        now=lambda: now,
        decisions=writer,
    )
    return provision(deps, "0123456789abcdef")


def _writer(world: dict[str, Any], **options: Any) -> DecisionLog:
    from nodeflow.aws.decision_log import DecisionLog

    logged: list[tuple[str, dict[str, Any]]] = []
    writer = DecisionLog(world["ddb"], TABLE, log=lambda m, e: logged.append((m, e)), **options)
    world["logged"] = logged
    return writer


def _read(world: dict[str, Any], since: timedelta = timedelta(hours=1), **query: Any) -> list[Any]:
    from nodeflow.aws.decision_log import read_decisions

    return read_decisions(world["ddb"], TABLE, since=NOW - since, now=NOW + timedelta(minutes=1), **query)


def _items(world: dict[str, Any]) -> list[dict[str, Any]]:
    return list(world["ddb"].scan(TableName=TABLE)["Items"])


def _keys(items: Sequence[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(i["pk"]["S"], i["sk"]["S"]) for i in items}


def _no_retries() -> Any:
    """A DynamoDB client without botocore's own retries (as the handlers' decision-log client)."""
    import boto3
    from botocore.config import Config

    return boto3.client("dynamodb", region_name=REGION, config=Config(retries={"total_max_attempts": 1}))


def test_a_provisioner_run_is_recorded_and_read_back_by_pod_nodepool_and_time(world: dict[str, Any]) -> None:
    writer = _writer(world)
    result = _provision(world, writer)
    assert result.created
    assert writer.failed == 0
    assert writer.written == len(_items(world))

    everything = _read(world)
    kinds = [r.kind for r in everything]
    assert kinds.count("provisioning") == 1
    assert kinds.count("nodeclaim") == len(result.created)
    assert kinds.count("unschedulable") == 1
    run = next(r for r in everything if r.kind == "provisioning")
    assert run.pod_count == 7
    assert sorted(run.detail["created"]) == sorted(result.created)

    # by pod: the NodeClaim made for it, with its NodePool, types, price and the pods beside it
    some_pod = next(r for r in everything if r.kind == "nodeclaim").pods[0]
    (mine,) = _read(world, pod=some_pod)
    assert mine.kind == "nodeclaim"
    assert some_pod in mine.pods
    assert mine.detail["nodeClaim"] in result.created
    assert mine.detail["status"] == "created"
    assert mine.detail["nodePool"] == "default"
    assert mine.detail["instanceType"] == mine.detail["instanceTypes"][0]
    assert mine.detail["pricePerHour"] > 0
    assert mine.detail["capacityType"] in ("spot", "on-demand")

    # the pod no NodePool can serve: its record, with the NodePool's reason
    (stray,) = _read(world, pod=world["stray"])
    assert stray.kind == "unschedulable"
    assert stray.pods == (world["stray"],)
    assert "example.com/rack" in stray.detail["reasons"]["default"]

    # by NodePool: every record of the run names NodePool default
    by_pool = _read(world, nodepool="default")
    assert [r.sk for r in by_pool] == [r.sk for r in everything]
    assert _read(world, nodepool="gpu") == []
    assert _read(world, pod=some_pod, nodepool="gpu") == []

    # by time: newest first; nothing before the run
    later = _writer(world)
    _provision(world, later, now=NOW + timedelta(seconds=30))  # a second run (the NodeClaims exist now)
    again = _read(world)
    assert [r.time for r in again] == sorted((r.time for r in again), reverse=True)
    assert again[0].kind == "provisioning"  # a run's own record first, then its NodeClaims and pods
    assert again[0].at == NOW + timedelta(seconds=30)
    from nodeflow.aws.decision_log import read_decisions

    assert read_decisions(world["ddb"], TABLE, since=NOW + timedelta(seconds=31), now=NOW + timedelta(hours=1)) == []


def test_every_item_expires_after_the_ttl_days(world: dict[str, Any]) -> None:
    _provision(world, _writer(world))
    items = _items(world)
    assert {i["pk"]["S"].split("#")[0] for i in items} == {"DECISION", "NODEPOOL", "POD"}
    assert {int(i["ttl"]["N"]) for i in items} == {int((NOW + timedelta(days=90)).timestamp())}

    world["ddb"].delete_table(TableName=TABLE)
    from sandbox.aws import create_decision_table

    create_decision_table(lambda _service: world["ddb"], TABLE)
    _provision(world, _writer(world, ttl_days=7))
    assert {int(i["ttl"]["N"]) for i in _items(world)} == {int((NOW + timedelta(days=7)).timestamp())}
    # read past the expiry: DynamoDB's TTL deletes only eventually, the reader skips what has expired
    from nodeflow.aws.decision_log import read_decisions

    expired = NOW + timedelta(days=7, seconds=1)
    assert read_decisions(world["ddb"], TABLE, since=NOW - timedelta(hours=1), now=expired) == []


def test_a_failing_dynamodb_does_not_fail_the_provisioner(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from nodeflow.aws.decision_log import DecisionLog

    faults = BatchWriteFaults(monkeypatch, TABLE)
    faults.refuse = True
    logged: list[tuple[str, dict[str, Any]]] = []
    writer = DecisionLog(_no_retries(), TABLE, log=lambda m, e: logged.append((m, e)), sleep=lambda _s: None)
    result = _provision(world, writer)

    assert result.created
    assert result.deferred == []
    assert faults.batches, "the writes were tried"
    assert writer.written == 0
    assert writer.failed > 0
    ((message, extra),) = logged  # one line for the run's write
    assert message == "decision log: items not written"
    assert extra["failed"] == writer.failed
    assert "InternalServerError" in extra["errors"][0]
    assert _items(world) == []


def test_throttled_writes_are_sent_again_until_written(world: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """DynamoDB throttles a hot partition key: a BatchWriteItem refused whole (ProvisionedThroughputExceeded, after
    botocore's own retries) is sent again with a backoff, not counted lost; every record is read back."""
    from nodeflow.aws.decision_log import DecisionLog

    faults = BatchWriteFaults(monkeypatch, TABLE)
    faults.throttle.left = 3
    slept: list[float] = []
    writer = DecisionLog(_no_retries(), TABLE, workers=1, sleep=slept.append)
    result = _provision(world, writer)
    assert result.created
    assert faults.throttle.throttled == 3
    assert slept[:3] == [0.05, 0.1, 0.2]
    assert writer.failed == 0
    assert writer.written == len(_items(world)) > 0
    assert _read(world)


# ------------------------------------------------------------------------------------------------ the CLI


def _cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["decisions", *args], out, err)
    return code, out.getvalue(), err.getvalue()


def _stack(world: dict[str, Any]) -> str:
    import boto3

    from sandbox.aws import register_decision_log_stack

    return register_decision_log_stack(lambda service: boto3.client(service, region_name=REGION), "shop", TABLE)


def test_the_decisions_command_reads_the_stacks_log(world: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    result = _provision(world, _writer(world))
    stack = _stack(world)
    now = (NOW + timedelta(minutes=5)).isoformat()

    code, out, err = _cli("--stack", stack, "--now", now, "--region", REGION)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split() == ["TIME", "(UTC)", "KIND", "NODEPOOL", "PODS", "SUMMARY"]
    assert lines[1].split()[:5] == ["2026-03-01", "12:00:00", "provisioning", "default", "7"]
    assert sum("nodeclaim" in line for line in lines) == len(result.created)
    assert f"since 2026-03-01 11:05:00 UTC (table {TABLE}, region {REGION})" in lines[-1]

    code, out, err = _cli("--stack", stack, "--now", now, "--pod", world["stray"], "-o", "json")
    assert (code, err) == (0, "")
    (record,) = json.loads(out)
    assert list(record) == [
        *("time", "kind", "id", "run", "nodePools", "summary", "podCount", "pods", "policy", "detail", "version")
    ]
    assert record["kind"] == "unschedulable"
    assert record["pods"] == [world["stray"]]
    assert record["time"] == "2026-03-01T12:00:00.000Z"

    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.setenv("AWS_REGION", REGION)  # as the AWS CLI reads it (boto3 alone does not)
    code, out, _ = _cli("--stack", stack, "--now", now, "--nodepool", "default", "-o", "json")
    assert code == 0
    assert {r["kind"] for r in json.loads(out)} == {"provisioning", "nodeclaim", "unschedulable"}
    code, out, _ = _cli("--stack", stack, "--now", now, "--limit", "2", "-o", "json")
    assert code == 0
    assert [r["kind"] for r in json.loads(out)] == ["provisioning", "nodeclaim"]  # the newest run, its record first
    code, out, _ = _cli("--stack", stack, "--now", (NOW + timedelta(hours=2)).isoformat(), "-o", "json")
    assert (code, json.loads(out)) == (0, [])  # --since 1h by default
    code, out, _ = _cli("--stack", stack, "--now", (NOW + timedelta(hours=2)).isoformat(), "--since", "3h")
    assert code == 0
    assert "nodeclaim" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--since", "1x"], "--since: '1x' is not a duration like 30m, 1h, 2d"),
        (["--since", "0h"], "--since: '0h' is not a duration"),
        (["--since=-1h"], "--since: '-1h' is negative"),  # (argparse takes "--since -1h" for an option)
        (["--since", "99999999d"], "--since: '99999999d' is too long (it reaches back before 1000-01-01)"),
        (["--since", "9" * 5000 + "d"], "is too long"),  # (int() of it alone: ValueError past 4,300 digits)
        (["--since", "0001-01-01T00:00:00Z"], "--since: '0001-01-01T00:00:00Z' is out of range (from 1000-01-01"),
        (["--since", "0001-01-01T00:00:00+01:00"], "--since: '0001-01-01T00:00:00+01:00' is out of range"),
        (["--since", "2026-13-01T00:00:00Z"], "--since: '2026-13-01T00:00:00Z' is not an RFC 3339 time"),
        (
            ["--now", "2026-03-01T12:00:00Z", "--since", "2026-03-01T13:00:00Z"],
            "--since: '2026-03-01T13:00:00Z' is in the future (after 2026-03-01T12:00:00Z)",
        ),
        (["--now", "9999-12-31T23:59:59Z"], "--now: '9999-12-31T23:59:59Z' is out of range"),
        (["--now", "tomorrow"], "--now: 'tomorrow' is not an RFC 3339 time"),
        (["--pod", "no-slash"], "--pod: 'no-slash' is not NAMESPACE/NAME"),
        (["--limit", "0"], "--limit: 0"),
    ],
)
def test_the_decisions_command_names_bad_input(args: list[str], message: str) -> None:  # before any AWS call
    code, out, err = _cli("--stack", "Nodeflow-shop", *args)
    assert (code, out) == (2, "")
    assert message in err


def test_decisions_since_is_clamped_to_the_logs_retention(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--since`` ten years back reads the days the log keeps (the stack's DecisionLogTtlDays; 90 when the stack
    does not say), and the output says it was clamped: 16 Query calls a day, not 58,000 for ten years."""
    from moto.dynamodb.responses import DynamoHandler

    _provision(world, _writer(world))
    queries: list[int] = []
    real = DynamoHandler.query

    def query(handler: Any) -> Any:
        queries.append(1)
        return real(handler)

    monkeypatch.setattr(DynamoHandler, "query", query)
    now = (NOW + timedelta(minutes=5)).isoformat()
    code, out, err = _cli("--stack", _stack(world), "--now", now, "--since", "3650d", "--region", REGION)
    assert (code, err) == (0, "")
    assert "provisioning" in out
    assert out.splitlines()[-1] == (
        "--since clamped to 2025-12-01 12:05:00 UTC: the log keeps records 90 days (stack output DecisionLogTtlDays)"
    )
    assert len(queries) <= 92 * 16

    import boto3

    def stack(name: str, **outputs: str) -> str:
        template = {
            "Resources": {"Q": {"Type": "AWS::SQS::Queue"}},
            "Outputs": {k: {"Value": v} for k, v in outputs.items()},
        }
        boto3.client("cloudformation", region_name=REGION).create_stack(
            StackName=name, TemplateBody=json.dumps(template)
        )
        return name

    week = stack("Week", DecisionTableName=TABLE, DecisionLogTtlDays="7")
    code, out, err = _cli("--stack", week, "--now", now, "--since", "30d", "-o", "json", "--region", REGION)
    assert code == 0
    assert {r["kind"] for r in json.loads(out)} == {"provisioning", "nodeclaim", "unschedulable"}
    assert err == (
        "note: --since clamped to 2026-02-22 12:05:00 UTC: the log keeps records 7 days (stack output "
        "DecisionLogTtlDays)\n"
    )
    older = stack("Older", DecisionTableName=TABLE)  # deployed before the output existed
    code, out, err = _cli("--stack", older, "--now", now, "--since", "0001-01-01T00:00:00Z", "--region", REGION)
    assert (code, out) == (2, "")  # before the year 1000: out of range, not clamped
    code, out, err = _cli("--stack", older, "--now", now, "--since", "1970-01-01T00:00:00Z", "--region", REGION)
    assert (code, err) == (0, "")
    assert out.splitlines()[-1] == (
        "--since clamped to 2025-12-01 12:05:00 UTC: the log keeps records 90 days (the default; the stack has no "
        "DecisionLogTtlDays)"
    )


def test_the_decisions_command_names_a_missing_stack_or_log(world: dict[str, Any]) -> None:
    code, _, err = _cli("--stack", "Nodeflow-nope", "--region", REGION)
    assert code == 2
    assert "--stack: 'Nodeflow-nope'" in err
    import boto3

    boto3.client("cloudformation", region_name=REGION).create_stack(
        StackName="Other",
        TemplateBody=json.dumps({"Resources": {"Q": {"Type": "AWS::SQS::Queue"}}, "Outputs": {"X": {"Value": "y"}}}),
    )
    code, _, err = _cli("--stack", "Other", "--region", REGION)
    assert code == 2
    assert "--stack: 'Other' has no decision log (no output DecisionTableName)" in err


def test_a_record_this_container_wrote_is_not_written_again(world: dict[str, Any]) -> None:
    from nodeflow.aws.decision_log import DecisionLog
    from nodeflow.governance.decisions import disruption_records

    blocked = [{"node": "n1", "event": "Unconsolidatable", "message": "no cheaper replacement"}]
    remembered: set[str] = set()
    first = DecisionLog(world["ddb"], TABLE, remembered=remembered)
    assert first.write(disruption_records("d1", NOW, blocked=blocked, node_pools={"n1": "default"})) == 2
    later = DecisionLog(world["ddb"], TABLE, remembered=remembered)  # the next invocation, same container
    assert later.write(disruption_records("d2", NOW + timedelta(minutes=1), blocked=blocked)) == 0
    assert later.skipped == 1
    (record,) = _read(world)
    assert record.at == NOW  # not rewritten by this container; another one would move it to its round's time


def test_a_blocked_candidate_whose_write_failed_is_written_by_the_next_round(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from nodeflow.aws.decision_log import DecisionLog
    from nodeflow.governance.decisions import disruption_records

    blocked = [{"node": "n1", "event": "Unconsolidatable", "message": "no cheaper replacement"}]
    faults = BatchWriteFaults(monkeypatch, TABLE)
    faults.refuse = True
    remembered: set[str] = set()
    failed = DecisionLog(_no_retries(), TABLE, remembered=remembered, sleep=lambda _s: None)
    assert failed.write(disruption_records("d1", NOW, blocked=blocked, node_pools={"n1": "default"})) == 0
    assert (failed.failed, remembered) == (2, set())
    faults.refuse = False
    later = DecisionLog(world["ddb"], TABLE, remembered=remembered)  # the next round, same container
    assert later.write(disruption_records("d2", NOW + timedelta(minutes=1), blocked=blocked)) == 1
    (record,) = _read(world)
    assert (record.kind, record.at) == ("blocked", NOW + timedelta(minutes=1))
    assert len(remembered) == 1


def test_policy_denials_and_ceilings_are_recorded_with_the_policy(world: dict[str, Any]) -> None:
    """NodeflowPolicies in the cluster: the pods a policy keeps from a NodePool, and those a $/hour ceiling stops,
    are recorded with the policy's reason (in ``policy``), found by pod, and shown by ``decisions``."""
    spec: dict[str, Any] = {"nodePoolAccess": [{"nodePools": ["default"], "namespaces": ["team-0"]}]}
    ceiling = {"costCeilings": {"cluster": {"maxPricePerHour": "0.001"}}}
    for name, body in (("team-0-only", spec), ("cost-caps", ceiling)):
        world["kube"].create(
            {"apiVersion": "nodeflow.io/v1alpha1", "kind": "NodeflowPolicy", "metadata": {"name": name}, "spec": body}
        )
    result = _provision(world, _writer(world))
    assert result.created == []

    records = _read(world)
    denied = [r for r in records if r.kind == "unschedulable" and any("policy team-0-only" in p for p in r.policy)]
    capped = [r for r in records if r.kind == "unschedulable" and any("policy cost-caps" in p for p in r.policy)]
    assert denied, [(r.kind, r.summary) for r in records]
    assert capped, [(r.kind, r.summary) for r in records]
    assert all(p.startswith(("team-1/", "team-2/")) for r in denied for p in r.pods)
    assert "default: namespace team-1 may not use NodePool default: policy team-0-only" in {
        p for r in denied for p in r.policy
    }
    assert all(p.startswith("team-0/") for r in capped for p in r.pods)
    assert all("$/hour ceiling of the cluster" in p for r in capped for p in r.policy)
    run = next(r for r in records if r.kind == "provisioning")
    assert set(run.detail["policies"]) == {"team-0-only", "cost-caps"}

    some = denied[0].pods[0]
    assert [r.kind for r in _read(world, pod=some)] == ["unschedulable"]
    code, out, err = _cli(
        "--stack", _stack(world), "--now", (NOW + timedelta(minutes=1)).isoformat(), "--pod", some, "--region", REGION
    )
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[1].split()[2] == "unschedulable"
    assert lines[2].strip().startswith("policy: default: namespace team-")


def test_an_unschedulable_group_replanned_within_the_hour_rewrites_one_record(world: dict[str, Any]) -> None:
    """A pod held run after run (a policy, a nodeSelector nothing serves) costs one record an hour, not one a run:
    the runs of the hour rewrite it (another container's run too), its pod and NodePool index items point to it, a
    pod that joins the group gets its index item, and the next hour starts a new record."""
    remembered: set[str] = set()

    def records() -> list[dict[str, Any]]:
        return [i for i in _items(world) if i["pk"]["S"].startswith("DECISION#") and i["kind"]["S"] == "unschedulable"]

    _provision(world, _writer(world, remembered=remembered))
    (record,) = records()
    _provision(world, _writer(world, remembered=remembered), now=NOW + timedelta(minutes=5))  # same container
    _provision(world, _writer(world), now=NOW + timedelta(minutes=10))  # another container: rewrites it
    (rewritten,) = records()
    assert (rewritten["pk"], rewritten["sk"]) == (record["pk"], record["sk"])
    assert rewritten["time"]["S"] == "2026-03-01T12:10:00.000Z"
    (latest,) = _read(world, pod=world["stray"], since=timedelta(hours=1))
    assert latest.at == NOW + timedelta(minutes=10)

    joined = held(pod(1, 98, None))
    joined["spec"]["nodeSelector"] = NOWHERE["nodeSelector"]
    world["kube"].create(joined)
    key = f"{joined['metadata']['namespace']}/{joined['metadata']['name']}"
    _provision(world, _writer(world, remembered=remembered), now=NOW + timedelta(minutes=15))
    (group,) = records()
    assert group["sk"] == record["sk"]
    (found,) = _read(world, pod=key)
    assert sorted(found.pods) == sorted([world["stray"], key])
    pods = [i for i in _items(world) if i["pk"]["S"] in (f"POD#{key}", f"POD#{world['stray']}")]
    assert [i["kind"]["S"] for i in pods] == ["unschedulable"] * 2
    assert {i["sk"]["S"] for i in pods} == {record["sk"]["S"]}
    pools = [i for i in _items(world) if i["pk"]["S"] in nodepool_partitions("default")]
    assert (record["pk"]["S"], record["sk"]["S"]) in {ref for i in pools for ref in pointer_refs(i)}

    _provision(world, _writer(world, remembered=remembered), now=NOW + timedelta(hours=1, minutes=1))
    assert len(records()) == 2  # the next hour: a record of its own


def test_nodepool_pointers_written_one_per_record_before_grouping_are_still_read(world: dict[str, Any]) -> None:
    """A table holds, for their TTL, NodePool pointers of the layout before they were grouped (one item a record,
    ``ref``): --nodepool reads those records and the grouped pointers' alike, newest first."""
    from nodeflow.governance.decisions import NODECLAIM, Decision, nodepool_partition, to_item

    _provision(world, _writer(world))
    new = _read(world, nodepool="default")
    old = Decision(NODECLAIM, NOW - timedelta(minutes=30), "old-0001", "old", "NodeClaim x", ("default",))
    item = to_item(old)
    sk = item["sk"]["S"]
    pointer = {"pk": {"S": nodepool_partition("default", sk)}, "sk": {"S": sk}, "ref": item["pk"], "kind": item["kind"]}
    for put in (item, pointer):
        world["ddb"].put_item(TableName=TABLE, Item=put)
    both = _read(world, nodepool="default")
    assert [d.id for d in both] == [d.id for d in new] + ["old-0001"]
    assert [d.id for d in _read(world, nodepool="default", limit=2)] == [d.id for d in new][:2]


# ------------------------------------------------------------------------------------------ faults


def test_a_throttled_log_stops_at_its_deadline_and_counts_what_it_did_not_write(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """DynamoDB throttles every write: the writer stops at the deadline it was given (its retries alone would take
    3.5 s), the NodeClaims are made, and the items not written are counted ``late`` and logged."""
    import time

    from nodeflow.aws.decision_log import DecisionLog

    faults = BatchWriteFaults(monkeypatch, TABLE)
    faults.throttle.left = -1
    budget = 0.5
    deadline: list[float] = []
    logged: list[tuple[str, dict[str, Any]]] = []
    writer = DecisionLog(
        _no_retries(),
        TABLE,
        log=lambda m, e: logged.append((m, e)),
        time_left=lambda: deadline[0] - time.monotonic(),
    )
    took: list[float] = []

    def timed(records: Sequence[Decision]) -> None:
        deadline.append(time.monotonic() + budget)  # the writes get ``budget`` seconds from here
        writer.write(records)
        took.append(time.monotonic() - (deadline[0] - budget))

    result = _provision(world, timed)
    assert result.created
    assert faults.batches, "the writes were tried"
    assert took[0] < budget + 0.5, took  # not the 3.5 s of retries
    assert writer.written == 0
    assert writer.failed == 0
    assert writer.late > 0
    ((message, extra),) = logged
    assert message == "decision log: items not written"
    assert extra["late"] == writer.late
    assert "the deadline came (Throttled: " in extra["errors"][0]


def test_a_write_past_its_deadline_sends_nothing_and_counts_every_item(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run took all its time: the writer sends nothing, builds nothing, and counts each record and index item
    it would have written as late."""
    from nodeflow.aws.decision_log import DecisionLog
    from nodeflow.governance.decisions import item_count

    faults = BatchWriteFaults(monkeypatch, TABLE)
    writer = DecisionLog(world["ddb"], TABLE, time_left=lambda: 0.0)
    given: list[Decision] = []

    def hook(records: Sequence[Decision]) -> None:
        given.extend(records)
        writer.write(records)

    assert _provision(world, hook).created
    assert faults.batches == []
    assert writer.late == item_count(given) > 0
    assert (writer.written, writer.failed) == (0, 0)


def test_a_record_whose_write_failed_is_written_by_the_next_run(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The container remembers a record only once all its items are written: a run whose writes all failed, and a
    run whose one pod pointer stayed unprocessed, leave the hour's unschedulable record to the next run."""
    from nodeflow.aws.decision_log import DecisionLog

    faults = BatchWriteFaults(monkeypatch, TABLE)
    remembered: set[str] = set()

    def writer() -> DecisionLog:
        return DecisionLog(_no_retries(), TABLE, remembered=remembered, sleep=lambda _s: None)

    faults.refuse = True
    first = writer()
    _provision(world, first)
    assert first.failed > 0
    assert remembered == set()
    assert _read(world, pod=world["stray"]) == []

    faults.refuse = False
    stray_pointer = f"POD#{world['stray']}"
    faults.hold = lambda item: item["pk"]["S"] == stray_pointer  # that one item stays unprocessed
    partly = writer()
    _provision(world, partly, now=NOW + timedelta(minutes=5))
    assert partly.failed == 1
    assert _read(world, pod=world["stray"]) == []  # its pointer is missing
    records = [i for i in _items(world) if i["pk"]["S"].startswith("DECISION#")]
    assert [i["kind"]["S"] for i in records].count("unschedulable") == 1  # the record itself was written
    assert remembered, "the records written whole are remembered"

    faults.hold = None
    last = writer()
    _provision(world, last, now=NOW + timedelta(minutes=10))  # the same hour, the same container
    assert last.failed == 0
    (found,) = _read(world, pod=world["stray"])
    assert found.kind == "unschedulable"
    assert found.at == NOW + timedelta(minutes=10)
    again = writer()
    _provision(world, again, now=NOW + timedelta(minutes=15))
    assert again.skipped == 1  # written now: remembered, not written again


def _racks(values: int) -> dict[str, Any]:
    """A required node affinity that no NodePool can satisfy, listing ``values`` values (its reason lists them)."""
    term = {"key": "example.com/rack", "operator": "In", "values": [f"rack-{i:07d}" for i in range(values)]}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [term]}]}
        }
    }


@pytest.fixture
def huge(world: dict[str, Any]) -> str:
    """A pod whose unschedulable reason lists 40,000 rack names (~560 KB: over DynamoDB's 400 KB item limit)."""
    big = held(pod(2, 97, None))
    big["spec"]["affinity"] = _racks(40_000)
    world["kube"].create(big)
    return f"{big['metadata']['namespace']}/{big['metadata']['name']}"


def test_a_record_over_the_item_limit_is_capped_and_its_batch_is_written(
    world: dict[str, Any], huge: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unschedulable pod whose reason lists 40,000 values: its record is stored with the reason cut (a marker,
    and the characters cut counted in ``detail.truncated``), under the item limit, and every other item of its
    batch is written too (DynamoDB, as the fault makes moto do, refuses a batch with one item too big whole)."""
    faults = BatchWriteFaults(monkeypatch, TABLE)
    faults.aws_size_check = True
    writer = _writer(world)
    result = _provision(world, writer)
    assert result.created
    assert writer.failed == 0, world["logged"]
    stored = _items(world)
    assert writer.written == len(stored)
    from nodeflow.governance.decisions import MAX_ITEM_BYTES, MAX_TEXT, item_size

    (record,) = _read(world, pod=huge)
    reason = record.detail["reasons"]["default"]
    assert reason.startswith("incompatible requirements: example.com/rack: requires In [rack-0000000, ")
    assert len(reason) < MAX_TEXT + 40
    assert reason.endswith(" characters]")
    assert record.detail["truncated"]["detail.reasons"]["characters"] > 500_000
    assert all(item_size(i) <= MAX_ITEM_BYTES for i in stored)
    batch = next(b for b in faults.batches if any(i["sk"] == {"S": record.sk} for i in b))
    assert len(batch) > 1
    assert _keys(batch) <= _keys(stored)  # its batch mates: all written


def test_a_batch_refused_for_one_item_is_written_item_by_item(
    world: dict[str, Any], huge: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record the caps miss (here: caps raised past DynamoDB's limit) makes DynamoDB refuse its batch: the batch's
    items are sent again one by one, so only that record is lost (counted and logged); its index items and its
    batch mates are written."""
    from nodeflow.governance import decisions as dl

    monkeypatch.setattr(dl, "MAX_TEXT", 10**7, raising=False)
    monkeypatch.setattr(dl, "MAX_ITEM_BYTES", 10**7, raising=False)
    faults = BatchWriteFaults(monkeypatch, TABLE)
    faults.aws_size_check = True
    writer = _writer(world)
    result = _provision(world, writer)
    assert result.created
    assert writer.failed == 1
    ((message, extra),) = world["logged"]
    assert message == "decision log: items not written"
    assert "Item size has exceeded the maximum allowed size" in extra["errors"][0]
    stored = _keys(_items(world))
    (refused,) = [b for b in faults.batches if len(b) > 1 and any(len(str(i)) > 400_000 for i in b)]
    lost = {k for k in _keys(refused) if k not in stored}
    assert len(lost) == 1
    assert lost.pop()[0].startswith("DECISION#")
    assert len(_keys(refused) & stored) == len(refused) - 1  # the other items of its batch
    assert writer.written == len(stored)
