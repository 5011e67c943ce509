"""The in-cluster install in the synthesized stacks (infra/install.py): the cluster check every access entry waits
for, the installer's access entry, the install custom resource with its properties and its place in the deploy and
destroy order, and what the installer's role may do."""

from __future__ import annotations

from typing import Any

import pytest

from infra.config import ConfigError, NodeflowConfig
from infra.install import CHECK_TYPE, CLUSTER_ADMIN_POLICY, INSTALL_TYPE
from nodeflow.handlers.install import CHECK_TYPE as HANDLED_CHECK
from nodeflow.handlers.install import INSTALL_TYPE as HANDLED_INSTALL
from nodeflow.install import source_digest
from tests.infra.conftest import Synthesized
from tests.infra.helpers import actions_of, as_list, function_named, ref_of, role_statements


def _one(synthesized: Synthesized, which: str, type_: str) -> tuple[str, dict[str, Any]]:
    (found,) = synthesized.resources(which, type_).items()
    return found


def _installer(synthesized: Synthesized, which: str) -> tuple[str, dict[str, Any]]:
    cluster = synthesized.stacks[which].config.cluster_name
    return function_named(synthesized.resources(which), f"nodeflow-{cluster}-install")


def test_the_handler_serves_the_types_the_stack_declares() -> None:
    assert (CHECK_TYPE, INSTALL_TYPE) == (HANDLED_CHECK, HANDLED_INSTALL)


@pytest.mark.parametrize(("which", "entries"), [("default", True), ("full", False)])
def test_every_access_entry_waits_for_the_cluster_check(synthesized: Synthesized, which: str, entries: bool) -> None:
    fn_id, _ = _installer(synthesized, which)
    check_id, check = _one(synthesized, which, CHECK_TYPE)
    p = check["Properties"]
    assert ref_of(p["ServiceToken"]) == fn_id
    assert p["ClusterName"] == synthesized.stacks[which].config.cluster_name
    assert p["AccessEntries"] is entries
    access_entries = synthesized.resources(which, "AWS::EKS::AccessEntry")
    assert bool(access_entries) is entries
    for lid, entry in access_entries.items():
        assert check_id in as_list(entry.get("DependsOn", [])), lid


def test_the_installer_is_cluster_admin_through_its_own_access_entry(synthesized: Synthesized) -> None:
    res = synthesized.resources("default")
    _, fn = _installer(synthesized, "default")
    role_id = ref_of(fn["Properties"]["Role"])
    (entry,) = [
        e["Properties"]
        for e in synthesized.resources("default", "AWS::EKS::AccessEntry").values()
        if ref_of(e["Properties"]["PrincipalArn"]) == role_id
    ]
    assert entry["ClusterName"] == "demo"
    assert entry["Type"] == "STANDARD"
    assert "KubernetesGroups" not in entry
    (policy,) = entry["AccessPolicies"]
    assert policy["AccessScope"] == {"Type": "cluster"}
    assert policy["PolicyArn"] == {
        "Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, f":eks::aws:cluster-access-policy/{CLUSTER_ADMIN_POLICY}"]]
    }
    # The role: Lambda only; no trigger on the function (only CloudFormation invokes it).
    assumed = res[role_id or ""]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert [s["Principal"] for s in assumed] == [{"Service": "lambda.amazonaws.com"}]
    fn_id, _ = _installer(synthesized, "default")
    for kind in ("AWS::Lambda::EventSourceMapping", "AWS::Lambda::Url", "AWS::Scheduler::Schedule"):
        for trigger in synthesized.resources("default", kind).values():
            assert fn_id not in str(trigger["Properties"]), kind
    assert not [p for p in synthesized.resources("default", "AWS::Lambda::Permission").values() if fn_id in str(p)]
    assert fn["Properties"]["Timeout"] == 900


