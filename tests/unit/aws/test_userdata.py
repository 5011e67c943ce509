"""userData rendering per AMI family: parse the output back and check what the node will see."""

from __future__ import annotations

import base64
import email.message
import email.parser
import email.policy
import tomllib
from typing import Any

import pytest
import yaml

from nodeflow.api.karpenter import KubeletConfiguration
from nodeflow.api.meta import Taint
from nodeflow.aws.userdata import (
    CONTENT_TYPE_NODECONFIG,
    ClusterInfo,
    MimePart,
    NodeBootstrap,
    bottlerocket_version,
    parse_mime_archive,
    render_mime_archive,
    render_user_data,
    toml_dumps,
)

CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").decode()
CLUSTER = ClusterInfo(
    name="demo",
    endpoint="https://ABCDEF.gr7.us-west-2.eks.amazonaws.com",
    ca_bundle=CA,
    cidr="10.100.0.0/16",
    dns_ip="10.100.0.10",
)
LABELS = {"team": "web", "karpenter.sh/nodepool": "default", "karpenter.sh/capacity-type": "spot"}
TAINTS = [
    Taint(key="dedicated", value="gpu", effect="NoSchedule"),
    Taint(key="karpenter.sh/unregistered", effect="NoExecute"),
]
KUBELET = KubeletConfiguration.model_validate(
    {
        "clusterDNS": ["10.100.0.53"],
        "maxPods": 58,
        "podsPerCore": 4,
        "systemReserved": {"cpu": "100m", "memory": "100Mi"},
        "kubeReserved": {"cpu": "200m", "memory": "1Gi"},
        "evictionHard": {"memory.available": "5%"},
        "evictionSoft": {"memory.available": "10%"},
        "evictionSoftGracePeriod": {"memory.available": "1m30s"},
        "evictionMaxPodGracePeriod": 60,
        "imageGCHighThresholdPercent": 85,
        "imageGCLowThresholdPercent": 80,
        "cpuCFSQuota": False,
    }
)

SHELL = "#!/bin/bash\necho 'hello from the user'\n"
USER_NODECONFIG = """apiVersion: node.eks.aws/v1alpha1
kind: NodeConfig
spec:
  kubelet:
    config:
      shutdownGracePeriod: 30s
"""
USER_MIME = (
    "MIME-Version: 1.0\r\n"
    'Content-Type: multipart/mixed; boundary="BOUNDARY"\r\n'
    "\r\n"
    "--BOUNDARY\r\n"
    'Content-Type: text/x-shellscript; charset="us-ascii"\r\n'
    "\r\n"
    "#!/bin/bash\r\n"
    "echo one\r\n"
    "--BOUNDARY\r\n"
    "Content-Type: application/node.eks.aws\r\n"
    "\r\n" + USER_NODECONFIG.replace("\n", "\r\n") + "--BOUNDARY--\r\n"
)


def boot(family: str, **overrides: Any) -> NodeBootstrap:
    fields: dict[str, Any] = {
        "cluster": CLUSTER,
        "labels": LABELS,
        "taints": TAINTS,
        "kubelet": KUBELET,
        "max_pods": None,
        "ami_family": family,
        "user_data": None,
    }
    fields.update(overrides)
    return NodeBootstrap(**fields)


def mime_parts(text: str) -> list[email.message.Message]:
    message = email.parser.Parser(policy=email.policy.compat32).parsestr(text)
    assert message.get_content_type() == "multipart/mixed"
    assert message["MIME-Version"] == "1.0"
    assert not message.defects
    payload = message.get_payload()
    assert isinstance(payload, list)
    return [part for part in payload if isinstance(part, email.message.Message)]


def body(part: email.message.Message) -> str:
    payload = part.get_payload()
    assert isinstance(payload, str)
    return payload


# ---------------------------------------------------------------------------------------------- AL2023


def generated_nodeconfig(text: str) -> dict[str, Any]:
    last = mime_parts(text)[-1]
    assert last.get_content_type() == CONTENT_TYPE_NODECONFIG
    loaded = yaml.safe_load(body(last))
    assert isinstance(loaded, dict)
    return loaded


