"""The stack's IAM conditions let nodeflow act on what Karpenter v1.14 launched (docs/migration/from-karpenter.md).

Karpenter's AWS provider (v1.14.1) tags its launch templates, instances and volumes with ``utils.GetTags``
(``kubernetes.io/cluster/NAME: owned``, ``karpenter.sh/nodepool``, ``eks:eks-cluster-name``,
``karpenter.k8s.aws/ec2nodeclass``, plus the EC2NodeClass's ``spec.tags``), and once a node registered its tagging
controller adds ``Name`` and ``karpenter.sh/nodeclaim``. An adopted instance must be terminable by the functions that
terminate (interruption, termination, cleanup, gc), and Karpenter's launch templates deletable by gc once nothing uses
them; a resource of another cluster, or one nothing tagged for a NodePool, must not be. The conditions are evaluated
here as IAM evaluates StringEquals / StringLike on ``aws:ResourceTag/<key>`` (every key of an operator must match).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from typing import Any

import pytest

from tests.infra.conftest import Synthesized
from tests.infra.helpers import actions_of, statements


def karpenters_tags(cluster: str, *, tagged: bool = True) -> dict[str, str]:
    """The tags Karpenter's instance carries (``tagged``: after its tagging controller ran; the launch template's:
    without)."""
    tags = {
        f"kubernetes.io/cluster/{cluster}": "owned",
        "karpenter.sh/nodepool": "default",
        "eks:eks-cluster-name": cluster,
        "karpenter.k8s.aws/ec2nodeclass": "default",
        "team": "web",  # an EC2NodeClass spec.tags entry
    }
    if tagged:
        tags |= {"Name": "ip-10-0-1-23.ec2.internal", "karpenter.sh/nodeclaim": "default-k7x2q"}
    return tags


def allows(condition: Mapping[str, Mapping[str, Any]], tags: Mapping[str, str]) -> bool:
    """Whether a statement's Condition holds for a resource with ``tags`` (only resource-tag conditions)."""
    for operator, pairs in condition.items():
        for key, want in pairs.items():
            assert key.startswith("aws:ResourceTag/"), key
            have = tags.get(key.removeprefix("aws:ResourceTag/"))
            wanted = want if isinstance(want, list) else [want]
            if have is None:
                return False
            if operator == "StringEquals" and have not in wanted:
                return False
            if operator == "StringLike" and not any(fnmatch.fnmatchcase(have, w) for w in wanted):
                return False
            assert operator in ("StringEquals", "StringLike"), operator
    return True


def _statement(synthesized: Synthesized, which: str, action: str) -> dict[str, Any]:
    found = [
        st
        for _, st in statements(synthesized.resources(which, "AWS::IAM::Policy"))
        if action in actions_of(st) and st["Effect"] == "Allow"
    ]
    assert found, action
    conditions = {str(st.get("Condition")) for st in found}
    assert len(conditions) == 1, conditions  # every function granted it is granted it alike
    return found[0]


@pytest.mark.parametrize("which", ["default", "full"])
def test_karpenters_instances_and_launch_templates_can_be_acted_on(synthesized: Synthesized, which: str) -> None:
    cluster = synthesized.stacks[which].config.cluster_name
    terminate = _statement(synthesized, which, "ec2:TerminateInstances")["Condition"]
    delete_template = _statement(synthesized, which, "ec2:DeleteLaunchTemplate")["Condition"]
    assert allows(terminate, karpenters_tags(cluster))
    assert allows(terminate, karpenters_tags(cluster, tagged=False))  # before its tagging controller ran
    assert allows(delete_template, karpenters_tags(cluster, tagged=False))

    other = karpenters_tags("another-cluster")
    assert not allows(terminate, other)
    assert not allows(delete_template, other)
    no_pool = {k: v for k, v in karpenters_tags(cluster).items() if k != "karpenter.sh/nodepool"}
    assert not allows(terminate, no_pool)  # an instance of the cluster nothing launched for a NodePool