def test_the_install_resource_carries_the_stack_values_and_the_files_digest(synthesized: Synthesized) -> None:
    res = synthesized.resources("default")
    fn_id, _ = _installer(synthesized, "default")
    _, install = _one(synthesized, "default", INSTALL_TYPE)
    p = install["Properties"]
    assert ref_of(p["ServiceToken"]) == fn_id
    assert p["ClusterName"] == "demo"
    url_id = ref_of(p["WebhookUrl"])
    assert res[url_id or ""]["Type"] == "AWS::Lambda::Url"
    assert p["WebhookUrl"] == synthesized.template("default")["Outputs"]["WebhookUrl"]["Value"]
    assert res[ref_of(p["AgentRoleArn"]) or ""]["Type"] == "AWS::IAM::Role"  # the Pod Identity role it made
    assert p["PodIdentity"] is True
    assert p["SourceDigest"] == source_digest()
    assert p["AgentReadySeconds"] == 300
    assert "HmacSecretArn" not in p


def test_the_install_runs_after_everything_and_is_destroyed_first(synthesized: Synthesized) -> None:
    """It depends on every other resource: created last, and on cdk destroy deleted first, so a refusal (NodeClaims
    still managed) leaves the stack whole."""
    res = synthesized.resources("default")
    install_id, install = _one(synthesized, "default", INSTALL_TYPE)
    check_id, _ = _one(synthesized, "default", CHECK_TYPE)
    depends = set(as_list(install["DependsOn"]))
    others = set(res) - {install_id, check_id, "CDKMetadata"}
    assert others - depends == set()
    # Nothing depends on it (no cycle, nothing deleted before it).
    assert not [lid for lid, r in res.items() if install_id in as_list(r.get("DependsOn", []))]


def test_the_installers_role_may_only_describe_the_cluster_and_read_the_hmac_secret(synthesized: Synthesized) -> None:
    res = synthesized.resources("hmac")
    _, fn = _installer(synthesized, "hmac")
    statements = role_statements(res, ref_of(fn["Properties"]["Role"]) or "")
    granted = {a for st in statements for a in actions_of(st)}
    assert granted == {
        "eks:DescribeCluster",
        "secretsmanager:GetSecretValue",
        "secretsmanager:DescribeSecret",
        "logs:CreateLogStream",
        "logs:PutLogEvents",
        "xray:PutTraceSegments",
        "xray:PutTelemetryRecords",
    }
    (describe,) = [st for st in statements if "eks:DescribeCluster" in actions_of(st)]
    assert describe["Resource"]["Fn::Join"][1][-1] == ":cluster/hmac"
    (secret_id,) = synthesized.resources("hmac", "AWS::SecretsManager::Secret")
    (read,) = [st for st in statements if "secretsmanager:GetSecretValue" in actions_of(st)]
    assert ref_of(read["Resource"]) == secret_id
    _, install = _one(synthesized, "hmac", INSTALL_TYPE)
    assert ref_of(install["Properties"]["HmacSecretArn"]) == secret_id
    assert install["Properties"]["AgentReadySeconds"] == 0
    # Without the install (full: eksAccessEntries=false), the hmac stack's function cannot read the secret.
    _, full_fn = _installer(synthesized, "full")
    full = role_statements(synthesized.resources("full"), ref_of(full_fn["Properties"]["Role"]) or "")
    assert {a for st in full for a in actions_of(st)} & {"secretsmanager:GetSecretValue"} == set()
    assert synthesized.resources("full", INSTALL_TYPE) == {}


def test_cluster_install_needs_access_entries_and_follows_them_by_default() -> None:
    assert NodeflowConfig.from_mapping({"clusterName": "a"}).cluster_install is True
    assert NodeflowConfig.from_mapping({"clusterName": "a", "eksAccessEntries": "false"}).cluster_install is False
    assert NodeflowConfig.from_mapping({"clusterName": "a", "clusterInstall": "false"}).cluster_install is False
    with pytest.raises(ConfigError, match=r"^context clusterInstall: needs eksAccessEntries=true"):
        NodeflowConfig.from_mapping({"clusterName": "a", "eksAccessEntries": "false", "clusterInstall": "true"})
    with pytest.raises(ConfigError, match=r"^context installWaitSeconds: expected a whole number from 0 to 600"):
        NodeflowConfig.from_mapping({"clusterName": "a", "installWaitSeconds": "900"})


def test_the_governance_record_lists_the_installers_access_policy() -> None:
    from nodeflow.governance.permissions import load_permissions

    perms = load_permissions()
    assert perms.error is None
    assert perms.kubernetes["accessPolicies"] == {
        "install": {"policy": CLUSTER_ADMIN_POLICY, "when": "clusterInstall (default with eksAccessEntries)"}
    }
