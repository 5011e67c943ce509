"""`make demo KEEP=1` as a user runs it, in a fresh process and once (the control plane costs seconds to start):
the scenario on the real control plane (provisioning, a spot interruption, consolidation) and its output, then the
kept cluster answering the real kubectl as any cluster does (every command the demo suggests, a pod no node fits
provisioned, a CEL rule's refusal, watches, events, describe), the decision log, and a clean exit on SIGINT."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from sandbox.controlplane.binaries import find_binaries

ROOT = Path(__file__).resolve().parents[2]
NODECLAIM_COLUMNS = ["NAME", "TYPE", "CAPACITY", "ZONE", "NODE", "READY", "AGE"]


def test_make_demo_keep_passes_the_flag() -> None:
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    out = subprocess.run([make, "-n", "demo", "KEEP=1"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert re.search(r"-m sandbox\.demo --keep$", out.stdout, re.M), out.stdout
    out = subprocess.run([make, "-n", "demo"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert "--keep" not in out.stdout


def _kubectl_binary() -> str:
    """The kubectl that came with the control plane's binaries (the server's minor version), else the machine's; a
    missing one fails the test (as missing control plane binaries do)."""
    found = find_binaries().kubectl or shutil.which("kubectl")
    assert found, "no kubectl: neither with the control plane's binaries nor on PATH"
    return str(found)


class Kubectl:
    def __init__(self, binary: str, kubeconfig: str) -> None:
        self.binary = binary
        self.env = {**os.environ, "KUBECONFIG": kubeconfig}

    def __call__(self, *args: str, stdin: str | None = None, ok: bool = True) -> subprocess.CompletedProcess[str]:
        got = subprocess.run(
            [self.binary, *args], input=stdin, capture_output=True, text=True, env=self.env, timeout=180
        )
        if ok:
            assert got.returncode == 0, f"kubectl {' '.join(args)}: {got.stderr}"
        return got

    def items(self, what: str) -> list[dict[str, Any]]:
        return list(json.loads(self("get", what, "-A", "-o", "json").stdout)["items"])

    def table(self, *args: str) -> list[list[str]]:
        return [re.split(r"\s{2,}", row.strip()) for row in self("get", *args).stdout.splitlines()]


def test_demo_runs_the_scenario_then_serves_kubectl() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(ROOT / d) for d in ("functions", ".", "agent"))}
    for key in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "KUBECONFIG"):
        env.pop(key, None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "sandbox.demo", "--keep"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 300  # about a minute idle, a few on a loaded 2-core machine
        kubeconfig = None
        while kubeconfig is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("KUBECONFIG="):
                kubeconfig = line.strip().removeprefix("KUBECONFIG=")
        out = "".join(lines)
        assert kubeconfig is not None, out[-6000:]
        _the_scenario(out)
        assert Path(kubeconfig).is_file()
        kubectl = Kubectl(_kubectl_binary(), kubeconfig)
        _no_future_times_and_no_stale_nominations(kubectl)
        _what_the_demo_suggests_works(kubectl, out)
        _kubectl_as_on_a_real_cluster(kubectl)
        _a_pod_no_node_fits_is_provisioned_and_logged(kubectl, out, env)
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, out[-3000:] + rest
        assert "interrupted: stopping the cluster" in rest
        assert not Path(kubeconfig).exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _the_scenario(out: str) -> None:
    """What the demo printed before it kept the cluster up."""
    assert "a real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler" in out
    assert re.search(r"their ReplicaSets made 16 pods, kube-scheduler found no node for them", out), out
    launched = re.findall(
        r"^  default-\w{5} +ip-\S+ +(\S+) +(us-east-1\w) +(spot|on-demand) +(\d+) +([\d.]+)$", out, re.M
    )
    assert launched, out
    assert sum(int(row[3]) for row in launched) == 16  # every pending pod was nominated to a node
    launch_traces = re.findall(r"^execution nodeflow-demo-launch:\S+: SUCCEEDED in ", out, re.M)
    assert len(launch_traces) == len(launched)
    assert "kube-scheduler bound all 16 pods" in out, out[out.find("kube-scheduler") :][:4000]
    # the spot interruption, end to end
    assert re.search(r"^execution nodeflow-demo-terminate:default-\w{5}: SUCCEEDED in ", out, re.M), out
    for state in ("Taint", "Drain", "Terminate", "RemoveFinalizer"):
        assert re.search(rf"^ *\d+ +{state} +Task ", out, re.M), state
    assert re.search(r"terminate SUCCEEDED: node drained, instance i-\w+ (terminated|shutting-down)", out)
    assert "offering marked unavailable: yes" in out
    back = re.search(
        r"(\d+) evicted pods came back Pending through their ReplicaSets: kube-scheduler bound (\d+) to nodes with "
        r"room, (\d+) went agent -> provisioner -> (.*); all Running again",
        out,
    )
    assert back, out
    assert int(back.group(1)) == int(back.group(2)) + int(back.group(3)) > 0
    assert int(back.group(3)) == 0 or re.match(r"default-\w{5} ", back.group(4)), back.group(0)
    # consolidation after scaling shop/web to zero: one node per round (10% budget)
    assert "Deployment shop/web scaled to 0 (12 pods deleted by its ReplicaSet)" in out
    assert re.search(r"round 1: [\w -]+ \((Empty|Underutilized)\): ip-\S+ -> delete, saves \$[\d.]+/hour", out), out
    saved = re.search(r"(\d+) nodes removed \(.*\): \d+ nodes, \$[\d.]+/hour \(saved \$([\d.]+)/hour\)", out)
    assert saved, out
    assert int(saved.group(1)) >= 1
    assert float(saved.group(2)) > 0
    assert "every shop pod Running: yes" in out
    # consolidation that moves pods: an underused on-demand node replaced, its pod moved by kube-scheduler
    assert re.search(r"single-node consolidation \(Underutilized\): ip-\S+ -> replace, saves \$[\d.]+/hour", out), out
    assert re.search(r"^execution nodeflow-demo-replace:\S+: SUCCEEDED in ", out, re.M), out
    assert re.search(r"^ *\d+ +TerminateCandidates +Task ", out, re.M), out
    moved = re.search(
        r"replace SUCCEEDED: (ip-\S+) tainted karpenter.sh/disrupted, replacement default-\w{5} -> (ip-\S+) "
        r"\(\S+, on-demand\) initialized, (ip-\S+) drained and terminated\n"
        r"  1 evicted pod recreated by its ReplicaSet, bound by kube-scheduler to (ip-\S+), Running [\d.]+ s after the "
        r"round; \$[\d.]+/hour \(saved \$([\d.]+)/hour\)",
        out,
    )
    assert moved, out
    assert moved.group(1) == moved.group(3) != moved.group(2) == moved.group(4)
    assert float(moved.group(5)) > 0
    assert "FAILED" not in out
    # the decision log: written by the provisioner and the disruption Lambda, where to read it is printed
    logged = re.search(r"^decision log: (\d+) records in table nodeflow-demo-decisions \((.*)\)", out, re.M)
    assert logged, out
    for kind in ("provisioning", "nodeclaim", "disruption"):
        assert re.search(rf"\b\d+ {kind}\b", logged.group(2)), logged.group(0)
    assert "read them with: python -m nodeflow decisions --stack Nodeflow-demo --since 1h" in out
    assert re.search(r"demo finished in [\d.]+ s: OK", out)


def _what_the_demo_suggests_works(kubectl: Kubectl, out: str) -> None:
    """Every kubectl line the demo printed under KEEP=1 succeeds (``auth can-i`` answers as its comment says)."""
    block = out[out.index("KEEP=1: the cluster stays up") : out.index("Ctrl-C (SIGINT)")]
    commands = [line.strip() for line in block.splitlines() if line.strip().startswith("kubectl ")]
    assert len(commands) >= 5, block
    assert re.search(r"^  export KUBECONFIG=\S+$", block, re.M), block
    for command in commands:
        words, _, comment = command.partition("#")
        args = shlex.split(words)[1:]
        if args[:2] == ["auth", "can-i"]:
            got = kubectl(*args, ok=False)
            assert got.stdout.strip() == comment.strip(), (command, got.stdout, got.stderr)
        else:
            kubectl(*args)


def _kubectl_as_on_a_real_cluster(kubectl: Kubectl) -> None:
    table = kubectl.table("nodeclaims")
    assert table[0] == NODECLAIM_COLUMNS
    for row in table[1:]:
        assert re.fullmatch(r"default-\w{5}", row[0]), row
        assert row[2] in ("spot", "on-demand")
        assert row[3].startswith("us-east-1")
    # protobuf: kubectl's create shortcuts
    kubectl("create", "configmap", "demo-e2e", "--from-literal=a=b")
    assert kubectl("get", "configmap", "demo-e2e", "-o", "jsonpath={.data.a}").stdout == "b"
    # Events have their columns and times, nodeflow's among them
    events = kubectl.table("events", "-A")
    assert events[0] == ["NAMESPACE", "LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    ours = [row for row in events[1:] if row[3] in ("DisruptionTerminating", "SpotInterrupted", "Nominated")]
    assert ours, events
    assert all(row[1] != "<unknown>" for row in ours), ours
    # describe: a Node, a NodeClaim, a NodePool
    node = kubectl("get", "nodes", "-o", "jsonpath={.items[0].metadata.name}").stdout
    assert re.search(r"^ProviderID:\s+aws:///us-east-1\w/i-\w+$", kubectl("describe", "node", node).stdout, re.M)
    claim = kubectl.table("nodeclaims", "--no-headers")[0][0]
    assert re.search(rf"^Name:\s+{claim}$", kubectl("describe", "nodeclaim", claim).stdout, re.M)
    assert re.search(r"^Kind:\s+NodePool$", kubectl("describe", "nodepool", "default").stdout, re.M)
    # a watch prints the table's rows as they change
    watch = subprocess.Popen(
        [kubectl.binary, "get", "nodeclaims", "-w"], env=kubectl.env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert watch.stdout is not None
        assert re.split(r"\s{2,}", watch.stdout.readline().strip()) == NODECLAIM_COLUMNS
        assert re.match(r"default-\w{5} ", watch.stdout.readline())
    finally:
        watch.kill()
        watch.wait()
    # the CRDs' CEL rules are the API server's: an invalid NodePool is refused with the rule's message
    invalid = (
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: bad}\nspec:\n"
        "  disruption: {budgets: [{nodes: '0', schedule: '@daily'}]}\n  template:\n    spec:\n"
        "      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n"
        "      requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [spot]}]\n"
    )
    refused = kubectl("create", "-f", "-", stdin=invalid, ok=False)
    assert refused.returncode != 0
    assert 'The NodePool "bad" is invalid' in refused.stderr, refused.stderr
    assert "'schedule' must be set with 'duration'" in refused.stderr, refused.stderr
    assert "nodepool.karpenter.sh/bad" not in kubectl("get", "nodepools", "-o", "name").stdout


def _a_pod_no_node_fits_is_provisioned_and_logged(kubectl: Kubectl, out: str, env: dict[str, str]) -> None:
    """A pod created with kubectl that no node fits: kube-scheduler marks it Unschedulable, nodeflow provisions a
    node, kube-scheduler binds it there; the decision log has it; a NodeClaim deleted with kubectl is a deletion."""
    before = {row[0] for row in kubectl.table("nodeclaims", "--no-headers")}
    pod = (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: big, namespace: default}\nspec:\n  containers:\n"
        "  - {name: c, image: x, resources: {requests: {cpu: '6', memory: 8Gi}}}\n"
    )
    kubectl("create", "-f", "-", stdin=pod)
    kubectl("wait", "pod/big", "--for=condition=Ready", "--timeout=120s")
    node = kubectl("get", "pod", "big", "-o", "jsonpath={.spec.nodeName}").stdout
    # the NodeClaim's NODE column is filled by its status write, which may trail the pod's Ready condition
    deadline = time.monotonic() + 30
    while True:
        new = [row for row in kubectl.table("nodeclaims", "--no-headers") if row[0] not in before]
        if node in [row[4] for row in new] or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert node in [row[4] for row in new], (node, new)
    # the decision log of the kept cluster, with the command the demo printed: the pod's NodeClaim and why
    endpoint = re.search(r"AWS_ENDPOINT_URL=(\S+)", out)
    assert endpoint, out[-3000:]
    aws = {"AWS_ENDPOINT_URL": endpoint.group(1), "AWS_ACCESS_KEY_ID": "demo", "AWS_SECRET_ACCESS_KEY": "demo"}

    def decisions(*args: str) -> list[dict[str, Any]]:
        run = subprocess.run(
            [sys.executable, "-m", "nodeflow", "decisions", "--stack", "Nodeflow-demo", "-o", "json", *args],
            cwd=ROOT,
            env={**env, **aws, "AWS_REGION": "us-east-1"},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode == 0, run.stderr
        return list(json.loads(run.stdout))

    claim = next(row[0] for row in new if row[4] == node)
    records = decisions("--pod", "default/big")
    assert any(r["kind"] == "nodeclaim" and r["detail"]["nodeClaim"] == claim for r in records), records
    assert all("default/big" in r["pods"] for r in records)
    # every decision-log row of the demo was written at a time that has come (no clock ahead of time)
    assert max(r["time"] for r in decisions("--since", "1h")) <= _now()
    # a user's kubectl delete nodeclaim is a deletion, not an interruption (big's: its pod arrived under a minute
    # ago, so no scheduled disruption round takes it first: consolidateAfter is 1m)
    victim = claim
    kubectl("delete", "nodeclaim", victim, "--wait=false")
    mine: list[dict[str, Any]] = []
    deadline = time.monotonic() + 60
    while not mine and time.monotonic() < deadline:
        time.sleep(2)
        mine = [
            r
            for r in decisions("--since", "10m")
            if r["detail"].get("nodeClaim") == victim and r["kind"] in ("deletion", "interruption")
        ]
    assert [(r["kind"], r["detail"]["reason"]) for r in mine] == [("deletion", "Deleted")], mine


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _no_future_times_and_no_stale_nominations(kubectl: Kubectl) -> None:
    """The kept cluster as the demo left it: no condition or Event time later than now (the disruption rounds ran on
    the real clock), and no NodeClaim nominating a pod that is gone or already on its node (garbage collection
    pruned them)."""
    now = _now()
    claims = kubectl.items("nodeclaims")
    times = [
        c["lastTransitionTime"]
        for obj in [*claims, *kubectl.items("nodepools"), *kubectl.items("ec2nodeclasses"), *kubectl.items("nodes")]
        for c in (obj.get("status") or {}).get("conditions") or []
        if c.get("lastTransitionTime")
    ]
    times += [e[k] for e in kubectl.items("events") for k in ("firstTimestamp", "lastTimestamp") if e.get(k)]
    assert times
    assert max(times) <= now, sorted(times)[-5:]
    pods = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in kubectl.items("pods")}
    for claim in claims:
        raw = (claim["metadata"].get("annotations") or {}).get("nodeflow.io/nominated-pods")
        for key in json.loads(raw) if raw else []:
            assert key in pods, (claim["metadata"]["name"], key)
            assert pods[key]["spec"].get("nodeName") != claim["status"].get("nodeName"), (claim["metadata"], key)
