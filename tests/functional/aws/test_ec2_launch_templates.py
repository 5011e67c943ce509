"""Which launch templates nodeflow may ever delete (``list_launch_templates``), deleting one, and the error a call
naming a deleted template gets, against moto."""

from __future__ import annotations

from typing import Any

import pytest

from nodeflow.aws.ec2.fleet import create_fleet
from nodeflow.aws.ec2.launch_templates import (
    delete_launch_template,
    ensure_launch_template,
    is_launch_template_not_found,
    list_launch_templates,
)
from nodeflow.aws.ec2.tags import cluster_tags
from nodeflow.aws.errors import NotFound
from nodeflow.kube.reports import Reports
from nodeflow.lifecycle import launch_template_gc as lt
from tests.functional.aws.conftest import CLUSTER
from tests.functional.aws.test_ec2_launch import fleet_request, lt_spec


def _template(world: Any, name: str, tags: dict[str, str]) -> str:
    tagged = [{"ResourceType": "launch-template", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]
    out = world.ec2.create_launch_template(
        LaunchTemplateName=name,
        LaunchTemplateData={"ImageId": world.images.get("node") or world.image("node")},
        TagSpecifications=tagged if tags else [],
    )
    return str(out["LaunchTemplate"]["LaunchTemplateId"])


def _owned(cluster: str = CLUSTER, node_class: str = "default") -> dict[str, str]:
    return {**cluster_tags(cluster), "karpenter.sh/nodepool": "general", "karpenter.k8s.aws/ec2nodeclass": node_class}


def test_only_the_templates_a_provisioner_of_the_cluster_made_are_listed(world: Any) -> None:
    mine = ensure_launch_template(world.ec2, lt_spec(world))
    other_class = ensure_launch_template(world.ec2, lt_spec(world, node_class="gpu"))
    _template(world, "karpenter.k8s.aws/1234567890", _owned())  # Karpenter's, from before nodeflow: the same tags
    _template(world, "nodeflow/other-cluster", _owned(cluster="other"))
    _template(
        world, "nodeflow/no-nodeclass", {k: v for k, v in _owned().items() if k != "karpenter.k8s.aws/ec2nodeclass"}
    )
    _template(world, "nodeflow/no-nodepool", {k: v for k, v in _owned().items() if k != "karpenter.sh/nodepool"})
    _template(world, "nodeflow/no-eks-tag", {k: v for k, v in _owned().items() if k != "eks:eks-cluster-name"})
    _template(world, "nodeflow/shared", {**_owned(), f"kubernetes.io/cluster/{CLUSTER}": "shared"})
    _template(world, "someone-elses", _owned())  # tagged alike, but named by neither nodeflow nor Karpenter
    _template(world, "untagged", {})

    listed = list_launch_templates(world.ec2, CLUSTER)
    assert sorted(t.name for t in listed) == sorted([mine, other_class, "karpenter.k8s.aws/1234567890"])
    by_name = {t.name: t for t in listed}
    assert by_name[mine].node_class == "default"
    assert by_name[other_class].node_class == "gpu"
    assert all(t.id.startswith("lt-") and t.created is not None for t in listed)


def test_deleting_a_template_and_one_gone_already(world: Any) -> None:
    name = ensure_launch_template(world.ec2, lt_spec(world))
    (template,) = list_launch_templates(world.ec2, CLUSTER)
    assert delete_launch_template(world.ec2, template) is True
    assert list_launch_templates(world.ec2, CLUSTER) == []
    assert delete_launch_template(world.ec2, template) is False  # gone already: not an error
    assert ensure_launch_template(world.ec2, lt_spec(world)) == name  # made again under the same name


def test_a_fleet_naming_a_deleted_template_says_so(world: Any) -> None:
    name = ensure_launch_template(world.ec2, lt_spec(world))
    (template,) = list_launch_templates(world.ec2, CLUSTER)
    delete_launch_template(world.ec2, template)
    with pytest.raises(NotFound) as caught:
        create_fleet(world.ec2, fleet_request(world, name))
    assert is_launch_template_not_found(caught.value)
    assert not is_launch_template_not_found(NotFound("no such instance", code="InvalidInstanceID.NotFound"))


class _RefusingOne:
    """The EC2 client, but DeleteLaunchTemplate of ``refused`` answers UnauthorizedOperation (as IAM would)."""

    def __init__(self, ec2: Any, refused: str) -> None:
        self._ec2, self.refused = ec2, refused

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ec2, name)

    def delete_launch_template(self, **kwargs: Any) -> Any:
        from botocore.exceptions import ClientError

        if kwargs.get("LaunchTemplateId") == self.refused:
            error = {"Code": "UnauthorizedOperation", "Message": "You are not authorized to perform this operation."}
            raise ClientError({"Error": error}, "DeleteLaunchTemplate")
        return self._ec2.delete_launch_template(**kwargs)


def test_a_run_deletes_the_oldest_unused_templates_up_to_its_limit_and_goes_on_past_a_refusal(
    world: Any, monkeypatch: pytest.MonkeyPatch
) -> None:

    names = {ensure_launch_template(world.ec2, lt_spec(world, node_pool=f"pool-{i}")) for i in range(4)}
    _template(world, "untagged", {})
    # oldest first (moto stamps creation times to the second: then by name)
    order = sorted(list_launch_templates(world.ec2, CLUSTER), key=lambda t: (t.created, t.name))
    assert {t.name for t in order} == names
    refused = order[0]
    logged: list[tuple[str, dict[str, Any]]] = []
    deps = lt.LaunchTemplateDeps(
        kube=None,  # type: ignore[arg-type]  # no EC2NodeClass: the API server is not asked
        ec2=_RefusingOne(world.ec2, refused.id),
        recorder=None,  # type: ignore[arg-type]
        cluster_name=CLUSTER,
        log=lambda message, extra: logged.append((message, extra)),
    )
    monkeypatch.setattr(lt, "DELETIONS_PER_RUN", 3)
    later = max(t.created for t in order if t.created) + lt.TEMPLATE_GRACE

    result = lt.collect_launch_templates(deps, [], [], [], later, Reports())
    assert result == {"deletedLaunchTemplates": sorted([order[1].name, order[2].name]), "finalizedNodeClasses": []}
    assert [(m, e["launchTemplate"]) for m, e in logged] == [("launch template not deleted", refused.name)]
    assert {t.name for t in list_launch_templates(world.ec2, CLUSTER)} == {refused.name, order[3].name}
    assert "untagged" in {t["LaunchTemplateName"] for t in world.ec2.describe_launch_templates()["LaunchTemplates"]}