def test_al2023_nodeconfig_has_cluster_kubelet_labels_and_taints() -> None:
    out = render_user_data(boot("AL2023"))
    parts = mime_parts(out)
    assert len(parts) == 1
    doc = generated_nodeconfig(out)
    assert doc["apiVersion"] == "node.eks.aws/v1alpha1"
    assert doc["kind"] == "NodeConfig"
    assert doc["spec"]["cluster"] == {
        "name": "demo",
        "apiServerEndpoint": CLUSTER.endpoint,
        "certificateAuthority": CA,
        "cidr": "10.100.0.0/16",
    }
    config = doc["spec"]["kubelet"]["config"]
    assert config["maxPods"] == 58
    assert config["clusterDNS"] == ["10.100.0.53"]
    assert config["podsPerCore"] == 4
    assert config["systemReserved"] == {"cpu": "100m", "memory": "100Mi"}
    assert config["kubeReserved"] == {"cpu": "200m", "memory": "1Gi"}
    assert config["evictionHard"] == {"memory.available": "5%"}
    assert config["evictionSoft"] == {"memory.available": "10%"}
    assert config["evictionSoftGracePeriod"] == {"memory.available": "1m30s"}
    assert config["evictionMaxPodGracePeriod"] == 60
    assert config["imageGCHighThresholdPercent"] == 85
    assert config["imageGCLowThresholdPercent"] == 80
    assert config["cpuCFSQuota"] is False
    assert config["registerWithTaints"] == [
        {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
        {"key": "karpenter.sh/unregistered", "effect": "NoExecute"},
    ]
    assert doc["spec"]["kubelet"]["flags"] == [
        "--node-labels=karpenter.sh/capacity-type=spot,karpenter.sh/nodepool=default,team=web"
    ]


def test_al2023_minimal_uses_cluster_dns_ip_and_explicit_max_pods() -> None:
    out = render_user_data(boot("AL2023", labels={}, taints=[], kubelet=None, max_pods=29))
    doc = generated_nodeconfig(out)
    assert doc["spec"]["kubelet"] == {"config": {"maxPods": 29, "clusterDNS": ["10.100.0.10"]}}


def test_al2023_max_pods_argument_wins_over_kubelet() -> None:
    doc = generated_nodeconfig(render_user_data(boot("AL2023", max_pods=17)))
    assert doc["spec"]["kubelet"]["config"]["maxPods"] == 17


def test_al2023_shell_user_data_is_its_own_part_first() -> None:
    parts = mime_parts(render_user_data(boot("AL2023", user_data=SHELL)))
    assert [p.get_content_type() for p in parts] == ["text/x-shellscript", CONTENT_TYPE_NODECONFIG]
    assert body(parts[0]).rstrip("\n") == SHELL.rstrip("\n")


def test_al2023_yaml_user_data_becomes_nodeconfig_part() -> None:
    parts = mime_parts(render_user_data(boot("AL2023", user_data=USER_NODECONFIG)))
    assert [p.get_content_type() for p in parts] == [CONTENT_TYPE_NODECONFIG, CONTENT_TYPE_NODECONFIG]
    assert yaml.safe_load(body(parts[0]))["spec"]["kubelet"]["config"] == {"shutdownGracePeriod": "30s"}
    assert yaml.safe_load(body(parts[1]))["spec"]["cluster"]["name"] == "demo"


def test_al2023_mime_user_data_parts_are_merged_in_order() -> None:
    out = render_user_data(boot("AL2023", user_data=USER_MIME))
    assert "\r" not in out
    parts = mime_parts(out)
    assert [p.get_content_type() for p in parts] == [
        "text/x-shellscript",
        CONTENT_TYPE_NODECONFIG,
        CONTENT_TYPE_NODECONFIG,
    ]
    assert "echo one" in body(parts[0])
    assert parts[0]["Content-Type"] == 'text/x-shellscript; charset="us-ascii"'
    assert yaml.safe_load(body(parts[1]))["spec"]["kubelet"]["config"]["shutdownGracePeriod"] == "30s"
    assert yaml.safe_load(body(parts[2]))["spec"]["cluster"]["name"] == "demo"


def test_nested_multipart_user_data_is_flattened() -> None:
    nested = (
        "Content-Type: multipart/mixed; boundary=outer\n\n"
        "--outer\nContent-Type: multipart/mixed; boundary=inner\n\n"
        "--inner\nContent-Type: text/x-shellscript\n\necho a\n--inner\nContent-Type: text/x-shellscript\n\necho b\n"
        "--inner--\n--outer\nContent-Type: text/cloud-config\n\npackages: [jq]\n--outer--\n"
    )
    parts = parse_mime_archive(nested)
    assert [p.content for p in parts] == ["echo a", "echo b", "packages: [jq]"]
    assert [p.content_type for p in parts] == ["text/x-shellscript", "text/x-shellscript", "text/cloud-config"]


@pytest.mark.parametrize(
    ("user_data", "message"),
    [
        (
            'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="X"\n\n--X\nContent-Type: text/plain\n\nhi\n',
            "close boundary",
        ),
        ('MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="X"\n\nno parts\n', "start boundary"),
        ("MIME-Version: 1.0\nContent-Type: text/x-shellscript\n\necho hi\n", "not multipart"),
        ("MIME-Version: 1.0\n\necho hi\n", "missing Content-Type"),
        ("Content-Type: multipart/mixed\n\n--X\n\nhi\n--X--\n", "boundary"),
    ],
)
@pytest.mark.parametrize("family", ["AL2023", "AL2"])
def test_bad_mime_user_data_is_rejected(family: str, user_data: str, message: str) -> None:
    with pytest.raises(ValueError, match="userData MIME archive") as caught:
        render_user_data(boot(family, user_data=user_data))
    assert message in str(caught.value)


def test_mime_boundary_is_changed_when_a_part_contains_it() -> None:
    parts = [MimePart.of("text/x-shellscript", "echo a\n--//\necho b"), MimePart.of("text/plain", "x")]
    out = render_mime_archive(parts)
    assert 'boundary="//"' not in out
    assert [body(p) for p in mime_parts(out)] == ["echo a\n--//\necho b", "x"]


def test_bad_ca_bundle_is_rejected() -> None:
    bad = ClusterInfo(name="demo", endpoint="https://x", ca_bundle="not base64!!")
    for family in ("AL2023", "AL2", "Bottlerocket", "Windows2022"):
        with pytest.raises(ValueError, match="ca_bundle"):
            render_user_data(boot(family, cluster=bad))


# ------------------------------------------------------------------------------------------ Bottlerocket

USER_TOML = """
[settings.kubernetes]
cluster-name = "someone-else"
api-server = "https://wrong"
max-pods = 10
cluster-dns-ip = "10.0.0.2"
allowed-unsafe-sysctls = ["net.core.somaxconn"]

[settings.kubernetes.node-labels]
team = "user-team"
user-only = "kept"

[settings.kubernetes.node-taints]
"user/taint" = ["x:NoSchedule"]

[settings.autoscaling]
should-wait = true

[settings.host-containers.admin]
enabled = true

[[settings.network.hosts]]
name = "a"
ips = ["1.2.3.4"]

[settings.bootstrap-commands."10-hello"]
commands = [["echo", "hi \\"there\\""]]
mode = "always"
essential = false
"""


def bottlerocket(**overrides: Any) -> dict[str, Any]:
    return tomllib.loads(render_user_data(boot("Bottlerocket", **overrides)))


def test_bottlerocket_settings_from_nodeflow() -> None:
    k8s = bottlerocket()["settings"]["kubernetes"]
    assert k8s["cluster-name"] == "demo"
    assert k8s["api-server"] == CLUSTER.endpoint
    assert k8s["cluster-certificate"] == CA
    assert k8s["cluster-dns-ip"] == "10.100.0.53"
    assert k8s["max-pods"] == 58
    assert k8s["node-labels"] == LABELS
    assert k8s["node-taints"] == {"dedicated": ["gpu:NoSchedule"], "karpenter.sh/unregistered": [":NoExecute"]}
    assert k8s["system-reserved"] == {"cpu": "100m", "memory": "100Mi"}
    assert k8s["kube-reserved"] == {"cpu": "200m", "memory": "1Gi"}
    assert k8s["eviction-hard"] == {"memory.available": "5%"}
    assert k8s["eviction-soft"] == {"memory.available": "10%"}
    assert k8s["eviction-soft-grace-period"] == {"memory.available": "1m30s"}
    assert k8s["eviction-max-pod-grace-period"] == 60
    assert k8s["image-gc-high-threshold-percent"] == "85"
    assert k8s["image-gc-low-threshold-percent"] == "80"
    assert k8s["cpu-cfs-quota"] is False


def test_bottlerocket_merges_user_toml_with_karpenter_precedence() -> None:
    doc = bottlerocket(user_data=USER_TOML, kubelet=None, max_pods=None)
    settings = doc["settings"]
    k8s = settings["kubernetes"]
    # identity is always nodeflow's
    assert k8s["cluster-name"] == "demo"
    assert k8s["api-server"] == CLUSTER.endpoint
    # labels merge, nodeflow's values win; taints are nodeflow's only
    assert k8s["node-labels"] == {**LABELS, "user-only": "kept"}
    assert k8s["node-labels"]["team"] == "web"
    assert "user/taint" not in k8s["node-taints"]
    # settings the NodeClass doesn't set stay the user's
    assert k8s["max-pods"] == 10
    assert k8s["cluster-dns-ip"] == "10.0.0.2"
    assert k8s["allowed-unsafe-sysctls"] == ["net.core.somaxconn"]
    assert settings["autoscaling"]["should-wait"] is False
    assert settings["host-containers"]["admin"]["enabled"] is True
    assert settings["network"]["hosts"] == [{"name": "a", "ips": ["1.2.3.4"]}]
    assert settings["bootstrap-commands"]["10-hello"]["commands"] == [["echo", 'hi "there"']]


def test_bottlerocket_kubelet_settings_override_user_toml() -> None:
    k8s = bottlerocket(user_data=USER_TOML)["settings"]["kubernetes"]
    assert k8s["max-pods"] == 58
    assert k8s["cluster-dns-ip"] == "10.100.0.53"


def test_bottlerocket_minimal_uses_cluster_dns_ip() -> None:
    k8s = bottlerocket(labels={}, taints=[], kubelet=None)["settings"]["kubernetes"]
    assert k8s == {
        "cluster-name": "demo",
        "api-server": CLUSTER.endpoint,
        "cluster-certificate": CA,
        "cluster-dns-ip": "10.100.0.10",
    }


@pytest.mark.parametrize(
    ("user_data", "message"),
    [
        ("[settings.kubernetes\nfoo = 1", "invalid TOML"),
        ("settings = 3", "settings must be a table"),
        ("[settings]\nkubernetes = 'x'", "settings.kubernetes must be a table"),
        ("[settings.kubernetes]\nnode-labels = 1", "node-labels must be a table"),
    ],
)
def test_bottlerocket_bad_user_data(user_data: str, message: str) -> None:
    with pytest.raises(ValueError, match="Bottlerocket userData") as caught:
        render_user_data(boot("Bottlerocket", user_data=user_data))
    assert message in str(caught.value)


def test_toml_writer_round_trips_awkward_values() -> None:
    document: dict[str, Any] = {
        "top": "level",
        "empty": {},
        "a": {
            "weird key/with.dots": 'tab\tquote"back\\slash\nnew\x01\x7f',
            "unicode": "héllo ✓",
            "num": -3,
            "float": 1.5,
            "flag": True,
            "list": [1, 2, 3],
            "nested_lists": [["a"], ["b", "c"]],
            "inline": [{"x": 1}, 2],
            "b": {"c": {"d": 1}},
        },
        "arr": [{"k": "v", "sub": {"z": 1}}, {"k": "w"}],
    }
    text = toml_dumps(document)
    assert tomllib.loads(text) == document
    assert toml_dumps(tomllib.loads(text)) == text


# ------------------------------------------------------------------------------------------------- AL2


def al2_script(text: str) -> str:
    parts = mime_parts(text)
    assert parts[-1].get_content_type() == "text/x-shellscript"
    return body(parts[-1])


def test_al2_bootstrap_script() -> None:
    script = al2_script(render_user_data(boot("AL2")))
    assert script.startswith("#!/bin/bash -xe\n")
    assert f"/etc/eks/bootstrap.sh 'demo' --apiserver-endpoint '{CLUSTER.endpoint}' --b64-cluster-ca '{CA}'" in script
    assert "--dns-cluster-ip '10.100.0.53'" in script
    assert "--use-max-pods false" in script
    assert "--ip-family" not in script
    extra = script.split("--kubelet-extra-args '", 1)[1].rsplit("'", 1)[0]
    assert extra.split(" ") == [
        '--node-labels="karpenter.sh/capacity-type=spot,karpenter.sh/nodepool=default,team=web"',
        '--register-with-taints="dedicated=gpu:NoSchedule,karpenter.sh/unregistered=:NoExecute"',
        "--max-pods=58",
        "--pods-per-core=4",
        '--system-reserved="cpu=100m,memory=100Mi"',
        '--kube-reserved="cpu=200m,memory=1Gi"',
        '--eviction-hard="memory.available<5%"',
        '--eviction-soft="memory.available<10%"',
        '--eviction-soft-grace-period="memory.available=1m30s"',
        "--eviction-max-pod-grace-period=60",
        "--image-gc-high-threshold=85",
        "--image-gc-low-threshold=80",
        "--cpu-cfs-quota=false",
    ]


def test_al2_minimal_and_ipv6() -> None:
    cluster = ClusterInfo(name="c", endpoint="https://e", ca_bundle=CA, dns_ip="fd00::a", ip_family="ipv6")
    script = al2_script(render_user_data(boot("AL2", cluster=cluster, labels={}, taints=[], kubelet=None)))
    assert "--ip-family ipv6" in script
    assert "--dns-cluster-ip 'fd00::a'" in script
    assert "--use-max-pods" not in script
    assert "--kubelet-extra-args" not in script


def test_al2_user_parts_come_first() -> None:
    parts = mime_parts(render_user_data(boot("AL2", user_data=SHELL)))
    assert len(parts) == 2
    assert "hello from the user" in body(parts[0])
    assert "/etc/eks/bootstrap.sh" in body(parts[1])
    merged = mime_parts(render_user_data(boot("AL2", user_data=USER_MIME)))
    assert len(merged) == 3
    # AL2 never sniffs YAML: a plain non-MIME userData is a shell script
    yaml_as_shell = mime_parts(render_user_data(boot("AL2", user_data=USER_NODECONFIG)))
    assert yaml_as_shell[0].get_content_type() == "text/x-shellscript"


def test_al2_shell_quotes_single_quotes() -> None:
    cluster = ClusterInfo(name="it's", endpoint="https://e", ca_bundle=CA)
    script = al2_script(render_user_data(boot("AL2", cluster=cluster, kubelet=None)))
    assert "/etc/eks/bootstrap.sh 'it'\"'\"'s'" in script


# ---------------------------------------------------------------------------------- Windows and Custom


@pytest.mark.parametrize("family", ["Windows2019", "Windows2022"])
def test_windows_powershell_block(family: str) -> None:
    out = render_user_data(boot(family, user_data="Write-Host 'hi'\r\n"))
    lines = out.split("\n")
    assert lines[0] == "<powershell>"
    assert lines[1] == "Write-Host 'hi'"
    assert lines[2] == '[string]$EKSBootstrapScriptFile = "$env:ProgramFiles\\Amazon\\EKS\\Start-EKSBootstrap.ps1"'
    assert lines[3].startswith(
        f"& $EKSBootstrapScriptFile -EKSClusterName 'demo' -APIServerEndpoint '{CLUSTER.endpoint}'"
    )
    assert f"-Base64ClusterCA '{CA}'" in lines[3]
    assert "-KubeletExtraArgs '--node-labels=" in lines[3]
    assert lines[3].endswith("-DNSClusterIP '10.100.0.53'")
    assert lines[-1] == "</powershell>"


def test_custom_is_user_data_unchanged() -> None:
    raw = "#!/bin/bash\r\necho custom  \n"
    assert render_user_data(boot("Custom", user_data=raw)) == raw
    assert render_user_data(boot("Custom")) == ""


def test_unknown_family_is_rejected() -> None:
    with pytest.raises(ValueError, match="unsupported AMI family 'Ubuntu'"):
        render_user_data(boot("Ubuntu"))


# --------------------------------------------------------------------------------------------- general


@pytest.mark.parametrize(
    ("family", "user_data"),
    [
        ("AL2023", USER_MIME),
        ("AL2023", SHELL),
        ("AL2", USER_MIME),
        ("Bottlerocket", USER_TOML),
        ("Windows2022", "Write-Host 1"),
        ("Custom", SHELL),
    ],
)
def test_deterministic(family: str, user_data: str) -> None:
    first = render_user_data(boot(family, user_data=user_data))
    reordered = boot(
        family,
        user_data=user_data,
        labels=dict(reversed(list(LABELS.items()))),
        kubelet=KubeletConfiguration.model_validate(
            {
                **KUBELET.model_dump(by_alias=True, exclude_none=True),
                "systemReserved": {"memory": "100Mi", "cpu": "100m"},
            }
        ),
    )
    assert render_user_data(reordered) == first
    assert render_user_data(boot(family, user_data=user_data)).encode() == first.encode()


def test_plain_taint_like_objects_are_accepted() -> None:
    class PlainTaint:
        def __init__(self, key: str, value: str | None, effect: str) -> None:
            self.key, self.value, self.effect = key, value, effect

    out = render_user_data(boot("Bottlerocket", taints=[PlainTaint("a", "b", "NoExecute")]))
    assert tomllib.loads(out)["settings"]["kubernetes"]["node-taints"] == {"a": ["b:NoExecute"]}


# ------------------------------------------------------------------------------- instanceStorePolicy RAID0


def test_raid0_instance_store_policy_reaches_every_linux_familys_bootstrap() -> None:
    """instanceStorePolicy RAID0 makes the instance types' ephemeral-storage the instance store total; the node
    must then really stripe its NVMe disks into it, as Karpenter's user data asks each bootstrap to."""
    nodeconfig = generated_nodeconfig(render_user_data(boot("AL2023", instance_store_policy="RAID0")))
    assert nodeconfig["spec"]["instance"] == {"localStorage": {"strategy": "RAID0"}}
    assert "instance" not in generated_nodeconfig(render_user_data(boot("AL2023")))["spec"]

    script = al2_script(render_user_data(boot("AL2", instance_store_policy="RAID0")))
    assert script.endswith(" \\\n--local-disks raid0")
    assert "--local-disks" not in al2_script(render_user_data(boot("AL2")))

    user = '[settings.bootstrap-commands.user-first]\ncommands = [["echo", "hi"]]\nmode = "once"\nessential = false\n'
    dirs = ["--dirs", "/var/lib/containerd", "/var/lib/kubelet", "/var/log/pods"]  # before Bottlerocket 1.46
    for version, extra in [("latest", []), ("v1.46.0", []), ("v1.45.2", dirs), (None, dirs)]:
        doc = bottlerocket(instance_store_policy="RAID0", bottlerocket_version=version, user_data=user)
        commands = doc["settings"]["bootstrap-commands"]
        assert commands["user-first"]["mode"] == "once"  # the user's own commands stay
        assert commands["000-mount-instance-storage"] == {
            "commands": [
                ["apiclient", "ephemeral-storage", "init"],
                ["apiclient", "ephemeral-storage", "bind", *extra],
            ],
            "essential": True,
            "mode": "always",
        }, version
    assert "bootstrap-commands" not in bottlerocket()["settings"]


def test_the_bottlerocket_version_comes_from_the_alias_else_the_ami_name() -> None:
    assert bottlerocket_version("v1.47.0", "bottlerocket-aws-k8s-1.33-x86_64-v1.40.0-431fe75a") == "v1.47.0"
    assert bottlerocket_version(None, "bottlerocket-aws-k8s-1.33-x86_64-v1.46.0-431fe75a") == "v1.46.0"
    assert bottlerocket_version(None, "my-image") is None
    assert bottlerocket_version(None, None) is None
