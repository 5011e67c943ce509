"""`make demo KEEP=1`: after the scenario the demo cluster stays up, announces `KUBECONFIG=<path>`, answers the real
kubectl with Karpenter's columns, refuses an invalid NodePool with its CEL rule's message, and exits 0 on SIGINT."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
KUBECTL = shutil.which("kubectl")


def test_make_demo_keep_passes_the_flag() -> None:
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    out = subprocess.run([make, "-n", "demo", "KEEP=1"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert re.search(r"-m sandbox\.demo --keep$", out.stdout, re.M), out.stdout
    out = subprocess.run([make, "-n", "demo"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert "--keep" not in out.stdout


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
def test_demo_keep_serves_kubectl_until_interrupted() -> None:
    assert KUBECTL is not None
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'functions'}{os.pathsep}{ROOT}"}
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
        deadline = time.monotonic() + 300  # the demo takes ~30 s idle, over 2 min on a loaded CI machine
        kubeconfig = None
        while kubeconfig is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("KUBECONFIG="):
                kubeconfig = line.strip().removeprefix("KUBECONFIG=")
        assert kubeconfig is not None, "".join(lines[-60:])
        assert "demo finished in" in "".join(lines)
        assert Path(kubeconfig).is_file()
        _no_future_times_and_no_stale_nominations(kubeconfig)
        got = subprocess.run(
            [KUBECTL, "--kubeconfig", kubeconfig, "get", "nodeclaims"], capture_output=True, text=True, timeout=60
        )
        assert got.returncode == 0, got.stderr
        table = [re.split(r"\s{2,}", row.strip()) for row in got.stdout.splitlines()]
        assert table[0] == ["NAME", "TYPE", "CAPACITY", "ZONE", "NODE", "READY", "AGE"]
        assert len(table) > 1
        for row in table[1:]:
            assert re.fullmatch(r"default-\w{5}", row[0]), row
            assert row[2] in ("spot", "on-demand")
            assert row[3].startswith("us-east-1")
            assert row[4].startswith("ip-")
            assert row[5] == "True"
        # the CRDs' CEL rules are enforced: an invalid NodePool is refused with the rule's message
        invalid = (
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: bad}\nspec:\n"
            "  disruption: {budgets: [{nodes: '0', schedule: '@daily'}]}\n  template:\n    spec:\n"
            "      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n"
            "      requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [spot]}]\n"
        )
        refused = subprocess.run(
            [KUBECTL, "--kubeconfig", kubeconfig, "create", "-f", "-"], input=invalid, capture_output=True, text=True
        )
        assert refused.returncode != 0
        assert refused.stderr.strip() == (
            'The NodePool "bad" is invalid: spec.disruption.budgets: Invalid value: "array": '
            "'schedule' must be set with 'duration'"
        ), refused.stderr
        listed = subprocess.run(
            [KUBECTL, "--kubeconfig", kubeconfig, "get", "nodepools", "-o", "name"], capture_output=True, text=True
        )
        assert "nodepool.karpenter.sh/bad" not in listed.stdout
        assert "nodepool.karpenter.sh/default" in listed.stdout
        # a pod no node fits, created with kubectl: marked Unschedulable, provisioned, bound to the new node
        before = {row[0] for row in table[1:]}
        pod = (
            "apiVersion: v1\nkind: Pod\nmetadata: {name: big, namespace: default}\nspec:\n  containers:\n"
            "  - {name: c, image: x, resources: {requests: {cpu: '6', memory: 8Gi}}}\n"
        )
        created = subprocess.run(
            [KUBECTL, "--kubeconfig", kubeconfig, "create", "-f", "-"], input=pod, capture_output=True, text=True
        )
        assert created.returncode == 0, created.stderr
        node = ""
        deadline = time.monotonic() + 60
        while not node and time.monotonic() < deadline:
            time.sleep(1)
            node = subprocess.run(
                [KUBECTL, "--kubeconfig", kubeconfig, "get", "pod", "big", "-o", "jsonpath={.spec.nodeName}"],
                capture_output=True,
                text=True,
            ).stdout.strip()
        assert node, "pod big was never bound"
        claims = subprocess.run(
            [KUBECTL, "--kubeconfig", kubeconfig, "get", "nodeclaims", "--no-headers"], capture_output=True, text=True
        ).stdout
        new = [line.split() for line in claims.splitlines() if line.split()[0] not in before]
        assert [row[4] for row in new] == [node], claims
        # the decision log of the kept cluster, with the command the demo printed: the pod's NodeClaim and why
        endpoint = re.search(r"AWS_ENDPOINT_URL=(\S+)", "".join(lines))
        assert endpoint, "".join(lines[-30:])
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

        records = decisions("--pod", "default/big")
        assert any(r["kind"] == "nodeclaim" and r["detail"]["nodeClaim"] == new[0][0] for r in records), records
        assert all("default/big" in r["pods"] for r in records)

        # every decision-log row of the demo was written at a time that has come (no clock ahead of time)
        assert max(r["time"] for r in decisions("--since", "1h")) <= _now()
        # a user's kubectl delete nodeclaim is a deletion, not an interruption
        victim = sorted(before)[0]
        deleted = subprocess.run(
            [KUBECTL, "--kubeconfig", kubeconfig, "delete", "nodeclaim", victim, "--wait=false"],
            capture_output=True,
            text=True,
        )
        assert deleted.returncode == 0, deleted.stderr
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
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, "".join(lines[-30:]) + rest
        assert "interrupted: stopping the cluster" in rest
        assert "pod default/big: Unschedulable" in rest
        assert not Path(kubeconfig).exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _no_future_times_and_no_stale_nominations(kubeconfig: str) -> None:
    """The kept cluster as the demo left it: no condition or Event time later than now (the disruption rounds ran on
    the real clock), and no NodeClaim nominating a pod that is gone or already on its node (garbage collection
    pruned them)."""
    assert KUBECTL is not None

    def items(what: str) -> list[dict[str, Any]]:
        got = subprocess.run(
            [KUBECTL, "--kubeconfig", kubeconfig, "get", what, "-A", "-o", "json"], capture_output=True, text=True
        )
        assert got.returncode == 0, got.stderr
        return list(json.loads(got.stdout)["items"])

    now = _now()
    claims = items("nodeclaims")
    times = [
        c["lastTransitionTime"]
        for obj in [*claims, *items("nodepools"), *items("ec2nodeclasses"), *items("nodes")]
        for c in (obj.get("status") or {}).get("conditions") or []
        if c.get("lastTransitionTime")
    ]
    times += [e[k] for e in items("events") for k in ("firstTimestamp", "lastTimestamp") if e.get(k)]
    assert times
    assert max(times) <= now, sorted(times)[-5:]
    pods = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in items("pods")}
    for claim in claims:
        raw = (claim["metadata"].get("annotations") or {}).get("nodeflow.io/nominated-pods")
        for key in json.loads(raw) if raw else []:
            assert key in pods, (claim["metadata"]["name"], key)
            assert pods[key]["spec"].get("nodeName") != claim["status"].get("nodeName"), (claim["metadata"], key)
