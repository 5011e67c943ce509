"""The pure rules of launch-template garbage collection (lifecycle/launch_template_gc.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nodeflow.api.karpenter import EC2NodeClass
from nodeflow.aws.ec2.instances import InstanceInfo
from nodeflow.aws.ec2.launch_templates import LaunchTemplate
from nodeflow.lifecycle.launch_template_gc import TEMPLATE_GRACE, finalizer_patches, unused, waiting_message

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def _template(name: str, age: timedelta | None) -> LaunchTemplate:
    return LaunchTemplate(f"lt-{name}", f"nodeflow/{name}", "default", None if age is None else NOW - age)


def _instance(template_id: str, state: str = "running") -> InstanceInfo:
    tags = {"aws:ec2launchtemplate:id": template_id}
    return InstanceInfo("i-1", state, "m5.large", "us-east-1a", "on-demand", None, NOW, tags)


def test_unused_templates_past_the_grace() -> None:
    templates = [
        _template("used", TEMPLATE_GRACE * 3),
        _template("old", TEMPLATE_GRACE),
        _template("young", TEMPLATE_GRACE - timedelta(seconds=1)),
        _template("unknown-age", None),
    ]
    assert [t.name for t in unused(templates, [_instance("lt-used")], NOW)] == ["nodeflow/old"]
    assert [t.name for t in unused(templates, [], NOW)] == ["nodeflow/used", "nodeflow/old"]


def _class(name: str, **meta: object) -> EC2NodeClass:
    return EC2NodeClass.model_validate(
        {
            "apiVersion": "karpenter.k8s.aws/v1",
            "kind": "EC2NodeClass",
            "metadata": {"name": name, "resourceVersion": "7", **meta},
            "spec": {
                "role": "node",
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"tags": {"a": "b"}}],
                "securityGroupSelectorTerms": [{"tags": {"a": "b"}}],
            },
        }
    )


def test_the_finalizer_goes_on_every_class_not_being_deleted_that_lacks_it() -> None:
    classes = [
        _class("new", finalizers=["example.com/keep"]),
        _class("done", finalizers=["karpenter.k8s.aws/termination"]),
        _class("leaving", deletionTimestamp="2026-05-01T11:00:00Z", finalizers=["example.com/keep"]),
    ]
    assert finalizer_patches(classes) == {
        "new": {
            "metadata": {"finalizers": ["example.com/keep", "karpenter.k8s.aws/termination"], "resourceVersion": "7"}
        }
    }


def test_the_waiting_message_names_five_node_claims_at_most() -> None:
    assert waiting_message(["a"]) == "Waiting on NodeClaim termination for a"
    names = [f"c{i}" for i in range(7)]
    assert waiting_message(names) == "Waiting on NodeClaim termination for c0, c1, c2, c3, c4 and 2 other(s)"
